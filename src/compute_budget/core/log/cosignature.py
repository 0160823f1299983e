"""C2SP tlog-cosignature: witness keys and the cosignature lines a witness adds to a checkpoint (spec 9.2), of
either type C2SP specifies: Ed25519 (type 0x04, ``cosignature/v1``) and ML-DSA-44 (type 0x06, ``subtree/v1``, in
`mldsa_cosignature`). Pure: the time is always given, never read.

* Witness keys: verifier ``<name>+<8 hex key ID>+<base64(type || public key)>``, signer (this project's format)
  ``PRIVATE+KEY+<name>+<8 hex key ID>+<base64(type || 32-byte seed)>``; key ID = SHA-256(name || 0x0A || type ||
  public key)[:4]. `WitnessKey` and `WitnessSigner` hold either type (`algorithm`); their `parse` is the one parser.
* A cosignature line is a signed-note signature line whose bytes are key ID || u64 big-endian timestamp ||
  signature. Ed25519 signs ``cosignature/v1\\ntime <timestamp>\\n`` followed by the whole checkpoint text; ML-DSA-44
  signs the ``subtree/v1`` message of the checkpoint's origin, size and root (no extension line).
* A timestamp above 2^63-1, or more than `MAX_FUTURE_SECONDS` ahead of the verifier's clock, is invalid. A
  timestamp of 0 makes no freshness claim (C2SP subtree/v1): it counts as infinitely old (`is_fresh`).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from compute_budget.core.log.mldsa_cosignature import (
    ALGORITHM_MLDSA44_COSIGNATURE,
    MLDSA44_PUBLIC_KEY_SIZE,
    MLDSA44_SEED_SIZE,
    MLDSA44_SIGNATURE_SIZE,
    check_mldsa_fields,
    checkpoint_message,
    generate_mldsa_seed,
    key_type_of,
    mldsa_public_key,
    mldsa_sign,
    mldsa_verify,
    parse_mldsa_fields,
)
from compute_budget.core.log.note import (
    ALGORITHM_COSIGNATURE_V1,
    ED25519_SIGNATURE_SIZE,
    SIGNER_KEY_PREFIX,
    Signature,
    check_key_fields,
    check_key_text,
    key_hash,
    key_mismatch,
    parse_key_fields,
    parse_note,
    private_key,
    public_key_of,
)
from compute_budget.errors import NoteError

MAX_TIMESTAMP = 2**63 - 1
MAX_FUTURE_SECONDS = 600
_SIGNATURE_SIZES = {
    ALGORITHM_COSIGNATURE_V1: ED25519_SIGNATURE_SIZE, ALGORITHM_MLDSA44_COSIGNATURE: MLDSA44_SIGNATURE_SIZE,
}
WITNESS_KEY_TYPES = {ALGORITHM_COSIGNATURE_V1: "Ed25519", ALGORITHM_MLDSA44_COSIGNATURE: "ML-DSA-44"}


def is_fresh(timestamp: int, *, now: int, max_age: int) -> bool:
    """True iff a cosignature `timestamp` is at most `max_age` seconds before `now`. A timestamp of 0 makes no
    freshness claim (C2SP subtree/v1: the cosigner does not say the tree was the largest it saw): never fresh."""
    return timestamp != 0 and timestamp >= now - max_age


def _check_type(kind: str, algorithm: object) -> int:
    """`algorithm` when it is a witness key type (0x04 or 0x06), else `NoteError`."""
    if type(algorithm) is not int or algorithm not in WITNESS_KEY_TYPES:
        raise NoteError(f"not a {kind}: a witness key has type 0x04 (Ed25519) or 0x06 (ML-DSA-44), not {algorithm!r}")
    return algorithm


def cosigned_message(checkpoint_text: str, timestamp: int) -> bytes:
    """The bytes a cosignature signs: ``cosignature/v1``, ``time <timestamp>``, then the checkpoint text."""
    return f"cosignature/v1\ntime {timestamp}\n{checkpoint_text}".encode()


@dataclass(frozen=True, slots=True)
class WitnessKey:
    """A witness's verifier key: its `name`, `key_id` (uint32), `public_key` (32 bytes for Ed25519, 1312 for
    ML-DSA-44) and `algorithm`, its C2SP signature type (0x04 Ed25519, 0x06 ML-DSA-44)."""

    name: str
    key_id: int
    public_key: bytes = field(repr=False)
    algorithm: int = ALGORITHM_COSIGNATURE_V1

    def __post_init__(self) -> None:
        """Check the type, the name, the sizes and that `key_id` belongs to this name, type and key."""
        if _check_type("witness key", self.algorithm) == ALGORITHM_MLDSA44_COSIGNATURE:
            check_mldsa_fields("witness key", self.name, self.key_id, self.public_key, MLDSA44_PUBLIC_KEY_SIZE)
        else:
            check_key_fields("witness key", self.name, self.key_id, self.public_key)
        expected = key_hash(self.name, self.public_key, self.algorithm)
        if self.key_id != expected:
            raise key_mismatch("witness key", self.key_id, expected)

    @classmethod
    def parse(cls, text: str) -> WitnessKey:
        """Read ``<name>+<8 hex key ID>+<base64(type || public key)>``, type 0x04 or 0x06; `NoteError` says what is
        wrong."""
        text = check_key_text("witness key", text)
        if text.startswith(SIGNER_KEY_PREFIX):
            raise NoteError("not a witness key: this is a private signer key; give its verifier key instead")
        if key_type_of(text) == ALGORITHM_MLDSA44_COSIGNATURE:
            name, key_id, public_key = parse_mldsa_fields("witness key", text, MLDSA44_PUBLIC_KEY_SIZE)
            return cls(name, key_id, public_key, ALGORITHM_MLDSA44_COSIGNATURE)
        name, key_id, public_key = parse_key_fields("witness key", text, repr(text[:60]), ALGORITHM_COSIGNATURE_V1)
        return cls(name, key_id, public_key)

    @property
    def type_name(self) -> str:
        """``Ed25519`` or ``ML-DSA-44``."""
        return WITNESS_KEY_TYPES[self.algorithm]

    def format(self) -> str:
        """The key as text, ``<name>+<8 hex key ID>+<base64(type || public key)>``."""
        encoded = base64.b64encode(bytes([self.algorithm]) + self.public_key).decode("ascii")
        return f"{self.name}+{self.key_id:08x}+{encoded}"

    def timestamp_of(self, checkpoint_text: str, signature: Signature, *, now: int) -> int | None:
        """The timestamp of `signature` when it is this key's valid cosignature of `checkpoint_text` at time
        `now`, else None (another key or type, a bad signature, a timestamp above 2^63-1 or over 600 s ahead)."""
        if (signature.name, signature.key_hash) != (self.name, self.key_id):
            return None
        if len(signature.signature) != 8 + _SIGNATURE_SIZES[self.algorithm]:
            return None  # another type's line under a colliding name and key ID is no cosignature of this key
        timestamp = int.from_bytes(signature.signature[:8], "big")
        if timestamp > MAX_TIMESTAMP or timestamp > now + MAX_FUTURE_SECONDS:
            return None
        return timestamp if self._verifies(checkpoint_text, timestamp, signature.signature[8:]) else None

    def _verifies(self, checkpoint_text: str, timestamp: int, raw: bytes) -> bool:
        if self.algorithm == ALGORITHM_MLDSA44_COSIGNATURE:
            try:
                message = checkpoint_message(self.name, checkpoint_text, timestamp)
            except NoteError:
                return False  # no C2SP checkpoint, or an origin over 255 bytes: nothing this key could have signed
            return mldsa_verify(self.public_key, message, raw)
        try:
            message = cosigned_message(checkpoint_text, timestamp)
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(raw, message)
        except (InvalidSignature, ValueError):
            return False
        return True


@dataclass(frozen=True, slots=True)
class WitnessSigner:
    """A witness's signer key: `name`, `key_id`, the 32-byte private `seed` (kept out of repr) and `algorithm`,
    its C2SP signature type (0x04 Ed25519, 0x06 ML-DSA-44; an ML-DSA-44 seed is FIPS 204's 32-byte seed)."""

    name: str
    key_id: int
    seed: bytes = field(repr=False)
    algorithm: int = ALGORITHM_COSIGNATURE_V1

    @classmethod
    def from_seed(cls, name: str, seed: bytes, algorithm: int = ALGORITHM_COSIGNATURE_V1) -> WitnessSigner:
        """The witness signer of `name`, a 32-byte seed and a type (Ed25519 by default), its key ID computed."""
        if _check_type("witness signer key", algorithm) == ALGORITHM_MLDSA44_COSIGNATURE:
            check_mldsa_fields("witness signer key", name, 0, seed, MLDSA44_SEED_SIZE)
        else:
            check_key_fields("witness signer key", name, 0, seed)
        return cls(name, key_hash(name, _public_key(seed, algorithm), algorithm), seed, algorithm)

    @classmethod
    def parse(cls, text: str) -> WitnessSigner:
        """Read ``PRIVATE+KEY+<name>+<8 hex key ID>+<base64(type || seed)>``; errors never echo the secret."""
        text = check_key_text("witness signer key", text)
        if not text.startswith(SIGNER_KEY_PREFIX):
            raise NoteError("not a witness signer key: it must start with PRIVATE+KEY+")
        rest = text[len(SIGNER_KEY_PREFIX) :]
        if key_type_of(rest) == ALGORITHM_MLDSA44_COSIGNATURE:
            name, key_id, seed = parse_mldsa_fields("witness signer key", rest, MLDSA44_SEED_SIZE)
            signer = cls.from_seed(name, seed, ALGORITHM_MLDSA44_COSIGNATURE)
        else:
            name, key_id, seed = parse_key_fields(
                "witness signer key", rest, "a key without its three fields", ALGORITHM_COSIGNATURE_V1
            )
            signer = cls.from_seed(name, seed)
        if signer.key_id != key_id:
            raise NoteError(f"not a witness signer key: key ID {key_id:08x} does not match the name and key")
        return signer

    @property
    def type_name(self) -> str:
        """``Ed25519`` or ``ML-DSA-44``."""
        return WITNESS_KEY_TYPES[self.algorithm]

    def origin_problem(self, origin: str) -> str | None:
        """Why this key cannot cosign checkpoints of `origin` (an ML-DSA-44 message holds at most 255 bytes of
        it), or None when it can."""
        if self.algorithm == ALGORITHM_MLDSA44_COSIGNATURE and not 1 <= len(origin.encode("utf-8")) <= 255:
            return f"an ML-DSA-44 cosignature (subtree/v1) names a log origin of 1 to 255 bytes, not {origin[:80]!r}"
        return None

    def format(self) -> str:
        """The key as text (a secret)."""
        encoded = base64.b64encode(bytes([self.algorithm]) + self.seed).decode("ascii")
        return f"{SIGNER_KEY_PREFIX}{self.name}+{self.key_id:08x}+{encoded}"

    def verifier(self) -> WitnessKey:
        """The matching witness verifier key."""
        return WitnessKey(self.name, self.key_id, _public_key(self.seed, self.algorithm), self.algorithm)

    def cosign(self, checkpoint_text: str, timestamp: int) -> Signature:
        """The cosignature of `checkpoint_text` at `timestamp` (seconds since the epoch; 0 for ML-DSA-44 makes no
        freshness claim), as a note signature. `NoteError` when an ML-DSA-44 key is given no C2SP checkpoint."""
        if not 0 <= timestamp <= MAX_TIMESTAMP:
            raise NoteError(f"cannot cosign: timestamp {timestamp} is outside 0..2^63-1")
        if self.algorithm == ALGORITHM_MLDSA44_COSIGNATURE:
            raw = mldsa_sign(self.seed, checkpoint_message(self.name, checkpoint_text, timestamp))
        else:
            raw = private_key(self.seed).sign(cosigned_message(checkpoint_text, timestamp))
        return Signature(self.name, self.key_id, timestamp.to_bytes(8, "big") + raw)


def _public_key(seed: bytes, algorithm: int) -> bytes:
    """The public key of a witness seed: 32-byte Ed25519 or 1312-byte ML-DSA-44."""
    return mldsa_public_key(seed) if algorithm == ALGORITHM_MLDSA44_COSIGNATURE else public_key_of(seed)


def is_witness_key_text(text: str) -> bool:
    """True when key text (signer or verifier) names a witness type (0x04 or 0x06) in its key part."""
    rest = text[len(SIGNER_KEY_PREFIX) :] if text.startswith(SIGNER_KEY_PREFIX) else text
    return key_type_of(rest) in WITNESS_KEY_TYPES


def generate_witness(name: str, *, ml_dsa: bool = False) -> WitnessSigner:
    """A new witness signer key named `name`, Ed25519 or (`ml_dsa`) ML-DSA-44. RANDOMNESS: the seed comes from the
    OS via `cryptography`."""
    if ml_dsa:
        return WitnessSigner.from_seed(name, generate_mldsa_seed(), ALGORITHM_MLDSA44_COSIGNATURE)
    seed = Ed25519PrivateKey.generate().private_bytes_raw()
    return WitnessSigner.from_seed(name, seed)


@dataclass(frozen=True, slots=True)
class Cosigned:
    """A valid cosignature found on a note: the witness key and its timestamp."""

    key: WitnessKey
    timestamp: int


def valid_cosignatures(signed_note: str, witnesses: Iterable[WitnessKey], *, now: int) -> list[Cosigned]:
    """The valid cosignatures of `signed_note` by `witnesses`, one per witness key (its newest), in key order.

    A writer's note signature never counts: it has another key ID (type 0x01) and another message. `NoteError`
    if the note is malformed.
    """
    text, signatures = parse_note(signed_note)
    found: dict[WitnessKey, int] = {}
    for witness in dict.fromkeys(witnesses):
        for signature in signatures:
            timestamp = witness.timestamp_of(text, signature, now=now)
            if timestamp is not None and timestamp > found.get(witness, -1):
                found[witness] = timestamp
    return [Cosigned(key, timestamp) for key, timestamp in found.items()]


def with_cosignatures(signed_note: str, lines: Iterable[Signature]) -> str:
    """`signed_note` with each signature line of `lines` appended unless the note already carries it."""
    _, present = parse_note(signed_note)
    added = [line for line in dict.fromkeys(lines) if line not in present]
    return signed_note + "".join(line.line() for line in added)
