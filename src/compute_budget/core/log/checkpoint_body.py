"""Checkpoint note texts (spec section 8, c2sp.org/tlog-checkpoint): what a checkpoint note signs. Pure.

This log's checkpoint body is origin, tree size in decimal, base64 root hash and ``chain <64 hex>``, each line
ending in a newline (`CheckpointBody`); a witness reads any log's checkpoint, with any extension lines
(`TlogCheckpoint`).
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass

from compute_budget.core.log.encoding import shown as _shown
from compute_budget.core.log.encoding import strict_b64decode as _strict_b64decode
from compute_budget.errors import NoteError

MAX_ORIGIN_LENGTH = 128
MAX_TREE_SIZE = 2**64 - 1

_TREE_SIZE = re.compile(r"0|[1-9][0-9]{0,19}")
_CHAIN_LINE = re.compile(r"chain ([0-9a-f]{64})")
_CHAIN_HASH = re.compile(r"[0-9a-f]{64}")


def valid_origin(name: object) -> bool:
    """A log origin (spec section 8): 1 to 128 printable ASCII characters (0x21-0x7E), none of them ``+``."""
    return (
        isinstance(name, str)
        and 1 <= len(name) <= MAX_ORIGIN_LENGTH
        and all("\x21" <= char <= "\x7e" for char in name)
        and "+" not in name
    )


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
