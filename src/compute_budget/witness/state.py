"""The witness's own state: a SQLite file holding, per log, the latest cosigned checkpoint, and the evidence of
forks it refused. Every change is one ``BEGIN IMMEDIATE`` transaction, durable (``synchronous=FULL``) before the
witness answers."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from compute_budget.errors import InputError

MAX_EVIDENCE_PER_ORIGIN = 1000
_TABLES = ("witness_latest", "witness_evidence", "witness_evidence_dropped")
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS witness_latest (origin TEXT PRIMARY KEY, size INTEGER NOT NULL, "
    "root TEXT NOT NULL, checkpoint TEXT NOT NULL, log_signatures TEXT NOT NULL, cosigned_at INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS witness_evidence (origin TEXT NOT NULL, note TEXT NOT NULL, "
    "reason TEXT NOT NULL, seen_at INTEGER NOT NULL, PRIMARY KEY (origin, note))",
    "CREATE TABLE IF NOT EXISTS witness_evidence_dropped (origin TEXT PRIMARY KEY, dropped INTEGER NOT NULL)",
)


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
    """A signed note the witness refused as a fork (409 or 422), kept once."""

    origin: str
    note: str
    reason: str
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
            self._connection.execute("PRAGMA journal_mode = WAL")
            self._connection.execute("PRAGMA synchronous = FULL")
            found = {row[0] for row in self._connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if found - set(_TABLES):
                raise InputError(
                    f"{self.path} is not a witness state file (it has other tables: {', '.join(sorted(found)[:3])})"
                )
            for statement in _SCHEMA:
                self._connection.execute(statement)
        except sqlite3.DatabaseError as error:
            raise InputError(f"witness state {self.path} cannot be used: {error}") from None

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
        """The fork evidence kept for `origin`, oldest first, and how many more were dropped past the cap."""
        rows = self._connection.execute(
            "SELECT origin, note, reason, seen_at FROM witness_evidence WHERE origin = ? ORDER BY seen_at, rowid",
            (origin,),
        ).fetchall()
        dropped = self._connection.execute(
            "SELECT dropped FROM witness_evidence_dropped WHERE origin = ?", (origin,)
        ).fetchone()
        return [Evidence(*row) for row in rows], (dropped[0] if dropped else 0)

    def origins_with_evidence(self) -> list[str]:
        """The origins for which any fork evidence is kept or counted."""
        rows = self._connection.execute(
            "SELECT origin FROM witness_evidence UNION SELECT origin FROM witness_evidence_dropped ORDER BY 1"
        ).fetchall()
        return [row[0] for row in rows]


def keep_latest(connection: sqlite3.Connection, latest: Latest) -> None:
    """Replace the latest cosigned checkpoint of its origin (inside the request's transaction)."""
    connection.execute(
        "INSERT INTO witness_latest (origin, size, root, checkpoint, log_signatures, cosigned_at) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (origin) DO UPDATE SET size = excluded.size, root = excluded.root, "
        "checkpoint = excluded.checkpoint, log_signatures = excluded.log_signatures, "
        "cosigned_at = excluded.cosigned_at",
        (latest.origin, latest.size, latest.root, latest.checkpoint, latest.log_signatures, latest.cosigned_at),
    )


def keep_evidence(connection: sqlite3.Connection, evidence: Evidence) -> None:
    """Keep a refused note once; past `MAX_EVIDENCE_PER_ORIGIN` notes for its origin, only count it."""
    known = connection.execute(
        "SELECT 1 FROM witness_evidence WHERE origin = ? AND note = ?", (evidence.origin, evidence.note)
    ).fetchone()
    if known is not None:
        return
    kept = connection.execute(
        "SELECT count(*) FROM witness_evidence WHERE origin = ?", (evidence.origin,)
    ).fetchone()[0]
    if kept < MAX_EVIDENCE_PER_ORIGIN:
        connection.execute(
            "INSERT INTO witness_evidence (origin, note, reason, seen_at) VALUES (?, ?, ?, ?)",
            (evidence.origin, evidence.note, evidence.reason, evidence.seen_at),
        )
        return
    connection.execute(
        "INSERT INTO witness_evidence_dropped (origin, dropped) VALUES (?, 1) "
        "ON CONFLICT (origin) DO UPDATE SET dropped = dropped + 1",
        (evidence.origin,),
    )
