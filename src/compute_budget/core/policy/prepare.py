"""A gate made ready for the store: its decision, the exact text kept as `gate_input`, and its JSON value.

Text input is kept as given. A Python gate (a mapping or a `SearchGateDecision`) is serialised to JSON and
accepted only when deciding that JSON reproduces the decision, so the stored `gate_input` always re-derives
exactly the stored decision.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from compute_budget.core.policy.gate import MAX_NESTING, is_valid_text
from compute_budget.core.policy.lines import GateLine
from compute_budget.core.policy.parse import ParsedGate, decide_parsed, parse_gate_json
from compute_budget.core.policy.rules import V1, BudgetTable
from compute_budget.core.policy.types import REDERIVED_FIELDS, ComputeBudgetDecision, SearchGateDecision, SourceSpan
from compute_budget.errors import GateNotSerializable, InputNotJson


@dataclass(frozen=True, slots=True)
class PreparedGate:
    """A decided gate with the text the store keeps for it and that text's parse."""

    decision: ComputeBudgetDecision
    gate_input: str
    parsed: ParsedGate
    line: int | None = None  # where the gate starts in its input, when it came from a stream of lines


def prepare_gate(gate: object, policy: BudgetTable = V1) -> PreparedGate:
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
    differing = [name for name in REDERIVED_FIELDS if getattr(direct, name) != getattr(decision, name)]
    if differing:
        raise GateNotSerializable(
            f"gate {decision.gate_decision_id or '(no decision_id)'} does not survive JSON: deciding its JSON "
            f"form differs in {', '.join(differing)}; record it as JSON text instead"
        )
    return PreparedGate(decision, text, parsed)


def serialize_gate(gate: object) -> str:
    """A Python gate as compact JSON text; raises `GateNotSerializable` for values JSON cannot hold.

    A gate nested more than 32 levels deep (rule 3.1.8) is written by `_deep_json_text`, without recursion.
    """
    try:
        value = _json_value(gate, "gate", 1)
    except _TooDeep:
        text = _deep_json_text(gate, ascii_only=False)
        return text if is_valid_text(text) else _deep_json_text(gate, ascii_only=True)
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if not is_valid_text(text):  # a lone surrogate cannot be stored as UTF-8: escape it instead
        text = json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text


class _TooDeep(Exception):
    """A container below level 32: `_json_value` (and json.dumps) would recurse, so the gate takes the stack way."""


def _json_value(value: object, where: str, level: int) -> Any:
    """`value` as plain JSON data; `level` is the nesting level a container here would have (the gate is 1)."""
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
    if level > MAX_NESTING and isinstance(value, SearchGateDecision | SourceSpan | Mapping | list | tuple):
        raise _TooDeep
    if isinstance(value, SearchGateDecision | SourceSpan) and is_dataclass(value):
        return {
            field.name: _json_value(getattr(value, field.name), f"{where}.{field.name}", level + 1)
            for field in fields(value)
        }
    if isinstance(value, Mapping):
        result: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise GateNotSerializable(f"{where} has a key {key!r} that is not a string; JSON keys are strings")
            result[str.__str__(key)] = _json_value(item, f"{where}.{key}", level + 1)
        return result
    if isinstance(value, list | tuple):
        return [_json_value(item, f"{where}[{index}]", level + 1) for index, item in enumerate(value)]
    raise GateNotSerializable(f"{where} is a {type(value).__name__}, which JSON cannot hold")


@dataclass(slots=True)
class _Open:
    """A container being written by `_deep_json_text`: its remaining members, closing bracket and own place."""

    members: Iterator[tuple[str, str | None, object]]
    closing: str
    identity: int
    place: str  # ".key" or "[index]" within its parent; "" for the gate
    written: int = 0


def _deep_json_text(gate: object, *, ascii_only: bool) -> str:
    """The text json.dumps would write for `gate` (compact separators), built with an explicit stack.

    For gates nested more than 32 levels deep, where json.dumps recurses and fails near 1,000 levels. Each
    open container remembers only its own place, so a 100,000-level gate costs linear time; the full place is
    spelled out only in an error. A container inside itself cannot be written.
    """
    parts: list[str] = []
    stack: list[_Open] = []
    open_ids: set[int] = set()

    def write(value: object, place: str) -> None:
        if value is None or isinstance(value, bool):
            parts.append("null" if value is None else "true" if value else "false")
        elif isinstance(value, str):
            parts.append(json.dumps(str.__str__(value), ensure_ascii=ascii_only))
        elif isinstance(value, int):
            parts.append(int.__repr__(int(value)))
        else:
            # The full place, spelled out only for an error: building it for every container would cost time
            # quadratic in the depth. The containers above this one stay open (and unchanged) while it is.
            depth = len(stack)

            def where() -> str:
                return "gate" + "".join(entry.place for entry in stack[:depth]) + place

            if isinstance(value, float):
                if not math.isfinite(value):
                    raise GateNotSerializable(f"{where()} is {value!r}, which JSON cannot hold")
                parts.append(float.__repr__(value))
                return
            members, opening, closing = _members(value, where, ascii_only)
            if id(value) in open_ids:
                raise GateNotSerializable(f"{where()} contains itself, which JSON cannot hold")
            open_ids.add(id(value))
            parts.append(opening)
            stack.append(_Open(members, closing, id(value), place))

    write(gate, "")
    while stack:
        container = stack[-1]
        member = next(container.members, None)
        if member is None:
            parts.append(container.closing)
            open_ids.discard(container.identity)
            stack.pop()
            continue
        place, key_text, value = member
        if container.written:
            parts.append(",")
        container.written += 1
        if key_text is not None:
            parts.append(key_text + ":")
        write(value, place)
    return "".join(parts)


def _members(
    value: object, where: Callable[[], str], ascii_only: bool
) -> tuple[Iterator[tuple[str, str | None, object]], str, str]:
    """A container's members as (place, key text or None, value), and its brackets; `where()` names it in errors."""
    if isinstance(value, SearchGateDecision | SourceSpan) and is_dataclass(value):
        names = [field.name for field in fields(value)]
        return ((f".{name}", json.dumps(name), getattr(value, name)) for name in names), "{", "}"
    if isinstance(value, Mapping):

        def keyed() -> Iterator[tuple[str, str | None, object]]:
            for key, item in value.items():
                if not isinstance(key, str):
                    raise GateNotSerializable(
                        f"{where()} has a key {key!r} that is not a string; JSON keys are strings"
                    )
                plain = str.__str__(key)
                yield f".{plain}", json.dumps(plain, ensure_ascii=ascii_only), item

        return keyed(), "{", "}"
    if isinstance(value, list | tuple):
        return ((f"[{index}]", None, item) for index, item in enumerate(value)), "[", "]"
    raise GateNotSerializable(f"{where()} is a {type(value).__name__}, which JSON cannot hold")


def same_gate(stored_text: str, prepared: PreparedGate) -> bool:
    """True when a stored `gate_input` and a new gate are the same gate (spec 5): equal as JSON values.

    A text with a repeated key (rule 3.1.7), nested more than 32 levels deep (3.1.8) or holding an integer too
    long to read has no JSON value to compare: it is the same gate only as the very same text.
    """
    if stored_text == prepared.gate_input:
        return True
    if prepared.parsed.defect is not None:
        return False
    try:
        stored = parse_gate_json(stored_text)
    except InputNotJson:
        return False
    return stored.defect is None and json_equal(stored.value, prepared.parsed.value)


def json_equal(left: Any, right: Any) -> bool:
    """Equality of parsed JSON values that, unlike ``==``, never equates true with 1 or 1 with 1.0.

    Iterative, so no nesting depth can make it recurse.
    """
    pending = [(left, right)]
    while pending:
        one, other = pending.pop()
        if type(one) is not type(other):
            return False
        if isinstance(one, dict):
            if one.keys() != other.keys():
                return False
            pending.extend((one[key], other[key]) for key in one)
        elif isinstance(one, list):
            if len(one) != len(other):
                return False
            pending.extend(zip(one, other, strict=True))
        elif not bool(one == other):
            return False
    return True


def differing_keys(stored_text: str, prepared: PreparedGate) -> tuple[str, ...]:
    """The top-level gate keys whose values differ between a stored gate and a new one (for conflict messages)."""
    try:
        stored = parse_gate_json(stored_text).value
    except InputNotJson:
        return ()
    new = prepared.parsed.value
    if not isinstance(stored, dict) or not isinstance(new, dict):
        return ()  # not objects, or nested too deeply to have been parsed at all
    keys = sorted(set(stored) | set(new))
    return tuple(key for key in keys if key not in stored or key not in new or not json_equal(stored[key], new[key]))
