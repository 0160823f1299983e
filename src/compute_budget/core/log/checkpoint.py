"""Checkpoints: the head of a store at some moment, kept outside the database, as JSON or as a checkpoint note.

An audit given a checkpoint proves the stored chain still passes through it (and, when it names a tree root, that
the Merkle tree of the rows still has that root at its size): history was only appended to since.

Two forms (spec sections 6 and 8):

* JSON: ``{"format": "compute_budget.core.log.checkpoint.v1", "seq", "chain_hash", "budget_id", "origin",
  "tree_size", "root"}``, the last three (origin, tree size = seq, base64 root) written since revision 2 and
  optional on reading: an older document without them still proves the chain.
* A C2SP checkpoint note (origin, size, base64 root, ``chain <hex>``), signed or not; `note` keeps the whole text
  with its signature lines.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from typing import Any

from compute_budget.core.log.encoding import strict_b64decode
from compute_budget.core.log.head import ChainHead
from compute_budget.core.log.note import (
    CheckpointBody,
    ParsedNote,
    Signature,
    format_checkpoint,
    parse_checkpoint,
    parse_note,
)
from compute_budget.errors import CheckpointError, NoteError

CHECKPOINT_FORMAT = "compute_budget.checkpoint.v1"
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The chain head at some moment: `seq` rows, the last with `chain_hash` and `budget_id`; since revision 2
    also the store's `origin` and the Merkle `root` of those `seq` rows, and the signed `note` it was read from."""

    seq: int
    chain_hash: str
    budget_id: str | None
    origin: str | None = None
    root: bytes | None = None
    note: str | None = None
    # `note` parsed, with the very string it was parsed from (so a copy with another note never reuses it).
    _parsed: tuple[str, ParsedNote] | None = field(default=None, init=False, compare=False, repr=False)

    @property
    def tree_size(self) -> int:
        """The tree size: the number of rows, which is the head's seq."""
        return self.seq

    @classmethod
    def from_head(cls, head: ChainHead, *, origin: str | None = None, root: bytes | None = None) -> Checkpoint:
        """The checkpoint of a chain head (with the store's origin and tree root when known)."""
        return cls(head.seq, head.chain_hash, head.budget_id, origin, root)

    @property
    def has_root(self) -> bool:
        """True when it names an origin and a tree root (a note, or a JSON checkpoint of revision 2)."""
        return self.origin is not None and self.root is not None

    def body(self) -> CheckpointBody:
        """The checkpoint note's fields; `CheckpointError` for an old JSON checkpoint without origin and root."""
        if self.origin is None or self.root is None:
            raise CheckpointError("this checkpoint names no origin and tree root (an older JSON checkpoint)")
        return CheckpointBody(self.origin, self.seq, self.root, self.chain_hash)

    def note_text(self) -> str:
        """The checkpoint note text (no signatures): origin, size, base64 root, ``chain <hex>``."""
        body = self.body()
        return format_checkpoint(body.origin, body.size, body.root, body.chain_hash)

    def signatures(self) -> list[Signature]:
        """The signature lines of the note it was read from (none for JSON or an unsigned note)."""
        parsed = self.parsed_note()
        return [] if parsed is None else parsed.signatures

    def parsed_note(self) -> ParsedNote | None:
        """The signed note it was read from, parsed once and kept (None for JSON or an unsigned note)."""
        note = self.note
        if note is None or "\n\n" not in note:
            return None
        kept = self._parsed
        if kept is None or kept[0] is not note:
            kept = (note, parse_note(note))
            object.__setattr__(self, "_parsed", kept)  # a cache on a frozen value: the fields do not change
        return kept[1]

    def to_dict(self) -> dict[str, Any]:
        """The checkpoint document (with origin, tree_size and root when known)."""
        document: dict[str, Any] = {
            "format": CHECKPOINT_FORMAT,
            "seq": self.seq,
            "chain_hash": self.chain_hash,
            "budget_id": self.budget_id,
        }
        if self.origin is not None and self.root is not None:
            document["origin"] = self.origin
            document["tree_size"] = self.seq
            document["root"] = base64.b64encode(self.root).decode("ascii")
        return document

    def to_json(self) -> str:
        """The checkpoint document as one line of JSON."""
        return json.dumps(self.to_dict(), separators=(", ", ": "))

    @classmethod
    def from_json(cls, text: str | bytes, *, source: str = "checkpoint") -> Checkpoint:
        """Read a checkpoint document; raises `CheckpointError` saying what is wrong with it."""
        try:
            value = json.loads(text)
        except (ValueError, UnicodeDecodeError) as error:
            raise CheckpointError(f"{source} is not JSON ({error})") from None
        if not isinstance(value, dict) or value.get("format") != CHECKPOINT_FORMAT:
            raise CheckpointError(f"{source} is not a compute-budget checkpoint (format {CHECKPOINT_FORMAT!r})")
        seq, chain_hash, budget_id = value.get("seq"), value.get("chain_hash"), value.get("budget_id")
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 2**63:
            raise CheckpointError(f"{source}: seq must be an integer from 0 to 2**63-1")
        if not isinstance(chain_hash, str) or not _HEX64.fullmatch(chain_hash):
            raise CheckpointError(f"{source}: chain_hash must be 64 lowercase hex digits")
        if budget_id is not None and not isinstance(budget_id, str):
            raise CheckpointError(f"{source}: budget_id must be a string or null")
        sealed = [name for name in ("origin", "tree_size", "root") if value.get(name) is not None]
        if not sealed:
            return cls(seq, chain_hash, budget_id)
        if len(sealed) != 3:
            missing = ", ".join(name for name in ("origin", "tree_size", "root") if name not in sealed)
            raise CheckpointError(f"{source}: origin, tree_size and root go together ({missing} missing)")
        if value["tree_size"] != seq or isinstance(value["tree_size"], bool):
            raise CheckpointError(f"{source}: tree_size {value['tree_size']!r} differs from seq {seq}")
        root = _root(value["root"], source)
        try:
            body = CheckpointBody(value["origin"], seq, root, chain_hash)
        except NoteError as error:
            raise CheckpointError(f"{source}: {error}") from None
        return cls(seq, chain_hash, budget_id, body.origin, body.root)

    @classmethod
    def from_note(cls, text: str | bytes, *, source: str = "checkpoint") -> Checkpoint:
        """Read a checkpoint note, signed (text, empty line, signature lines) or not (the text alone)."""
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError:
                raise CheckpointError(f"{source} is not UTF-8 text") from None
        try:
            parsed = parse_note(text) if "\n\n" in text else None
            body = parse_checkpoint(text if parsed is None else parsed.text)
        except NoteError as error:
            raise CheckpointError(f"{source}: {error}") from None
        checkpoint = cls(body.size, body.chain_hash, None, body.origin, body.root, text)
        if parsed is not None:
            object.__setattr__(checkpoint, "_parsed", (text, parsed))
        return checkpoint

    @classmethod
    def parse(cls, text: str | bytes, *, source: str = "checkpoint") -> Checkpoint:
        """A JSON checkpoint or a checkpoint note, told apart by the first character (``{`` for JSON)."""
        start = text.lstrip()[:1]
        if start in ("{", b"{"):
            return cls.from_json(text, source=source)
        try:
            return cls.from_note(text, source=source)
        except CheckpointError as error:
            detail = str(error).removeprefix(f"{source}: ")
            raise CheckpointError(f"{source} is not JSON and not a checkpoint note ({detail})") from None


def _root(value: object, source: str) -> bytes:
    """A 32-byte root from canonical standard base64."""
    if not isinstance(value, str):
        raise CheckpointError(f"{source}: root must be the base64 of a 32-byte hash")
    raw = strict_b64decode(value)
    if raw is None or len(raw) != 32:
        raise CheckpointError(f"{source}: root must be the base64 of a 32-byte hash")
    return raw
