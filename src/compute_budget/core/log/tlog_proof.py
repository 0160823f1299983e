"""The C2SP ``tlog-proof`` format (c2sp.org/tlog-proof@v1): encode and parse, strictly. Pure.

A proof is lines separated by newlines (U+000A), in this order:

    c2sp.org/tlog-proof@v1
    extra <standard base64 of opaque data>        (optional: the line is left out when there is none)
    index <zero-based decimal, no leading zeroes>
    <standard base64 of one SHA-256 hash>          (zero or more: the inclusion proof, leaf's sibling first)
    <empty line>
    <the log's checkpoint, a signed note, verbatim>

Followed exactly as C2SP/C2SP ``tlog-proof.md`` at commit 0065ea5 says (see docs/design/log.md). The checkpoint is a
C2SP ``tlog-checkpoint``, which is a signed note: its text (origin, size, root, extension lines, none empty), one
empty line, one or more signature lines, and nothing after them. This module knows nothing of the store: what
``extra`` means (here, a row's leaf input) and whether the proof holds are `core.receipts`' business.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass

from compute_budget.core.log.encoding import strict_b64decode
from compute_budget.core.log.note import SIGNATURE_PREFIX, TlogCheckpoint, parse_note, parse_tlog_checkpoint
from compute_budget.errors import MalformedTlogProof, NoteError

TLOG_PROOF_HEADER = "c2sp.org/tlog-proof@v1"
MAX_INDEX = 2**64 - 2  # a checkpoint's tree size is a 64-bit count, and the index is below it
MAX_PROOF_HASHES = 64  # the longest inclusion proof in a tree of fewer than 2**64 leaves
_INDEX = re.compile(r"index (0|[1-9][0-9]{0,19})")
_HASH_LINE = re.compile(r"[A-Za-z0-9+/]{43}=")


def _shown(text: str, limit: int = 40) -> str:
    """Untrusted text for a one-line message: ASCII only (escapes for the rest) and cut."""
    return ascii(text if len(text) <= limit else text[:limit] + "...")


def _bad(message: str) -> MalformedTlogProof:
    return MalformedTlogProof(f"malformed tlog-proof: {message}")


def checkpoint_problem(note: str) -> str | None:
    """Why `note` is not a C2SP checkpoint as a tlog-proof carries it (a signed note whose text is a
    tlog-checkpoint), or None."""
    text, empty, signatures = note.partition("\n\n")
    if not text.strip("\n"):
        return "the checkpoint is missing after the empty line"
    if not empty:
        return "the checkpoint carries no signature (a checkpoint is a signed note: text, empty line, signatures)"
    if "\n\n" in signatures or signatures.startswith("\n"):
        return "trailing junk: an extra empty line among or after the checkpoint's signatures"
    junk = [line for line in signatures.rstrip("\n").split("\n") if not line.startswith(SIGNATURE_PREFIX)]
    if signatures and junk:
        return f"trailing junk after the checkpoint: {_shown(junk[0])} is not a signature line"
    try:
        parse_tlog_checkpoint(text + "\n")
        parse_note(note)
    except NoteError as error:
        return f"its checkpoint: {error}"
    return None


@dataclass(frozen=True, slots=True)
class TlogProof:
    """One C2SP tlog-proof: the entry's zero-based `index`, the inclusion proof `hashes` (32 bytes each, leaf's
    sibling first), the log's signed `checkpoint` note (verbatim) and the optional opaque `extra` data.

    Built checked: a value that could not be encoded as a proof `parse` reads back is `MalformedTlogProof`."""

    index: int
    hashes: tuple[bytes, ...]
    checkpoint: str
    extra: bytes | None = None

    def __post_init__(self) -> None:
        """Check every field against the format."""
        if not (type(self.index) is int and 0 <= self.index <= MAX_INDEX):
            raise _bad(f"index {self.index!r} is not an integer from 0 to 2**64-2")
        if not isinstance(self.hashes, tuple) or len(self.hashes) > MAX_PROOF_HASHES:
            raise _bad(f"the inclusion proof must be a tuple of at most {MAX_PROOF_HASHES} hashes")
        if not all(isinstance(item, bytes) and len(item) == 32 for item in self.hashes):
            raise _bad("every inclusion proof hash must be 32 bytes")
        if self.extra is not None and not isinstance(self.extra, bytes):
            raise _bad(f"extra must be bytes or None, not {type(self.extra).__name__}")
        if not isinstance(self.checkpoint, str):
            raise _bad(f"the checkpoint must be text, not {type(self.checkpoint).__name__}")
        problem = checkpoint_problem(self.checkpoint)
        if problem is not None:
            raise _bad(problem)

    @property
    def tree(self) -> TlogCheckpoint:
        """The checkpoint's origin, tree size, root and extension lines (its signatures not checked here)."""
        return parse_tlog_checkpoint(self.checkpoint.partition("\n\n")[0] + "\n")

    def encode(self) -> str:
        """The proof as text, byte for byte as C2SP lays it out (ending with the checkpoint's last newline)."""
        lines = [TLOG_PROOF_HEADER]
        if self.extra is not None:
            lines.append("extra " + base64.b64encode(self.extra).decode("ascii"))
        lines.append(f"index {self.index}")
        lines.extend(base64.b64encode(item).decode("ascii") for item in self.hashes)
        return "\n".join(lines) + "\n\n" + self.checkpoint

    @classmethod
    def parse(cls, data: str | bytes) -> TlogProof:
        """Read a proof strictly; `MalformedTlogProof` names the first line that breaks the format."""
        text = _text(data)
        lines = text.split("\n")
        if lines[0] != TLOG_PROOF_HEADER:
            raise _bad(f"wrong header {_shown(lines[0])}: the first line must be {TLOG_PROOF_HEADER}")
        at, extra = 1, None
        if len(lines) > at and lines[at].startswith("extra "):
            extra = strict_b64decode(lines[at][len("extra ") :])
            if extra is None:
                raise _bad("line 2: the extra data is not canonical standard base64")
            at += 1
        found = _INDEX.fullmatch(lines[at]) if len(lines) > at else None
        if found is None or int(found.group(1)) > MAX_INDEX:
            shown = _shown(lines[at]) if len(lines) > at else "nothing"
            raise _bad(f"line {at + 1}: expected 'index N' (decimal, no leading zeroes, below 2**64-1), got {shown}")
        index, at = int(found.group(1)), at + 1
        hashes: list[bytes] = []
        while len(lines) > at and lines[at]:
            if len(hashes) == MAX_PROOF_HASHES:
                raise _bad(f"too many hashes: more than {MAX_PROOF_HASHES} lines of inclusion proof")
            raw = strict_b64decode(lines[at]) if _HASH_LINE.fullmatch(lines[at]) else None
            if raw is None:
                raise _bad(f"line {at + 1}: {_shown(lines[at])} is not the standard base64 of a 32-byte hash")
            hashes.append(raw)
            at += 1
        if len(lines) <= at + 1:
            raise _bad("missing checkpoint: the proof must end with an empty line and the log's signed checkpoint")
        return cls(index, tuple(hashes), "\n".join(lines[at + 1 :]), extra)


def _text(data: str | bytes) -> str:
    """`data` as text: UTF-8 bytes decoded strictly."""
    if isinstance(data, bytes):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise _bad("the proof is not UTF-8 text") from None
    if not isinstance(data, str):
        raise _bad(f"expected text or bytes, got {type(data).__name__}")
    return data


def is_tlog_proof(data: str | bytes) -> bool:
    """True when `data`'s first line names a C2SP tlog-proof (any version: `TlogProof.parse` then says whether it
    is the one this release reads)."""
    first = data[:64] if isinstance(data, str) else data[:64].decode("utf-8", "replace")
    return first.startswith(TLOG_PROOF_HEADER.partition("@")[0] + "@")


__all__ = ["MAX_PROOF_HASHES", "TLOG_PROOF_HEADER", "TlogProof", "checkpoint_problem", "is_tlog_proof"]
