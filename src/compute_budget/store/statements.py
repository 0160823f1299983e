"""Every SQL statement the store runs, built once per backend (the only place that knows `?` from `%s`).

The hot paths (append, scan, lookups) are raw SQL because the benchmarks show SQLAlchemy's compiled Core
costs a visible share there; the statements are plain strings built here once, never per call.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from compute_budget.core.row import ROW_COLUMNS
from compute_budget.store.table import TABLE_NAME

# A transaction-scoped PostgreSQL advisory lock that every compute-budget writer takes before it reads the
# chain head: the key is fixed, so writers of any version queue on it (even before the table exists).
APPEND_LOCK_KEY = 7227022700

# Rows per multi-row INSERT on SQLite: 500 rows of 18 columns are 9,000 parameters, well inside the default
# SQLITE_MAX_VARIABLE_NUMBER of 32,766 (SQLite >= 3.32); older libraries allow 999, so 55 rows.
MULTI_ROW_MAX = 500 if sqlite3.sqlite_version_info >= (3, 32, 0) else 999 // 18

# What `listing` can filter on, each a condition on one parameter (the names are `iter_decisions`' keywords).
LIST_FILTERS: dict[str, str] = {
    "status": "status = {mark}",
    "reason_code": "reason_code = {mark}",
    "policy_version": "policy_version = {mark}",
    "gate_decision_id": "gate_decision_id = {mark}",
    "after_seq": "seq > {mark}",
    "before_seq": "seq < {mark}",
}


class Statements:
    """The store's SQL for one backend; `mark` is its parameter placeholder."""

    def __init__(self, backend: str, mark: str) -> None:
        self.backend = backend
        self.mark = mark
        table, columns = TABLE_NAME, ", ".join(ROW_COLUMNS)
        self.select = f"SELECT {columns} FROM {table}"
        self.insert = f"INSERT INTO {table} ({columns}) VALUES ({', '.join([mark] * len(ROW_COLUMNS))})"
        # The optimistic append of a chunk assumed new. On PostgreSQL a stored budget_id must not raise inside
        # psycopg's executemany pipeline (the aborted pipeline is then logged on stderr while the error
        # unwinds): the row is skipped instead and the facade sees fewer rows inserted than planned. SQLite's
        # no-replace trigger fires before any conflict clause, so there the duplicate still raises.
        self.insert_if_new = f"{self.insert} ON CONFLICT (budget_id) DO NOTHING" if backend == "postgresql" else None
        self._row_marks = f"({', '.join([mark] * len(ROW_COLUMNS))})"
        self._insert_rows: dict[int, str] = {}
        self.by_budget_id = f"{self.select} WHERE budget_id = {mark}"
        self.by_gate = f"{self.select} WHERE gate_decision_id = {mark} ORDER BY seq"
        self.head = f"SELECT seq, chain_hash, budget_id FROM {table} ORDER BY seq DESC LIMIT 1"
        self.count = f"SELECT count(*) FROM {table}"
        # The highest seq that is an integer: a seq tampered into text or a real is not counted.
        self.max_integer_seq = f"SELECT max(seq) FROM {table} WHERE seq = CAST(seq AS BIGINT)"
        self.link_at = f"SELECT seq, chain_hash, budget_id FROM {table} WHERE seq = {mark}"
        self.link_at_or_before = f"SELECT seq, chain_hash FROM {table} WHERE seq <= {mark} ORDER BY seq DESC LIMIT 1"
        # Rows no seq range covers: seq missing, not a positive integer, or beyond the head.
        self.misplaced = (
            f"SELECT budget_id, seq FROM {table} WHERE seq IS NULL OR seq < 1 OR seq > {mark} "
            "OR seq <> CAST(seq AS BIGINT)"
        )
        self.seq_range = f"{self.select} WHERE seq > {mark} AND seq <= {mark} ORDER BY seq"
        # What a writer runs first to queue behind other writers (SQLite: BEGIN IMMEDIATE already does).
        self.append_lock = f"SELECT pg_advisory_xact_lock({APPEND_LOCK_KEY})" if backend == "postgresql" else None

    def insert_rows(self, how_many: int) -> str:
        """One INSERT of `how_many` rows (``VALUES (...), (...)``, the parameters flattened row after row): one
        statement is one SQLite program run, and atomic. Built once per distinct row count."""
        statement = self._insert_rows.get(how_many)
        if statement is None:
            values = ", ".join([self._row_marks] * how_many)
            statement = f"INSERT INTO {TABLE_NAME} ({', '.join(ROW_COLUMNS)}) VALUES {values}"
            self._insert_rows[how_many] = statement
        return statement

    def by_prefix(self, limit: int) -> str:
        """Rows whose budget_id lies in [low, high), at most `limit`."""
        between = f"budget_id >= {self.mark} AND budget_id < {self.mark}"
        return f"{self.select} WHERE {between} ORDER BY budget_id LIMIT {int(limit)}"

    def ids_by_prefix(self, limit: int) -> str:
        """The budget_ids (only) in [low, high), at most `limit`: resolving a prefix reads no row."""
        between = f"budget_id >= {self.mark} AND budget_id < {self.mark}"
        return f"SELECT budget_id FROM {TABLE_NAME} WHERE {between} ORDER BY budget_id LIMIT {int(limit)}"

    def listing(self, filters: Sequence[str] = (), limit: int | None = None) -> str:
        """Rows in seq order matching every named filter of `LIST_FILTERS` (one parameter each, in the order
        given), optionally only `limit` of them: the oldest after the bound when `after_seq` is a filter (paging
        forward, as a loop tailing new rows does, must never skip one), else the newest."""
        conditions = [LIST_FILTERS[name].format(mark=self.mark) for name in filters]
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        if limit is None:
            return f"{self.select}{where} ORDER BY seq"
        if "after_seq" in filters:
            return f"{self.select}{where} ORDER BY seq LIMIT {int(limit)}"
        return f"SELECT * FROM ({self.select}{where} ORDER BY seq DESC LIMIT {int(limit)}) AS newest ORDER BY seq"

    def stored_gates(self, how_many: int) -> str:
        """seq and gate_input of up to `how_many` budget_ids."""
        marks = ", ".join([self.mark] * how_many)
        return f"SELECT budget_id, seq, gate_input FROM {TABLE_NAME} WHERE budget_id IN ({marks})"


_BY_BACKEND = {"sqlite": Statements("sqlite", "?"), "postgresql": Statements("postgresql", "%s")}


def statements_for(backend: str) -> Statements:
    """The statements for a backend name (``sqlite`` or ``postgresql``)."""
    try:
        return _BY_BACKEND[backend]
    except KeyError:
        raise NotImplementedError(f"compute-budget has no SQL written for the {backend} backend") from None
