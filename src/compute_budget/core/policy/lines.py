"""Gates from a byte stream: JSON Lines, one gate per non-blank line, or one object spread over lines.

Streams: one line (or one multi-line object) is held at a time, so input of any size is read in bounded
memory. Each gate is parsed once, here, and handed on with its original text for the store to keep.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import accumulate

from compute_budget.core.policy.gate import MAX_NESTING
from compute_budget.core.policy.parse import NO_BRACKET, ParsedGate, bracket_profile, located, parse_gate_json
from compute_budget.errors import InputNotJson

# A pretty-printed gate spans a few dozen lines; past these bounds a broken line is reported, not buffered.
MAX_OBJECT_LINES = 100_000
MAX_OBJECT_BYTES = 64 * 1024 * 1024
# RFC 8259 whitespace only: str.strip() would also drop U+00A0, U+0085, U+2028, U+001C ... which are not JSON.
_JSON_WHITESPACE = " \t\r\n"


@dataclass(frozen=True, slots=True)
class GateLine:
    """A gate read from the input: where it starts, its original text and its parse."""

    line: int
    text: str
    parsed: ParsedGate


@dataclass(frozen=True, slots=True)
class BadLine:
    """Input that is not JSON (or not UTF-8) at all, with the line it starts on."""

    line: int
    message: str


def read_gates(stream: Iterable[bytes]) -> Iterator[GateLine | BadLine]:
    """Yield every gate of `stream` in order, and a `BadLine` for each line that is not JSON.

    Linear in the input, however it breaks. A line that opens a value reads on only until a bracket tracker
    (`bracket_profile`, one pass over each line) says the value has closed, and the joined text is parsed then;
    a value that never closes is parsed once, to say where it breaks (unless it nests more than 32 levels: then
    it is not JSON in any case). A broken value ends where the parser says it breaks. The lines it read ahead
    are read again, but where a value opened on one of them closes is looked up in what the tracker saw
    (`_ReadAhead`), never scanned again; broken values inside broken values nest at most 32 deep (deeper ones
    are gates, malformed by rule 3.1.8, or never parsed), so no line is parsed more than 33 times over.
    """
    source = enumerate(stream, start=1)
    ahead = _ReadAhead([], None, 0)  # lines read ahead by a value that broke: read again before the stream goes on
    at = 0  # the next of them
    first = True
    skipping = False  # after a broken multi-line value: pass over its remaining inner lines

    while True:
        index: int | None = None
        if at < len(ahead.lines):
            index = at
            number, raw = ahead.lines[at]
            at += 1
        else:
            item = next(source, None)
            if item is None:
                return
            number, raw = item
        if skipping:
            if _continues_a_value(raw):
                continue
            skipping = False
        if first:
            raw = raw.removeprefix(b"\xef\xbb\xbf")  # tolerate a UTF-8 byte order mark at the very start
            first = False
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            yield BadLine(number, f"not valid UTF-8 (byte {error.start + 1} of the line)")
            continue
        text = text.strip(_JSON_WHITESPACE)
        if not text:
            continue
        try:
            yield GateLine(number, text, parse_gate_json(text))
            continue
        except InputNotJson as error:
            if not (error.incomplete and text[0] in "{["):
                yield BadLine(number, str(error))
                continue
            first_error = str(error)
        outcome, ahead, at, skipping = _broken_value(number, text, first_error, index, ahead, source)
        yield outcome


def _broken_value(
    number: int, text: str, first_error: str, index: int | None, ahead: _ReadAhead, source: Iterator[tuple[int, bytes]]
) -> tuple[GateLine | BadLine, _ReadAhead, int, bool]:
    """What a line that opens a value that breaks off comes to (its value closes on a later line, or never): the
    gate or bad line to yield, the lines read ahead, the next of them to read again, and whether the broken
    value's inner lines are to be passed over. `index` is the line's place among the lines read ahead, None for
    a line of the stream (then this reads ahead, tracking brackets)."""
    if index is None:
        ahead = _read_ahead(text, source)
        index, closes, deepest = -1, ahead.closing, ahead.deepest
    else:  # a line read again: where its value closes (or how deep it goes) is already known
        closes, deepest = ahead.close[index], ahead.deepest_from(index)
    outcome, last = _complete(number, text, ahead.lines, index, closes, deepest)
    if isinstance(outcome, GateLine):
        return outcome, ahead, last + 1, False
    # The broken value's own inner lines (indented, or only closing brackets) are not gates of their own; from
    # the first line that starts a new value at the margin on, lines are read again as usual. When such a line
    # follows, the opening line itself was the broken one (a cut-off JSON Lines record); otherwise the value is
    # one pretty-printed object, broken where the parser says.
    margin = ahead.margin[index + 1] if index + 1 < len(ahead.lines) else len(ahead.lines)
    if margin <= last:
        return BadLine(number, first_error), ahead, margin, False
    return outcome, ahead, last + 1, True


def _continues_a_value(raw: bytes) -> bool:
    stripped = raw.strip(b" \t\r\n")
    return not stripped or raw[:1] in (b" ", b"\t") or not stripped.strip(b"]},")


_NEVER_CLOSED = "not JSON: the value opened on this line is never closed"


def _complete(
    number: int, text: str, lines: list[tuple[int, bytes]], index: int, closes: int | None, deepest: int
) -> tuple[GateLine | BadLine, int]:
    """The value opened by `text` (on line `number`, `lines[index]` when it is one of them) and continued by the
    lines after it: a gate when it closes on `lines[closes]` and parses, else the error; and the index of the
    last line that belongs to it (for a broken value: where the parser stopped, or the last line read)."""
    end = closes if closes is not None else len(lines) - 1
    if closes is None and deepest > MAX_NESTING:  # never closes, and nested too deeply to parse: not JSON
        return BadLine(number, _NEVER_CLOSED), end
    parts = [text]
    for _, raw in lines[index + 1 : end + 1]:
        try:
            parts.append(raw.decode("utf-8").rstrip("\r\n"))
        except UnicodeDecodeError:  # only the last line read can be one: it ended the reading
            break
    joined = "\n".join(parts).strip(_JSON_WHITESPACE)
    try:
        parsed = parse_gate_json(joined)
    except InputNotJson as error:
        if closes is None and error.incomplete:
            return BadLine(number, _NEVER_CLOSED), end
        where = f"column {error.column}, in the value opened on line {number}"
        failure = BadLine(number + error.line - 1, f"not JSON: {located(error.reason, where)}")
        return failure, min(end, index + error.line - 1)
    return GateLine(number, joined, parsed), end


@dataclass(slots=True)
class _ReadAhead:
    """The lines an open value read ahead, and what the bracket tracker saw on them, in depths relative to the
    start of the line that opened the value.

    `closing`: the index of the line where that value closes, None if it does not. `deepest`: how many levels
    it nests. `close[i]`: where a value opened on line `i` closes, None when it does not among these lines (they
    end where the input ends, at a line that is not UTF-8, or at the bounds, which a value opened later among
    them is held to as well). `margin[i]`: the first line at or after `i` that does not continue a value.
    """

    lines: list[tuple[int, bytes]]
    closing: int | None
    deepest: int
    starts: list[int] = field(default_factory=list)  # depth at each line's start
    highest: list[int] = field(default_factory=list)  # highest depth from each line to the last
    close: list[int | None] = field(default_factory=list)
    margin: list[int] = field(default_factory=list)

    def deepest_from(self, index: int) -> int:
        """How many levels a value opened on line `index`, never closing, nests (to the last line read)."""
        return self.highest[index] - self.starts[index]


def _read_ahead(text: str, source: Iterator[tuple[int, bytes]]) -> _ReadAhead:
    """Read the lines after the opening line `text` until its value closes (by the bracket tracker), a line is
    not UTF-8, the input ends or the bounds are reached; each line is tracked once."""
    lines: list[tuple[int, bytes]] = []
    starts: list[int] = []
    lows: list[int] = []  # lowest depth right after a bracket on each line (NO_BRACKET: none)
    highs: list[int] = []  # highest depth on each line
    depth, _, deepest = bracket_profile(text)
    size = len(text)
    closing: int | None = None
    while len(lines) < MAX_OBJECT_LINES and size < MAX_OBJECT_BYTES:
        more = next(source, None)
        if more is None:
            break
        lines.append(more)
        starts.append(depth)
        try:
            part = more[1].decode("utf-8")
        except UnicodeDecodeError:
            lows.append(NO_BRACKET)
            highs.append(depth)
            break
        size += len(part)
        net, low, high = bracket_profile(part)
        lows.append(low if low == NO_BRACKET else depth + low)
        highs.append(depth + high)
        deepest = max(deepest, depth + high)
        if depth + low <= 0:
            closing = len(lines) - 1
            break
        depth += net
    highest = list(accumulate(reversed(highs), max))[::-1]
    return _ReadAhead(lines, closing, deepest, starts, highest, _closing_lines(starts, lows), _margins(lines))


def _closing_lines(starts: list[int], lows: list[int]) -> list[int | None]:
    """For each line i, the first later line j with lows[j] <= starts[i]: where a value opened on i closes.

    One backward pass over a stack of the lines that are lowest so far (their lows rise towards the top), with
    a binary search per line: O(n log n) for n lines, however they nest.
    """
    close: list[int | None] = [None] * len(starts)
    stack_lines: list[int] = []
    stack_lows: list[int] = []  # ascending from the bottom (the farthest, lowest) to the top (the nearest)
    for line in range(len(starts) - 1, -1, -1):
        found = bisect_right(stack_lows, starts[line]) - 1
        if found >= 0:
            close[line] = stack_lines[found]
        while stack_lows and stack_lows[-1] >= lows[line]:
            stack_lows.pop()
            stack_lines.pop()
        stack_lows.append(lows[line])
        stack_lines.append(line)
    return close


def _margins(lines: list[tuple[int, bytes]]) -> list[int]:
    """For each line, the first line at or after it that does not continue a value (len(lines) if none)."""
    margin = [len(lines)] * len(lines)
    after = len(lines)
    for index in range(len(lines) - 1, -1, -1):
        if not _continues_a_value(lines[index][1]):
            after = index
        margin[index] = after
    return margin
