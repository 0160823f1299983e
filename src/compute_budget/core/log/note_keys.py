"""Ed25519 note keys and key names (spec 9.2, as golang.org/x/mod/sumdb/note). Pure: text and bytes in and out.

* Signer ``PRIVATE+KEY+<name>+<8 hex key hash>+<base64(0x01 || seed)>``, verifier ``<name>+<8 hex key
  hash>+<base64(0x01 || public key)>``; key hash = the first 4 bytes, big-endian, of SHA-256(name || 0x0A || 0x01
  || 32-byte public key). A witness key (`cosignature`) has the same shape with the algorithm byte 0x04.
* A key name: non-empty UTF-8, no ``+``, nothing below U+0020, no Unicode White_Space.

Ed25519 is the `cryptography` package's; signing is deterministic. The one source of randomness is
`generate_signer`.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from compute_budget.core.log.encoding import shown as _shown
from compute_budget.core.log.encoding import strict_b64decode as _strict_b64decode
from compute_budget.errors import NoteError

ALGORITHM_ED25519 = 0x01
ALGORITHM_COSIGNATURE_V1 = 0x04  # C2SP tlog-cosignature, Ed25519 (spec 9.2)
ED25519_KEY_SIZE = 32
ED25519_SIGNATURE_SIZE = 64
SIGNER_KEY_PREFIX = "PRIVATE+KEY+"

_KEY_HASH = re.compile(r"[0-9a-f]{8}")

# Unicode's White_Space property (PropList.txt), spelled out: str.isspace() is a different set (it also takes
# U+001C..U+001F), and a key name's rule is the property's.
UNICODE_WHITE_SPACE = frozenset(
    "\u0009\u000a\u000b\u000c\u000d\u0020\u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
KEY_NAME_RULE = "non-empty UTF-8, no '+', no control character below U+0020, no white space"


def valid_key_name(name: object) -> bool:
    """A key name of spec 9.2: non-empty UTF-8, no ``+``, nothing below U+0020, no Unicode White_Space."""
    return isinstance(name, str) and key_name_problem(name) is None


def key_name_problem(name: str) -> str | None:
    """Why `name` is not a valid key name (one phrase), or None when it is."""
    if name == "":
        return "it is empty"
    for char in name:
        if char == "+":
            return "it contains '+'"
        if char < " ":
            return f"it contains the control character U+{ord(char):04X}"
        if char in UNICODE_WHITE_SPACE:
            return f"it contains the white space character U+{ord(char):04X}"
        if "\ud800" <= char <= "\udfff":
            return "it is not valid UTF-8 (a lone surrogate)"
    return None


def key_hash(name: str, public_key: bytes, algorithm: int = ALGORITHM_ED25519) -> int:
    """The key hash (key ID) of an Ed25519 key: SHA-256(name || 0x0A || algorithm || public key)[:4], big-endian;
    the algorithm byte is 0x01 for a note key, 0x04 for a witness key (spec 9.2)."""
    digest = hashlib.sha256(name.encode() + b"\n" + bytes([algorithm]) + public_key).digest()
    return int.from_bytes(digest[:4], "big")


def check_key_fields(kind: str, name: object, hash_value: object, key: object) -> None:
    """Raise `NoteError` unless `name` is a valid key name and `hash_value`/`key` an int and 32 bytes."""
    if not valid_key_name(name):
        shown = _shown(name) if isinstance(name, str) else type(name).__name__
        raise NoteError(f"not a {kind}: invalid key name {shown} ({KEY_NAME_RULE})")
    if not (type(hash_value) is int and 0 <= hash_value < 2**32):
        raise NoteError(f"not a {kind}: the key hash must be a 32-bit unsigned integer")
    if not (isinstance(key, bytes) and len(key) == ED25519_KEY_SIZE):
        raise NoteError(f"not a {kind}: an Ed25519 key must be {ED25519_KEY_SIZE} bytes")


def parse_key_fields(
    kind: str, text: str, shown: str, algorithm: int = ALGORITHM_ED25519
) -> tuple[str, int, bytes]:
    """Split ``<name>+<8 hex>+<base64(algorithm || 32 bytes)>`` into name, key hash and key bytes, or `NoteError`."""
    parts = text.split("+", 2)
    if len(parts) != 3:
        raise NoteError(f"not a {kind}: expected <name>+<8 hex digits>+<base64 key>, got {shown}")
    name, hash_text, key_text = parts
    if not valid_key_name(name):
        raise NoteError(f"not a {kind}: invalid key name {_shown(name)} ({KEY_NAME_RULE})")
    if not _KEY_HASH.fullmatch(hash_text):
        raise NoteError(f"not a {kind}: key hash {_shown(hash_text)} is not 8 lowercase hex digits")
    raw = _strict_b64decode(key_text)
    if raw is None:
        raise NoteError(f"not a {kind}: the key part is not canonical standard base64")
    if len(raw) != 1 + ED25519_KEY_SIZE:
        raise NoteError(f"not a {kind}: the key must be 33 bytes (algorithm byte, 32-byte Ed25519 key), got {len(raw)}")
    if raw[0] != algorithm:
        if raw[0] == ALGORITHM_COSIGNATURE_V1 and algorithm == ALGORITHM_ED25519:
            raise NoteError(f"not a {kind}: this is a witness key (type 0x04); a note key has type 0x01")
        if raw[0] == ALGORITHM_ED25519 and algorithm == ALGORITHM_COSIGNATURE_V1:
            raise NoteError(f"not a {kind}: this is a note key (type 0x01); a witness key has type 0x04")
        raise NoteError(f"not a {kind}: unsupported algorithm byte 0x{raw[0]:02x} (only 0x{algorithm:02x}, Ed25519)")
    return name, int(hash_text, 16), raw[1:]


def key_mismatch(kind: str, found: int, expected: int) -> NoteError:
    """The error for a key hash that does not match the name and key."""
    return NoteError(f"not a {kind}: key hash {found:08x} does not match the name and key (expected {expected:08x})")


def check_key_text(kind: str, text: object) -> str:
    """`text` if it is a string without surrounding white space, else raise `NoteError`."""
    if not isinstance(text, str):
        raise NoteError(f"not a {kind}: expected text, got {type(text).__name__}")
    if text != text.strip():
        raise NoteError(f"not a {kind}: it has leading or trailing white space")
    return text


@dataclass(frozen=True, slots=True)
class VerifierKey:
    """An Ed25519 note verifier key: its `name`, `key_hash` (uint32) and 32-byte `public_key`."""

    name: str
    key_hash: int
    public_key: bytes

    def __post_init__(self) -> None:
        """Check the name, the sizes and that `key_hash` belongs to this name and key."""
        check_key_fields("verifier key", self.name, self.key_hash, self.public_key)
        expected = key_hash(self.name, self.public_key)
        if self.key_hash != expected:
            raise key_mismatch("verifier key", self.key_hash, expected)

    @classmethod
    def parse(cls, text: str) -> VerifierKey:
        """Read ``<name>+<8 hex key hash>+<base64(0x01 || public key)>``; `NoteError` says what is wrong."""
        text = check_key_text("verifier key", text)
        if text.startswith(SIGNER_KEY_PREFIX):
            raise NoteError("not a verifier key: this is a private signer key; give its verifier key instead")
        name, hash_value, public_key = parse_key_fields("verifier key", text, _shown(text))
        return cls(name, hash_value, public_key)

    def format(self) -> str:
        """The key as text, ``<name>+<8 hex key hash>+<base64(0x01 || public key)>``."""
        encoded = base64.b64encode(bytes([ALGORITHM_ED25519]) + self.public_key).decode("ascii")
        return f"{self.name}+{self.key_hash:08x}+{encoded}"

    def verify(self, message: bytes, signature: bytes) -> bool:
        """True iff `signature` is this key's Ed25519 signature of `message`."""
        if len(signature) != ED25519_SIGNATURE_SIZE:
            return False
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True


@dataclass(frozen=True, slots=True)
class SignerKey:
    """An Ed25519 note signer key: its `name`, `key_hash` (uint32) and 32-byte private `seed` (kept out of repr)."""

    name: str
    key_hash: int
    seed: bytes = field(repr=False)

    def __post_init__(self) -> None:
        """Check the name, the sizes and that `key_hash` belongs to this name and the seed's public key."""
        check_key_fields("signer key", self.name, self.key_hash, self.seed)
        expected = key_hash(self.name, self.public_key)
        if self.key_hash != expected:
            raise key_mismatch("signer key", self.key_hash, expected)

    @classmethod
    def from_seed(cls, name: str, seed: bytes) -> SignerKey:
        """The signer key of `name` and a 32-byte Ed25519 seed, its key hash computed."""
        check_key_fields("signer key", name, 0, seed)
        public_key = Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()
        return cls(name, key_hash(name, public_key), seed)

    @classmethod
    def parse(cls, text: str) -> SignerKey:
        """Read ``PRIVATE+KEY+<name>+<8 hex key hash>+<base64(0x01 || seed)>``; errors never echo the secret."""
        text = check_key_text("signer key", text)
        if not text.startswith(SIGNER_KEY_PREFIX):
            raise NoteError("not a signer key: it must start with PRIVATE+KEY+ (is this a verifier key?)")
        rest = text[len(SIGNER_KEY_PREFIX) :]
        name, hash_value, seed = parse_key_fields("signer key", rest, "a key without its three fields")
        return cls(name, hash_value, seed)

    @property
    def public_key(self) -> bytes:
        """The 32-byte Ed25519 public key of the seed."""
        return public_key_of(self.seed)

    def format(self) -> str:
        """The key as text, ``PRIVATE+KEY+<name>+<8 hex key hash>+<base64(0x01 || seed)>`` (a secret)."""
        encoded = base64.b64encode(bytes([ALGORITHM_ED25519]) + self.seed).decode("ascii")
        return f"{SIGNER_KEY_PREFIX}{self.name}+{self.key_hash:08x}+{encoded}"

    def verifier(self) -> VerifierKey:
        """The matching verifier key."""
        return VerifierKey(self.name, self.key_hash, self.public_key)

    def sign(self, message: bytes) -> bytes:
        """The 64-byte Ed25519 signature of `message` (deterministic)."""
        return private_key(self.seed).sign(message)


@functools.lru_cache(maxsize=8)
def private_key(seed: bytes) -> Ed25519PrivateKey:
    """The Ed25519 key of a seed, loaded once per process (a writer signs every append transaction)."""
    return Ed25519PrivateKey.from_private_bytes(seed)


@functools.lru_cache(maxsize=8)
def public_key_of(seed: bytes) -> bytes:
    """The 32-byte public key of a seed, derived once per process."""
    return private_key(seed).public_key().public_bytes_raw()


def generate_signer(name: str) -> SignerKey:
    """A new signer key named `name`. RANDOMNESS: the only function here that is not deterministic."""
    problem = key_name_problem(name) if isinstance(name, str) else f"it is {type(name).__name__}, not text"
    if problem is not None:
        shown = _shown(name) if isinstance(name, str) else type(name).__name__
        raise NoteError(
            f"cannot make a signer key: invalid key name {shown}: {problem} (a key name is {KEY_NAME_RULE})"
        )
    seed = Ed25519PrivateKey.generate().private_bytes_raw()  # randomness, from the OS via `cryptography`
    return SignerKey.from_seed(name, seed)
