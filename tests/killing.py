"""The kill test of spec 12.3: a writer recording gates with its key is killed (SIGKILL) at a random point; the
next writer with the same key and state goes on, nothing acknowledged is lost, and every row is signed. Used by
tests/store/test_writer_processes.py (a few runs) and benchmarks/kill_runs.py (many)."""

from __future__ import annotations

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
from tests.conftest import REPO_ROOT, gate_lines

KILLED_WRITER = """
import sys
from compute_budget import BudgetStore
from tests.conftest import gate_lines
target, key, state, prefix = sys.argv[1:5]
with BudgetStore.open(target, signing_key=key, writer_state=state) as store:
    index = 0
    while True:
        result = store.record(gate_lines(1, prefix=f"{prefix}-{index}")[0])
        print(result.decision.budget_id, flush=True)  # acknowledged: record() returned
        index += 1
"""


@dataclass(frozen=True, slots=True)
class KillRun:
    """One run: how many gates the killed writer acknowledged, and the rows after the next writer's append."""

    acknowledged: int
    rows: int


def writer_files(folder: Path) -> tuple[Path, Path]:
    """A writer key file and the path of its state file, in `folder`."""
    key = folder / "writer.key"
    if not key.exists():
        write_new_signer_key(key, generate_signer("writer"))
    return key, folder / "writer.state"


def kill_run(target: str, folder: Path, seed: int, *, most: int = 30) -> KillRun:
    """Start a writer, let it acknowledge a random number (1..`most`) of gates, SIGKILL it after a random delay
    (seeded by `seed`), then append again with the same key and state. Raises AssertionError when an acknowledged
    gate is missing, the next writer fails, or the trusted audit is not clean."""
    chance = random.Random(seed)
    key, state = writer_files(folder)
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, target, str(key), str(state), f"run{seed}"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT)])},
    )
    assert child.stdout is not None
    acknowledged = []
    for _ in range(chance.randint(1, most)):
        line = child.stdout.readline()
        assert line, child.stderr.read() if child.stderr else "the writer ended"
        acknowledged.append(line.strip())
    time.sleep(chance.uniform(0, 0.02))  # somewhere inside the next append, or between two
    os.kill(child.pid, signal.SIGKILL)
    rest, _ = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL
    acknowledged += rest.split()
    with BudgetStore.open(target, signing_key=str(key), writer_state=state) as store:
        missing = [budget_id for budget_id in acknowledged if store.get(budget_id) is None]
        assert not missing, f"acknowledged but lost: {missing[:3]}"
        store.record(gate_lines(1, prefix=f"next{seed}")[0])
        size = store.head().seq
    report = audit(target, trusted_keys=[load_signer_key(key).verifier()])
    assert report.clean, report.findings[:3]  # every row signed: no unattested_rows
    return KillRun(len(acknowledged), size)
