"""Reading gates from a byte stream (spec section 7 INPUT): JSON Lines, blank lines, multi-line objects, bad lines."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest

from compute_budget import decide
from compute_budget.core.lines import BadLine, GateLine, read_gates
from tests.conftest import make_gate

GATE = json.dumps(make_gate())
OTHER = json.dumps(make_gate(decision_id="gate-0002", status="blocked"))


def read(data: bytes) -> list[GateLine | BadLine]:
    """Every item read_gates yields for `data`."""
    return list(read_gates(io.BytesIO(data)))


def shape(items: list[GateLine | BadLine]) -> list[tuple[str, int]]:
    """("gate" | "bad", line number) for each item, in order."""
    return [("gate" if isinstance(item, GateLine) else "bad", item.line) for item in items]


def test_one_gate_per_line() -> None:
    """Each line is one gate, numbered from 1, carrying its text and parsed value."""
    items = read(f"{GATE}\n{OTHER}\n".encode())
    assert shape(items) == [("gate", 1), ("gate", 2)]
    first = items[0]
    assert isinstance(first, GateLine)
    assert first.text == GATE
    assert first.parsed.value == make_gate()
    assert first.parsed.defect is None


def test_last_line_without_newline() -> None:
    """A final line with no newline is still read."""
    assert shape(read(f"{GATE}\n{OTHER}".encode())) == [("gate", 1), ("gate", 2)]


def test_blank_lines_are_skipped_but_counted() -> None:
    """Blank and whitespace-only lines yield nothing, and line numbers still count them."""
    assert shape(read(f"\n{GATE}\n\n  \t\n\r\n{OTHER}\n\n".encode())) == [("gate", 2), ("gate", 6)]


def test_crlf_line_endings() -> None:
    """CRLF line endings are read like LF."""
    items = read(f"{GATE}\r\n{OTHER}\r\n".encode())
    assert shape(items) == [("gate", 1), ("gate", 2)]
    assert isinstance(items[0], GateLine)
    assert items[0].text == GATE


def test_byte_order_mark_at_the_start_is_tolerated() -> None:
    """A UTF-8 byte order mark at the very start of the stream is ignored."""
    assert shape(read(b"\xef\xbb\xbf" + GATE.encode())) == [("gate", 1)]


def test_byte_order_mark_later_is_not_json() -> None:
    """A byte order mark at the start of a later line is not JSON."""
    assert shape(read(GATE.encode() + b"\n\xef\xbb\xbf" + GATE.encode())) == [("gate", 1), ("bad", 2)]


def test_pretty_printed_single_object() -> None:
    """One gate spread over several lines is one gate, numbered by its first line."""
    pretty = json.dumps(make_gate(), indent=2)
    items = read(pretty.encode() + b"\n")
    assert shape(items) == [("gate", 1)]
    item = items[0]
    assert isinstance(item, GateLine)
    assert item.parsed.value == make_gate()
    assert json.loads(item.text) == make_gate()


def test_pretty_printed_objects_mixed_with_lines() -> None:
    """Multi-line objects, single-line gates and blank lines mix, each numbered by where it starts."""
    pretty = json.dumps(make_gate(), indent=4)
    height = pretty.count("\n") + 1
    data = f"{GATE}\n\n{pretty}\n{OTHER}\n{pretty}\n".encode()
    assert shape(read(data)) == [("gate", 1), ("gate", 3), ("gate", 3 + height), ("gate", 4 + height)]


def test_non_json_line_is_reported_and_the_rest_read() -> None:
    """A line that is not JSON becomes a BadLine with its number; the lines around it are still read."""
    items = read(f"{GATE}\nthis is not json\n{OTHER}\n".encode())
    assert shape(items) == [("gate", 1), ("bad", 2), ("gate", 3)]
    bad = items[1]
    assert isinstance(bad, BadLine)
    assert "not JSON" in bad.message
    assert "\n" not in bad.message


def test_invalid_utf8_line_is_reported() -> None:
    """A line that is not UTF-8 becomes a BadLine saying so; the others are read."""
    items = read(GATE.encode() + b"\n\xff\xfe garbage\n" + OTHER.encode())
    assert shape(items) == [("gate", 1), ("bad", 2), ("gate", 3)]
    bad = items[1]
    assert isinstance(bad, BadLine)
    assert "UTF-8" in bad.message


def test_utf8_inside_a_line_is_fine() -> None:
    """Multi-byte UTF-8 (astral, combining, U+2028) inside a line is read as text."""
    text = json.dumps(make_gate(decision_id="\U0001f600e\u0301\u2028"), ensure_ascii=False)
    items = read(text.encode("utf-8") + b"\n")
    assert shape(items) == [("gate", 1)]
    item = items[0]
    assert isinstance(item, GateLine)
    assert item.parsed.value["decision_id"] == "\U0001f600e\u0301\u2028"


@pytest.mark.parametrize(
    "prefix",
    [
        pytest.param("\u00a0", id="no-break-space"),
        pytest.param("\u0085", id="next-line"),
        pytest.param("\u2028", id="line-separator"),
        pytest.param("\x1c", id="file-separator"),
        pytest.param("\x0b", id="vertical-tab"),
        pytest.param("\x0c", id="form-feed"),
    ],
)
def test_non_json_whitespace_is_not_stripped(prefix: str) -> None:
    """Only RFC 8259 whitespace surrounds a gate: other Unicode spaces make the line not JSON."""
    items = read(f"{prefix}{GATE}\n{prefix}\n{GATE}{prefix}\n".encode())
    assert shape(items) == [("bad", 1), ("bad", 2), ("bad", 3)]


def test_broken_multi_line_object_is_one_bad_start_and_the_rest_reread() -> None:
    """An object that never closes is reported at its first line, and the lines after it are read again."""
    data = f'{{"decision_id": "x",\n{GATE}\n{OTHER}\n'.encode()
    assert shape(read(data)) == [("bad", 1), ("gate", 2), ("gate", 3)]


def test_object_cut_off_at_end_of_input() -> None:
    """An object still open at the end of the input is one BadLine at its first line; its inner lines are not
    reported again."""
    items = read(f'{GATE}\n{{\n  "decision_id": "x",\n'.encode())
    assert shape(items) == [("gate", 1), ("bad", 2)]
    assert isinstance(items[1], BadLine)
    assert "never closed" in items[1].message


def test_typo_in_a_pretty_printed_gate_is_one_error_where_it_is() -> None:
    """A missing comma on line 5 of a pretty-printed gate: one BadLine at line 5, no decisions for its pieces,
    and the gate after it still decided."""
    pretty = json.dumps(json.loads(GATE), indent=2).splitlines()
    pretty[3] = pretty[3].rstrip(",")
    items = read(("\n".join(pretty) + "\n" + GATE + "\n").encode())
    assert shape(items) == [("bad", 5), ("gate", len(pretty) + 1)]


def test_cut_off_record_in_json_lines_does_not_swallow_the_next() -> None:
    """A JSON Lines record cut short is reported at its own line; the records after it are still read."""
    items = read(f'{{"decision_id": \n{GATE}\n{GATE}\n'.encode())
    assert shape(items) == [("bad", 1), ("gate", 2), ("gate", 3)]


def test_json_that_is_not_a_gate_is_still_a_gate_line() -> None:
    """JSON values that are not gates (arrays, numbers, duplicate keys) are GateLines, decided as malformed."""
    dup = GATE.replace('"status"', '"status": "eligible", "status"', 1)
    items = read(f"[]\n42\n{dup}\n".encode())
    assert shape(items) == [("gate", 1), ("gate", 2), ("gate", 3)]
    last = items[2]
    assert isinstance(last, GateLine)
    assert last.parsed.defect is not None


def test_decisions_from_lines_match_decide() -> None:
    """The parsed value of every GateLine decides like the gate it came from."""
    for item in read(f"{GATE}\n{OTHER}\n".encode()):
        assert isinstance(item, GateLine)
        assert decide(item.parsed.value) == decide(json.loads(item.text))


class CountingLines:
    """An endless line source that counts how many lines have been taken from it."""

    def __init__(self) -> None:
        self.taken = 0

    def __iter__(self) -> Iterator[bytes]:
        while True:
            self.taken += 1
            yield GATE.encode() + b"\n"


def test_reading_streams() -> None:
    """read_gates yields each gate as soon as its line is read: it never reads the input ahead."""
    source = CountingLines()
    gates = read_gates(source)
    for expected in range(1, 4):
        item = next(gates)
        assert isinstance(item, GateLine)
        assert item.line == expected
        assert source.taken == expected


def test_unclosed_object_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """An opening line is not buffered past MAX_OBJECT_LINES: it is reported and the buffered lines re-read."""
    monkeypatch.setattr("compute_budget.core.lines.MAX_OBJECT_LINES", 3)
    data = ("{\n" + "\n".join(['"k": 1,'] * 5) + f"\n{GATE}\n").encode()
    assert shape(read(data)) == [("bad", 1), ("bad", 2), ("bad", 3), ("bad", 4), ("bad", 5), ("bad", 6), ("gate", 7)]
