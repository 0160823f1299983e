"""The policy table of the detail page (issue 29, item 3): worked out by the policy itself (`web.policy_table`)
rather than a copy of its rules."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any

from compute_budget.core.policy.rules import UNKNOWN_GATE_REASON_CODE, V1, BudgetTable
from compute_budget.core.policy.types import ComputeBudgetDecision
from compute_budget.web.policy_table import policy_rows
from tests.conftest import REPO_ROOT

WEB = REPO_ROOT / "src" / "compute_budget" / "web"


def _table(policy: BudgetTable, status: str = "", reason: str = "") -> list[tuple[Any, ...]]:
    return [
        (row.gate, row.status, row.reason, dataclasses.astuple(row.limits), row.applied)
        for row in policy_rows(policy, status, reason)
    ]


def test_the_v1_table_is_the_one_the_page_always_showed() -> None:
    """V1's table, each line as V1 decides it, in the order the page has shown it; the line that applied marked."""
    assert _table(V1, "budget_blocked", "gate_blocked") == [
        ("malformed (any rule of spec 3.1 broken)", "budget_unassessable", "malformed_gate_decision",
         (0, 0, 0, 0), False),
        ("status not eligible", "budget_blocked", "gate_ineligible / gate_blocked / gate_unassessable",
         (0, 0, 0, 0), True),
        ("eligible, eligible_missing_role", "budget_allowed", "eligible_missing_role", (5, 2, 10, 1), False),
        ("eligible, eligible_missing_relation", "budget_allowed", "eligible_missing_relation", (5, 2, 10, 1), False),
        ("eligible, eligible_missing_proposal", "budget_allowed", "eligible_missing_proposal", (3, 1, 5, 1), False),
        ("eligible, eligible_target_unbound", "budget_allowed", "eligible_target_unbound", (5, 2, 10, 1), False),
        ("eligible, any other reason", "budget_unassessable", "unknown_gate_reason_code", (0, 0, 0, 0), False),
    ]
    applied = [row[0] for row in _table(V1, "budget_allowed", "eligible_missing_proposal") if row[4]]
    assert applied == ["eligible, eligible_missing_proposal"]


@dataclasses.dataclass(frozen=True, slots=True)
class _Lenient(BudgetTable):
    """A toy policy that decides unlike v1: an eligible gate with a code it does not know gets the smallest grant
    of its table instead of nothing."""

    def decide(
        self, gate: object, *, defect: str | None = None, defect_rule: str = "3.1.7",
        repeated_keys: Collection[str] = (), nesting_checked: bool = False,
    ) -> ComputeBudgetDecision:
        decision = BudgetTable.decide(self, gate, defect=defect, defect_rule=defect_rule,
                                       repeated_keys=repeated_keys, nesting_checked=nesting_checked)
        if decision.reason_code == UNKNOWN_GATE_REASON_CODE and isinstance(gate, dict):
            return BudgetTable.decide(self, {**gate, "reason_code": "eligible_missing_proposal"})
        return decision


def test_the_table_shows_what_the_policy_decides_not_a_copy_of_v1s_rules() -> None:
    """A policy that decides otherwise is shown as it decides: the page copies no rule of v1's."""
    lenient = _Lenient("toy.v2", V1.table)
    assert _table(lenient, "budget_allowed", "eligible_missing_proposal")[-1] == (
        "eligible, any other reason", "budget_allowed", "eligible_missing_proposal", (3, 1, 5, 1), True,
    )


def test_the_workbench_copies_none_of_the_policys_outcomes() -> None:
    """web/ names none of the policy's fallback outcomes: they come from the policy's decisions."""
    names = ("MALFORMED_GATE_DECISION", "UNKNOWN_GATE_REASON_CODE", "NO_LIMITS")
    found = sorted(
        (path.name, name) for path in WEB.rglob("*.py") for name in names if name in path.read_text(encoding="utf-8")
    )
    assert found == []
