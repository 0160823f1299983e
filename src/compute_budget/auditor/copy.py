"""Copying a whole history from one store into an empty one (SQLite to PostgreSQL above all).

Rows move exactly as stored (every column, `recorded_at` and the chain included), in `seq` order, each
verified as it passes with the auditor's own row check; the first row that fails stops the copy and nothing
is written (and a destination file the copy created is removed again). The destination then audits clean, and
checkpoints taken on the source verify there.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterator
from typing import Any

from compute_budget.core.chain import GENESIS_CHAIN_HASH, ChainHead
from compute_budget.core.verify import RangeResult, check_row
from compute_budget.errors import CopyVerificationFailed, StoreUnavailable
from compute_budget.store import BudgetStore


def copy_store(
    source: str | os.PathLike[str],
    destination: str | os.PathLike[str],
    *,
    on_progress: Callable[[int, int], None] | None = None,
) -> ChainHead:
    """Copy every row of `source` into the empty store `destination`; returns the copied head."""
    with BudgetStore.open(source, readonly=True) as origin:
        total = origin.count()
        expected = origin.head()
        with BudgetStore.open(destination) as target:
            try:
                if target.location.url == origin.location.url:
                    raise StoreUnavailable("source and destination are the same store")
                done = [0]

                def advance(count: int) -> None:
                    done[0] += count
                    if on_progress is not None:
                        on_progress(done[0], total)

                raw = origin.iter_raw_rows()
                verified = _verified(raw)
                try:
                    head = target.import_history(verified, on_progress=advance)
                finally:  # close the source's cursor now, while its store is still open, whatever happened
                    verified.close()
                    raw.close()
            except BaseException:
                target.discard_if_unused()  # a failed copy leaves no new, empty database file behind
                raise
    if head != expected:  # pragma: no cover  (the source changed under a read transaction)
        raise CopyVerificationFailed(f"copied head {head} differs from the source head {expected}")
    return head


def _verified(rows: Iterator[tuple[Any, ...]]) -> Generator[tuple[Any, ...], None, None]:
    prev_seq, prev_chain = 0, GENESIS_CHAIN_HASH
    for row in rows:
        result = RangeResult()
        prev_seq, prev_chain = check_row(row, prev_seq, prev_chain, result)
        if result.findings:
            finding = result.findings[0]
            raise CopyVerificationFailed(
                f"source row seq {finding.seq} (budget_id {finding.budget_id}) fails verification: "
                f"{finding.kind.value}: {finding.detail}; nothing was copied (run `compute-budget audit` on the source)"
            )
        yield row
