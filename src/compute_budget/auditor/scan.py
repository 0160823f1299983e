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
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
import logging
import multiprocessing
import multiprocessing.pool
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from compute_budget.auditor.head_note import HeadNote, head_signature_findings, load_head_note, parse_head_note
from compute_budget.auditor.look_back import day_number, look_below
from compute_budget.auditor.report import AuditReport, LookBack, utc_now
from compute_budget.auditor.witnessed import (
    DEFAULT_MAX_WITNESS_AGE,
    WitnessPolicy,
    given_note_findings,
    judge_witness_answer,
    witness_size_warnings,
    witnessed,
)
from compute_budget.core.leaf import unreadable_leaf_hash
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.cosignature import WitnessKey
from compute_budget.core.log.head import GENESIS_CHAIN_HASH, ChainHead
from compute_budget.core.log.merkle import CompactRange, root_from_reader
from compute_budget.core.log.note import VerifierKey, valid_origin
from compute_budget.core.seal import StoredCheckpoint, TreeCheck, TreeOutcome, signature_problem, trusted_signers
from compute_budget.core.verify import Finding, FindingKind, RangeResult, check_row
from compute_budget.errors import (
    ArgumentTypeError,
    CheckpointError,
    ComputeBudgetError,
    MerkleError,
    NoHistory,
    NoteError,
    StoreDamaged,
    clip,
)
from compute_budget.store import BudgetStore
from compute_budget.store.files import read_small_file
from compute_budget.store.keys import verifier_key, witness_key
from compute_budget.store.snapshot import Snapshot

BATCH_ROWS = 2000
ORPHAN_POLL_SECONDS = 0.2
MIN_ROWS_PER_JOB = 10_000  # below this a range is not worth a process of its own
# Workers are forked on Linux: a forked worker inherits the loaded modules and starts in milliseconds, where a
# spawned one (other platforms, or Python's forkserver default from 3.14) imports the package anew, about 0.3 s.
FORKED_WORKERS = sys.platform.startswith("linux")
# `jobs="auto"` splits only when every process gets at least this many rows: a forked worker pays for itself
# from about 4,000 rows (measured: 10,000 new rows audit in 0.26 s on two processes, 0.39 s on one), a spawned
# one only past about a second of one-process audit, so a worker never slows the nightly incremental audit.
AUTO_ROWS_PER_JOB = 5_000 if FORKED_WORKERS else 50_000
MAX_BAD_SIGNATURES_PER_KEY = 20  # a forged checkpoint table is reported, not verified to the end

CheckpointLike = Checkpoint | ChainHead | Mapping[str, Any] | str | os.PathLike[str]
# A checkpoint a witness served (`--witness-url`), with the source findings name: (source, note or checkpoint).
WitnessAnswer = CheckpointLike | tuple[str, CheckpointLike]
HeadLike = HeadNote | str | os.PathLike[str]


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
) -> AuditReport:
    """Audit the store at `target` read-only. `checkpoint`: prove history extends it. `since`: prove it,
    then check only the rows after it. `through`: check only the rows up to this `seq` (with `since`, a `seq`
    range). `jobs`: processes, each auditing a `seq` range; ``"auto"``: one per CPU (`os.cpu_count()`) once every
process gets at least `AUTO_ROWS_PER_JOB` rows to check, else one. The report's `jobs` says how many ran.

    Every stored checkpoint's root and chain head is checked against the recomputed tree and chain. With
    `trusted_keys` (verifier keys, their text or files holding them) the newest stored checkpoint signed by each is
    verified (every one with `all_signatures`), rows after the newest trusted one are `unattested_rows`, and a given
    `checkpoint`/`since` must carry a trusted signature.

    `expected_origin`: the log this store must be (a store put in its place is a `checkpoint_mismatch`, as a kept
    checkpoint of the right log would show; without one, signatures by the same key cannot tell two logs apart).

    `witness_keys` (spec 9.3; type 0x04 keys, their text or files): a given `checkpoint`/`since` must carry
    `witness_quorum` (default: all) valid cosignatures, counted from the note and the store; the rows after the
    newest checkpoint of this store that many witnesses cosigned are `unwitnessed_rows` when none did or the
    K-th newest cosignature is over `max_witness_age` seconds old; the report's `witnessed_size` names it.
    `witnessed_checkpoints` (what `--witness-url` fetched from witnesses, each a note or a (source, note) pair): the
    store must extend each; one whose extension lines differ from the store's checkpoint of its size is a
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
    Raises `StoreUnavailable` (and its subclasses) when the audit cannot run at all.
    """
    witness_keys = list(witness_keys)
    witnessed_checkpoints = list(witnessed_checkpoints)
    head = _head_note(since, since_head, bool(witness_keys))
    report = _audit_once(
        target, checkpoint=checkpoint, since=since, jobs=jobs, on_progress=on_progress, trusted_keys=trusted_keys,
        all_signatures=all_signatures, through=through, expected_origin=expected_origin, witness_keys=witness_keys,
        witness_quorum=witness_quorum, max_witness_age=max_witness_age, witnessed_checkpoints=witnessed_checkpoints,
        look_back=(look_back, look_back_day),
        head=head,
    )
    if report.since is None or through is not None or not _since_broken(report):
        return _with_rewritten_range(target, report)
    # The rows before --since were trusted, and the checkpoint says they changed: check every row, so the report
    # names the rows themselves, not only the checkpoint they no longer match.
    given: list[WitnessAnswer] = [("--checkpoint", report.checkpoint)] if report.checkpoint is not None else []
    full = _audit_once(
        target, checkpoint=report.since, since=None, jobs=jobs, on_progress=on_progress, trusted_keys=trusted_keys,
        all_signatures=all_signatures, expected_origin=expected_origin, witness_keys=witness_keys,
        witness_quorum=witness_quorum, max_witness_age=max_witness_age,
        witnessed_checkpoints=[*given, *witnessed_checkpoints], head=head, checkpoint_label="--since",
    )
    return _with_rewritten_range(target, dataclasses.replace(
        full, checkpoint=report.checkpoint, since=report.since, escalated=True, look_back=report.look_back,
        elapsed_seconds=report.elapsed_seconds + full.elapsed_seconds, started_at=report.started_at,
    ))


def _head_note(since: CheckpointLike | None, since_head: HeadLike | None, witnesses: bool) -> HeadNote | None:
    """The `FILE.head` of spec 9.9.2: as given; else, with witness keys and `since` named by a file path, that
    path's `.head` (required: `CheckpointError` when missing)."""
    if isinstance(since_head, HeadNote):
        return since_head
    if since_head is not None:
        text = os.fspath(since_head)
        return parse_head_note(text) if "\n" in text else load_head_note(text)
    if not witnesses or not isinstance(since, str | os.PathLike):
        return None
    path = os.fspath(since)
    if path.lstrip().startswith("{") or "\n" in path:
        return None  # the checkpoint's own text: no file beside it
    return load_head_note(path + ".head")


def _with_rewritten_range(target: str | os.PathLike[str] | None, report: AuditReport) -> AuditReport:
    """A history rewritten consistently (every row re-derives and links) cannot be named by rows; the checkpoints
    it no longer matches can bound it: the first rewritten row lies after the newest stored checkpoint below the
    smallest mismatched size, and at or before that size."""
    if report.affected_rows:
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
        with BudgetStore.open(target, readonly=True) as store, store.snapshot() as snapshot:
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


def _audit_once(
    target: str | os.PathLike[str] | None,
    *,
    checkpoint: CheckpointLike | None,
    since: CheckpointLike | None,
    jobs: int | Literal["auto"],
    on_progress: Callable[[int, int], None] | None,
    trusted_keys: Iterable[VerifierKey | str | os.PathLike[str]],
    all_signatures: bool,
    through: int | None = None,
    expected_origin: str | None,
    witness_keys: Iterable[WitnessKey | str | os.PathLike[str]],
    witness_quorum: int | None,
    max_witness_age: int,
    witnessed_checkpoints: Iterable[WitnessAnswer],
    look_back: tuple[int, int | None] = (0, None),
    head: HeadNote | None = None,
    checkpoint_label: str = "--checkpoint",
) -> AuditReport:
    """One audit as `audit` describes, without the escalation from a broken --since."""
    if jobs != "auto" and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise ArgumentTypeError(f"jobs is a positive integer or 'auto', not {jobs!r}")
    if expected_origin is not None and not valid_origin(expected_origin):
        raise ArgumentTypeError(f"origin {expected_origin!r} is not a log origin (1 to 128 printable ASCII, no '+')")
    started = time.perf_counter()
    started_at = utc_now()
    day = look_back[1] if look_back[1] is not None else day_number(time.time())
    _check_look_back(look_back[0], day, since)
    checkpoint = as_checkpoint(checkpoint) if checkpoint is not None else None
    since = as_checkpoint(since) if since is not None else None
    from_witnesses = [_answer(index, item) for index, item in enumerate(witnessed_checkpoints)]
    keys = _unique_keys(verifier_key(item) for item in trusted_keys)
    policy = _witness_policy(witness_keys, witness_quorum, max_witness_age)
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
            origin = snapshot.origin()
            findings_before: list[Finding] = []
            provenance, provenance_findings = _provenance(snapshot)
            findings_before += provenance_findings
            if expected_origin is not None and origin != expected_origin:
                findings_before.append(
                    Finding(
                        FindingKind.CHECKPOINT_MISMATCH,
                        None,
                        None,
                        f"this store is log {origin or '(none: the store has no origin)'}, not {expected_origin}: "
                        "another store is in its place",
                    )
                )
            sources = [(checkpoint_label, checkpoint), ("--since", since)]
            for source, answer in from_witnesses:
                served, answer_findings = judge_witness_answer(snapshot, source, answer, origin, keys, plan.max_seq)
                findings_before += answer_findings
                sources.append((source, served))
            held, given_findings = _hold_given(snapshot, sources, head, origin, keys, plan.max_seq)
            findings_before += given_findings
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
                Finding(FindingKind.SCHEMA_TAMPERED, None, None, problem)
                for problem in snapshot.schema_problems() + snapshot.repair_problems()  # spec 9.9.10
            ]
            privileges = snapshot.write_privileges()
            seal = _plan_seal(snapshot, plan, since, _distinct(held), origin, keys, all_signatures)
            findings_before += seal.findings
            attested, attestation_findings = _attestation(snapshot, keys, origin, plan.max_seq)
            unattested = _unattested(snapshot, keys, attested, plan.max_seq)
            witnessed_size = None
            witness_warnings = witness_size_warnings(snapshot, policy)
            if policy is not None:
                for proof in (checkpoint, since):
                    if proof is not None:
                        findings_before += given_note_findings(proof, snapshot, policy)
                witnessed_size, witness_findings = witnessed(
                    snapshot, policy, origin, held, plan.max_seq, all_signatures=all_signatures,
                    head=(head.checkpoint.seq, head.started) if head is not None else None,
                )
                unattested += witness_findings
        tasks = [(low, high, anchor) for (low, high), anchor in zip(plan.ranges, anchors, strict=True)]
        processes = len(tasks)
        looking_back = (
            functools.partial(_look_back, store, since, look_back[0], day, plan.max_seq)
            if look_back[0] and since is not None else None
        )
        looked_back: _LookedBack | None = None
        if processes > 1:
            results, looked_back = _run_parallel(store, tasks, seal, on_progress, looking_back)
        else:
            looked_back = looking_back() if looking_back is not None else None
            total = sum(high - low for low, high in plan.ranges)
            results = [
                _audit_range(store, low, high, anchor, on_progress, total, seal.task(index))
                for index, (low, high, anchor) in enumerate(tasks)
            ]
        tree_findings, frontier = _prove_tree(store, plan, seal, [outcome for _, outcome in results])
        database = store.location.display
    merged = RangeResult()
    findings = list(findings_before) + attestation_findings
    last = stored_head or ChainHead(
        plan.start_seq, since.chain_hash if since else GENESIS_CHAIN_HASH, since.budget_id if since else None
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
    findings += tree_findings + outliers + unattested
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
        warnings=_warnings(privileges, looked_back) + tuple(witness_warnings),
        policy_counts=dict(merged.policy_counts),
        started_at=started_at,
        finished_at=utc_now(),
        origin=origin,
        root=frontier.root() if frontier is not None else None,
        trusted_keys=tuple(key.format() for key in keys),
        attested_size=max((size for size, _ in attested.values()), default=0) if keys else None,
        provenance=provenance,
        witnessed_size=witnessed_size,
        witness_keys=tuple(key.format() for key in policy.keys) if policy is not None else (),
        look_back=looked_back[0] if looked_back is not None else None,
        witness_age=_witness_age(head) if policy is not None else None,
    )


_LookedBack = tuple[LookBack, list[Finding], list[str]]


def _warnings(privileges: list[str], looked_back: _LookedBack | None) -> tuple[str, ...]:
    """The report's warnings: a role that could write, and what the look-back could not do."""
    warnings = [
        f"the audit's database role may {', '.join(privileges)} the decisions table: the audit itself never "
        "writes, but only a SELECT-only role guarantees that (see the README's PostgreSQL section)"
    ] if privileges else []
    return (*warnings, *(looked_back[2] if looked_back is not None else ()))


def _check_look_back(n: object, day: object, since: object) -> None:
    """`look_back` is a whole number (0: off) and needs `since`; the day is a whole number."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ArgumentTypeError(f"look_back is a whole number of days (0: off), not {n!r}")
    if isinstance(day, bool) or not isinstance(day, int):
        raise ArgumentTypeError(f"look_back_day is a UTC day number, not {day!r}")
    if n and since is None:
        raise ArgumentTypeError("look_back looks back below a since checkpoint: give since too")


def _look_back(store: BudgetStore, since: Checkpoint, n: int, day: int, max_seq: int) -> _LookedBack:
    """The look-back (auditor.look_back), on a snapshot of its own: in the auditing process, while any workers
    check the new rows."""
    with store.snapshot() as snapshot:
        return look_below(snapshot, since, n, day, max_seq)


def _witness_age(head: HeadNote | None) -> str:
    """How the report judged the witnesses' age (spec 9.9.2)."""
    if head is None:
        return "witness age from cosignature timestamps only"
    size = head.checkpoint.seq
    return (f"witness age from {head.source} (the audit of {head.started_at} saw {size} rows) through seq {size}, "
            "from cosignature timestamps above it")


def _answer(index: int, item: WitnessAnswer) -> tuple[str, Checkpoint | str]:
    """A witness's answer as (source, checkpoint or raw note text): the text is judged against the store later."""
    source, value = item if isinstance(item, tuple) else (f"witness checkpoint #{index + 1}", item)
    if isinstance(value, str) and "\n" in value and not value.lstrip().startswith("{"):
        return source, value
    return source, as_checkpoint(value)


def _hold_given(
    snapshot: Snapshot,
    sources: list[tuple[str, Checkpoint | None]],
    head: HeadNote | None,
    origin: str | None,
    keys: list[VerifierKey],
    max_seq: int,
) -> tuple[list[Checkpoint], list[Finding]]:
    """The given checkpoints the store holds (each with its own signature lines: they count as cosignatures), and
    the findings of the rest, each naming its source (issue 28, 12). `FILE.head` must be signed by a trusted
    writer (spec 9.9.2: else `checkpoint_mismatch`); the others, with trusted keys, carry a trusted signature (else
    `bad_signature`)."""
    held: list[Checkpoint] = []
    findings: list[Finding] = []
    if head is not None:
        findings += head_signature_findings(head, keys)
    for source, proof in [*sources, *([(head.source, head.checkpoint)] if head is not None else [])]:
        if proof is None:
            continue
        # Another log's checkpoint says nothing about this one's rows: that is the one finding, not a "rewritten
        # history" its chain hash cannot match anyway.
        problems = _check_origin(proof, origin) or _check_checkpoint(snapshot, proof, max_seq)
        findings += _named(problems, source)
        if not problems:
            held.append(proof)
        if keys and (head is None or proof is not head.checkpoint):
            findings += _check_given_signature(proof, keys)
    return held, findings


def _named(findings: list[Finding], source: str) -> list[Finding]:
    """`findings` about a given checkpoint, each naming where that checkpoint came from."""
    return [dataclasses.replace(finding, detail=f"{source}: {finding.detail}") for finding in findings]


def _distinct(held: list[Checkpoint]) -> list[Checkpoint]:
    """One given checkpoint per size, root and chain hash: the tree checks each once (one finding, not one per
    source that gave it)."""
    first: dict[tuple[int, bytes | None, str], Checkpoint] = {}
    for proof in held:
        first.setdefault((proof.seq, proof.root, proof.chain_hash), proof)
    return list(first.values())


def _witness_policy(
    witness_keys: Iterable[WitnessKey | str | os.PathLike[str]], quorum: int | None, max_age: int
) -> WitnessPolicy | None:
    """The audit's witness requirement, or None without witness keys; a quorum outside 1..N is an error."""
    keys = tuple(dict.fromkeys(witness_key(item) for item in witness_keys))
    if not keys:
        if quorum is not None:
            raise ArgumentTypeError("a witness quorum needs witness keys")
        return None
    wanted = len(keys) if quorum is None else quorum
    if isinstance(wanted, bool) or not isinstance(wanted, int) or not 1 <= wanted <= len(keys):
        raise ArgumentTypeError(f"the witness quorum must be 1..{len(keys)} (distinct witness keys), not {wanted!r}")
    if isinstance(max_age, bool) or not isinstance(max_age, int) or max_age < 0:
        raise ArgumentTypeError(f"the maximum witness age is a number of seconds, not {max_age!r}")
    return WitnessPolicy(keys, wanted, max_age, int(time.time()))


def _provenance(snapshot: Snapshot) -> tuple[dict[str, Any] | None, list[Finding]]:
    """The salvaged store's provenance (spec 9.8) for the report, and a finding when its row no longer names the
    chain hash stored at its size (the copied history changed after it was salvaged)."""
    try:
        found = snapshot.provenance()
    except StoreDamaged as damaged:
        return None, [Finding(FindingKind.SCHEMA_TAMPERED, None, None, str(damaged))]
    if found is None:
        return None, []
    source, through, root, chain, recorded_at = found
    document = {"source_origin": source, "through_seq": through, "root": root, "chain_hash": chain,
                "recorded_at": recorded_at}
    try:
        tree_root: bytes | None = snapshot.frontier(through).root() if 0 <= through <= snapshot.max_seq() else None
    except (StoreDamaged, MerkleError):
        tree_root = None  # the tree's own findings say why
    if tree_root is None or base64.b64encode(tree_root).decode("ascii") != root:
        shown = base64.b64encode(tree_root).decode("ascii") if tree_root is not None else "not computable"
        return document, [
            Finding(
                FindingKind.CHECKPOINT_MISMATCH,
                None,
                through,
                f"the provenance row says this store was salvaged from {clip(source, 80)} through seq {through} with "
                f"root {clip(root, 60)}, but the tree's root at that size is {shown}: the row was not written by "
                "`copy --through`, or the salvaged history changed",
            )
        ]
    stored = snapshot.chain_at(through)
    if stored != chain:
        return document, [
            Finding(
                FindingKind.CHECKPOINT_MISMATCH,
                None,
                through,
                f"the provenance row says this store was salvaged from {source} through seq {through} with chain_hash "
                f"{chain}, but row {through} now has {stored}: the salvaged history was rewritten",
            )
        ]
    return document, []


@dataclass(frozen=True, slots=True)
class _Plan:
    start_seq: int
    max_seq: int
    end_seq: int  # the last seq checked: max_seq, or less when the audit stops `through` a seq
    ranges: list[tuple[int, int]]


def _plan(
    snapshot: Snapshot, since: Checkpoint | None, jobs: int | Literal["auto"], through: int | None = None
) -> _Plan:
    start = since.seq if since is not None else 0
    max_seq = snapshot.max_seq()
    end = max_seq if through is None else max(min(max_seq, through), start)
    span = max(end - start, 0)
    if jobs == "auto":
        parts = max(1, min(os.cpu_count() or 1, span // AUTO_ROWS_PER_JOB))
    else:
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


def _check_origin(proof: Checkpoint, origin: str | None) -> list[Finding]:
    """A checkpoint naming an origin must name this store's."""
    if proof.origin is None or proof.origin == origin:
        return []
    return [
        Finding(
            FindingKind.CHECKPOINT_MISMATCH,
            proof.budget_id,
            proof.seq,
            f"the checkpoint is of log {proof.origin}, but this store is {origin or 'a store without an origin'}",
        )
    ]


def _check_given_signature(proof: Checkpoint, keys: list[VerifierKey]) -> list[Finding]:
    """With trusted keys, a given checkpoint must be a note carrying a valid signature by one of them."""
    def finding(detail: str) -> Finding:
        return Finding(FindingKind.BAD_SIGNATURE, proof.budget_id, proof.seq, detail)

    if proof.note is None or not proof.signatures():
        form = "a JSON checkpoint" if proof.note is None else "an unsigned note"
        return [finding(f"the given checkpoint is {form}: it carries no signature by a trusted key")]
    try:
        verified, failed = trusted_signers(proof.note, keys)
    except NoteError as error:
        return [finding(f"the given checkpoint's signatures cannot be read: {error}")]
    found = [finding(f"the given checkpoint's signature by {_label(key)} does not verify") for key in failed]
    if not verified and not failed:
        names = ", ".join(sorted({signature.name for signature in proof.signatures()}))
        found.append(finding(f"the given checkpoint carries no signature by a trusted key (it is signed by {names})"))
    return found


def _outliers(snapshot: Snapshot, plan: _Plan) -> list[Finding]:
    """Rows no `seq` range covers: a seq that is missing, not a positive integer, or beyond the head."""
    rows = snapshot.misplaced_rows(plan.max_seq)
    return [
        Finding(FindingKind.MALFORMED_ROW, str(budget_id), None, f"seq {seq!r} is not a positive integer in 1..head")
        for budget_id, seq in rows
    ]


# -- the seal ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _SealTask:
    """What a range needs to check the tree: where it starts (a claimed frontier, or None to skip), the store's
    origin, given checkpoints to hold against the tree, whether to compare stored nodes, and keys for
    ``--all-signatures``."""

    start: tuple[int, list[str]] | None
    origin: str | None
    given: tuple[Checkpoint, ...]
    nodes: bool
    keys: tuple[str, ...]
    all_signatures: bool

    def frontier(self) -> CompactRange | None:
        return None if self.start is None else CompactRange.from_hex(*self.start)


@dataclass(slots=True)
class _Seal:
    """The seal's part of the audit plan: each range's task, and findings made while planning."""

    tasks: list[_SealTask] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    first: CompactRange = field(default_factory=CompactRange)  # the trusted frontier the first range starts from

    def task(self, index: int) -> _SealTask:
        return self.tasks[index]


def _plan_seal(
    snapshot: Snapshot,
    plan: _Plan,
    since: Checkpoint | None,
    held: list[Checkpoint],
    origin: str | None,
    keys: list[VerifierKey],
    all_signatures: bool,
) -> _Seal:
    """Plan the tree's checks: the trusted starting frontier, each range's claimed one, and the stored entries no
    range will meet (checkpoints beyond the rows, misplaced nodes)."""
    seal = _Seal()
    nodes = snapshot.has_tree_nodes()
    start = plan.start_seq
    if since is not None:
        seal.first, problem = _since_frontier(snapshot, since, plan.max_seq)
        if problem is not None and since.origin in (None, origin):  # another log's root: its origin is the finding
            seal.findings.append(problem)
    given = tuple(item for item in held if item.root is not None and item.seq > start)
    for item in held:
        if item.root is not None and 0 < item.seq <= start:  # before an incremental audit's first row
            seal.findings += _claimed_root_check(snapshot, item, plan.max_seq)
    key_texts = tuple(key.format() for key in keys)
    for index, (low, _) in enumerate(plan.ranges):
        claimed: tuple[int, list[str]] | None
        if index == 0:
            claimed = (seal.first.size, seal.first.to_hex())
        else:
            try:
                frontier = snapshot.frontier(low)
                claimed = (frontier.size, frontier.to_hex())
            except StoreDamaged:
                claimed = None
        seal.tasks.append(_SealTask(claimed, origin, given, nodes, key_texts, all_signatures))
    for ident, columns in snapshot.unreadable_checkpoints():
        seal.findings.append(
            Finding(
                FindingKind.CHECKPOINT_MISMATCH,
                None,
                None,
                f"stored checkpoint #{ident!r} cannot be read ({columns.replace(' ', ', ')} not of the column's "
                "type): no writer stores such an entry",
            )
        )
    for stored in snapshot.checkpoints_beyond(plan.max_seq):
        seal.findings.append(
            Finding(
                FindingKind.CHECKPOINT_MISMATCH,
                None,
                stored.tree_size,
                f"stored checkpoint #{stored.id} (signed by {stored.key_label()}) names {stored.tree_size} rows, "
                f"but the store ends at seq {plan.max_seq}: history was truncated",
            )
        )
    if nodes:
        for level, index in snapshot.misplaced_nodes(plan.max_seq):
            seal.findings.append(
                Finding(
                    FindingKind.CHECKPOINT_MISMATCH,
                    None,
                    None,
                    f"stored tree node (level {level!r}, index {index!r}) lies outside the tree of {plan.max_seq} rows",
                )
            )
    return seal


def _since_frontier(
    snapshot: Snapshot, since: Checkpoint, max_seq: int
) -> tuple[CompactRange, Finding | None]:
    """The tree's frontier at an incremental audit's checkpoint: from the stored tree, proven by the checkpoint's
    root when it has one; recomputed from the rows when the stored tree cannot give it or does not prove out."""
    if since.seq > max_seq:
        return CompactRange(), None  # truncated: reported already
    try:
        frontier = snapshot.frontier(since.seq)
    except StoreDamaged:
        frontier = None
    if frontier is not None and (since.root is None or frontier.root() == since.root):
        return frontier, None
    recomputed = _prefix_frontier(snapshot, since.seq)
    if since.root is not None and recomputed.root() != since.root:
        return recomputed, Finding(
            FindingKind.CHECKPOINT_MISMATCH,
            since.budget_id,
            since.seq,
            f"the rows up to seq {since.seq} give tree root {_b64(recomputed.root())}, the checkpoint says "
            f"{_b64(since.root)}: history before it was rewritten",
        )
    return recomputed, None


def _prefix_frontier(snapshot: Snapshot, size: int) -> CompactRange:
    """The frontier of the first `size` rows, recomputed from them (a stored tree that cannot be used)."""
    frontier = CompactRange()
    for batch in snapshot.rows_between(0, size):
        frontier.extend([unreadable_leaf_hash(row[:17]) for row in batch])
    return frontier


def _claimed_root_check(snapshot: Snapshot, proof: Checkpoint, max_seq: int) -> list[Finding]:
    """A given checkpoint before an incremental audit's rows: its root against the stored tree's."""
    try:
        root = root_from_reader(snapshot.tree(max_seq), proof.seq)
    except MerkleError:
        return []  # the stored tree cannot say; the chain check stands
    if root == proof.root:
        return []
    return [
        Finding(
            FindingKind.CHECKPOINT_MISMATCH,
            proof.budget_id,
            proof.seq,
            f"the stored tree's root at size {proof.seq} is {_b64(root)}, the checkpoint says {_b64(proof.root)}",
        )
    ]


def _attestation(
    snapshot: Snapshot, keys: list[VerifierKey], origin: str | None, max_seq: int
) -> tuple[dict[str, tuple[int, int]], list[Finding]]:
    """For each trusted key, the newest stored checkpoint of this origin whose signature by it verifies: label ->
    (tree size, checkpoint id). Newer ones claiming the key whose signature fails are `bad_signature`."""
    attested: dict[str, tuple[int, int]] = {}
    findings: list[Finding] = []
    for key in keys:
        label = _label(key)
        bad = 0
        for stored in snapshot.newest_by_key(key, at_most=max_seq):
            try:
                found = Checkpoint.from_note(stored.note)
            except CheckpointError:
                found = None
            if found is not None and found.origin != origin:
                continue  # another log's note: the tree check reports it
            problem = signature_problem(stored.note, key)
            if problem is None and found is not None:
                attested[label] = (stored.tree_size, stored.id)
                break
            bad += 1
            findings.append(_bad_stored(stored, problem or "its note cannot be read"))
            if bad >= MAX_BAD_SIGNATURES_PER_KEY:
                findings.append(
                    Finding(
                        FindingKind.BAD_SIGNATURE,
                        None,
                        None,
                        f"stopped after {bad} stored checkpoints claiming key {label} failed to verify",
                    )
                )
                break
    return attested, findings


def _bad_stored(stored: StoredCheckpoint, problem: str) -> Finding:
    return Finding(
        FindingKind.BAD_SIGNATURE,
        None,
        stored.tree_size,
        f"stored checkpoint #{stored.id} (size {stored.tree_size}, filed as signed by {stored.key_label()}): {problem}",
    )


def _unattested(
    snapshot: Snapshot, keys: list[VerifierKey], attested: dict[str, tuple[int, int]], max_seq: int
) -> list[Finding]:
    """The rows after the newest stored checkpoint a trusted key signed, as one finding naming the first."""
    if not keys:
        return []
    newest = max(attested.items(), key=lambda item: item[1][0], default=None)
    covered = newest[1][0] if newest is not None else 0
    if covered >= max_seq:
        return []
    first = covered + 1
    link = snapshot.link_at(first)
    budget_id = link[2] if link is not None and isinstance(link[2], str) else None
    count = max_seq - covered
    after = (
        f"the newest checkpoint signed by a trusted key (size {covered}, by {newest[0]})"
        if newest is not None
        else "any checkpoint signed by a trusted key (none is stored)"
    )
    return [
        Finding(
            FindingKind.UNATTESTED_ROWS,
            budget_id,
            first,
            f"rows {first}..{max_seq} ({count} row{'s' if count != 1 else ''}) come after {after}: no trusted key "
            "vouches for them (appended without the writer's key?)",
        )
    ]


def _tree_check(snapshot: Snapshot, low: int, high: int, task: _SealTask, frontier: CompactRange) -> TreeCheck:
    keys = [VerifierKey.parse(text) for text in task.keys]

    def signatures(stored: StoredCheckpoint) -> list[Finding]:
        try:
            _, failed = trusted_signers(stored.note, keys)
        except NoteError as error:
            return [_bad_stored(stored, f"its note cannot be read ({error})")]
        return [_bad_stored(stored, f"its signature by {_label(key)} does not verify") for key in failed]

    return TreeCheck(
        frontier,
        end=high,
        origin=task.origin,
        checkpoints=snapshot.checkpoints_between(low, high),
        given=task.given,
        nodes=snapshot.nodes_at if task.nodes else None,
        signatures=signatures if task.all_signatures and keys else None,
    )


def _prove_tree(
    store: BudgetStore, plan: _Plan, seal: _Seal, outcomes: list[TreeOutcome | None]
) -> tuple[list[Finding], CompactRange | None]:
    """Chain the ranges' tree outcomes from the trusted start; recompute any range whose claimed start fails."""
    findings: list[Finding] = []
    expected = seal.first
    for index, ((low, high), outcome) in enumerate(zip(plan.ranges, outcomes, strict=True)):
        task = seal.tasks[index]
        if outcome is None or task.frontier() != expected:
            outcome = _tree_range(store, low, high, task, expected)
        findings += outcome.findings
        expected = outcome.compact_range()
    return findings, expected


def _tree_range(store: BudgetStore, low: int, high: int, task: _SealTask, frontier: CompactRange) -> TreeOutcome:
    """The tree's checks alone over rows low < seq <= high, from a proven frontier."""
    with store.snapshot() as snapshot:
        tree = _tree_check(snapshot, low, high, task, frontier.copy())
        for batch in store.scan(low, high, batch_rows=BATCH_ROWS):
            tree.add([unreadable_leaf_hash(row[:17]) for row in batch], batch)
        return tree.finish()


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


def _run_parallel(
    store: BudgetStore,
    tasks: list[tuple[int, int, tuple[int, str]]],
    seal: _Seal,
    on_progress: Callable[[int, int], None] | None,
    looking_back: Callable[[], _LookedBack] | None = None,
) -> tuple[list[tuple[RangeResult, TreeOutcome | None]], _LookedBack | None]:
    """The first range in this process, the others each in a worker process, all at once: the parent would
    otherwise only wait, and its store is open already. The look-back, if any, runs here too, once the workers
    have their ranges. Progress counts this process's rows as they go and
    each worker's once it is done. Leaving (done, an error, Ctrl-C or SIGTERM) terminates the workers at once:
    an interrupted audit must not wait for them to finish their ranges."""
    total = sum(high - low for low, high, _ in tasks)
    with _worker_pool(len(tasks) - 1) as pool:
        pending = [
            pool.apply_async(_audit_range_in_worker, (store.location.target, low, high, anchor, seal.task(index)))
            for index, (low, high, anchor) in enumerate(tasks)
            if index > 0
        ]
        looked_back = looking_back() if looking_back is not None else None
        low, high, anchor = tasks[0]
        first = _audit_range(store, low, high, anchor, on_progress, total, seal.task(0))
        results = [first]
        done = first[0].rows
        for item in pending:
            results.append(item.get())
            done += results[-1][0].rows
            if on_progress is not None:
                on_progress(done, total)
        return results, looked_back


def _worker_pool(workers: int) -> multiprocessing.pool.Pool:
    """Worker processes, forked where `FORKED_WORKERS` (started at once, before the pool's own threads)."""
    context = multiprocessing.get_context("fork") if FORKED_WORKERS else multiprocessing.get_context()
    return context.Pool(processes=workers, initializer=_quiet_worker)


def _quiet_worker() -> None:
    """A worker leaves Ctrl-C to the auditing process, which stops it, and dies at once on SIGTERM (a forked
    worker would otherwise inherit the command line's handler and print a traceback as it goes), and prints none of
    the database libraries' log lines. It also dies, silently, within `ORPHAN_POLL_SECONDS` of its parent being
    killed outright (SIGKILL, the OOM killer), which no handler sees: an orphan would go on reading the store and
    print a BrokenPipeError when done."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # A lost server is the parent's one line to say: the libraries' own log lines (SQLAlchemy's pool logs a failed
    # close with a traceback) must not reach stderr from here. A forked worker has the command line's handlers already.
    for name in ("sqlalchemy", "psycopg"):
        if not logging.getLogger(name).handlers:
            logging.getLogger(name).addHandler(logging.NullHandler())
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_POLL_SECONDS)
        os._exit(1)  # the parent is gone: nobody will read this worker's result

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def _audit_range_in_worker(
    url: str, low: int, high: int, anchor: tuple[int, str], task: _SealTask
) -> tuple[RangeResult, TreeOutcome | None]:
    with BudgetStore.open(url, readonly=True) as store:
        return _audit_range(store, low, high, anchor, None, 0, task)


def _audit_range(
    store: BudgetStore,
    low: int,
    high: int,
    anchor: tuple[int, str],
    on_progress: Callable[[int, int], None] | None,
    total: int,
    task: _SealTask,
) -> tuple[RangeResult, TreeOutcome | None]:
    """Check rows with low < seq <= high, in order, each against the stored row before it, and the tree over them
    from the task's starting frontier (none: the parent recomputes it)."""
    result = RangeResult()
    prev_seq, prev_chain = anchor
    frontier = task.frontier()
    with store.snapshot() as snapshot:
        tree = _tree_check(snapshot, low, high, task, frontier) if frontier is not None else None
        leaves = result.leaves
        for batch in store.scan(low, high, batch_rows=BATCH_ROWS):
            for row in batch:
                prev_seq, prev_chain = check_row(row, prev_seq, prev_chain, result)
            if tree is not None:
                tree.add(leaves, batch)
            leaves.clear()
            if on_progress is not None:
                on_progress(result.rows, total)
        outcome = tree.finish() if tree is not None else None
    if on_progress is not None:
        on_progress(result.rows, total)
    return result, outcome


def _unique_keys(keys: Iterable[VerifierKey]) -> list[VerifierKey]:
    unique: list[VerifierKey] = []
    for key in keys:
        if key not in unique:
            unique.append(key)
    return unique


def _label(key: VerifierKey) -> str:
    return f"{key.name}+{key.key_hash:08x}"


def _b64(value: bytes | None) -> str:
    return "none" if value is None else base64.b64encode(value).decode("ascii")


def as_checkpoint(value: CheckpointLike) -> Checkpoint:
    """A checkpoint from what a caller has at hand: a `Checkpoint`, a chain head, the document (as a mapping
    or as JSON text), a checkpoint note (signed or not), or the path of a file holding either."""
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
    if text.lstrip().startswith("{") or "\n" in text:
        return Checkpoint.parse(text)
    return load_checkpoint(text)


def load_checkpoint(path: str) -> Checkpoint:
    """Read a checkpoint file (JSON or a checkpoint note); raises `CheckpointError` when it is missing, not a
    regular file, or not a checkpoint. A FIFO or device is refused without blocking on it."""
    text = read_small_file(path, _MAX_CHECKPOINT_BYTES, "checkpoint file", CheckpointError)
    if len(text) > _MAX_CHECKPOINT_BYTES:
        raise CheckpointError(f"checkpoint {path} is larger than any checkpoint ({_MAX_CHECKPOINT_BYTES} bytes)")
    return Checkpoint.parse(text, source=f"checkpoint {path}")


_MAX_CHECKPOINT_BYTES = 1 << 20


__all__ = ["AuditReport", "Finding", "FindingKind", "audit", "load_checkpoint"]
