"""The auditor's reads of an opened store: one snapshot transaction, and raw rows over a `seq` range in batches."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from compute_budget.store.session import StoreSession
from compute_budget.store.snapshot import Snapshot


class Scans:
    """The snapshot and scan role of an opened store (`BudgetStore` delegates to it)."""

    def __init__(self, session: StoreSession) -> None:
        self._session = session

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[Snapshot]:
        """One read transaction whose queries all see the same rows."""
        session = self._session
        with session.reading() as connection:
            yield Snapshot(session.backend.consistent(connection), session.statements, session.seal)

    def scan(self, low: int, high: int, *, batch_rows: int) -> Iterator[list[tuple[Any, ...]]]:
        """Raw rows with low < seq <= high in seq order, as batches of plain tuples, streamed."""
        self._session.require_open()  # now, not at the first batch: a closed store refuses the call itself
        return self._scan(low, high, batch_rows)

    def _scan(self, low: int, high: int, batch_rows: int) -> Iterator[list[tuple[Any, ...]]]:
        session = self._session
        with session.reading() as connection:
            yield from session.backend.scan(connection, session.statements.seq_range, low, high, batch_rows)


__all__ = ["Scans"]
