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

from compute_budget.core.log.head import GENESIS_CHAIN_HASH, ChainHead
from compute_budget.core.log.merkle import CompactRange
from compute_budget.core.seal_checks import TreeCheck
from compute_budget.core.verify import RangeResult, check_row
from compute_budget.errors import CopyVerificationFailed, InputError, StoreUnavailable
from compute_budget.store.facade import BudgetStore
from compute_budget.store.seal_tables import check_origin_name
from compute_budget.store.seal_tables import new_origin as fresh_origin
from compute_budget.store.snapshot import Snapshot


def copy_store(
    source: str | os.PathLike[str],
    destination: str | os.PathLike[str],
    *,
    on_progress: Callable[[int, int], None] | None = None,
    through: int | None = None,
    new_origin: str | None = None,
) -> ChainHead:
    """Copy every row of `source`, its origin and its signed checkpoints into the empty store `destination`;
    returns the copied head.

    `through=SEQ` is salvage (spec 9.8): only rows 1..SEQ, each of which must hold, into a new origin
    (`new_origin`, else a random one), with no checkpoint, and one provenance row naming the source's origin, SEQ,
    and the root and chain hash at SEQ. The destination's first signed append then needs `--adopt-unsigned SEQ`.
    """
    _check_options(through, new_origin)
    with BudgetStore.open(source, readonly=True) as origin, origin.snapshot() as snapshot:
        expected = origin.head()
        log = snapshot.origin()
        end, total, chosen = _extent(origin, expected, log, through, new_origin)
        # A copy never signs: the environment's signing key is not even read for the destination. A whole copy
        # sets the source's origin in `import_history`, which names a clashing one.
        named = chosen if through is not None else None
        with BudgetStore.open(destination, origin=named, allow_unsigned=True) as target:
            try:
                if target.location.url == origin.location.url:
                    raise StoreUnavailable("source and destination are the same store")
                head = _copy_rows(origin, snapshot, target, (log, chosen), (end, total, through), on_progress)
            except BaseException:
                target.discard_if_unused()  # a failed copy leaves no new, empty database file behind
                raise
    if head.seq != end or (through is None and head != expected):  # pragma: no cover  (changed under a snapshot)
        raise CopyVerificationFailed(f"copied head {head} differs from the source's at seq {end}")
    return head


def _check_options(through: int | None, new_origin: str | None) -> None:
    """A new origin only with `through`, a valid origin name, and `through` a row number."""
    if through is None and new_origin is not None:
        raise InputError("a new origin is for a salvage copy: give --through SEQ with --origin")
    if new_origin is not None:
        check_origin_name(new_origin)
    if through is not None and (type(through) is not int or through < 0):
        raise InputError(f"--through takes a row number, not {through!r}")


def _extent(
    origin: BudgetStore, expected: ChainHead, log: str | None, through: int | None, new_origin: str | None
) -> tuple[int, int, str | None]:
    """The last seq to copy, the rows progress counts, and the destination's origin (a new one for salvage)."""
    if through is None:
        return expected.seq, origin.count(), log
    if through > expected.seq:
        raise StoreUnavailable(f"{origin.location.display} holds {expected.seq} rows, fewer than --through {through}")
    if log is None:
        raise StoreUnavailable(f"{origin.location.display} has no origin: there is nothing to salvage from")
    chosen = new_origin if new_origin is not None else fresh_origin()
    if chosen == log:
        raise InputError(f"a salvaged store takes a new origin, not the source's {log}")
    return through, through, chosen


def _copy_rows(
    origin: BudgetStore,
    snapshot: Snapshot,
    target: BudgetStore,
    origins: tuple[str | None, str | None],
    extent: tuple[int, int, int | None],
    on_progress: Callable[[int, int], None] | None,
) -> ChainHead:
    """Import the source's rows into `target`, each verified as it passes (and, for a whole copy, its checkpoints,
    witnesses, cosignatures, repairs and provenance); `origins` is (the source's, the destination's)."""
    log, chosen = origins
    end, total, through = extent
    done = [0]

    def advance(count: int) -> None:
        done[0] += count
        if on_progress is not None:
            on_progress(done[0], total)

    stored = snapshot.checkpoints_between(0, end) if through is None else ()
    tree = TreeCheck(CompactRange(), end=end, origin=log, checkpoints=stored)
    raw = origin.iter_raw_rows()
    verified = _verified(raw if through is None else _first(raw, through), tree)
    try:
        if through is None:
            return target.import_history(
                verified,
                origin=log,
                checkpoints=_held(tree, origin.iter_checkpoint_rows()),
                provenance=snapshot.provenance(),
                on_progress=advance,
                witness_rows=origin.iter_witness_rows(),
                cosignature_rows=origin.iter_cosignature_rows(),
                repair_rows=snapshot.repairs(),
            )
        # salvage: a new origin, no checkpoint or repair (its rows each held), and provenance
        return target.import_history(verified, origin=chosen, provenance_from=log, on_progress=advance)
    finally:  # close the source's cursor now, while its store is still open, whatever happened
        verified.close()
        raw.close()


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


def _first(rows: Iterator[tuple[Any, ...]], count: int) -> Iterator[tuple[Any, ...]]:
    for index, row in enumerate(rows):
        if index >= count:
            return
        yield row
