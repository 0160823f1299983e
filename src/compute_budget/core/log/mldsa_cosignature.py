"""C2SP tlog-cosignature's ML-DSA-44 cosignatures (signature type 0x06, ``subtree/v1``): the message, the key
fields, signing and verifying. Pure: `cosignature` builds witness keys of either type on these pieces.

* Key ID = SHA-256(name || 0x0A || 0x06 || 1312-byte ML-DSA-44 public key)[:4]; verifier key
  ``<name>+<8 hex key ID>+<base64(0x06 || public key)>`` (a signed-note vkey); signer key (this project's format)
  ``PRIVATE+KEY+<name>+<8 hex key ID>+<base64(0x06 || 32-byte FIPS 204 seed)>``.
* The signed message is C2SP's ``cosigned_message``: ``subtree/v1\\n\\0``, the cosigner name (u8 length), the u64
  timestamp, the log origin (u8 length), u64 start, u64 end, the 32-byte hash. A checkpoint is the subtree
  [0, size): its extension lines are not signed, so the cosignature says nothing of them.
* A timestamp of 0 makes no claim that the tree is the largest the cosigner saw (C2SP); verifiers treat it as
  infinitely old (`cosignature.is_fresh`).

ML-DSA is `cryptography`'s (FIPS 204, pure ML-DSA, empty context). Its signing is hedged (randomized): two
signatures of one message differ, and both verify.
"""

from __future__ import annotations

import functools

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.mldsa import MLDSA44PrivateKey, MLDSA44PublicKey

from compute_budget.core.log.encoding import strict_b64decode
from compute_budget.core.log.note import KEY_NAME_RULE, parse_tlog_checkpoint, valid_key_name
from compute_budget.errors import NoteError

ALGORITHM_MLDSA44_COSIGNATURE = 0x06  # C2SP tlog-cosignature, ML-DSA-44 (subtree/v1)
MLDSA44_PUBLIC_KEY_SIZE = 1312
MLDSA44_SIGNATURE_SIZE = 2420
MLDSA44_SEED_SIZE = 32
SUBTREE_LABEL = b"subtree/v1\n\x00"
MAX_FIELD_BYTES = 255  # cosigner_name and log_origin are opaque<1..2^8-1>
_U64 = 2**64
_UNSUPPORTED = (
    "ML-DSA-44 is not available in this build of the cryptography package: it needs cryptography 48 or later "
    "built with OpenSSL 3.5 or later (PyPI's wheels are)"
)


def _opaque8(what: str, value: str) -> bytes:
    """`value` as a TLS ``opaque<1..2^8-1>``: one length byte, then its UTF-8 bytes; `NoteError` if it cannot be."""
    raw = value.encode("utf-8")
    if not 1 <= len(raw) <= MAX_FIELD_BYTES:
        raise NoteError(f"cannot make a subtree/v1 message: the {what} must be 1 to 255 bytes, not {len(raw)}")
    return bytes([len(raw)]) + raw


def subtree_message(cosigner: str, timestamp: int, origin: str, start: int, end: int, root: bytes) -> bytes:
    """C2SP's ``cosigned_message`` for the subtree [start, end) of log `origin` with hash `root`, by `cosigner` at
    `timestamp` (0: no claim of being the largest tree seen; C2SP requires 0 whenever `start` is not 0)."""
    for what, number in (("timestamp", timestamp), ("start", start), ("end", end)):
        if not 0 <= number < _U64:
            raise NoteError(f"cannot make a subtree/v1 message: the {what} {number} is not a u64")
    if start != 0 and timestamp != 0:
        raise NoteError("cannot make a subtree/v1 message: a subtree that does not start at 0 has timestamp 0")
    if len(root) != 32:
        raise NoteError("cannot make a subtree/v1 message: the hash is 32 bytes")
    return b"".join((
        SUBTREE_LABEL, _opaque8("cosigner name", cosigner), timestamp.to_bytes(8, "big"),
        _opaque8("log origin", origin), start.to_bytes(8, "big"), end.to_bytes(8, "big"), root,
    ))


def checkpoint_message(cosigner: str, checkpoint_text: str, timestamp: int) -> bytes:
    """The ``subtree/v1`` message of a checkpoint: start 0, end its size, its root; extension lines not covered.
    `NoteError` when the text is not a C2SP checkpoint or a field does not fit the message."""
    checkpoint = parse_tlog_checkpoint(checkpoint_text)
    return subtree_message(cosigner, timestamp, checkpoint.origin, 0, checkpoint.size, checkpoint.root)


def check_mldsa_fields(kind: str, name: object, key_id: object, key: object, size: int) -> None:
    """Raise `NoteError` unless `name` is a key name of 1-255 bytes, `key_id` a uint32 and `key` `size` bytes."""
    if not valid_key_name(name) or not isinstance(name, str):
        shown = repr(name[:60]) if isinstance(name, str) else type(name).__name__
        raise NoteError(f"not a {kind}: invalid key name {shown} ({KEY_NAME_RULE})")
    if len(name.encode("utf-8")) > MAX_FIELD_BYTES:
        raise NoteError(f"not a {kind}: an ML-DSA-44 cosigner name is at most 255 bytes (subtree/v1)")
    if not (type(key_id) is int and 0 <= key_id < 2**32):
        raise NoteError(f"not a {kind}: the key ID must be a 32-bit unsigned integer")
    if not (isinstance(key, bytes) and len(key) == size):
        raise NoteError(f"not a {kind}: this ML-DSA-44 key part must be {size} bytes")


def key_type_of(text: str) -> int | None:
    """The signature type byte of key text ``<name>+<hex>+<base64(type || key)>`` (a signer key without its
    ``PRIVATE+KEY+``), or None when the text is not of that shape (the parsers then say what is wrong)."""
    parts = text.split("+", 2)  # the name and the ID hold no '+'; base64 may
    raw = strict_b64decode(parts[2]) if len(parts) == 3 else None
    return raw[0] if raw else None


def parse_mldsa_fields(kind: str, text: str, size: int) -> tuple[str, int, bytes]:
    """Split ``<name>+<8 hex>+<base64(0x06 || size bytes)>`` into name, key ID and key bytes, or `NoteError`."""
    parts = text.split("+", 2)
    if len(parts) != 3:
        raise NoteError(f"not a {kind}: expected <name>+<8 hex digits>+<base64 key>")
    name, id_text, key_text = parts
    if len(id_text) != 8 or any(char not in "0123456789abcdef" for char in id_text):
        raise NoteError(f"not a {kind}: key ID {id_text[:20]!r} is not 8 lowercase hex digits")
    raw = strict_b64decode(key_text)
    if raw is None:
        raise NoteError(f"not a {kind}: the key part is not canonical standard base64")
    if len(raw) != 1 + size or raw[0] != ALGORITHM_MLDSA44_COSIGNATURE:
        raise NoteError(f"not a {kind}: an ML-DSA-44 key part is 0x06 and {size} bytes, got {len(raw)} bytes")
    check_mldsa_fields(kind, name, int(id_text, 16), raw[1:], size)
    return name, int(id_text, 16), raw[1:]


@functools.lru_cache(maxsize=8)
def _private_key(seed: bytes) -> MLDSA44PrivateKey:
    """The ML-DSA-44 key of a 32-byte seed (FIPS 204 ML-DSA.KeyGen_internal), expanded once per process."""
    try:
        return MLDSA44PrivateKey.from_seed_bytes(seed)
    except UnsupportedAlgorithm:
        raise NoteError(_UNSUPPORTED) from None


@functools.lru_cache(maxsize=8)
def mldsa_public_key(seed: bytes) -> bytes:
    """The 1312-byte ML-DSA-44 public key of a 32-byte seed."""
    return _private_key(seed).public_key().public_bytes_raw()


def mldsa_sign(seed: bytes, message: bytes) -> bytes:
    """The 2420-byte ML-DSA-44 signature of `message` (hedged: not the same bytes twice)."""
    return _private_key(seed).sign(message)


def mldsa_verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """True iff `signature` is a valid ML-DSA-44 signature of `message` under `public_key` (empty context)."""
    if len(signature) != MLDSA44_SIGNATURE_SIZE or len(public_key) != MLDSA44_PUBLIC_KEY_SIZE:
        return False
    try:
        MLDSA44PublicKey.from_public_bytes(public_key).verify(signature, message)
    except UnsupportedAlgorithm:
        raise NoteError(_UNSUPPORTED) from None  # never "not valid": the key may be fine, this build cannot tell
    except (InvalidSignature, ValueError):
        return False
    return True


def generate_mldsa_seed() -> bytes:
    """A new 32-byte ML-DSA-44 seed. RANDOMNESS: from the OS via `cryptography`."""
    try:
        return MLDSA44PrivateKey.generate().private_bytes_raw()
    except UnsupportedAlgorithm:
        raise NoteError(_UNSUPPORTED) from None
