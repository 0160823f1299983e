"""Consumer admission (spec section 4): when a decision may bound a run, and the reason when it may not."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from compute_budget import (
    BudgetRefused,
    ComputeBudgetDecision,
    ComputeBudgetError,
    ComputeBudgetStatus,
    RefusalReason,
    SearchGateDecision,
    admit,
    compute_budget_id,
    decide,
)
from tests.conftest import make_gate


def rehashed(decision: ComputeBudgetDecision, **changes: Any) -> ComputeBudgetDecision:
    """`decision` with `changes` and a budget_id recomputed to match, so only the changes can be refused."""
    edited = dataclasses.replace(decision, **changes)
    return dataclasses.replace(edited, budget_id=compute_budget_id(edited))


def refusal(decision: ComputeBudgetDecision, **kwargs: Any) -> RefusalReason:
    """The reason admit gives for refusing `decision` (fails the test if it is admitted)."""
    with pytest.raises(BudgetRefused) as raised:
        admit(decision, **kwargs)
    return raised.value.reason


def test_refusal_reasons_are_the_spec_values() -> None:
    """RefusalReason holds exactly the six reasons of spec section 4 (limits_invalid since revision 3)."""
    assert {reason.value for reason in RefusalReason} == {
        "status_not_allowed",
        "limits_exhausted",
        "budget_id_mismatch",
        "unsupported_policy_version",
        "gate_rederive_mismatch",
        "limits_invalid",
    }


def test_budget_refused_is_a_compute_budget_error() -> None:
    """BudgetRefused is caught by the one error root and says its reason in its message."""
    with pytest.raises(ComputeBudgetError, match="status_not_allowed"):
        admit(decide(make_gate(status="blocked")))


@pytest.mark.parametrize(
    "reason", ["eligible_missing_role", "eligible_missing_relation", "eligible_missing_proposal",
               "eligible_target_unbound"]
)
def test_allowed_decisions_are_admitted(reason: str) -> None:
    """Every allowed v1 decision is admitted, alone and with the gate it came from."""
    gate = make_gate(reason_code=reason)
    decision = decide(gate)
    admit(decision)  # each call raises BudgetRefused if the decision is refused
    admit(decision, gate=gate)
    admit(decision, gate=SearchGateDecision.from_dict(gate))
    admit(decision, gate=json.dumps(gate))
    admit(decision, gate=json.dumps(gate, ensure_ascii=False).encode("utf-8"))


@pytest.mark.parametrize(
    "gate",
    [
        pytest.param(make_gate(status="ineligible"), id="gate-ineligible"),
        pytest.param(make_gate(status="blocked"), id="gate-blocked"),
        pytest.param(make_gate(status="unassessable"), id="gate-unassessable"),
        pytest.param(make_gate(reason_code="Eligible_Missing_Role"), id="unknown-reason"),
        pytest.param(make_gate(extra=1), id="malformed"),
    ],
)
def test_decisions_that_are_not_allowed_are_refused(gate: dict[str, Any]) -> None:
    """Blocked and unassessable decisions are refused with status_not_allowed."""
    assert refusal(decide(gate)) is RefusalReason.STATUS_NOT_ALLOWED


def test_budget_zero_is_refused() -> None:
    """budget_zero (reserved, never emitted by v1) is a refusal even with limits and a matching id."""
    decision = rehashed(decide(make_gate()), status=ComputeBudgetStatus.BUDGET_ZERO)
    assert refusal(decision) is RefusalReason.STATUS_NOT_ALLOWED


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"max_candidates": 0}, id="no-candidates"),
        pytest.param({"max_steps": 0}, id="no-steps"),
        pytest.param({"max_candidates": 0, "max_steps": 0}, id="neither"),
    ],
)
def test_exhausted_limits_are_refused(changes: dict[str, int]) -> None:
    """An allowed decision with max_candidates or max_steps at 0 is refused as limits_exhausted."""
    assert refusal(rehashed(decide(make_gate()), **changes)) is RefusalReason.LIMITS_EXHAUSTED


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"max_candidates": -1}, id="negative-candidates"),
        pytest.param({"max_depth": -1}, id="negative-depth"),
        pytest.param({"max_parallelism": -5}, id="negative-parallelism"),
        pytest.param({"max_candidates": -1, "max_steps": 0}, id="before-exhausted"),
    ],
)
def test_negative_limits_are_invalid(changes: dict[str, int]) -> None:
    """Spec 4, revision 3: a negative limit is limits_invalid, checked before limits_exhausted."""
    assert refusal(rehashed(decide(make_gate()), **changes)) is RefusalReason.LIMITS_INVALID


@pytest.mark.parametrize("wallclock", [0, 1, 86_400_000])
def test_a_wall_clock_limit_under_v1_is_invalid(wallclock: int) -> None:
    """v1 never sets max_wallclock_ms: a decision carrying one is refused (it is not hashed, so the budget_id
    still matches: this is the check that catches it), after status and before the exhausted limits."""
    decision = dataclasses.replace(decide(make_gate()), max_wallclock_ms=wallclock)
    assert refusal(decision) is RefusalReason.LIMITS_INVALID
    blocked = dataclasses.replace(decide(make_gate(status="blocked")), max_wallclock_ms=wallclock)
    assert refusal(blocked) is RefusalReason.STATUS_NOT_ALLOWED


@pytest.mark.parametrize("value", [True, 5.0, "5", None])
def test_limits_that_are_not_integers_are_exhausted(value: object) -> None:
    """A max_candidates that is not a true integer is treated as exhausted, never as a grant."""
    decision = dataclasses.replace(decide(make_gate()), max_candidates=value)  # type: ignore[arg-type]
    assert refusal(decision) is RefusalReason.LIMITS_EXHAUSTED


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"budget_id": "0" * 64}, id="wrong-id"),
        pytest.param({"budget_id": ""}, id="empty-id"),
        pytest.param({"max_candidates": 500}, id="raised-candidates"),
        pytest.param({"max_depth": 3}, id="raised-depth"),
        pytest.param({"max_parallelism": 64}, id="raised-parallelism"),
        pytest.param({"reason_code": "eligible_missing_proposal"}, id="other-reason"),
        pytest.param({"gate_decision_id": "gate-9999"}, id="other-gate"),
        pytest.param({"evidence_spans": ()}, id="spans-dropped"),
        pytest.param({"gate_decision_id": object()}, id="unhashable-field"),
    ],
)
def test_tampered_decisions_are_refused(changes: dict[str, Any]) -> None:
    """A decision whose fields no longer hash to its budget_id is refused as budget_id_mismatch."""
    decision = dataclasses.replace(decide(make_gate()), **changes)
    assert refusal(decision) is RefusalReason.BUDGET_ID_MISMATCH


def test_unhashed_fields_may_change() -> None:
    """explanation is not hashed: changing it does not stop admission (max_wallclock_ms is not hashed either, but
    v1 fixes it to null: see limits_invalid)."""
    decision = dataclasses.replace(decide(make_gate()), explanation="edited")
    admit(decision)
    admit(decision, gate=make_gate())


@pytest.mark.parametrize("version", ["compute_budget.v2", "", "COMPUTE_BUDGET.V1", None, ["compute_budget.v1"]])
def test_unknown_policy_versions_are_refused(version: Any) -> None:
    """A decision under a version with no registered policy is refused as unsupported_policy_version."""
    decision = dataclasses.replace(decide(make_gate()), policy_version=version)
    assert refusal(decision) is RefusalReason.UNSUPPORTED_POLICY_VERSION


def test_unsupported_version_is_reported_before_status() -> None:
    """The policy version is checked first, so an unknown version wins over a blocked status."""
    decision = dataclasses.replace(decide(make_gate(status="blocked")), policy_version="compute_budget.v0")
    assert refusal(decision) is RefusalReason.UNSUPPORTED_POLICY_VERSION


def test_status_is_reported_before_a_hash_mismatch() -> None:
    """A blocked decision with a wrong id is refused for its status, the plainest reason."""
    decision = dataclasses.replace(decide(make_gate(status="blocked")), budget_id="f" * 64)
    assert refusal(decision) is RefusalReason.STATUS_NOT_ALLOWED


@pytest.mark.parametrize(
    "gate",
    [
        pytest.param(make_gate(decision_id="gate-0002"), id="other-decision-id"),
        pytest.param(make_gate(reason_code="eligible_missing_proposal"), id="other-row"),
        pytest.param(make_gate(status="blocked"), id="blocked-gate"),
        pytest.param(make_gate(evidence_spans=[]), id="other-spans"),
        pytest.param(make_gate(extra=1), id="malformed-gate"),
        pytest.param(json.dumps(make_gate()).replace('"status"', '"status": "eligible", "status"', 1),
                     id="duplicate-key-text"),
        pytest.param("not json", id="text-not-json"),
        pytest.param(b"\xff\xfe", id="bytes-not-utf8"),
        pytest.param(["not", "a", "gate"], id="array"),
    ],
)
def test_gates_that_do_not_rederive_are_refused(gate: object) -> None:
    """With a gate that decides to something else, admit refuses with gate_rederive_mismatch."""
    assert refusal(decide(make_gate()), gate=gate) is RefusalReason.GATE_REDERIVE_MISMATCH


def test_rederive_mismatch_names_the_fields() -> None:
    """The refusal message says which fields the re-derived decision differs in."""
    with pytest.raises(BudgetRefused, match="gate_decision_id"):
        admit(decide(make_gate()), gate=make_gate(decision_id="gate-0002"))


def test_gate_with_other_residuals_still_rederives() -> None:
    """Fields of the gate that are not part of the decision (residual_ids, candidate_organ) do not matter."""
    admit(decide(make_gate()), gate=make_gate(residual_ids=[], candidate_organ=None))
