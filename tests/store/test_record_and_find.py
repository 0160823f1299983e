"""The store as a practice loop uses it: per-gate results, lookup by gate, filters, skipped conflicts, a closed
store, one row checked, and a failed run's new file removed (issue 11)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from compute_budget import (
    BatchResult,
    BudgetStore,
    GateConflict,
    GateResult,
    RowCheck,
    SkippedConflict,
    StoreClosed,
    StoreError,
    decide,
)
from compute_budget.core.policy.lines import read_gates
from tests.backends import is_postgres, tamper
from tests.conftest import gate_lines, make_gate


def test_record_many_gives_per_gate_results_in_input_order(store_target: str) -> None:
    """results=True: one GateResult per gate, in input order, with budget_id, seq, new and the input line."""
    lines = gate_lines(6)
    with BudgetStore.open(store_target) as store:
        store.record_many(lines[:2])
        text = "\n".join([lines[1], lines[2], "", lines[3], lines[2], lines[0]]).encode()
        batch = store.record_many(read_gates([line + b"\n" for line in text.split(b"\n")]), results=True)
    assert isinstance(batch, BatchResult)
    assert all(isinstance(result, GateResult) for result in batch.results)
    ids = [decide(json.loads(line)).budget_id for line in lines]
    assert [(r.index, r.budget_id, r.seq, r.new, r.line) for r in batch.results] == [
        (0, ids[1], 2, False, 1),
        (1, ids[2], 3, True, 2),
        (2, ids[3], 4, True, 4),  # line 3 is blank
        (3, ids[2], 3, False, 5),  # repeated within the batch: the seq of its first occurrence
        (4, ids[0], 1, False, 6),
    ]
    assert (batch.new, batch.present, batch.head.seq) == (2, 3, 4)


def test_per_gate_results_only_when_asked(store_target: str) -> None:
    """Without results=True the batch carries no per-gate objects (the bulk path stays as it was)."""
    with BudgetStore.open(store_target) as store:
        batch = store.record_many(gate_lines(3))
    assert batch.results == ()
    assert batch.conflicts == ()
    assert batch.new == 3


def test_per_gate_results_span_chunks(store_target: str) -> None:
    """Indexes keep counting across the store's chunks of 500 gates."""
    lines = gate_lines(1203)
    with BudgetStore.open(store_target) as store:
        store.record_many(lines[600:700])
        batch = store.record_many(lines, results=True)
    assert [result.index for result in batch.results] == list(range(1203))
    assert sum(not result.new for result in batch.results) == 100
    assert sorted(result.seq for result in batch.results) == list(range(1, 1204))
    assert all(result.line is None for result in batch.results)


def test_find_by_gate(store_target: str) -> None:
    """find_by_gate: every stored decision of a gate's decision_id, in seq order; [] for an unknown gate."""
    with BudgetStore.open(store_target) as store:
        store.record_many(gate_lines(3))
        first = store.record(make_gate(decision_id="gate-x"))
        second = store.record(make_gate(decision_id="gate-x", status="blocked"))
        found = store.find_by_gate("gate-x")
        assert [stored.seq for stored in found] == [first.seq, second.seq]
        assert [stored.decision for stored in found] == [first.decision, second.decision]
        assert store.find_by_gate("gate-missing") == []


def test_iter_decisions_filters(store_target: str) -> None:
    """Filters by reason, policy version, gate and seq bounds combine with each other and with the limit."""
    with BudgetStore.open(store_target) as store:
        store.record_many(gate_lines(12))
        assert [row.seq for row in store.iter_decisions(reason_code="eligible_missing_role")] == [1]
        assert [row.seq for row in store.iter_decisions(reason_code="gate_blocked")] == [5, 11]
        assert [row.seq for row in store.iter_decisions(after_seq=3, before_seq=7)] == [4, 5, 6]
        assert [row.seq for row in store.iter_decisions(after_seq=3, before_seq=7, limit=2)] == [4, 5]
        assert [row.seq for row in store.iter_decisions(gate_decision_id="gate-0000004")] == [5]
        assert len(list(store.iter_decisions(policy_version="compute_budget.v1"))) == 12
        assert list(store.iter_decisions(policy_version="compute_budget.v2")) == []
        both = store.iter_decisions(status="budget_allowed", after_seq=6)
        assert [row.seq for row in both] == [7, 8, 9]


def test_skip_conflicts_records_every_other_gate(store_target: str) -> None:
    """on_conflict="skip": the conflicting gates (stored, or earlier in the batch) are left out and listed
    with their input line and differing keys; every other gate is recorded."""
    changed = json.dumps(make_gate(residual_ids=["residual-99"]))
    twice = json.dumps(make_gate(decision_id="twice"))
    twice_changed = json.dumps(make_gate(decision_id="twice", candidate_organ="binder"))
    with BudgetStore.open(store_target) as store:
        store.record(make_gate())
        lines = [*gate_lines(2), changed, twice, twice_changed, gate_lines(3)[2]]
        text = ("\n".join(lines) + "\n").encode()
        batch = store.record_many(read_gates(text.splitlines(keepends=True)), on_conflict="skip", results=True)
        assert batch.conflicts == (
            SkippedConflict(2, decide(make_gate()).budget_id, 3, ("residual_ids",), changed),
            SkippedConflict(4, decide(make_gate(decision_id="twice")).budget_id, 5, ("candidate_organ",),
                            twice_changed),
        )  # each with the gate as given (what `record --rejects FILE` writes)
        assert (batch.new, batch.present) == (4, 0)
        assert [result.index for result in batch.results] == [0, 1, 3, 5]
        assert store.count() == 5
        stored = store.get(decide(make_gate()).budget_id)
        assert stored is not None
        assert "residual-17" in stored.gate_input


def test_raise_stays_the_default(store_target: str) -> None:
    """Without on_conflict the conflict raises and nothing of the batch is written."""
    with BudgetStore.open(store_target) as store:
        store.record(make_gate())
        with pytest.raises(GateConflict):
            store.record_many([*gate_lines(2), json.dumps(make_gate(residual_ids=[]))])
        assert store.count() == 1
        with pytest.raises(ValueError, match="on_conflict"):
            store.record_many(gate_lines(1), on_conflict="ignore")  # type: ignore[arg-type]


def test_a_closed_store_refuses_every_method(store_target: str) -> None:
    """After close(), record and every other method raise StoreClosed, a StoreError; close() stays harmless."""
    store = BudgetStore.open(store_target)
    result = store.record(make_gate())
    store.close()
    store.close()
    assert store.closed
    calls = [
        lambda: store.record(make_gate(decision_id="late")),
        lambda: store.record_many(gate_lines(2)),
        lambda: store.get(result.decision.budget_id),
        lambda: store.find(result.decision.budget_id[:8]),
        lambda: store.find("zz"),
        lambda: store.find_ids(result.decision.budget_id[:8]),
        lambda: store.find_by_gate("gate-0001"),
        lambda: store.check(result.decision.budget_id),
        lambda: store.iter_decisions(),
        lambda: iter(store),
        lambda: store.iter_raw_rows(),
        lambda: store.scan(0, 1),
        lambda: store.count(),
        lambda: store.head(),
        lambda: store.checkpoint(),
        lambda: store.snapshot().__enter__(),
        lambda: store.import_history([]),
        lambda: store.__enter__(),
        lambda: store.engine,
    ]
    for call in calls:
        with pytest.raises(StoreClosed, match="closed"):
            call()
    assert issubclass(StoreClosed, StoreError)
    with BudgetStore.open(store_target, readonly=True) as reopened:
        assert reopened.count() == 1  # nothing was written after close


def test_a_store_used_after_its_with_block_refuses(db_path: Path) -> None:
    """The with block closes the store: a later record is refused, not silently reconnected."""
    with BudgetStore.open(db_path) as store:
        store.record(make_gate())
    with pytest.raises(StoreClosed):
        store.record(make_gate(decision_id="after"))


def test_check_says_whether_a_row_holds(store_target: str) -> None:
    """check(): a clean row holds; an edited one does not (with the audit's findings); a missing one is None."""
    with BudgetStore.open(store_target) as store:
        store.record_many(gate_lines(3))
        ids = [row.decision.budget_id for row in store]
    tamper(store_target, "UPDATE compute_budget_decisions SET max_steps = 100 WHERE seq = 2")
    with BudgetStore.open(store_target, readonly=True) as store:
        fine = store.check(ids[0])
        edited = store.check(ids[1])
        after = store.check(ids[2])
        assert store.check("0" * 64) is None
    assert isinstance(fine, RowCheck)
    assert fine.holds
    assert fine.seq == 1
    assert edited is not None
    assert not edited.holds
    assert {finding.kind.value for finding in edited.findings} == {"rederive_mismatch", "budget_id_mismatch",
                                                                    "chain_break"}
    assert after is not None
    assert after.holds


def test_discard_removes_only_a_new_empty_file(tmp_path: Path) -> None:
    """discard_if_unused deletes the file this open created while it is empty, and nothing else."""
    fresh = tmp_path / "fresh.db"
    store = BudgetStore.open(fresh)
    assert store.created
    assert fresh.exists()
    assert store.discard_if_unused()
    assert not fresh.exists()
    assert not list(tmp_path.iterdir())

    existing = tmp_path / "existing.db"
    BudgetStore.open(existing).close()
    store = BudgetStore.open(existing)
    assert not store.created
    assert not store.discard_if_unused()
    assert existing.exists()

    used = tmp_path / "used.db"
    store = BudgetStore.open(used)
    store.record(make_gate())
    assert not store.discard_if_unused()
    with BudgetStore.open(used, readonly=True) as reader:
        assert reader.count() == 1


def test_discard_leaves_a_file_another_connection_has_open(tmp_path: Path) -> None:
    """A second writer that opened the new store meanwhile keeps it: the file is not removed under it."""
    path = tmp_path / "shared.db"
    store = BudgetStore.open(path)
    other = BudgetStore.open(path)
    try:
        assert other.count() == 0  # holds a connection to the file
        assert not store.discard_if_unused()
        assert path.exists()
        other.record(make_gate())
    finally:
        other.close()
    with sqlite3.connect(path) as connection:
        assert connection.execute("SELECT count(*) FROM compute_budget_decisions").fetchone() == (1,)


@pytest.mark.postgres
def test_discard_never_drops_a_postgresql_database(pg_url: str) -> None:
    """On PostgreSQL nothing is dropped (the database was there before the run)."""
    assert is_postgres(pg_url)
    store = BudgetStore.open(pg_url)
    assert not store.created
    assert not store.discard_if_unused()
    with BudgetStore.open(pg_url, readonly=True) as reader:
        assert reader.count() == 0


def test_paging_forward_with_after_seq_never_skips_a_row(store_target: str) -> None:
    """Issue 22: a loop tailing new rows (after the last seq it saw, a page at a time) sees every row once, in
    order; `limit` without `after_seq` is still the newest rows."""
    from compute_budget import BudgetStore
    from tests.conftest import gate_lines

    with BudgetStore.open(store_target) as store:
        store.record_many(gate_lines(8))
        seen: list[int] = []
        last, appended = 0, False
        while page := [row.seq for row in store.iter_decisions(after_seq=last, limit=3)]:
            seen += page
            last = page[-1]
            if len(seen) >= 5 and not appended:  # rows arrive while the loop pages
                store.record_many(gate_lines(4, prefix="later"))
                appended = True
        assert seen == list(range(1, 13))
        assert [row.seq for row in store.iter_decisions(limit=3)] == [10, 11, 12]
