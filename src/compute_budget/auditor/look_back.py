"""The look-back of an incremental audit (spec 9.9.7): below its `--since` checkpoint, re-derive and re-hash the
full tiles due today and the partial last tile, take the other tiles' hashes from the stored tree, and hold the
root they give together against the checkpoint's.

An `--since` audit trusts the rows below its checkpoint; an insider who can drop the guard, edit a row and put the
guard back would stay unseen until the weekly full audit. With `--look-back N`, tile t (rows 256t+1..256t+256) is
re-checked on the days whose UTC day number d has t mod N == d mod N, so N nightly audits in a row re-check every
row. A stored tile hash that differs from its rows, or stored tile hashes that do not give the checkpoint's root
(the stored tree edited to hide the change), is a `checkpoint_mismatch`; a re-checked row that does not hold is
reported as the full audit reports it. Memory stays O(log n): tiles stream by in order.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from compute_budget.auditor.report import LookBack
from compute_budget.auditor.source import AuditSource, LogView
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.head import GENESIS_CHAIN_HASH
from compute_budget.core.log.merkle import CompactRange
from compute_budget.core.log.tree import TILE_LEVEL, TILE_SIZE, due_tiles, root_of_tiles
from compute_budget.core.verify import Finding, FindingKind, RangeResult, check_row
from compute_budget.errors import ArgumentTypeError

SECONDS_PER_DAY = 86_400


def day_number(epoch_seconds: float) -> int:
    """The UTC day number (days since 1970-01-01) of a moment given in seconds since the epoch."""
    return int(epoch_seconds // SECONDS_PER_DAY)


@dataclass(slots=True)
class _Walk:
    """The look-back's running state: the tiles' frontier, what it re-checked and found."""

    tiles: CompactRange = field(default_factory=CompactRange)
    checked_tiles: int = 0
    rows: RangeResult = field(default_factory=RangeResult)
    findings: list[Finding] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


LookedBack = tuple[LookBack, list[Finding], list[str]]  # what `look_below` found, and its warnings


def look_below(
    snapshot: LogView, since: Checkpoint, n: int, day: int, max_seq: int
) -> LookedBack:
    """Re-check today's slice of the tiles below `since` (see the module docstring): the summary, the findings
    (row findings first, then the tree's) and warnings for the report."""
    started = time.perf_counter()
    size = since.seq
    walk = _Walk()
    if 0 < size <= max_seq:  # a truncated store is reported already; nothing below it to look back on
        _walk_full_tiles(snapshot, walk, size, due_tiles(size, n, day), n)
        partial = _check_tile(snapshot, walk, size >> TILE_LEVEL, size)
        root = root_of_tiles(walk.tiles, partial)
        if since.root is not None and root != since.root:
            walk.findings.append(
                Finding(
                    FindingKind.CHECKPOINT_MISMATCH,
                    since.budget_id,
                    since.seq,
                    f"the tiles below seq {size} ({walk.checked_tiles} re-hashed from their rows, the others from the "
                    f"stored tree) give root {_b64(root)}, the checkpoint says {_b64(since.root)}: history before it "
                    "or the stored tree was rewritten",
                )
            )
        elif since.root is None:
            walk.warnings.append(
                f"the --since checkpoint carries no root: the look-back held {walk.checked_tiles} tile(s) against "
                "the stored tree only (keep a checkpoint with a root: compute-budget 0.4 and later write one)"
            )
    findings = walk.rows.findings + walk.findings
    summary = LookBack(
        n=n,
        slice=day % n,
        tiles=walk.checked_tiles,
        rows=walk.rows.rows,
        seconds=time.perf_counter() - started,
        findings=len(findings),
    )
    return summary, findings, walk.warnings


def _walk_full_tiles(snapshot: LogView, walk: _Walk, size: int, due: range, n: int) -> None:
    """Every full tile below `size`, in order: the due ones re-checked from their rows, the others' hashes from the
    stored tree (a tile whose stored hash is missing or unreadable is re-checked too, and is a finding)."""
    full = size >> TILE_LEVEL
    stored = _stored_tiles(snapshot, full)
    any_nodes = snapshot.has_tree_nodes()
    for tile in range(full):
        kept = next(stored)
        if tile % n == due.start:
            computed = _check_tile(snapshot, walk, tile, size).root()
            if kept is not None and kept != computed:
                walk.findings.append(_tile_finding(tile, f"is stored as {kept.hex()}, its rows give {computed.hex()}"))
            elif kept is None and any_nodes:
                walk.findings.append(_tile_finding(tile, "is missing from the store or unreadable"))
            walk.tiles.extend([computed])
        elif kept is not None:
            walk.tiles.extend([kept])
        else:
            if any_nodes:
                walk.findings.append(_tile_finding(tile, "is missing from the store or unreadable"))
            elif not walk.warnings:
                walk.warnings.append(
                    "the store keeps no Merkle tree yet (migrated, not written to since): the look-back re-checked "
                    "every tile below the checkpoint"
                )
            walk.tiles.extend([_check_tile(snapshot, walk, tile, size).root()])


def _stored_tiles(snapshot: LogView, count: int) -> Iterator[bytes | None]:
    """The stored hash of each tile 0..count-1 in order (None where none is stored or it is not a hash)."""
    expected = 0
    if count:
        for index, value in snapshot.nodes_at(TILE_LEVEL, 0, count - 1):
            while expected < index:
                yield None
                expected += 1
            yield _hash(value)
            expected += 1
    while True:
        yield None


def _hash(value: str) -> bytes | None:
    try:
        return bytes.fromhex(value) if len(value) == 64 else None
    except ValueError:
        return None


def _check_tile(snapshot: LogView, walk: _Walk, tile: int, size: int) -> CompactRange:
    """Re-derive and re-link the rows of `tile` (up to `size`), each against the stored row before it; returns the
    tree of their leaves (the tile's hash is its root when the tile is full)."""
    low = tile << TILE_LEVEL
    high = min(low + TILE_SIZE, size)
    frontier = CompactRange()
    if high <= low:
        return frontier
    walk.checked_tiles += 1
    prev_seq, prev_chain = snapshot.link_at_or_before(low) or (0, GENESIS_CHAIN_HASH)
    result = walk.rows
    for batch in snapshot.rows_between(low, high, batch_rows=TILE_SIZE):
        for row in batch:
            prev_seq, prev_chain = check_row(row, prev_seq, prev_chain, result)
    frontier.extend(result.leaves)
    result.leaves.clear()
    return frontier


def _tile_finding(tile: int, what: str) -> Finding:
    first, last = (tile << TILE_LEVEL) + 1, (tile + 1) << TILE_LEVEL
    return Finding(
        FindingKind.CHECKPOINT_MISMATCH,
        None,
        last,
        f"look-back: tile {tile} (rows {first}..{last}): the stored tree node (level {TILE_LEVEL}, index {tile}) "
        f"{what}: the rows or the stored tree changed after the checkpoint was taken",
    )


def _b64(value: bytes | None) -> str:
    return "none" if value is None else base64.b64encode(value).decode("ascii")


__all__ = ["day_number", "look_below"]


def check_look_back(n: object, day: object, since: object) -> None:
    """`look_back` is a whole number (0: off) and needs `since`; the day is a whole number."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ArgumentTypeError(f"look_back is a whole number of days (0: off), not {n!r}")
    if isinstance(day, bool) or not isinstance(day, int):
        raise ArgumentTypeError(f"look_back_day is a UTC day number, not {day!r}")
    if n and since is None:
        raise ArgumentTypeError("look_back looks back below a since checkpoint: give since too")


def look_back_in(store: AuditSource, since: Checkpoint, n: int, day: int, max_seq: int) -> LookedBack:
    """The look-back, on a snapshot of its own: in the auditing process, while any workers
    check the new rows."""
    with store.snapshot() as snapshot:
        return look_below(snapshot, since, n, day, max_seq)
