"""The strict reader for gate text (spec 3.1.7): RFC 8259 JSON, and no object with a duplicate key.

Text that is not JSON at all raises `InputNotJson` (an input error). JSON that is not a well-formed gate,
including JSON with a duplicate key, still yields a decision: a malformed, fail-closed one.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple, NoReturn

import orjson

from compute_budget.core.policy import V1, BudgetPolicy
from compute_budget.core.types import ComputeBudgetDecision
from compute_budget.errors import InputNotJson


class ParsedGate(NamedTuple):
    """Parsed gate text: the JSON value, and why the text itself breaks rule 3.1.7 (None when it does not)."""

    value: Any
    defect: str | None


class _HugeInteger:
    """Stands in for an integer too long for Python to convert; no gate field accepts one."""


_HUGE = _HugeInteger()


def _reject_constant(name: str) -> NoReturn:
    raise InputNotJson(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


def _parse_integer(literal: str) -> int | _HugeInteger:
    try:
        return int(literal)
    except ValueError:  # past this interpreter's digit limit (4300 by default, as low as 640 if configured)
        return _HUGE


def located(message: str, where: str) -> str:
    """A parser message with its place: "Expecting value (column 3)", "Unterminated string starting at column 7"."""
    return f"{message} {where}" if message.endswith(" at") else f"{message} ({where})"


def parse_gate_json(text: str | bytes | bytearray) -> ParsedGate:
    """Parse gate text strictly; raises `InputNotJson` when it is not JSON (or not UTF-8) at all."""
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as error:
            raise InputNotJson(f"not valid UTF-8 (byte {error.start})") from None
    fast = _parse_fast(text)
    if fast is not None:
        return fast
    return _parse_exact(text)


def _parse_exact(text: str) -> ParsedGate:
    """The reference reader: the standard library's parser, watching every object for a repeated key."""
    duplicates: list[str] = []

    def unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) != len(pairs) and not duplicates:
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    duplicates.append(key)
                    break
                seen.add(key)
        return obj

    try:
        value = json.loads(text, object_pairs_hook=unique_pairs, parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        incomplete = error.pos >= len(text.rstrip(" \t\r\n"))  # only JSON's whitespace may end a value
        where = f"column {error.colno}" if error.lineno == 1 else f"line {error.lineno}, column {error.colno}"
        raise InputNotJson(
            f"not JSON: {located(error.msg, where)}",
            incomplete=incomplete,
            reason=error.msg,
            line=error.lineno,
            column=error.colno,
        ) from None
    except RecursionError:
        if text.rstrip(" \t\r\n")[-1:] not in ("]", "}"):  # a value this deep that never closes is not JSON
            raise InputNotJson("not JSON: the value is never closed", incomplete=True) from None
        return ParsedGate(None, "the JSON is nested too deeply to be a gate")
    except ValueError:  # an integer literal past Python's digit limit: valid JSON, never a valid gate field
        duplicates.clear()
        value = json.loads(
            text, object_pairs_hook=unique_pairs, parse_constant=_reject_constant, parse_int=_parse_integer
        )
        return ParsedGate(value, "an integer has too many digits to be read")
    if duplicates:
        return ParsedGate(value, f"duplicate key {duplicates[0]!r} in a JSON object")
    return ParsedGate(value, None)


# A closing quote followed by a colon: every object member ends its key this way (a key's closing quote is
# never escaped), and the pattern can match only more often than there are members, never less (an escaped
# quote inside a string can add matches, not hide one). So if some count
# of parsed keys that never exceeds the true one equals the matches, the text repeated no key:
#   counted keys <= parsed keys <= members in the text <= matches.
_KEY_END = re.compile(r'"[ \t\n\r]*:')


def _parse_fast(text: str) -> ParsedGate | None:
    """orjson's parse, when it provably agrees with the exact reader; None sends the text to the exact reader.

    orjson refuses lone surrogates (the exact reader then reads them, for a malformed gate), and it keeps the
    last of duplicate keys silently, so keys are counted against the text's key-colon pairs.
    """
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None  # the exact reader says what is wrong, or accepts what orjson refuses (huge integers)
    if '" ' in text or '"\t' in text or '"\n' in text or '"\r' in text:
        key_ends = len(_KEY_END.findall(text))
    else:
        key_ends = text.count('":')  # every key's closing quote touches its colon: a plain count suffices
    return ParsedGate(value, None) if _members_at_most(value) == key_ends else None


def _members_at_most(value: Any) -> int:
    """Keys of the top-level object and of its evidence span objects: never more than the value holds.

    Exact for a gate; for other shapes it may count fewer, which only sends the text to the exact reader.
    -1 when a span holds a float, so the exact reader reports what the literal really was.
    """
    if type(value) is not dict:
        return 0
    count = len(value)
    spans = value.get("evidence_spans")
    if type(spans) is list:
        for span in spans:
            if type(span) is dict:
                for number in span.values():
                    if type(number) is float:
                        return -1  # orjson reads integers past 64 bits as floats: let the exact reader say
                count += len(span)
    return count


def decide_json(text: str | bytes | bytearray, policy: BudgetPolicy = V1) -> ComputeBudgetDecision:
    """Decide gate text; raises `InputNotJson` only when the text is not JSON at all."""
    parsed = parse_gate_json(text)
    return policy.decide(parsed.value, defect=parsed.defect)
