"""The strict reader for gate text (spec 3.1.7): duplicate keys and lone surrogates are malformed gates,
text that is not JSON at all is an input error."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterator

import pytest
from hypothesis import assume, given, settings

from compute_budget import InputNotJson, decide, decide_json, parse_gate_json
from compute_budget.core.policy import BudgetPolicy, Limits
from tests import strategies
from tests.conftest import make_gate

GATE_TEXT = json.dumps(make_gate())


def test_valid_text_parses_without_defect() -> None:
    """A well-formed gate's text parses to its value with no defect and decides like the value."""
    parsed = parse_gate_json(GATE_TEXT)
    assert parsed.value == make_gate()
    assert parsed.defect is None
    assert decide_json(GATE_TEXT) == decide(make_gate())


def test_bytes_and_str_decide_alike() -> None:
    """UTF-8 bytes and the same text as str give the same decision."""
    text = json.dumps(make_gate(decision_id="g-\u00e9\U0001f600"), ensure_ascii=False)
    assert decide_json(text.encode("utf-8")) == decide_json(text) == decide_json(bytearray(text.encode("utf-8")))


def test_escaped_and_raw_unicode_decide_alike() -> None:
    """A string written with \\u escapes (a surrogate pair included) equals the same string written raw."""
    raw = json.dumps(make_gate(decision_id="\u00e9\U0001f600\u2028"), ensure_ascii=False)
    escaped = json.dumps(make_gate(decision_id="\u00e9\U0001f600\u2028"), ensure_ascii=True)
    assert "\\ud83d\\ude00" in escaped
    assert decide_json(raw) == decide_json(escaped)
    assert decide_json(escaped).reason_code == "eligible_missing_role"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(GATE_TEXT.replace('"status"', '"status": "eligible", "status"', 1), id="top-level-same-value"),
        pytest.param(GATE_TEXT.replace('"status"', '"status": "blocked", "status"', 1), id="top-level-other-value"),
        pytest.param(GATE_TEXT.replace('"start"', '"start": 0, "start"', 1), id="inside-a-span"),
        pytest.param('{"a": {"b": 1, "b": 1}}', id="nested-in-a-non-gate"),
        pytest.param(GATE_TEXT[:-1] + ', "x": {"k": 1, "k": 2}}', id="inside-an-extra-key"),
    ],
)
def test_duplicate_keys_make_a_malformed_gate(text: str) -> None:
    """A duplicate key anywhere in the text is a defect (rule 3.1.7) and the decision is malformed."""
    parsed = parse_gate_json(text)
    assert parsed.defect is not None
    assert "duplicate key" in parsed.defect
    decision = decide_json(text)
    assert decision.reason_code == "malformed_gate_decision"
    assert decision.evidence_spans == ()
    assert "duplicate key" in decision.explanation


def test_duplicate_key_gate_still_copies_valid_ids() -> None:
    """A duplicate-key gate is malformed but its valid identifying strings are still copied."""
    decision = decide_json(GATE_TEXT.replace('"status"', '"status": "eligible", "status"', 1))
    assert (decision.gate_decision_id, decision.gate_policy_version) == ("gate-0001", "search_gate.v1")


@pytest.mark.parametrize(
    ("field", "escaped"),
    [
        ("decision_id", "\\ud800"),
        ("reason_code", "eligible_missing_role\\udfff"),
        ("candidate_organ", "\\udc00\\ud800"),
    ],
)
def test_escaped_lone_surrogates_make_a_malformed_gate(field: str, escaped: str) -> None:
    """A \\u escape of a lone surrogate is valid JSON but not valid text: the gate is malformed (3.1.6)."""
    text = json.dumps(make_gate(**{field: "PLACEHOLDER"})).replace("PLACEHOLDER", escaped)
    parsed = parse_gate_json(text)
    assert parsed.defect is None  # the text is JSON; the value breaks rule 3.1.6
    decision = decide_json(text)
    assert decision.reason_code == "malformed_gate_decision"
    if field == "decision_id":
        assert decision.gate_decision_id == ""


@pytest.mark.parametrize(
    "text",
    ["[]", "[{}]", "0", "-1.5e3", "null", "true", '"gate"', "{}", '{"decision_id": "x"}', json.dumps([make_gate()])],
)
def test_json_that_is_not_a_gate_is_a_malformed_gate(text: str) -> None:
    """JSON that is not a gate (an array, a number, a wrong object) is a malformed gate, not an input error."""
    decision = decide_json(text)
    assert decision.reason_code == "malformed_gate_decision"
    assert decision.max_candidates == 0


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("   ", id="blank"),
        pytest.param("nope", id="word"),
        pytest.param("{'decision_id': 'x'}", id="single-quotes"),
        pytest.param('{"a": 1,}', id="trailing-comma"),
        pytest.param('{"a": NaN}', id="nan"),
        pytest.param('{"a": Infinity}', id="infinity"),
        pytest.param("-Infinity", id="minus-infinity"),
        pytest.param('{"a": 1} {"b": 2}', id="two-values"),
        pytest.param('{"a": "tab\there"}', id="raw-control-character"),
        pytest.param('{"a": 01}', id="leading-zero"),
        pytest.param("\ufeff{}", id="bom-inside-text"),
        pytest.param(b"\xff{}", id="invalid-utf8"),
        pytest.param(b'{"a": "\xed\xa0\x80"}', id="utf8-encoded-surrogate"),
        pytest.param(b'{"a": "\xc0\xaf"}', id="overlong-utf8"),
    ],
)
def test_text_that_is_not_json_is_an_input_error(text: str | bytes) -> None:
    """Text that is not RFC 8259 JSON (or not UTF-8) raises InputNotJson from the reader and from decide_json."""
    with pytest.raises(InputNotJson):
        parse_gate_json(text)
    with pytest.raises(InputNotJson):
        decide_json(text)


@pytest.mark.parametrize(
    ("text", "incomplete"),
    [
        ("{", True),
        ('{"decision_id": "x",', True),
        ("[1, 2", True),
        ("nope", False),
        ('{"a": 1}}', False),
        ('{"a" 1}', False),
    ],
)
def test_incomplete_flag(text: str, incomplete: bool) -> None:
    """InputNotJson.incomplete is True only when the text broke off mid-value (more lines could finish it)."""
    with pytest.raises(InputNotJson) as raised:
        parse_gate_json(text)
    assert raised.value.incomplete is incomplete


def test_not_json_message_says_where() -> None:
    """The InputNotJson message says what is wrong and at which column."""
    with pytest.raises(InputNotJson, match="column 9"):
        parse_gate_json('{"a": 1 x}')
    with pytest.raises(InputNotJson, match="UTF-8"):
        parse_gate_json(b"\x80")


def test_huge_integer_is_a_malformed_gate() -> None:
    """An integer literal longer than Python converts by default is valid JSON: a malformed gate, no exception."""
    text = GATE_TEXT.replace('"start": 0', '"start": ' + "9" * 5000, 1)
    assert '"start": 9999' in text
    decision = decide_json(text)
    assert decision.reason_code == "malformed_gate_decision"
    assert decision.gate_decision_id == "gate-0001"


@pytest.fixture
def low_digit_limit() -> Iterator[None]:
    """Lower the interpreter's integer-string limit to its minimum (as PYTHONINTMAXSTRDIGITS=640 would)."""
    saved = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(saved)


@pytest.mark.usefixtures("low_digit_limit")
def test_huge_integer_under_a_lowered_digit_limit() -> None:
    """With the digit limit lowered, a 700-digit integer is still a malformed gate, never a ValueError."""
    text = GATE_TEXT.replace('"start": 0', '"start": ' + "1" * 700, 1)
    decision = decide_json(text)
    assert decision.reason_code == "malformed_gate_decision"
    assert decision.gate_decision_id == "gate-0001"


def test_deeply_nested_json_is_a_malformed_gate() -> None:
    """JSON nested far deeper than any gate is decided as malformed instead of crashing the reader."""
    depth = 100_000
    decision = decide_json("[" * depth + "]" * depth)
    assert decision.reason_code == "malformed_gate_decision"


def test_decide_json_uses_the_given_policy() -> None:
    """decide_json decides under the policy it is given."""
    other = BudgetPolicy("compute_budget.test", {"eligible_missing_role": Limits(1, 1, 1, 1)})
    decision = decide_json(GATE_TEXT, other)
    assert decision.policy_version == "compute_budget.test"
    assert decision.max_candidates == 1


@settings(max_examples=150)
@given(strategies.gate_dicts)
def test_text_of_a_valid_gate_decides_like_the_gate(gate: dict[str, object]) -> None:
    """For any valid gate, its JSON text (raw or ASCII-escaped) decides exactly like the mapping."""
    expected = decide(gate)
    assert decide_json(json.dumps(gate, ensure_ascii=False)) == expected
    assert decide_json(json.dumps(gate, ensure_ascii=True, indent=2)) == expected


@settings(max_examples=150)
@given(strategies.near_valid_gates())
def test_decide_json_is_total_over_json_text(gate: object) -> None:
    """decide_json never raises for text that is JSON (lone surrogates included), whatever the value."""
    try:
        text = json.dumps(gate, allow_nan=False)
    except ValueError:  # NaN and infinities have no JSON text
        assume(False)
    decision = decide_json(text)
    assert decision == decide(json.loads(text))


@settings(max_examples=200)
@given(strategies.near_valid_gates())
def test_raw_utf8_text_decides_like_the_stdlib_reading(gate: object) -> None:
    """Text without escapes (the reader's fast path) decides like the stdlib's reading of it, in every hashed field."""
    try:
        text = json.dumps(gate, allow_nan=False, ensure_ascii=False)
        text.encode("utf-8")
    except (ValueError, UnicodeEncodeError):  # NaN, or a lone surrogate that only an escape can carry
        assume(False)
    fast, exact = decide_json(text), decide(json.loads(text))
    assert dataclasses.replace(fast, explanation="") == dataclasses.replace(exact, explanation="")


@pytest.mark.parametrize("literal", ["18446744073709551617", "-9223372036854775809"])
def test_integers_beyond_64_bits_are_read_as_integers(literal: str) -> None:
    """An integer literal too large for 64 bits is still read as the integer it is, as the stdlib reader does."""
    text = GATE_TEXT.replace('"start": 0', f'"start": {literal}', 1)
    start = parse_gate_json(text).value["evidence_spans"][0]["start"]
    assert type(start) is int
    assert start == int(literal)
