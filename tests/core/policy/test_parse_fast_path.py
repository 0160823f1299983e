"""The orjson fast path of the gate reader agrees with the exact reader on everything it accepts."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from compute_budget.core.policy.parse import _parse_exact, _parse_fast, parse_gate_json
from tests.conftest import make_gate

keys = st.sampled_from(["a", "b", "text", "start", ":", " :", "decision_id", "é", "", 'q"', 'q\\', '":', "\ud800"])
finite_floats = st.floats(allow_nan=False, allow_infinity=False)
scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.text(max_size=8) | finite_floats
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.lists(st.tuples(keys, inner), max_size=4),
    max_leaves=12,
)


def _render(value: Any, spacing: str) -> str:
    """JSON text; a list of (key, value) pairs renders as an object, keeping repeated keys."""
    if isinstance(value, list) and value and all(isinstance(item, tuple) for item in value):
        members = [f"{json.dumps(key)}{spacing}:{spacing}{_render(item, spacing)}" for key, item in value]
        return "{" + f",{spacing}".join(members) + "}"
    if isinstance(value, list):
        return "[" + f",{spacing}".join(_render(item, spacing) for item in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _same(left: Any, right: Any) -> bool:
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(_same(left[key], right[key]) for key in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(_same(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, float) and math.isnan(left):
        return math.isnan(right)
    return bool(left == right)


@settings(max_examples=400)
@given(json_values, st.sampled_from(["", " ", "\n", "\t", " \r\n "]))
def test_fast_path_never_disagrees(value: Any, spacing: str) -> None:
    """Whatever the fast path accepts, the exact reader parses to the same value with no defect."""
    text = _render(value, spacing)
    exact = _parse_exact(text)
    fast = _parse_fast(text)
    if fast is not None:
        assert exact.defect is None
        assert _same(fast.value, exact.value)
    assert _same(parse_gate_json(text).value, exact.value)
    assert parse_gate_json(text).defect == exact.defect


def test_duplicates_hidden_behind_spacing_are_found() -> None:
    """A repeated key is caught whatever whitespace stands before its colon."""
    for text in ('{"a" :1,"a":2}', '{"a":1,"a"\n:2}', '[{"x":{"y":1,"y"\t:1}}]', '{"a":":","a":1}'):
        assert parse_gate_json(text).defect is not None, text


def test_a_real_gate_takes_the_fast_path() -> None:
    """A plain gate line is parsed by orjson (the path the benchmarks measure)."""
    text = json.dumps(make_gate(), ensure_ascii=False)
    fast = _parse_fast(text)
    assert fast is not None
    assert fast.value == make_gate()
