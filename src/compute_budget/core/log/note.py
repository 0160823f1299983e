"""C2SP signed notes (spec section 8, c2sp.org/signed-note): signing, parsing and verifying them. Pure.

A signed note is a text ending in a newline, one empty line, then one or more signature lines ``— <key name>
<base64(4-byte key hash || signature)>`` (U+2014 EM DASH, space, name, space, base64, newline). The signature
covers the text, final newline included.

The keys are `note_keys`'s and the checkpoint texts `checkpoint_body`'s; their public names are importable from
here too, where the rest of the project has always imported them.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from compute_budget.core.log.checkpoint_body import (
    MAX_ORIGIN_LENGTH,
    MAX_TREE_SIZE,
    CheckpointBody,
    TlogCheckpoint,
    format_checkpoint,
    parse_checkpoint,
    parse_tlog_checkpoint,
    valid_origin,
)
from compute_budget.core.log.encoding import strict_b64decode as _strict_b64decode
from compute_budget.core.log.note_keys import (
    ALGORITHM_COSIGNATURE_V1,
    ALGORITHM_ED25519,
    ED25519_KEY_SIZE,
    ED25519_SIGNATURE_SIZE,
    KEY_NAME_RULE,
    SIGNER_KEY_PREFIX,
    UNICODE_WHITE_SPACE,
    SignerKey,
    VerifierKey,
    check_key_fields,
    check_key_text,
    generate_signer,
    key_hash,
    key_mismatch,
    key_name_problem,
    parse_key_fields,
    private_key,
    public_key_of,
    valid_key_name,
)
from compute_budget.errors import NoteError

__all__ = [
    "ALGORITHM_COSIGNATURE_V1", "ALGORITHM_ED25519", "ED25519_KEY_SIZE", "ED25519_SIGNATURE_SIZE", "KEY_NAME_RULE",
    "MAX_ORIGIN_LENGTH", "MAX_SIGNATURES", "MAX_TREE_SIZE", "SIGNATURE_PREFIX", "SIGNER_KEY_PREFIX",
    "UNICODE_WHITE_SPACE", "CheckpointBody", "NoteVerification", "ParsedNote", "Signature", "SignerKey",
    "TlogCheckpoint", "VerifierKey", "add_signature", "check_key_fields", "check_key_text", "format_checkpoint",
    "generate_signer", "key_hash", "key_mismatch", "key_name_problem", "parse_checkpoint", "parse_key_fields",
    "parse_note", "parse_tlog_checkpoint", "private_key", "public_key_of", "sign_note", "valid_key_name",
    "valid_origin", "verified_signatures", "verify_note",
]

MAX_SIGNATURES = 100
SIGNATURE_PREFIX = "\u2014 "


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


def verified_signatures(
    text: str, notes: Iterable[str | ParsedNote], keys: Iterable[VerifierKey]
) -> list[Signature]:
    """The signatures of `text` among `notes` that verify under one of `keys` (matched on name and key hash), each
    once, in the order found. A note that does not parse, or signs another text, is passed over."""
    known = {(key.name, key.key_hash): key for key in keys}
    message = text.encode("utf-8")
    kept: list[Signature] = []
    for note in notes:
        try:
            note_text, signatures = note if isinstance(note, ParsedNote) else parse_note(note)
        except NoteError:
            continue
        if note_text != text:
            continue
        for signature in signatures:
            key = known.get((signature.name, signature.key_hash))
            if key is not None and signature not in kept and key.verify(message, signature.signature):
                kept.append(signature)
    return kept
