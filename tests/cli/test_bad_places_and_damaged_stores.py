"""The commands on bad places (missing folders, a read-only filesystem, the audited database as an output, a pipe
closed early) and damaged stores (a tampered head or row, text that is not UTF-8), and on bad arguments: one clear
line and the documented exit status, never a traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from compute_budget import BudgetStore
from compute_budget.core.log.checkpoint import Checkpoint
from tests.backends import tamper
from tests.conftest import REPO_ROOT, gate_lines, make_gate

Run = Callable[..., tuple[int, str, str]]
EXAMPLES = str(REPO_ROOT / "examples" / "gates.jsonl")
CLI = [sys.executable, "-c", "from compute_budget.cli import main; main()"]


@pytest.fixture
def recorded(run_cli: Run, db_path: Path) -> Path:
    """A store holding the example gates."""
    assert run_cli("record", EXAMPLES, "--db", str(db_path))[0] == 0
    return db_path


def one_line(err: str) -> bool:
    """True for a single stderr line without a traceback."""
    return len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("command", "expected"),
    [(["checkpoint"], 2), (["record", EXAMPLES], 2), (["copy-to-new"], 2)],  # no command can run on a damaged head
)
def test_a_tampered_head_is_reported_not_a_traceback(
    run_cli: Run, recorded: Path, command: list[str], expected: int
) -> None:
    """A seq that is not an integer at the head: every command says so in one line, exit 2."""
    tamper(recorded, "UPDATE compute_budget_decisions SET seq = 'abc' WHERE seq = 8")
    tamper(recorded, "UPDATE compute_budget_decisions SET chain_hash = 'zz' WHERE seq = 7")
    if command == ["copy-to-new"]:
        status, _, err = run_cli("copy", str(recorded), str(recorded.with_name("copy.db")))
    else:
        status, _, err = run_cli(*command, "--db", str(recorded))
    assert status == expected
    assert one_line(err)
    assert "audit" in err


def test_an_unreadable_row_is_named_by_list(run_cli: Run, recorded: Path) -> None:
    """list over a row with a wrong type names the row and points to the audit."""
    tamper(recorded, "UPDATE compute_budget_decisions SET max_depth = 'two' WHERE seq = 3")
    status, _, err = run_cli("list", "--db", str(recorded))
    assert status == 2
    assert one_line(err)
    assert "row seq 3" in err


@pytest.fixture
def read_only_mount(recorded: Path) -> Iterator[Path]:
    """The store on a read-only filesystem (a read-only bind mount), as a backup copy would be."""
    source = Path(tempfile.mkdtemp(prefix="cb-ro-src-"))
    mount = Path(tempfile.mkdtemp(prefix="cb-ro-"))
    shutil.copy(recorded, source / "store.db")
    mounted = subprocess.run(["mount", "--bind", str(source), str(mount)], capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip("cannot bind-mount here (needs root)")  # pragma: no cover
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(mount)], check=True, capture_output=True)
        yield mount / "store.db"
    finally:
        subprocess.run(["umount", str(mount)], check=False, capture_output=True)
        shutil.rmtree(source, ignore_errors=True)
        shutil.rmtree(mount, ignore_errors=True)


def test_a_store_on_a_read_only_filesystem_can_be_audited(run_cli: Run, read_only_mount: Path) -> None:
    """Readers work on a read-only filesystem; a writer is told the folder is read-only."""
    status, out, _ = run_cli("audit", "--db", str(read_only_mount))
    assert status == 0
    assert "CLEAN" in out
    assert run_cli("list", "--db", str(read_only_mount), "--format", "jsonl")[1].count("\n") == 8
    status, _, err = run_cli("record", EXAMPLES, "--db", str(read_only_mount))
    assert status == 2
    assert "read-only" in err
    assert one_line(err)


@pytest.mark.slow
def test_output_cut_short_by_the_reader_is_not_an_error(tmp_path: Path) -> None:
    """`decide big | head -1` and `list | head -1` (Rich's table) exit 0 without a traceback or a message. The store
    `list` reads is recorded in this process: only the commands cut short run as processes."""
    source = tmp_path / "many.jsonl"
    lines = gate_lines(20_000)
    source.write_text("\n".join(lines) + "\n")
    process = subprocess.Popen([*CLI, "decide", str(source)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    assert process.stdout.readline().startswith(b'{"budget_id"')
    process.stdout.close()
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0
    assert b"Traceback" not in err
    db = tmp_path / "many.db"
    with BudgetStore.open(str(db)) as store:
        assert store.record_many(lines).new == 20_000
    process = subprocess.Popen([*CLI, "list", "--db", str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    assert process.stdout.readline()
    process.stdout.close()
    _, err = process.communicate(timeout=120)
    assert (process.returncode, err) == (0, b"")  # Rich's own broken-pipe handling exited 1


def test_show_checks_the_id_and_takes_a_unique_prefix(run_cli: Run, recorded: Path) -> None:
    """A malformed id is a usage error (2); an 8-digit prefix finds the decision; an unknown id is 1."""
    status, _, err = run_cli("show", "not-an-id", "--db", str(recorded))
    assert status == 2
    assert one_line(err)
    status, out, _ = run_cli("show", "1640737b", "--db", str(recorded))
    assert status == 0
    assert "1640737b718e0f32ba23c42f036fb6ba1ae9cc9b46e2d566e32c98482189f4d3" in out
    assert run_cli("show", "ffffffff", "--db", str(recorded))[0] == 1


def test_list_says_when_nothing_matches(run_cli: Run, recorded: Path) -> None:
    """A filter that matches nothing says so rather than claiming the store is empty."""
    status, out, _ = run_cli("list", "--db", str(recorded), "--status", "budget_zero")
    assert status == 0
    assert "no stored decision matches" in out


def test_list_refuses_an_absurd_limit(run_cli: Run, recorded: Path) -> None:
    """A limit past 64 bits is a usage error, not a database error."""
    status, _, err = run_cli("list", "--db", str(recorded), "--limit", "9" * 30)
    assert status == 2
    assert "--limit" in err


def test_audit_checks_its_output_places_before_auditing(run_cli: Run, recorded: Path, tmp_path: Path) -> None:
    """--output or --save-checkpoint in a missing folder fails at once, before any report."""
    for option in ("--output", "--save-checkpoint"):
        status, out, err = run_cli("audit", "--db", str(recorded), option, str(tmp_path / "nope" / "x.json"))
        assert (status, out) == (2, "")
        assert option in err
        assert one_line(err)


def test_rederive_details_show_plain_values(run_cli: Run, recorded: Path) -> None:
    """A field-by-field detail shows 'budget_blocked', not a Python enum's repr."""
    with BudgetStore.open(recorded, readonly=True) as store:
        first = next(iter(store))
    gate = json.loads(first.gate_input)
    gate["status"] = "blocked"
    tamper(recorded, ("UPDATE compute_budget_decisions SET gate_input = :g WHERE seq = 1", {"g": json.dumps(gate)}))
    status, out, _ = run_cli("audit", "--db", str(recorded), "--format", "json")
    assert status == 1
    details = " ".join(finding["detail"] for finding in json.loads(out)["findings"])
    assert "policy gives 'budget_blocked'" in details
    assert "ComputeBudgetStatus" not in details


def test_since_beyond_the_store_reports_the_real_head(run_cli: Run, recorded: Path, tmp_path: Path) -> None:
    """The head in the report is the store's, not the checkpoint's."""
    foreign = tmp_path / "cp.json"
    foreign.write_text(Checkpoint(500, "a" * 64, "b" * 64).to_json())
    status, out, _ = run_cli("audit", "--db", str(recorded), "--since", str(foreign), "--format", "json")
    report = json.loads(out)
    assert status == 1
    assert report["head"]["seq"] == 8
    assert [finding["kind"] for finding in report["findings"]] == ["checkpoint_mismatch"]


@pytest.mark.slow
def test_jobs_reports_the_processes_really_used(run_cli: Run, recorded: Path) -> None:
    """A small store is audited by one process whatever --jobs says, and the report says one."""
    status, out, _ = run_cli("audit", "--db", str(recorded), "--jobs", "8", "--format", "json")
    assert status == 0
    assert json.loads(out)["jobs"] == 1


def test_no_command_prints_help_and_exits_2(run_cli: Run) -> None:
    """A bare `compute-budget` shows the commands on stderr."""
    status, out, err = run_cli()
    assert (status, out) == (2, "")
    assert "record" in err
    assert "audit" in err
    assert "-h, --help" in err  # the same help as --help gives (it listed --help alone)


def test_conflicting_gates_inside_one_batch(run_cli: Run, db_path: Path, tmp_path: Path) -> None:
    """Two different gates with one budget_id in the same input: exit 2, nothing written."""
    source = tmp_path / "gates.jsonl"
    source.write_text(json.dumps(make_gate()) + "\n" + json.dumps(make_gate(residual_ids=[])) + "\n")
    status, _, err = run_cli("record", str(source), "--db", str(db_path))
    assert status == 2
    assert one_line(err)
    assert "already recorded" in err
    assert "input line 2" in err


@pytest.mark.postgres
def test_a_missing_postgresql_database_is_named(run_cli: Run, pg_url: str) -> None:
    """A database the server does not have is not reported as the server being down."""
    url = make_url(pg_url).set(database="no_such_database").render_as_string(hide_password=False)
    status, _, err = run_cli("audit", "--db", url)
    assert status == 2
    assert "no such database" in err
    assert one_line(err)


@pytest.mark.parametrize("option", ["--output", "--save-checkpoint"])
def test_audit_never_writes_over_its_own_database(run_cli: Run, recorded: Path, option: str) -> None:
    """Pointing a report or checkpoint at the audited database (or its WAL) is refused before anything runs."""
    before = recorded.read_bytes()
    for target in (recorded, recorded.with_name(recorded.name + "-wal")):
        status, out, err = run_cli("audit", "--db", str(recorded), option, str(target))
        assert (status, out) == (2, "")
        assert "database being audited" in err
    assert recorded.read_bytes() == before


def test_damaged_head_stops_appends_and_checkpoints(run_cli: Run, recorded: Path, tmp_path: Path) -> None:
    """A head row whose seq was turned into text: nothing is appended after it and no checkpoint is made up."""
    tamper(recorded, "UPDATE compute_budget_decisions SET seq = 'abc' WHERE seq = 8")
    source = tmp_path / "new.jsonl"
    source.write_text(json.dumps(make_gate(decision_id="brand-new")) + "\n")
    for argv in (["record", str(source)], ["record", EXAMPLES], ["checkpoint"]):
        status, out, err = run_cli(*argv, "--db", str(recorded))
        assert (status, out) == (2, "")
        assert one_line(err)
        assert "run `compute-budget audit`" in err
    with BudgetStore.open(recorded, readonly=True) as store:
        assert store.count() == 8


def test_gate_text_cannot_drive_the_terminal(run_cli: Run, db_path: Path, tmp_path: Path) -> None:
    """Escape sequences and line breaks in gate fields are shown quoted by show and list."""
    nasty = "\u001b[2J\u001b[31mPWNED\u001b[0m\nFAKE: budget_allowed\r"
    source = tmp_path / "nasty.jsonl"
    source.write_text(json.dumps(make_gate(decision_id=nasty, input_digest=nasty)) + "\n")
    assert run_cli("record", str(source), "--db", str(db_path))[0] == 0
    with BudgetStore.open(db_path, readonly=True) as store:
        budget_id = next(iter(store)).decision.budget_id
    for argv in (["show", budget_id], ["list"]):
        status, out, _ = run_cli(*argv, "--db", str(db_path))
        assert status == 0
        assert "\u001b" not in out
        assert "\r" not in out
        assert "\nFAKE" not in out


def test_reports_get_ordinary_file_modes(run_cli: Run, recorded: Path, tmp_path: Path) -> None:
    """New report and checkpoint files follow the umask; an existing file keeps its mode."""
    import os

    report, checkpoint = tmp_path / "report.txt", tmp_path / "cp.json"
    checkpoint.write_text("old")
    checkpoint.chmod(0o664)
    old_umask = os.umask(0o022)
    try:
        assert (
            run_cli("audit", "--db", str(recorded), "--output", str(report), "--save-checkpoint", str(checkpoint))[0]
            == 0
        )
    finally:
        os.umask(old_umask)
    assert report.stat().st_mode & 0o777 == 0o644
    assert checkpoint.stat().st_mode & 0o777 == 0o664


@pytest.mark.parametrize(
    ("text", "message"),
    [("{}\x0b\n", "Extra data"), ("[" * 100_000 + "\n", "never closed"), ('{"a": "cut\n', "Unterminated string")],
    ids=["vertical-tab", "deep-unclosed", "unterminated"],
)
def test_odd_non_json_is_reported_as_such(run_cli: Run, tmp_path: Path, text: str, message: str) -> None:
    """Text that is not JSON is exit 2 with the parser's reason, however it fails."""
    source = tmp_path / "odd.jsonl"
    source.write_text(text)
    status, out, err = run_cli("decide", str(source))
    assert (status, out) == (2, "")
    assert message in err
    assert one_line(err)
    assert " at at " not in err


def test_unreadable_status_is_named_in_the_audit(run_cli: Run, recorded: Path) -> None:
    """A status that is no ComputeBudgetStatus is reported as such, not blamed on another column."""
    tamper(recorded, "UPDATE compute_budget_decisions SET status = 'BUDGET_ALLOWED' WHERE seq = 6")
    status, out, _ = run_cli("audit", "--db", str(recorded), "--format", "json")
    assert status == 1
    malformed = [f["detail"] for f in json.loads(out)["findings"] if f["kind"] == "malformed_row"]
    assert malformed
    assert all("status" in detail and "evidence_spans" not in detail for detail in malformed)


def test_text_that_is_not_utf8_is_named_by_every_command_that_reads_it(run_cli: Run, recorded: Path) -> None:
    """A raw edit stored bytes that are not UTF-8 in a row: the audit reports the row (`malformed_row`), and the
    commands that must read it whole (show, list) say which column holds what compute-budget never writes,
    instead of a bare "database error … Could not decode"."""
    tamper(recorded, ("UPDATE compute_budget_decisions SET explanation = CAST(:bad AS TEXT) WHERE seq = 5",
                      {"bad": b"\xff"}))
    import sqlite3

    with sqlite3.connect(recorded) as connection:
        (budget_id,) = connection.execute("SELECT budget_id FROM compute_budget_decisions WHERE seq = 5").fetchone()
    connection.close()
    said = (
        f"compute-budget: error: {recorded}: column 'explanation' holds text that is not UTF-8, which compute-budget "
        "never writes: the file was edited outside it (`compute-budget audit` reports such decision rows)\n"
    )
    assert run_cli("list", "--db", str(recorded), "--format", "jsonl")[0::2] == (2, said)
    assert run_cli("list", "--db", str(recorded))[0::2] == (2, said)
    assert run_cli("show", budget_id, "--db", str(recorded))[0::2] == (2, said)
    status, out, _ = run_cli("audit", "--db", str(recorded), "--format", "json")
    assert status == 1
    assert [finding["kind"] for finding in json.loads(out)["findings"]] == ["malformed_row"]
