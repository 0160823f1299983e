"""The replay auditor (spec section 6): re-derive every stored row, re-link the chain, check checkpoints.

It opens the store read-only and streams it in `seq` order, so memory does not grow with the row count.
Each row is checked against the row stored before it (its `seq` and `chain_hash`), never against a running
state, so a bad row never hides or multiplies findings about the rows after it, and `--jobs N` can split
the rows into `seq` ranges that give exactly the single-process report.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from compute_budget.budget_id import compute_budget_id
from compute_budget.chain import GENESIS_CHAIN_HASH, ChainHead, chain_hash
from compute_budget.checkpoint import Checkpoint
from compute_budget.engine import translate
from compute_budget.errors import ComputeBudgetError, InputNotJson, MalformedDecision
from compute_budget.gate_json import ParsedGate, decide_parsed, parse_gate_json
from compute_budget.policy import POLICIES
from compute_budget.schema import COLUMNS, TABLE_NAME
from compute_budget.store import BudgetStore, spans_json, stored_from_row
from compute_budget.types import DECISION_FIELDS, ComputeBudgetDecision

BATCH_ROWS = 2000
MIN_ROWS_PER_JOB = 10_000  # below this a range is not worth a process of its own


class FindingKind(StrEnum):
    """The kinds of finding of spec section 6."""

    BUDGET_ID_MISMATCH = "budget_id_mismatch"
    REDERIVE_MISMATCH = "rederive_mismatch"
    CHAIN_BREAK = "chain_break"
    UNSUPPORTED_POLICY_VERSION = "unsupported_policy_version"
    MALFORMED_ROW = "malformed_row"
    CHECKPOINT_MISMATCH = "checkpoint_mismatch"


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem with one row (or with the chain as a whole, where `seq` may be None)."""

    kind: FindingKind
    budget_id: str | None
    seq: int | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        """The finding's JSON form."""
        return {"kind": self.kind.value, "budget_id": self.budget_id, "seq": self.seq, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class AuditReport:
    """What an audit found: `clean` iff no findings."""

    database: str
    rows_checked: int
    findings: tuple[Finding, ...]
    head: ChainHead
    status_counts: dict[str, int]
    reason_counts: dict[str, int]
    elapsed_seconds: float
    checkpoint: Checkpoint | None = None
    since: Checkpoint | None = None
    jobs: int = 1

    @property
    def clean(self) -> bool:
        """True when the audit found nothing."""
        return not self.findings

    @property
    def rows_per_second(self) -> float:
        """Audit throughput."""
        return self.rows_checked / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0

    def findings_by_kind(self) -> dict[str, int]:
        """How many findings of each kind, in the spec's order of kinds."""
        counts = Counter(finding.kind for finding in self.findings)
        return {kind.value: counts[kind] for kind in FindingKind if counts[kind]}

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON (spec section 7: `clean`, `rows_checked`, `findings`, and more)."""
        return {
            "clean": self.clean,
            "rows_checked": self.rows_checked,
            "findings": [finding.to_dict() for finding in self.findings],
            "findings_by_kind": self.findings_by_kind(),
            "database": self.database,
            "head": {"seq": self.head.seq, "chain_hash": self.head.chain_hash, "budget_id": self.head.budget_id},
            "status_counts": dict(sorted(self.status_counts.items())),
            "reason_counts": dict(sorted(self.reason_counts.items())),
            "checkpoint": self.checkpoint.to_dict() if self.checkpoint else None,
            "since": self.since.to_dict() if self.since else None,
            "mode": "incremental" if self.since else "full",
            "jobs": self.jobs,
            "elapsed_seconds": round(self.elapsed_seconds, 3),
            "rows_per_second": round(self.rows_per_second, 1),
        }


@dataclass(slots=True)
class _RangeResult:
    rows: int = 0
    findings: list[Finding] = field(default_factory=list)
    status_counts: Counter[str] = field(default_factory=Counter)
    reason_counts: Counter[str] = field(default_factory=Counter)
    last_seq: int = 0
    last_chain_hash: str = GENESIS_CHAIN_HASH
    last_budget_id: str | None = None


def new_range_result() -> _RangeResult:
    """An empty accumulator for `check_row`."""
    return _RangeResult()


def audit(
    target: str | os.PathLike[str] | None = None,
    *,
    checkpoint: Checkpoint | ChainHead | Mapping[str, Any] | str | os.PathLike[str] | None = None,
    since: Checkpoint | ChainHead | Mapping[str, Any] | str | os.PathLike[str] | None = None,
    jobs: int = 1,
    on_progress: Callable[[int, int], None] | None = None,
) -> AuditReport:
    """Audit the store at `target` read-only. `checkpoint`: prove history extends it. `since`: prove it,
    then check only the rows after it. `jobs`: processes, each auditing a `seq` range.

    `on_progress(rows_done, rows_total)` is called as ranges advance (single process: every batch).
    Raises `StoreUnavailable` (and its subclasses) when the audit cannot run at all.
    """
    started = time.perf_counter()
    checkpoint = as_checkpoint(checkpoint) if checkpoint is not None else None
    since = as_checkpoint(since) if since is not None else None
    with BudgetStore.open(target, readonly=True) as store:
        try:
            with store.engine.connect() as connection:
                plan = _plan(connection, since, jobs)
                anchors = [_anchor(connection, low, since) for low, _ in plan.ranges]
                findings_before: list[Finding] = []
                for proof in (checkpoint, since):
                    if proof is not None:
                        findings_before += _check_checkpoint(connection, proof, plan.max_seq)
                outliers = _outliers(connection, plan) if since is None else []
                stored_head = _stored_row_head(connection, plan.max_seq)
        except SQLAlchemyError as error:
            raise translate(error, store.location) from None
        tasks = [(low, high, anchor) for (low, high), anchor in zip(plan.ranges, anchors, strict=True)]
        processes = len(tasks) if jobs > 1 and len(tasks) > 1 else 1
        if processes > 1:
            results = _run_parallel(str(store.location.url.render_as_string(hide_password=False)), tasks, jobs)
        else:
            total = sum(high - low for low, high in plan.ranges)
            results = [_audit_range(store, low, high, anchor, on_progress, total) for low, high, anchor in tasks]
        database = store.location.display
    merged = _RangeResult()
    findings = list(findings_before)
    last = stored_head or ChainHead(
        plan.start_seq, since.chain_hash if since else GENESIS_CHAIN_HASH, since.budget_id if since else None
    )
    for result in results:
        merged.rows += result.rows
        findings += result.findings
        merged.status_counts.update(result.status_counts)
        merged.reason_counts.update(result.reason_counts)
        if result.rows:
            last = ChainHead(result.last_seq, result.last_chain_hash, result.last_budget_id)
    findings += outliers
    return AuditReport(
        database=database,
        rows_checked=merged.rows + len(outliers),
        findings=tuple(findings),
        head=last,
        status_counts=dict(merged.status_counts),
        reason_counts=dict(merged.reason_counts),
        elapsed_seconds=time.perf_counter() - started,
        checkpoint=checkpoint,
        since=since,
        jobs=processes,
    )


@dataclass(frozen=True, slots=True)
class _Plan:
    start_seq: int
    max_seq: int
    ranges: list[tuple[int, int]]


def _plan(connection: Connection, since: Checkpoint | None, jobs: int) -> _Plan:
    start = since.seq if since is not None else 0
    row = connection.exec_driver_sql(f"SELECT max(seq) FROM {TABLE_NAME} WHERE seq = CAST(seq AS BIGINT)").first()
    max_seq = int(row[0]) if row is not None and row[0] is not None else 0
    span = max(max_seq - start, 0)
    parts = max(1, min(jobs, span // MIN_ROWS_PER_JOB + 1)) if jobs > 1 else 1
    bounds = [start + span * index // parts for index in range(parts + 1)]
    return _Plan(start, max_seq, [(bounds[index], bounds[index + 1]) for index in range(parts)])


def _stored_row_head(connection: Connection, max_seq: int) -> ChainHead | None:
    """The stored row at the highest seq, when it is readable (the report's head when no row is scanned)."""
    if max_seq == 0:
        return None
    mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    row = connection.exec_driver_sql(
        f"SELECT seq, chain_hash, budget_id FROM {TABLE_NAME} WHERE seq = {mark}", (max_seq,)
    ).first()
    if row is None or type(row[0]) is not int or not isinstance(row[1], str) or not isinstance(row[2], str):
        return None
    return ChainHead(row[0], row[1], row[2])


def _anchor(connection: Connection, low: int, since: Checkpoint | None) -> tuple[int, str]:
    """The (seq, chain_hash) a range starts from: the stored row just before it, or genesis."""
    if since is not None and low == since.seq:
        return since.seq, since.chain_hash
    mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    row = connection.exec_driver_sql(
        f"SELECT seq, chain_hash FROM {TABLE_NAME} WHERE seq <= {mark} ORDER BY seq DESC LIMIT 1", (low,)
    ).first()
    if row is None or not isinstance(row[0], int) or not isinstance(row[1], str):
        return 0, GENESIS_CHAIN_HASH
    return int(row[0]), str(row[1])


def _check_checkpoint(connection: Connection, proof: Checkpoint, max_seq: int) -> list[Finding]:
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
    mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    row = connection.exec_driver_sql(
        f"SELECT chain_hash, budget_id FROM {TABLE_NAME} WHERE seq = {mark}", (proof.seq,)
    ).first()
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


def _outliers(connection: Connection, plan: _Plan) -> list[Finding]:
    """Rows no `seq` range covers: a seq that is missing, not a positive integer, or beyond the head."""
    mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    rows = connection.exec_driver_sql(
        f"SELECT budget_id, seq FROM {TABLE_NAME} WHERE seq IS NULL OR seq < 1 OR seq > {mark} "
        f"OR seq <> CAST(seq AS BIGINT)",
        (plan.max_seq,),
    )
    return [
        Finding(FindingKind.MALFORMED_ROW, str(budget_id), None, f"seq {seq!r} is not a positive integer in 1..head")
        for budget_id, seq in rows
    ]


def _run_parallel(url: str, tasks: list[tuple[int, int, tuple[int, str]]], jobs: int) -> list[_RangeResult]:
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks))) as pool:
        futures = [pool.submit(_audit_range_in_worker, url, low, high, anchor) for low, high, anchor in tasks]
        return [future.result() for future in futures]


def _audit_range_in_worker(url: str, low: int, high: int, anchor: tuple[int, str]) -> _RangeResult:
    with BudgetStore.open(url, readonly=True) as store:
        return _audit_range(store, low, high, anchor, None, 0)


def _audit_range(
    store: BudgetStore,
    low: int,
    high: int,
    anchor: tuple[int, str],
    on_progress: Callable[[int, int], None] | None,
    total: int,
) -> _RangeResult:
    """Check rows with low < seq <= high, in order, each against the stored row before it."""
    result = _RangeResult()
    prev_seq, prev_chain = anchor
    try:
        with store.engine.connect() as connection:
            mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"
            query = f"SELECT {', '.join(COLUMNS)} FROM {TABLE_NAME} WHERE seq > {mark} AND seq <= {mark} ORDER BY seq"
            for batch in _batches(connection, query, (low, high)):
                for row in batch:
                    prev_seq, prev_chain = check_row(row, prev_seq, prev_chain, result)
                if on_progress is not None:
                    on_progress(result.rows, total)
    except SQLAlchemyError as error:
        raise translate(error, store.location) from None
    if on_progress is not None:
        on_progress(result.rows, total)
    return result


def _batches(connection: Connection, query: str, params: tuple[Any, ...]) -> Iterator[list[tuple[Any, ...]]]:
    """Rows of `query` in batches of plain tuples, streamed: SQLite's own cursor (the fastest way through the
    rows), a server-side cursor elsewhere."""
    if connection.dialect.name == "sqlite":
        cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.execute(query, params)
            while batch := cursor.fetchmany(BATCH_ROWS):
                yield batch
        finally:
            cursor.close()
        return
    result = connection.execution_options(stream_results=True, yield_per=BATCH_ROWS).exec_driver_sql(query, params)
    try:
        for partition in result.partitions():
            yield [tuple(row) for row in partition]
    finally:
        result.close()


_INTEGER_COLUMNS = ("seq", "max_candidates", "max_depth", "max_steps", "max_parallelism")
# The plain (non-span) fields re-derivation compares: every hashed field but budget_id and evidence_spans.
_COMPARED = tuple(
    name for name in DECISION_FIELDS if name not in ("budget_id", "max_wallclock_ms", "evidence_spans", "explanation")
)


_NONE = type(None)
# The column types of a readable row, in `schema.COLUMNS` order (max_wallclock_ms: null in v1, or an integer).
_ROW_TYPES = (int, str, str, str, str, str, str, str, int, int, int, _NONE, int, str, str, str, str, str)
_ROW_TYPES_WITH_WALLCLOCK = (*_ROW_TYPES[:11], int, *_ROW_TYPES[12:])


def check_row(row: tuple[Any, ...], prev_seq: int, prev_chain: str, result: _RangeResult) -> tuple[int, str]:
    """Check one stored row (values in `schema.COLUMNS` order); returns the (seq, chain_hash) it leaves.

    The common, clean row takes the fast path: one type check, one chain hash, one re-derivation and one
    tuple comparison; findings are worked out in detail only for rows that fail.
    """
    result.rows += 1
    types = tuple(map(type, row))
    if types != _ROW_TYPES and types != _ROW_TYPES_WITH_WALLCLOCK:
        return _unreadable_row(row, prev_seq, prev_chain, result)
    seq, budget_id, policy_version, status, reason_code = row[0], row[1], row[2], row[6], row[7]
    stored_chain = row[17]
    findings = result.findings
    result.status_counts[status] += 1
    result.reason_counts[reason_code] += 1
    result.last_seq, result.last_chain_hash, result.last_budget_id = seq, stored_chain, budget_id

    # The chain: this row must link to the stored row before it.
    if seq != prev_seq + 1 or chain_hash(prev_chain, row[:17]) != stored_chain:
        findings.append(_chain_break(row, prev_seq, prev_chain))

    policy = POLICIES.get(policy_version)
    if policy is None:
        findings.append(
            Finding(
                FindingKind.UNSUPPORTED_POLICY_VERSION,
                budget_id,
                seq,
                f"policy_version {policy_version!r} has no registered policy "
                f"(known: {', '.join(POLICIES)}); its decision cannot be re-derived",
            )
        )
        return seq, stored_chain
    try:
        parsed = parse_gate_json(row[15])
    except InputNotJson as error:
        findings.append(Finding(FindingKind.MALFORMED_ROW, budget_id, seq, f"gate_input is {error}"))
        return seq, stored_chain
    derived = decide_parsed(parsed, policy)
    same = (
        derived.policy_version,
        derived.gate_decision_id,
        derived.gate_policy_version,
        derived.gate_input_digest,
        derived.status,
        derived.reason_code,
        derived.max_candidates,
        derived.max_depth,
        derived.max_steps,
    ) == row[2:11] and derived.max_parallelism == row[12]
    if same and spans_json(derived.evidence_spans) == row[13]:
        # Every hashed field equals the re-derived decision's, so its budget_id is the recomputed one.
        if derived.budget_id != budget_id:
            findings.append(
                Finding(
                    FindingKind.BUDGET_ID_MISMATCH,
                    budget_id,
                    seq,
                    f"the stored fields hash to {derived.budget_id}, not to the stored budget_id",
                )
            )
        return seq, stored_chain
    findings.extend(_rederive_findings(row, derived, parsed))
    return seq, stored_chain


def _chain_break(row: tuple[Any, ...], prev_seq: int, prev_chain: str) -> Finding:
    seq = row[0]
    problems = []
    if seq != prev_seq + 1:
        problems.append(
            f"seq jumps from {prev_seq} to {seq}: {seq - prev_seq - 1} row(s) missing"
            if seq > prev_seq + 1
            else f"seq {seq} follows seq {prev_seq}: rows reordered or duplicated"
        )
    if chain_hash(prev_chain, row[:17]) != row[17]:
        problems.append(
            f"chain_hash does not follow from row {prev_seq} and this row's columns: "
            "a row here was edited, inserted, deleted or reordered"
        )
    return Finding(FindingKind.CHAIN_BREAK, row[1], seq, "; ".join(problems))


def _unreadable_row(row: tuple[Any, ...], prev_seq: int, prev_chain: str, result: _RangeResult) -> tuple[int, str]:
    seq, budget_id, stored_chain = row[0], row[1], row[17]
    result.findings.append(
        Finding(
            FindingKind.MALFORMED_ROW,
            budget_id if isinstance(budget_id, str) else None,
            seq if type(seq) is int else None,
            f"cannot read the row: {_wrong_types(row)}",
        )
    )
    next_seq = seq if type(seq) is int else prev_seq + 1
    return next_seq, stored_chain if isinstance(stored_chain, str) else prev_chain


def _rederive_findings(row: tuple[Any, ...], derived: ComputeBudgetDecision, parsed: ParsedGate) -> list[Finding]:
    """Field-by-field differences between a stored row and its re-derived decision, and its hash check."""
    seq, budget_id = row[0], row[1]
    stored = dict(zip(COLUMNS, row, strict=True))
    differences = [
        f"{name} stored {_shown(stored[name])}, policy gives {_shown(getattr(derived, name))}"
        for name in _COMPARED
        if stored[name] != getattr(derived, name)
    ]
    derived_spans = spans_json(derived.evidence_spans)
    if stored["evidence_spans"] != derived_spans:
        differences.append(
            f"evidence_spans stored {_clip(stored['evidence_spans'])}, policy gives {_clip(derived_spans)}"
        )
    detail = "; ".join(differences) + _revision_2_note(parsed)
    findings = [Finding(FindingKind.REDERIVE_MISMATCH, budget_id, seq, detail)]
    recomputed = _recompute_budget_id(row)
    if isinstance(recomputed, MalformedDecision):
        findings.append(
            Finding(FindingKind.MALFORMED_ROW, budget_id, seq, f"the stored decision cannot be read: {recomputed}")
        )
    elif recomputed != budget_id:
        findings.append(
            Finding(
                FindingKind.BUDGET_ID_MISMATCH,
                budget_id,
                seq,
                f"the stored fields hash to {recomputed}, not to the stored budget_id",
            )
        )
    return findings


_COPIED_KEYS = frozenset({"decision_id", "policy_version", "input_digest"})


def _revision_2_note(parsed: ParsedGate) -> str:
    """Why a row stored before spec revision 2 may no longer re-derive: its gate is one revision 2 decides
    differently (a repeated top-level key that is copied, or nesting deeper than 32 levels); else ""."""
    if parsed.too_deep:
        return (
            " (spec revision 2: a gate nested more than 32 levels deep is now malformed and copies nothing; "
            "a row stored before it may hold the copied fields)"
        )
    repeated = sorted(_COPIED_KEYS & parsed.repeated)
    if repeated:
        return (
            f' (spec revision 2: a key repeated in the gate\'s top-level object now copies as "": '
            f"{', '.join(repeated)}; a row stored before it may hold one of its values)"
        )
    return ""


def _wrong_types(row: tuple[Any, ...]) -> str:
    wrong = []
    for name, value in zip(COLUMNS, row, strict=True):
        if name in _INTEGER_COLUMNS:
            ok = type(value) is int
        elif name == "max_wallclock_ms":
            ok = value is None or type(value) is int
        else:
            ok = type(value) is str
        if not ok:
            wrong.append(f"{name} is {type(value).__name__}")
    return ", ".join(wrong)


def _recompute_budget_id(row: tuple[Any, ...]) -> str | MalformedDecision:
    """The budget_id the stored fields hash to, or why the stored fields cannot be read as a decision."""
    try:
        return compute_budget_id(stored_from_row(row).decision)
    except MalformedDecision as error:
        return error
    except (ValueError, TypeError) as error:
        return MalformedDecision(str(error))


def _shown(value: object) -> str:
    """A value as a person reads it in a detail: strings (enum members too) quoted, numbers as they are."""
    return repr(str.__str__(value)) if isinstance(value, str) else repr(value)


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def as_checkpoint(value: Checkpoint | ChainHead | Mapping[str, Any] | str | os.PathLike[str]) -> Checkpoint:
    """A checkpoint from what a caller has at hand: a `Checkpoint`, a chain head, the document (as a mapping
    or as JSON text), or the path of a checkpoint file."""
    if isinstance(value, Checkpoint):
        return value
    if isinstance(value, ChainHead):
        return Checkpoint.from_head(value)
    if isinstance(value, Mapping):
        return Checkpoint.from_json(json.dumps(dict(value)))
    text = os.fspath(value)
    if text.lstrip().startswith("{"):
        return Checkpoint.from_json(text)
    return load_checkpoint(text)


def load_checkpoint(path: str) -> Checkpoint:
    """Read a checkpoint file; raises `CheckpointError` when it is missing or not a checkpoint."""
    from compute_budget.errors import CheckpointError

    try:
        with open(path, "rb") as handle:
            return Checkpoint.from_json(handle.read(), source=f"checkpoint {path}")
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint file {path} does not exist") from None
    except IsADirectoryError:
        raise CheckpointError(f"checkpoint {path} is a folder, not a file") from None
    except OSError as error:
        raise CheckpointError(f"cannot read checkpoint {path}: {error.strerror or error}") from None


__all__ = ["AuditReport", "ComputeBudgetError", "Finding", "FindingKind", "audit", "check_row", "load_checkpoint"]
