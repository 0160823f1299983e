"""C2SP tlog-cosignature (cosignature/v1, Ed25519): witness keys and the cosignature lines a witness adds to a
checkpoint (spec 9.2). Pure: the time is always given, never read.

* Witness keys: verifier ``<name>+<8 hex key ID>+<base64(0x04 || public key)>``, signer (this project's format)
  ``PRIVATE+KEY+<name>+<8 hex key ID>+<base64(0x04 || seed)>``; key ID = SHA-256(name || 0x0A || 0x04 || public
  key)[:4].
* A cosignature line is a signed-note signature line whose bytes are key ID || u64 big-endian timestamp ||
  Ed25519 signature of ``cosignature/v1\\ntime <timestamp>\\n`` followed by the whole checkpoint text.
* A timestamp above 2^63-1, or more than `MAX_FUTURE_SECONDS` ahead of the verifier's clock, is invalid.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

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
_COSIGNATURE_SIZE = 8 + ED25519_SIGNATURE_SIZE


def cosigned_message(checkpoint_text: str, timestamp: int) -> bytes:
    """The bytes a cosignature signs: ``cosignature/v1``, ``time <timestamp>``, then the checkpoint text."""
    return f"cosignature/v1\ntime {timestamp}\n{checkpoint_text}".encode()


@dataclass(frozen=True, slots=True)
class WitnessKey:
    """A witness's verifier key (type 0x04): its `name`, `key_id` (uint32) and 32-byte `public_key`."""

    name: str
    key_id: int
    public_key: bytes

    def __post_init__(self) -> None:
        """Check the name, the sizes and that `key_id` belongs to this name and key (as a note key is checked)."""
        check_key_fields("witness key", self.name, self.key_id, self.public_key)
        expected = key_hash(self.name, self.public_key, ALGORITHM_COSIGNATURE_V1)
        if self.key_id != expected:
            raise key_mismatch("witness key", self.key_id, expected)

    @classmethod
    def parse(cls, text: str) -> WitnessKey:
        """Read ``<name>+<8 hex key ID>+<base64(0x04 || public key)>``; `NoteError` says what is wrong."""
        text = check_key_text("witness key", text)
        if text.startswith(SIGNER_KEY_PREFIX):
            raise NoteError("not a witness key: this is a private signer key; give its verifier key instead")
        name, key_id, public_key = parse_key_fields("witness key", text, repr(text[:60]), ALGORITHM_COSIGNATURE_V1)
        return cls(name, key_id, public_key)

    def format(self) -> str:
        """The key as text, ``<name>+<8 hex key ID>+<base64(0x04 || public key)>``."""
        encoded = base64.b64encode(bytes([ALGORITHM_COSIGNATURE_V1]) + self.public_key).decode("ascii")
        return f"{self.name}+{self.key_id:08x}+{encoded}"

    def timestamp_of(self, checkpoint_text: str, signature: Signature, *, now: int) -> int | None:
        """The timestamp of `signature` when it is this key's valid cosignature of `checkpoint_text` at time
        `now`, else None (another key, a bad signature, a timestamp above 2^63-1 or over 600 s ahead)."""
        if (signature.name, signature.key_hash) != (self.name, self.key_id):
            return None
        if len(signature.signature) != _COSIGNATURE_SIZE:
            return None
        timestamp = int.from_bytes(signature.signature[:8], "big")
        if timestamp > MAX_TIMESTAMP or timestamp > now + MAX_FUTURE_SECONDS:
            return None
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(
                signature.signature[8:], cosigned_message(checkpoint_text, timestamp)
            )
        except (InvalidSignature, ValueError):
            return None
        return timestamp


@dataclass(frozen=True, slots=True)
class WitnessSigner:
    """A witness's signer key (type 0x04): `name`, `key_id` and the 32-byte private `seed` (kept out of repr)."""

    name: str
    key_id: int
    seed: bytes = field(repr=False)

    @classmethod
    def from_seed(cls, name: str, seed: bytes) -> WitnessSigner:
        """The witness signer of `name` and a 32-byte Ed25519 seed, its key ID computed."""
        check_key_fields("witness signer key", name, 0, seed)
        public_key = public_key_of(seed)
        return cls(name, key_hash(name, public_key, ALGORITHM_COSIGNATURE_V1), seed)

    @classmethod
    def parse(cls, text: str) -> WitnessSigner:
        """Read ``PRIVATE+KEY+<name>+<8 hex key ID>+<base64(0x04 || seed)>``; errors never echo the secret."""
        text = check_key_text("witness signer key", text)
        if not text.startswith(SIGNER_KEY_PREFIX):
            raise NoteError("not a witness signer key: it must start with PRIVATE+KEY+")
        name, key_id, seed = parse_key_fields(
            "witness signer key", text[len(SIGNER_KEY_PREFIX) :], "a key without its three fields",
            ALGORITHM_COSIGNATURE_V1,
        )
        signer = cls.from_seed(name, seed)
        if signer.key_id != key_id:
            raise NoteError(f"not a witness signer key: key ID {key_id:08x} does not match the name and key")
        return signer

    def format(self) -> str:
        """The key as text (a secret)."""
        encoded = base64.b64encode(bytes([ALGORITHM_COSIGNATURE_V1]) + self.seed).decode("ascii")
        return f"{SIGNER_KEY_PREFIX}{self.name}+{self.key_id:08x}+{encoded}"

    def verifier(self) -> WitnessKey:
        """The matching witness verifier key."""
        return WitnessKey(self.name, self.key_id, public_key_of(self.seed))

    def cosign(self, checkpoint_text: str, timestamp: int) -> Signature:
        """The cosignature of `checkpoint_text` at `timestamp` (seconds since the epoch), as a note signature."""
        if not 0 <= timestamp <= MAX_TIMESTAMP:
            raise NoteError(f"cannot cosign: timestamp {timestamp} is outside 0..2^63-1")
        raw = private_key(self.seed).sign(cosigned_message(checkpoint_text, timestamp))
        return Signature(self.name, self.key_id, timestamp.to_bytes(8, "big") + raw)


def generate_witness(name: str) -> WitnessSigner:
    """A new witness signer key named `name`. RANDOMNESS: the seed comes from the OS via `cryptography`."""
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
