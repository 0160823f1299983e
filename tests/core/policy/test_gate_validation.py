"""Well-formedness of a gate (spec section 3.1): every rule, its boundaries, and what is normalised."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Any

import pytest

from compute_budget import MalformedGate, SearchGateDecision, SearchGateStatus, SourceSpan
from compute_budget.core.policy.gate import MAX_SAFE_INTEGER, check_gate, is_valid_text, validate_gate, validate_span
from compute_budget.core.policy.types import GATE_KEYS
from tests.conftest import make_gate

GATE_KEY_LIST = sorted(GATE_KEYS)
TEXT_KEYS = ["decision_id", "policy_version", "input_digest", "reason_code"]
SPAN_INT_KEYS = ["start", "end", "sentence_index"]


def span(**changes: Any) -> dict[str, Any]:
    """A well-formed span dict with `changes` applied."""
    return {"text": "noon", "start": 3, "end": 7, "sentence_index": 0} | changes


def with_span(**changes: Any) -> dict[str, Any]:
    """The example gate whose only evidence span has `changes` applied."""
    return make_gate(evidence_spans=[span(**changes)])


def without(key: str) -> dict[str, Any]:
    """The example gate without `key`."""
    gate = make_gate()
    del gate[key]
    return gate


def int_key_gate() -> dict[object, Any]:
    """Eight keys, one of them the integer 1 in place of "status"."""
    gate: dict[object, Any] = {key: value for key, value in make_gate().items() if key != "status"}
    gate[1] = "eligible"
    return gate


def rule_of(gate: object) -> str:
    """The rule `check_gate` names for a malformed gate (fails the test if the gate passes)."""
    with pytest.raises(MalformedGate) as raised:
        check_gate(gate)
    return raised.value.rule


MALFORMED: list[Any] = [
    # 3.1.1: a mapping with exactly the eight keys
    *[pytest.param(without(key), "3.1.1", id=f"missing-{key}") for key in GATE_KEY_LIST],
    pytest.param(make_gate(extra=None), "3.1.1", id="extra-key"),
    pytest.param(make_gate(Status="eligible"), "3.1.1", id="extra-key-wrong-case"),
    pytest.param({}, "3.1.1", id="empty-object"),
    pytest.param([make_gate()], "3.1.1", id="array"),
    pytest.param("gate", "3.1.1", id="string"),
    pytest.param(42, "3.1.1", id="number"),
    pytest.param(None, "3.1.1", id="null"),
    pytest.param(int_key_gate(), "3.1.1", id="int-key"),
    # 3.1.2: the four identifying strings, non-empty
    *[pytest.param(make_gate(**{key: ""}), "3.1.2", id=f"empty-{key}") for key in TEXT_KEYS],
    *[pytest.param(make_gate(**{key: None}), "3.1.2", id=f"null-{key}") for key in TEXT_KEYS],
    *[pytest.param(make_gate(**{key: 1}), "3.1.2", id=f"int-{key}") for key in TEXT_KEYS],
    *[pytest.param(make_gate(**{key: ["x"]}), "3.1.2", id=f"array-{key}") for key in TEXT_KEYS],
    # 3.1.3: status exactly one of the four values
    pytest.param(make_gate(status="ELIGIBLE"), "3.1.3", id="status-upper"),
    pytest.param(make_gate(status="Eligible"), "3.1.3", id="status-title"),
    pytest.param(make_gate(status="eligible "), "3.1.3", id="status-trailing-space"),
    pytest.param(make_gate(status=""), "3.1.3", id="status-empty"),
    pytest.param(make_gate(status="budget_allowed"), "3.1.3", id="status-of-the-wrong-enum"),
    pytest.param(make_gate(status=None), "3.1.3", id="status-null"),
    pytest.param(make_gate(status=0), "3.1.3", id="status-int"),
    pytest.param(make_gate(status=["eligible"]), "3.1.3", id="status-array"),
    # 3.1.4: residual_ids a list of strings, candidate_organ a string or None
    pytest.param(make_gate(residual_ids="residual-17"), "3.1.4", id="residual-ids-string"),
    pytest.param(make_gate(residual_ids=None), "3.1.4", id="residual-ids-null"),
    pytest.param(make_gate(residual_ids={"a": "b"}), "3.1.4", id="residual-ids-object"),
    pytest.param(make_gate(residual_ids=["a", 1]), "3.1.4", id="residual-id-int"),
    pytest.param(make_gate(residual_ids=[None]), "3.1.4", id="residual-id-null"),
    pytest.param(make_gate(candidate_organ=5), "3.1.4", id="organ-int"),
    pytest.param(make_gate(candidate_organ=["x"]), "3.1.4", id="organ-array"),
    pytest.param(make_gate(candidate_organ=False), "3.1.4", id="organ-bool"),
    # 3.1.5: evidence spans
    pytest.param(make_gate(evidence_spans=None), "3.1.5", id="spans-null"),
    pytest.param(make_gate(evidence_spans=span()), "3.1.5", id="spans-object"),
    pytest.param(make_gate(evidence_spans="noon"), "3.1.5", id="spans-string"),
    pytest.param(make_gate(evidence_spans=[["noon", 3, 7, 0]]), "3.1.5", id="span-array"),
    pytest.param(make_gate(evidence_spans=[None]), "3.1.5", id="span-null"),
    pytest.param(make_gate(evidence_spans=[{"text": "noon", "start": 3, "end": 7}]), "3.1.5", id="span-missing-key"),
    pytest.param(with_span(note="x"), "3.1.5", id="span-extra-key"),
    pytest.param(make_gate(evidence_spans=[{"text": "a", "start": 0, "end": 1, "Sentence_index": 0}]), "3.1.5",
                 id="span-key-wrong-case"),
    pytest.param(with_span(text=None), "3.1.5", id="span-text-null"),
    pytest.param(with_span(text=5), "3.1.5", id="span-text-int"),
    *[pytest.param(with_span(**{key: True}), "3.1.5", id=f"bool-{key}") for key in SPAN_INT_KEYS],
    *[pytest.param(with_span(**{key: False}), "3.1.5", id=f"false-{key}") for key in SPAN_INT_KEYS],
    *[pytest.param(with_span(**{key: 7.0}), "3.1.5", id=f"float-{key}") for key in SPAN_INT_KEYS],
    *[pytest.param(with_span(**{key: "7"}), "3.1.5", id=f"string-{key}") for key in SPAN_INT_KEYS],
    *[pytest.param(with_span(**{key: None}), "3.1.5", id=f"null-{key}") for key in SPAN_INT_KEYS],
    *[pytest.param(with_span(**{key: -1}), "3.1.5", id=f"negative-{key}") for key in SPAN_INT_KEYS],
    *[pytest.param(with_span(**{key: 2**53}), "3.1.5", id=f"2**53-{key}") for key in SPAN_INT_KEYS],
    *[pytest.param(with_span(**{key: 10**400}), "3.1.5", id=f"huge-{key}") for key in SPAN_INT_KEYS],
    pytest.param(with_span(start=8, end=7), "3.1.5", id="end-before-start"),
    pytest.param(with_span(start=MAX_SAFE_INTEGER, end=0), "3.1.5", id="end-before-start-extreme"),
    pytest.param(make_gate(evidence_spans=[span(), span(start=5, end=4)]), "3.1.5", id="second-span-bad"),
    # 3.1.6: every string valid Unicode text
    *[pytest.param(make_gate(**{key: "a\ud800"}), "3.1.6", id=f"high-surrogate-{key}") for key in TEXT_KEYS],
    *[pytest.param(make_gate(**{key: "\udc00b"}), "3.1.6", id=f"low-surrogate-{key}") for key in TEXT_KEYS],
    pytest.param(make_gate(residual_ids=["ok", "\udfff"]), "3.1.6", id="surrogate-residual-id"),
    pytest.param(make_gate(candidate_organ="organ\ud83d"), "3.1.6", id="surrogate-organ"),
    pytest.param(with_span(text="\ude00\ud83d"), "3.1.6", id="reversed-pair-span-text"),
]


@pytest.mark.parametrize(("gate", "rule"), MALFORMED)
def test_each_rule_is_enforced(gate: object, rule: str) -> None:
    """check_gate rejects a gate that breaks one rule of 3.1 and names that rule."""
    assert rule_of(gate) == rule


@pytest.mark.parametrize(("gate", "rule"), MALFORMED)
def test_validate_gate_raises_what_check_gate_raises(gate: object, rule: str) -> None:
    """validate_gate rejects the same gates under the same rules (it is check_gate plus a type)."""
    with pytest.raises(MalformedGate) as raised:
        validate_gate(gate)
    assert raised.value.rule == rule


def test_status_with_a_lone_surrogate_is_not_a_status() -> None:
    """A status holding a lone surrogate is simply not one of the four values (3.1.3)."""
    assert rule_of(make_gate(status="eligible\ud800")) == "3.1.3"


def test_earlier_key_rule_wins_over_later_value_rules() -> None:
    """A gate that breaks 3.1.1 and 3.1.5 at once is reported under 3.1.1 (rules are checked in order)."""
    assert rule_of(make_gate(extra=1, evidence_spans=None)) == "3.1.1"


def test_messages_name_the_offending_field() -> None:
    """The MalformedGate message says which field is wrong."""
    with pytest.raises(MalformedGate, match=r"evidence_spans\[1\]\.end"):
        check_gate(make_gate(evidence_spans=[span(), span(end=-3)]))
    with pytest.raises(MalformedGate, match="missing \\['input_digest'\\]"):
        check_gate(without("input_digest"))


WELL_FORMED: list[Any] = [
    pytest.param(make_gate(), id="example"),
    pytest.param(make_gate(candidate_organ=None), id="organ-null"),
    pytest.param(make_gate(candidate_organ=""), id="organ-empty"),
    pytest.param(make_gate(residual_ids=[]), id="no-residuals"),
    pytest.param(make_gate(residual_ids=[""]), id="empty-residual-id"),
    pytest.param(make_gate(residual_ids=("a", "b")), id="residual-ids-tuple"),
    pytest.param(make_gate(evidence_spans=[]), id="no-spans"),
    pytest.param(make_gate(evidence_spans=(span(),)), id="spans-tuple"),
    pytest.param(make_gate(evidence_spans=[SourceSpan("noon", 3, 7, 0)]), id="span-instances"),
    pytest.param(make_gate(evidence_spans=[MappingProxyType(span())]), id="span-mapping-proxy"),
    pytest.param(with_span(text=""), id="span-text-empty"),
    pytest.param(with_span(start=5, end=5), id="empty-range"),
    pytest.param(with_span(start=0, end=0, sentence_index=0), id="all-zero"),
    pytest.param(with_span(start=MAX_SAFE_INTEGER, end=MAX_SAFE_INTEGER, sentence_index=MAX_SAFE_INTEGER),
                 id="2**53-1-everywhere"),
    pytest.param(with_span(text="e\u0301 \U0001f600 \x00\x1f\x7f \u2028\u2029 \ufeff"), id="unicode-span-text"),
    pytest.param(make_gate(decision_id="gate-\u00e9-\U0001f600", reason_code="eligible_missing_role"), id="unicode-id"),
    pytest.param(make_gate(status="blocked", reason_code="anything at all"), id="blocked-any-reason"),
    pytest.param(MappingProxyType(make_gate()), id="mapping-proxy-gate"),
]


@pytest.mark.parametrize("gate", WELL_FORMED)
def test_well_formed_gates_pass(gate: object) -> None:
    """Gates that keep every rule of 3.1, boundaries included, are accepted."""
    checked = check_gate(gate)
    assert isinstance(checked.status, SearchGateStatus)


def test_2_to_the_53_minus_1_is_the_exact_ceiling() -> None:
    """2**53 - 1 is accepted for every integer field and 2**53 is not."""
    assert MAX_SAFE_INTEGER == 2**53 - 1
    for key in SPAN_INT_KEYS:
        ceiling = {"start": 0, "end": MAX_SAFE_INTEGER, "sentence_index": 0} | {key: MAX_SAFE_INTEGER}
        validate_span(span(**ceiling), 0)
        with pytest.raises(MalformedGate):
            validate_span(span(**(ceiling | {key: MAX_SAFE_INTEGER + 1})), 0)


class Colour(StrEnum):
    """A str subclass standing in for any string-like value a caller might pass."""

    RED = "red"


def test_validate_gate_normalises_to_plain_values() -> None:
    """validate_gate returns plain str, tuples, SourceSpans and the SearchGateStatus member."""
    gate = validate_gate(
        make_gate(
            decision_id=Colour.RED,
            status=SearchGateStatus.BLOCKED,
            residual_ids=[Colour.RED, "b"],
            candidate_organ=Colour.RED,
            evidence_spans=[span(text=Colour.RED)],
        )
    )
    assert type(gate.decision_id) is str
    assert gate.decision_id == "red"
    assert gate.status is SearchGateStatus.BLOCKED
    assert gate.residual_ids == ("red", "b")
    assert all(type(item) is str for item in gate.residual_ids)
    assert type(gate.candidate_organ) is str
    assert type(gate.evidence_spans[0]) is SourceSpan
    assert type(gate.evidence_spans[0].text) is str


def test_check_gate_gives_the_hashed_span_form() -> None:
    """check_gate returns each span's hashed form with exactly the four keys, in gate order."""
    checked = check_gate(make_gate(evidence_spans=[span(text="b"), span(text="a")]))
    assert [payload["text"] for payload in checked.span_payload] == ["b", "a"]
    assert all(set(payload) == {"text", "start", "end", "sentence_index"} for payload in checked.span_payload)


def test_search_gate_decision_input_is_checked_too() -> None:
    """A SearchGateDecision built with bad field values is malformed under the rule it breaks."""
    good = validate_gate(make_gate())
    assert check_gate(good).decision_id == "gate-0001"
    bad_cases: list[tuple[SearchGateDecision, str]] = [
        (SearchGateDecision("", "p", "d", SearchGateStatus.ELIGIBLE, "r", (), None, ()), "3.1.2"),
        (SearchGateDecision(5, "p", "d", SearchGateStatus.ELIGIBLE, "r", (), None, ()), "3.1.2"),  # type: ignore[arg-type]
        (SearchGateDecision("g", "p", "d", "ELIGIBLE", "r", (), None, ()), "3.1.3"),  # type: ignore[arg-type]
        (SearchGateDecision("g", "p", "d", SearchGateStatus.ELIGIBLE, "r", None, None, ()), "3.1.4"),  # type: ignore[arg-type]
        (SearchGateDecision("g", "p", "d", SearchGateStatus.ELIGIBLE, "r", (1,), None, ()), "3.1.4"),  # type: ignore[arg-type]
        (SearchGateDecision("g", "p", "d", SearchGateStatus.ELIGIBLE, "r", (), None, None), "3.1.5"),  # type: ignore[arg-type]
        (SearchGateDecision("g", "p", "d", SearchGateStatus.ELIGIBLE, "r", (), None, (SourceSpan("t", 2, 1, 0),)),
         "3.1.5"),
        (SearchGateDecision("g", "p", "d", SearchGateStatus.ELIGIBLE, "r", (), None,
                            (SourceSpan("t", True, 1, 0),)), "3.1.5"),
        (SearchGateDecision("g", "p", "d", SearchGateStatus.ELIGIBLE, "r", (), None,
                            (SourceSpan("t", 0, 1.0, 0),)), "3.1.5"),  # type: ignore[arg-type]
        (SearchGateDecision("g", "p", "d", SearchGateStatus.ELIGIBLE, "r", (), None, (object(),)), "3.1.5"),  # type: ignore[arg-type]
        (SearchGateDecision("g", "p", "\ud800", SearchGateStatus.ELIGIBLE, "r", (), None, ()), "3.1.6"),
        (SearchGateDecision("g", "p", "d", SearchGateStatus.ELIGIBLE, "r", (), None,
                            (SourceSpan("\udc00", 0, 1, 0),)), "3.1.6"),
    ]
    for gate, rule in bad_cases:
        assert rule_of(gate) == rule, gate


def test_search_gate_decision_accepts_plain_string_status() -> None:
    """A SearchGateDecision whose status is the plain text of a value is well-formed (it equals the member)."""
    gate = SearchGateDecision("g", "p", "d", "blocked", "r", ["a"], None, [span()])  # type: ignore[arg-type]
    assert validate_gate(gate) == SearchGateDecision(
        "g", "p", "d", SearchGateStatus.BLOCKED, "r", ("a",), None, (SourceSpan("noon", 3, 7, 0),)
    )


class CountingMapping(Mapping[str, Any]):
    """A read-only mapping that is not a dict (exercises the generic Mapping path)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        pytest.param(lambda: CountingMapping(make_gate()), None, id="valid"),
        pytest.param(lambda: CountingMapping(make_gate(extra=1)), "3.1.1", id="extra-key"),
        pytest.param(lambda: CountingMapping(make_gate(evidence_spans=[CountingMapping(span(end=1))])), "3.1.5",
                     id="mapping-span-end-before-start"),
        pytest.param(lambda: CountingMapping(make_gate(evidence_spans=[CountingMapping(span(x=1))])), "3.1.5",
                     id="mapping-span-extra-key"),
    ],
)
def test_generic_mappings_follow_the_same_rules(build: Callable[[], object], expected: str | None) -> None:
    """A Mapping that is not a dict is checked by the same rules as a dict."""
    if expected is None:
        assert check_gate(build()).decision_id == "gate-0001"
    else:
        assert rule_of(build()) == expected


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("", True),
        ("plain", True),
        ("e\u0301\U0001f600\u2028\x00", True),
        ("\ud83d\ude00", False),  # a surrogate *pair* as two code points is still two lone surrogates in Python
        ("\ud800", False),
        ("x\udfff", False),
        (b"bytes", False),
        (None, False),
        (5, False),
    ],
)
def test_is_valid_text(value: object, valid: bool) -> None:
    """is_valid_text accepts str without lone surrogates and rejects everything else."""
    assert is_valid_text(value) is valid
