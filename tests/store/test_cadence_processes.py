"""Spec 12.1 across processes: a writer that exits without `close()` has its tail signed at exit, and processes
sharing one writer state sign at most once per interval between them."""

from __future__ import annotations

import datetime as dt
import itertools
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.backends import query
from tests.conftest import REPO_ROOT
from tests.witnessing import LOG, ORIGIN

WRITER = """
import sys, time
from compute_budget import BudgetStore
from tests.conftest import gate_lines
target, key, state, prefix, interval, seconds = sys.argv[1:7]
store = BudgetStore.open(target, origin=sys.argv[7], signing_key=key, writer_state=state,
                         checkpoint_interval=float(interval))
end, number = time.monotonic() + float(seconds), 0
while True:
    store.record(gate_lines(1, prefix=f"{prefix}-{number}")[0])
    number += 1
    if number >= 3 and time.monotonic() >= end:  # at least 3 rows, however slow a loaded machine is
        break
    time.sleep(0.01)
print(number)
"""  # no close(): the atexit hook signs the tail


def _writer(target: str, folder: Path, prefix: str, interval: float, seconds: float) -> subprocess.Popen[str]:
    key = folder / "writer.key"
    if not key.exists():
        key.write_text(LOG.format() + "\n")
        key.chmod(0o600)
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, target, str(key), str(folder / "writer.state"), prefix, str(interval),
         str(seconds), ORIGIN],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _sizes(target: str) -> list[int]:
    return [row[0] for row in query(target, "SELECT tree_size FROM compute_budget_checkpoints ORDER BY id")]


@pytest.mark.slow
def test_a_writer_that_exits_without_close_has_its_tail_signed(store_target: str, tmp_path: Path) -> None:
    """S = 30: the signer's first signature comes at once, the rest waits for the interval; the process exits
    without `close()` and the exit hook signs the tail."""
    writer = _writer(store_target, tmp_path, "exit", 30, 0.3)
    out, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, err
    recorded = int(out)
    assert recorded > 1
    sizes = _sizes(store_target)
    assert sizes[-1] == recorded
    assert len(sizes) <= 2


@pytest.mark.slow
def test_two_processes_sharing_a_state_sign_once_per_interval_between_them(tmp_path: Path) -> None:
    """Two writers with one key and one writer state record for 2 s with S = 0.5: between them the store's
    checkpoints are at least S apart (but for each one's exit), and the newest covers every row."""
    target = str(tmp_path / "store.db")
    interval, seconds = 0.5, 2.0
    began = time.monotonic()
    writers = [_writer(target, tmp_path, f"p{number}", interval, seconds) for number in range(2)]
    for writer in writers:
        _, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
    elapsed = time.monotonic() - began
    sizes = _sizes(target)
    count = query(target, "SELECT count(*) FROM compute_budget_decisions")[0][0]
    assert sizes[-1] == count
    assert len(sizes) <= math.ceil(elapsed / interval) + 2
    assert count > 2 * len(sizes)  # the rows were not signed one by one
    times = sorted(dt.datetime.strptime(row[0], "%Y-%m-%dT%H:%M:%S.%fZ") for row in query(
        target, "SELECT recorded_at FROM compute_budget_checkpoints"))
    close_together = [later - earlier for earlier, later in itertools.pairwise(times)
                      if (later - earlier).total_seconds() < interval * 0.9]
    assert len(close_together) <= 2, close_together  # the two exits may sign at any time
