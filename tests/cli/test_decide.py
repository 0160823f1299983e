"""`compute-budget decide [INPUT]` (spec section 7): JSON Lines in, one decision line out per gate, clear errors."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compute_budget import decide
from tests.conftest import REPO_ROOT, make_gate

RunCli = Callable[..., tuple[int, str, str]]
GATE = json.dumps(make_gate())
BLOCKED = json.dumps(make_gate(decision_id="gate-0002", status="blocked"))
MAIN = "from compute_budget.cli import main; main()"


def decisions(out: str) -> list[dict[str, Any]]:
    """The decision objects printed on stdout, one per line (split on newline only, as JSON Lines are)."""
    lines = out.split("\n")
    assert lines.pop() == "", "output must end with a newline"
    return [json.loads(line) for line in lines]


def expected(*gates: str) -> list[dict[str, Any]]:
    """The decisions `decide` gives for gate texts."""
    return [decide(json.loads(text)).to_dict() for text in gates]


def write(tmp_path: Path, data: bytes | str, name: str = "gates.jsonl") -> str:
    """Write INPUT data to a file and return its path."""
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return str(path)


def feed_stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    """Make `data` the process's standard input for an in-process run."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def assert_one_clear_line(err: str) -> None:
    """stderr is exactly one line, from the program, with no traceback."""
    assert "Traceback" not in err
    assert err.count("\n") == 1
    assert err.endswith("\n")
    assert err.startswith("compute-budget: ")


def test_file_input(tmp_path: Path, run_cli: RunCli) -> None:
    """A file of gates gives one decision line per gate, in order, and exit 0."""
    status, out, err = run_cli("decide", write(tmp_path, f"{GATE}\n{BLOCKED}\n"))
    assert (status, err) == (0, "")
    assert decisions(out) == expected(GATE, BLOCKED)


def test_bundled_examples(run_cli: RunCli) -> None:
    """The bundled examples/gates.jsonl decides line by line like decide() on each gate."""
    path = REPO_ROOT / "examples" / "gates.jsonl"
    status, out, err = run_cli("decide", str(path))
    assert (status, err) == (0, "")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert decisions(out) == expected(*lines)
    assert [item["status"] for item in decisions(out)].count("budget_allowed") == 4


def test_each_decision_is_one_compact_line(tmp_path: Path, run_cli: RunCli) -> None:
    """Each decision is printed as one compact JSON object with the fourteen keys in record order."""
    gate = json.dumps(make_gate(decision_id="a\u2028b\nc"), ensure_ascii=False)
    status, out, _ = run_cli("decide", write(tmp_path, gate + "\n"))
    assert status == 0
    assert out.count("\n") == 1
    (decision,) = decisions(out)
    assert next(iter(decision)) == "budget_id"
    assert list(decision)[-1] == "explanation"
    assert len(decision) == 14
    assert decision["gate_decision_id"] == "a\u2028b\nc"


@pytest.mark.parametrize("args", [("decide",), ("decide", "-")])
def test_stdin_input(monkeypatch: pytest.MonkeyPatch, run_cli: RunCli, args: tuple[str, ...]) -> None:
    """With no INPUT or '-', gates are read from standard input."""
    feed_stdin(monkeypatch, f"{GATE}\n{BLOCKED}\n".encode())
    status, out, err = run_cli(*args)
    assert (status, err) == (0, "")
    assert decisions(out) == expected(GATE, BLOCKED)


def test_empty_input(tmp_path: Path, run_cli: RunCli) -> None:
    """An empty input prints nothing and exits 0."""
    assert run_cli("decide", write(tmp_path, b"")) == (0, "", "")


def test_pretty_printed_single_object(tmp_path: Path, run_cli: RunCli) -> None:
    """One gate pretty-printed over many lines is one gate and one decision."""
    status, out, err = run_cli("decide", write(tmp_path, json.dumps(make_gate(), indent=2) + "\n"))
    assert (status, err) == (0, "")
    assert decisions(out) == expected(GATE)


def test_blank_lines_are_skipped(tmp_path: Path, run_cli: RunCli) -> None:
    """Blank and whitespace-only lines produce no output and no error."""
    status, out, err = run_cli("decide", write(tmp_path, f"\n\n{GATE}\n   \n\t\r\n{BLOCKED}\n\n"))
    assert (status, err) == (0, "")
    assert decisions(out) == expected(GATE, BLOCKED)


def test_json_that_is_not_a_gate_is_decided(tmp_path: Path, run_cli: RunCli) -> None:
    """A JSON line that is not a gate (array, duplicate key) is decided as malformed; exit stays 0."""
    duplicate = GATE.replace('"status"', '"status": "eligible", "status"', 1)
    status, out, err = run_cli("decide", write(tmp_path, f"[]\n{duplicate}\n"))
    assert (status, err) == (0, "")
    assert [item["reason_code"] for item in decisions(out)] == ["malformed_gate_decision"] * 2


def test_non_json_line(tmp_path: Path, run_cli: RunCli) -> None:
    """A line that is not JSON exits 2, is reported once on stderr with its number, and the others are decided."""
    status, out, err = run_cli("decide", write(tmp_path, f"{GATE}\nnot json at all\n{BLOCKED}\n"))
    assert status == 2
    assert decisions(out) == expected(GATE, BLOCKED)
    assert_one_clear_line(err)
    assert "line 2" in err
    assert "not JSON" in err


def test_non_json_lines_on_stdin_are_numbered(monkeypatch: pytest.MonkeyPatch, run_cli: RunCli) -> None:
    """Each bad line on stdin gets its own stderr line naming stdin and its line number (blank lines counted)."""
    feed_stdin(monkeypatch, f"{GATE}\n\n{{oops\n{BLOCKED}\nNaN\n".encode())
    status, out, err = run_cli("decide")
    assert status == 2
    assert decisions(out) == expected(GATE, BLOCKED)
    assert err.splitlines() == [line for line in err.splitlines() if line.startswith("compute-budget: stdin line ")]
    assert [line.split(":")[1] for line in err.splitlines()] == [" stdin line 3", " stdin line 5"]
    assert "Traceback" not in err


def test_invalid_utf8(tmp_path: Path, run_cli: RunCli) -> None:
    """A line that is not UTF-8 exits 2 with one stderr line naming it; the other lines are still decided."""
    data = GATE.encode() + b"\n" + b'{"decision_id": "\xff\xfe"}\n' + BLOCKED.encode() + b"\n"
    status, out, err = run_cli("decide", write(tmp_path, data))
    assert status == 2
    assert decisions(out) == expected(GATE, BLOCKED)
    assert_one_clear_line(err)
    assert "line 2" in err
    assert "UTF-8" in err


def test_missing_file(tmp_path: Path, run_cli: RunCli) -> None:
    """A missing INPUT exits 2 with one line naming the file, and prints no decisions."""
    missing = str(tmp_path / "nope.jsonl")
    status, out, err = run_cli("decide", missing)
    assert (status, out) == (2, "")
    assert_one_clear_line(err)
    assert "nope.jsonl" in err
    assert "does not exist" in err


def test_directory_as_input(tmp_path: Path, run_cli: RunCli) -> None:
    """A folder given as INPUT exits 2 with one line saying it is a folder."""
    status, out, err = run_cli("decide", str(tmp_path))
    assert (status, out) == (2, "")
    assert_one_clear_line(err)
    assert "folder" in err


def test_unreadable_file(tmp_path: Path, run_cli: RunCli) -> None:
    """A file that cannot be read exits 2 with one line naming it (as root, whom permissions do not stop, a
    file that opens but fails to read: /proc/self/mem)."""
    if os.geteuid() == 0:
        path = "/proc/self/mem"
    else:  # pragma: no cover  (CI runs as root)
        path = write(tmp_path, GATE)
        os.chmod(path, 0)
    status, out, err = run_cli("decide", path)
    assert (status, out) == (2, "")
    assert_one_clear_line(err)
    assert path in err


def test_extra_argument_is_a_usage_error(tmp_path: Path, run_cli: RunCli) -> None:
    """Two INPUTs is a usage error: exit 2, one line, no decisions."""
    path = write(tmp_path, GATE)
    status, out, err = run_cli("decide", path, path)
    assert (status, out) == (2, "")
    assert_one_clear_line(err)


def test_bad_line_message_stays_one_line_for_odd_file_names(tmp_path: Path, run_cli: RunCli) -> None:
    """A bad-line report is one line even when the INPUT file name holds a newline."""
    status, _, err = run_cli("decide", write(tmp_path, "nope\n", name="two\nlines.jsonl"))
    assert status == 2
    assert_one_clear_line(err)


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS file names must be UTF-8")
def test_bad_line_message_for_a_non_utf8_file_name(tmp_path: Path, run_cli: RunCli) -> None:
    """A bad-line report names a non-UTF-8 file name readably instead of failing to print it."""
    path = os.fsdecode(os.fsencode(str(tmp_path)) + b"/gates-\xff.jsonl")
    Path(path).write_bytes(b"nope\n")
    status, _, err = run_cli("decide", path)
    assert status == 2
    assert_one_clear_line(err)


@pytest.mark.slow
def test_no_traceback_in_a_real_process(tmp_path: Path) -> None:
    """Run as a real process, every bad input gives its exit status and one stderr line, never a traceback."""
    good = write(tmp_path, f"{GATE}\n", name="good.jsonl")
    cases: list[tuple[list[str], bytes, int]] = [
        ([good], b"", 0),
        ([write(tmp_path, b"\xff\n" + GATE.encode() + b"\n", name="utf8.jsonl")], b"", 2),
        ([write(tmp_path, b"{\n", name="cut.jsonl")], b"", 2),
        ([str(tmp_path / "missing.jsonl")], b"", 2),
        ([str(tmp_path)], b"", 2),
        (["-"], b"nope\n" + GATE.encode() + b"\n", 2),
        ([], b"[" * 100_000 + b"]" * 100_000 + b"\n", 0),  # JSON nested too deeply for a gate: malformed
    ]
    env = dict(os.environ, PYTHONIOENCODING="utf-8")
    for args, stdin, status in cases:
        done = subprocess.run(
            [sys.executable, "-c", MAIN, "decide", *args], input=stdin, capture_output=True, env=env, timeout=60,
            check=False,
        )
        err = done.stderr.decode("utf-8", "backslashreplace")
        assert done.returncode == status, (args, err)
        assert "Traceback" not in err, (args, err)
        assert err.count("\n") == (0 if status == 0 else 1), (args, err)


@pytest.mark.parametrize(("bad", "said"), [(20, 20), (21, 20), (25, 20), (3, 3)])
def test_bad_lines_are_reported_up_to_twenty_then_counted(
    tmp_path: Path, run_cli: RunCli, bad: int, said: int
) -> None:
    """At most 20 bad lines are reported one by one, then one line counts the rest; every gate is still decided
    and the exit status is 2."""
    status, out, err = run_cli("decide", write(tmp_path, f"{GATE}\n" + "nope\n" * bad + f"{BLOCKED}\n"))
    assert status == 2
    assert decisions(out) == expected(GATE, BLOCKED)
    lines = err.splitlines()
    assert [line for line in lines if "…" not in line] == [
        f"compute-budget: {tmp_path / 'gates.jsonl'} line {number}: not JSON: Expecting value (column 1)"
        for number in range(2, 2 + said)
    ]
    rest = [line for line in lines if "…" in line]
    if bad == said:
        assert rest == []
    else:
        more = bad - said
        noun = "line that is" if more == 1 else "lines that are"
        assert rest == [f"compute-budget: {tmp_path / 'gates.jsonl'}: … and {more} more {noun} not JSON"]


def test_twenty_thousand_unclosed_lines_give_twenty_one_error_lines(tmp_path: Path, run_cli: RunCli) -> None:
    """20,000 lines of `{` (each a cut-off record): 20 reported, one line for the other 19,980, exit 2."""
    status, out, err = run_cli("decide", write(tmp_path, "{\n" * 20_000 + f"{GATE}\n"))
    assert status == 2
    assert decisions(out) == expected(GATE)
    lines = err.splitlines()
    assert len(lines) == 21
    assert lines[0].endswith("line 1: not JSON: Expecting property name enclosed in double quotes (column 2)")
    assert lines[-1].endswith(": … and 19980 more lines that are not JSON")


# -- spec 9.9.9: --input-format json-array ---------------------------------------------------------------------------


def test_a_json_array_is_decided_one_element_at_a_time(
    tmp_path: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --input-format json-array each element is one gate, decided in order (an element that is no gate is
    one malformed gate), from a file or stdin; without the flag the same input stays one malformed gate."""
    elements = [make_gate(), make_gate(decision_id="gate-0002", status="blocked"), [1]]
    data = json.dumps(elements, indent=2)
    path = write(tmp_path, data, "gates.json")
    status, out, err = run_cli("decide", "--input-format", "json-array", path)
    assert (status, err) == (0, "")
    assert decisions(out) == [decide(element).to_dict() for element in elements]
    feed_stdin(monkeypatch, data.encode())
    assert run_cli("decide", "--input-format", "json-array") == (0, out, "")
    status, out, err = run_cli("decide", path)
    assert (status, err) == (0, "")
    assert [item["reason_code"] for item in decisions(out)] == ["malformed_gate_decision"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (f"[{GATE},\n{BLOCKED}\n", "the array is never closed"),
        (f"{GATE}\n{BLOCKED}\n", "not a JSON array: the input starts with '{' on line 1"),
        (f"[{GATE}, nope]", "element 2 (from line 1): not JSON"),
    ],
    ids=["never-closed", "json-lines", "broken-element"],
)
def test_input_that_is_not_one_json_array_prints_no_decision(
    tmp_path: Path, run_cli: RunCli, data: str, message: str
) -> None:
    """With the flag, input that is not one JSON array: exit 2, one line naming INPUT and where, and no
    decision printed (not even those of the elements before the break)."""
    path = write(tmp_path, data, "gates.json")
    status, out, err = run_cli("decide", "--input-format", "json-array", path)
    assert (status, out) == (2, "")
    assert_one_clear_line(err)
    assert f"{path}: " in err
    assert message in err
    assert "no decision was printed" in err
