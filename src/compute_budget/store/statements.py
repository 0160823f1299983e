"""Every SQL statement the store runs, built once per backend from its placeholder (`store.backends`).

The hot paths (append, scan, lookups) are raw SQL because the benchmarks show SQLAlchemy's compiled Core
costs a visible share there; the statements are plain strings built here once, never per call.
"""

from __future__ import annotations

from collections.abc import Sequence

from compute_budget.core.row import ROW_COLUMNS
from compute_budget.store.table import TABLE_NAME

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

    def __init__(self, mark: str, *, conflict_clause: str | None = None, append_lock: str | None = None) -> None:
        self.mark = mark
        table, columns = TABLE_NAME, ", ".join(ROW_COLUMNS)
        self.select = f"SELECT {columns} FROM {table}"
        self.insert = f"INSERT INTO {table} ({columns}) VALUES ({', '.join([mark] * len(ROW_COLUMNS))})"
        # The optimistic append of a chunk assumed new, where the backend has a conflict clause that skips a stored
        # budget_id (the facade then sees fewer rows inserted than planned). SQLite's no-replace trigger fires
        # before any conflict clause, so there the duplicate still raises and there is no such statement.
        self.insert_if_new = f"{self.insert} {conflict_clause}" if conflict_clause else None
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
        # What a writer runs first to queue behind other writers (None where BEGIN already does, as on SQLite).
        self.append_lock = append_lock

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
