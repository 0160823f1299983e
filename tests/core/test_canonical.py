"""Canonical JSON (spec 3.3): the project's fast encoder equals RFC 8785 for every payload it is given."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from compute_budget import canonical_json
from compute_budget.core.canonical import canonical_sha256, json_line
from tests import strategies


def stdlib_canonical(value: Any) -> bytes:
    """The stdlib form the spec names: sorted keys, no spaces, raw UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param({"b": 1, "a": 2}, b'{"a":2,"b":1}', id="sorted-keys-no-spaces"),
        pytest.param({"a": [1, {"d": None, "c": "x"}]}, b'{"a":[1,{"c":"x","d":null}]}', id="nested"),
        pytest.param({"t": "\u00e9\U0001f600"}, '{"t":"\u00e9\U0001f600"}'.encode(), id="raw-utf8"),
        pytest.param({"t": "\x00\x01\x1f"}, b'{"t":"\\u0000\\u0001\\u001f"}', id="controls-lowercase-hex"),
        pytest.param({"t": "\b\t\n\f\r"}, b'{"t":"\\b\\t\\n\\f\\r"}', id="short-escapes"),
        pytest.param({"t": '"\\/'}, b'{"t":"\\"\\\\/"}', id="quote-backslash-solidus"),
        pytest.param({"t": "\x7f\u2028\u2029"}, '{"t":"\x7f\u2028\u2029"}'.encode(), id="del-and-separators-raw"),
        pytest.param({"n": 2**53 - 1}, b'{"n":9007199254740991}', id="max-safe-integer"),
        pytest.param({"n": 0}, b'{"n":0}', id="zero"),
    ],
)
def test_canonical_json_known_bytes(value: Any, expected: bytes) -> None:
    """canonical_json gives the exact RFC 8785 bytes for hand-checked values, and rfc8785 agrees."""
    assert canonical_json(value) == expected
    assert rfc8785.dumps(value) == expected


@settings(max_examples=400)
@given(strategies.payloads())
def test_canonical_json_equals_rfc8785_for_payloads(payload: dict[str, Any]) -> None:
    """For any budget_id payload, canonical_json == rfc8785.dumps == the stdlib sorted-keys form."""
    expected = rfc8785.dumps(payload)
    assert canonical_json(payload) == expected
    assert stdlib_canonical(payload) == expected


@settings(max_examples=300)
@given(
    st.recursive(
        st.one_of(st.none(), st.integers(min_value=0, max_value=2**53 - 1), strategies.valid_text),
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(st.text(st.characters(max_codepoint=127), max_size=6), children, max_size=5),
        ),
        max_leaves=15,
    )
)
def test_canonical_json_equals_rfc8785_for_nested_values(value: Any) -> None:
    """Any nesting of ASCII-keyed objects, arrays, valid text, safe integers and null encodes as RFC 8785 does."""
    assert canonical_json(value) == rfc8785.dumps(value)


@settings(max_examples=100)
@given(strategies.payloads())
def test_canonical_sha256_is_sha256_of_the_bytes(payload: dict[str, Any]) -> None:
    """canonical_sha256 is the lowercase hex SHA-256 of the canonical bytes."""
    assert canonical_sha256(payload) == hashlib.sha256(rfc8785.dumps(payload)).hexdigest()


def test_json_line_keeps_key_order() -> None:
    """json_line writes one compact line in the value's own key order (not sorted)."""
    assert json_line({"b": 1, "a": "\u2028"}) == '{"b":1,"a":"\u2028"}'
