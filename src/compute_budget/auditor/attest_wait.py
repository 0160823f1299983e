"""The audit and a live writer (spec 12.5): the rows a database audit found above the newest trusted checkpoint of
its snapshot wait, up to the attest wait, for a checkpoint covering them. One stored meanwhile is not trusted for
being signed: it counts only once the audit has read the rows up to it in a new read-only snapshot, checked them as
new rows (the chain continuing from the audit's last row) and recomputed from them the root the checkpoint names.

The wait is timed by this process's monotonic clock alone: no time read from the database (a checkpoint's
`recorded_at`, a cosignature's timestamp) shortens or lengthens it.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from dataclasses import dataclass

from compute_budget.auditor.checkpoints import attestation, b64
from compute_budget.auditor.key_states import note_problem
from compute_budget.auditor.report import AttestWait, AuditReport, utc_now
from compute_budget.auditor.source import AuditSource
from compute_budget.auditor.tree import SealTask, prefix_frontier
from compute_budget.auditor.workers import audit_range
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.head import ChainHead
from compute_budget.core.log.key_states import KeyStates
from compute_budget.core.log.merkle import CompactRange
from compute_budget.core.log.note import VerifierKey
from compute_budget.core.seal_checks import StoredCheckpoint
from compute_budget.core.verify import Finding, FindingKind
from compute_budget.errors import CheckpointError, MerkleError, StoreDamaged

POLL_SECONDS = 0.15  # how often the store is asked for a newer trusted checkpoint while the audit waits


@dataclass(frozen=True, slots=True)
class Trust:
    """Whose signatures count, as the audit judged them: the trusted keys, their states, the store's origin, and
    whether every stored checkpoint's signature is checked (`--all-signatures`)."""

    keys: tuple[VerifierKey, ...]
    states: KeyStates
    origin: str | None
    all_signatures: bool = False


def await_attestation(
    source: AuditSource, report: AuditReport, limit: float, trust: Trust, *, through: int | None = None
) -> AuditReport:
    """`report` of a database audit, extended to a covering checkpoint stored within `limit` seconds when it found
    `unattested_rows`; else as it was, saying what it waited (`attest_wait`). A range audit (`through`) does not
    wait: its rows end where it was told."""
    if not trust.keys or report.root is None or not _unattested(report):
        return report
    if limit == 0 or through is not None:
        reason = "the rows above the newest trusted checkpoint stay unattested_rows" if limit == 0 else (
            "a range audit (through a seq) does not wait for a writer's checkpoint"
        )
        return dataclasses.replace(report, attest_wait=AttestWait(limit, 0.0, None, reason))
    began = time.monotonic()
    deadline = began + limit
    size = report.head.seq
    while True:
        found = _covering(source, trust, size)
        if found is not None:
            outcome = _extend(source, report, trust, found, AttestWait(limit, time.monotonic() - began))
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            reason = f"no checkpoint a trusted key signed covered row {size} meanwhile"
            outcome = dataclasses.replace(
                report, attest_wait=AttestWait(limit, time.monotonic() - began, None, reason)
            )
            break
        time.sleep(min(POLL_SECONDS, remaining))
    return dataclasses.replace(
        outcome, elapsed_seconds=report.elapsed_seconds + time.monotonic() - began, finished_at=utc_now()
    )


def _unattested(report: AuditReport) -> bool:
    return any(finding.kind is FindingKind.UNATTESTED_ROWS for finding in report.findings)


def _covering(source: AuditSource, trust: Trust, size: int) -> StoredCheckpoint | None:
    """The largest stored checkpoint of at least `size` rows whose signature by a trusted key verifies and counts
    (its key's state), in a snapshot of now; None when there is none yet."""
    with source.snapshot() as snapshot:
        max_seq = snapshot.max_seq()
        if max_seq < size:
            return None
        attested, _ = attestation(snapshot, list(trust.keys), trust.origin, max_seq)  # a note that fails: no candidate
        best: StoredCheckpoint | None = None
        for tree_size, ident in attested.values():
            if tree_size < size or (best is not None and tree_size <= best.tree_size):
                continue
            stored = next((item for item in snapshot.checkpoints_at(tree_size) if item.id == ident), None)
            if stored is not None and note_problem(snapshot, stored.note, trust.states, max_seq) is None:
                best = stored
        return best


def _extend(
    source: AuditSource, report: AuditReport, trust: Trust, stored: StoredCheckpoint, wait: AttestWait
) -> AuditReport:
    """The audit extended to `stored`'s size, when the rows up to it, checked as new rows, give its root; else
    `report` with what the extension found, its rows still unattested."""
    low, high = report.head.seq, stored.tree_size
    started = _frontier_at(source, low, report.root)
    try:
        root = Checkpoint.from_note(stored.note).root
    except CheckpointError:  # cannot happen for a note whose signature verified; refused all the same
        root = None
    if started is None or root is None:
        why = f"the rows up to seq {low} no longer give the root the audit recomputed" if started is None else (
            f"stored checkpoint #{stored.id} cannot be read")
        return _refused(report, wait, stored, why, [])
    frontier, nodes = started
    task = SealTask((low, frontier.to_hex()), trust.origin, (), nodes,
                    tuple(key.format() for key in trust.keys), trust.all_signatures)
    result, tree = audit_range(source, low, high, (low, report.head.chain_hash), None, 0, task)
    assert tree is not None  # the task starts from a frontier
    findings = result.findings + tree.findings
    if not findings and (result.rows != high - low or tree.root != root):
        findings.append(Finding(
            FindingKind.CHECKPOINT_MISMATCH, None, high,
            f"stored checkpoint #{stored.id} (size {high}, filed as signed by {stored.key_label()}) says root "
            f"{b64(root)}, but the {result.rows} rows after seq {low} give {b64(tree.root)} at size {tree.size}",
        ))
    if findings:
        return _refused(report, wait, stored, "it does not hold (see the findings)", findings)
    counts = [Counter(old) + Counter(new) for old, new in (
        (report.status_counts, result.status_counts), (report.reason_counts, result.reason_counts),
        (report.policy_counts, result.policy_counts),
    )]
    head = ChainHead(result.last_seq, result.last_chain_hash, result.last_budget_id) if result.rows else report.head
    return dataclasses.replace(
        report, findings=tuple(item for item in report.findings if item.kind is not FindingKind.UNATTESTED_ROWS),
        rows_checked=report.rows_checked + result.rows, head=head, root=tree.root, attested_size=high,
        status_counts=dict(counts[0]), reason_counts=dict(counts[1]), policy_counts=dict(counts[2]),
        attest_wait=dataclasses.replace(wait, extended_to=high),
    )


def _refused(
    report: AuditReport, wait: AttestWait, stored: StoredCheckpoint, why: str, findings: list[Finding]
) -> AuditReport:
    """`report` with the extension's findings, its rows still unattested, and why the checkpoint did not count."""
    reason = (f"the checkpoint of size {stored.tree_size} stored meanwhile (#{stored.id}, filed as signed by "
              f"{stored.key_label()}) does not count: {why}")
    return dataclasses.replace(
        report, findings=report.findings + tuple(findings), attest_wait=dataclasses.replace(wait, reason=reason)
    )


def _frontier_at(source: AuditSource, size: int, root: bytes | None) -> tuple[CompactRange, bool] | None:
    """The tree's frontier at `size` in a new snapshot, proven by the `root` the audit recomputed from the rows (the
    stored tree is a claim: recomputed from the rows when it does not give that root), and whether the store keeps
    tree nodes; None when the rows no longer give it."""
    with source.snapshot() as snapshot:
        nodes = snapshot.has_tree_nodes()
        try:
            frontier: CompactRange | None = snapshot.frontier(size)
        except (StoreDamaged, MerkleError):
            frontier = None
        if frontier is None or frontier.root() != root:
            frontier = prefix_frontier(snapshot, size)
        return (frontier, nodes) if frontier.root() == root else None
