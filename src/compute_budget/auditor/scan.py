"""The replay auditor (spec sections 6 and 8): re-derive every stored row, re-link the chain, recompute the Merkle
tree, and hold every checkpoint (stored, signed, given) against them.

It opens the store read-only and streams it in `seq` order, so memory does not grow with the row count.
Each row is checked against the row stored before it (its `seq` and `chain_hash`), never against a running
state, so a bad row never hides or multiplies findings about the rows after it, and `--jobs N` can split
the rows into `seq` ranges that give exactly the single-process report.

The tree is the one running state. With `--jobs N` each range starts from the frontier the stored tree gives at
its first row (claimed, not trusted), and the parent proves every claim: range k's claimed start must equal the
frontier range k-1 computed, starting from the empty tree (or a verified `--since` checkpoint). A claim that does
not hold (a damaged or unbuilt stored tree) is recomputed in the parent, so the tree's findings are always those of
one pass from the start.

This module is the orchestration; the rooms are `ranges` (planning), `checkpoints` (given and stored checkpoints and
their signatures), `tree` (the tree check), `workers` (the processes) and `request` (`AuditRequest`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from compute_budget.auditor.attest_wait import Trust, await_attestation
from compute_budget.auditor.checkpoints import (
    CheckpointLike,
    HeadLike,
    WitnessAnswer,
    attestation,
    check_provenance,
    distinct_given,
    head_note_for,
    hold_given,
    load_checkpoint,
    policy_log_keys,
    unattested_findings,
)
from compute_budget.auditor.head_note import HeadNote
from compute_budget.auditor.key_states import KeyStateLike, configured_states, since_vouched, survey_key_states
from compute_budget.auditor.look_back import LookedBack, look_back_in
from compute_budget.auditor.published import another_log, audit_published
from compute_budget.auditor.ranges import (
    AuditPlan,
    count_mismatch,
    misplaced_row_findings,
    plan_ranges,
    range_anchor,
    stored_row_head,
)
from compute_budget.auditor.report import AuditReport, utc_now
from compute_budget.auditor.request import AuditInputs, AuditRequest, parse_inputs
from compute_budget.auditor.source import AuditSource, LogView, open_source
from compute_budget.auditor.tree import Seal, plan_seal, prove_tree
from compute_budget.auditor.witness_rules import (
    DEFAULT_MAX_WITNESS_AGE,
    given_note_findings,
    judge_witness_answer,
    witness_size_warnings,
    witnessed,
)
from compute_budget.auditor.workers import audit_range, run_parallel
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.cosignature import WitnessKey
from compute_budget.core.log.head import GENESIS_CHAIN_HASH, ChainHead
from compute_budget.core.log.note import VerifierKey
from compute_budget.core.log.witness_policy import TlogPolicy
from compute_budget.core.seal_checks import TreeOutcome
from compute_budget.core.verify import Finding, FindingKind, RangeResult
from compute_budget.errors import ComputeBudgetError, NoHistory


def audit(
    target: str | os.PathLike[str] | None = None,
    *,
    checkpoint: CheckpointLike | None = None,
    since: CheckpointLike | None = None,
    jobs: int | Literal["auto"] = 1,
    on_progress: Callable[[int, int], None] | None = None,
    trusted_keys: Iterable[VerifierKey | str | os.PathLike[str]] = (),
    all_signatures: bool = False,
    through: int | None = None,
    expected_origin: str | None = None,
    witness_keys: Iterable[WitnessKey | str | os.PathLike[str]] = (),
    witness_quorum: int | None = None,
    max_witness_age: int = DEFAULT_MAX_WITNESS_AGE,
    witnessed_checkpoints: Iterable[WitnessAnswer] = (),
    since_head: HeadLike | None = None,
    look_back: int = 0,
    look_back_day: int | None = None,
    retired: Iterable[KeyStateLike] = (), revoked: Iterable[KeyStateLike] = (),
    witness_policy: TlogPolicy | None = None,
    attest_wait: float | None = None,
) -> AuditReport:
    """Audit the store at `target` read-only; the report says what was found (`run_audit` tells each option).

    `checkpoint`: prove history extends it. `since`: prove it, then check only the rows after it (when it does not
    hold, every row is checked after all: `escalated`). `through`: check only the rows up to this `seq`. `jobs`:
    processes, each auditing a `seq` range (``"auto"``: one per CPU once each gets `AUTO_ROWS_PER_JOB` rows).
    `trusted_keys`, `all_signatures`, `expected_origin`: whose signatures vouch for the rows, and which log this is.
    `witness_keys`, `witness_quorum`, `max_witness_age`, `witnessed_checkpoints`, `since_head` (spec 9.3, 9.9.2,
    9.9.4): what the witnesses must have cosigned. `look_back`, `look_back_day` (spec 9.9.7): re-check a share of the
    rows below `since`. `retired` (``KEY@SIZE``), `revoked` (``KEY@SIZE:ROOT``) or `KeyState`s (spec 11): which
    writer signatures still count. `witness_policy` (a C2SP tlog-policy, instead of `witness_keys` and
    `witness_quorum`): which witnesses count in which groups, and its `log` keys as trusted keys.
    `attest_wait` (seconds; None: `$COMPUTE_BUDGET_ATTEST_WAIT`, else 5; spec 12.5): how long rows above the newest
    trusted checkpoint wait for a covering one, which counts once the rows up to it check and give its root.
    `on_progress(rows_done, rows_total)`: called as rows are checked.
    Raises `StoreUnavailable` (and its subclasses) when the audit cannot run at all.
    """
    return run_audit(AuditRequest(
        target, checkpoint=checkpoint, since=since, jobs=jobs, on_progress=on_progress,
        trusted_keys=tuple(trusted_keys), all_signatures=all_signatures, through=through,
        expected_origin=expected_origin, witness_keys=tuple(witness_keys), witness_quorum=witness_quorum,
        max_witness_age=max_witness_age, witnessed_checkpoints=tuple(witnessed_checkpoints), since_head=since_head,
        look_back=look_back, look_back_day=look_back_day, key_states=configured_states(retired, revoked),
        witness_policy=witness_policy, attest_wait=attest_wait,
    ))


def run_audit(request: AuditRequest) -> AuditReport:
    """Run the audit `request` asks for.

    Every stored checkpoint's root and chain head is checked against the recomputed tree and chain. With
    `trusted_keys` the newest stored checkpoint signed by each is verified (every one with `all_signatures`), rows
    after the newest trusted one are `unattested_rows`, and a given `checkpoint`/`since` must carry a trusted
    signature. `expected_origin`: the log this store must be (a store put in its place is a `checkpoint_mismatch`;
    without one, signatures by the same key cannot tell two logs apart).

    `witness_keys` (spec 9.3): a given `checkpoint`/`since` must carry `witness_quorum` (default: all) valid
    cosignatures, counted from the note and the store; the rows after the newest checkpoint of this store that many
    witnesses cosigned are `unwitnessed_rows` when none did or the K-th newest cosignature is over
    `max_witness_age` seconds old; the report's `witnessed_size` names it. `witnessed_checkpoints`: the store must
    extend each; one whose extension lines differ from the store's checkpoint of its size is a
    `checkpoint_mismatch` when a trusted writer signature on it verifies, else `StoreUnavailable` (spec 9.9.4).
    `since_head` (spec 9.9.2: a `HeadNote`, its text or its file; with witness keys and `since` given as a path,
    that path plus ``.head`` by default): the head an earlier audit checked and when; it must verify under a trusted
    key and the store must extend it, and the rows it held that K witnesses have not cosigned within
    `max_witness_age` are `unwitnessed_rows`. Without it the witness age comes from cosignature timestamps only.

    `look_back` N (spec 9.9.7; needs `since`; 0: off) also re-derives and re-hashes the full tiles of 256 rows
    below `since` whose number t has t mod N == d mod N, d the UTC day number of the audit's start (`look_back_day`
    overrides it), and the partial last tile, and holds the root they and the other tiles' stored hashes give
    against `since`'s: N audits on consecutive days re-check every row. The report's `look_back` says what it did.

    When `since` does not hold (history before it was rewritten), every row is checked after all, so the report
    names the rows that changed (`escalated`); the checkpoint mismatches follow from them.
    `on_progress(rows_done, rows_total)` is called after every batch this process checks (with `jobs`, it checks
    the first range itself) and as each worker's range completes.
    """
    head = head_note_for(request.since, request.since_head, bool(request.witness_keys))
    clock = time.perf_counter(), utc_now()
    inputs = parse_inputs(request, head, "--checkpoint")  # checked before a source opens
    if request.source is not None:  # opened by the caller (the command line), which closes it
        return _audit_source(request.source, request, inputs, clock)
    try:
        opened = open_source(request.target)
    except NoHistory as gone:
        proofs = [proof for proof in (inputs.checkpoint, inputs.since) if proof is not None and proof.seq > 0]
        if not proofs:
            raise
        return _history_gone(gone, proofs, inputs.checkpoint, inputs.since, clock[0])
    with opened as source:
        return _audit_source(source, request, inputs, clock)


_Clock = tuple[float, str]  # when the audit started: perf_counter() and UTC text


def _audit_source(source: AuditSource, request: AuditRequest, inputs: AuditInputs, clock: _Clock) -> AuditReport:
    """`run_audit` once its source is open: a source read from a published checkpoint (spec 10.2) is audited
    against it (`published.audit_published`: the checkpoint first, then every tile, then the rows after --since
    linked from its chain hash), the witnesses judged on its freshness, and its report said to the publication's
    reader. A database's rows above its newest trusted checkpoint wait for a covering one (`attest_wait`); a
    publication's checkpoint covers every row it holds."""
    if source.published() is None:
        report = _audit_escalating(source, request, inputs, clock)
        trust = Trust(tuple(inputs.keys), request.key_states, report.origin, request.all_signatures)
        return await_attestation(source, report, inputs.attest_wait, trust, through=request.through)
    report = audit_published(
        source, request, inputs, lambda opened, pinned, held: _audit_escalating(opened, pinned, held, clock)
    )
    # Said to the publication's reader (spec 11.4), whatever kind of source the publication is read through.
    return dataclasses.replace(report, publication=True, freshness_checked=bool(inputs.answers))


def _audit_escalating(source: AuditSource, request: AuditRequest, inputs: AuditInputs, clock: _Clock) -> AuditReport:
    """The audit once, and again in full when the --since checkpoint does not hold."""
    report = _audit_once(source, request, inputs, clock)
    if report.since is None or request.through is not None or not _since_broken(report):
        return _with_rewritten_range(source, report)
    # The rows before --since were trusted, and the checkpoint says they changed: check every row, so the report
    # names the rows themselves, not only the checkpoint they no longer match.
    given: list[WitnessAnswer] = [("--checkpoint", report.checkpoint)] if report.checkpoint is not None else []
    full_request = dataclasses.replace(
        request, checkpoint=report.since, since=None, look_back=0, look_back_day=None,
        witnessed_checkpoints=(*given, *request.witnessed_checkpoints),
    )
    full_source = source.linked_from(None)  # no chain hash taken from the --since that did not hold
    full = _audit_once(full_source, full_request, parse_inputs(full_request, inputs.head, "--since"),
                       (time.perf_counter(), utc_now()))
    return _with_rewritten_range(full_source, dataclasses.replace(
        full, checkpoint=report.checkpoint, since=report.since, escalated=True, look_back=report.look_back,
        elapsed_seconds=report.elapsed_seconds + full.elapsed_seconds, started_at=report.started_at,
    ))


def _with_rewritten_range(source: AuditSource, report: AuditReport) -> AuditReport:
    """A history rewritten consistently (every row re-derives and links) cannot be named by rows; the checkpoints
    it no longer matches can bound it: the first rewritten row lies after the newest stored checkpoint below the
    smallest mismatched size, and at or before that size. A published checkpoint is the only one: it bounds
    nothing."""
    if report.affected_rows or source.published() is not None:
        return report
    # A checkpoint past the store's end is truncation, not a rewrite: it bounds nothing among the rows there are.
    mismatched = [
        finding.seq for finding in report.findings
        if finding.kind is FindingKind.CHECKPOINT_MISMATCH and finding.seq is not None
        and 0 < finding.seq <= report.head.seq
    ]
    if not mismatched:
        return report
    upper = min(mismatched)
    try:
        with source.snapshot() as snapshot:
            below = snapshot.newest_covering(1, upper - 1) if upper > 1 else None
    except ComputeBudgetError:
        return report
    lower = below.tree_size if below is not None else 0
    return dataclasses.replace(report, rewritten_between=(lower + 1, upper))


def _since_broken(report: AuditReport) -> bool:
    """True when the --since checkpoint does not hold: a checkpoint_mismatch at its seq, or anything the look-back
    found below it (the checkpoint was kept only after a clean audit, so the rows under it changed since)."""
    assert report.since is not None
    if report.look_back is not None and report.look_back.findings:
        return True
    return any(
        finding.kind is FindingKind.CHECKPOINT_MISMATCH and finding.seq == report.since.seq
        for finding in report.findings
    )


@dataclass(slots=True)
class _Survey:
    """What one snapshot says before any row is checked: the plan, and the findings that do not need the rows."""

    plan: AuditPlan
    anchors: list[tuple[int, str]]
    origin: str | None
    findings: list[Finding]
    provenance: dict[str, Any] | None
    outliers: list[Finding]
    stored_head: ChainHead | None
    privileges: list[str]
    seal: Seal
    attested: dict[str, tuple[int, int]]
    attestation_findings: list[Finding]
    unattested: list[Finding]
    witnessed_size: int | None = None
    witness_warnings: list[str] = field(default_factory=list)


def _audit_once(source: AuditSource, request: AuditRequest, inputs: AuditInputs, clock: _Clock) -> AuditReport:
    """One audit as `run_audit` describes, without the escalation from a broken --since."""
    started, started_at = clock
    with source.snapshot() as snapshot:
        survey = _survey(snapshot, request, inputs, source.published() is not None)
    results, looked_back = _check_rows(source, request, inputs, survey)
    tree_findings, frontier = prove_tree(source, survey.plan, survey.seal, [outcome for _, outcome in results])
    report = _report(survey, inputs, results, looked_back, tree_findings)
    return dataclasses.replace(
        report, database=source.location.display, elapsed_seconds=time.perf_counter() - started,
        started_at=started_at, finished_at=utc_now(), root=frontier.root() if frontier is not None else None,
    )


def _survey(snapshot: LogView, request: AuditRequest, inputs: AuditInputs, published: bool) -> _Survey:
    """Plan the ranges and make every finding that needs no row checked, in the order the report gives them
    (`published`: the source is read from its published checkpoint)."""
    since = inputs.since
    plan = plan_ranges(snapshot, since, request.jobs, request.through)
    anchors = [range_anchor(snapshot, low, since) for low, _ in plan.ranges]
    origin = snapshot.origin()
    # The policy's `log` keys are this store's writers once its origin is known (a line naming another is refused).
    inputs.keys[:] = policy_log_keys(inputs.keys, request.witness_policy, origin)
    keys = inputs.keys
    provenance, findings = check_provenance(snapshot)
    if request.expected_origin is not None and origin != request.expected_origin:
        findings.append(another_log(origin, request.expected_origin, plan.max_seq if published else None))
    held, given_findings = _given(snapshot, inputs, origin, plan.max_seq)
    findings += given_findings
    outliers = _outliers(snapshot, plan, since)
    stored_head = stored_row_head(snapshot, plan.end_seq)
    health = snapshot.health()  # a database's own state, beside its log
    if health is not None:
        findings += [
            Finding(FindingKind.SCHEMA_TAMPERED, None, None, problem)
            for problem in health.schema_problems() + health.repair_problems()  # spec 9.9.10
        ]
    privileges = health.write_privileges() if health is not None else []
    seal = plan_seal(snapshot, plan, since, distinct_given(held), origin, keys, request.all_signatures)
    findings += seal.findings
    attested, attestation_findings = attestation(snapshot, keys, origin, plan.max_seq)
    states = survey_key_states(snapshot, keys, request.key_states, origin, plan.max_seq, attested)
    attestation_findings += states.findings
    newest = max((size for size, _ in attested.values()), default=0)
    vouched = since_vouched(snapshot, since, keys, request.key_states, origin, plan.max_seq, newest)
    unattested = unattested_findings(snapshot, keys, attested, plan.max_seq, vouched)
    survey = _Survey(plan, anchors, origin, findings, provenance, outliers, stored_head, privileges, seal, attested,
                     attestation_findings, unattested)
    survey.witness_warnings = witness_size_warnings(snapshot, inputs.policy) + states.warnings
    if inputs.policy is not None:
        _witness_survey(snapshot, request, inputs, held, survey)
    return survey


def _given(
    snapshot: LogView, inputs: AuditInputs, origin: str | None, max_seq: int
) -> tuple[list[Checkpoint], list[Finding]]:
    """The given checkpoints and witness answers the store holds, and the findings of the rest."""
    findings: list[Finding] = []
    sources = [(inputs.checkpoint_label, inputs.checkpoint), ("--since", inputs.since)]
    for source, answer in inputs.answers:
        served, answer_findings = judge_witness_answer(snapshot, source, answer, origin, inputs.keys, max_seq)
        findings += answer_findings
        sources.append((source, served))
    held, given_findings = hold_given(snapshot, sources, inputs.head, origin, inputs.keys, max_seq)
    return held, findings + given_findings


def _outliers(snapshot: LogView, plan: AuditPlan, since: Checkpoint | None) -> list[Finding]:
    """The rows no range covers (a full audit), or the row count against the head (an incremental one)."""
    if plan.end_seq != plan.max_seq:
        return []  # a range audit (the Workbench's) judges only the rows of its range
    if since is None:
        return misplaced_row_findings(snapshot, plan)
    # The incremental audit trusts the rows up to the checkpoint, but not the row count: a row whose
    # seq is text or a real, or a row deleted below the checkpoint, shows as count != head seq.
    rows_stored = snapshot.count()
    outliers = misplaced_row_findings(snapshot, plan) if rows_stored != plan.max_seq else []
    if rows_stored != plan.max_seq and not outliers:
        outliers = [count_mismatch(rows_stored, plan.max_seq)]
    return outliers


def _witness_survey(
    snapshot: LogView, request: AuditRequest, inputs: AuditInputs, held: list[Checkpoint], survey: _Survey
) -> None:
    """With witness keys: the given notes' cosignatures, and the rows no quorum of witnesses cosigned in time."""
    assert inputs.policy is not None
    head = inputs.head
    for proof in (inputs.checkpoint, inputs.since):
        # A --since that is its FILE.head's own checkpoint was kept by an audit with no witness keys (spec 11.5:
        # witnesses added later need no new baseline); FILE.head's writer signature is checked, and the rows it
        # holds that K witnesses never cosigned are still unwitnessed_rows.
        kept_head = head is not None and proof is inputs.since and _same_tree(proof, head.checkpoint)
        if proof is not None and not kept_head:
            survey.findings += given_note_findings(proof, snapshot, inputs.policy)
    survey.witnessed_size, witness_findings = witnessed(
        snapshot, inputs.policy, survey.origin, held, survey.plan.max_seq, all_signatures=request.all_signatures,
        head=(head.checkpoint.seq, head.started) if head is not None else None,
    )
    survey.unattested += witness_findings


def _same_tree(proof: Checkpoint | None, other: Checkpoint) -> bool:
    """Whether `proof` names `other`'s tree: its size and a root, the same."""
    return proof is not None and proof.root is not None and (proof.seq, proof.root) == (other.seq, other.root)


_RangeResults = list[tuple[RangeResult, TreeOutcome | None]]


def _check_rows(
    store: AuditSource, request: AuditRequest, inputs: AuditInputs, survey: _Survey
) -> tuple[_RangeResults, LookedBack | None]:
    """Check every range's rows (the first here, the others in workers) and run the look-back, if any."""
    plan, seal, since = survey.plan, survey.seal, inputs.since
    tasks = [(low, high, anchor) for (low, high), anchor in zip(plan.ranges, survey.anchors, strict=True)]
    looking_back = (
        functools.partial(look_back_in, store, since, request.look_back, inputs.day, plan.max_seq)
        if request.look_back and since is not None else None
    )
    if len(tasks) > 1:
        return run_parallel(store, tasks, seal, request.on_progress, looking_back)
    looked_back = looking_back() if looking_back is not None else None
    total = sum(high - low for low, high in plan.ranges)
    results = [
        audit_range(store, low, high, anchor, request.on_progress, total, seal.task(index))
        for index, (low, high, anchor) in enumerate(tasks)
    ]
    return results, looked_back


def _report(
    survey: _Survey, inputs: AuditInputs, results: _RangeResults, looked_back: LookedBack | None,
    tree_findings: list[Finding],
) -> AuditReport:
    """The report from what the survey, the ranges, the look-back and the tree found (timing filled in after)."""
    since, keys, policy = inputs.since, inputs.keys, inputs.policy
    merged = RangeResult()
    findings = survey.findings + survey.attestation_findings
    last = survey.stored_head or ChainHead(
        survey.plan.start_seq, since.chain_hash if since else GENESIS_CHAIN_HASH, since.budget_id if since else None
    )
    for result, _ in results:
        merged.rows += result.rows
        findings += result.findings
        merged.status_counts.update(result.status_counts)
        merged.reason_counts.update(result.reason_counts)
        merged.policy_counts.update(result.policy_counts)
        if result.rows:
            last = ChainHead(result.last_seq, result.last_chain_hash, result.last_budget_id)
    if looked_back is not None:
        findings += looked_back[1]
    findings += tree_findings + survey.outliers + survey.unattested
    return AuditReport(
        database="", rows_checked=merged.rows + sum(item.kind is FindingKind.MALFORMED_ROW for item in survey.outliers),
        findings=tuple(findings), head=last, status_counts=dict(merged.status_counts),
        reason_counts=dict(merged.reason_counts), elapsed_seconds=0.0, checkpoint=inputs.checkpoint, since=since,
        jobs=len(results), warnings=_warnings(survey.privileges, looked_back) + tuple(survey.witness_warnings),
        policy_counts=dict(merged.policy_counts), origin=survey.origin,
        trusted_keys=tuple(key.format() for key in keys),
        attested_size=max((size for size, _ in survey.attested.values()), default=0) if keys else None,
        provenance=survey.provenance, witnessed_size=survey.witnessed_size,
        witness_keys=tuple(key.format() for key in policy.keys) if policy is not None else (),
        look_back=looked_back[0] if looked_back is not None else None,
        witness_age=_witness_age(inputs.head) if policy is not None else None,
        witness_policy=policy.described() if policy is not None else None,
    )


def _warnings(privileges: list[str], looked_back: LookedBack | None) -> tuple[str, ...]:
    """The report's warnings: a role that could write, and what the look-back could not do."""
    warnings = [
        f"the audit's database role may {', '.join(privileges)} the decisions table: the audit itself never "
        "writes, but only a SELECT-only role guarantees that (see the README's PostgreSQL section)"
    ] if privileges else []
    return (*warnings, *(looked_back[2] if looked_back is not None else ()))


def _witness_age(head: HeadNote | None) -> str:
    """How the report judged the witnesses' age (spec 9.9.2)."""
    if head is None:
        return "witness age from cosignature timestamps only"
    size = head.checkpoint.seq
    return (f"witness age from {head.source} (the audit of {head.started_at} saw {size} rows) through seq {size}, "
            "from cosignature timestamps above it")


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


__all__ = ["AuditReport", "AuditRequest", "Finding", "FindingKind", "audit", "load_checkpoint", "run_audit"]
