"""The strict reader for gate text (spec 3.1.7, 3.1.8): RFC 8259 JSON, no object with a duplicate key, and
arrays and objects nested at most 32 levels deep.

Text that is not JSON at all raises `InputNotJson` (an input error). JSON that is not a well-formed gate,
including JSON with a duplicate key or nested too deeply, still yields a decision: a malformed, fail-closed one.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any, NamedTuple, NoReturn

import orjson

from compute_budget.core.policy.gate import MAX_NESTING, NESTING_DEFECT
from compute_budget.core.policy.rules import V1, BudgetTable
from compute_budget.core.policy.types import ComputeBudgetDecision
from compute_budget.errors import ArgumentTypeError, InputNotJson


class ParsedGate(NamedTuple):
    """Parsed gate text: the JSON value, and why the text itself breaks rule 3.1.7 or 3.1.8 (None when it does
    not). `repeated` holds the keys its top-level object repeats, which copy as "" (spec 3.2); a text nested
    more than 32 levels deep is not parsed at all (its value is None)."""

    value: Any
    defect: str | None
    repeated: frozenset[str] = frozenset()
    rule: str = "3.1.7"

    @property
    def too_deep(self) -> bool:
        """True for a text that nests arrays and objects more than 32 levels deep (rule 3.1.8)."""
        return self.rule == "3.1.8"


TOO_DEEP = ParsedGate(None, NESTING_DEFECT, frozenset(), "3.1.8")


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
    if text.count("[") + text.count("{") > MAX_NESTING:  # else it cannot nest deeper: no scan needed
        depth, closed = nesting_depth(text)
        if depth > MAX_NESTING:
            if not closed:
                raise InputNotJson("not JSON: the value is never closed", incomplete=True)
            return TOO_DEEP
    fast = _parse_fast(text)
    if fast is not None:
        return fast
    return _parse_exact(text)


def decide_parsed(parsed: ParsedGate, policy: BudgetTable = V1) -> ComputeBudgetDecision:
    """Decide a parsed gate text: its defect, its repeated top-level keys and its measured nesting included."""
    return policy.decide(
        parsed.value,
        defect=parsed.defect,
        defect_rule=parsed.rule,
        repeated_keys=parsed.repeated,
        nesting_checked=True,
    )


# Inside a string a quote or a backslash ends a run of plain characters; a string that breaks off ends at the
# line's end (JSON strings hold no raw line break) or at the text's end. Everything else but brackets is dropped.
_NOT_A_BRACKET = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"?|[^\[\]{}"]+')
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}.__getitem__
_CHUNK = 1 << 16


def nesting_depth(text: str) -> tuple[int, bool]:
    """How deep the text's first value nests arrays and objects (rule 3.1.8), and whether it closes.

    Brackets inside strings do not count. Linear and without recursion: strings and everything but brackets
    are dropped by one regular expression, then the brackets' running depth is summed a chunk at a time. A text
    that does not start with `[` or `{` nests 0 levels (a parser stops at its first character). The value
    closes where the depth first returns to 0; what follows it does not count.
    """
    if text.lstrip(" \t\r\n")[:1] not in ("[", "{"):
        return 0, True
    brackets = _NOT_A_BRACKET.sub("", text)
    deepest = carry = 0
    for start in range(0, len(brackets), _CHUNK):
        depths = list(accumulate(map(_STEP, brackets[start : start + _CHUNK]), initial=carry))
        try:
            end = depths.index(0, 1)  # steps of one from a positive depth: the first return to 0 closes it
        except ValueError:
            deepest = max(deepest, max(depths))
            carry = depths[-1]
            continue
        return max(deepest, max(depths[: end + 1])), True
    return deepest, False


NO_BRACKET = 1 << 62  # `bracket_profile`'s lowest depth for a line without brackets: it closes nothing


def bracket_profile(line: str) -> tuple[int, int, int]:
    """One line's brackets: (net change of depth, lowest depth right after any bracket or NO_BRACKET, highest
    depth reached, at least 0), depths relative to the line's start.

    The same reading as `nesting_depth` (a string never runs past the line's end), one line at a time: a value
    opened at depth d closes on the first later line whose depth at its start plus its lowest depth is <= d.
    """
    brackets = _NOT_A_BRACKET.sub("", line)
    if not brackets:
        return 0, NO_BRACKET, 0
    lowest, highest = NO_BRACKET, 0
    carry = 0
    for start in range(0, len(brackets), _CHUNK):
        depths = list(accumulate(map(_STEP, brackets[start : start + _CHUNK]), initial=carry))
        lowest = min(lowest, min(depths[1:]))
        highest = max(highest, max(depths))
        carry = depths[-1]
    return carry, lowest, highest


def _parse_exact(text: str) -> ParsedGate:
    """The reference reader: the standard library's parser, watching every object for a repeated key."""
    duplicates: list[str] = []
    last: list[Any] = [None, frozenset()]  # the object built last (the top level, if any) and its repeated keys

    def unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        repeated: frozenset[str] = frozenset()
        if len(obj) != len(pairs):
            seen: set[str] = set()
            again: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    if not duplicates:
                        duplicates.append(key)
                    again.add(key)
                seen.add(key)
            repeated = frozenset(again)
        last[0], last[1] = obj, repeated
        return obj

    def result(value: Any, defect: str | None) -> ParsedGate:
        if duplicates and defect is None:
            defect = f"duplicate key {duplicates[0]!r} in a JSON object"
        repeated = last[1] if value is last[0] else frozenset()  # the hook builds the top-level object last
        return ParsedGate(value, defect, repeated)

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
    except ValueError:  # an integer literal past Python's digit limit: valid JSON, never a valid gate field
        duplicates.clear()
        value = json.loads(
            text, object_pairs_hook=unique_pairs, parse_constant=_reject_constant, parse_int=_parse_integer
        )
        return result(value, "an integer has too many digits to be read")
    return result(value, None)


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


def decide_json(text: str | bytes | bytearray, policy: BudgetTable = V1) -> ComputeBudgetDecision:
    """Decide gate text; raises `InputNotJson` only when the text is not JSON at all."""
    if not isinstance(text, str | bytes | bytearray):
        raise ArgumentTypeError(f"decide_json takes gate text (str or bytes), not {type(text).__name__}")
    return decide_parsed(parse_gate_json(text), policy)
