"""The policy as a parameter (issue 29 item 7): a toy policy v2, registered by a fixture only, records, audits and
admits without any change to the store or the auditor; v1 stays the default everywhere."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any, cast

import pytest

from compute_budget import (
    POLICIES,
    BudgetRefused,
    BudgetStore,
    RefusalReason,
    admit,
    audit,
    compute_budget_id,
    decide,
)
from compute_budget.core.policy.rules import V1, BudgetTable, Limits
from compute_budget.errors import ArgumentTypeError, UnsupportedPolicyVersion
from tests.conftest import make_gate

TOY_VERSION = "compute_budget.toy_v2"
TOY = BudgetTable(
    version=TOY_VERSION,
    table={
        "eligible_missing_role": Limits(7, 3, 20, 2, max_wallclock_ms=60_000),
        "eligible_missing_proposal": Limits(1, 1, 2, 1, max_wallclock_ms=5_000),
    },
)


@pytest.fixture
def toy_policy() -> Iterator[BudgetTable]:
    """TOY registered in POLICIES for one test, then removed again (the table is module state)."""
    registry = cast(dict[str, BudgetTable], POLICIES)
    registry[TOY.version] = TOY
    try:
        yield TOY
    finally:
        del registry[TOY.version]


def toy_gates() -> list[str]:
    """Gate texts: two granted by TOY, one reason TOY does not know (v1 does), one blocked."""
    return [
        json.dumps(make_gate(decision_id="toy-role", reason_code="eligible_missing_role")),
        json.dumps(make_gate(decision_id="toy-proposal", reason_code="eligible_missing_proposal")),
        json.dumps(make_gate(decision_id="toy-relation", reason_code="eligible_missing_relation")),
        json.dumps(make_gate(decision_id="toy-blocked", status="blocked", reason_code="blocked_x")),
    ]


def test_decide_takes_a_policy_and_defaults_to_v1(toy_policy: BudgetTable) -> None:
    gate = make_gate(reason_code="eligible_missing_role")
    toy = decide(gate, toy_policy)
    assert (toy.policy_version, toy.max_candidates, toy.max_steps, toy.max_wallclock_ms) == (TOY_VERSION, 7, 20, 60_000)
    assert "60000 ms of wall-clock" in toy.explanation
    assert decide(gate) == V1.decide(gate)
    assert decide(gate).max_wallclock_ms is None


def test_a_registered_policy_records_audits_and_admits(store_target: str, toy_policy: BudgetTable) -> None:
    gates = toy_gates()
    with BudgetStore.open(store_target, policy=toy_policy) as store:
        batch = store.record_many(gates, results=True)
        one = store.record(json.dumps(make_gate(decision_id="toy-single", reason_code="eligible_missing_proposal")))
        rows = list(store.iter_decisions())
    assert batch.new == 4
    assert one.new
    assert {row.decision.policy_version for row in rows} == {TOY_VERSION}
    by_gate = {row.decision.gate_decision_id: row.decision for row in rows}
    assert by_gate["toy-role"].max_wallclock_ms == 60_000
    assert (by_gate["toy-single"].max_candidates, by_gate["toy-single"].max_wallclock_ms) == (1, 5_000)
    assert by_gate["toy-relation"].status == "budget_unassessable"  # v1 grants this reason; TOY does not
    report = audit(store_target)
    assert report.clean, report.findings
    assert report.policy_counts == {TOY_VERSION: 5}
    for decision, gate in ((by_gate["toy-role"], gates[0]), (by_gate["toy-proposal"], gates[1])):
        admit(decision)
        admit(decision, gate=gate)


def test_rows_are_audited_under_each_ones_own_policy(store_target: str, toy_policy: BudgetTable) -> None:
    gate = json.dumps(make_gate(decision_id="both", reason_code="eligible_missing_role"))
    with BudgetStore.open(store_target) as store:
        v1 = store.record(gate)
    with BudgetStore.open(store_target, policy=toy_policy) as store:
        toy = store.record(gate)  # the policy version is hashed: the same gate is a new decision under TOY
    assert (v1.decision.policy_version, toy.decision.policy_version) == (V1.version, TOY_VERSION)
    assert (v1.seq, toy.seq) == (1, 2)
    report = audit(store_target)
    assert report.clean, report.findings
    assert report.policy_counts == {V1.version: 1, TOY_VERSION: 1}
    del cast(dict[str, BudgetTable], POLICIES)[TOY_VERSION]
    try:
        unregistered = audit(store_target)
    finally:
        cast(dict[str, BudgetTable], POLICIES)[TOY_VERSION] = TOY
    assert [(finding.kind, finding.seq) for finding in unregistered.findings] == [("unsupported_policy_version", 2)]


def test_recording_under_a_policy_that_is_not_registered_is_refused(store_target: str) -> None:
    impostor = dataclasses.replace(V1, table={})  # v1's version with other limits: its rows would not re-derive
    refusals = (
        (TOY, UnsupportedPolicyVersion, "'compute_budget.toy_v2' is not the one registered in POLICIES"),
        (impostor, UnsupportedPolicyVersion, "register it there first"),
        (cast(Any, V1.version), ArgumentTypeError, "policy must be a BudgetTable, not str"),
    )
    for policy, error, message in refusals:
        with BudgetStore.open(store_target, policy=policy) as store:
            with pytest.raises(error, match=message):
                store.record_many(toy_gates())
            with pytest.raises(error, match=message):
                store.record(toy_gates()[0])
            assert store.count() == 0


@pytest.mark.parametrize("wallclock", [None, 59_999, 120_000, True])
def test_admission_holds_a_policy_to_its_own_wall_clock_limit(toy_policy: BudgetTable, wallclock: Any) -> None:
    decision = decide(make_gate(reason_code="eligible_missing_role"), toy_policy)
    changed = dataclasses.replace(decision, max_wallclock_ms=wallclock)  # not hashed: the budget_id still matches
    assert compute_budget_id(changed) == changed.budget_id
    with pytest.raises(BudgetRefused, match=r"policy compute_budget\.toy_v2 gives 60000") as raised:
        admit(changed)
    assert raised.value.reason == RefusalReason.LIMITS_INVALID


def test_admission_rederives_the_wall_clock_limit_under_the_decisions_policy(toy_policy: BudgetTable) -> None:
    gate = make_gate(reason_code="eligible_missing_proposal")
    decision = decide(gate, toy_policy)
    admit(decision, gate=gate)
    admit(decision, gate=json.dumps(gate))
    with pytest.raises(BudgetRefused) as raised:
        admit(decision, gate=make_gate(reason_code="eligible_missing_role"))
    assert raised.value.reason == RefusalReason.GATE_REDERIVE_MISMATCH


def test_a_v1_decision_is_never_admitted_under_another_policys_limits(toy_policy: BudgetTable) -> None:
    decision = decide(make_gate(reason_code="eligible_missing_role"))
    with pytest.raises(BudgetRefused, match="never sets a wall-clock limit") as raised:
        admit(dataclasses.replace(decision, max_wallclock_ms=60_000))
    assert raised.value.reason == RefusalReason.LIMITS_INVALID


def test_the_store_records_under_v1_by_default(tmp_path: Any) -> None:
    with BudgetStore.open(tmp_path / "store.db") as store:
        result = store.record(json.dumps(make_gate()))
    assert result.decision == decide(make_gate())
    assert result.decision.policy_version == V1.version

