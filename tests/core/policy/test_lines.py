"""Reading gates from a byte stream (spec section 7 INPUT): JSON Lines, blank lines, multi-line objects, bad lines."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from compute_budget import decide
from compute_budget.core.policy.lines import BadLine, GateLine, read_gates
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
    monkeypatch.setattr("compute_budget.core.policy.lines.MAX_OBJECT_LINES", 3)
    data = ("{\n" + "\n".join(['"k": 1,'] * 5) + f"\n{GATE}\n").encode()
    assert shape(read(data)) == [("bad", 1), ("bad", 2), ("bad", 3), ("bad", 4), ("bad", 5), ("bad", 6), ("gate", 7)]


class Work:
    """Counts the characters read_gates hands to the parser and to the bracket tracker."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.characters = 0
        from compute_budget.core.policy import lines as gate_lines

        parse, profile = gate_lines.parse_gate_json, gate_lines.bracket_profile

        def counted_parse(text: str) -> Any:
            self.characters += len(text)
            return parse(text)

        def counted_profile(line: str) -> tuple[int, int, int]:
            self.characters += len(line)
            return profile(line)

        monkeypatch.setattr(gate_lines, "parse_gate_json", counted_parse)
        monkeypatch.setattr(gate_lines, "bracket_profile", counted_profile, raising=False)


def test_twenty_thousand_opening_brackets_are_read_in_linear_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """20,000 lines of `{`: each is a cut-off record of its own (one error each, for the CLI to cap), and the
    reader never reads the lines after one again to find out."""
    work = Work(monkeypatch)
    data = b"{\n" * 20_000 + GATE.encode() + b"\n"
    items = read(data)
    assert shape(items) == [("bad", line) for line in range(1, 20_001)] + [("gate", 20_001)]
    assert work.characters <= 4 * len(data)


def test_unclosed_value_of_closing_lines_is_not_parsed_again_on_every_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """A value that never closes, whose lines all end in a bracket, is parsed no more than a few times over
    (it used to be parsed again at every line: minutes for a few megabytes)."""
    work = Work(monkeypatch)
    data = b'{"a": [[0]\n' + b"  , [1, 2, 3]\n" * 20_000
    items = read(data)
    assert shape(items) == [("bad", 1)]
    assert isinstance(items[0], BadLine)
    assert "never closed" in items[0].message
    assert work.characters <= 4 * len(data)


def test_typo_in_a_value_that_never_closes_is_reported_where_it_is() -> None:
    """A value that never closes is still parsed once: a typo in it is the error, at the typo's line."""
    items = read(b'{"a": [\n  [1, 2, 3]\n  [1, 2, 3]\n  [1, 2, 3]\n' + GATE.encode() + b"\n")
    assert shape(items) == [("bad", 3), ("gate", 5)]
    assert isinstance(items[0], BadLine)
    assert "Expecting ',' delimiter" in items[0].message


def test_broken_values_inside_broken_values_are_read_in_linear_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut-off records, each followed by a pretty-printed gate, many times over: every gate is still found, and
    no line is read again more than a bounded number of times."""
    work = Work(monkeypatch)
    pretty = json.dumps(make_gate(), indent=2)
    height = pretty.count("\n") + 1
    unit = f'{{"decision_id": \n{pretty}\n'
    data = ("{\n" + unit * 500).encode()
    items = read(data)
    expected = [("bad", 1)]
    for block in range(500):
        start = 2 + block * (height + 1)
        expected += [("bad", start), ("gate", start + 1)]
    assert shape(items) == expected
    assert work.characters <= 6 * len(data)


def test_value_opened_on_a_line_read_again_closes_where_the_tracker_saw() -> None:
    """After a cut-off record, a pretty-printed gate among the lines read again is one gate, numbered by its
    first line, and the one-line gate after it is read too."""
    pretty = json.dumps(make_gate(), indent=2)
    height = pretty.count("\n") + 1
    items = read(f'{{"decision_id": \n{pretty}\n{OTHER}\n'.encode())
    assert shape(items) == [("bad", 1), ("gate", 2), ("gate", 2 + height)]
    gate = items[1]
    assert isinstance(gate, GateLine)
    assert gate.parsed.value == make_gate()


def test_broken_value_among_lines_read_again_is_reported_where_it_breaks() -> None:
    """A pretty-printed gate with a typo, after a cut-off record: one error at the typo, and the rest read."""
    pretty = json.dumps(make_gate(), indent=2).splitlines()
    pretty[3] = pretty[3].rstrip(",")
    text = "\n".join(pretty)
    items = read(f'{{"decision_id": \n{text}\n{GATE}\n'.encode())
    assert shape(items) == [("bad", 1), ("bad", 6), ("gate", len(pretty) + 2)]


def test_line_that_is_not_utf8_ends_an_open_value() -> None:
    """A line that is not UTF-8 inside an open value: the value never closes, and that line is reported too."""
    items = read(b'{"decision_id": "x",\n\xff\n' + GATE.encode() + b"\n")
    assert shape(items) == [("bad", 1), ("bad", 2), ("gate", 3)]


def test_value_closed_on_a_line_that_opens_another_is_parsed_there() -> None:
    """The tracker closes a value on the first line where its depth returns to 0, even if that line goes on to
    open another value: the parser then says what is wrong."""
    items = read(b'{\n"a": 1}, {\n"b": 2}\n' + GATE.encode() + b"\n")
    assert shape(items) == [("bad", 1), ("bad", 2), ("bad", 3), ("gate", 4)]


def test_deep_multi_line_value_is_a_malformed_gate() -> None:
    """A value spread over lines and nested more than 32 levels deep is one gate, malformed (rule 3.1.8)."""
    data = b"[\n" * 5_000 + b"]\n" * 5_000
    items = read(data)
    assert shape(items) == [("gate", 1)]
    gate = items[0]
    assert isinstance(gate, GateLine)
    assert gate.parsed.too_deep
    assert decide(gate.parsed.value).gate_decision_id == ""


# -- spec 9.9.9: one JSON array, one gate per element -------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402  (the array reader's tests only)
from hypothesis import strategies as st  # noqa: E402

from compute_budget import InputNotJson, decide_json  # noqa: E402
from compute_budget.core.policy.json_array import read_array_gates  # noqa: E402
from compute_budget.core.policy.parse import decide_parsed  # noqa: E402


def blocks(data: bytes, size: int) -> list[bytes]:
    """`data` cut into blocks of `size` bytes, as a reader of any block size hands it over."""
    return [data[start : start + size] for start in range(0, len(data), size)] or [b""]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet=st.characters(codec="utf-8"), max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=10,
)
spacing = st.sampled_from(["", " ", "\n", "\r\n  ", "\t"])


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(json_values, max_size=6),
    indents=st.lists(st.sampled_from([None, 0, 2]), min_size=6, max_size=6),
    gaps=st.lists(spacing, min_size=14, max_size=14),
    size=st.integers(min_value=1, max_value=64),
)
def test_each_element_is_one_gate_with_its_exact_text(
    values: list[Any], indents: list[int | None], gaps: list[str], size: int
) -> None:
    """Whatever the layout and however the input is cut into blocks, the elements come out in order, numbered
    from 1, each with the exact text between its first and its last character (strings holding brackets, commas,
    quotes and backslashes included)."""
    texts = [json.dumps(value, indent=indents[index], ensure_ascii=False) for index, value in enumerate(values)]
    body = "".join(f"{gaps[2 * index]}{text}{gaps[2 * index + 1]}," for index, text in enumerate(texts))
    data = f"{gaps[-2]}[{body.removesuffix(',')}]{gaps[-1]}".encode()
    items = list(read_array_gates(blocks(data, size)))
    assert [item.line for item in items] == list(range(1, len(values) + 1))
    assert [item.text for item in items] == texts
    assert [item.parsed.value for item in items] == values


def test_depth_and_repeated_keys_are_judged_on_the_elements_text() -> None:
    """The array's own bracket is not a level: an element nesting 32 levels is well within rule 3.1.8, one of
    33 is too deep; a key repeated in an element's top-level object copies as "" (3.1.7), as in JSON Lines."""
    deep = "[" * 31 + "]" * 31
    gates = [
        json.dumps(make_gate(residual_ids=[])).replace("[]", deep, 1),
        json.dumps(make_gate(residual_ids=[])).replace("[]", "[" + deep + "]", 1),
        json.dumps(make_gate())[:-1] + ', "decision_id": "again"}',
    ]
    items = list(read_array_gates([("[" + ",".join(gates) + "]").encode()]))
    assert [item.parsed.too_deep for item in items] == [False, True, False]
    for item, text in zip(items, gates, strict=True):
        assert decide_parsed(item.parsed) == decide_json(text)
    assert decide_parsed(items[2].parsed).gate_decision_id == ""


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not a JSON array: the input is empty"),
        (b'{"a": 1}\n', "not a JSON array: the input starts with '{' on line 1"),
        (b"[1, 2", "the array is never closed"),
        (b'[1, "2', "never closed (the input ends inside a string"),
        (b"[1,]", "element 2 is missing"),
        (b"[1,,2]", "element 2 is missing"),
        (b"[1 2]", "element 1 (from line 1): not JSON"),
        (b'[1,\n {"a": tru}]', "element 2 (from line 2): not JSON"),
        (b"[1] [2]", "text after the array's closing bracket on line 1"),
        (b"[}]", "closes nothing"),
        (b"[\xff]", "element 1 (from line 1): not valid UTF-8"),
    ],
)
def test_input_that_is_not_one_json_array_is_refused_saying_where(data: bytes, message: str) -> None:
    """Input that is not exactly one JSON array: `InputNotJson`, with where it breaks."""
    with pytest.raises(InputNotJson, match=re.escape(message)):
        list(read_array_gates(blocks(data, 3)))


def test_an_empty_array_holds_no_gate_and_a_byte_order_mark_is_skipped() -> None:
    """`[]` is no gate at all; a UTF-8 byte order mark before the array is tolerated, as for JSON Lines."""
    assert list(read_array_gates([b" [ \n ] \n"])) == []
    assert [item.text for item in read_array_gates([b"\xef\xbb", b"\xbf[1]"])] == ["1"]


def test_the_array_is_read_as_it_streams() -> None:
    """The first gate comes out after the block that ends it, not after the whole input: memory holds a block
    and an element, never the array."""
    taken = 0

    def source() -> Iterator[bytes]:
        nonlocal taken
        yield b"[" + GATE.encode() + b","
        for _ in range(1000):
            taken += 1
            yield OTHER.encode() + b","
        yield b"1]"

    gates = read_array_gates(source())
    assert next(gates).text == GATE
    assert taken <= 1
    assert sum(1 for _ in gates) == 1001


def test_an_element_over_the_bound_is_reported_not_buffered(monkeypatch: pytest.MonkeyPatch) -> None:
    """An element longer than any gate (64 MiB; 100 bytes here) stops the reading with one clear error."""
    from compute_budget.core.policy import json_array

    monkeypatch.setattr(json_array, "MAX_ELEMENT_BYTES", 100)
    with pytest.raises(InputNotJson, match=r"element 2 .* is longer than"):
        list(read_array_gates(blocks(b'[1, "' + b"x" * 300 + b'"]', 10)))
