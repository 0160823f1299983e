"""Copying a whole history from one store into an empty one (SQLite to PostgreSQL above all).

Rows move exactly as stored (every column, `recorded_at` and the chain included), in `seq` order, each
verified as it passes with the auditor's own row check; the first row that fails stops the copy and nothing
is written. The seal moves with them: the destination takes the source's origin, rebuilds the same Merkle tree
from the rows, and receives every signed checkpoint, each held against that tree first (one that no longer
matches the rows stops the copy too). The destination then audits clean, and checkpoints taken on the source
verify there. A copy that fails removes the destination file it created.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterator
from typing import Any

from compute_budget.core.chain import GENESIS_CHAIN_HASH, ChainHead
from compute_budget.core.merkle import CompactRange
from compute_budget.core.seal import TreeCheck
from compute_budget.core.verify import RangeResult, check_row
from compute_budget.errors import CopyVerificationFailed, StoreUnavailable
from compute_budget.store import BudgetStore


def copy_store(
    source: str | os.PathLike[str],
    destination: str | os.PathLike[str],
    *,
    on_progress: Callable[[int, int], None] | None = None,
) -> ChainHead:
    """Copy every row of `source`, its origin and its signed checkpoints into the empty store `destination`;
    returns the copied head."""
    with BudgetStore.open(source, readonly=True) as origin, origin.snapshot() as snapshot:
        total = origin.count()
        expected = origin.head()
        log = snapshot.origin()
        with BudgetStore.open(destination) as target:
            try:
                if target.location.url == origin.location.url:
                    raise StoreUnavailable("source and destination are the same store")
                done = [0]

                def advance(count: int) -> None:
                    done[0] += count
                    if on_progress is not None:
                        on_progress(done[0], total)

                tree = TreeCheck(
                    CompactRange(),
                    end=expected.seq,
                    origin=log,
                    checkpoints=snapshot.checkpoints_between(0, expected.seq),
                )
                raw = origin.iter_raw_rows()
                verified = _verified(raw, tree)
                try:
                    head = target.import_history(
                        verified,
                        origin=log,
                        checkpoints=_held(tree, origin.iter_checkpoint_rows()),
                        on_progress=advance,
                    )
                finally:  # close the source's cursor now, while its store is still open, whatever happened
                    verified.close()
                    raw.close()
            except BaseException:
                target.discard_if_unused()  # a failed copy leaves no new, empty database file behind
                raise
    if head != expected:  # pragma: no cover  (the source changed under a read transaction)
        raise CopyVerificationFailed(f"copied head {head} differs from the source head {expected}")
    return head


def _verified(rows: Iterator[tuple[Any, ...]], tree: TreeCheck) -> Generator[tuple[Any, ...], None, None]:
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
        tree.add(result.leaves, [row])
        yield row


def _held(
    tree: TreeCheck, checkpoints: Iterator[tuple[int, str, str, str, str]]
) -> Iterator[tuple[int, str, str, str, str]]:
    """The source's signed checkpoints, once every one of them has been held against the copied rows' tree."""
    outcome = tree.finish()
    if outcome.findings:
        finding = outcome.findings[0]
        raise CopyVerificationFailed(
            f"a signed checkpoint of the source does not hold: {finding.detail}; nothing was copied "
            "(run `compute-budget audit` on the source)"
        )
    yield from checkpoints
