"""The domain types of spec section 2: enums, frozen slotted dataclasses, and their JSON forms."""

from __future__ import annotations

import dataclasses
import json
from enum import StrEnum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute_budget import (
    ComputeBudgetDecision,
    ComputeBudgetStatus,
    MalformedDecision,
    MalformedGate,
    SearchGateDecision,
    SearchGateStatus,
    SourceSpan,
    decide,
)
from tests import strategies
from tests.conftest import make_gate
from tests.contract import DECISION_KEYS


def test_search_gate_status_values() -> None:
    """SearchGateStatus is a StrEnum with exactly the four values of the spec."""
    assert issubclass(SearchGateStatus, StrEnum)
    assert {member.name: member.value for member in SearchGateStatus} == {
        "ELIGIBLE": "eligible",
        "INELIGIBLE": "ineligible",
        "BLOCKED": "blocked",
        "UNASSESSABLE": "unassessable",
    }


def test_compute_budget_status_values() -> None:
    """ComputeBudgetStatus is a StrEnum with exactly the four values of the spec, budget_zero included."""
    assert issubclass(ComputeBudgetStatus, StrEnum)
    assert {member.name: member.value for member in ComputeBudgetStatus} == {
        "BUDGET_ALLOWED": "budget_allowed",
        "BUDGET_BLOCKED": "budget_blocked",
        "BUDGET_ZERO": "budget_zero",
        "BUDGET_UNASSESSABLE": "budget_unassessable",
    }


@pytest.mark.parametrize(
    "instance",
    [
        pytest.param(SourceSpan("t", 0, 1, 0), id="span"),
        pytest.param(SearchGateDecision.from_dict(make_gate()), id="gate"),
        pytest.param(decide(make_gate()), id="decision"),
    ],
)
def test_types_are_frozen_and_slotted(instance: object) -> None:
    """Each domain type is a frozen dataclass with slots: no instance __dict__, no new attributes."""
    assert type(instance).__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert "__slots__" in type(instance).__dict__
    assert not hasattr(instance, "__dict__")
    with pytest.raises((dataclasses.FrozenInstanceError, AttributeError, TypeError)):
        instance.surprise = 1  # type: ignore[attr-defined]


def test_decision_instance_cannot_be_mutated() -> None:
    """Assigning to a decision's field raises FrozenInstanceError."""
    decision = decide(make_gate())
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.max_candidates = 1_000_000  # type: ignore[misc]


def test_decision_fields_are_in_record_order() -> None:
    """ComputeBudgetDecision's fields come in the record's order (spec section 2)."""
    assert [field.name for field in dataclasses.fields(ComputeBudgetDecision)] == list(DECISION_KEYS)


def test_span_to_dict_has_the_four_keys() -> None:
    """A span's JSON form is an object with text, start, end, sentence_index."""
    assert SourceSpan("abc", 1, 4, 2).to_dict() == {"text": "abc", "start": 1, "end": 4, "sentence_index": 2}


def test_span_from_dict_reads_a_valid_span() -> None:
    """SourceSpan.from_dict builds the span its JSON form describes."""
    assert SourceSpan.from_dict({"text": "x", "start": 0, "end": 1, "sentence_index": 0}) == SourceSpan("x", 0, 1, 0)


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        pytest.param({"text": "x", "start": True, "end": 1, "sentence_index": 0}, "3.1.5", id="bool-start"),
        pytest.param({"text": "x", "start": 0, "end": 5.0, "sentence_index": 0}, "3.1.5", id="float-end"),
        pytest.param({"text": "x", "start": 2, "end": 1, "sentence_index": 0}, "3.1.5", id="end-before-start"),
        pytest.param({"text": "x", "start": 0, "end": 1}, "3.1.5", id="missing-key"),
        pytest.param({"text": "x", "start": 0, "end": 1, "sentence_index": 0, "n": 1}, "3.1.5", id="extra-key"),
        pytest.param(["x", 0, 1, 0], "3.1.5", id="not-an-object"),
        pytest.param({"text": "\udfff", "start": 0, "end": 1, "sentence_index": 0}, "3.1.6", id="lone-surrogate"),
    ],
)
def test_span_from_dict_names_the_rule(value: object, rule: str) -> None:
    """SourceSpan.from_dict raises MalformedGate whose rule is the one the span breaks."""
    with pytest.raises(MalformedGate) as raised:
        SourceSpan.from_dict(value)
    assert raised.value.rule == rule


def test_gate_to_dict_has_exactly_the_eight_keys() -> None:
    """A gate's JSON form has the eight keys of section 2, status as its value and arrays for the tuples."""
    gate = SearchGateDecision(
        "g", "p", "d", SearchGateStatus.BLOCKED, "r", ("a", "b"), None, (SourceSpan("t", 0, 1, 0),)
    )
    assert gate.to_dict() == {
        "decision_id": "g",
        "policy_version": "p",
        "input_digest": "d",
        "status": "blocked",
        "reason_code": "r",
        "residual_ids": ["a", "b"],
        "candidate_organ": None,
        "evidence_spans": [{"text": "t", "start": 0, "end": 1, "sentence_index": 0}],
    }
    assert type(gate.to_dict()["status"]) is str


def test_gate_from_dict_normalises() -> None:
    """SearchGateDecision.from_dict returns the enum status, tuples and SourceSpans."""
    gate = SearchGateDecision.from_dict(make_gate())
    assert gate.status is SearchGateStatus.ELIGIBLE
    assert gate.residual_ids == ("residual-17",)
    assert gate.evidence_spans == (SourceSpan("the courier left before noon", 0, 28, 0),)


@pytest.mark.parametrize(
    ("changes", "rule"),
    [
        pytest.param({"extra": 1}, "3.1.1", id="extra-key"),
        pytest.param({"decision_id": ""}, "3.1.2", id="empty-decision-id"),
        pytest.param({"input_digest": 7}, "3.1.2", id="int-input-digest"),
        pytest.param({"status": "Eligible"}, "3.1.3", id="status-case"),
        pytest.param({"residual_ids": "r1"}, "3.1.4", id="residual-ids-string"),
        pytest.param({"candidate_organ": 3}, "3.1.4", id="organ-int"),
        pytest.param({"evidence_spans": [{"text": "x", "start": 0, "end": 1, "sentence_index": -1}]}, "3.1.5",
                     id="negative-sentence-index"),
        pytest.param({"reason_code": "eligible\ud800"}, "3.1.6", id="lone-surrogate"),
    ],
)
def test_gate_from_dict_names_the_rule(changes: dict[str, Any], rule: str) -> None:
    """SearchGateDecision.from_dict raises MalformedGate whose .rule names the rule of 3.1 that failed."""
    with pytest.raises(MalformedGate) as raised:
        SearchGateDecision.from_dict(make_gate(**changes))
    assert raised.value.rule == rule
    assert f"rule {rule}" in str(raised.value)


def test_gate_from_dict_missing_key_names_rule_3_1_1() -> None:
    """A gate without one of its eight keys is rejected under rule 3.1.1."""
    gate = make_gate()
    del gate["candidate_organ"]
    with pytest.raises(MalformedGate) as raised:
        SearchGateDecision.from_dict(gate)
    assert raised.value.rule == "3.1.1"
    assert "candidate_organ" in raised.value.message


def test_gate_from_dict_rejects_a_non_mapping() -> None:
    """A JSON array is not a gate: rule 3.1.1."""
    with pytest.raises(MalformedGate) as raised:
        SearchGateDecision.from_dict([make_gate()])
    assert raised.value.rule == "3.1.1"


def test_decision_to_dict_keys_and_order() -> None:
    """A decision's JSON form has the fourteen keys in record order, null max_wallclock_ms and a plain status."""
    as_dict = decide(make_gate()).to_dict()
    assert list(as_dict) == list(DECISION_KEYS)
    assert as_dict["max_wallclock_ms"] is None
    assert type(as_dict["status"]) is str
    assert as_dict["evidence_spans"] == make_gate()["evidence_spans"]
    json.dumps(as_dict)  # plain JSON values only (raises TypeError otherwise)


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        pytest.param(lambda d: d.pop("explanation"), "explanation", id="missing-key"),
        pytest.param(lambda d: d.update(extra=1), "extra", id="extra-key"),
        pytest.param(lambda d: d.update(status="allowed"), "status", id="unknown-status"),
        pytest.param(lambda d: d.update(max_steps=True), "max_steps", id="bool-int"),
        pytest.param(lambda d: d.update(max_depth=2.0), "max_depth", id="float-int"),
        pytest.param(lambda d: d.update(max_wallclock_ms="0"), "max_wallclock_ms", id="string-wallclock"),
        pytest.param(lambda d: d.update(budget_id=None), "budget_id", id="null-budget-id"),
        pytest.param(lambda d: d.update(evidence_spans={}), "evidence_spans", id="spans-object"),
        pytest.param(
            lambda d: d.update(evidence_spans=[{"text": "x", "start": 3, "end": 1, "sentence_index": 0}]),
            "evidence_spans[0]",
            id="bad-span",
        ),
    ],
)
def test_decision_from_dict_rejects_bad_forms(mutate: Any, needle: str) -> None:
    """ComputeBudgetDecision.from_dict raises MalformedDecision naming the offending key."""
    as_dict = decide(make_gate()).to_dict()
    mutate(as_dict)
    with pytest.raises(MalformedDecision, match=needle.replace("[", r"\[").replace("]", r"\]")):
        ComputeBudgetDecision.from_dict(as_dict)


def test_decision_from_dict_rejects_a_non_mapping() -> None:
    """A decision's JSON form must be an object."""
    with pytest.raises(MalformedDecision):
        ComputeBudgetDecision.from_dict([decide(make_gate()).to_dict()])


def test_decision_from_dict_accepts_an_integer_wallclock() -> None:
    """max_wallclock_ms may be an integer in the JSON form (v1 only ever writes null)."""
    as_dict = decide(make_gate()).to_dict() | {"max_wallclock_ms": 250}
    assert ComputeBudgetDecision.from_dict(as_dict).max_wallclock_ms == 250


@settings(max_examples=150)
@given(strategies.spans())
def test_span_round_trip(span: SourceSpan) -> None:
    """SourceSpan.from_dict(span.to_dict()) == span."""
    assert SourceSpan.from_dict(span.to_dict()) == span


@settings(max_examples=150)
@given(strategies.gates())
def test_gate_round_trip(gate: SearchGateDecision) -> None:
    """SearchGateDecision.from_dict(gate.to_dict()) == gate, also through JSON text."""
    assert SearchGateDecision.from_dict(gate.to_dict()) == gate
    assert SearchGateDecision.from_dict(json.loads(json.dumps(gate.to_dict()))) == gate


@settings(max_examples=150)
@given(strategies.decisions)
def test_decision_round_trip(decision: ComputeBudgetDecision) -> None:
    """ComputeBudgetDecision.from_dict(decision.to_dict()) == decision, also through JSON text."""
    assert ComputeBudgetDecision.from_dict(decision.to_dict()) == decision
    assert ComputeBudgetDecision.from_dict(json.loads(json.dumps(decision.to_dict()))) == decision


@given(st.sampled_from(ComputeBudgetStatus))
def test_decision_from_dict_status_is_the_enum(status: ComputeBudgetStatus) -> None:
    """from_dict turns the status text back into the ComputeBudgetStatus member."""
    as_dict = decide(make_gate()).to_dict() | {"status": status.value}
    assert ComputeBudgetDecision.from_dict(as_dict).status is status
