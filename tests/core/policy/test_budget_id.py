"""The budget_id of spec 3.3: which fields are hashed, which are not, and the exact bytes behind the hash."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import pytest
import rfc8785
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from compute_budget import (
    ComputeBudgetDecision,
    ComputeBudgetStatus,
    SourceSpan,
    budget_payload,
    compute_budget_id,
    decide,
)
from tests import strategies
from tests.conftest import make_gate
from tests.contract import HASHED_FIELDS

# The example gate's canonical payload, written out by hand, and its SHA-256 computed outside Python
# (printf '%s' '<this text>' | sha256sum).
EXAMPLE_CANONICAL = (
    '{"evidence_spans":[{"end":28,"sentence_index":0,"start":0,"text":"the courier left before noon"}],'
    '"gate_decision_id":"gate-0001","gate_input_digest":"sha256:5d41402abc4b2a76b9719d911017c592",'
    '"gate_policy_version":"search_gate.v1","max_candidates":5,"max_depth":2,"max_parallelism":1,"max_steps":10,'
    '"policy_version":"compute_budget.v1","reason_code":"eligible_missing_role","status":"budget_allowed"}'
)
EXAMPLE_BUDGET_ID = "1640737b718e0f32ba23c42f036fb6ba1ae9cc9b46e2d566e32c98482189f4d3"


def independent_budget_id(decision: ComputeBudgetDecision) -> str:
    """The spec's recipe with the stdlib only: the eleven fields, sorted-keys JSON, UTF-8, SHA-256."""
    as_dict = decision.to_dict()
    payload = {key: as_dict[key] for key in HASHED_FIELDS}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_example_budget_id_is_pinned() -> None:
    """The example gate's budget_id is the SHA-256 of the hand-written canonical payload."""
    decision = decide(make_gate())
    assert hashlib.sha256(EXAMPLE_CANONICAL.encode()).hexdigest() == EXAMPLE_BUDGET_ID
    assert rfc8785.dumps(budget_payload(decision)) == EXAMPLE_CANONICAL.encode()
    assert decision.budget_id == EXAMPLE_BUDGET_ID
    assert compute_budget_id(decision) == EXAMPLE_BUDGET_ID


def test_payload_has_exactly_the_eleven_fields() -> None:
    """budget_payload holds the eleven hashed keys: never budget_id, explanation or max_wallclock_ms."""
    payload = budget_payload(decide(make_gate()))
    assert set(payload) == set(HASHED_FIELDS)
    assert type(payload["status"]) is str
    assert payload["evidence_spans"] == [{"text": "the courier left before noon", "start": 0, "end": 28,
                                          "sentence_index": 0}]


def test_compute_budget_id_ignores_the_stored_id() -> None:
    """compute_budget_id recomputes from the fields: a wrong stored budget_id does not change the result."""
    decision = decide(make_gate())
    assert compute_budget_id(dataclasses.replace(decision, budget_id="0" * 64)) == decision.budget_id


@settings(max_examples=200)
@given(strategies.decided)
def test_budget_id_matches_independent_recipe(decision: ComputeBudgetDecision) -> None:
    """Every decided budget_id equals the stdlib recipe of spec 3.3 and the rfc8785 one."""
    assert decision.budget_id == independent_budget_id(decision)
    assert decision.budget_id == hashlib.sha256(rfc8785.dumps(budget_payload(decision))).hexdigest()


def changed(field: str, value: Any, data: st.DataObject) -> Any:
    """A value for `field` that differs from `value` (drawn by Hypothesis)."""
    if field == "status":
        return data.draw(st.sampled_from([status for status in ComputeBudgetStatus if status is not value]))
    if field.startswith("max_"):
        new_int: int = data.draw(strategies.safe_ints.filter(lambda number: number != value))
        return new_int
    if field == "evidence_spans":
        spans: tuple[SourceSpan, ...] = value
        kind = data.draw(st.sampled_from(["add", "drop", "edit", "reverse"]))
        if kind == "drop" and spans:
            return spans[1:]
        if kind == "edit" and spans:
            first = spans[0]
            return (dataclasses.replace(first, text=first.text + "\u0301"), *spans[1:])
        if kind == "reverse" and len(set(spans)) > 1 and spans != spans[::-1]:
            return spans[::-1]
        return (*spans, data.draw(strategies.spans()))
    new_text: str = data.draw(strategies.valid_text.filter(lambda text: text != value))
    return new_text


@settings(max_examples=300)
@given(strategies.decided, st.sampled_from(HASHED_FIELDS), st.data())
def test_budget_id_changes_with_every_hashed_field(
    decision: ComputeBudgetDecision, field: str, data: st.DataObject
) -> None:
    """Changing any one of the eleven hashed fields changes the budget_id."""
    new_value = changed(field, getattr(decision, field), data)
    assume(new_value != getattr(decision, field))
    assert compute_budget_id(dataclasses.replace(decision, **{field: new_value})) != decision.budget_id


@settings(max_examples=200)
@given(strategies.decided, strategies.valid_text, st.one_of(st.none(), strategies.safe_ints))
def test_budget_id_ignores_explanation_and_wallclock(
    decision: ComputeBudgetDecision, explanation: str, wallclock: int | None
) -> None:
    """Changing explanation or max_wallclock_ms leaves the budget_id as it was."""
    edited = dataclasses.replace(decision, explanation=explanation, max_wallclock_ms=wallclock)
    assert compute_budget_id(edited) == decision.budget_id


def test_span_order_is_hashed() -> None:
    """Two gates whose spans differ only in order get different budget_ids."""
    a = {"text": "a", "start": 0, "end": 1, "sentence_index": 0}
    b = {"text": "b", "start": 2, "end": 3, "sentence_index": 0}
    assert decide(make_gate(evidence_spans=[a, b])).budget_id != decide(make_gate(evidence_spans=[b, a])).budget_id


@pytest.mark.parametrize(
    ("one", "other"),
    [
        pytest.param("e\u0301", "\u00e9", id="combining-vs-precomposed"),
        pytest.param("a\u2028b", "a\nb", id="line-separator-vs-newline"),
        pytest.param("\U0001f600", "\ufffd", id="astral-vs-replacement"),
        pytest.param("x\x00", "x", id="nul-matters"),
    ],
)
def test_unicode_text_is_hashed_as_is(one: str, other: str) -> None:
    """Texts that look alike but differ in code points get different budget_ids (no normalisation)."""
    span = {"start": 0, "end": 1, "sentence_index": 0}
    first = decide(make_gate(evidence_spans=[span | {"text": one}]))
    second = decide(make_gate(evidence_spans=[span | {"text": other}]))
    assert first.budget_id != second.budget_id


def test_residual_ids_and_organ_are_not_hashed() -> None:
    """residual_ids and candidate_organ are inputs only: they do not reach the decision or its id."""
    one = decide(make_gate(residual_ids=["a"], candidate_organ=None))
    two = decide(make_gate(residual_ids=["b", "c"], candidate_organ="organ"))
    assert one == two


def test_ids_of_wrongly_typed_decisions_cannot_be_computed_silently() -> None:
    """A decision holding a value JSON cannot carry makes compute_budget_id raise (admit turns that into a refusal)."""
    broken = dataclasses.replace(decide(make_gate()), gate_decision_id=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        compute_budget_id(broken)
