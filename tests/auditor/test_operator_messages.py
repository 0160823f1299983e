"""What an operator is told when something goes wrong: a failing audit names the affected rows first, says what
follows and what to do, in text, JSON and JUnit; a truncation or a consistent rewrite is bounded by the checkpoints;
a command that fails (a full disk, a stopped server, an unreadable input, a malformed witness URL) says so in one
line and leaves no new store; a killed audit leaves no worker and no stale verdict; paging reads each row once."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.conftest import gate_lines

Run = Callable[..., tuple[int, str, str]]


def _night(run_cli: Run, db: Path, folder: Path, name: str, count: int) -> None:
    gates = folder / f"{name}.jsonl"
    gates.write_text("\n".join(gate_lines(count, prefix=name)) + "\n")
    status, _, err = run_cli("record", str(gates), "--db", str(db))
    assert status == 0, err


def test_three_nights_with_seq_50_edited_between_them(run_cli: Run, tmp_path: Path) -> None:
    """Night 1 full and clean, night 2 incremental and clean, seq 50 edited, night 3 incremental: the run names
    seq 50 on its first screen (the affected-rows line before anything else), the JSON names it, and the JUnit
    has one failing case for seq 50."""
    db = tmp_path / "store.db"
    _night(run_cli, db, tmp_path, "one", 120)
    status, _, err = run_cli("audit", "--db", str(db), "--save-checkpoint", str(tmp_path / "n1.json"))
    assert status == 0, err
    _night(run_cli, db, tmp_path, "two", 30)
    status, _, err = run_cli("audit", "--db", str(db), "--since", str(tmp_path / "n1.json"),
                             "--save-checkpoint", str(tmp_path / "n2.json"))
    assert status == 0, err
    with sqlite3.connect(db) as connection:
        connection.execute("DROP TRIGGER compute_budget_decisions_no_update")
        connection.execute("UPDATE compute_budget_decisions SET max_steps = max_steps + 1 WHERE seq = 50")
    junit = tmp_path / "night3.xml"
    status, out, _ = run_cli("audit", "--db", str(db), "--since", str(tmp_path / "n2.json"),
                             "--report", f"junit:{junit}", "--report", f"json:{tmp_path / 'night3.json'}")
    assert status == 1
    lines = out.splitlines()
    assert lines[1].startswith("1 rows affected: seq 50;")  # the first line after the verdict: which rows,
    assert "changed since the --since checkpoint (seq 150) was taken" in lines[1]  # since when,
    assert lines[2].startswith("  what now ")
    assert "--through 49" in lines[2]
    assert "did not hold, so every row was checked" in out
    report = json.loads((tmp_path / "night3.json").read_text())
    assert report["affected_rows"] == {"count": 1, "first": 50, "seqs": [50]}
    assert report["summary"] == {"rows_affected": [50], "rows_affected_count": 1}
    by_kind = {item["kind"]: item for item in report["findings"]}
    assert by_kind["rederive_mismatch"]["cause_seq"] == 50
    assert all(item["action"] for item in report["findings"])
    assert all(item["cause_seq"] in (50, None) for item in report["findings"])
    assert report["escalated"] is True
    assert "rederive_mismatch" in report["findings_by_kind"]
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    assert suite is not None
    row_cases = [case for case in suite.iter("testcase") if case.get("classname") == "compute_budget.audit.rows"]
    assert [case.get("name") for case in row_cases] == ["row 50"]
    assert next(iter(suite.iter("testcase"))).get("name") == "row 50"  # the rows first
    assert row_cases[0].find("failure") is not None
    assert int(suite.get("tests", "0")) == len(list(suite.iter("testcase")))
    assert int(suite.get("failures", "0")) == sum(case.find("failure") is not None for case in suite.iter("testcase"))


def test_a_store_wide_finding_names_what_it_is_about(run_cli: Run, tmp_path: Path) -> None:
    """A schema finding says `the schema`, not `seq ? budget_id ?`; the first screen says no row is named."""
    db = tmp_path / "store.db"
    _night(run_cli, db, tmp_path, "one", 3)
    with sqlite3.connect(db) as connection:
        connection.execute("DROP TRIGGER compute_budget_decisions_no_delete")
    status, out, _ = run_cli("audit", "--db", str(db))
    assert status == 1
    assert "seq ? budget_id ?" not in out
    assert "    the schema: trigger compute_budget_decisions_no_delete" in out
    assert out.splitlines()[1].startswith("0 rows affected: no row check failed (schema_tampered)")


def test_paging_forward_reads_every_row_exactly_once(run_cli: Run, tmp_path: Path) -> None:
    """`list --after-seq A --limit N` and `/api/decisions?after_seq=A&limit=N` (with `next_after_seq`, null at the
    head) page forward over 1,000 rows: each exactly once, oldest first."""
    from starlette.testclient import TestClient

    from compute_budget import BudgetStore
    from compute_budget.web.app import create_app

    db = tmp_path / "store.db"
    with BudgetStore.open(str(db)) as store:
        store.record_many(gate_lines(1000))
    seen_cli: list[int] = []
    after = 0
    while True:
        status, out, err = run_cli("list", "--db", str(db), "--after-seq", str(after), "--limit", "37",
                                   "--format", "jsonl")
        assert status == 0, err
        page = [json.loads(line)["seq"] for line in out.splitlines()]
        if not page:
            break
        seen_cli += page
        after = page[-1]
    assert seen_cli == list(range(1, 1001))
    seen_api: list[int] = []
    with TestClient(create_app(str(db), allowed_hosts=("testserver",))) as client:
        after_seq: int | None = 0
        while after_seq is not None:
            answer = client.get(f"/api/decisions?after_seq={after_seq}&limit=37").json()
            seen_api += [row["seq"] for row in answer["decisions"]]
            after_seq = answer["next_after_seq"]
    assert seen_api == list(range(1, 1001))


def test_the_small_things_an_operator_is_told(run_cli: Run, tmp_path: Path) -> None:
    """An empty input creates no store and says so; --save-checkpoint says what it wrote; a missing --since
    names the --db given; prove warns when its receipt is unsigned; a blocked gate with no spans says so."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    db = tmp_path / "store.db"
    assert run_cli("record", str(empty), "--db", str(db)) == (0, "", f"compute-budget: no gates in {empty}\n")
    assert not db.exists()
    _night(run_cli, db, tmp_path, "one", 3)
    status, _, err = run_cli("audit", "--db", str(db), "--save-checkpoint", str(tmp_path / "n1.json"))
    assert status == 0
    assert f"saved checkpoint seq 3 to {tmp_path / 'n1.json'}" in err
    status, _, err = run_cli("audit", "--db", str(db), "--since", str(tmp_path / "missing.json"))
    assert status == 2
    assert f"compute-budget audit --db {db} --save-checkpoint" in err
    budget_id = str(sqlite3.connect(db).execute("SELECT budget_id FROM compute_budget_decisions").fetchone()[0])
    status, out, err = run_cli("prove", budget_id, "--db", str(db))
    assert status == 0
    assert json.loads(out)["format"]
    assert "warning: no signed checkpoint covers row 1" in err


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) process `pid` has used so far; 0 once it is gone."""
    import os

    try:
        fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime and stime, in clock ticks


def _wait_until(condition: Callable[[], bool], seconds: float) -> bool:
    """Poll `condition` until it holds (True) or `seconds` have passed (False)."""
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.mark.slow
def test_an_audit_killed_outright_leaves_no_worker_and_no_old_verdict(tmp_path: Path) -> None:
    """SIGKILL of `audit --jobs 2` mid-run (a `timeout -s KILL`, the OOM killer): its worker is gone well within
    a second, long before its range would be done, printing nothing, and the report file says the audit has not
    finished instead of keeping last night's CLEAN. The waits are on what the test sees (the worker has used CPU
    time on its rows; it is gone), each bounded, not fixed sleeps that a loaded machine outruns."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from compute_budget import BudgetStore

    db = tmp_path / "store.db"
    with BudgetStore.open(str(db)) as store:
        store.record_many(gate_lines(120_000))
    report = tmp_path / "nightly.json"
    report.write_text(json.dumps({"clean": True, "rows_checked": 120_000, "findings": []}))  # last night's verdict
    audit = subprocess.Popen(
        [sys.executable, "-m", "compute_budget", "audit", "--db", str(db), "--jobs", "2",
         "--report", f"json:{report}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    workers: list[int] = []
    while not workers and time.monotonic() < deadline and audit.poll() is None:
        workers = _children(audit.pid)
        time.sleep(0.01)
    assert workers, "the audit finished before its worker could be seen: give it more rows"
    # The worker is well into its 60,000 rows (more than a second of CPU time) once it has used 0.2 s of it.
    assert _wait_until(lambda: all(_cpu_seconds(pid) >= 0.2 for pid in workers), 30)
    assert all(_alive(pid) for pid in workers), "a worker finished its range before the kill: give it more rows"
    os.kill(audit.pid, signal.SIGKILL)
    audit.wait(10)
    _wait_until(lambda: not any(_alive(pid) for pid in workers), 0.6)
    assert [pid for pid in workers if _alive(pid)] == []
    assert json.loads(report.read_text())["clean"] is False
    assert "has not finished" in json.loads(report.read_text())["error"]
    assert audit.stderr is not None
    with audit.stderr:
        assert b"Traceback" not in audit.stderr.read()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 200 KiB tmpfs, where the test may mount one (root on Linux); else the test is skipped, saying why."""
    import os
    import subprocess

    folder = tmp_path / "small"
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root: run as root to test a full disk")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(folder)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({mounted.stderr.strip()[:100]}): a full disk is not tested")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.slow
def test_a_full_disk_leaves_no_new_store_behind(run_cli: Run, small_disk: Path, tmp_path: Path) -> None:
    """`record` into a new file on a full disk: exit 2, 'the disk is full', and no file, -wal or -shm left."""
    gates = tmp_path / "many.jsonl"
    gates.write_text("\n".join(gate_lines(3000)) + "\n")
    status, out, err = run_cli("record", str(gates), "--db", str(small_disk / "new.db"))
    assert (status, out) == (2, "")
    assert "the disk is full; nothing was written" in err
    assert "cannot write" not in err  # the same words serve a reader, which never writes
    assert err.count("\n") == 1
    assert list(small_disk.iterdir()) == []


@pytest.mark.slow
@pytest.mark.postgres
def test_a_postgresql_server_stopped_mid_append_is_one_line(tmp_path: Path) -> None:
    """The server stopped (immediate shutdown) while `record` appends a large batch: exit 2, exactly one line on
    stderr saying the server closed the connection, no driver noise. The server is stopped once it shows the
    batch's INSERT under way (pg_stat_activity), not after a fixed sleep that a loaded machine could outrun."""
    import subprocess
    import sys

    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from tests import pg_cluster

    if not pg_cluster.available():
        pytest.skip("no PostgreSQL server binaries here: install postgresql to test a server stopped mid-append")
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="cb-stopped-pg-")) / "cluster"
    folder.parent.chmod(0o755)  # the server's user must reach it
    url = pg_cluster.start(folder)
    try:
        gates = tmp_path / "many.jsonl"
        gates.write_text("\n".join(gate_lines(200_000)) + "\n")
        record = subprocess.Popen([sys.executable, "-m", "compute_budget", "record", str(gates), "--db", url],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        watcher = create_engine(url, poolclass=NullPool)

        def appending() -> bool:
            assert record.poll() is None, record.communicate()
            with watcher.connect() as connection:
                return bool(connection.exec_driver_sql(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND state IN "
                    "('active', 'idle in transaction') AND starts_with(query, 'INSERT INTO compute_budget_decisions')"
                ).scalar())

        assert _wait_until(appending, 60)  # into the batch's one transaction: its rows are being inserted
        watcher.dispose()
        pg_ctl = pg_cluster.find_bin("pg_ctl")
        assert pg_ctl is not None
        subprocess.run(pg_cluster._as_server_user([pg_ctl, "-D", str(folder / "data"), "-m", "immediate", "-w",
                                                   "stop"]), capture_output=True, check=True)
        out, err = record.communicate(timeout=60)
    finally:
        pg_cluster.stop(folder)
        folder.parent.rmdir()
    assert record.returncode == 2, (out, err)
    assert err.count("\n") == 1, err
    assert "closed the connection (stopped or crashed)" in err


def test_record_rejects_file_keeps_the_skipped_gates(run_cli: Run, tmp_path: Path) -> None:
    """`--on-conflict skip --rejects FILE` writes each skipped gate as given, one line each, and says so; the
    rest is recorded. `--rejects` without skip, or naming the input, is a usage error (exit 2)."""
    db = tmp_path / "store.db"
    first = tmp_path / "first.jsonl"
    first.write_text('{"not": "a gate", "decision_id": null}\n')
    assert run_cli("record", str(first), "--db", str(db))[0] == 0
    second = tmp_path / "second.jsonl"
    other_malformed = '{"also": "not a gate", "decision_id": null}'
    second.write_text(other_malformed + "\n" + "\n".join(gate_lines(2)) + "\n")
    rejects = tmp_path / "rejects.jsonl"
    status, out, err = run_cli("record", str(second), "--db", str(db), "--on-conflict", "skip",
                               "--rejects", str(rejects))
    assert status == 0, err
    assert "2 new" in out
    assert f"wrote 1 skipped gate to {rejects}" in err
    assert [json.loads(line) for line in rejects.read_text().splitlines()] == [json.loads(other_malformed)]
    assert run_cli("record", str(second), "--db", str(db), "--rejects", str(rejects))[0] == 2
    assert run_cli("record", str(second), "--db", str(db), "--on-conflict", "skip", "--rejects", str(second))[0] == 2
    status, _, err = run_cli("record", str(second), "--db", str(db), "--on-conflict", "skip", "--rejects", str(db))
    assert status == 2
    assert "is the database being recorded into" in err  # not "audited": this is a record


def test_a_consistent_rewrite_is_bounded_by_the_checkpoints_it_no_longer_matches(run_cli: Run, tmp_path: Path) -> None:
    """When every row re-derives and links (row 7 replaced, every later chain hash recomputed), no row
    can be named; the report says between which stored checkpoints the rewrite lies, and what to do."""
    from compute_budget import BudgetStore, audit
    from compute_budget.core.log.note import SignerKey
    from tests.sealing import rewrite_consistently

    db = tmp_path / "store.db"
    key = SignerKey.from_seed("writer", bytes(32))
    with BudgetStore.open(str(db), signing_key=key, writer_state=str(tmp_path / "state")) as store:
        for night in range(4):  # signed checkpoints at 4, 8, 12 and 16
            store.record_many(gate_lines(4, prefix=f"night{night}"))
    rewrite_consistently(db, 7)
    report = audit(str(db))
    assert report.affected_rows == ()
    assert report.rewritten_between == (5, 8)
    assert report.to_dict()["rewritten_between"] == [5, 8]
    status, out, _ = run_cli("audit", "--db", str(db))
    assert status == 1
    assert out.splitlines()[1].startswith("0 rows affected: every row re-derives and links")
    assert "seq 5..8" in out.splitlines()[1]
    assert "--through 4" in out.splitlines()[2]


def test_a_record_whose_input_cannot_be_read_leaves_no_new_store(run_cli: Run, tmp_path: Path) -> None:
    """A missing input or a folder as INPUT: exit 2, one line, and no new, empty database file."""
    for given, said in ((tmp_path / "missing.jsonl", "does not exist"), (tmp_path, "is a folder")):
        db = tmp_path / "new.db"
        status, out, err = run_cli("record", str(given), "--db", str(db))
        assert (status, out) == (2, "")
        assert said in err
        assert err.count("\n") == 1
        assert not db.exists()


@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:abc", "http://127.0.0.1:99999"])
def test_a_witness_url_that_is_no_url_is_one_line(run_cli: Run, tmp_path: Path, url: str) -> None:
    """A malformed witness URL (an unclosed IPv6 bracket, a port that is not a port) is a usage error naming it,
    in `audit --witness-url` and `witness submit` alike, never an 'unexpected' error."""
    from tests.witnessing import WITNESS

    target = f"{url}={WITNESS.verifier().format()}"
    for argv in (("audit", "--db", str(tmp_path / "s.db"), "--witness-url", target),
                 ("witness", "submit", "--db", str(tmp_path / "s.db"), "--witness", target)):
        status, out, err = run_cli(*argv)
        assert (status, out) == (2, "")
        assert "is not a URL" in err
        assert "unexpected" not in err
        assert err.count("\n") == 1
    assert not (tmp_path / "s.db").exists()


def test_a_truncated_tail_is_said_to_be_truncated_not_rewritten(run_cli: Run, tmp_path: Path) -> None:
    """The last rows deleted (with the guard lifted) under a --since checkpoint of the old head: the headline names
    the missing rows as truncated (not 'rewritten consistently from a row in seq 1..20'), and the advice salvages
    the rows that are left (not through 0, an empty store)."""
    from tests.backends import execute

    db = tmp_path / "store.db"
    gates = tmp_path / "gates.jsonl"
    gates.write_text("\n".join(gate_lines(20)) + "\n")
    assert run_cli("record", str(gates), "--db", str(db))[0] == 0
    status, _, err = run_cli("audit", "--db", str(db), "--save-checkpoint", str(tmp_path / "cp.json"))
    assert status == 0, err
    execute(str(db), "DELETE FROM compute_budget_decisions WHERE seq > 18", lift_guard=True)
    status, out, _ = run_cli("audit", "--db", str(db), "--since", str(tmp_path / "cp.json"))
    assert status == 1
    first, what_now = out.splitlines()[1:3]
    assert first.startswith("0 rows affected: history was truncated: the store ends at seq 18")
    assert "rows 19..20 are gone" in first
    assert "rewritten" not in first
    assert "--through 18" in what_now
