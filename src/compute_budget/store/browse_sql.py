"""The Workbench's browsing SQL, written once for every backend: each backend hands in its placeholder and its
condition on status (`Backend.browse`). Apart from `store.browse`, which runs it through a backend, so that the
backends can build it without importing what reads through them."""

from __future__ import annotations

import functools

from compute_budget.core.row import ROW_COLUMNS
from compute_budget.store.table import TABLE_NAME


class BrowseStatements:
    """The browsing SQL for one backend; `mark` is its parameter placeholder."""

    def __init__(self, mark: str, *, status_condition: str = "status = {mark}") -> None:
        self.mark = mark
        table = TABLE_NAME
        self.select = f"SELECT {', '.join(ROW_COLUMNS)} FROM {table}"
        self.by_budget_id = f"{self.select} WHERE budget_id = {mark}"
        self.link_before = (
            f"SELECT seq, chain_hash, budget_id FROM {table} WHERE seq < {mark} ORDER BY seq DESC LIMIT 1"
        )
        self.link_after = f"SELECT seq, chain_hash, budget_id FROM {table} WHERE seq > {mark} ORDER BY seq LIMIT 1"
        self.link_at = f"SELECT seq, chain_hash, budget_id FROM {table} WHERE seq = {mark}"
        # Counts of each (status, reason_code) over low < seq <= high: an append-only store's counts at a new
        # head are the counts at the old head plus this over the rows between.
        self.counts = (
            f"SELECT status, reason_code, count(*) FROM {table} WHERE seq > {mark} AND seq <= {mark} "
            "GROUP BY status, reason_code"
        )
        # The highest integer seq: SQLite sorts a seq tampered into text after every number, and a head read from
        # it would show an empty list and audit no row at all.
        self.head_seq = f"SELECT max(seq) FROM {table} WHERE seq = CAST(seq AS BIGINT)"
        # Each filter's condition; the backend words the one on status (SQLite's needs a planner hint, see
        # `SQLiteBackend.status_condition`; PostgreSQL plans from its statistics and has no unary + on text).
        self._conditions = {
            "status": status_condition.format(mark=mark),
            "reason_code": f"reason_code = {mark}",
            "gate_decision_id": f"gate_decision_id = {mark}",
            "policy_version": f"policy_version = {mark}",
            "after_seq": f"seq > {mark}",
            "before_seq": f"seq < {mark}",
        }

    def _where(self, present: tuple[str, ...]) -> str:
        return " WHERE " + " AND ".join(self._conditions[name] for name in present) if present else ""

    @functools.lru_cache(maxsize=512)  # noqa: B019  (one instance per backend, kept for the process's life)
    def page(self, present: tuple[str, ...], limit: int) -> str:
        """Rows matching the filters named in `present`, newest first, at most `limit`."""
        return f"{self.select}{self._where(present)} ORDER BY seq DESC LIMIT {int(limit)}"

    @functools.lru_cache(maxsize=512)  # noqa: B019  (as above)
    def counts_where(self, present: tuple[str, ...]) -> str:
        """How many matching rows of each (status, reason_code) there are."""
        where = self._where(present)
        return f"SELECT status, reason_code, count(*) FROM {TABLE_NAME}{where} GROUP BY status, reason_code"

    @functools.lru_cache(maxsize=512)  # noqa: B019  (as above)
    def forward(self, present: tuple[str, ...], limit: int) -> str:
        """Rows matching the filters named in `present`, oldest first, at most `limit` (paging forward)."""
        return f"{self.select}{self._where(present)} ORDER BY seq LIMIT {int(limit)}"

    @functools.lru_cache(maxsize=512)  # noqa: B019  (as above)
    def newer(self, present: tuple[str, ...], limit: int) -> str:
        """Seqs of matching rows above a page (the last filter is `after_seq`-like: seq > top), oldest first."""
        return f"SELECT seq FROM {TABLE_NAME}{self._where(present)} ORDER BY seq LIMIT {int(limit)}"
