"""Gates from a byte stream: JSON Lines, one gate per non-blank line, or one object spread over lines.

Streams: one line (or one multi-line object) is held at a time, so input of any size is read in bounded
memory. Each gate is parsed once, here, and handed on with its original text for the store to keep.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from compute_budget.core.parse import ParsedGate, located, parse_gate_json
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
    """Yield every gate of `stream` in order, and a `BadLine` for each line that is not JSON."""
    pending: deque[tuple[int, bytes]] = deque()
    source = enumerate(stream, start=1)
    first = True
    skipping = False  # after a broken multi-line value: pass over its remaining inner lines

    def next_line() -> tuple[int, bytes] | None:
        if pending:
            return pending.popleft()
        return next(source, None)

    while (item := next_line()) is not None:
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
        # The line opens a value that breaks off: read on until it closes into one JSON value.
        completed, buffered, failure = _complete_object(number, text, next_line)
        if completed is not None:
            yield completed
            continue
        # The broken value's own inner lines (indented, or only closing brackets) are not gates of their own;
        # from the first line that starts a new value at the margin on, lines are read again as usual. When
        # such a line follows, the opening line itself was the broken one (a cut-off JSON Lines record);
        # otherwise the value is one pretty-printed object, broken where the parser says.
        while buffered and _continues_a_value(buffered[0][1]):
            buffered.pop(0)
        skipping = not buffered
        yield failure if failure is not None and skipping else BadLine(number, first_error)
        pending.extendleft(reversed(buffered))


def _continues_a_value(raw: bytes) -> bool:
    stripped = raw.strip(b" \t\r\n")
    return not stripped or raw[:1] in (b" ", b"\t") or not stripped.strip(b"]},")


def _complete_object(
    number: int, text: str, next_line: Callable[[], tuple[int, bytes] | None]
) -> tuple[GateLine | None, list[tuple[int, bytes]], BadLine | None]:
    """Join the lines after an opening line until they form one JSON value; else hand them all back, with
    the error where the value really breaks (None when it just never closes)."""
    buffered: list[tuple[int, bytes]] = []
    parts = [text]
    size = len(text)
    while len(buffered) < MAX_OBJECT_LINES and size < MAX_OBJECT_BYTES:
        more = next_line()
        if more is None:
            break
        buffered.append(more)
        try:
            part = more[1].decode("utf-8")
        except UnicodeDecodeError:
            break
        parts.append(part)
        size += len(part)
        if not part.rstrip().endswith(("}", "]")):
            continue  # a JSON value can only close on a closing bracket: no need to parse yet
        joined = "\n".join(line.rstrip("\r\n") for line in parts).strip(_JSON_WHITESPACE)
        try:
            parsed = parse_gate_json(joined)
        except InputNotJson as error:
            if error.incomplete:
                continue
            line = number + error.line - 1
            where = f"column {error.column}, in the value opened on line {number}"
            message = f"not JSON: {located(error.reason, where)}"
            return None, buffered, BadLine(line, message)
        return GateLine(number, joined, parsed), buffered, None
    return None, buffered, BadLine(number, "not JSON: the value opened on this line is never closed")
