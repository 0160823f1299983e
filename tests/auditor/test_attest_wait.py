"""Spec 12.5: the audit and a live writer. Rows above the newest trusted checkpoint wait up to the attest wait for a
covering checkpoint, which counts only once the audit has checked the rows up to it and recomputed its root."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from compute_budget import BudgetStore, audit
from compute_budget.auditor import attest_wait
from compute_budget.auditor.request import attest_wait_seconds
from compute_budget.core.log.checkpoint_body import format_checkpoint
from compute_budget.core.log.note import SignerKey, sign_note
from compute_budget.errors import ArgumentTypeError
from compute_budget.keys.key_files import load_signer_key
from tests.backends import execute, query
from tests.conftest import REPO_ROOT, gate_lines
from tests.killing import last_signed_size, writer_files
from tests.sealing import signer

Run = Callable[..., tuple[int, str, str]]
SIGNED, UNSIGNED = 5, 3  # rows 1..5 under the writer's checkpoint, rows 6..8 appended by no writer's key


class LiveStore:
    """A store whose writer signed rows 1..5, then rows 6..8 appended without its key: the audit's snapshot holds
    them above the newest trusted checkpoint, as it holds a live writer's rows before its next signature."""

    def __init__(self, target: str, folder: Path) -> None:
        self.target, self.key, self.state = target, signer(), folder / "writer.state"
        with BudgetStore.open(target, signing_key=self.key, writer_state=self.state) as store:
            store.record_many(gate_lines(SIGNED, prefix="signed"))
        with BudgetStore.open(target, allow_unsigned=True) as store:
            store.record_many(gate_lines(UNSIGNED, prefix="unsigned"))

    @property
    def verifier(self) -> str:
        return self.key.verifier().format()

    def sign_the_head(self) -> None:
        """The writer appends one more row and signs a checkpoint of size 9 over every row."""
        with BudgetStore.open(self.target, signing_key=self.key, writer_state=self.state) as store:
            store.record_many(gate_lines(1, prefix="later"), adopt_unsigned_through=SIGNED + UNSIGNED)

    def store_forged_root(self, key: SignerKey) -> None:
        """An insider files a checkpoint of the head, size 8, with a root the rows do not give, signed by `key`."""
        with BudgetStore.open(self.target, readonly=True) as store:
            head = store.checkpoint()
        assert head.origin is not None
        note = sign_note(format_checkpoint(head.origin, head.seq, bytes(32), head.chain_hash), key)
        execute(self.target, (
            "INSERT INTO compute_budget_checkpoints (tree_size, key_name, key_hash, note, recorded_at) "
            "VALUES (:size, :name, :hash, :note, '2026-01-01T00:00:00Z')",
            {"size": head.seq, "name": key.name, "hash": f"{key.key_hash:08x}", "note": note},
        ))


@pytest.fixture
def live(store_target: str, tmp_path: Path) -> LiveStore:
    return LiveStore(store_target, tmp_path)


@pytest.fixture
def once_waiting(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Callable[[], None]], None]]:
    """Run an action in another thread once the audit has asked the store for a covering checkpoint (its snapshot
    taken, its rows checked), so that the action happens during the wait and never before the audit."""
    polled = threading.Event()
    real = attest_wait._covering

    def covering(*args: object) -> object:
        polled.set()
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(attest_wait, "_covering", covering)
    threads: list[threading.Thread] = []

    def start(action: Callable[[], None]) -> None:
        def later() -> None:
            assert polled.wait(10)
            time.sleep(0.3)
            action()

        threads.append(threading.Thread(target=later, daemon=True))
        threads[-1].start()

    yield start
    for thread in threads:
        thread.join(10)


@pytest.mark.postgres_smoke
def test_a_live_writer_signing_within_the_wait_extends_the_audit_to_its_checkpoint(
    live: LiveStore, once_waiting: Callable[[Callable[[], None]], None], run_cli: Run, tmp_path: Path
) -> None:
    """The writer signs size 9 while the audit waits: the audit reads rows 9.. in a new snapshot, checks them
    (rows_checked 9, not 8), recomputes the root at 9, and is clean; the report says what it waited."""
    once_waiting(live.sign_the_head)
    text = tmp_path / "audit.txt"
    status, out, err = run_cli("audit", "--db", live.target, "--trusted-key", live.verifier, "--attest-wait", "3",
                               "--format", "json", "--report", f"text:{text}")
    assert status == 0, (out, err)
    report = json.loads(out)
    assert report["clean"] is True
    assert report["rows_checked"] == 9
    assert (report["head"]["seq"], report["attested_size"]) == (9, 9)
    assert report["attest_wait"]["extended_to"] == 9
    said = re.search(r"attest wait   waited (\d+\.\d) s; extended the audit to 9\n", text.read_text())
    assert said is not None, text.read_text()
    assert 0.2 <= float(said.group(1)) < 3


def test_a_dead_writer_leaves_the_rows_unattested_after_the_wait(live: LiveStore) -> None:
    """Nothing signs: after the whole wait (1 s, by this process's clock), rows 6..8 are unattested_rows."""
    began = time.monotonic()
    report = audit(live.target, trusted_keys=[live.verifier], attest_wait=1)
    took = time.monotonic() - began
    assert [(finding.kind.value, finding.seq) for finding in report.findings] == [("unattested_rows", 6)]
    assert took >= 1
    assert report.rows_checked == 8
    assert report.attest_wait is not None
    assert report.attest_wait.extended_to is None
    assert report.attest_wait.said().startswith("waited 1.0 s; no checkpoint a trusted key signed covered row 8")


def test_a_checkpoint_whose_root_the_rows_do_not_give_is_refused(
    live: LiveStore, once_waiting: Callable[[Callable[[], None]], None]
) -> None:
    """An insider with the writer's key files a checkpoint of the head with a forged root while the audit waits: it
    is signed by a trusted key, but the root the audit recomputes differs, so it never counts."""
    once_waiting(lambda: live.store_forged_root(live.key))
    report = audit(live.target, trusted_keys=[live.verifier], attest_wait=3)
    kinds = sorted(finding.kind.value for finding in report.findings)
    assert kinds == ["checkpoint_mismatch", "unattested_rows"], report.findings
    assert not report.clean
    assert report.attested_size == SIGNED
    mismatch = next(finding for finding in report.findings if finding.kind.value == "checkpoint_mismatch")
    assert mismatch.seq == 8
    assert report.attest_wait is not None
    assert report.attest_wait.extended_to is None
    assert "does not count" in report.attest_wait.said()


def test_a_checkpoint_signed_by_an_untrusted_key_is_not_waited_on(
    live: LiveStore, once_waiting: Callable[[Callable[[], None]], None]
) -> None:
    """A checkpoint of the head with the right root, signed by a key the audit does not trust, covers nothing."""
    stranger = signer("writer")  # the writer's name, another key

    def file_a_true_root() -> None:
        with BudgetStore.open(live.target, readonly=True) as store:
            head = store.checkpoint()
        note = sign_note(head.note_text(), stranger)
        execute(live.target, (
            "INSERT INTO compute_budget_checkpoints (tree_size, key_name, key_hash, note, recorded_at) "
            "VALUES (:size, :name, :hash, :note, 'x')",
            {"size": head.seq, "name": live.key.name, "hash": f"{live.key.key_hash:08x}", "note": note},
        ))

    once_waiting(file_a_true_root)
    report = audit(live.target, trusted_keys=[live.verifier], attest_wait=1)
    assert "unattested_rows" in [finding.kind.value for finding in report.findings]
    assert report.attest_wait is not None
    assert report.attest_wait.extended_to is None


def test_the_wait_comes_from_the_argument_else_the_environment_else_five_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("COMPUTE_BUDGET_ATTEST_WAIT")
    assert attest_wait_seconds(None) == 5.0
    monkeypatch.setenv("COMPUTE_BUDGET_ATTEST_WAIT", "2.5")
    assert attest_wait_seconds(None) == 2.5
    assert attest_wait_seconds(0) == 0.0
    for bad in ("soon", "-1", "nan", "inf"):
        monkeypatch.setenv("COMPUTE_BUDGET_ATTEST_WAIT", bad)
        with pytest.raises(ArgumentTypeError, match=r"\$COMPUTE_BUDGET_ATTEST_WAIT is a number of seconds"):
            attest_wait_seconds(None)
    with pytest.raises(ArgumentTypeError, match="attest_wait is a number of seconds"):
        attest_wait_seconds(-0.5)


def test_the_command_line_takes_the_wait_from_the_environment(
    live: LiveStore, run_cli: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--attest-wait` defaults to $COMPUTE_BUDGET_ATTEST_WAIT (the suite sets 0); a bad value is a usage error."""
    monkeypatch.setenv("COMPUTE_BUDGET_ATTEST_WAIT", "0.3")
    status, out, err = run_cli("audit", "--db", live.target, "--trusted-key", live.verifier, "--format", "json")
    assert status == 1, err
    assert json.loads(out)["attest_wait"]["limit_seconds"] == 0.3
    monkeypatch.setenv("COMPUTE_BUDGET_ATTEST_WAIT", "soon")
    status, out, err = run_cli("audit", "--db", live.target, "--trusted-key", live.verifier)
    assert status == 2
    assert "--attest-wait" in err


class LiveWriter:
    """A real writer with `checkpoint_interval=1`, recording a gate every 20 ms in a thread of this process until
    stopped; its signer thread signs the rows as they come, at most once a second."""

    def __init__(self, target: str, folder: Path) -> None:
        self.key = signer()
        self.store = BudgetStore.open(target, signing_key=self.key, writer_state=folder / "writer.state",
                                      checkpoint_interval=1)
        self.store.record_many(gate_lines(5, prefix="first"))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._record, daemon=True)
        self._thread.start()

    def _record(self) -> None:
        index = 0
        while not self._stop.wait(0.02):
            self.store.record(gate_lines(1, prefix=f"live-{index}")[0])
            index += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.store.close()


@pytest.mark.postgres_smoke
def test_an_audit_of_a_live_writer_with_an_interval_waits_for_its_next_signature(
    store_target: str, tmp_path: Path, run_cli: Run
) -> None:
    """A writer with `checkpoint_interval=1` records in a thread while `audit --attest-wait 3` runs: the rows above
    its last signature in the audit's snapshot are covered by its signer's next checkpoint, within the interval; the
    audit reads up to that checkpoint's size and is clean there. (An audit whose snapshot landed between a signature
    and the next row has nothing to wait for and is run again: at most three times.)"""
    writer = LiveWriter(store_target, tmp_path)
    try:
        time.sleep(0.3)
        for _ in range(3):
            status, out, err = run_cli("audit", "--db", store_target, "--trusted-key", writer.key.verifier().format(),
                                       "--attest-wait", "3", "--format", "json")
            report = json.loads(out)
            if report["attest_wait"] is not None:
                break
    finally:
        writer.stop()
    assert status == 0, (out, err)
    assert report["clean"] is True
    waited = report["attest_wait"]
    assert waited is not None, "three snapshots had no row above the newest signature"
    size = waited["extended_to"]
    assert size is not None, waited
    assert (report["head"]["seq"], report["attested_size"], report["rows_checked"]) == (size, size, size)
    assert size in [row[0] for row in query(store_target, "SELECT tree_size FROM compute_budget_checkpoints")]
    assert waited["waited_seconds"] < 1 + 1  # the interval, and the signer's and the poll's slack
    assert waited["said"].endswith(f"; extended the audit to {size}")


SIGNED_THEN_KILLED = """
import sys, time
from compute_budget import BudgetStore
from tests.conftest import gate_lines
target, key, state = sys.argv[1:4]
store = BudgetStore.open(target, signing_key=key, writer_state=state, checkpoint_interval=30)
store.record_many(gate_lines(5, prefix="signed"))
store.flush()
store.record_many(gate_lines(3, prefix="unsigned"))
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.slow
@pytest.mark.postgres_smoke
def test_an_audit_of_a_writer_killed_before_its_next_signature_finds_its_tail_unattested(
    store_target: str, tmp_path: Path
) -> None:
    """A real writer (interval 30 s) signs rows 1..5 with `flush()`, records rows 6..8 and is SIGKILLed before its
    signer's next turn: nothing will cover them, so after the whole wait (1 s) they are `unattested_rows` from the
    row after the last signed size, and the audit took at least the wait."""
    key, state = writer_files(tmp_path)
    child = subprocess.Popen(
        [sys.executable, "-c", SIGNED_THEN_KILLED, store_target, str(key), str(state)], cwd=REPO_ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT)])},
    )
    assert child.stdout is not None
    ready = child.stdout.readline()
    os.kill(child.pid, signal.SIGKILL)
    _, err = child.communicate(timeout=30)
    assert ready == "ready\n", err
    assert last_signed_size(store_target) == SIGNED
    began = time.monotonic()
    report = audit(store_target, trusted_keys=[load_signer_key(key).verifier()], attest_wait=1)
    took = time.monotonic() - began
    assert [(finding.kind.value, finding.seq) for finding in report.findings] == [("unattested_rows", SIGNED + 1)]
    assert took >= 1
    assert (report.attested_size, report.rows_checked) == (SIGNED, SIGNED + UNSIGNED)
    assert report.attest_wait is not None
    assert report.attest_wait.extended_to is None
    assert report.attest_wait.waited >= 1
