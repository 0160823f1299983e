"""`FILE.head` (spec 9.9.2): the head an audit with witness keys checked, and when that audit started.

`audit --save-checkpoint FILE` with witness keys keeps, beside FILE (the newest checkpoint K witnesses cosigned),
the writer-signed checkpoint of the head it checked followed by one line, ``audit started <UTC time>``. The next
night's `--since FILE` reads it back: rows that were already in the store at that audit, and that K witnesses have
still not cosigned `--max-witness-age` seconds later, are `unwitnessed_rows` whatever a cosignature timestamp says
(a fresh cosignature of an old size, fetched from a witness's `GET /latest` and filed in the store, says nothing
of the rows after it).

The time line is not signed: it is the auditor's own word, kept on the auditor's host like FILE itself.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Sequence
from dataclasses import dataclass

from compute_budget.auditor.source import LogView
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.note import VerifierKey, parse_note, verified_signatures
from compute_budget.core.seal_checks import trusted_signers
from compute_budget.core.verify import Finding, FindingKind
from compute_budget.errors import CheckpointError, NoteError
from compute_budget.keys.small_files import read_small_file

HEAD_SUFFIX = ".head"
STARTED_PREFIX = "audit started "
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_MAX_HEAD_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class HeadNote:
    """A parsed `FILE.head`: the writer-signed checkpoint `note` of the head an audit checked, and that audit's
    start (`started_at`, UTC ISO 8601; `started`, seconds since the epoch). `source` names it in findings."""

    note: str
    checkpoint: Checkpoint
    started_at: str
    started: int
    source: str = "FILE.head"


def head_path(checkpoint_path: str) -> str:
    """Where the `FILE.head` of the kept checkpoint `checkpoint_path` lives."""
    return checkpoint_path + HEAD_SUFFIX


def format_head_note(note: str, started_at: str) -> str:
    """The text of a `FILE.head`: the signed note, then ``audit started <started_at>``."""
    _epoch(started_at, "the audit's start")  # never write a file the next night cannot read
    return note + STARTED_PREFIX + started_at + "\n"


def parse_head_note(text: str, source: str = "FILE.head") -> HeadNote:
    """Read a `FILE.head`; `CheckpointError` naming `source` when it is not one."""
    body, _, last = text.rstrip("\n").rpartition("\n")
    if not text.endswith("\n") or not last.startswith(STARTED_PREFIX) or not body:
        raise CheckpointError(
            f"{source} is not a head note: it must end with a line '{STARTED_PREFIX}YYYY-MM-DDTHH:MM:SSZ' (written by "
            "`audit --save-checkpoint` with witness keys)"
        )
    started_at = last[len(STARTED_PREFIX):]
    started = _epoch(started_at, source)
    note = body + "\n"
    try:
        parse_note(note)
        checkpoint = Checkpoint.from_note(note, source=source)
    except (NoteError, CheckpointError) as error:
        raise CheckpointError(f"{source} holds no signed checkpoint note: {error}") from None
    return HeadNote(note, checkpoint, started_at, started, source)


def load_head_note(path: str, fix: str | None = None) -> HeadNote:
    """Read `path` (a `FILE.head`); `CheckpointError` when it is missing (naming why it can be, and `fix`, the audit
    that keeps FILE and FILE.head afresh), not a regular file, or not a head note."""
    if not os.path.lexists(path):
        checkpoint = path.removesuffix(HEAD_SUFFIX)
        raise CheckpointError(
            f"{path} does not exist: with witness keys, --since {checkpoint} needs the {path} that `audit "
            f"--save-checkpoint {checkpoint}` writes beside it whenever a trusted key is given. Either the audit that "
            f"wrote {checkpoint} had no trusted key (--trusted-key, --witness-key or --policy), or {path} was not "
            f"moved with {checkpoint} (a nightly that renames one renames both). Keep both afresh with one audit "
            f"without --since: {f'`{fix}`' if fix else 'the same keys, and --save-checkpoint ' + checkpoint}"
        )
    raw = read_small_file(path, _MAX_HEAD_BYTES, "head note", CheckpointError)
    if len(raw) > _MAX_HEAD_BYTES:
        raise CheckpointError(f"{path} is larger than any head note ({_MAX_HEAD_BYTES} bytes)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CheckpointError(f"{path} is not UTF-8 text: not a head note") from None
    return parse_head_note(text, path)


def _epoch(started_at: str, source: str) -> int:
    try:
        moment = dt.datetime.strptime(started_at, _TIME_FORMAT).replace(tzinfo=dt.UTC)
    except ValueError:
        raise CheckpointError(
            f"{source}: {started_at[:40]!r} is not a UTC time YYYY-MM-DDTHH:MM:SSZ"
        ) from None
    return int(moment.timestamp())


def head_signature_findings(head: HeadNote, keys: Sequence[VerifierKey]) -> list[Finding]:
    """`FILE.head` must carry a valid signature by a trusted writer key, and none that fails (spec 9.9.2: else
    `checkpoint_mismatch`; without one, its size is no head any writer vouched for)."""
    checkpoint = head.checkpoint
    try:
        verified, failed = trusted_signers(head.note, keys)
    except NoteError as error:  # pragma: no cover  (parsed once already)
        verified, failed = [], []
        why = f"its signatures cannot be read ({error})"
    else:
        why = ""
    if failed:
        why = f"its signature by {failed[0].name}+{failed[0].key_hash:08x} does not verify"
    elif not verified and not why:
        why = ("it carries no signature by a trusted key" if keys
               else "no --trusted-key was given to verify its writer signature under")
    if not why:
        return []
    return [Finding(
        FindingKind.CHECKPOINT_MISMATCH, checkpoint.budget_id, checkpoint.seq,
        f"{head.source} (the head of size {checkpoint.seq} the audit of {head.started_at} checked): {why}",
    )]


def writer_signed_head(snapshot: LogView, text: str, size: int, keys: Sequence[VerifierKey]) -> str | None:
    """The head's checkpoint `text` with the stored signatures of it that verify under the trusted writer `keys`
    (each once), or None when no stored checkpoint of it carries one."""
    kept = verified_signatures(text, [stored.note for stored in snapshot.checkpoints_at(size)], keys)
    return text + "\n" + "".join(signature.line() for signature in kept) if kept else None


__all__ = [
    "HEAD_SUFFIX",
    "HeadNote",
    "format_head_note",
    "head_path",
    "head_signature_findings",
    "load_head_note",
    "parse_head_note",
    "writer_signed_head",
]
