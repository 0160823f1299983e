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
from compute_budget.core.policy.parse import nesting_depth
from compute_budget.core.policy.rules import BudgetTable, Limits
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
    other = BudgetTable("compute_budget.test", {"eligible_missing_role": Limits(1, 1, 1, 1)})
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


# Rule 3.1.8 (revision 2): nesting deeper than 32 levels, measured on the text before parsing.


def nested_note(levels: int) -> str:
    """A gate text (malformed only by its extra key `note`) whose arrays and objects nest exactly `levels` deep."""
    inner = "[" * (levels - 1) + "1" + "]" * (levels - 1)
    return GATE_TEXT[:-1] + f', "note": {inner}}}'


def test_nesting_32_levels_still_copies() -> None:
    """A text nested exactly 32 levels deep is parsed as usual: its valid identifying strings are copied."""
    text = nested_note(32)
    assert nesting_depth(text) == (32, True)
    decision = decide_json(text)
    assert decision.reason_code == "malformed_gate_decision"
    assert "unexpected ['note']" in decision.explanation
    assert decision.gate_decision_id == "gate-0001"


def test_nesting_33_levels_copies_nothing() -> None:
    """One level more (the gate itself is level 1) and the text is malformed by rule 3.1.8: nothing is copied."""
    text = nested_note(33)
    assert nesting_depth(text) == (33, True)
    parsed = parse_gate_json(text)
    assert (parsed.value, parsed.rule, parsed.too_deep) == (None, "3.1.8", True)
    decision = decide_json(text)
    assert decision.reason_code == "malformed_gate_decision"
    assert (decision.gate_decision_id, decision.gate_policy_version, decision.gate_input_digest) == ("", "", "")
    assert decision.evidence_spans == ()
    assert "more than 32 levels deep" in decision.explanation


def test_deep_text_that_would_not_parse_is_still_a_malformed_gate() -> None:
    """The depth decides first: a closed text nested too deeply is malformed whether or not the rest parses."""
    text = '{"decision_id": "x", "a": ' + "[" * 40 + "nope, , ]" + "]" * 39 + "}"
    decision = decide_json(text)
    assert decision.reason_code == "malformed_gate_decision"
    assert decision.gate_decision_id == ""


def test_brackets_in_strings_do_not_count() -> None:
    """Brackets inside strings (escaped quotes and backslashes included) do not nest: the gate is well-formed."""
    ids = ['[{' * 40, '\\"' + '[' * 40, '\\\\' + '{' * 40, '\\u005b' + '[' * 40]
    for decision_id in ids:
        text = GATE_TEXT.replace('"gate-0001"', f'"{decision_id}"', 1)
        assert nesting_depth(text) == (3, True)
        decision = decide_json(text)
        assert decision.reason_code == "eligible_missing_role", decision_id
        assert decision.gate_decision_id == json.loads(f'"{decision_id}"')


def test_a_string_that_breaks_off_at_a_line_end_ends_there() -> None:
    """A string has no raw line break: a quote left open ends at the line's end, so later brackets count."""
    assert nesting_depth('["cut\n' + "[" * 40 + "]" * 41) == (41, True)
    assert nesting_depth('["cut\\\n' + "[" * 40 + "]" * 41) == (41, True)


def test_nesting_depth_of_the_first_value_only() -> None:
    """Only the first value is measured (a parser stops where it ends); a text not opening a value nests 0."""
    assert nesting_depth("[]" + "[" * 50 + "]" * 50) == (1, True)
    assert nesting_depth('"x"' + "[" * 50) == (0, True)
    assert nesting_depth(" \n\t[[" + "]" * 2) == (2, True)
    assert nesting_depth("[" * 50) == (50, False)
    assert nesting_depth("[" * 200_000 + "]" * 200_000) == (200_000, True)  # more than one chunk


def test_text_within_the_opening_bracket_budget_is_not_scanned(monkeypatch: pytest.MonkeyPatch) -> None:
    """A text with at most 32 `[` and `{` in all cannot nest deeper: decide's fast path skips the scan."""

    def refuse(text: str) -> tuple[int, bool]:
        raise AssertionError("scanned")

    monkeypatch.setattr("compute_budget.core.policy.parse.nesting_depth", refuse)
    assert GATE_TEXT.count("[") + GATE_TEXT.count("{") <= 32
    assert decide_json(GATE_TEXT).reason_code == "eligible_missing_role"
    with pytest.raises(AssertionError, match="scanned"):
        decide_json(nested_note(30))


@pytest.mark.parametrize("depth", [5_000, 100_000])
def test_very_deep_text_is_decided_without_recursion(depth: int) -> None:
    """A closed text nested 100,000 levels deep is a malformed gate copying nothing; the parser never sees it."""
    for text in ("[" * depth + "]" * depth, '{"decision_id": "x", "a": ' + "[" * depth + "]" * depth + "}"):
        decision = decide_json(text)
        assert decision.reason_code == "malformed_gate_decision"
        assert decision.gate_decision_id == ""
        assert "more than 32 levels deep" in decision.explanation


def test_deep_value_that_never_closes_is_not_json() -> None:
    """A value nested too deeply that never closes is an input error (no record), as any unclosed value is."""
    for text in ("[" * 100_000, '{"a": ' + "[" * 40 + "]" * 39, "[" * 40 + '"open]]]' + "]" * 39):
        with pytest.raises(InputNotJson, match="never closed") as raised:
            parse_gate_json(text)
        assert raised.value.incomplete


# Repeated keys (spec 3.2, revision 2): a key repeated in the top-level object copies as "".


def test_repeated_top_level_decision_id_copies_as_empty() -> None:
    """Neither the first nor the last of a repeated top-level decision_id is copied; the others still are."""
    text = GATE_TEXT.replace('"decision_id": "gate-0001"', '"decision_id": "first", "decision_id": "gate-0001"', 1)
    parsed = parse_gate_json(text)
    assert parsed.repeated == {"decision_id"}
    decision = decide_json(text)
    assert decision.reason_code == "malformed_gate_decision"
    assert "duplicate key 'decision_id'" in decision.explanation
    assert decision.gate_decision_id == ""
    assert (decision.gate_policy_version, decision.gate_input_digest) == (
        "search_gate.v1",
        "sha256:5d41402abc4b2a76b9719d911017c592",
    )


def test_every_repeated_top_level_key_is_named() -> None:
    """Every key repeated at the top level is found, not only the first duplicate the parser meets."""
    text = GATE_TEXT.replace('"status"', '"policy_version": "a", "input_digest": "b", "status"', 1)
    text = text.replace('"start": 0', '"start": 0, "start": 0', 1)
    assert parse_gate_json(text).repeated == {"policy_version", "input_digest"}
    decision = decide_json(text)
    assert (decision.gate_decision_id, decision.gate_policy_version, decision.gate_input_digest) == (
        "gate-0001",
        "",
        "",
    )


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(GATE_TEXT.replace('"start"', '"start": 0, "start"', 1), id="inside-a-span"),
        pytest.param(GATE_TEXT[:-1] + ', "x": {"decision_id": 1, "decision_id": 2}}', id="inside-an-extra-key"),
        pytest.param(GATE_TEXT.replace('"status"', '"status": "eligible", "status"', 1), id="top-level-status"),
    ],
)
def test_key_repeated_elsewhere_still_copies(text: str) -> None:
    """A copied key that occurs once in the top-level object is copied, whatever is repeated elsewhere."""
    decision = decide_json(text)
    assert decision.reason_code == "malformed_gate_decision"
    assert decision.gate_decision_id == "gate-0001"


def test_repeated_keys_in_a_top_level_array_are_not_top_level() -> None:
    """An array at the top is not an object: its objects' repeated keys are not top-level keys."""
    parsed = parse_gate_json('[{"decision_id": "a", "decision_id": "b"}]')
    assert parsed.defect is not None
    assert parsed.repeated == frozenset()


@pytest.mark.usefixtures("low_digit_limit")
def test_repeated_key_next_to_a_huge_integer() -> None:
    """The exact reader's second pass (for an integer past the digit limit) still finds repeated top-level keys."""
    text = GATE_TEXT.replace('"start": 0', '"start": ' + "1" * 700, 1)
    text = text.replace('"decision_id": "gate-0001"', '"decision_id": "a", "decision_id": "gate-0001"', 1)
    parsed = parse_gate_json(text)
    assert parsed.repeated == {"decision_id"}
    assert decide_json(text).gate_decision_id == ""
