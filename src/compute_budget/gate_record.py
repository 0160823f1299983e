"""A gate made ready for the store: its decision, the exact text kept as `gate_input`, and its JSON value.

Text input is kept as given. A Python gate (a mapping or a `SearchGateDecision`) is serialised to JSON and
accepted only when deciding that JSON reproduces the decision, so the stored `gate_input` always re-derives
exactly the stored decision.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from compute_budget.errors import GateNotSerializable, InputNotJson
from compute_budget.gate_json import ParsedGate, decide_parsed, parse_gate_json
from compute_budget.gate_lines import GateLine
from compute_budget.policy import V1, BudgetPolicy
from compute_budget.types import DECISION_FIELDS, ComputeBudgetDecision, SearchGateDecision, SourceSpan
from compute_budget.validation import is_valid_text

_COMPARED = tuple(name for name in DECISION_FIELDS if name != "explanation")


@dataclass(frozen=True, slots=True)
class PreparedGate:
    """A decided gate with the text the store keeps for it and that text's parse."""

    decision: ComputeBudgetDecision
    gate_input: str
    parsed: ParsedGate
    line: int | None = None  # where the gate starts in its input, when it came from a stream of lines


def prepare_gate(gate: object, policy: BudgetPolicy = V1) -> PreparedGate:
    """Decide `gate` (JSON text, a `GateLine`, a mapping or a `SearchGateDecision`) for storing."""
    if isinstance(gate, GateLine):
        decision = decide_parsed(gate.parsed, policy)
        return PreparedGate(decision, gate.text, gate.parsed, gate.line)
    if isinstance(gate, str | bytes | bytearray):
        parsed = parse_gate_json(gate)  # InputNotJson: unreadable input, nothing to store
        text = gate if isinstance(gate, str) else bytes(gate).decode("utf-8")
        return PreparedGate(decide_parsed(parsed, policy), text.strip(), parsed)
    text = serialize_gate(gate)
    parsed = parse_gate_json(text)
    decision = decide_parsed(parsed, policy)
    direct = policy.decide(gate)
    differing = [name for name in _COMPARED if getattr(direct, name) != getattr(decision, name)]
    if differing:
        raise GateNotSerializable(
            f"gate {decision.gate_decision_id or '(no decision_id)'} does not survive JSON: deciding its JSON "
            f"form differs in {', '.join(differing)}; record it as JSON text instead"
        )
    return PreparedGate(decision, text, parsed)


def serialize_gate(gate: object) -> str:
    """A Python gate as compact JSON text; raises `GateNotSerializable` for values JSON cannot hold."""
    value = _json_value(gate, "gate")
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if not is_valid_text(text):  # a lone surrogate cannot be stored as UTF-8: escape it instead
        text = json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text


def _json_value(value: object, where: str) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise GateNotSerializable(f"{where} is {value!r}, which JSON cannot hold")
        return value
    if isinstance(value, SearchGateDecision | SourceSpan) and is_dataclass(value):
        return {field.name: _json_value(getattr(value, field.name), f"{where}.{field.name}") for field in fields(value)}
    if isinstance(value, Mapping):
        result: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise GateNotSerializable(f"{where} has a key {key!r} that is not a string; JSON keys are strings")
            result[str.__str__(key)] = _json_value(item, f"{where}.{key}")
        return result
    if isinstance(value, list | tuple):
        return [_json_value(item, f"{where}[{index}]") for index, item in enumerate(value)]
    raise GateNotSerializable(f"{where} is a {type(value).__name__}, which JSON cannot hold")


def same_gate(stored_text: str, prepared: PreparedGate) -> bool:
    """True when a stored `gate_input` and a new gate are the same gate: equal as JSON values."""
    if stored_text == prepared.gate_input:
        return True
    try:
        stored = parse_gate_json(stored_text)
    except InputNotJson:
        return False
    return stored.defect == prepared.parsed.defect and json_equal(stored.value, prepared.parsed.value)


def json_equal(left: Any, right: Any) -> bool:
    """Equality of parsed JSON values that, unlike ``==``, never equates true with 1 or 1 with 1.0."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(json_equal(left[key], right[key]) for key in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(json_equal(a, b) for a, b in zip(left, right, strict=True))
    return bool(left == right)


def differing_keys(stored_text: str, prepared: PreparedGate) -> tuple[str, ...]:
    """The top-level gate keys whose values differ between a stored gate and a new one (for conflict messages)."""
    try:
        stored = parse_gate_json(stored_text).value
    except InputNotJson:
        return ()
    new = prepared.parsed.value
    if not isinstance(stored, dict) or not isinstance(new, dict):
        return ()
    keys = sorted(set(stored) | set(new))
    return tuple(key for key in keys if key not in stored or key not in new or not json_equal(stored[key], new[key]))
