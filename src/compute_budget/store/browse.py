"""Read-only queries for browsing a store (the workbench): keyset pages with filters, counts by status and
reason over a `seq` range, and a row's neighbours in the chain.

`Browsing` is the browsing role of an opened store (`BudgetStore` delegates to it); its SQL is built here once
per backend (and, for pages, once per combination of filters), in the style of `statements`. Every page is a
keyset page on `seq`: newest first, ``WHERE ... AND seq < before_seq ORDER BY seq DESC LIMIT n``, so page
10,000 costs what page 1 costs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from sqlalchemy import Connection, inspect

from compute_budget.store.backends import Backend
from compute_budget.store.browse_sql import BrowseStatements as BrowseStatements
from compute_budget.store.session import Reading, StoreSession
from compute_budget.store.table import CHECKPOINTS_TABLE

MAX_PAGE_ROWS = 500

# The store's own table of signed checkpoints, once the seal (spec section 8) adds one. Until then no store
# has it, and the workbench says so.
SIGNED_CHECKPOINT_TABLES = ("compute_budget_signed_checkpoints", "compute_budget_checkpoints")


@dataclass(frozen=True, slots=True)
class DecisionFilter:
    """Which rows a page shows: equal to each given column, and `after_seq < seq < before_seq`."""

    status: str | None = None
    reason_code: str | None = None
    gate_decision_id: str | None = None
    policy_version: str | None = None
    after_seq: int | None = None
    before_seq: int | None = None

    def present(self) -> tuple[str, ...]:
        """The names of the filters given, in field order (the key of the page statement)."""
        return tuple(item.name for item in fields(self) if getattr(self, item.name) is not None)

    def values(self) -> tuple[Any, ...]:
        """The given filters' values, in `present()` order."""
        return tuple(getattr(self, name) for name in self.present())


@dataclass(frozen=True, slots=True)
class Page:
    """One keyset page, newest first: raw rows (`ROW_COLUMNS` order) and the bounds of its neighbour pages.

    `next_before_seq`: pass as `before_seq` for the next, older page (None: this is the oldest page).
    `newer_before_seq`: the `before_seq` of the page before this one, newer (None: no newer rows;
    `newer_is_first`: the newer page is the first page, which takes no `before_seq` at all).
    """

    rows: list[tuple[Any, ...]]
    next_before_seq: int | None
    newer_before_seq: int | None
    newer_is_first: bool


@dataclass(frozen=True, slots=True)
class Link:
    """A row's place in the chain: its `seq`, `chain_hash` and `budget_id`, as stored."""

    seq: Any
    chain_hash: Any
    budget_id: Any


class Browsing:
    """Read-only browsing queries of an opened store (`BudgetStore` delegates to it)."""

    def __init__(self, session: StoreSession) -> None:
        self._session = session

    def _reading(self) -> Reading:
        return self._session.reading()

    def _logical(self, row: Any) -> tuple[Any, ...]:
        return self._session.logical(row)

    @property
    def _backend(self) -> Backend:
        return self._session.backend

    @property
    def _browse(self) -> BrowseStatements:
        return self._backend.browse

    def page(self, where: DecisionFilter, *, limit: int = 50) -> Page:
        """One keyset page of raw rows matching `where`, newest first, at most `limit` (1..500) rows."""
        limit = max(1, min(int(limit), MAX_PAGE_ROWS))
        sql = self._browse
        present = where.present()
        with self._reading() as connection:
            rows = [
                self._logical(row)
                for row in connection.exec_driver_sql(sql.page(present, limit + 1), self._params(where))
            ]
            more = len(rows) > limit
            rows = rows[:limit]
            newer_before, newer_first = self._newer(connection, where, rows, limit)
        next_before = rows[-1][0] if more and rows and type(rows[-1][0]) is int else None
        return Page(rows, next_before, newer_before, newer_first)

    def filtered_counts(self, where: DecisionFilter) -> dict[tuple[str, str], int]:
        """How many rows matching `where` have each (status, reason_code): a charts' counts under filters."""
        with self._reading() as connection:
            return {
                (str(status), str(reason)): int(count)
                for status, reason, count in connection.exec_driver_sql(
                    self._browse.counts_where(where.present()), self._params(where)
                )
            }

    def forward_page(self, where: DecisionFilter, *, limit: int = 50) -> tuple[list[tuple[Any, ...]], int | None]:
        """The first `limit` (1..500) matching rows after `where.after_seq`, oldest first, and the `after_seq` of
        the next page (None when these are the last): a loop tailing new rows reads each exactly once."""
        limit = max(1, min(int(limit), MAX_PAGE_ROWS))
        with self._reading() as connection:
            rows = [
                self._logical(row)
                for row in connection.exec_driver_sql(self._browse.forward(where.present(), limit + 1),
                                                      self._params(where))
            ]
        more = len(rows) > limit
        rows = rows[:limit]
        following = rows[-1][0] if more and rows and type(rows[-1][0]) is int else None
        return rows, following

    def _newer(
        self, connection: Connection, where: DecisionFilter, rows: list[tuple[Any, ...]], limit: int
    ) -> tuple[int | None, bool]:
        """The `before_seq` of the newer page: the (limit+1)-th matching seq above this page's top, if any."""
        if where.before_seq is None:
            return None, False  # this is the first page
        top = rows[0][0] if rows and type(rows[0][0]) is int else where.before_seq - 1
        above = DecisionFilter(
            where.status,
            where.reason_code,
            where.gate_decision_id,
            where.policy_version,
            top if where.after_seq is None else max(top, where.after_seq),
            None,
        )
        seqs = [
            row[0]
            for row in connection.exec_driver_sql(self._browse.newer(above.present(), limit + 1), self._params(above))
        ]
        if not seqs:
            return None, False
        if len(seqs) <= limit:
            return None, True
        return int(seqs[limit]), False

    def raw_row(self, budget_id: str) -> tuple[Any, ...] | None:
        """The stored row with this `budget_id` as raw column values (`ROW_COLUMNS` order), or None."""
        with self._reading() as connection:
            row = connection.exec_driver_sql(self._browse.by_budget_id, (budget_id,)).first()
        return None if row is None else self._logical(row)

    def _params(self, where: DecisionFilter) -> tuple[Any, ...]:
        """The filter values as stored (PostgreSQL keeps a gate id holding NUL encoded, see `text_codec`)."""
        if where.gate_decision_id is None:
            return where.values()
        return replace(where, gate_decision_id=self._backend.stored_text(where.gate_decision_id)).values()

    def neighbours(self, seq: int) -> tuple[Link | None, Link | None]:
        """The stored rows just before and just after `seq` (their links, as stored), each or None."""
        sql = self._browse
        with self._reading() as connection:
            before = connection.exec_driver_sql(sql.link_before, (seq,)).first()
            after = connection.exec_driver_sql(sql.link_after, (seq,)).first()
        return (
            None if before is None else Link(before[0], before[1], before[2]),
            None if after is None else Link(after[0], after[1], after[2]),
        )

    def link_at_seq(self, seq: int) -> Link | None:
        """The stored row at exactly `seq` (its link, as stored), or None."""
        with self._reading() as connection:
            row = connection.exec_driver_sql(self._browse.link_at, (seq,)).first()
        return None if row is None else Link(row[0], row[1], row[2])

    def head_seq(self) -> int:
        """The highest stored integer seq (0 for an empty store); cheaper than `head()`, never refuses."""
        with self._reading() as connection:
            value = connection.exec_driver_sql(self._browse.head_seq).scalar()
        return value if type(value) is int else 0

    def counts(self, low: int, high: int) -> dict[tuple[str, str], int]:
        """How many rows of each (status, reason_code) lie at low < seq <= high."""
        with self._reading() as connection:
            return {
                (str(status), str(reason)): int(count)
                for status, reason, count in connection.exec_driver_sql(self._browse.counts, (low, high))
            }

    def newest_signed_checkpoints(self, limit: int = 50) -> list[tuple[Any, int | None, str | None]]:
        """(id, tree_size, note) of the newest stored signed checkpoints, newest first, at most `limit`; a value not
        of its column's type (set by hand) comes back as None, for the page to show the entry as unreadable."""
        if self.signed_checkpoint_table() is None:
            return []
        with self._reading() as connection:
            rows = connection.exec_driver_sql(
                f"SELECT id, tree_size, note FROM {CHECKPOINTS_TABLE} ORDER BY id DESC LIMIT {int(limit)}"
            ).fetchall()
        return [
            (row[0], row[1] if type(row[1]) is int else None, row[2] if isinstance(row[2], str) else None)
            for row in rows
        ]

    def signed_checkpoint_table(self) -> str | None:
        """The name of the store's table of signed checkpoints, when it has one (None before the seal)."""
        with self._reading() as connection:
            names = set(inspect(connection).get_table_names())
        return next((name for name in SIGNED_CHECKPOINT_TABLES if name in names), None)


__all__ = ["MAX_PAGE_ROWS", "BrowseStatements", "Browsing", "DecisionFilter", "Link", "Page"]
