"""C2SP signed notes, Ed25519 note keys and tlog checkpoints (spec section 8). Pure: text and bytes in and out.

* Signed note (c2sp.org/signed-note): a text ending in a newline, one empty line, then one or more signature lines
  ``— <key name> <base64(4-byte key hash || signature)>`` (U+2014 EM DASH, space, name, space, base64, newline).
  The signature covers the text, final newline included.
* Keys (as golang.org/x/mod/sumdb/note): signer ``PRIVATE+KEY+<name>+<8 hex key hash>+<base64(0x01 || seed)>``,
  verifier ``<name>+<8 hex key hash>+<base64(0x01 || public key)>``; key hash = the first 4 bytes, big-endian, of
  SHA-256(name || 0x0A || 0x01 || 32-byte public key).
* Checkpoint body (c2sp.org/tlog-checkpoint with the one extension line of spec section 8): origin, tree size in
  decimal, base64 root hash, ``chain <64 hex>``, each line ending in a newline.

Ed25519 is the `cryptography` package's; signing is deterministic. The one source of randomness is
`generate_signer`.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from compute_budget.errors import NoteError

ALGORITHM_ED25519 = 0x01
ALGORITHM_COSIGNATURE_V1 = 0x04  # C2SP tlog-cosignature, Ed25519 (spec 9.2)
ED25519_KEY_SIZE = 32
ED25519_SIGNATURE_SIZE = 64
MAX_SIGNATURES = 100
MAX_ORIGIN_LENGTH = 128
MAX_TREE_SIZE = 2**64 - 1
SIGNATURE_PREFIX = "\u2014 "
SIGNER_KEY_PREFIX = "PRIVATE+KEY+"

_KEY_HASH = re.compile(r"[0-9a-f]{8}")
_TREE_SIZE = re.compile(r"0|[1-9][0-9]{0,19}")
_CHAIN_LINE = re.compile(r"chain ([0-9a-f]{64})")
_CHAIN_HASH = re.compile(r"[0-9a-f]{64}")


def _shown(value: str, limit: int = 60) -> str:
    """`value` quoted for a one-line message, cut to `limit` characters."""
    return repr(value if len(value) <= limit else value[:limit] + "…")


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


def valid_origin(name: object) -> bool:
    """A log origin (spec section 8): 1 to 128 printable ASCII characters (0x21-0x7E), none of them ``+``."""
    return (
        isinstance(name, str)
        and 1 <= len(name) <= MAX_ORIGIN_LENGTH
        and all("\x21" <= char <= "\x7e" for char in name)
        and "+" not in name
    )


def key_hash(name: str, public_key: bytes, algorithm: int = ALGORITHM_ED25519) -> int:
    """The key hash (key ID) of an Ed25519 key: SHA-256(name || 0x0A || algorithm || public key)[:4], big-endian;
    the algorithm byte is 0x01 for a note key, 0x04 for a witness key (spec 9.2)."""
    digest = hashlib.sha256(name.encode() + b"\n" + bytes([algorithm]) + public_key).digest()
    return int.from_bytes(digest[:4], "big")


def _strict_b64decode(text: str) -> bytes | None:
    """The bytes of canonical standard base64 (padded, no stray bits or characters), else None."""
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        return None
    return raw if base64.b64encode(raw).decode("ascii") == text else None


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


@dataclass(frozen=True, slots=True)
class Signature:
    """One signature line of a note: key `name`, `key_hash` (uint32) and the raw `signature` bytes."""

    name: str
    key_hash: int
    signature: bytes

    def line(self) -> str:
        """The signature line, ``— <name> <base64(key hash || signature)>`` and a newline."""
        encoded = base64.b64encode(self.key_hash.to_bytes(4, "big") + self.signature).decode("ascii")
        return f"{SIGNATURE_PREFIX}{self.name} {encoded}\n"


@dataclass(frozen=True, slots=True)
class NoteVerification:
    """What `verify_note` found in a note: which known keys verified, which failed, which signatures were unknown.

    `text` is the signed text; `verified` and `failed` hold each known key once (a key signing twice, once well and
    once badly, is in both); `unknown` holds the signatures by other keys, which C2SP says to ignore.
    """

    text: str
    verified: tuple[VerifierKey, ...]
    failed: tuple[VerifierKey, ...]
    unknown: tuple[Signature, ...]

    @property
    def ok(self) -> bool:
        """True iff at least one known key verified and no known key's signature failed."""
        return bool(self.verified) and not self.failed


def _text_problem(text: str, what: str) -> str | None:
    """Why `text` cannot be a note (text), or None: it must end in a newline, be UTF-8, have no control characters."""
    if not text.endswith("\n"):
        return f"{what} must end with a newline"
    for char in text:
        if char < " " and char != "\n":
            return f"{what} contains the control character U+{ord(char):04X}"
        if "\ud800" <= char <= "\udfff":
            return f"{what} is not valid UTF-8 (it holds a lone surrogate)"
    return None


def _parse_signature_line(line: str, number: int) -> Signature:
    """One signature line (without its newline), or `NoteError` naming its position."""
    where = f"malformed signed note: signature line {number}"
    if not line.startswith(SIGNATURE_PREFIX):
        raise NoteError(f"{where} does not start with an em dash and a space")
    name, space, encoded = line[len(SIGNATURE_PREFIX) :].partition(" ")
    if not space or not valid_key_name(name):
        raise NoteError(f"{where} has no valid key name")
    raw = _strict_b64decode(encoded)
    if raw is None or len(raw) < 5:
        raise NoteError(f"{where} ({name}) is not canonical base64 of a key hash and a signature")
    return Signature(name, int.from_bytes(raw[:4], "big"), raw[4:])


class ParsedNote(NamedTuple):
    """A signed note parsed once (`parse_note`): its text and its signature lines, a value to pass on (still the
    (text, signatures) pair) so the rooms it travels through do not parse the note again."""

    text: str
    signatures: list[Signature]


def parse_note(signed: str | bytes) -> ParsedNote:
    """Split a signed note into its text and signatures, strictly (C2SP signed-note); `NoteError` if malformed.

    The text ends at the last empty line, keeps its final newline, and may itself contain empty lines. At most
    `MAX_SIGNATURES` signature lines are read.
    """
    if isinstance(signed, bytes):
        try:
            signed = signed.decode("utf-8")
        except UnicodeDecodeError:
            raise NoteError("malformed signed note: not valid UTF-8") from None
    if not isinstance(signed, str):
        raise NoteError(f"malformed signed note: expected text, got {type(signed).__name__}")
    problem = _text_problem(signed, "the note")
    if problem is not None:
        raise NoteError(f"malformed signed note: {problem}")
    split = signed.rfind("\n\n")
    if split < 0:
        raise NoteError("malformed signed note: no empty line before the signatures")
    text, block = signed[: split + 1], signed[split + 2 :]
    if not block:
        raise NoteError("malformed signed note: no signature lines after the empty line")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise NoteError(f"malformed signed note: {len(lines)} signature lines, more than {MAX_SIGNATURES}")
    return ParsedNote(text, [_parse_signature_line(line, number) for number, line in enumerate(lines, 1)])


def _checked_text(text: object) -> str:
    """`text` if it can be signed as a note text, else `NoteError`."""
    if not isinstance(text, str):
        raise NoteError(f"cannot sign: expected text, got {type(text).__name__}")
    problem = _text_problem(text, "the text")
    if problem is not None:
        raise NoteError(f"cannot sign: {problem}")
    return text


def _signature_of(text: str, signer: SignerKey) -> Signature:
    """`signer`'s signature of the note text."""
    return Signature(signer.name, signer.key_hash, signer.sign(text.encode("utf-8")))


def sign_note(text: str, signer: SignerKey) -> str:
    """The signed note: `text` (ending in a newline), an empty line, and `signer`'s signature line."""
    text = _checked_text(text)
    return text + "\n" + _signature_of(text, signer).line()


def add_signature(signed_note: str, signer: SignerKey) -> str:
    """`signed_note` with `signer`'s signature line appended (as a witness cosigns); unchanged if already there.

    `NoteError` if the note is malformed, already holds `MAX_SIGNATURES` lines, or carries a different signature
    under the same key name and hash.
    """
    if not isinstance(signed_note, str):
        raise NoteError(f"malformed signed note: expected text, got {type(signed_note).__name__}")
    text, signatures = parse_note(signed_note)
    mine = _signature_of(text, signer)
    same_key = [sig for sig in signatures if (sig.name, sig.key_hash) == (mine.name, mine.key_hash)]
    if mine in same_key:
        return signed_note
    if same_key:
        raise NoteError(f"cannot add a signature: the note already has a different one by key {signer.name}")
    if len(signatures) >= MAX_SIGNATURES:
        raise NoteError(f"cannot add a signature: the note already has {MAX_SIGNATURES} signatures")
    return signed_note + mine.line()


def verify_note(signed: str | bytes | ParsedNote, verifiers: Iterable[VerifierKey]) -> NoteVerification:
    """Check every signature of `signed` (a note, or one already parsed) made by one of `verifiers` (matched on
    name and key hash).

    Signatures by other keys are listed as unknown and otherwise ignored. `NoteError` if the note is malformed or
    two different verifier keys share a name and key hash.
    """
    known: dict[tuple[str, int], VerifierKey] = {}
    for verifier in verifiers:
        if not isinstance(verifier, VerifierKey):
            raise NoteError(f"not a verifier key: expected VerifierKey, got {type(verifier).__name__}")
        slot = (verifier.name, verifier.key_hash)
        if known.setdefault(slot, verifier) != verifier:
            raise NoteError(f"two different verifier keys are named {verifier.name} with hash {verifier.key_hash:08x}")
    text, signatures = signed if isinstance(signed, ParsedNote) else parse_note(signed)
    message = text.encode("utf-8")
    verified: list[VerifierKey] = []
    failed: list[VerifierKey] = []
    unknown: list[Signature] = []
    for sig in signatures:
        signer = known.get((sig.name, sig.key_hash))
        if signer is None:
            if sig not in unknown:
                unknown.append(sig)
            continue
        outcome = verified if signer.verify(message, sig.signature) else failed
        if signer not in outcome:
            outcome.append(signer)
    return NoteVerification(text, tuple(verified), tuple(failed), tuple(unknown))


@dataclass(frozen=True, slots=True)
class CheckpointBody:
    """The text of a checkpoint note (spec section 8): `origin`, tree `size`, 32-byte `root`, 64-hex `chain_hash`."""

    origin: str
    size: int
    root: bytes
    chain_hash: str

    def __post_init__(self) -> None:
        """Check every field against spec section 8."""
        if not valid_origin(self.origin):
            shown = _shown(self.origin) if isinstance(self.origin, str) else type(self.origin).__name__
            raise NoteError(f"invalid checkpoint origin {shown}: 1-128 printable ASCII characters, no spaces, no '+'")
        if not (type(self.size) is int and 0 <= self.size <= MAX_TREE_SIZE):
            raise NoteError(f"invalid checkpoint tree size {self.size!r}: a non-negative 64-bit integer")
        if not (isinstance(self.root, bytes) and len(self.root) == 32):
            raise NoteError("invalid checkpoint root: a root hash is 32 bytes")
        if not (isinstance(self.chain_hash, str) and _CHAIN_HASH.fullmatch(self.chain_hash)):
            raise NoteError(f"invalid checkpoint chain hash {self.chain_hash!r}: 64 lowercase hex digits")

    def format(self) -> str:
        """The note text: origin, size, base64 root, ``chain <hex>``, each line ending in a newline."""
        root = base64.b64encode(self.root).decode("ascii")
        return f"{self.origin}\n{self.size}\n{root}\nchain {self.chain_hash}\n"


def format_checkpoint(origin: str, size: int, root: bytes, chain_hash: str) -> str:
    """The checkpoint note text of spec section 8; `NoteError` if a field is invalid."""
    return CheckpointBody(origin, size, root, chain_hash).format()


def parse_checkpoint(text: str) -> CheckpointBody:
    """Read a checkpoint note text (the note's text, not its signatures) strictly; `NoteError` says what is wrong."""
    if not isinstance(text, str):
        raise NoteError(f"not a checkpoint: expected text, got {type(text).__name__}")
    if not text.endswith("\n"):
        raise NoteError("not a checkpoint: the text must end with a newline")
    lines = text[:-1].split("\n")
    if len(lines) != 4:
        raise NoteError(f"not a checkpoint: expected 4 lines (origin, tree size, root, chain), got {len(lines)}")
    origin, size_text, root_text, chain_line = lines
    if not valid_origin(origin):
        raise NoteError(f"not a checkpoint: invalid origin {_shown(origin)} (printable ASCII, no '+', 1-128 chars)")
    if not _TREE_SIZE.fullmatch(size_text) or int(size_text) > MAX_TREE_SIZE:
        raise NoteError(f"not a checkpoint: tree size {_shown(size_text)} is not a decimal 64-bit count")
    root = _strict_b64decode(root_text)
    if root is None or len(root) != 32:
        raise NoteError(f"not a checkpoint: root {_shown(root_text)} is not the base64 of a 32-byte hash")
    chain = _CHAIN_LINE.fullmatch(chain_line)
    if chain is None:
        raise NoteError(f"not a checkpoint: line 4 {_shown(chain_line)} is not 'chain ' and 64 lowercase hex digits")
    return CheckpointBody(origin, int(size_text), root, chain.group(1))


@dataclass(frozen=True, slots=True)
class TlogCheckpoint:
    """Any C2SP tlog-checkpoint text: `origin`, tree `size`, 32-byte `root` and its extension lines (a witness
    cosigns other logs' checkpoints too, so the `chain` line of spec section 8 is not required here)."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...]


def parse_tlog_checkpoint(text: str) -> TlogCheckpoint:
    """Read a C2SP checkpoint text (at least 3 lines; any non-empty extension lines); `NoteError` if it is not."""
    if not isinstance(text, str) or not text.endswith("\n"):
        raise NoteError("not a checkpoint: the text must end with a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise NoteError(f"not a checkpoint: expected at least 3 lines (origin, tree size, root), got {len(lines)}")
    origin, size_text, root_text, *extensions = lines
    if not origin or origin != origin.strip() or any(char < " " for char in origin):
        raise NoteError(f"not a checkpoint: invalid origin {_shown(origin)}")
    if not _TREE_SIZE.fullmatch(size_text) or int(size_text) > MAX_TREE_SIZE:
        raise NoteError(f"not a checkpoint: tree size {_shown(size_text)} is not a decimal 64-bit count")
    root = _strict_b64decode(root_text)
    if root is None or len(root) != 32:
        raise NoteError(f"not a checkpoint: root {_shown(root_text)} is not the base64 of a 32-byte hash")
    if any(not line for line in extensions):
        raise NoteError("not a checkpoint: an extension line is empty")
    return TlogCheckpoint(origin, int(size_text), root, tuple(extensions))
