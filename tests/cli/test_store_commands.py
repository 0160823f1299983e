"""The store commands: record, show, list, migrate, checkpoint (spec section 7)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from compute_budget import BudgetStore, decide
from tests.conftest import REPO_ROOT, gate_lines, make_gate

Run = Callable[..., tuple[int, str, str]]
EXAMPLES = str(REPO_ROOT / "examples" / "gates.jsonl")


def test_record_says_how_many_were_new(run_cli: Run, db_path: Path) -> None:
    """record prints new and already-present counts; the second run adds nothing."""
    status, out, err = run_cli("record", EXAMPLES, "--db", str(db_path))
    assert (status, err) == (0, "")
    assert "8 new, 0 already present" in out
    status, out, _ = run_cli("record", EXAMPLES, "--db", str(db_path))
    assert status == 0
    assert "0 new, 8 already present" in out


def test_record_reads_stdin_and_the_environment_default(
    run_cli: Run, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """INPUT defaults to stdin and --db to $COMPUTE_BUDGET_DB."""
    import io
    import sys

    monkeypatch.setenv("COMPUTE_BUDGET_DB", str(db_path))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("\n".join(gate_lines(3)).encode())))
    status, out, _ = run_cli("record")
    assert status == 0
    assert "3 new" in out
    with BudgetStore.open(db_path, readonly=True) as store:
        assert store.count() == 3


def test_record_default_database_is_in_the_current_folder(
    run_cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --db or the variable, compute_budget.db in the current folder is used."""
    monkeypatch.delenv("COMPUTE_BUDGET_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    assert run_cli("record", EXAMPLES)[0] == 0
    assert (tmp_path / "compute_budget.db").is_file()


def test_record_with_a_non_json_line_writes_nothing(run_cli: Run, db_path: Path, tmp_path: Path) -> None:
    """A line that is not JSON fails the whole record: exit 2, one line naming it, nothing written."""
    source = tmp_path / "gates.jsonl"
    lines = gate_lines(5)
    source.write_text("\n".join([*lines[:3], "this is not json", *lines[3:]]) + "\n")
    status, out, err = run_cli("record", str(source), "--db", str(db_path))
    assert status == 2
    assert out == ""
    assert "line 4" in err
    assert "nothing was written" in err
    assert len(err.strip().splitlines()) == 1
    assert not db_path.exists()  # the failed run removed the new, empty store it had created


def test_record_conflict_exits_2_naming_both(run_cli: Run, db_path: Path, tmp_path: Path) -> None:
    """A conflicting gate: exit 2, one line naming the budget_id and both gates, nothing written."""
    source = tmp_path / "gates.jsonl"
    source.write_text(json.dumps(make_gate()) + "\n")
    assert run_cli("record", str(source), "--db", str(db_path))[0] == 0
    source.write_text(json.dumps(make_gate(decision_id="new")) + "\n" + json.dumps(make_gate(residual_ids=[])) + "\n")
    status, _, err = run_cli("record", str(source), "--db", str(db_path))
    assert status == 2
    assert decide(make_gate()).budget_id in err
    assert "residual_ids" in err
    assert len(err.strip().splitlines()) == 1
    with BudgetStore.open(db_path, readonly=True) as store:
        assert store.count() == 1


@pytest.mark.parametrize(
    ("make_db", "message"),
    [
        (lambda tmp: tmp / "missing-folder" / "x.db", "does not exist"),
        (lambda tmp: tmp, "is a folder"),
    ],
    ids=["missing-folder", "folder"],
)
def test_record_into_a_bad_place(run_cli: Run, tmp_path: Path, make_db: Callable[[Path], Path], message: str) -> None:
    """Bad database places give exit 2 and one clear line."""
    status, _, err = run_cli("record", EXAMPLES, "--db", str(make_db(tmp_path)))
    assert status == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_record_into_a_file_that_is_not_sqlite(run_cli: Run, tmp_path: Path) -> None:
    """A non-database file is refused and left unchanged."""
    path = tmp_path / "notes.txt"
    path.write_text("dear diary\n" * 100)
    status, _, err = run_cli("record", EXAMPLES, "--db", str(path))
    assert status == 2
    assert "not a SQLite database" in err
    assert path.read_text() == "dear diary\n" * 100


def test_record_into_a_database_behind_head(run_cli: Run, tmp_path: Path) -> None:
    """An old schema is refused with the command that fixes it; migrate then makes it usable."""
    path = tmp_path / "old.db"
    path.write_bytes((REPO_ROOT / "tests" / "data" / "store_0001.db").read_bytes())
    status, _, err = run_cli("record", EXAMPLES, "--db", str(path))
    assert status == 2
    assert "compute-budget migrate" in err
    status, out, _ = run_cli("migrate", "--db", str(path))
    assert status == 0
    assert "from 0001 to head revision 0006" in out
    assert run_cli("record", EXAMPLES, "--db", str(path))[0] == 0


def test_show_prints_decision_gate_and_why(run_cli: Run, db_path: Path) -> None:
    """show gives the stored decision, its gate input and the explanation; JSON on request."""
    run_cli("record", EXAMPLES, "--db", str(db_path))
    budget_id = decide(make_gate()).budget_id
    status, out, _ = run_cli("show", budget_id, "--db", str(db_path))
    assert status == 0
    assert budget_id in out
    assert "gate-0001" in out
    assert "eligible_missing_role" in out
    assert decide(make_gate()).explanation in out
    status, out, _ = run_cli("show", budget_id, "--db", str(db_path), "--format", "json")
    shown = json.loads(out)
    assert shown["budget_id"] == budget_id
    assert shown["seq"] == 1
    assert json.loads(shown["gate_input"]) == make_gate()


def test_show_unknown_budget_id_exits_1(run_cli: Run, db_path: Path) -> None:
    """A budget_id that is not stored: exit 1 and one line."""
    run_cli("record", EXAMPLES, "--db", str(db_path))
    status, out, err = run_cli("show", "0" * 64, "--db", str(db_path))
    assert (status, out) == (1, "")
    assert "no decision" in err


def test_show_on_a_missing_database_exits_2(run_cli: Run, tmp_path: Path) -> None:
    """Reading commands never create a database."""
    status, _, err = run_cli("show", "0" * 64, "--db", str(tmp_path / "none.db"))
    assert status == 2
    assert "no database" in err
    assert not (tmp_path / "none.db").exists()


def test_list_table_and_jsonl(run_cli: Run, db_path: Path) -> None:
    """list shows every decision oldest first; --status and --limit narrow it; jsonl is one object a line."""
    run_cli("record", EXAMPLES, "--db", str(db_path))
    status, out, _ = run_cli("list", "--db", str(db_path))
    assert status == 0
    ids = [decide(json.loads(line)).budget_id for line in Path(EXAMPLES).read_text().splitlines()]
    positions = [out.index(budget_id) for budget_id in ids]
    assert positions == sorted(positions)
    status, out, _ = run_cli("list", "--db", str(db_path), "--format", "jsonl", "--status", "budget_blocked")
    listed = [json.loads(line) for line in out.splitlines()]
    assert [row["status"] for row in listed] == ["budget_blocked", "budget_blocked"]
    status, out, _ = run_cli("list", "--db", str(db_path), "--format", "jsonl", "--limit", "2")
    assert [json.loads(line)["seq"] for line in out.splitlines()] == [7, 8]


def test_list_rejects_an_unknown_status(run_cli: Run, db_path: Path) -> None:
    """Bad arguments are exit 2 with one line."""
    status, _, err = run_cli("list", "--db", str(db_path), "--status", "approved")
    assert status == 2
    assert len(err.strip().splitlines()) == 1


def test_checkpoint_prints_the_head(run_cli: Run, db_path: Path) -> None:
    """checkpoint prints a document naming the head."""
    run_cli("record", EXAMPLES, "--db", str(db_path))
    status, out, _ = run_cli("checkpoint", "--db", str(db_path))
    assert status == 0
    document = json.loads(out)
    with BudgetStore.open(db_path, readonly=True) as store:
        head = store.head()
    assert (document["seq"], document["chain_hash"], document["budget_id"]) == (8, head.chain_hash, head.budget_id)


def test_every_command_is_documented_in_the_readme(run_cli: Run) -> None:
    """Each command of the CLI appears in the README, and has its own section in docs/cli.md (each subcommand of a
    group too)."""
    import click

    from compute_budget.cli import cli

    readme = (REPO_ROOT / "README.md").read_text()
    reference = (REPO_ROOT / "docs" / "cli.md").read_text()
    context = click.Context(cli)
    names = cli.list_commands(context)  # the lazy commands too, loaded or not
    assert {"decide", "record", "audit", "witness", "serve"} <= set(names)
    for name in names:
        assert f"compute-budget {name}" in readme, name
        command = cli.get_command(context, name)
        subcommands = command.list_commands(context) if isinstance(command, click.Group) else [""]
        for sub in subcommands:
            assert f"\n## `compute-budget {f'{name} {sub}'.strip()}`\n" in reference, (name, sub)


@pytest.mark.slow
def test_python_dash_m_runs_the_command_line(tmp_path: Path) -> None:
    """`python -m compute_budget` is the same program."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "compute_budget", "decide", EXAMPLES], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 8


@pytest.mark.slow
def test_record_into_a_full_disk_says_the_gates_were_recorded(db_path: Path) -> None:
    """The summary line cannot be printed (stdout on a full disk) after the gates were committed: the error says
    they were recorded, instead of leaving "exit 2" to read as "nothing was written"."""
    import subprocess
    import sys

    with open("/dev/full", "w", encoding="utf-8") as full:
        done = subprocess.run(
            [sys.executable, "-m", "compute_budget", "record", EXAMPLES, "--db", str(db_path)],
            stdout=full, stderr=subprocess.PIPE, text=True, timeout=60, check=False,
        )
    assert done.returncode == 2
    assert done.stderr == (
        "compute-budget: error: the gates were recorded (8 new, head seq 8), but the summary could not be printed: "
        "No space left on device\n"
    )
    with BudgetStore.open(db_path, readonly=True) as store:
        assert store.head().seq == 8


# -- spec 9.9.8: a gate whose row no entry bundle could carry ---------------------------------------------------------

RECORDED_AT = "2026-01-01T00:00:00.000000Z"  # as long as every recording time the writer stamps


def _gate_with_leaf_of(size: int, decision_id: str) -> str:
    """Gate text whose row, stored at seq 1 to 9, has a leaf input of exactly `size` bytes: the filler goes into
    `candidate_organ`, which no decision field copies, so each character adds one byte to the leaf only."""
    from compute_budget import decide_json
    from compute_budget.core.leaf import leaf_input
    from compute_budget.core.row import chained_row

    def text(filler: int) -> str:
        return json.dumps(make_gate(decision_id=decision_id, candidate_organ="x" * filler))

    def leaf_size(gate: str) -> int:
        return len(leaf_input(chained_row(1, decide_json(gate), gate, RECORDED_AT)))

    gate = text(size - leaf_size(text(0)))
    assert leaf_size(gate) == size
    return gate


def _count(target: str) -> int:
    if "://" not in target and not Path(target).exists():
        return 0  # the failed run removed the new, empty store it had created
    with BudgetStore.open(target, readonly=True) as store:
        return store.count()


def test_record_refuses_a_gate_whose_leaf_would_exceed_65535_bytes(
    run_cli: Run, store_target: str, tmp_path: Path
) -> None:
    """One byte over: exit 2, one line naming the input line and the size, nothing of the batch written; exactly
    65,535 bytes is recorded, and its stored row's leaf input is that long. `decide` is unchanged."""
    from compute_budget import prove
    from compute_budget.core.leaf import LEAF_KEYS, leaf_input

    source = tmp_path / "gates.jsonl"
    source.write_text(gate_lines(1)[0] + "\n" + _gate_with_leaf_of(65_536, "too-large") + "\n")
    status, out, err = run_cli("record", str(source), "--db", store_target)
    assert (status, out) == (2, "")
    assert f"{source} line 2 is too large" in err
    assert "65,536 bytes" in err
    assert "nothing was written" in err
    assert len(err.strip().splitlines()) == 1
    assert _count(store_target) == 0
    status, out, _ = run_cli("decide", str(source))
    assert (status, len(out.splitlines())) == (0, 2)

    source.write_text(_gate_with_leaf_of(65_535, "just-fits") + "\n")
    assert run_cli("record", str(source), "--db", store_target)[0] == 0
    row = prove(decide_json_of(source), store_target).row
    assert len(leaf_input([row[key] for key in LEAF_KEYS])) == 65_535


def decide_json_of(source: Path) -> str:
    from compute_budget import decide_json

    return decide_json(source.read_text().strip()).budget_id


def test_the_api_refuses_a_too_large_gate_and_writes_nothing_of_its_batch(store_target: str) -> None:
    """`record` and `record_many` raise `GateTooLarge` (an `InputError`), naming the gate's place in the batch;
    nothing of the batch is written and the store stays usable."""
    from compute_budget import GateTooLarge, InputError

    large = _gate_with_leaf_of(65_536, "too-large")
    with BudgetStore.open(store_target) as store:
        with pytest.raises(GateTooLarge, match="number 3 of the batch") as caught:
            store.record_many([*gate_lines(2), large, *gate_lines(600, prefix="after")])
        assert isinstance(caught.value, InputError)
        assert (caught.value.index, caught.value.line, caught.value.size) == (2, None, 65_536)
        assert store.count() == 0
        with pytest.raises(GateTooLarge, match="number 1 of the batch"):
            store.record(large)
        with pytest.raises(GateTooLarge):
            store.record(make_gate(candidate_organ="x" * 70_000))
        store.record_many(gate_lines(2))
        assert store.count() == 2


# -- spec 9.9.9: --input-format json-array ---------------------------------------------------------------------------

HINT = "holds a JSON array; did you mean --input-format json-array?"


@pytest.mark.postgres_smoke
def test_record_reads_a_json_array_one_gate_per_element(run_cli: Run, store_target: str, tmp_path: Path) -> None:
    """Each element is one gate, in order; its gate_input is the exact text of INPUT from its first to its last
    character (here indented as the array was); a conflict names its element."""
    gates = [json.loads(line) for line in gate_lines(3)]
    source = tmp_path / "gates.json"
    source.write_text(json.dumps(gates, indent=2))
    status, out, err = run_cli("record", "--input-format", "json-array", str(source), "--db", store_target)
    assert (status, err) == (0, "")
    assert "3 new, 0 already present" in out
    with BudgetStore.open(store_target, readonly=True) as store:
        stored = list(store)
    texts = [json.dumps(gate, indent=2).replace("\n", "\n  ") for gate in gates]
    assert [row.gate_input for row in stored] == texts
    assert all(text in source.read_text() for text in texts)
    assert [row.decision for row in stored] == [decide(gate) for gate in gates]
    gates[1]["residual_ids"] = ["changed"]
    source.write_text(json.dumps(gates))
    status, _, err = run_cli(
        "record", "--input-format", "json-array", str(source), "--db", store_target, "--on-conflict", "skip"
    )
    assert status == 0
    assert f"{source} element 2: conflict" in err


def test_record_without_the_flag_keeps_an_array_one_gate_and_says_the_flag_exists(
    run_cli: Run, store_target: str, tmp_path: Path
) -> None:
    """Section 7 unchanged: an array is one malformed gate (exit 0), and record adds one stderr line naming
    INPUT and the flag; the next array is a conflict, and the hint comes with it."""
    source = tmp_path / "gates.json"
    source.write_text(json.dumps([json.loads(line) for line in gate_lines(2)]))
    status, out, err = run_cli("record", str(source), "--db", store_target)
    assert status == 0
    assert "1 new" in out
    assert err == f"compute-budget: {source} {HINT}\n"
    source.write_text(json.dumps([json.loads(line) for line in gate_lines(2, prefix="next")]))
    status, _, err = run_cli("record", str(source), "--db", store_target)
    assert status == 2
    assert f"{source} {HINT}" in err
    assert "conflict" in err
    source.write_text("\n".join(gate_lines(2)) + "\n")
    assert run_cli("record", str(source), "--db", store_target)[2] == ""


def test_record_of_input_that_is_not_one_json_array_writes_nothing(
    run_cli: Run, store_target: str, tmp_path: Path
) -> None:
    """With the flag: JSON Lines, or an array that breaks after good elements, or one whose element is too large
    for a leaf: exit 2, one line naming INPUT (and the element), nothing written."""
    source = tmp_path / "gates.json"
    for data, message in (
        ("\n".join(gate_lines(2)) + "\n", "not a JSON array"),
        ("[" + ",".join(gate_lines(600)) + ", {\"a\": tru}]", "element 601 (from line 1): not JSON"),
        ("[" + gate_lines(1)[0] + "," + _gate_with_leaf_of(65_536, "too-large") + "]", "element 2 is too large"),
    ):
        source.write_text(data)
        status, out, err = run_cli("record", "--input-format", "json-array", str(source), "--db", store_target)
        assert (status, out) == (2, "")
        assert f"{source}" in err
        assert message in err
        assert "nothing was written" in err
        assert len(err.strip().splitlines()) == 1
        assert _count(store_target) == 0
