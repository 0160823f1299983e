"""Writing a deeply nested Python gate as JSON text (`serialize_gate`): without recursion, and an error names the
exact place of what JSON cannot hold, however deep it is."""

from __future__ import annotations

import json

import pytest

from compute_budget.core.policy.prepare import serialize_gate
from compute_budget.errors import GateNotSerializable
from tests.conftest import make_gate

DEPTH = 40  # over the 32 levels json.dumps is left to: the explicit stack writes it


def _nested(inner: object, depth: int = DEPTH) -> object:
    value = inner
    for _ in range(depth):
        value = [value]
    return value


def test_a_deep_gate_is_written_as_json_dumps_would() -> None:
    gate = make_gate(note=_nested({"k": [1, 2.5, None, True, "é"]}))
    assert serialize_gate(gate) == json.dumps(gate, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize("depth", [DEPTH, 2])  # the explicit stack, and the shallow path beside it
@pytest.mark.parametrize(
    ("inner", "message"),
    [
        ({"a": [float("nan")]}, ".a[0] is nan, which JSON cannot hold"),
        ({"a": {1: "x"}}, ".a has a key 1 that is not a string"),
        ({"a": [{"b": {2, 3}}]}, ".a[0].b is a set, which JSON cannot hold"),
    ],
)
def test_what_json_cannot_hold_is_named_by_its_exact_place(inner: object, message: str, depth: int) -> None:
    """The place is spelled out only for the error (building it for every container cost time quadratic in the
    depth); it is still the whole path from the gate, whether the error is found on opening a container or while
    its members are written."""
    gate = make_gate(note=_nested(inner, depth))
    with pytest.raises(GateNotSerializable) as raised:
        serialize_gate(gate)
    assert str(raised.value).startswith("gate.note" + "[0]" * depth + message), str(raised.value)


def test_a_gate_inside_itself_deep_down_is_named_where_it_recurs() -> None:
    inner: list[object] = []
    gate = make_gate(note=_nested(inner))
    inner.append(gate)
    with pytest.raises(GateNotSerializable) as raised:
        serialize_gate(gate)
    assert str(raised.value) == "gate.note" + "[0]" * DEPTH + "[0] contains itself, which JSON cannot hold"
