"""The store under several processes: concurrent writers, and a writer killed mid-batch."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from compute_budget import BudgetStore, StoreDamaged
from compute_budget.auditor.scan import audit
from compute_budget.keys.key_files import load_signer_key
from tests.backends import execute, insert_sql, is_postgres, rows
from tests.conftest import REPO_ROOT, gate_lines
from tests.killing import kill_run, kill_writer, last_signed_size, writer_files
from tests.sealing import forged_row

WRITER = """
import sys
from compute_budget import BudgetStore
from tests.conftest import gate_lines
target, prefix, mode, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
lines = gate_lines(count, prefix=prefix)
with BudgetStore.open(target) as store:
    if mode == "single":
        for line in lines:
            store.record(line)
    elif mode == "batches":
        for start in range(0, count, 50):
            store.record_many(lines[start:start + 50])
    else:
        def endless():
            index = 0
            while True:
                yield from gate_lines(1000, prefix=f"{prefix}-{index}")
                index += 1
        store.record_many(endless())
"""


def _writer(target: str, prefix: str, mode: str, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, target, prefix, mode, str(count)],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


@pytest.mark.slow
def test_four_concurrent_writers_lose_nothing_and_never_fork(store_target: str) -> None:
    """4 processes appending at once: every row present, seq 1..N without a gap, the chain valid."""
    with BudgetStore.open(store_target) as store:
        store.record_many(gate_lines(10, prefix="seed"))
    writers = [
        _writer(store_target, f"w{index}", "single" if index % 2 else "batches", 150) for index in range(4)
    ]
    for writer in writers:
        _, err = writer.communicate(timeout=300)
        assert writer.returncode == 0, err
        assert "locked" not in err
    with BudgetStore.open(store_target, readonly=True) as store:
        rows = list(store)
    assert [row.seq for row in rows] == list(range(1, 611))
    assert len({row.decision.budget_id for row in rows}) == 610
    report = audit(store_target)
    assert report.clean, report.findings[:5]
    assert report.rows_checked == 610


@pytest.mark.slow
def test_writer_killed_mid_batch_leaves_the_store_intact(db_path: Path) -> None:
    """SIGKILL during a huge batch: integrity_check ok, none of that batch stored, the chain still valid."""
    with BudgetStore.open(db_path) as store:
        store.record_many(gate_lines(25, prefix="before"))
    writer = _writer(str(db_path), "doomed", "endless", 0)
    wal = db_path.with_name(db_path.name + "-wal")
    deadline = time.monotonic() + 120  # a loaded machine (CI beside other work) is slow to start it
    while (not wal.exists() or wal.stat().st_size < 2_000_000) and time.monotonic() < deadline:
        assert writer.poll() is None, writer.stderr.read() if writer.stderr else ""
        time.sleep(0.05)
    assert wal.stat().st_size >= 2_000_000, "the writer never got going"
    os.kill(writer.pid, signal.SIGKILL)
    writer.communicate(timeout=30)  # reaps the process and closes its pipes
    assert writer.returncode == -signal.SIGKILL
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    with BudgetStore.open(db_path, readonly=True) as store:
        assert store.count() == 25
        assert not any(row.decision.gate_decision_id.startswith("doomed") for row in store)
    report = audit(db_path)
    assert report.clean, report.findings
    with BudgetStore.open(db_path) as store:  # and the store takes new appends on top of the survivors
        assert store.record_many(gate_lines(5, prefix="after")).head.seq == 30


@pytest.mark.slow
def test_a_signing_writer_killed_at_random_points_loses_nothing_and_leaves_nothing_unsigned(
    store_target: str, tmp_path: Path
) -> None:
    """Spec 12.3's kill test, three seeded runs in all (50 per backend: benchmarks/kill_runs.py): a writer
    recording with its key is SIGKILLed; every gate it acknowledged is stored, the next writer with the same key
    and state appends, and the trusted audit is clean."""
    seeds = (1,) if is_postgres(store_target) else (1, 2)
    rows = 0
    for seed in seeds:
        run = kill_run(store_target, tmp_path, seed, most=12)
        assert run.acknowledged >= 1
        assert run.rows > rows + run.acknowledged  # the acknowledged gates and the next writer's, on the last run
        rows = run.rows


@pytest.mark.slow
def test_a_writer_killed_mid_interval_leaves_one_interval_unsigned_and_the_next_writer_signs_it(
    store_target: str, tmp_path: Path
) -> None:
    """Spec 12.3 with `checkpoint_interval=0.3`: a writer SIGKILLed at a random point inside an interval loses no
    acknowledged gate; the rows it left unsigned are only those after its last signature, none acknowledged over an
    interval before the kill; the next writer with that key and state signs them (by recording, `flush()` or
    `compute-budget sign`), and the trusted audit is clean. 50 runs per backend: benchmarks/kill_runs.py."""
    seeds = (20,) if is_postgres(store_target) else (5, 10)  # the next writer: `sign`; `sign`, then `flush()`
    runs = [kill_run(store_target, tmp_path, seed, most=24, interval=0.3) for seed in seeds]
    assert {run.next_writer for run in runs} == ({"sign"} if is_postgres(store_target) else {"sign", "flush"})
    assert all(run.acknowledged >= 1 for run in runs)
    assert any(run.signed_before > 0 for run in runs)  # the killed writer's signer had signed, within its life
    assert sum(run.bounded for run in runs) > 0  # the one-interval bound checked rows, not none


@pytest.mark.slow
def test_a_row_an_insider_adds_after_a_killed_writers_tail_is_refused_and_never_signed(
    store_target: str, tmp_path: Path, run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    """Spec 12.3: the tail a writer killed mid-interval left is signable by the next writer, but no other unsigned
    row is: a correctly chained row an insider appends after the tail makes the head match neither the newest
    trusted checkpoint nor the state's committed head, so the next writer and `compute-budget sign` refuse, naming
    the rows from the last signature on, and write and sign nothing."""
    key, state = writer_files(tmp_path)
    acknowledged, _ = kill_writer(store_target, key, state, 19, 24, 0.3)
    signed = last_signed_size(store_target)
    execute(store_target, insert_sql(forged_row(store_target)))
    with BudgetStore.open(store_target, readonly=True) as reader:
        forged = reader.head().seq
    assert forged > max(row.seq for row in acknowledged)  # the insider's row, after the killed writer's tail
    before = (rows(store_target), last_signed_size(store_target))
    named = rf"rows {signed + 1}\.\.{forged} were appended by no trusted writer"
    with BudgetStore.open(store_target, signing_key=str(key), writer_state=state, checkpoint_interval=0.3) as store:
        with pytest.raises(StoreDamaged, match=named):
            store.record(gate_lines(1, prefix="next")[0])
        with pytest.raises(StoreDamaged, match=named):
            store.flush()
    status, _, err = run_cli("sign", "--db", store_target, "--signing-key", str(key), "--writer-state", str(state))
    assert status == 2
    assert re.search(named, err), err
    assert (rows(store_target), last_signed_size(store_target)) == before
    report = audit(store_target, trusted_keys=[load_signer_key(key).verifier()])
    assert [(finding.kind.value, finding.seq) for finding in report.findings] == [("unattested_rows", signed + 1)]
