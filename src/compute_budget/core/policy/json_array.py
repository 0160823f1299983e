"""Gates from one JSON array (spec 9.9.9, `--input-format json-array`): each element is one gate, in order.

The input comes in blocks of any size and any split (a compact array is often one line of hundreds of
megabytes), and only the element being read is held, never the whole array: memory is one block plus one
element. Each element's `gate_input` is the exact text of the input from its first to its last character, so
its depth (3.1.8) and repeated keys (3.1.7) are judged on that text, as for a line of JSON Lines; its `line` is
its 1-based element number. Finding where an element ends needs only its brackets and strings, tracked with
counters (no recursion), so an element nested however deeply is split in linear time and then judged by the
same reader as any gate text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from compute_budget.core.policy.lines import GateLine
from compute_budget.core.policy.parse import parse_gate_json
from compute_budget.errors import InputNotJson

# No gate is anywhere near this long; past it the element is reported, not buffered.
MAX_ELEMENT_BYTES = 64 * 1024 * 1024
_WHITESPACE = b" \t\r\n"  # RFC 8259's four, and no others
_BOM = b"\xef\xbb\xbf"
# A run of strings and of bytes that neither open a string nor are brackets; at an element's own level a comma
# ends the element, so the run stops there too. A string cut off by the block's end stops the run at its quote.
# Possessive quantifiers throughout: a run never backtracks, so every match is linear in what it reads.
_STRING = rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
_RUN_NESTED = re.compile(rb'(?:[^\[\]{}"]++|' + _STRING + rb")*+", re.DOTALL)
_RUN_TOP = re.compile(rb'(?:[^\[\]{},"]++|' + _STRING + rb")*+", re.DOTALL)
# The rest of a string opened in an earlier block: up to its closing quote, or to a backslash that ends a block.
_STRING_REST = re.compile(rb'[^"\\]*+(?:\\.[^"\\]*+)*+', re.DOTALL)


def _nested(levels: int) -> bytes:
    """A run that may hold bracketed values nesting up to `levels` deep (brackets matched by count, as below)."""
    inner = rb'(?:[^\[\]{}"]++|' + _STRING + rb")*+"
    for _ in range(levels - 1):
        inner = rb'(?:[^\[\]{}"]++|' + _STRING + rb"|[\[{]" + inner + rb"[\]}])*+"
    return rb'(?:[^\[\]{},"]++|' + _STRING + rb"|[\[{]" + inner + rb"[\]}])*+"


# The fast way over a whole element nesting at most 4 levels (a gate nests 3): one match from the element's
# level to the comma or bracket that ends it. Deeper elements, and those a block cuts off, take the slow way,
# a bracket at a time, from the same place.
_ELEMENT = re.compile(_nested(4), re.DOTALL)
_OPEN, _CLOSE_ARRAY, _CLOSE_OBJECT, _COMMA, _QUOTE = ord("["), ord("]"), ord("}"), ord(","), ord('"')


def read_array_gates(blocks: Iterable[bytes]) -> Iterator[GateLine]:
    """Yield each element of the one JSON array in `blocks` as a `GateLine` numbered from 1.

    Raises `InputNotJson` (its message says where) when the input is not one JSON array: empty, another value,
    an element that is not JSON, a missing comma, text after the closing bracket, or an array never closed.
    """
    splitter = _Splitter()
    for block in blocks:
        for number, line, raw in splitter.feed(block):
            yield _gate(number, line, raw)
    splitter.finish()


def _gate(number: int, line: int, raw: bytes) -> GateLine:
    """Element `number` (starting on input line `line`) as a gate, or `InputNotJson` saying where it breaks."""
    where = f"element {number} (from line {line})"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputNotJson(f"{where}: not valid UTF-8 (byte {error.start + 1} of the element)") from None
    try:
        return GateLine(number, text, parse_gate_json(text))
    except InputNotJson as error:
        raise InputNotJson(f"{where}: {error}") from None


def _run_end(pattern: re.Pattern[bytes], block: bytes, pos: int) -> int:
    """Where a run of `pattern` (which matches the empty string) from `pos` ends."""
    match = pattern.match(block, pos)
    return pos if match is None else match.end()


class _Splitter:
    """Where the elements of one JSON array begin and end, a block at a time.

    State between blocks: whether the array has opened or closed, the element being read (its bytes so far),
    how deep it is, and whether the block ended inside a string or right after a backslash in one.
    """

    def __init__(self) -> None:
        self.started = False  # the opening bracket was read
        self.closed = False  # the closing bracket was read
        self.first = True  # the next block is the input's first (it may start with a byte order mark)
        self.pending = b""  # the first bytes, while they may still be a byte order mark
        self.parts: list[bytes] = []  # the current element's bytes from earlier blocks
        self.size = 0
        self.depth = 0
        self.in_string = False
        self.escaped = False  # the last block ended with a backslash inside a string
        self.number = 0  # elements finished so far
        self.line = 1  # the input line at `counted` of the current block
        self.counted = 0
        self.element_line = 1  # where the current element starts

    def feed(self, block: bytes) -> list[tuple[int, int, bytes]]:
        """The elements that end in `block`: (number, first line, exact text)."""
        if self.first:  # a byte order mark, which a block may cut, is tolerated at the very start
            block, self.pending = self.pending + block, b""
            if len(block) < len(_BOM) and _BOM.startswith(block):
                self.pending = block
                return []
            block = block.removeprefix(_BOM)
            self.first = False
        self.counted = 0
        pos = 0
        if not self.started:
            pos = self._open(block)
            if not self.started:
                self.line += block.count(b"\n")
                return []
        done: list[tuple[int, int, bytes]] = []
        start = pos  # where the current element's bytes begin in this block
        while pos < len(block) and not self.closed:
            pos, end = self._scan(block, pos)
            if end is None:
                continue
            done.extend(self._element(block, start, pos))
            pos += 1
            start = pos
            if end == _CLOSE_ARRAY:
                self.closed = True
        if self.closed:
            self._after(block, pos)
        else:
            self._keep(block[start:])
        self.line += block.count(b"\n", self.counted)
        return done

    def finish(self) -> None:
        """The input ended: it must have held one whole array."""
        if self.pending:
            self._open(self.pending)  # part of a byte order mark and nothing else: not an array
        if not self.started:
            raise InputNotJson("not a JSON array: the input is empty")
        if not self.closed:
            at = "inside a string" if self.in_string else f"after {self.number} elements"
            raise InputNotJson(f"not JSON: the array is never closed (the input ends {at}, line {self.line})")

    def _open(self, block: bytes) -> int:
        """Skip the whitespace before the array; past its opening bracket, return where its first element begins."""
        stripped = block.lstrip(_WHITESPACE)
        if not stripped:
            return len(block)
        pos = len(block) - len(stripped)
        if stripped[0] != _OPEN:
            line = self.line + block.count(b"\n", 0, pos)
            shown = chr(stripped[0]) if 0x21 <= stripped[0] < 0x7F else f"byte 0x{stripped[0]:02x}"
            raise InputNotJson(f"not a JSON array: the input starts with {shown!r} on line {line}, not with '['")
        self.started = True
        self.element_line = self._line_at(block, pos)
        return pos + 1

    def _scan(self, block: bytes, pos: int) -> tuple[int, int | None]:
        """Read on from `pos` to the next bracket or element-ending comma. Returns where it stands and, when an
        element ends there, the byte that ends it (a comma or the array's closing bracket)."""
        if self.escaped:  # the backslash ended the last block: this byte is the one it escapes
            self.escaped = False
            return pos + 1, None
        if self.depth == 0 and not self.in_string:
            end = _run_end(_ELEMENT, block, pos)
            if end < len(block) and block[end] in (_COMMA, _CLOSE_ARRAY):
                return end, block[end]
        if self.in_string:
            pos = _run_end(_STRING_REST, block, pos)
            if pos >= len(block):
                return pos, None
            if block[pos] != _QUOTE:  # a backslash, the block's last byte
                self.escaped = True
                return pos + 1, None
            self.in_string = False
            return pos + 1, None
        pos = _run_end(_RUN_TOP if self.depth == 0 else _RUN_NESTED, block, pos)
        if pos >= len(block):
            return pos, None
        byte = block[pos]
        if byte == _QUOTE:  # a string the block cuts off
            self.in_string = True
            return pos + 1, None
        if byte == _COMMA:  # only at the element's own level: the run takes nested commas
            return pos, _COMMA
        if byte in (_OPEN, ord("{")):
            self.depth += 1
            return pos + 1, None
        if self.depth > 0:
            self.depth -= 1
            return pos + 1, None
        if byte == _CLOSE_OBJECT:
            line = self._line_at(block, pos)
            raise InputNotJson(f"not JSON: a '}}' on line {line} closes nothing (in element {self.number + 1})")
        return pos, _CLOSE_ARRAY

    def _element(self, block: bytes, start: int, end: int) -> list[tuple[int, int, bytes]]:
        """The element whose bytes run from `start` (after earlier blocks' parts) to `end`, stripped of the
        whitespace around it; none for the empty array, and an error for a missing value."""
        region = b"".join([*self.parts, block[start:end]])
        raw = region.strip(_WHITESPACE)
        line = self.element_line + region.count(b"\n", 0, len(region) - len(region.lstrip(_WHITESPACE)))
        self.parts, self.size = [], 0
        self.element_line = self._line_at(block, end + 1)  # the next element's region starts after the comma
        if raw:
            self.number += 1
            return [(self.number, line, raw)]
        if block[end] == _CLOSE_ARRAY and self.number == 0:  # `[]`: no gates at all
            return []
        raise InputNotJson(f"not JSON: element {self.number + 1} is missing (an extra comma on line {line}?)")

    def _keep(self, part: bytes) -> None:
        """Hold the current element's bytes of this block until a later block ends it."""
        self.size += len(part)
        if self.size > MAX_ELEMENT_BYTES:
            raise InputNotJson(
                f"element {self.number + 1} (from line {self.element_line}) is longer than "
                f"{MAX_ELEMENT_BYTES >> 20} MiB, which no gate is"
            )
        self.parts.append(part)

    def _after(self, block: bytes, pos: int) -> None:
        """After the closing bracket only whitespace may follow."""
        rest = block[pos:].lstrip(_WHITESPACE)
        if rest:
            line = self._line_at(block, len(block) - len(rest))
            raise InputNotJson(f"not JSON: text after the array's closing bracket on line {line}")

    def _line_at(self, block: bytes, pos: int) -> int:
        """The input line of `block[pos]`: counted on from the last position asked, so linear overall."""
        if pos > self.counted:
            self.line += block.count(b"\n", self.counted, pos)
            self.counted = pos
        return self.line
