"""The command line as a practice loop uses it: skipped conflicts, lookup by gate, list filters, show --verify,
and failed runs that leave nothing behind (issue 11)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from compute_budget import BudgetStore, decide
from tests.backends import tamper
from tests.conftest import REPO_ROOT, gate_lines, make_gate

Run = Callable[..., tuple[int, str, str]]
EXAMPLES = str(REPO_ROOT / "examples" / "gates.jsonl")


@pytest.fixture
def recorded(run_cli: Run, db_path: Path) -> Path:
    """A store holding the example gates."""
    assert run_cli("record", EXAMPLES, "--db", str(db_path))[0] == 0
    return db_path


def _write(path: Path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


# -- record --on-conflict skip -----------------------------------------------------------------------------


def test_record_skip_keeps_the_trace_and_names_each_conflict(run_cli: Run, recorded: Path, tmp_path: Path) -> None:
    """--on-conflict skip: every other gate recorded, one line per conflict on stderr, exit 0 with a summary."""
    conflicting = json.dumps(make_gate(residual_ids=["residual-99"]))
    source = _write(tmp_path / "gates.jsonl", [*gate_lines(3), conflicting, gate_lines(4)[3]])
    status, out, err = run_cli("record", source, "--db", str(recorded), "--on-conflict", "skip")
    assert status == 0
    budget_id = decide(make_gate()).budget_id
    assert err.splitlines() == [
        f"compute-budget: {source} line 4: conflict: budget_id {budget_id} is already recorded with a different "
        "gate (they differ in residual_ids); skipped",
        "compute-budget: 1 conflicting gate skipped",
    ]
    assert out.startswith("recorded 4 gates: 4 new, 0 already present, 1 skipped as conflicts (head seq 12)")
    with BudgetStore.open(recorded, readonly=True) as store:
        assert store.count() == 12


def test_record_skip_caps_the_conflict_lines_at_20(run_cli: Run, db_path: Path, tmp_path: Path) -> None:
    """25 conflicts: 20 lines, then one line with the count; the 10 other gates are recorded."""
    originals = [make_gate(decision_id=f"g-{index}") for index in range(25)]
    assert run_cli("record", _write(tmp_path / "a.jsonl", [json.dumps(gate) for gate in originals]),
                   "--db", str(db_path))[0] == 0
    changed = [json.dumps({**gate, "residual_ids": []}) for gate in originals]
    source = _write(tmp_path / "b.jsonl", [*changed, *gate_lines(10)])
    status, out, err = run_cli("record", source, "--db", str(db_path), "--on-conflict", "skip")
    assert status == 0
    lines = err.splitlines()
    assert len(lines) == 21
    assert all(": conflict: budget_id " in line for line in lines[:20])
    assert lines[20] == "compute-budget: 25 conflicting gates skipped, 5 more not shown"
    assert "10 new, 0 already present, 25 skipped as conflicts (head seq 35)" in out


def test_record_raise_stays_the_default(run_cli: Run, recorded: Path, tmp_path: Path) -> None:
    """Without --on-conflict a conflict is still exit 2 with nothing written."""
    source = _write(tmp_path / "gates.jsonl", [gate_lines(1)[0], json.dumps(make_gate(residual_ids=[]))])
    status, _, err = run_cli("record", source, "--db", str(recorded))
    assert status == 2
    assert "nothing was written" in err
    with BudgetStore.open(recorded, readonly=True) as store:
        assert store.count() == 8


# -- failed runs leave nothing behind ------------------------------------------------------------------------


def test_a_failed_record_removes_the_database_it_created(run_cli: Run, tmp_path: Path) -> None:
    """A record that fails (a line that is not JSON, a conflict) into a new file leaves no file behind."""
    database = tmp_path / "new.db"
    bad = _write(tmp_path / "bad.jsonl", [*gate_lines(2), "not json"])
    status, _, err = run_cli("record", bad, "--db", str(database))
    assert status == 2
    assert "line 3" in err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["bad.jsonl"]
    conflict = _write(tmp_path / "conflict.jsonl", [json.dumps(make_gate()), json.dumps(make_gate(residual_ids=[]))])
    assert run_cli("record", conflict, "--db", str(database))[0] == 2
    assert not database.exists()


def test_a_failed_record_keeps_a_database_that_was_there(run_cli: Run, tmp_path: Path) -> None:
    """An existing (even empty) store is never removed by a failed run: it was not this run's to remove."""
    database = tmp_path / "empty.db"
    assert run_cli("migrate", "--db", str(database))[0] == 0
    bad = _write(tmp_path / "bad.jsonl", ["not json"])
    assert run_cli("record", bad, "--db", str(database))[0] == 2
    assert database.exists()
    with BudgetStore.open(database, readonly=True) as store:
        assert store.count() == 0


def test_a_failed_copy_removes_the_database_it_created(run_cli: Run, tmp_path: Path) -> None:
    """copy from a tampered source into a new file: exit 1 and no destination file left."""
    source = tmp_path / "source.db"
    with BudgetStore.open(source) as store:
        store.record_many(gate_lines(5))
    tamper(source, "UPDATE compute_budget_decisions SET max_steps = 99 WHERE seq = 3")
    destination = tmp_path / "copy.db"
    status, _, err = run_cli("copy", str(source), str(destination))
    assert status == 1
    assert "nothing was copied" in err
    assert not destination.exists()
    assert not list(tmp_path.glob("copy.db*"))


# -- lookup by gate, list filters ----------------------------------------------------------------------------


def test_show_and_list_by_gate(run_cli: Run, recorded: Path) -> None:
    """show --gate ID and list --gate ID find a gate's decisions by its decision_id."""
    status, out, _ = run_cli("show", "--gate", "gate-0002", "--db", str(recorded))
    assert status == 0
    assert "gate-0002" in out
    assert "seq          2" in out
    status, out, _ = run_cli("list", "--gate", "gate-0002", "--db", str(recorded), "--format", "jsonl")
    assert [json.loads(line)["seq"] for line in out.splitlines()] == [2]
    status, _, err = run_cli("show", "--gate", "gate-9999", "--db", str(recorded))
    assert status == 1
    assert "not found: no decision of gate gate-9999" in err
    assert run_cli("show", "--db", str(recorded))[0] == 2  # neither an id nor --gate
    assert run_cli("show", "1640737b", "--gate", "gate-0001", "--db", str(recorded))[0] == 2


def test_list_filters(run_cli: Run, db_path: Path, tmp_path: Path) -> None:
    """--reason, --policy-version, --after-seq and --before-seq filter, and combine with --status and --limit."""
    assert run_cli("record", _write(tmp_path / "g.jsonl", gate_lines(12)), "--db", str(db_path))[0] == 0

    def seqs(*options: str) -> list[int]:
        status, out, _ = run_cli("list", "--db", str(db_path), "--format", "jsonl", *options)
        assert status == 0
        return [json.loads(line)["seq"] for line in out.splitlines()]

    assert seqs("--reason", "gate_blocked") == [5, 11]
    assert seqs("--after-seq", "3", "--before-seq", "7") == [4, 5, 6]
    assert seqs("--after-seq", "3", "--before-seq", "7", "--limit", "1") == [4]  # paging forward: the first after
    assert seqs("--status", "budget_allowed", "--after-seq", "6") == [7, 8, 9]
    assert len(seqs("--policy-version", "compute_budget.v1")) == 12
    assert seqs("--policy-version", "compute_budget.v2") == []
    status, out, _ = run_cli("list", "--db", str(db_path), "--reason", "no_such_reason")
    assert (status, out.strip()) == (0, "no stored decision matches")
    assert run_cli("list", "--db", str(db_path), "--after-seq", "-1")[0] == 2


# -- show --verify -------------------------------------------------------------------------------------------


def test_show_verify_holds_for_a_clean_row(run_cli: Run, recorded: Path) -> None:
    """A clean row: exit 0 and a line saying it holds."""
    status, out, err = run_cli("show", "1640737b", "--verify", "--db", str(recorded))
    assert (status, err) == (0, "")
    assert "verified     holds" in out


def test_show_verify_tells_not_found_from_does_not_hold(run_cli: Run, recorded: Path) -> None:
    """Both exit 1, with messages that say which: not found, or does not hold (naming the findings)."""
    tamper(recorded, "UPDATE compute_budget_decisions SET max_steps = 100 WHERE seq = 1")
    status, out, err = run_cli("show", "1640737b", "--verify", "--db", str(recorded))
    assert status == 1
    assert "DOES NOT HOLD" in out
    assert "max_steps stored 100, policy gives 10" in out
    assert "does not hold: chain_break, rederive_mismatch, budget_id_mismatch" in err
    assert "error:" not in err  # exit 1 is a result; "error:" is for a command that could not run (exit 2)
    assert "not found" not in err
    status, out, err = run_cli("show", "0" * 64, "--verify", "--db", str(recorded))
    assert (status, out) == (1, "")
    assert "not found" in err
    assert "does not hold" not in err


def test_show_marks_a_tampered_row_without_verify(run_cli: Run, recorded: Path) -> None:
    """Without --verify a tampered row is still never shown as if it were fine: marked in text and JSON, with a
    warning on stderr (exit 0: showing it is what was asked)."""
    tamper(recorded, "UPDATE compute_budget_decisions SET reason_code = 'eligible_missing_proposal' WHERE seq = 1")
    status, out, err = run_cli("show", "1640737b", "--db", str(recorded))
    assert status == 0
    assert "DOES NOT HOLD" in out
    assert "warning: budget_id 1640737b" in err
    status, out, _ = run_cli("show", "1640737b", "--db", str(recorded), "--format", "json")
    verification = json.loads(out)["verification"]
    assert verification["holds"] is False
    assert "rederive_mismatch" in {finding["kind"] for finding in verification["findings"]}
    status, out, _ = run_cli("show", "231e91e5", "--db", str(recorded), "--format", "json")
    assert json.loads(out)["verification"] == {"holds": True, "findings": []}


def test_show_verify_reports_an_unreadable_row(run_cli: Run, recorded: Path) -> None:
    """A row whose spans are not JSON any more cannot be displayed, but is still found and judged."""
    tamper(recorded, "UPDATE compute_budget_decisions SET evidence_spans = 'garbage' WHERE seq = 2")
    status, out, err = run_cli("show", "231e91e5", "--verify", "--db", str(recorded))
    assert status == 1
    assert "DOES NOT HOLD" in out
    assert "does not hold" in err
