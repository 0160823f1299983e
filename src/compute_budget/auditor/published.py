"""The audit of a source read from its published checkpoint (`audit --tiles`, spec 10.2), as the one audit sees it:
the source is opened once, its checkpoint read, parsed and pinned (every worker reads the same tree), and given to
the audit as the checkpoint to hold (trusted keys and witness quorum, as for `--checkpoint`). The witnesses'
answers are judged here, against the published size (`freshness`), not by the database rule that the store
extends them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from compute_budget.auditor.freshness import NOT_CHECKED, freshness_findings
from compute_budget.auditor.report import AuditReport
from compute_budget.auditor.request import AuditInputs, AuditRequest
from compute_budget.auditor.witness_rules import WitnessRequirement
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.witness_policy import TlogPolicy
from compute_budget.core.verify import Finding, FindingKind
from compute_budget.errors import ArgumentTypeError, StoreUnavailable
from compute_budget.keys.key_files import witness_key

PUBLISHED_LABEL = "the published checkpoint"


@dataclass(frozen=True, slots=True)
class Pinned:
    """A publication's audit, prepared: the request to run, the checkpoint read, the witnesses' answers."""

    request: AuditRequest
    published: Checkpoint
    answers: tuple[tuple[str, str], ...]


def pin(request: AuditRequest, inputs: AuditInputs, published: Checkpoint) -> tuple[Pinned, AuditInputs]:
    """Prepare the audit of a source read from its `published` checkpoint (`StoreUnavailable`: it cannot run):
    the request and inputs that hold it as the checkpoint, parsed once when it was read."""
    if inputs.checkpoint is not None:
        raise ArgumentTypeError("a publication's audit holds its own checkpoint: give no other checkpoint")
    if request.expected_origin is None:
        raise ArgumentTypeError("auditing a publication needs the log's origin (--origin NAME)")
    if not request.trusted_keys:
        raise ArgumentTypeError("auditing a publication needs the writer's key (--trusted-key KEY)")
    answers = []
    for source, answer in inputs.answers:
        if not isinstance(answer, str):
            raise StoreUnavailable(f"{source}: a witness's answer is its note text")
        answers.append((source, answer))
    pinned = Pinned(
        dataclasses.replace(request, checkpoint=published, witnessed_checkpoints=()), published, tuple(answers)
    )
    return pinned, dataclasses.replace(inputs, checkpoint=published, answers=[], checkpoint_label=PUBLISHED_LABEL)


def with_freshness(report: AuditReport, pinned: Pinned, now: int) -> AuditReport:
    """The report with the witnesses' answers judged against the publication, or saying freshness was not
    checked."""
    request = pinned.request
    if not pinned.answers:
        return dataclasses.replace(report, warnings=(*report.warnings, NOT_CHECKED))
    rule = request.witness_policy
    if rule is None or not rule.requires_witnesses:  # the --witness-key quorum, else all the answering witnesses
        keys = tuple(dict.fromkeys(witness_key(item) for item in (*request.witness_keys, *request.freshness_keys)))
        rule = TlogPolicy.from_witness_keys(keys, request.witness_quorum if request.witness_keys else None)
    policy = WitnessRequirement(rule, request.max_witness_age, now)
    found = freshness_findings(pinned.published, list(pinned.answers), policy)
    return dataclasses.replace(report, findings=(*report.findings, *found))


def another_log(origin: str | None, expected_origin: str, published_size: int | None) -> Finding:
    """The `checkpoint_mismatch` (section 6: not the history that was expected) of a source that is not the log
    `expected_origin` names. A publication's (`published_size`: its checkpoint's size) is worded for what was read,
    its checkpoint, and names that size as the audit's other checkpoint findings do; a store's names no row."""
    if published_size is not None:
        return Finding(
            FindingKind.CHECKPOINT_MISMATCH, None, published_size,
            f"the publication's checkpoint is of log {origin}, not {expected_origin}: another log is published in "
            "its place",
        )
    return Finding(
        FindingKind.CHECKPOINT_MISMATCH, None, None,
        f"this store is log {origin or '(none: the store has no origin)'}, not {expected_origin}: "
        "another store is in its place",
    )
