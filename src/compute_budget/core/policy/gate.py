"""The input of spec section 2 (a search gate's decision and its evidence spans) and its well-formedness
(spec section 3.1): each check raises `MalformedGate` naming its rule."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

from compute_budget.errors import MalformedGate


class SearchGateStatus(StrEnum):
    """Status of the upstream search gate (the input)."""

    ELIGIBLE = "eligible"
    INELIGIBLE = "ineligible"
    BLOCKED = "blocked"
    UNASSESSABLE = "unassessable"


GATE_KEYS: frozenset[str] = frozenset(
    {
        "decision_id",
        "policy_version",
        "input_digest",
        "status",
        "reason_code",
        "residual_ids",
        "candidate_organ",
        "evidence_spans",
    }
)
SPAN_KEYS: frozenset[str] = frozenset({"text", "start", "end", "sentence_index"})
@dataclass(frozen=True, slots=True)
class SourceSpan:
    """A span of source text that the gate cites as evidence."""

    text: str
    start: int
    end: int
    sentence_index: int

    def to_dict(self) -> dict[str, Any]:
        """The span's JSON form."""
        return {
            "text": self.text,
            "start": self.start,
            "end": self.end,
            "sentence_index": self.sentence_index,
        }

    @classmethod
    def from_dict(cls, value: object) -> SourceSpan:
        """Read a span's JSON form; raises `MalformedGate` naming the rule it breaks (spec 3.1.5)."""
        return validate_span(value, 0)


@dataclass(frozen=True, slots=True)
class SearchGateDecision:
    """The input: one decision of the search gate. Constructing one does not validate it; `decide` does."""

    decision_id: str
    policy_version: str
    input_digest: str
    status: SearchGateStatus
    reason_code: str
    residual_ids: tuple[str, ...]
    candidate_organ: str | None
    evidence_spans: tuple[SourceSpan, ...]

    def to_dict(self) -> dict[str, Any]:
        """The gate's JSON form (exactly the eight keys of spec section 2)."""
        return {
            "decision_id": self.decision_id,
            "policy_version": self.policy_version,
            "input_digest": self.input_digest,
            "status": str(self.status),
            "reason_code": self.reason_code,
            "residual_ids": list(self.residual_ids),
            "candidate_organ": self.candidate_organ,
            "evidence_spans": [span.to_dict() for span in self.evidence_spans],
        }

    @classmethod
    def from_dict(cls, value: object) -> SearchGateDecision:
        """Read a gate's JSON form; raises `MalformedGate` naming the rule of spec 3.1 it breaks."""
        return validate_gate(value)



MAX_SAFE_INTEGER = 2**53 - 1
MAX_NESTING = 32  # rule 3.1.8: arrays and objects nest at most this deep, the gate itself being level 1
NESTING_DEFECT = f"its arrays and objects nest more than {MAX_NESTING} levels deep"
_STATUS_BY_VALUE: dict[str, SearchGateStatus] = {status.value: status for status in SearchGateStatus}
_REQUIRED_TEXT = ("decision_id", "policy_version", "input_digest", "reason_code")


def is_valid_text(value: object) -> bool:
    """True for a `str` holding valid Unicode text (no lone surrogate code points, rule 3.1.6)."""
    if not isinstance(value, str):
        return False
    if value.isascii():  # O(1) in CPython: the common case costs nothing
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _text(value: object, where: str) -> str:
    if type(value) is not str:
        if not isinstance(value, str):
            raise MalformedGate(_string_rule(where), f"{where} must be a string")
        _check_nested_leaf(value, where)
        value = str.__str__(value)  # a str subclass (a StrEnum member, say) counts as its plain text
    if not value.isascii() and not is_valid_text(value):
        raise MalformedGate("3.1.6", f"{where} holds a lone surrogate code point (not valid Unicode text)")
    return value


def _check_nested_leaf(value: object, where: str) -> None:
    """A str or int that is also a mapping still nests like one (rule 3.1.8).

    Only such values can make a gate that validation accepts nest deeper than 3 levels (gate, array, span,
    value), so `decide` measures whole gates only when validation rejects them.
    """
    if isinstance(value, Mapping):
        level = 4 if where.startswith("evidence_spans") else 3 if where.startswith("residual_ids") else 2
        if nests_too_deep(value, MAX_NESTING - level + 1):
            raise MalformedGate("3.1.8", NESTING_DEFECT)


def _string_rule(where: str) -> str:
    """The rule that requires `where` to be a string: 3.1.2, 3.1.5 for a span's text, else 3.1.4."""
    if where in _REQUIRED_TEXT:
        return "3.1.2"
    return "3.1.5" if where.startswith("evidence_spans") else "3.1.4"


def _integer(value: object, where: str) -> int:
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise MalformedGate("3.1.5", f"{where} must be an integer, not {type(value).__name__}")
        _check_nested_leaf(value, where)
        value = int(value)
    if not 0 <= value <= MAX_SAFE_INTEGER:
        raise MalformedGate("3.1.5", f"{where} must be between 0 and 2**53 - 1")
    return value


def _sequence(value: object, where: str, rule: str) -> list[Any] | tuple[Any, ...]:
    if isinstance(value, list | tuple):
        return value
    raise MalformedGate(rule, f"{where} must be an array, not {type(value).__name__}")


_LEAVES = frozenset({str, int, float, bool, type(None)})
_GATE_FIELDS = tuple(SearchGateDecision.__slots__)
_SPAN_FIELDS = tuple(SourceSpan.__slots__)


def nests_too_deep(gate: object, limit: int = MAX_NESTING) -> bool:
    """True when lists, tuples and mappings nest deeper than `limit` in `gate` (rule 3.1.8), the gate itself
    (a mapping or a `SearchGateDecision`) being level 1.

    Breadth first, one level at a time and without recursion, so a 100,000-deep value (or one that contains
    itself) costs `limit` levels of work, never a RecursionError. Each level keeps a container once however
    often it is shared, so values built of shared parts cost no more than their distinct parts. A mapping whose
    values cannot be read counts as a level but hides nothing: validation reports it.
    """
    level: list[Any] = [gate]
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        below: list[Any] = []
        for node in level:
            kind = type(node)
            if kind is dict:
                below.extend([child for child in node.values() if type(child) not in _LEAVES])
            elif kind is list or kind is tuple:
                below.extend([child for child in node if type(child) not in _LEAVES])
            elif isinstance(node, Mapping | list | tuple | SearchGateDecision | SourceSpan):
                try:
                    below.extend([child for child in _children(node) if type(child) not in _LEAVES])
                except Exception:  # a hostile object: unreadable, so nothing below it is counted
                    continue
        if len(below) > 8:
            below = list({id(node): node for node in below}.values())
        level = below
    return False


def _children(node: Any) -> list[Any]:
    if isinstance(node, SearchGateDecision):
        return [getattr(node, name) for name in _GATE_FIELDS]
    if isinstance(node, SourceSpan):
        return [getattr(node, name) for name in _SPAN_FIELDS]
    if isinstance(node, Mapping):
        return list(node.values())
    return list(node)


def validate_span(value: object, position: int) -> SourceSpan:
    """Check one evidence span (rules 3.1.5 and 3.1.6) and return it as a `SourceSpan`."""
    return _check_span(value, position)[0]


def _check_span(value: object, position: int) -> tuple[SourceSpan, dict[str, Any]]:
    """A valid span and its hashed form (keys in canonical order), built in one pass."""
    if type(value) is dict and len(value) == 4:
        text, start, end, sentence_index = (
            value.get("text", _MISSING),
            value.get("start", _MISSING),
            value.get("end", _MISSING),
            value.get("sentence_index", _MISSING),
        )
        if _MISSING in (text, start, end, sentence_index):
            raise MalformedGate(
                "3.1.5",
                f"evidence_spans[{position}] must have exactly the keys text, start, end, sentence_index",
            )
    elif isinstance(value, SourceSpan):
        text, start, end, sentence_index = value.text, value.start, value.end, value.sentence_index
    elif isinstance(value, Mapping):
        if len(value) != 4 or value.keys() != SPAN_KEYS:
            raise MalformedGate(
                "3.1.5",
                f"evidence_spans[{position}] must have exactly the keys text, start, end, sentence_index",
            )
        text, start, end, sentence_index = (
            value["text"],
            value["start"],
            value["end"],
            value["sentence_index"],
        )
    else:
        raise MalformedGate("3.1.5", f"evidence_spans[{position}] must be an object, not {type(value).__name__}")
    # Fast path first: plain ASCII text and plain non-negative ints in range need no further work.
    if not (type(text) is str and text.isascii()):
        text = _text(text, f"evidence_spans[{position}].text")
    if not (type(start) is int and 0 <= start <= MAX_SAFE_INTEGER):
        start = _integer(start, f"evidence_spans[{position}].start")
    if not (type(end) is int and 0 <= end <= MAX_SAFE_INTEGER):
        end = _integer(end, f"evidence_spans[{position}].end")
    if not (type(sentence_index) is int and 0 <= sentence_index <= MAX_SAFE_INTEGER):
        sentence_index = _integer(sentence_index, f"evidence_spans[{position}].sentence_index")
    if end < start:
        raise MalformedGate("3.1.5", f"evidence_spans[{position}].end ({end}) is before its start ({start})")
    span = value if type(value) is SourceSpan else _new_span(text, start, end, sentence_index)
    return span, {"end": end, "sentence_index": sentence_index, "start": start, "text": text}


_MISSING = object()
_span_setters: tuple[Callable[[SourceSpan, Any], None], ...] = tuple(
    getattr(SourceSpan, name).__set__ for name in ("text", "start", "end", "sentence_index")
)


def _new_span(text: str, start: int, end: int, sentence_index: int) -> SourceSpan:
    # Writes the slots directly: the frozen dataclass __init__ costs twice as much on this hot path, and
    # every value here has just been checked.
    span = object.__new__(SourceSpan)
    set_text, set_start, set_end, set_sentence = _span_setters
    set_text(span, text)
    set_start(span, start)
    set_end(span, end)
    set_sentence(span, sentence_index)
    return span


class CheckedGate(NamedTuple):
    """A well-formed gate's normalised values, with its evidence spans in hashed form."""

    decision_id: str
    policy_version: str
    input_digest: str
    status: SearchGateStatus
    reason_code: str
    residual_ids: tuple[str, ...]
    candidate_organ: str | None
    evidence_spans: tuple[SourceSpan, ...]
    span_payload: list[dict[str, Any]]


def _wrong_keys(gate: Mapping[Any, Any]) -> MalformedGate:
    """Rule 3.1.1 broken by a mapping without exactly the eight keys: which are missing, which unexpected."""
    keys = set(gate.keys())
    missing = sorted(GATE_KEYS - keys)
    extra = sorted(repr(key) for key in keys - GATE_KEYS)
    return MalformedGate("3.1.1", f"gate keys are wrong: missing {missing}, unexpected [{', '.join(extra)}]")


def _decision_fields(gate: object) -> tuple[Any, ...]:
    """The eight values of a gate given as a `SearchGateDecision`, in spec order, not yet checked; rule 3.1.1
    broken by anything that is neither that nor a mapping."""
    if not isinstance(gate, SearchGateDecision):
        raise MalformedGate("3.1.1", f"a gate must be a JSON object, not {type(gate).__name__}")
    return (
        gate.decision_id,
        gate.policy_version,
        gate.input_digest,
        gate.status,
        gate.reason_code,
        gate.residual_ids,
        gate.candidate_organ,
        gate.evidence_spans,
    )


def check_gate(gate: object) -> CheckedGate:
    """Check every rule of spec 3.1; raises `MalformedGate` naming the first rule broken."""
    # A mapping is read inline: it is what `decide` is given on the hot path (parsed JSON).
    if type(gate) is dict or isinstance(gate, Mapping):
        if len(gate) != 8 or gate.keys() != GATE_KEYS:
            raise _wrong_keys(gate)
        decision_id, policy_version, input_digest, status, reason_code, residual_ids, organ, spans = (
            gate["decision_id"],
            gate["policy_version"],
            gate["input_digest"],
            gate["status"],
            gate["reason_code"],
            gate["residual_ids"],
            gate["candidate_organ"],
            gate["evidence_spans"],
        )
    else:
        decision_id, policy_version, input_digest, status, reason_code, residual_ids, organ, spans = (
            _decision_fields(gate)
        )
    if not (type(decision_id) is str and decision_id.isascii()):
        decision_id = _text(decision_id, "decision_id")
    if not (type(policy_version) is str and policy_version.isascii()):
        policy_version = _text(policy_version, "policy_version")
    if not (type(input_digest) is str and input_digest.isascii()):
        input_digest = _text(input_digest, "input_digest")
    if not (type(reason_code) is str and reason_code.isascii()):
        reason_code = _text(reason_code, "reason_code")
    if not (decision_id and policy_version and input_digest and reason_code):
        named = zip(_REQUIRED_TEXT, (decision_id, policy_version, input_digest, reason_code), strict=True)
        raise MalformedGate("3.1.2", f"{', '.join(name for name, text in named if not text)} must not be empty")
    gate_status = _STATUS_BY_VALUE.get(status) if isinstance(status, str) else None
    if gate_status is not None and type(status) is not str and type(status) is not SearchGateStatus:
        _check_nested_leaf(status, "status")
    if gate_status is None:
        raise MalformedGate("3.1.3", f"status {status!r} is not one of eligible, ineligible, blocked, unassessable")
    if type(residual_ids) is not tuple:
        residual_ids = tuple(_sequence(residual_ids, "residual_ids", "3.1.4"))
    for index, residual in enumerate(residual_ids):
        if not (type(residual) is str and residual.isascii()):
            _text(residual, f"residual_ids[{index}]")
            if type(residual) is not str:
                residual_ids = tuple(str.__str__(item) for item in residual_ids)
    if organ is not None and not (type(organ) is str and organ.isascii()):
        organ = _text(organ, "candidate_organ")
    checked = [_check_span(item, index) for index, item in enumerate(_sequence(spans, "evidence_spans", "3.1.5"))]
    return CheckedGate(
        decision_id,
        policy_version,
        input_digest,
        gate_status,
        reason_code,
        residual_ids,
        organ,
        tuple([span for span, _ in checked]),
        [payload for _, payload in checked],
    )


def validate_gate(gate: object) -> SearchGateDecision:
    """Check every rule of spec 3.1 and return the gate as a plain, normalised `SearchGateDecision`."""
    checked = check_gate(gate)
    return SearchGateDecision(*checked[:8])
