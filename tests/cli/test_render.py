"""What reaches a terminal or a CI system is safe whatever a gate or a tampered row holds."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.backends import tamper
from tests.conftest import gate_lines, make_gate

Run = Callable[..., tuple[int, str, str]]
CONTROLS = "".join(chr(code) for code in [*range(0x20), 0x7F, *range(0x80, 0xA0)])
HOSTILE = "\r\u009b\u0085\u202e\u2028\x1b[2J\x1b]8;;http://x\x07[red]markup[/red]"


def _unsafe(text: str) -> list[str]:
    """Characters a terminal would act on, left in `text` (a line break between lines is fine)."""
    return sorted({repr(char) for char in text if not char.isprintable() and char != "\n"})


@pytest.fixture
def hostile_store(run_cli: Run, db_path: Path, tmp_path: Path) -> tuple[Path, str]:
    """A store whose gate carries hostile text in its id, then a row tampered to hold every control character."""
    gates = tmp_path / "gates.jsonl"
    gate = make_gate(decision_id="gate" + HOSTILE, evidence_spans=[{"text": HOSTILE, "start": 0, "end": 1,
                                                                     "sentence_index": 0}])
    gates.write_text(json.dumps(gate) + "\n" + json.dumps(make_gate(decision_id="plain")) + "\n", encoding="utf-8")
    assert run_cli("record", str(gates), "--db", str(db_path))[0] == 0
    _, out, _ = run_cli("list", "--db", str(db_path), "--format", "jsonl")
    budget_id = json.loads(out.split("\n")[0])["budget_id"]  # not splitlines: U+2028 is a line break there
    tamper(
        db_path,
        ("UPDATE compute_budget_decisions SET explanation = :why, reason_code = :code WHERE seq = 2",
         {"why": CONTROLS + HOSTILE, "code": CONTROLS}),
    )
    return db_path, budget_id


def test_show_escapes_every_gate_supplied_string(run_cli: Run, hostile_store: tuple[Path, str]) -> None:
    """`show` prints the gate input, the evidence and the ids with every control character escaped."""
    db_path, budget_id = hostile_store
    status, out, _ = run_cli("show", budget_id, "--db", str(db_path))
    assert status == 0
    assert _unsafe(out) == []
    assert "\\u202e" in out or "\\u202E" in out


def test_list_shows_markup_as_text_and_escapes_controls(run_cli: Run, hostile_store: tuple[Path, str]) -> None:
    """`list` escapes a tampered row's controls and shows Rich markup as typed."""
    db_path, _ = hostile_store
    status, out, _ = run_cli("list", "--db", str(db_path))
    assert status == 0
    assert _unsafe(out) == []
    assert "[red]markup[/red]" in out


def test_audit_text_escapes_finding_details(run_cli: Run, hostile_store: tuple[Path, str]) -> None:
    """The audit's text report of a row holding every C0 and C1 character carries none of them raw."""
    db_path, _ = hostile_store
    status, out, _ = run_cli("audit", "--db", str(db_path))
    assert status == 1
    assert _unsafe(out) == []


def test_junit_is_well_formed_xml_whatever_a_row_holds(run_cli: Run, hostile_store: tuple[Path, str]) -> None:
    """The JUnit report parses with an XML parser over rows holding every C0 and C1 control character."""
    db_path, _ = hostile_store
    status, out, _ = run_cli("audit", "--db", str(db_path), "--format", "junit")
    assert status == 1
    root = ElementTree.fromstring(out.encode("utf-8"))
    failures = root.findall(".//failure")
    assert failures
    assert all(_unsafe(failure.text or "") == [] for failure in failures)


def test_list_prints_its_table_a_chunk_at_a_time_with_the_columns_lined_up(
    run_cli: Run, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`list` lays out and prints a chunk of rows at a time (a store of millions streams in bounded memory, and
    `| head` sees rows at once): one header, every row in order, the column separators in the same place."""
    import compute_budget.cli.render as render

    monkeypatch.setattr(render, "TABLE_CHUNK_ROWS", 250)
    gates = db_path.with_suffix(".jsonl")  # seq gains a digit after the first chunk, and the last ids are long
    gates.write_text("\n".join(gate_lines(1000, prefix="g") + gate_lines(5, prefix="x" * 60)) + "\n")
    assert run_cli("record", str(gates), "--db", str(db_path))[0] == 0
    status, out, _ = run_cli("list", "--db", str(db_path))
    assert status == 0
    lines = out.splitlines()
    assert sum(line.lstrip().startswith("seq") for line in lines) == 1
    rows = [line for line in lines if "│" in line]  # a long gate id folds: its row spans two lines
    assert [int(line.split("│")[0]) for line in rows if line.split("│")[0].strip()] == list(range(1, 1006))
    assert len({tuple(index for index, char in enumerate(line) if char == "│") for line in rows}) == 1
    from compute_budget.core.policy.rules import V1
    from compute_budget.core.policy.types import ComputeBudgetStatus

    assert render.COLUMN_CAPS["status"] >= max(len(status.value) for status in ComputeBudgetStatus)
    assert render.COLUMN_CAPS["reason"] >= max(len(reason) for reason in V1.table)


@pytest.mark.parametrize(
    ("width", "columns"),
    [
        (200, ["seq", "budget_id", "status", "reason", "limits c/d/s/p", "gate", "recorded_at"]),
        (80, ["seq", "budget_id", "status", "reason", "limits c/d/s/p", "gate"]),
        (60, ["seq", "status", "reason", "limits c/d/s/p", "gate"]),
        (40, ["seq", "status", "reason", "limits c/d/s/p"]),
    ],
)
def test_list_on_a_terminal_drops_whole_columns_never_squeezes_one_to_nothing(
    db_path: Path, run_cli: Run, width: int, columns: list[str]
) -> None:
    """Issue 22: at 80 columns seq, budget_id (16 digits), status, reason, limits and gate all show; narrower
    terminals leave out whole columns, last first; no line is wider than the terminal; every cell shows text."""
    import io

    from rich.console import Console

    from compute_budget import BudgetStore
    from compute_budget.cli.render import print_table

    gates = db_path.with_suffix(".jsonl")
    gates.write_text("\n".join(gate_lines(3)) + "\n")
    assert run_cli("record", str(gates), "--db", str(db_path))[0] == 0
    with BudgetStore.open(str(db_path), readonly=True) as store:
        rows = list(store.iter_decisions())
    buffer = io.StringIO()
    print_table(rows, last_seq=3, console=Console(width=width, file=buffer, force_terminal=True, color_system=None))
    lines = [line.rstrip() for line in buffer.getvalue().splitlines()]
    header = " ".join(line for line in lines if "━" not in line and "│" not in line)
    every = ["seq", "budget_id", "status", "reason", "limits c/d/s/p", "gate", "recorded_at"]
    assert [name for name in every if name.split()[0] in header] == columns
    assert all(len(line) <= width for line in lines)
    first_row = next(line for line in lines if line.lstrip().startswith("1 "))
    assert all(cell.strip() for cell in first_row.split("│"))  # no column collapsed to nothing
    if "budget_id" in columns:
        assert rows[0].decision.budget_id[:16] + "…" in buffer.getvalue()


def test_the_text_report_names_a_key_by_its_name_and_id_whatever_its_base64_holds() -> None:
    """A verifier key's base64 may hold a `+`: the report names the key `name+hash`, never a piece of the key
    (the newcomer's rotated key read `example.org/practice+13d00301+AVG+4SAgBQEhmzYcD`); with nothing attested (a
    publication whose checkpoint no trusted key signed) it says seq 0, not None."""
    from compute_budget.auditor.report import AuditReport
    from compute_budget.cli.audit.render import render_text
    from compute_budget.core.log.head import ChainHead

    writer = "example.org/practice+13d00301+AVG+4SAgBQEhmzYcD+PH6UNzWvBBKqICrvBxSvNT9Dt6"
    witness = "witness.example/w1+9c86e9d4+BMpO+E1uxuUJesdFX4AJP5dQOgfQvJcbHRDv21LSdpMb"
    report = AuditReport(database="here", rows_checked=0, findings=(), head=ChainHead(0, "00" * 32, None),
                         status_counts={}, reason_counts={}, elapsed_seconds=0.0, trusted_keys=(writer,),
                         witness_keys=(witness,))
    text = render_text(report)
    assert "attested      through seq 0 by trusted keys (example.org/practice+13d00301)\n" in text
    assert "by witness keys (witness.example/w1+9c86e9d4)\n" in text
