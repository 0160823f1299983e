"""A policy's table as the detail page shows it, worked out by the policy itself: each line is a kind of gate
(malformed, not eligible, eligible with each code of the policy's table, eligible with any other code), and what
the line says (status, reason, limits) is what `BudgetTable.decide` gives such a gate. The page never restates
the policy's rules or their order, so a new policy version is shown as it decides."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compute_budget.core.policy.gate import SearchGateStatus
from compute_budget.core.policy.rules import BudgetTable
from compute_budget.core.policy.types import ComputeBudgetDecision

# A well-formed gate but for its status and reason code (spec 3.1): the kinds of gate are this with those set.
_SAMPLE_GATE: dict[str, Any] = {
    "decision_id": "workbench-policy-table",
    "policy_version": "workbench-policy-table",
    "input_digest": "workbench-policy-table",
    "residual_ids": [],
    "candidate_organ": None,
    "evidence_spans": [],
}


@dataclass(frozen=True, slots=True)
class Granted:
    """The limits a line of the table grants (what the policy's decision of such a gate carries)."""

    max_candidates: int
    max_depth: int
    max_steps: int
    max_parallelism: int


@dataclass(frozen=True, slots=True)
class PolicyRow:
    """One row of a policy table as the detail page shows it, and whether it is the one that applied."""

    gate: str
    status: str
    reason: str
    limits: Granted
    applied: bool


def policy_rows(policy: BudgetTable, status: str, reason: str) -> list[PolicyRow]:
    """The policy's table, each line decided by the policy, with the line that gave a decision of (`status`,
    `reason`) marked."""
    rows = []
    for label, gates in _gate_kinds(policy):
        decisions = [policy.decide(gate) for gate in gates]
        reasons = list(dict.fromkeys(decision.reason_code for decision in decisions))
        first = decisions[0]
        rows.append(PolicyRow(
            label, first.status.value, " / ".join(reasons), _granted(first),
            applied=status == first.status.value and reason in reasons,
        ))
    return rows


def _gate_kinds(policy: BudgetTable) -> list[tuple[str, list[dict[str, Any]]]]:
    """Each kind of gate the table has a line for, with gates of that kind for the policy to decide."""
    other = "any_other_reason_code"
    while other in policy.table:  # a code the policy's table does not name, whatever it names
        other += "_"
    refused = [status for status in SearchGateStatus if status is not SearchGateStatus.ELIGIBLE]
    return [
        ("malformed (any rule of spec 3.1 broken)", [{}]),
        ("status not eligible", [_gate(status.value, other) for status in refused]),
        *((f"eligible, {code}", [_gate(SearchGateStatus.ELIGIBLE.value, code)]) for code in policy.table),
        ("eligible, any other reason", [_gate(SearchGateStatus.ELIGIBLE.value, other)]),
    ]


def _gate(status: str, reason_code: str) -> dict[str, Any]:
    return {**_SAMPLE_GATE, "status": status, "reason_code": reason_code}


def _granted(decision: ComputeBudgetDecision) -> Granted:
    return Granted(decision.max_candidates, decision.max_depth, decision.max_steps, decision.max_parallelism)
