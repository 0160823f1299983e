"""The audit command: exit codes, report formats, checkpoints, incremental and parallel runs."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.backends import tamper
from tests.conftest import REPO_ROOT, gate_lines
from tests.contract import FINDING_KINDS

Run = Callable[..., tuple[int, str, str]]
EXAMPLES = str(REPO_ROOT / "examples" / "gates.jsonl")


@pytest.fixture
def recorded(run_cli: Run, db_path: Path) -> Path:
    """A store holding the example gates."""
    assert run_cli("record", EXAMPLES, "--db", str(db_path))[0] == 0
    return db_path


def test_clean_audit_exits_0_with_a_summary(run_cli: Run, recorded: Path) -> None:
    """A clean store: exit 0 and a text summary with rows checked and the head."""
    status, out, err = run_cli("audit", "--db", str(recorded))
    assert (status, err) == (0, "")
    assert "CLEAN" in out
    assert "rows checked  8" in out
    assert "budget_allowed 4" in out


def test_findings_exit_1_and_are_grouped_by_kind(run_cli: Run, recorded: Path) -> None:
    """A tampered store: exit 1, the finding's kind, row and detail."""
    tamper(recorded, "UPDATE compute_budget_decisions SET max_candidates = 50 WHERE seq = 1")
    status, out, _ = run_cli("audit", "--db", str(recorded))
    assert status == 1
    assert "rederive_mismatch (1)" in out
    assert "max_candidates stored 50, policy gives 5" in out


def test_json_report_has_the_contract_fields(run_cli: Run, recorded: Path) -> None:
    """--format json: clean, rows_checked and findings with kind, budget_id, seq, detail."""
    tamper(recorded, "UPDATE compute_budget_decisions SET explanation = 'x' WHERE seq = 2")
    status, out, _ = run_cli("audit", "--db", str(recorded), "--format", "json")
    report = json.loads(out)
    assert status == 1
    assert report["clean"] is False
    assert report["rows_checked"] == 8
    assert report["findings"] == [
        {"kind": "chain_break", "budget_id": report["findings"][0]["budget_id"], "seq": 2,
         "detail": report["findings"][0]["detail"], "action": report["findings"][0]["action"], "cause_seq": 2}
    ]
    assert len(report["findings"][0]["budget_id"]) == 64
    assert "salvage" in report["findings"][0]["action"]  # issue 22: each finding says what to do
    assert report["summary"] == {"rows_affected": [2], "rows_affected_count": 1}


def test_junit_report_fails_the_kind_that_was_found(run_cli: Run, recorded: Path, tmp_path: Path) -> None:
    """--format junit --output FILE writes XML with one failing case for the finding's kind."""
    tamper(recorded, "UPDATE compute_budget_decisions SET policy_version = 'v0' WHERE seq = 3")
    output = tmp_path / "audit.xml"
    status, out, _ = run_cli("audit", "--db", str(recorded), "--format", "junit", "--output", str(output))
    assert status == 1
    assert out == ""
    suite = ElementTree.parse(output).getroot().find("testsuite")
    assert suite is not None
    failing = {case.get("name") for case in suite.iter("testcase") if case.find("failure") is not None}
    assert "unsupported_policy_version" in failing
    by_kind = [case for case in suite.iter("testcase") if case.get("classname") == "compute_budget.audit"]
    # every kind as released, causes first (spec 11.4): the kinds that cause the others, then the released order
    causes = ["published_mismatch", "bad_signature"]
    assert [case.get("name") for case in by_kind] == causes + [kind for kind in FINDING_KINDS if kind not in causes]
    rows = [case.get("name") for case in suite.iter("testcase") if case.get("classname") == "compute_budget.audit.rows"]
    assert rows == ["row 3"]  # and one failing case per affected row (issue 22)


def test_checkpoint_rotation(run_cli: Run, recorded: Path, tmp_path: Path) -> None:
    """Verify against last night's checkpoint and keep tonight's; a dirty audit keeps the old one."""
    last_night = tmp_path / "last.json"
    last_night.write_text(run_cli("checkpoint", "--db", str(recorded))[1])
    run_cli("record", "--db", str(recorded), str(_more_gates(tmp_path)))
    tonight = tmp_path / "tonight.json"
    status, _, _ = run_cli(
        "audit", "--db", str(recorded), "--checkpoint", str(last_night), "--save-checkpoint", str(tonight)
    )
    assert status == 0
    assert json.loads(tonight.read_text())["seq"] == 13
    tamper(recorded, "DELETE FROM compute_budget_decisions WHERE seq > 10")
    again = tmp_path / "again.json"
    status, out, err = run_cli(
        "audit", "--db", str(recorded), "--checkpoint", str(tonight), "--save-checkpoint", str(again)
    )
    assert status == 1
    assert "checkpoint_mismatch" in out
    assert "not written" in err
    assert not again.exists()


def test_incremental_audit_since_a_checkpoint(run_cli: Run, recorded: Path, tmp_path: Path) -> None:
    """--since checks only the rows after the checkpoint."""
    checkpoint = tmp_path / "cp.json"
    checkpoint.write_text(run_cli("checkpoint", "--db", str(recorded))[1])
    run_cli("record", "--db", str(recorded), str(_more_gates(tmp_path)))
    status, out, _ = run_cli("audit", "--db", str(recorded), "--since", str(checkpoint), "--format", "json")
    assert status == 0
    assert json.loads(out)["rows_checked"] == 5


@pytest.mark.slow
def test_jobs_gives_the_same_report(run_cli: Run, recorded: Path) -> None:
    """--jobs 2 findings equal --jobs 1 findings."""
    tamper(recorded, "UPDATE compute_budget_decisions SET max_steps = 1 WHERE seq = 4")
    one = json.loads(run_cli("audit", "--db", str(recorded), "--format", "json")[1])
    two = json.loads(run_cli("audit", "--db", str(recorded), "--format", "json", "--jobs", "2")[1])
    assert one["findings"] == two["findings"]


@pytest.mark.slow
def test_jobs_default_is_auto_and_a_small_store_takes_one(run_cli: Run, recorded: Path) -> None:
    """Without --jobs (auto) and with --jobs auto, a small store is audited by one process, and the reports say
    how many jobs ran."""
    for extra in ([], ["--jobs", "auto"], ["--jobs", "AUTO"]):
        status, out, _ = run_cli("audit", "--db", str(recorded), "--format", "json", *extra)
        assert status == 0
        assert json.loads(out)["jobs"] == 1
    status, out, _ = run_cli("audit", "--db", str(recorded))
    assert status == 0
    assert "1 job)" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--db", "{tmp}/missing.db"], "no database"),
        (["--db", "{tmp}/notes.txt"], "not a SQLite database"),
        (["--db", "{tmp}/foreign.db"], "not a compute-budget database"),
        (["--db", "{tmp}/old.db"], "compute-budget migrate"),
        (["--db", "{db}", "--checkpoint", "{tmp}/missing.json"], "does not exist"),
        (["--db", "{db}", "--checkpoint", "{tmp}/notes.txt"], "not JSON"),
        (["--db", "{db}", "--jobs", "0"], "--jobs"),
        (["--db", "{db}", "--jobs", "many"], "--jobs"),
        (["--db", "{db}", "--format", "yaml"], "--format"),
    ],
    ids=[
        "missing", "not-sqlite", "foreign", "behind-head", "no-checkpoint", "bad-checkpoint", "jobs", "jobs-word",
        "format",
    ],
)
def test_audit_that_cannot_run_exits_2(
    run_cli: Run, recorded: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    """Every way an audit cannot run: exit 2, one clear line, no traceback."""
    (tmp_path / "notes.txt").write_text("not a database\n" * 50)
    with sqlite3.connect(tmp_path / "foreign.db") as connection:
        connection.execute("CREATE TABLE t (x)")
    (tmp_path / "old.db").write_bytes((REPO_ROOT / "tests" / "data" / "store_0001.db").read_bytes())
    status, out, err = run_cli("audit", *[arg.format(tmp=tmp_path, db=recorded) for arg in args])
    assert status == 2
    assert out == ""
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def _more_gates(tmp_path: Path) -> Path:
    path = tmp_path / "more.jsonl"
    path.write_text("\n".join(gate_lines(5, prefix="more")) + "\n")
    return path


@pytest.mark.slow
def test_the_audit_command_does_not_import_rich_off_a_terminal(run_cli: Run, recorded: Path) -> None:
    """Rich draws tables and progress bars on a terminal only; the nightly audit, piped to a file, must not pay
    for importing it."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from compute_budget.cli import main\n"
        "sys.argv = ['compute-budget', 'audit', '--db', sys.argv[1], '--format', 'json']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as stop:\n"
        "    code = stop.code\n"
        "print(code, 'rich' in sys.modules, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(recorded)], capture_output=True, text=True, timeout=120, check=False
    )
    assert json.loads(done.stdout)["clean"] is True
    assert done.stderr.strip() == "0 False"


@pytest.mark.slow
def test_the_progress_bar_on_a_terminal_follows_a_parallel_audit(tmp_path: Path) -> None:
    """On a terminal the audit draws its progress on stderr, also with --jobs 2 (the auditing process checks a
    range itself and counts each worker's rows when it is done), and the report is the same."""
    import os
    import subprocess
    import sys

    from compute_budget import BudgetStore

    target = tmp_path / "twenty-thousand.db"
    with BudgetStore.open(target) as store:
        store.record_many(gate_lines(20_000))
    parent_end, terminal = os.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "compute_budget", "audit", "--db", str(target), "--jobs", "2", "--format", "json"],
            stdout=subprocess.PIPE,
            stderr=terminal,
            timeout=120,
            check=False,
            env={**os.environ, "COLUMNS": "100", "TERM": "xterm"},
        )
        os.close(terminal)
        terminal = -1
        drawn = b""
        while True:
            try:
                chunk = os.read(parent_end, 65536)
            except OSError:  # the terminal's other end is closed: all of it is read
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        if terminal != -1:
            os.close(terminal)
        os.close(parent_end)
    report = json.loads(done.stdout)
    assert done.returncode == 0
    assert (report["clean"], report["rows_checked"], report["jobs"]) == (True, 20_000, 2)
    assert b"auditing" in drawn
    assert b"Traceback" not in drawn


@pytest.mark.parametrize(("stop", "status", "said"), [("interrupt", 130, "interrupted (Ctrl-C)"),
                                                     ("terminate", 143, "terminated (SIGTERM)")])
def test_an_interrupted_audit_leaves_no_old_verdict_behind(
    run_cli: Run, recorded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: str, status: int, said: str
) -> None:
    """Ctrl-C, or SIGTERM from a scheduler's timeout, during the audit: every report file asked for says the audit
    did not finish, so last night's CLEAN never stands for tonight (it used to survive), and the exit status is
    the signal's (130, 143)."""
    import compute_budget.auditor.scan as scan
    from compute_budget.cli.program import Terminated

    output, extra = tmp_path / "audit.txt", tmp_path / "audit.json"
    assert run_cli("audit", "--db", str(recorded), "--output", str(output), "--report", f"json:{extra}")[0] == 0
    assert "CLEAN" in output.read_text()

    def stopped(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt if stop == "interrupt" else Terminated

    monkeypatch.setattr(scan, "run_audit", stopped)
    code, out, err = run_cli("audit", "--db", str(recorded), "--output", str(output), "--report", f"json:{extra}")
    assert code == status
    assert out == ""
    assert err == f"compute-budget: {said.split()[0]}\n"  # one line: no empty line before it (Click's own)
    assert "COULD NOT RUN" in output.read_text()
    assert f"the audit was {said} before it finished" in output.read_text()
    report = json.loads(extra.read_text())
    assert (report["clean"], report["error"]) == (False, f"the audit was {said} before it finished")


def test_the_command_line_builds_one_audit_request(
    run_cli: Run, recorded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29: `audit` reads its options once into one `AuditRequest` (its files already read) and runs it."""
    import compute_budget.auditor.scan as scan
    from compute_budget.auditor.report import AuditReport
    from compute_budget.auditor.request import AuditRequest
    from compute_budget.core.log.checkpoint import Checkpoint

    seen: list[AuditRequest] = []
    real = scan.run_audit

    def recording(request: AuditRequest) -> AuditReport:
        seen.append(request)
        return real(request)

    monkeypatch.setattr(scan, "run_audit", recording)
    saved = tmp_path / "head.json"
    args = ("audit", "--db", str(recorded), "--all-signatures", "--max-witness-age", "60")
    assert run_cli(*args, "--save-checkpoint", str(saved))[0] == 0
    assert len(seen) == 1
    first = seen[0]
    assert (first.target, first.all_signatures, first.max_witness_age) == (str(recorded), True, 60)
    assert (first.checkpoint, first.since, first.look_back, first.trusted_keys) == (None, None, 0, ())
    assert run_cli("audit", "--db", str(recorded), "--since", str(saved), "--look-back", "3")[0] == 0
    assert len(seen) == 2
    since = seen[1].since
    assert isinstance(since, Checkpoint)  # the file, read by the command line: a checkpoint, not its path
    assert since.seq == 8
    assert seen[1].look_back == 3
