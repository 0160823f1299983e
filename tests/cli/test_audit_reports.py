"""Audit reports for a nightly job: several per run, written even when the audit cannot run, and saying when,
by what and against which checkpoint it ran (issue 11). JUnit is read with the standard library's parser."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.backends import tamper
from tests.conftest import REPO_ROOT

Run = Callable[..., tuple[int, str, str]]
EXAMPLES = str(REPO_ROOT / "examples" / "gates.jsonl")
UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


@pytest.fixture
def recorded(run_cli: Run, db_path: Path) -> Path:
    """A store holding the example gates."""
    assert run_cli("record", EXAMPLES, "--db", str(db_path))[0] == 0
    return db_path


def _suite(path: Path) -> ElementTree.Element:
    root = ElementTree.parse(path).getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1
    return suites[0]


def _properties(suite: ElementTree.Element) -> dict[str, str]:
    return {item.get("name", ""): item.get("value", "") for item in suite.iter("property")}


def _cases(suite: ElementTree.Element) -> dict[str, ElementTree.Element]:
    return {case.get("name", ""): case for case in suite.findall("testcase")}


def test_one_run_writes_several_reports(run_cli: Run, recorded: Path, tmp_path: Path) -> None:
    """--report FORMAT:FILE is repeatable, next to --format/--output; every file tells the same audit."""
    status, out, err = run_cli(
        "audit", "--db", str(recorded), "--format", "text", "--output", str(tmp_path / "audit.txt"),
        "--report", f"junit:{tmp_path / 'audit.xml'}", "--report", f"json:{tmp_path / 'audit.json'}",
    )
    assert (status, out, err) == (0, "", "")
    document = json.loads((tmp_path / "audit.json").read_text())
    assert document["clean"] is True
    assert document["rows_checked"] == 8
    suite = _suite(tmp_path / "audit.xml")
    assert suite.get("failures") == "0"
    assert _properties(suite)["head_chain_hash"] == document["head"]["chain_hash"]
    assert "CLEAN" in (tmp_path / "audit.txt").read_text()


def test_report_spec_must_be_format_colon_file(run_cli: Run, recorded: Path, tmp_path: Path) -> None:
    """A bad --report is a usage error (exit 2, one line)."""
    for spec in ("audit.xml", "xml:audit.xml", "junit:"):
        status, _, err = run_cli("audit", "--db", str(recorded), "--report", spec)
        assert status == 2
        assert "FORMAT:FILE" in err
        assert len(err.strip().splitlines()) == 1
    status, _, err = run_cli("audit", "--db", str(recorded), "--report", f"json:{tmp_path / 'a'}",
                             "--report", f"junit:{tmp_path / 'a'}")
    assert status == 2
    assert "named twice" in err


def test_reports_say_when_by_what_and_against_which_checkpoint(run_cli: Run, recorded: Path, tmp_path: Path) -> None:
    """Start and end (UTC), the tool's version, the store's display name, the checkpoint used, the rows'
    policy versions: in JSON, JUnit and text."""
    checkpoint = tmp_path / "cp.json"
    assert run_cli("audit", "--db", str(recorded), "--save-checkpoint", str(checkpoint))[0] == 0
    status, text, _ = run_cli(
        "audit", "--db", str(recorded), "--since", str(checkpoint),
        "--report", f"json:{tmp_path / 'a.json'}", "--report", f"junit:{tmp_path / 'a.xml'}",
    )
    assert status == 0
    saved = json.loads(checkpoint.read_text())
    document = json.loads((tmp_path / "a.json").read_text())
    assert UTC.fullmatch(document["started_at"])
    assert UTC.fullmatch(document["finished_at"])
    assert document["started_at"] <= document["finished_at"]
    assert document["tool"] == {"name": "compute-budget", "version": version("compute-budget")}
    assert document["database"] == str(recorded)
    assert document["since"]["chain_hash"] == saved["chain_hash"]
    assert document["policy_versions"] == {}  # incremental: no row after the checkpoint
    properties = _properties(_suite(tmp_path / "a.xml"))
    assert properties["since_seq"] == "8"
    assert properties["since_chain_hash"] == saved["chain_hash"]
    assert properties["tool"] == f"compute-budget {version('compute-budget')}"
    assert UTC.fullmatch(properties["started_at"])
    assert f"since         seq 8, chain_hash {saved['chain_hash']}: holds" in text
    assert f"compute-budget {version('compute-budget')}" in text

    status, _, _ = run_cli("audit", "--db", str(recorded), "--format", "json", "--output", str(tmp_path / "b.json"))
    assert json.loads((tmp_path / "b.json").read_text())["policy_versions"] == {"compute_budget.v1": 8}


def test_junit_marks_checks_that_did_not_run_as_skipped(run_cli: Run, recorded: Path, tmp_path: Path) -> None:
    """Without a checkpoint, checkpoint_mismatch is skipped (not passed); with one it runs."""
    run_cli("audit", "--db", str(recorded), "--format", "junit", "--output", str(tmp_path / "a.xml"))
    suite = _suite(tmp_path / "a.xml")
    cases = _cases(suite)
    assert suite.get("skipped") == "1"
    assert cases["checkpoint_mismatch"].find("skipped") is not None
    assert cases["chain_break"].find("skipped") is None
    checkpoint = tmp_path / "cp.json"
    checkpoint.write_text(run_cli("checkpoint", "--db", str(recorded))[1])
    run_cli("audit", "--db", str(recorded), "--checkpoint", str(checkpoint), "--report", f"junit:{tmp_path / 'b.xml'}")
    suite = _suite(tmp_path / "b.xml")
    assert suite.get("skipped") == "0"
    assert list(_cases(suite)["checkpoint_mismatch"]) == []


def test_findings_still_write_every_report(run_cli: Run, recorded: Path, tmp_path: Path) -> None:
    """Exit 1 writes the reports with the findings."""
    tamper(recorded, "UPDATE compute_budget_decisions SET max_steps = 100 WHERE seq = 3")
    status, _, _ = run_cli("audit", "--db", str(recorded), "--report", f"junit:{tmp_path / 'a.xml'}",
                           "--report", f"json:{tmp_path / 'a.json'}")
    assert status == 1
    assert json.loads((tmp_path / "a.json").read_text())["clean"] is False
    failed = _cases(_suite(tmp_path / "a.xml"))["rederive_mismatch"].find("failure")
    assert failed is not None
    assert "seq 3" in failed.get("message", "")


@pytest.mark.parametrize(
    ("make_problem", "reason"),
    [
        (lambda tmp, db: ["--db", str(tmp / "missing.db")], "no database at"),
        (lambda tmp, db: ["--db", str(db), "--checkpoint", str(tmp / "gone.json")], "does not exist"),
        (lambda tmp, db: ["--db", str(db), "--save-checkpoint", str(tmp / "no-folder" / "cp.json")],
         "does not exist"),
        (lambda tmp, db: ["--db", str(db), "--jobs", "0"], "'0' is neither 'auto' nor a whole number"),
        (lambda tmp, db: ["--db", str(db), "--no-such-option"], "No such option"),
    ],
    ids=["missing-database", "missing-checkpoint", "unwritable-checkpoint", "bad-jobs", "unknown-option"],
)
def test_a_run_that_cannot_start_still_writes_its_reports(
    run_cli: Run, recorded: Path, tmp_path: Path, make_problem: Callable[[Path, Path], list[str]], reason: str
) -> None:
    """Exit 2: every requested report is replaced by an error report saying why (last night's verdict does not
    survive): JUnit one test case in error, JSON clean false with an error, text likewise."""
    reports = {name: tmp_path / f"audit.{name}" for name in ("junit", "json", "text")}
    for path in reports.values():
        path.write_text("last night's clean report\n")
    status, out, err = run_cli(
        "audit", *make_problem(tmp_path, recorded), "--format", "json", "--output", str(reports["json"]),
        "--report", f"junit:{reports['junit']}", "--report", f"text:{reports['text']}",
    )
    assert status == 2
    assert out == ""
    assert reason in err
    suite = _suite(reports["junit"])
    assert (suite.get("tests"), suite.get("errors"), suite.get("failures")) == ("1", "1", "0")
    cases = suite.findall("testcase")
    assert len(cases) == 1
    error = cases[0].find("error")
    assert error is not None
    assert reason in error.get("message", "")
    document = json.loads(reports["json"].read_text())
    assert document["clean"] is False
    assert reason in document["error"]
    assert UTC.fullmatch(document["started_at"])
    text = reports["text"].read_text()
    assert "COULD NOT RUN" in text
    assert reason in text


def test_an_error_report_never_replaces_the_kept_checkpoint(run_cli: Run, recorded: Path, tmp_path: Path) -> None:
    """A report path that is also --save-checkpoint: the audit refuses it (named twice), and neither that refusal
    nor a usage error writes an error report over the checkpoint kept from last night (the next --since)."""
    kept = tmp_path / "cp.json"
    assert run_cli("audit", "--db", str(recorded), "--save-checkpoint", str(kept))[0] == 0
    before = kept.read_bytes()
    for extra in ((), ("--no-such-option",)):
        status, _, _ = run_cli("audit", "--db", str(recorded), "--save-checkpoint", str(kept),
                               "--report", f"json:{kept}", *extra)
        assert status == 2
        assert kept.read_bytes() == before


def test_a_usage_error_beside_an_unusable_db_is_still_the_usage_error(run_cli: Run, tmp_path: Path) -> None:
    """Writing the error reports of a usage error needs the database's location (the guards); an unusable --db
    there must not replace the usage error with its own: a warning, then the usage error, exit 2."""
    status, out, err = run_cli("audit", "--db", f"sqlite:///{tmp_path / 'x.db'}?mode=ro", "--no-such-option",
                               "--report", f"json:{tmp_path / 'a.json'}")
    assert (status, out) == (2, "")
    lines = err.splitlines()
    assert lines[0].startswith("compute-budget: warning: no report file replaced: ")
    assert lines[1].startswith("compute-budget: error: No such option")


def test_a_dash_is_no_report_file(
    run_cli: Run, recorded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--output -` and `--report json:-` wrote a file named '-' in the working folder; '-' is refused."""
    monkeypatch.chdir(tmp_path)
    for argv in (("--output", "-"), ("--report", "json:-")):
        status, out, err = run_cli("audit", "--db", str(recorded), *argv)
        assert (status, out) == (2, "")
        assert "'-' names no file here" in err
    assert not (tmp_path / "-").exists()


def test_a_command_line_that_does_not_parse_never_writes_over_the_database(
    run_cli: Run, recorded: Path, tmp_path: Path
) -> None:
    """The error reports of a usage error go through the same guards: a report path that is the database is left
    alone, the others say why."""
    before = recorded.read_bytes()
    status, _, _ = run_cli("audit", "--db", str(recorded), "--no-such-option", "--report", f"junit:{recorded}",
                           "--report", f"json:{tmp_path / 'a.json'}")
    assert status == 2
    assert recorded.read_bytes() == before
    assert json.loads((tmp_path / "a.json").read_text())["clean"] is False


def test_no_error_report_where_the_output_guards_refuse(run_cli: Run, recorded: Path, tmp_path: Path) -> None:
    """A report path the guards refuse (the database itself) is never written; the other reports say why."""
    before = recorded.read_bytes()
    status, _, err = run_cli("audit", "--db", str(recorded), "--report", f"junit:{recorded}",
                             "--report", f"json:{tmp_path / 'a.json'}")
    assert status == 2
    assert "database being audited" in err
    assert recorded.read_bytes() == before
    document = json.loads((tmp_path / "a.json").read_text())
    assert document["clean"] is False
    assert "database being audited" in document["error"]


def test_a_missing_since_checkpoint_says_what_to_do(run_cli: Run, recorded: Path, tmp_path: Path) -> None:
    """--since with no file: exit 2 naming the first-night step, and never a silent pass."""
    status, out, err = run_cli("audit", "--db", str(recorded), "--since", str(tmp_path / "checkpoint.json"))
    assert (status, out) == (2, "")
    assert f"compute-budget audit --db {recorded} --save-checkpoint {tmp_path / 'checkpoint.json'}" in err
    assert "lost or removed" in err


def _disk_full_under(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writes to files in `folder` fail as on a full disk (ENOSPC, at the write itself); removing a file still works,
    as it does on a full disk. Fault injection at the write seam: `os.fdopen` of a file there returns a stream that
    cannot take a byte."""
    import errno
    import io
    import os

    real_fdopen = os.fdopen

    class FullDisk(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __exit__(self, *args: object) -> None:
            self.close()

    def fdopen(fd: int, *args: object, **kwargs: object) -> object:
        try:
            where = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            where = None
        if where is not None and where.parent == folder:
            os.close(fd)
            return FullDisk()
        return real_fdopen(fd, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(os, "fdopen", fdopen)


@pytest.mark.parametrize("store_target", ["sqlite", "postgresql"], indirect=True)
def test_a_report_that_cannot_be_replaced_is_removed_and_said_once(
    run_cli: Run, store_target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28 p: the disk holding the reports fills up after last night's CLEAN. The audit that cannot replace
    its reports removes them (removing needs no space), warns once per report (not twice), and exits 2 naming them
    in one error line; the text report still reaches stdout. Before, last night's `"clean": true` stayed."""
    assert run_cli("record", EXAMPLES, "--db", store_target)[0] == 0
    reports = tmp_path / "reports"
    reports.mkdir()
    json_report, junit_report = reports / "audit.json", reports / "audit.xml"
    options = ("--report", f"json:{json_report}", "--report", f"junit:{junit_report}")
    assert run_cli("audit", "--db", store_target, *options)[0] == 0
    assert json.loads(json_report.read_text())["clean"] is True  # last night's
    _disk_full_under(reports, monkeypatch)
    status, out, err = run_cli("audit", "--db", store_target, *options)
    assert status == 2, err
    assert not json_report.exists()
    assert not junit_report.exists()
    assert "CLEAN" in out
    lines = err.splitlines()
    for path in (json_report, junit_report):
        said = [line for line in lines if line.startswith(f"compute-budget: warning: cannot write {path}")]
        assert len(said) == 1, err
        assert "No space left on device; removed it" in said[0]
    errors = [line for line in lines if line.startswith("compute-budget: error:")]
    assert len(errors) == 1, err
    assert f"the audit finished (CLEAN), but {json_report}, {junit_report} could not be written" in errors[0]
    assert len(lines) == len(set(lines)), err  # every warning once (PostgreSQL adds its role warning, once too)
    assert [path.name for path in reports.iterdir()] == []  # no temporary file left behind


def test_a_report_that_cannot_be_replaced_when_the_audit_cannot_run_is_removed(
    run_cli: Run, recorded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audit cannot run (its --since file is gone) and its report cannot be replaced: the report is removed,
    said once, and the one error is the audit's own."""
    reports = tmp_path / "reports"
    reports.mkdir()
    json_report = reports / "audit.json"
    assert run_cli("audit", "--db", str(recorded), "--report", f"json:{json_report}")[0] == 0
    _disk_full_under(reports, monkeypatch)
    status, _, err = run_cli(
        "audit", "--db", str(recorded), "--since", str(tmp_path / "gone.json"), "--report", f"json:{json_report}"
    )
    assert status == 2
    assert not json_report.exists()
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith(f"compute-budget: warning: cannot write {json_report}")
    assert "does not exist" in lines[1]
