"""Spec 12.2 on both backends: concurrent `record()` and small `record_many()` calls share one transaction when one
is in flight, each caller gets its own result, a caller's own error fails only it, and a lone caller or a large
batch runs a transaction of its own at once. Contention is made by structure: the first transaction is held until
the others have queued."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest

from compute_budget import BudgetStore, GateConflict, GateTooLarge, InputNotJson
from compute_budget.core.log.note import SignerKey
from compute_budget.store.append import Appender
from compute_budget.store.group_commit import GroupCommit
from compute_budget.store.plan import DecidedGates
from tests.backends import query
from tests.conftest import gate_lines, make_gate
from tests.sealing import signer


def checkpoints(target: str) -> int:
    return int(query(target, "SELECT COUNT(*) FROM compute_budget_checkpoints")[0][0])


def stored_ids(target: str) -> list[str]:
    return [row[0] for row in query(target, "SELECT budget_id FROM compute_budget_decisions ORDER BY seq")]


@dataclass
class Held:
    """`Appender.append` instrumented: every transaction's thread and gate count; with `hold` set, the next one is
    held until `release()`."""

    calls: list[tuple[int, int | None]] = field(default_factory=list)
    entered: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    hold: bool = False

    def release(self) -> None:
        self.released.set()


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Held:
    state = Held()
    real = Appender.append

    def append(self: Appender, gates: Iterable[object], options: Any) -> Any:
        grouped = len(gates.gates) if isinstance(gates, DecidedGates) else None  # None: the caller's input as given
        state.calls.append((threading.get_ident(), grouped))
        if state.hold:
            state.hold = False
            state.entered.set()
            assert state.released.wait(30)
        return real(self, gates, options)

    monkeypatch.setattr(Appender, "append", append)
    return state


def group_of(store: BudgetStore) -> GroupCommit:
    group: GroupCommit = store._writing._group
    return group


def in_order(store: BudgetStore, held: Held, calls: list[Callable[[], object]]) -> list[object]:
    """Run `calls[0]` (held in its transaction), queue each later call in turn, release; each call's result or
    error, in order."""
    outcomes: list[object] = [None] * len(calls)

    def run(place: int) -> None:
        try:
            outcomes[place] = calls[place]()
        except Exception as error:  # the outcome this caller gets
            outcomes[place] = error

    threads = [threading.Thread(target=run, args=(place,)) for place in range(len(calls))]
    held.hold = True
    threads[0].start()
    assert held.entered.wait(30)
    for place, thread in enumerate(threads[1:], start=1):
        thread.start()
        while group_of(store).queued() < place:
            thread.join(0.001)
    held.release()
    for thread in threads:
        thread.join(60)
    return outcomes


@pytest.fixture
def key() -> SignerKey:
    return signer()


def test_queued_callers_share_one_transaction_in_queue_order(
    store_target: str, key: SignerKey, held: Held, tmp_path: Any
) -> None:
    """One held transaction, five callers queued behind it: two transactions (two checkpoints at interval 0),
    rows in queue order, and each caller its own result, an already present gate counted as present."""
    lines = gate_lines(6)
    with BudgetStore.open(store_target, signing_key=key, writer_state=tmp_path / "w.state") as store:
        calls: list[Callable[[], object]] = [lambda: store.record(lines[0])]
        calls += [lambda line=line: store.record(line) for line in lines[1:4]]
        calls.append(lambda: store.record_many([lines[4], lines[1], lines[5]], results=True))
        outcomes = in_order(store, held, calls)
        head = store.head()
    assert [(result.seq, result.new) for result in outcomes[:4]] == [(1, True), (2, True), (3, True), (4, True)]
    batch = outcomes[4]
    assert (batch.new, batch.present, batch.head) == (2, 1, head)
    assert [(item.index, item.seq, item.new) for item in batch.results] == [(0, 5, True), (1, 2, False), (2, 6, True)]
    assert [gate for _, gate in held.calls] == [1, 6]  # the second transaction took every queued call
    assert checkpoints(store_target) == 2
    assert stored_ids(store_target) == [result.decision.budget_id for result in outcomes[:4]] + [
        item.budget_id for item in batch.results if item.new
    ]


def test_a_callers_own_error_fails_only_that_call(store_target: str, held: Held) -> None:
    """In one group: a conflict with the store, a conflict with an earlier call of the group and a gate too large
    each fail their own call and write nothing of it (a later call may record what the failed one did not); the
    same gate twice is present; a malformed gate is recorded; the rest commit."""
    stored, extra, other, late = (json.dumps(make_gate(decision_id=name)) for name in ("s", "c", "d", "m"))
    with BudgetStore.open(store_target) as store:
        store.record(stored)
        changed = json.dumps(make_gate(decision_id="s", residual_ids=["other"]))
        first = json.dumps(make_gate(decision_id="b"))
        outcomes = in_order(store, held, [
            lambda: store.record(first),
            lambda: store.record(late),
            lambda: store.record_many([extra, changed]),  # conflicts with the store
            lambda: store.record(other),
            lambda: store.record(json.dumps(make_gate(decision_id="m", residual_ids=["x"]))),  # with call 2
            lambda: store.record(late),
            lambda: store.record('{"not": "a gate"}'),
            lambda: store.record(json.dumps(make_gate(decision_id="big", candidate_organ="x" * 70_000))),
            lambda: store.record(json.dumps(make_gate(decision_id="c", residual_ids=["y"]))),  # call 2's failed
        ])
        with pytest.raises(InputNotJson):  # decided in the caller's thread: never queued
            store.record("not json")
        assert store.count() == 6
    assert isinstance(outcomes[2], GateConflict)
    assert outcomes[2].budget_id == json_id(stored)
    assert isinstance(outcomes[4], GateConflict)
    assert outcomes[4].budget_id == json_id(late)
    assert isinstance(outcomes[7], GateTooLarge)
    assert outcomes[7].index == 0
    assert [(outcome.seq, outcome.new) for outcome in (outcomes[1], outcomes[3], outcomes[5])] == [
        (3, True), (4, True), (3, False)
    ]
    assert outcomes[6].decision.reason_code == "malformed_gate_decision"
    assert outcomes[6].seq == 5
    assert (outcomes[8].seq, outcomes[8].decision.budget_id) == (6, json_id(extra))
    assert stored_ids(store_target)[5] == json_id(extra)


def json_id(text: str) -> str:
    from compute_budget import decide_json

    return decide_json(text).budget_id


def test_a_lone_caller_runs_its_own_transaction_at_once(store_target: str, held: Held) -> None:
    """No transaction in flight: the caller's own thread runs one, with just its gate, and nobody waits."""
    with BudgetStore.open(store_target) as store:
        assert store.record(gate_lines(1)[0]).seq == 1
        assert group_of(store).queued() == 0
    assert held.calls == [(threading.get_ident(), 1)]


@pytest.mark.parametrize("shape", ["large", "stream"])
def test_a_large_or_streaming_batch_never_joins(store_target: str, held: Held, shape: str) -> None:
    """A batch of more than 1,000 gates, or a stream, runs while a group's transaction is held: it queued
    behind nothing."""
    lines = gate_lines(1001 if shape == "large" else 3, prefix="big")
    gates: Iterable[str] = lines if shape == "large" else iter(lines)
    with BudgetStore.open(store_target) as store:
        first = threading.Thread(target=store.record, args=(gate_lines(1)[0],))
        held.hold = True
        first.start()
        assert held.entered.wait(30)
        try:
            result = store.record_many(gates)
            assert group_of(store).queued() == 0
            assert held.calls[1] == (threading.get_ident(), None)
        finally:
            held.release()
            first.join(60)
        assert (result.new, result.head.seq) == (len(lines), len(lines))
        assert store.count() == len(lines) + 1


def test_many_threads_each_get_their_own_rows(store_target: str, key: SignerKey, tmp_path: Any) -> None:
    """16 threads recording 5 gates each, unheld: every row stored once, each caller's seq holds its gate."""
    lines = gate_lines(80)
    results: dict[int, Any] = {}
    with BudgetStore.open(store_target, signing_key=key, writer_state=tmp_path / "w.state") as store:

        def work(start: int) -> None:
            for place in range(start, start + 5):
                results[place] = store.record(lines[place])

        threads = [threading.Thread(target=work, args=(start,)) for start in range(0, 80, 5)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    ids = stored_ids(store_target)
    assert sorted(result.seq for result in results.values()) == list(range(1, 81))
    assert all(ids[result.seq - 1] == json_id(lines[place]) for place, result in results.items())
    assert 1 <= checkpoints(store_target) <= 80
