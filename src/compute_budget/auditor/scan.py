"""The replay auditor (spec section 6): re-derive every stored row, re-link the chain, check checkpoints.

It opens the store read-only and streams it in `seq` order, so memory does not grow with the row count.
Each row is checked against the row stored before it (its `seq` and `chain_hash`), never against a running
state, so a bad row never hides or multiplies findings about the rows after it, and `--jobs N` can split
the rows into `seq` ranges that give exactly the single-process report.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from compute_budget.auditor.report import AuditReport, utc_now
from compute_budget.core.chain import GENESIS_CHAIN_HASH, ChainHead
from compute_budget.core.checkpoint import Checkpoint
from compute_budget.core.verify import Finding, FindingKind, RangeResult, check_row
from compute_budget.errors import ArgumentTypeError, CheckpointError, NoHistory
from compute_budget.store import BudgetStore
from compute_budget.store.facade import Snapshot

BATCH_ROWS = 2000
MIN_ROWS_PER_JOB = 10_000  # below this a range is not worth a process of its own


def audit(
    target: str | os.PathLike[str] | None = None,
    *,
    checkpoint: Checkpoint | ChainHead | Mapping[str, Any] | str | os.PathLike[str] | None = None,
    since: Checkpoint | ChainHead | Mapping[str, Any] | str | os.PathLike[str] | None = None,
    jobs: int = 1,
    on_progress: Callable[[int, int], None] | None = None,
    through: int | None = None,
) -> AuditReport:
    """Audit the store at `target` read-only. `checkpoint`: prove history extends it. `since`: prove it,
    then check only the rows after it. `through`: check only the rows up to this `seq` (with `since`, a
    `seq` range). `jobs`: processes, each auditing a `seq` range.

    `on_progress(rows_done, rows_total)` is called as ranges advance (single process: every batch).
    Raises `StoreUnavailable` (and its subclasses) when the audit cannot run at all.
    """
    started = time.perf_counter()
    started_at = utc_now()
    checkpoint = as_checkpoint(checkpoint) if checkpoint is not None else None
    since = as_checkpoint(since) if since is not None else None
    try:
        opened = BudgetStore.open(target, readonly=True)
    except NoHistory as gone:
        proofs = [proof for proof in (checkpoint, since) if proof is not None and proof.seq > 0]
        if not proofs:
            raise
        return _history_gone(gone, proofs, checkpoint, since, started)
    with opened as store:
        with store.snapshot() as snapshot:
            plan = _plan(snapshot, since, jobs, through)
            anchors = [_anchor(snapshot, low, since) for low, _ in plan.ranges]
            findings_before: list[Finding] = []
            for proof in (checkpoint, since):
                if proof is not None:
                    findings_before += _check_checkpoint(snapshot, proof, plan.max_seq)
            if since is None and plan.end_seq == plan.max_seq:
                outliers = _outliers(snapshot, plan)
            elif plan.end_seq == plan.max_seq:
                # The incremental audit trusts the rows up to the checkpoint, but not the row count: a row whose
                # seq is text or a real, or a row deleted below the checkpoint, shows as count != head seq.
                rows_stored = snapshot.count()
                outliers = _outliers(snapshot, plan) if rows_stored != plan.max_seq else []
                if rows_stored != plan.max_seq and not outliers:
                    outliers = [_count_mismatch(rows_stored, plan.max_seq)]
            else:
                outliers = []  # a range audit (the Workbench's) judges only the rows of its range
            stored_head = _stored_row_head(snapshot, plan.end_seq)
            findings_before += [
                Finding(FindingKind.SCHEMA_TAMPERED, None, None, problem) for problem in snapshot.schema_problems()
            ]
            privileges = snapshot.write_privileges()
        tasks = [(low, high, anchor) for (low, high), anchor in zip(plan.ranges, anchors, strict=True)]
        processes = len(tasks) if jobs > 1 and len(tasks) > 1 else 1
        if processes > 1:
            results = _run_parallel(store.location.target, tasks, jobs)
        else:
            total = sum(high - low for low, high in plan.ranges)
            results = [_audit_range(store, low, high, anchor, on_progress, total) for low, high, anchor in tasks]
        database = store.location.display
    merged = RangeResult()
    findings = list(findings_before)
    last = stored_head or ChainHead(
        plan.start_seq, since.chain_hash if since else GENESIS_CHAIN_HASH, since.budget_id if since else None
    )
    for result in results:
        merged.rows += result.rows
        findings += result.findings
        merged.status_counts.update(result.status_counts)
        merged.reason_counts.update(result.reason_counts)
        merged.policy_counts.update(result.policy_counts)
        if result.rows:
            last = ChainHead(result.last_seq, result.last_chain_hash, result.last_budget_id)
    findings += outliers
    return AuditReport(
        database=database,
        rows_checked=merged.rows + sum(finding.kind is FindingKind.MALFORMED_ROW for finding in outliers),
        findings=tuple(findings),
        head=last,
        status_counts=dict(merged.status_counts),
        reason_counts=dict(merged.reason_counts),
        elapsed_seconds=time.perf_counter() - started,
        checkpoint=checkpoint,
        since=since,
        jobs=processes,
        warnings=(
            f"the audit's database role may {', '.join(privileges)} the decisions table: the audit itself never "
            "writes, but only a SELECT-only role guarantees that (see the README's PostgreSQL section)",
        )
        if privileges
        else (),
        policy_counts=dict(merged.policy_counts),
        started_at=started_at,
        finished_at=utc_now(),
    )


@dataclass(frozen=True, slots=True)
class _Plan:
    start_seq: int
    max_seq: int
    end_seq: int  # the last seq checked: max_seq, or less when the audit stops `through` a seq
    ranges: list[tuple[int, int]]


def _plan(snapshot: Snapshot, since: Checkpoint | None, jobs: int, through: int | None = None) -> _Plan:
    start = since.seq if since is not None else 0
    max_seq = snapshot.max_seq()
    end = max_seq if through is None else max(min(max_seq, through), start)
    span = max(end - start, 0)
    parts = max(1, min(jobs, span // MIN_ROWS_PER_JOB + 1)) if jobs > 1 else 1
    bounds = [start + span * index // parts for index in range(parts + 1)]
    return _Plan(start, max_seq, end, [(bounds[index], bounds[index + 1]) for index in range(parts)])


def _stored_row_head(snapshot: Snapshot, max_seq: int) -> ChainHead | None:
    """The stored row at the highest seq, when it is readable (the report's head when no row is scanned)."""
    if max_seq == 0:
        return None
    row = snapshot.link_at(max_seq)
    if row is None or type(row[0]) is not int or not isinstance(row[1], str) or not isinstance(row[2], str):
        return None
    return ChainHead(row[0], row[1], row[2])


def _anchor(snapshot: Snapshot, low: int, since: Checkpoint | None) -> tuple[int, str]:
    """The (seq, chain_hash) a range starts from: the stored row just before it, or genesis."""
    if since is not None and low == since.seq:
        return since.seq, since.chain_hash
    return snapshot.link_at_or_before(low) or (0, GENESIS_CHAIN_HASH)


def _check_checkpoint(snapshot: Snapshot, proof: Checkpoint, max_seq: int) -> list[Finding]:
    """A checkpoint holds iff the stored row at its `seq` carries its chain hash (seq 0: the genesis)."""
    if proof.seq == 0:
        if proof.chain_hash == GENESIS_CHAIN_HASH:
            return []
        return [Finding(FindingKind.CHECKPOINT_MISMATCH, None, 0, "checkpoint at seq 0 must name the genesis hash")]
    if proof.seq > max_seq:
        return [
            Finding(
                FindingKind.CHECKPOINT_MISMATCH,
                proof.budget_id,
                proof.seq,
                f"the store ends at seq {max_seq} but the checkpoint names seq {proof.seq}: history was truncated",
            )
        ]
    link = snapshot.link_at(proof.seq)
    row = None if link is None else (link[1], link[2])
    if row is None:
        return [
            Finding(
                FindingKind.CHECKPOINT_MISMATCH,
                proof.budget_id,
                proof.seq,
                f"no row has seq {proof.seq}, which the checkpoint names: history was rewritten",
            )
        ]
    if row[0] != proof.chain_hash or (proof.budget_id is not None and row[1] != proof.budget_id):
        return [
            Finding(
                FindingKind.CHECKPOINT_MISMATCH,
                str(row[1]),
                proof.seq,
                f"row {proof.seq} has chain_hash {row[0]} (budget_id {row[1]}), the checkpoint says "
                f"{proof.chain_hash} (budget_id {proof.budget_id}): history before it was rewritten",
            )
        ]
    return []


def _outliers(snapshot: Snapshot, plan: _Plan) -> list[Finding]:
    """Rows no `seq` range covers: a seq that is missing, not a positive integer, or beyond the head."""
    rows = snapshot.misplaced_rows(plan.max_seq)
    return [
        Finding(FindingKind.MALFORMED_ROW, str(budget_id), None, f"seq {seq!r} is not a positive integer in 1..head")
        for budget_id, seq in rows
    ]


def _history_gone(
    gone: NoHistory, proofs: list[Checkpoint], checkpoint: Checkpoint | None, since: Checkpoint | None, started: float
) -> AuditReport:
    """A database without its decisions table, audited against a checkpoint: the history it proves is gone.

    No SQLite trigger can stop DROP TABLE; the checkpoint kept elsewhere is what proves rows existed.
    """
    findings = tuple(
        Finding(
            FindingKind.CHECKPOINT_MISMATCH,
            proof.budget_id,
            proof.seq,
            f"the checkpoint names seq {proof.seq} but the store holds no decisions at all: "
            + ("its decisions table was dropped" if gone.dropped else "the database is empty"),
        )
        for proof in proofs
    )
    return AuditReport(
        database=gone.where,
        rows_checked=0,
        findings=findings,
        head=ChainHead(0, GENESIS_CHAIN_HASH, None),
        status_counts={},
        reason_counts={},
        elapsed_seconds=time.perf_counter() - started,
        checkpoint=checkpoint,
        since=since,
    )


def _count_mismatch(rows_stored: int, max_seq: int) -> Finding:
    return Finding(
        FindingKind.CHAIN_BREAK,
        None,
        None,
        f"the table holds {rows_stored} rows but its chain ends at seq {max_seq}: rows were deleted or added "
        "outside the chain (run a full audit to locate them)",
    )


def _run_parallel(url: str, tasks: list[tuple[int, int, tuple[int, str]]], jobs: int) -> list[RangeResult]:
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks))) as pool:
        futures = [pool.submit(_audit_range_in_worker, url, low, high, anchor) for low, high, anchor in tasks]
        return [future.result() for future in futures]


def _audit_range_in_worker(url: str, low: int, high: int, anchor: tuple[int, str]) -> RangeResult:
    with BudgetStore.open(url, readonly=True) as store:
        return _audit_range(store, low, high, anchor, None, 0)


def _audit_range(
    store: BudgetStore,
    low: int,
    high: int,
    anchor: tuple[int, str],
    on_progress: Callable[[int, int], None] | None,
    total: int,
) -> RangeResult:
    """Check rows with low < seq <= high, in order, each against the stored row before it."""
    result = RangeResult()
    prev_seq, prev_chain = anchor
    for batch in store.scan(low, high, batch_rows=BATCH_ROWS):
        for row in batch:
            prev_seq, prev_chain = check_row(row, prev_seq, prev_chain, result)
        if on_progress is not None:
            on_progress(result.rows, total)
    if on_progress is not None:
        on_progress(result.rows, total)
    return result


def as_checkpoint(value: Checkpoint | ChainHead | Mapping[str, Any] | str | os.PathLike[str]) -> Checkpoint:
    """A checkpoint from what a caller has at hand: a `Checkpoint`, a chain head, the document (as a mapping
    or as JSON text), or the path of a checkpoint file."""
    if isinstance(value, Checkpoint):
        return value
    if isinstance(value, ChainHead):
        return Checkpoint.from_head(value)
    if isinstance(value, Mapping):
        return Checkpoint.from_json(json.dumps(dict(value)))
    if not isinstance(value, str | os.PathLike):
        raise ArgumentTypeError(
            f"a checkpoint is a Checkpoint, a chain head, a mapping, JSON text or a path, not {type(value).__name__}"
        )
    text = os.fspath(value)
    if text.lstrip().startswith("{"):
        return Checkpoint.from_json(text)
    return load_checkpoint(text)


def load_checkpoint(path: str) -> Checkpoint:
    """Read a checkpoint file; raises `CheckpointError` when it is missing, not a regular file, or not a
    checkpoint. A FIFO or device is refused without blocking on it."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint file {path} does not exist") from None
    except IsADirectoryError:
        raise CheckpointError(f"checkpoint {path} is a folder, not a file") from None
    except OSError as error:
        raise CheckpointError(f"cannot read checkpoint {path}: {error.strerror or error}") from None
    try:
        info = os.fstat(descriptor)
        if stat.S_ISDIR(info.st_mode):
            raise CheckpointError(f"checkpoint {path} is a folder, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise CheckpointError(f"checkpoint {path} is not a regular file (a device, pipe or socket)")
        with os.fdopen(descriptor, "rb", closefd=False) as handle:
            text = handle.read(_MAX_CHECKPOINT_BYTES + 1)
    except OSError as error:
        raise CheckpointError(f"cannot read checkpoint {path}: {error.strerror or error}") from None
    finally:
        os.close(descriptor)
    if len(text) > _MAX_CHECKPOINT_BYTES:
        raise CheckpointError(f"checkpoint {path} is larger than any checkpoint ({_MAX_CHECKPOINT_BYTES} bytes)")
    return Checkpoint.from_json(text, source=f"checkpoint {path}")


_MAX_CHECKPOINT_BYTES = 1 << 20


__all__ = ["AuditReport", "Finding", "FindingKind", "audit", "load_checkpoint"]
