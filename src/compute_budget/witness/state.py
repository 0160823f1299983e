"""The witness's own state: a SQLite file holding, per log, the latest cosigned checkpoint, the conclusive evidence of
forks it refused, and the pending notes (refused at the proof check, not yet shown to be forks). Every change is
one ``BEGIN IMMEDIATE`` transaction, durable (``synchronous=FULL``) before the witness answers.

Schema version 1 (``PRAGMA user_version``); a version-0 file (the previous release: one evidence table for both
kinds of refusal) is migrated in place the first time it is opened (`_migrate_v0`)."""

from __future__ import annotations

import base64
import contextlib
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from compute_budget.core.log.note import parse_note, parse_tlog_checkpoint
from compute_budget.errors import InputError, NoteError

MAX_EVIDENCE_PER_ORIGIN = 1000
MAX_PENDING_PER_ORIGIN = 1000
MAX_SIZE = 2**63 - 1  # SQLite's INTEGER; spec 9.9.6 refuses larger sizes in requests
SCHEMA_VERSION = 1
_TABLES = (
    "witness_latest", "witness_conclusive", "witness_conclusive_dropped", "witness_pending", "witness_pending_dropped",
)
_V0_TABLES = ("witness_evidence", "witness_evidence_dropped")
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS witness_latest (origin TEXT PRIMARY KEY, size INTEGER NOT NULL, "
    "root TEXT NOT NULL, checkpoint TEXT NOT NULL, log_signatures TEXT NOT NULL, cosigned_at INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS witness_conclusive (origin TEXT NOT NULL, note TEXT NOT NULL, label TEXT NOT NULL, "
    "size INTEGER NOT NULL, root TEXT NOT NULL, seen_at INTEGER NOT NULL, PRIMARY KEY (origin, note))",
    "CREATE TABLE IF NOT EXISTS witness_conclusive_dropped (origin TEXT PRIMARY KEY, dropped INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS witness_pending (origin TEXT NOT NULL, size INTEGER NOT NULL, root TEXT NOT NULL, "
    "note TEXT NOT NULL, seen_at INTEGER NOT NULL, PRIMARY KEY (origin, size))",
    "CREATE TABLE IF NOT EXISTS witness_pending_dropped (origin TEXT PRIMARY KEY, dropped INTEGER NOT NULL)",
)


class EvidenceLabel(StrEnum):
    """What a conclusive note shows: another root at a cosigned size, or another text (extension lines) there."""

    FORK = "fork"
    EXTENSION_MISMATCH = "extension_mismatch"


@dataclass(frozen=True, slots=True)
class Latest:
    """The latest checkpoint a witness cosigned for one log: its text, the log signature lines it verified."""

    origin: str
    size: int
    root: str  # base64
    checkpoint: str
    log_signatures: str
    cosigned_at: int


@dataclass(frozen=True, slots=True)
class Evidence:
    """Conclusive evidence of a fork: a note the log's keys signed, of a size the witness cosigned with another root
    (`fork`) or another text (`extension_mismatch`). `note` is the checkpoint text and its verified log lines."""

    origin: str
    size: int
    root: str  # base64
    note: str
    label: EvidenceLabel
    seen_at: int


@dataclass(frozen=True, slots=True)
class Pending:
    """A note the log's keys signed whose consistency proof did not verify (check 6), at a size the witness has not
    cosigned: kept until the witness cosigns that size (another root: promoted; the same text: dropped)."""

    origin: str
    size: int
    root: str  # base64
    note: str
    seen_at: int


class WitnessState:
    """The witness state file (`witness.db` by default)."""

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True) -> None:
        self.path = Path(path)
        if self.path.is_symlink():
            raise InputError(f"witness state {self.path} is a symbolic link: give the file itself")
        if self.path.is_dir():
            raise InputError(f"witness state {self.path} is a folder; give a file (--state FILE)")
        if not create and not self.path.exists():
            raise InputError(f"no witness state at {self.path} (check --state)")
        if not self.path.parent.is_dir():
            raise InputError(f"cannot create witness state {self.path}: folder {self.path.parent} does not exist")
        try:
            self._connection = sqlite3.connect(self.path, isolation_level=None, timeout=30, check_same_thread=False)
        except sqlite3.DatabaseError as error:
            raise InputError(f"witness state {self.path} cannot be used: {error}") from None
        try:
            self._connection.execute("PRAGMA journal_mode = WAL")
            self._connection.execute("PRAGMA synchronous = FULL")
            with self.transaction() as connection:
                self._prepare(connection)
        except sqlite3.DatabaseError as error:
            self._connection.close()
            raise InputError(f"witness state {self.path} cannot be used: {error}") from None
        except InputError:
            self._connection.close()
            raise

    def _prepare(self, connection: sqlite3.Connection) -> None:
        """Create the tables, or migrate a previous release's file (inside one transaction: all or nothing)."""
        found = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        foreign = found - {*_TABLES, *_V0_TABLES}
        if foreign:
            shown = ", ".join(sorted(foreign)[:3])
            raise InputError(f"{self.path} is not a witness state file (it has other tables: {shown})")
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise InputError(
                f"witness state {self.path} is of a newer release (schema {version}): upgrade compute-budget"
            )
        for statement in _SCHEMA:
            connection.execute(statement)
        if found & set(_V0_TABLES):
            _migrate_v0(connection, found)
        if version != SCHEMA_VERSION:
            connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def close(self) -> None:
        """Close the state file."""
        self._connection.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction, committed (durably) on success, rolled back on any error."""
        self._connection.execute("BEGIN IMMEDIATE")
        try:
            yield self._connection
        except BaseException:
            self._connection.execute("ROLLBACK")
            raise
        self._connection.execute("COMMIT")

    def latest(self, origin: str, connection: sqlite3.Connection | None = None) -> Latest | None:
        """The latest cosigned checkpoint of `origin`, or None."""
        row = (connection or self._connection).execute(
            "SELECT origin, size, root, checkpoint, log_signatures, cosigned_at FROM witness_latest WHERE origin = ?",
            (origin,),
        ).fetchone()
        return None if row is None else Latest(*row)

    def all_latest(self) -> list[Latest]:
        """Every log's latest cosigned checkpoint, by origin."""
        rows = self._connection.execute(
            "SELECT origin, size, root, checkpoint, log_signatures, cosigned_at FROM witness_latest ORDER BY origin"
        ).fetchall()
        return [Latest(*row) for row in rows]

    def evidence(self, origin: str) -> tuple[list[Evidence], int]:
        """The conclusive fork evidence kept for `origin`, oldest first, and how many more came past the cap."""
        rows = self._connection.execute(
            "SELECT origin, size, root, note, label, seen_at FROM witness_conclusive WHERE origin = ? "
            "ORDER BY seen_at, rowid",
            (origin,),
        ).fetchall()
        kept = [Evidence(origin, size, root, note, EvidenceLabel(label), seen) for origin, size, root, note, label, seen
                in rows]
        return kept, self._dropped("witness_conclusive_dropped", origin)

    def pending(self, origin: str) -> tuple[list[Pending], int]:
        """The pending notes of `origin` by size, and how many notes of new sizes came past the cap."""
        rows = self._connection.execute(
            "SELECT origin, size, root, note, seen_at FROM witness_pending WHERE origin = ? ORDER BY size", (origin,)
        ).fetchall()
        return [Pending(*row) for row in rows], self._dropped("witness_pending_dropped", origin)

    def _dropped(self, table: str, origin: str) -> int:
        row = self._connection.execute(f"SELECT dropped FROM {table} WHERE origin = ?", (origin,)).fetchone()
        return int(row[0]) if row else 0

    def origins_with_evidence(self) -> list[str]:
        """The origins for which any conclusive or pending note is kept or counted."""
        union = " UNION ".join(f"SELECT origin FROM {table}" for table in _TABLES[1:])
        return [row[0] for row in self._connection.execute(f"{union} ORDER BY 1").fetchall()]


def keep_latest(connection: sqlite3.Connection, latest: Latest) -> None:
    """Replace the latest cosigned checkpoint of its origin, and settle a pending note of that size (inside the
    request's transaction)."""
    connection.execute(
        "INSERT INTO witness_latest (origin, size, root, checkpoint, log_signatures, cosigned_at) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (origin) DO UPDATE SET size = excluded.size, root = excluded.root, "
        "checkpoint = excluded.checkpoint, log_signatures = excluded.log_signatures, "
        "cosigned_at = excluded.cosigned_at",
        (latest.origin, latest.size, latest.root, latest.checkpoint, latest.log_signatures, latest.cosigned_at),
    )
    settle_pending(connection, latest)


def conflict(latest: Latest, text: str, root: str) -> EvidenceLabel | None:
    """What a checkpoint text of `latest`'s size shows against it: `fork` (another root), `extension_mismatch`
    (the same root, another text), or None (the very text the witness cosigned)."""
    if root != latest.root:
        return EvidenceLabel.FORK
    return None if text == latest.checkpoint else EvidenceLabel.EXTENSION_MISMATCH


def settle_pending(connection: sqlite3.Connection, latest: Latest) -> None:
    """The witness cosigned `latest`: a pending note of exactly that size is promoted to conclusive evidence when
    its text differs (another root, or other extension lines), and dropped when it is the text cosigned."""
    row = connection.execute(
        "SELECT note, root, seen_at FROM witness_pending WHERE origin = ? AND size = ?", (latest.origin, latest.size)
    ).fetchone()
    if row is None:
        return
    note, root, seen_at = row
    connection.execute("DELETE FROM witness_pending WHERE origin = ? AND size = ?", (latest.origin, latest.size))
    label = conflict(latest, _text_of(note), root)
    if label is not None:
        keep_evidence(connection, Evidence(latest.origin, latest.size, root, note, label, seen_at))


def keep_evidence(connection: sqlite3.Connection, evidence: Evidence) -> None:
    """Keep a conclusive note once; past `MAX_EVIDENCE_PER_ORIGIN` notes for its origin, only count it."""
    known = connection.execute(
        "SELECT 1 FROM witness_conclusive WHERE origin = ? AND note = ?", (evidence.origin, evidence.note)
    ).fetchone()
    if known is not None:
        return
    kept = connection.execute(
        "SELECT count(*) FROM witness_conclusive WHERE origin = ?", (evidence.origin,)
    ).fetchone()[0]
    if kept >= MAX_EVIDENCE_PER_ORIGIN:
        _count(connection, "witness_conclusive_dropped", evidence.origin)
        return
    connection.execute(
        "INSERT INTO witness_conclusive (origin, note, label, size, root, seen_at) VALUES (?, ?, ?, ?, ?, ?)",
        (evidence.origin, evidence.note, str(evidence.label), evidence.size, evidence.root, evidence.seen_at),
    )


def keep_pending(connection: sqlite3.Connection, pending: Pending) -> None:
    """Keep the first note refused at check 6 for its size; a later one of that size with the same text changes
    nothing; past `MAX_PENDING_PER_ORIGIN` sizes for its origin, only count it. A later one of that size with
    another text is conclusive at once, with the first (see `_second_text`)."""
    known = connection.execute(
        "SELECT note, root, seen_at FROM witness_pending WHERE origin = ? AND size = ?", (pending.origin, pending.size)
    ).fetchone()
    if known is not None:
        _second_text(connection, Pending(pending.origin, pending.size, known[1], known[0], known[2]), pending)
        return
    kept = connection.execute("SELECT count(*) FROM witness_pending WHERE origin = ?", (pending.origin,)).fetchone()[0]
    if kept >= MAX_PENDING_PER_ORIGIN and not _evict_unsettleable(connection, pending.origin):
        _count(connection, "witness_pending_dropped", pending.origin)
        return
    connection.execute(
        "INSERT INTO witness_pending (origin, size, root, note, seen_at) VALUES (?, ?, ?, ?, ?)",
        (pending.origin, pending.size, pending.root, pending.note, pending.seen_at),
    )


def _evict_unsettleable(connection: sqlite3.Connection, origin: str) -> bool:
    """Make room by dropping (and counting) the oldest pending note of a size below the one the witness cosigned
    last: a note is settled only when the witness cosigns exactly its size, so one it passed by never will be.
    Without this, honest notes sent with junk proofs at sizes the log then grew past would hold every slot for good
    and a later fork could only be counted (a red-team finding). False when every kept note can still settle."""
    stale = connection.execute(
        "SELECT p.size FROM witness_pending p JOIN witness_latest l ON l.origin = p.origin "
        "WHERE p.origin = ? AND p.size < l.size ORDER BY p.seen_at, p.size LIMIT 1",
        (origin,),
    ).fetchone()
    if stale is None:
        return False
    connection.execute("DELETE FROM witness_pending WHERE origin = ? AND size = ?", (origin, stale[0]))
    _count(connection, "witness_pending_dropped", origin)
    return True


def _second_text(connection: sqlite3.Connection, first: Pending, second: Pending) -> None:
    """Two notes the log's keys signed, of one size and two texts, are a fork (or an `extension_mismatch`) whatever
    the witness later cosigns: both are kept as conclusive evidence. Were only the first kept, one honest note sent
    with a junk proof would take the size's pending slot, and a real fork of that size arriving next would be lost
    once the witness cosigned the honest root (a red-team finding)."""
    first_text, second_text = _text_of(first.note), _text_of(second.note)
    if first_text == second_text:
        return
    label = EvidenceLabel.FORK if first.root != second.root else EvidenceLabel.EXTENSION_MISMATCH
    for item in (first, second):
        keep_evidence(connection, Evidence(item.origin, item.size, item.root, item.note, label, item.seen_at))


def _text_of(note: str) -> str:
    """The checkpoint text of a kept note (its text, an empty line, its verified signature lines)."""
    return note[: note.rfind("\n\n") + 1]


def _count(connection: sqlite3.Connection, table: str, origin: str) -> None:
    connection.execute(
        f"INSERT INTO {table} (origin, dropped) VALUES (?, 1) ON CONFLICT (origin) DO UPDATE SET dropped = dropped + 1",
        (origin,),
    )


def _migrate_v0(connection: sqlite3.Connection, found: set[str]) -> None:
    """A previous release's evidence, sorted by what it shows: a note refused at check 7 ('409 same size': another
    root at the size the witness had cosigned) is conclusive (`fork`); one refused at check 6 ('422 proof') is
    pending (the first per size), then settled against the latest cosigned checkpoint. Its count of refused notes
    past the cap cannot be sorted and is carried to the pending count. The old tables are then dropped."""
    rows = connection.execute(
        "SELECT origin, note, reason, seen_at FROM witness_evidence ORDER BY seen_at, rowid"
    ).fetchall() if "witness_evidence" in found else []
    for origin, note, reason, seen_at in rows:
        try:
            checkpoint = parse_tlog_checkpoint(parse_note(note)[0])
        except NoteError:
            continue  # the previous release kept only notes it had parsed; nothing else can be sorted
        root = base64_root(checkpoint.root)
        if checkpoint.size > MAX_SIZE:
            _count(connection, "witness_pending_dropped", origin)
        elif reason == "409 same size":
            keep_evidence(connection, Evidence(origin, checkpoint.size, root, note, EvidenceLabel.FORK, seen_at))
        else:
            keep_pending(connection, Pending(origin, checkpoint.size, root, note, seen_at))
    if "witness_evidence_dropped" in found:
        connection.execute(
            "INSERT INTO witness_pending_dropped (origin, dropped) "
            "SELECT origin, dropped FROM witness_evidence_dropped WHERE true "
            "ON CONFLICT (origin) DO UPDATE SET dropped = dropped + excluded.dropped"
        )
    for latest in connection.execute(
        "SELECT origin, size, root, checkpoint, log_signatures, cosigned_at FROM witness_latest"
    ).fetchall():
        settle_pending(connection, Latest(*latest))
    for table in _V0_TABLES:
        connection.execute(f"DROP TABLE IF EXISTS {table}")


def base64_root(root: bytes) -> str:
    """A root hash as the state keeps it (standard base64)."""
    return base64.b64encode(root).decode("ascii")
