"""Spec 12.1 and 12.4 on both backends: with `checkpoint_interval=S` appends do not sign, a signer loop signs at
most once per S (plus `flush()` and `close()`), every row ends up covered, and `record(..., wait=)` returns the
row's tlog-proof once a signed (or witnessed) checkpoint covers it."""

from __future__ import annotations

import math
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from compute_budget import BudgetStore, InputError, StoreError, WitnessTimeout
from compute_budget.auditor.proving import prove
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.tlog_proof import TlogProof
from compute_budget.core.receipts import verify_proof
from tests.backends import query
from tests.conftest import gate_lines
from tests.witnessing import LOG, ORIGIN, WITNESS, WITNESS_KEY, Served


def _sizes(target: str) -> list[int]:
    return [row[0] for row in query(target, "SELECT tree_size FROM compute_budget_checkpoints ORDER BY id")]


def _open(target: str, tmp_path: Path, interval: float, **options: object) -> BudgetStore:
    return BudgetStore.open(target, origin=ORIGIN, signing_key=LOG, writer_state=str(tmp_path / "w.state"),
                            checkpoint_interval=interval, **options)  # type: ignore[arg-type]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_interval_holds_under_load_and_close_covers_every_row(store_target: str, tmp_path: Path) -> None:
    """Four threads record for about a second with S = 0.3: at most one stored checkpoint per interval plus the
    one `close()` stores, and after `close()` the newest covers every row."""
    interval, stop = 0.3, threading.Event()
    store = _open(store_target, tmp_path, interval)
    counter = iter(range(10**6))

    def work(name: str) -> None:
        while not stop.is_set():
            store.record(gate_lines(1, prefix=f"{name}-{next(counter)}")[0])

    threads = [threading.Thread(target=work, args=(f"t{n}",)) for n in range(4)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    stop.set()
    for thread in threads:
        thread.join()
    store.close()
    elapsed = time.monotonic() - began
    sizes = _sizes(store_target)
    count = query(store_target, "SELECT count(*) FROM compute_budget_decisions")[0][0]
    assert count > len(sizes)  # appends did not sign one each
    assert len(sizes) <= math.ceil(elapsed / interval) + 1
    assert sizes[-1] == count
    assert sizes == sorted(sizes)


def test_flush_signs_now_and_close_signs_the_tail(store_target: str, tmp_path: Path) -> None:
    """The signer's first signature is at once; after it, rows wait for the interval (S = 60 here), and `flush()`
    signs them now, returning the note; rows after that are signed by `close()`."""
    with _open(store_target, tmp_path, 60) as store:
        store.record(gate_lines(1, prefix="first")[0])
        deadline = time.monotonic() + 10
        while _sizes(store_target) != [1] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _sizes(store_target) == [1]
        store.record_many(gate_lines(3, prefix="more"))
        time.sleep(0.3)
        assert _sizes(store_target) == [1]  # the interval is not over
        note = store.flush()
        assert Checkpoint.from_note(note).seq == 4
        assert _sizes(store_target) == [1, 4]
        store.record(gate_lines(1, prefix="tail")[0])
    assert _sizes(store_target) == [1, 4, 5]


def test_a_lone_caller_is_not_delayed_by_the_interval(store_target: str, tmp_path: Path) -> None:
    """With S = 30, each `record()` returns long before the interval: appends do not wait for the signer."""
    with _open(store_target, tmp_path, 30) as store:
        store.record(gate_lines(1, prefix="warm")[0])
        began = time.monotonic()
        for number in range(5):
            store.record(gate_lines(1, prefix=f"lone{number}")[0])
        assert time.monotonic() - began < 5


def test_wait_checkpoint_returns_the_rows_tlog_proof(store_target: str, tmp_path: Path) -> None:
    """`wait="checkpoint"` (S = 0.2): the receipt is the text `prove --format tlog-proof` prints for the row, and it
    verifies under the writer's key; `record_many` gives each gate's."""
    with _open(store_target, tmp_path, 0.2) as store:
        store.record(gate_lines(1, prefix="before")[0])
        result = store.record(gate_lines(1, prefix="waited")[0], wait="checkpoint")
        assert result.receipt is not None
        assert verify_proof(result.receipt, [LOG.verifier()]).valid
        proof = TlogProof.parse(result.receipt)
        assert proof.index == result.seq - 1
        batch = store.record_many(gate_lines(2, prefix="batch"), results=True, wait="checkpoint")
        assert [verify_proof(gate.receipt or "", [LOG.verifier()]).valid for gate in batch.results] == [True, True]
    bundle = prove(result.decision.budget_id, store_target, checkpoint=proof.checkpoint)
    assert bundle.to_tlog_proof().encode() == result.receipt


def test_wait_checkpoint_with_interval_0_returns_at_once(store_target: str, tmp_path: Path) -> None:
    """S = 0: the transaction signed the row's checkpoint, which is the receipt's; re-recording the gate gives a
    receipt too (against the newest checkpoint, nothing stored)."""
    with _open(store_target, tmp_path, 0) as store:
        gate = gate_lines(1, prefix="now")[0]
        result = store.record(gate, wait="checkpoint")
        again = store.record(gate, wait="checkpoint")
    assert result.receipt is not None
    assert verify_proof(result.receipt, [LOG.verifier()]).valid
    assert again.receipt == result.receipt
    assert _sizes(store_target) == [1]
    assert prove(result.decision.budget_id, store_target).to_tlog_proof().encode() == result.receipt


def test_wait_witnessed_carries_the_cosignature_in_the_background(
    served: Served, store_target: str, tmp_path: Path
) -> None:
    """S = 0.2 with a witness: results carry no `witnessed`; `wait="witnessed"` returns a receipt whose checkpoint
    carries the witness's cosignature, and `witness_status()` says the size it cosigned."""
    url = f"http://127.0.0.1:{served.port}={WITNESS_KEY}"
    with _open(store_target, tmp_path, 0.2, witnesses=[url], witness_interval=0.2) as store:
        plain = store.record(gate_lines(1, prefix="plain")[0])
        assert plain.witnessed is None
        assert plain.cosigned_by == ()
        result = store.record(gate_lines(1, prefix="witnessed")[0], wait="witnessed")
        assert result.receipt is not None
        verdict = verify_proof(result.receipt, [LOG.verifier()], witnesses=[WITNESS.verifier()],
                               now=int(time.time()))
        assert verdict.valid
        (status,) = store.witness_status()
        assert status.cosigned_size >= 2
        assert status.last_error is None


def test_wait_witnessed_times_out_and_leaves_the_row_recorded(store_target: str, tmp_path: Path) -> None:
    """A witness that never answers: `WitnessTimeout` after `witness_timeout`, carrying the row recorded and
    "0 of 1"; the witness's status names the error."""
    url = f"http://127.0.0.1:{_closed_port()}={WITNESS_KEY}"
    with _open(store_target, tmp_path, 0.2, witnesses=[url], witness_timeout=0.5, witness_interval=0.2) as store:
        with pytest.raises(WitnessTimeout) as raised:
            store.record(gate_lines(1, prefix="lonely")[0], wait="witnessed")
        assert raised.value.cosigned == "0 of 1"
        assert raised.value.result.seq == 1  # type: ignore[attr-defined]
        assert store.count() == 1
        assert store.witness_status()[0].last_error


def test_options_the_interval_refuses(tmp_path: Path) -> None:
    """S > 0 with peer keys names the rule; a wait needs a key (and "witnessed" witnesses); `witness_interval`
    below S and a negative interval are refused; nothing is opened."""
    target = str(tmp_path / "store.db")
    with pytest.raises(InputError, match="peer_keys"):
        _open(target, tmp_path, 1, peer_keys=[LOG.verifier()])
    with pytest.raises(InputError, match="at least checkpoint_interval"):
        _open(target, tmp_path, 2, witness_interval=1)
    with pytest.raises(InputError, match="0 or more"):
        _open(target, tmp_path, -1)
    with BudgetStore.open(target, allow_unsigned=True) as unsigned, pytest.raises(InputError, match="signing key"):
        unsigned.record(gate_lines(1)[0], wait="checkpoint")
    with _open(target, tmp_path, 0) as store, pytest.raises(InputError, match="witnesses"):
        store.record(gate_lines(1)[0], wait="witnessed")


@pytest.mark.slow
def test_a_store_used_after_fork_refuses(tmp_path: Path) -> None:
    """A child of `os.fork()` that records through its parent's store gets `StoreError` (`open the store after
    forking`), and nothing is written; the parent's store goes on."""
    target = str(tmp_path / "store.db")
    with _open(target, tmp_path, 0.5) as store:
        store.record(gate_lines(1, prefix="parent")[0])
        pid = os.fork()
        if pid == 0:  # the child: exit code 3 when refused as the spec words it
            try:
                store.record(gate_lines(1, prefix="child")[0])
            except StoreError as error:
                os._exit(3 if "open the store after forking" in str(error) else 4)
            os._exit(5)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 3
        store.record(gate_lines(1, prefix="parent again")[0])
    assert query(target, "SELECT count(*) FROM compute_budget_decisions") == [(2,)]
    assert _sizes(target)[-1] == 2
