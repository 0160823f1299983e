"""The kill test of spec 12.3: a writer recording gates with its key is killed (SIGKILL) at a random point; the
next writer with the same key and state goes on, nothing acknowledged is lost, and every row is signed. With a
checkpoint interval S > 0 the writer is killed mid-interval: the rows it left unsigned are only those after its
last signature, at most one interval's, and the next writer signs them. Used by tests/store/test_writer_processes.py
(a few runs) and benchmarks/kill_runs.py (many)."""

from __future__ import annotations

import contextlib
import io
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from compute_budget import BudgetStore, audit
from compute_budget.core.log.note import generate_signer
from compute_budget.keys.key_files import load_signer_key, write_new_signer_key
from tests.backends import query
from tests.conftest import REPO_ROOT, gate_lines

KILLED_WRITER = """
import sys, time
from compute_budget import BudgetStore
from tests.conftest import gate_lines
target, key, state, prefix, interval = sys.argv[1:6]
interval = float(interval)
with BudgetStore.open(target, signing_key=key, writer_state=state, checkpoint_interval=interval) as store:
    index = 0
    while True:
        result = store.record(gate_lines(1, prefix=f"{prefix}-{index}")[0])
        # acknowledged: record() returned; the time by the system's monotonic clock, which the parent shares
        print(result.decision.budget_id, result.seq, time.monotonic(), flush=True)
        index += 1
        if interval:
            time.sleep(interval / 6)  # a run spans several intervals, not a burst inside the first
"""
NEXT_WRITERS = ("record", "flush", "sign")  # how the next writer with the key and state signs the tail
SLACK_SECONDS = 0.5  # the signer loop's wake-up, on a loaded 2-core machine, beyond the interval


@dataclass(frozen=True, slots=True)
class KillRun:
    """One run: how many gates the killed writer acknowledged, the rows after the next writer's append, the size
    the killed writer had signed last and how the next writer signed the tail (`record`, `flush` or `sign`)."""

    acknowledged: int
    rows: int
    signed_before: int = 0
    next_writer: str = "record"
    bounded: int = 0  # rows acknowledged over an interval before the kill, so checked to be signed before it
    left_unsigned: int = 0  # the rows after the killed writer's last signature, which the next writer signed


@dataclass(frozen=True, slots=True)
class Acknowledged:
    """A gate the killed writer acknowledged: its `budget_id`, its row's `seq`, and when `record()` returned."""

    budget_id: str
    seq: int
    at: float  # time.monotonic() in the writer when record() returned


def writer_files(folder: Path) -> tuple[Path, Path]:
    """A writer key file and the path of its state file, in `folder`."""
    key = folder / "writer.key"
    if not key.exists():
        write_new_signer_key(key, generate_signer("writer"))
    return key, folder / "writer.state"


def last_signed_size(target: str) -> int:
    """The largest tree size a stored checkpoint signs (0: none)."""
    found = query(target, "SELECT MAX(tree_size) FROM compute_budget_checkpoints")
    return int(found[0][0] or 0)


def _parse(line: str) -> Acknowledged:
    budget_id, seq, at = line.split()
    return Acknowledged(budget_id, int(seq), float(at))


def kill_writer(
    target: str, key: Path, state: Path, seed: int, most: int, interval: float
) -> tuple[list[Acknowledged], float]:
    """Start the writer, let it acknowledge 1..`most` gates, SIGKILL it after a random delay (inside the next append
    or between two; with an interval, anywhere inside one): what it acknowledged, and when it was killed."""
    chance = random.Random(seed)
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, target, str(key), str(state), f"run{seed}", str(interval)],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT)])},
    )
    assert child.stdout is not None
    acknowledged = []
    for _ in range(chance.randint(1, most)):
        line = child.stdout.readline()
        assert line, child.stderr.read() if child.stderr else "the writer ended"
        acknowledged.append(_parse(line))
    time.sleep(chance.uniform(0, interval or 0.02))
    killed_at = time.monotonic()
    os.kill(child.pid, signal.SIGKILL)
    rest, _ = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL
    return acknowledged + [_parse(line) for line in rest.splitlines()], killed_at


def _check_unsigned_tail(acknowledged: list[Acknowledged], killed_at: float, signed: int, interval: float) -> int:
    """Every row acknowledged more than one interval (and the signer's slack) before the kill is under the last
    signature: the killed writer left unsigned only rows after it, at most one interval's. How many rows that
    checked."""
    due = [row for row in acknowledged if row.at < killed_at - interval - SLACK_SECONDS]
    late = [row.seq for row in due if row.seq > signed]
    assert not late, f"rows {late[:3]} acknowledged over {interval} s before the kill, unsigned (signed: {signed})"
    return len(due)


def _sign_the_tail(target: str, key: Path, state: Path, how: str, interval: float, seed: int) -> int:
    """The next writer with the key and state signs the tail `how`: by recording one more gate, by `flush()`, or by
    `compute-budget sign`. The head's size after it."""
    if how == "sign":
        from compute_budget.cli import run

        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            status = run(["sign", "--db", target, "--signing-key", str(key), "--writer-state", str(state)])
        assert status == 0, said.getvalue()
    else:
        with BudgetStore.open(target, signing_key=str(key), writer_state=state,
                              checkpoint_interval=interval) as store:
            if how == "record":
                store.record(gate_lines(1, prefix=f"next{seed}")[0])
            else:
                store.flush()
    with BudgetStore.open(target, readonly=True) as store:
        return store.head().seq


def kill_run(target: str, folder: Path, seed: int, *, most: int = 30, interval: float = 0) -> KillRun:
    """Start a writer (`checkpoint_interval=interval`), let it acknowledge a random number (1..`most`) of gates,
    SIGKILL it after a random delay (seeded by `seed`), then sign the tail with the same key and state (interval 0:
    by appending; above 0: by appending, `flush()` or `compute-budget sign`, by the seed's remainder modulo 3). Raises
    AssertionError when an acknowledged gate is missing, a row acknowledged over an interval before the kill was
    unsigned, the next writer fails, a row is left unsigned, or the trusted audit is not clean."""
    key, state = writer_files(folder)
    acknowledged, killed_at = kill_writer(target, key, state, seed, most, interval)
    signed_before = last_signed_size(target)
    bounded = _check_unsigned_tail(acknowledged, killed_at, signed_before, interval) if interval else 0
    with BudgetStore.open(target, readonly=True) as store:
        missing = [row.budget_id for row in acknowledged if store.get(row.budget_id) is None]
        assert not missing, f"acknowledged but lost: {missing[:3]}"
        left_unsigned = store.head().seq - signed_before
    how = NEXT_WRITERS[seed % len(NEXT_WRITERS)] if interval else "record"
    size = _sign_the_tail(target, key, state, how, interval, seed)
    assert last_signed_size(target) == size, f"after {how}, rows {last_signed_size(target) + 1}..{size} unsigned"
    report = audit(target, trusted_keys=[load_signer_key(key).verifier()])
    assert report.clean, report.findings[:3]  # every row signed: no unattested_rows
    return KillRun(len(acknowledged), size, signed_before, how, bounded, left_unsigned)
