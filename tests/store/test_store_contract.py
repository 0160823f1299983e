"""The store contract (spec section 5), against real database files."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from compute_budget import (
    BudgetStore,
    GateConflict,
    GateNotSerializable,
    InputNotJson,
    NotABudgetStore,
    ReadOnlyStore,
    SchemaBehindHead,
    SearchGateDecision,
    SourceSpan,
    StoreUnavailable,
    decide,
)
from compute_budget.core.chain import CHAINED_COLUMNS, chain_hash
from compute_budget.core.log.head import GENESIS_CHAIN_HASH
from compute_budget.store.migrations import head_revision
from compute_budget.store.table import COLUMNS
from tests.conftest import REPO_ROOT, gate_lines, make_gate


def test_record_returns_the_decision_and_stores_it(store_target: str) -> None:
    """A new gate is decided, stored at seq 1 and read back equal."""
    with BudgetStore.open(store_target) as store:
        result = store.record(make_gate())
        assert result.new is True
        assert result.seq == 1
        assert result.decision == decide(make_gate())
        stored = store.get(result.decision.budget_id)
    assert stored is not None
    assert stored.decision == result.decision
    assert json.loads(stored.gate_input) == make_gate()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", stored.recorded_at)


def test_rerecording_the_same_gate_is_a_no_op(store_target: str) -> None:
    """The same gate as a dict, compact text or pretty text is stored once; later records return it."""
    with BudgetStore.open(store_target) as store:
        first = store.record(make_gate())
        again = store.record(json.dumps(make_gate(), indent=2))
        compact = store.record(json.dumps(make_gate(), separators=(",", ":")))
        reordered = store.record(json.dumps(dict(reversed(list(make_gate().items())))))
        assert [again.new, compact.new, reordered.new] == [False, False, False]
        assert again.seq == compact.seq == reordered.seq == first.seq == 1
        assert again.decision == first.decision
        assert store.count() == 1


def test_same_budget_id_with_a_different_gate_is_a_conflict(store_target: str) -> None:
    """residual_ids is not hashed: a different one under the same budget_id is refused, naming both."""
    with BudgetStore.open(store_target) as store:
        store.record(make_gate())
        head = store.head()
        with pytest.raises(GateConflict) as raised:
            store.record(make_gate(residual_ids=["residual-99"]))
        assert raised.value.budget_id == decide(make_gate()).budget_id
        assert "residual-17" in raised.value.stored_gate
        assert "residual-99" in raised.value.new_gate
        assert "residual_ids" in str(raised.value)
        assert store.head() == head
        assert store.count() == 1


def test_json_equality_is_typed(store_target: str) -> None:
    """Two malformed gates with one budget_id differing only in true versus 1 are different gates."""
    with BudgetStore.open(store_target) as store:
        store.record(make_gate(candidate_organ=1))
        with pytest.raises(GateConflict):
            store.record(make_gate(candidate_organ=True))


def test_batch_with_a_conflict_in_the_middle_writes_nothing(store_target: str) -> None:
    """record_many is atomic: a conflict at gate 600 of 1,000 leaves the store as it was."""
    lines = gate_lines(1000)
    with BudgetStore.open(store_target) as store:
        store.record(make_gate())
        before = store.head()
        conflicting = json.dumps(make_gate(residual_ids=["other"]))
        with pytest.raises(GateConflict):
            store.record_many([*lines[:600], conflicting, *lines[600:]])
        assert store.head() == before
        assert store.count() == 1


def test_batch_with_non_json_writes_nothing(store_target: str) -> None:
    """A batch holding text that is not JSON fails whole."""
    with BudgetStore.open(store_target) as store:
        with pytest.raises(InputNotJson):
            store.record_many([*gate_lines(700), "{not json"])
        assert store.count() == 0


def test_batch_counts_new_and_present_and_duplicates_within_it(store_target: str) -> None:
    """Gates repeated inside one batch and across batches count as already present."""
    lines = gate_lines(1200)
    with BudgetStore.open(store_target) as store:
        first = store.record_many(lines[:700])
        second = store.record_many(iter([*lines, lines[0], lines[1100]]))
        assert (first.new, first.present) == (700, 0)
        assert (second.new, second.present) == (500, 702)
        assert second.head.seq == 1200 == store.count()
        assert [row.seq for row in store] == list(range(1, 1201))


def test_record_many_streams_a_generator(store_target: str) -> None:
    """Any iterable works, consumed lazily in chunks."""
    consumed = []

    def gates():  # type: ignore[no-untyped-def]
        for line in gate_lines(1100):
            consumed.append(line)
            yield line

    with BudgetStore.open(store_target) as store:
        result = store.record_many(gates())
    assert result.new == 1100
    assert len(consumed) == 1100


def test_chain_links_every_row_to_the_one_before(store_target: str) -> None:
    """Each stored chain_hash is the documented formula over the previous hash and the row's columns."""
    with BudgetStore.open(store_target) as store:
        store.record_many(gate_lines(30))
        prev = GENESIS_CHAIN_HASH
        for stored in store:
            row = stored.to_dict()
            row["evidence_spans"] = json.dumps(row["evidence_spans"], ensure_ascii=False, separators=(",", ":"))
            values = [row[name] for name in CHAINED_COLUMNS]
            assert chain_hash(prev, values) == stored.chain_hash
            prev = stored.chain_hash
        assert store.head().chain_hash == prev


def test_schema_columns_match_the_chain_columns() -> None:
    """The chain covers every stored column but chain_hash, in table order."""
    assert COLUMNS[:-1] == CHAINED_COLUMNS
    assert COLUMNS[-1] == "chain_hash"


def test_python_gates_are_stored_as_json_that_rederives(store_target: str) -> None:
    """A SearchGateDecision and a mapping with tuples are stored as JSON re-deriving the same decision."""
    gate = SearchGateDecision(
        "gate-py", "search_gate.v1", "sha256:11", "eligible",  # type: ignore[arg-type]
        "eligible_missing_proposal", ("r1",), None, (SourceSpan("x", 0, 1, 0),),
    )
    with BudgetStore.open(store_target) as store:
        result = store.record(gate)
        stored = store.get(result.decision.budget_id)
        assert stored is not None
        assert json.loads(stored.gate_input)["evidence_spans"] == [
            {"text": "x", "start": 0, "end": 1, "sentence_index": 0}
        ]
        assert decide(json.loads(stored.gate_input)) == result.decision
        assert store.record(gate.to_dict()).new is False


def test_lone_surrogates_in_python_gates_are_stored_escaped(store_target: str) -> None:
    """A malformed gate holding a lone surrogate is stored as ASCII-escaped JSON and re-derives exactly."""
    gate = make_gate(residual_ids=["bad \ud800"])
    with BudgetStore.open(store_target) as store:
        result = store.record(gate)
        stored = store.get(result.decision.budget_id)
    assert stored is not None
    assert result.decision.reason_code == "malformed_gate_decision"
    assert "\\ud800" in stored.gate_input


@pytest.mark.parametrize(
    "gate",
    [
        make_gate(residual_ids={"a", "b"}),
        make_gate(candidate_organ=float("nan")),
        {**make_gate(), 7: "x"},
        make_gate(candidate_organ=object()),
    ],
    ids=["set", "nan", "int-key", "object"],
)
def test_gates_json_cannot_hold_are_refused(store_target: str, gate: object) -> None:
    """A Python gate that cannot be JSON is refused with a clear error and nothing is written."""
    with BudgetStore.open(store_target) as store:
        with pytest.raises(GateNotSerializable, match="JSON"):
            store.record_many([make_gate(decision_id="fine"), gate])
        assert store.count() == 0


def deep_text(levels: int, leaf: str = "1", *, spaced: bool = False) -> str:
    """A gate text (otherwise the example gate) with a value nested `levels` deep in an extra key."""
    opening, closing = ("[ ", " ]") if spaced else ("[", "]")
    return json.dumps(make_gate())[:-1] + ', "note": ' + opening * levels + leaf + closing * levels + "}"


def nested(levels: int) -> object:
    """`levels` lists, one inside the other."""
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def test_deep_texts_rerecord_without_recursion(store_target: str) -> None:
    """A 900-level gate text recorded again (alone, twice in one batch) is one row; the same value written
    with other spacing is compared as text (rule 3.1.8): a conflict. Never a RecursionError."""
    text = deep_text(900)
    with BudgetStore.open(store_target) as store:
        first = store.record(text)
        assert first.decision.reason_code == "malformed_gate_decision"
        assert first.decision.gate_decision_id == ""
        assert store.record(text).new is False
        assert store.record_many([text, text]).present == 2
        with pytest.raises(GateConflict):
            store.record(deep_text(900, spaced=True))
        with pytest.raises(GateConflict):
            store.record_many([deep_text(900, spaced=True), deep_text(900, spaced=True)])
        assert store.count() == 1


def test_deep_python_gate_is_recorded_and_rerecorded(store_target: str) -> None:
    """A 5,000-deep Python gate is stored as its JSON text (written without recursion), which re-derives it."""
    gate = make_gate(note=nested(5_000))
    with BudgetStore.open(store_target) as store:
        result = store.record(gate)
        assert result.decision == decide(gate)
        assert result.decision.gate_decision_id == ""
        stored = store.get(result.decision.budget_id)
        assert stored is not None
        assert stored.gate_input.count("[") == 5_000 + 2
        assert store.record(gate).new is False
        assert store.record(stored.gate_input).new is False
    from compute_budget.auditor.scan import audit

    assert audit(store_target).clean


def test_a_gate_that_contains_itself_is_refused(store_target: str) -> None:
    """A Python gate inside itself has no JSON text: refused with a clear error, not a RecursionError."""
    gate = make_gate()
    gate["note"] = [gate]
    with BudgetStore.open(store_target) as store:
        with pytest.raises(GateNotSerializable, match="contains itself"):
            store.record(gate)
        assert store.count() == 0


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(deep_text(5_000, "1"), deep_text(5_000, "2"), id="different-deep-values"),
        pytest.param(deep_text(40), deep_text(40, spaced=True), id="deep-written-differently"),
        pytest.param(
            json.dumps(make_gate())[:-1] + ', "status": "blocked"}',
            json.dumps(make_gate())[:-1] + ',  "status": "blocked"}',
            id="repeated-key-written-differently",
        ),
        pytest.param(
            json.dumps(make_gate())[:-1] + ', "note": ' + "1" * 5_000 + "}",
            json.dumps(make_gate())[:-1] + ', "note": ' + "2" * 5_000 + "}",
            id="different-unreadable-integers",
        ),
    ],
)
def test_texts_without_a_json_value_are_the_same_gate_only_as_the_same_text(
    store_target: str, first: str, second: str
) -> None:
    """A repeated key, nesting deeper than 32 or an unreadable integer: equal only to the byte-identical text.

    Each pair shares one budget_id (nothing hashed differs), so the second is a conflict, not a silent no-op.
    """
    from compute_budget import decide_json

    assert decide_json(first).budget_id == decide_json(second).budget_id
    with BudgetStore.open(store_target) as store:
        store.record(first)
        assert store.record(first).new is False
        with pytest.raises(GateConflict):
            store.record(second)
        assert store.count() == 1


def test_json_equal_and_differing_keys_never_recurse() -> None:
    """Comparing gates is iterative: 100,000-level values compare without recursion, typed as before."""
    from compute_budget.core.policy.prepare import differing_keys, json_equal, prepare_gate

    assert json_equal(nested(100_000), nested(100_000))
    assert not json_equal(nested(100_000), nested(99_999))
    assert not json_equal([1, {"a": True}], [1, {"a": 1}])
    assert not json_equal({"a": 1}, {"b": 1})
    assert json_equal({"a": [1.5, None, "x"]}, {"a": [1.5, None, "x"]})
    assert differing_keys(deep_text(5_000), prepare_gate(deep_text(5_000, "2"))) == ()
    assert differing_keys(json.dumps(make_gate()), prepare_gate(make_gate(status="blocked"))) == ("status",)


def test_iteration_filters_and_limits(store_target: str) -> None:
    """iter_decisions keeps seq order, filters by status, and --limit keeps the newest."""
    with BudgetStore.open(store_target) as store:
        store.record_many(gate_lines(60))
        blocked = list(store.iter_decisions(status="budget_blocked"))
        newest = list(store.iter_decisions(limit=5))
    assert blocked
    assert all(row.decision.status == "budget_blocked" for row in blocked)
    assert [row.seq for row in newest] == [56, 57, 58, 59, 60]


def test_readonly_store_refuses_to_write(db_path: Path) -> None:
    """A reader cannot record."""
    with BudgetStore.open(db_path) as store:
        store.record(make_gate())
    with BudgetStore.open(db_path, readonly=True) as store, pytest.raises(ReadOnlyStore):
        store.record(make_gate(decision_id="other"))


def test_readonly_open_of_a_missing_file_creates_nothing(db_path: Path) -> None:
    """A reader never creates a database."""
    with pytest.raises(StoreUnavailable, match="no database"):
        BudgetStore.open(db_path, readonly=True)
    assert not db_path.exists()


def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    """A database in a folder that does not exist names the folder."""
    with pytest.raises(StoreUnavailable, match="does not exist"):
        BudgetStore.open(tmp_path / "nope" / "store.db")


def test_a_file_that_is_not_sqlite_is_refused_untouched(tmp_path: Path) -> None:
    """A text file given as the database is reported and left as it was."""
    path = tmp_path / "notes.db"
    path.write_text("these are my notes, not a database\n" * 20)
    before = path.read_bytes()
    for readonly in (False, True):
        with pytest.raises(NotABudgetStore, match="not a SQLite database"):
            BudgetStore.open(path, readonly=readonly)
    assert path.read_bytes() == before


def test_a_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    """A SQLite database of some other application is not taken over."""
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE customers (id INTEGER)")
        connection.execute("INSERT INTO customers VALUES (1)")
    connection.close()
    before = path.read_bytes()
    with pytest.raises(NotABudgetStore, match="not a compute-budget database"):
        BudgetStore.open(path)
    # Not one byte changed: the writer used to switch the refused file to WAL (a lasting change of its header).
    assert path.read_bytes() == before
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    connection.close()


def test_schema_behind_head_is_refused_until_migrated(tmp_path: Path) -> None:
    """A store at revision 0001 is refused by writers and readers, then migrated with every row intact."""
    path = tmp_path / "old.db"
    path.write_bytes((REPO_ROOT / "tests" / "data" / "store_0001.db").read_bytes())
    for readonly in (False, True):
        with pytest.raises(SchemaBehindHead, match="compute-budget migrate"):
            BudgetStore.open(path, readonly=readonly)
    before, after = BudgetStore.migrate(path)
    assert (before, after) == ("0001", head_revision())
    with BudgetStore.open(path, readonly=True) as store:
        rows = list(store)
    assert [row.seq for row in rows] == list(range(1, 10))


@pytest.mark.slow
def test_read_only_file_gives_a_clear_error(db_path: Path) -> None:
    """A store file nobody may write: the reader works, the writer gets one clear line and exit 2."""
    import os
    import subprocess
    import sys

    with BudgetStore.open(db_path) as store:
        store.record(make_gate())
    gates = db_path.parent / "gates.jsonl"
    gates.write_text(json.dumps(make_gate(decision_id="new")) + "\n")
    # root ignores permission bits: there the file is made immutable instead
    protect, unprotect = (["chattr", "+i"], ["chattr", "-i"]) if os.geteuid() == 0 else (None, None)
    if protect is None:
        db_path.chmod(0o444)
    elif subprocess.run([*protect, str(db_path)], capture_output=True, check=False).returncode != 0:
        pytest.skip("cannot make a file read-only for root here (chattr refused)")  # pragma: no cover
    try:
        command = [sys.executable, "-c", "from compute_budget.cli import main; main()", "record", str(gates), "--db",
                   str(db_path)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        assert done.returncode == 2, done.stderr
        assert "read-only" in done.stderr
        assert "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
        with BudgetStore.open(db_path, readonly=True) as store:
            assert store.count() == 1
    finally:
        if unprotect is not None:
            subprocess.run([*unprotect, str(db_path)], check=False)
        db_path.chmod(0o644)


def test_full_disk_writes_nothing_and_says_so(db_path: Path) -> None:
    """When the database cannot grow (SQLite's page limit stands in for a full disk) nothing is written."""
    from sqlalchemy import event

    with BudgetStore.open(db_path) as store:
        store.record(make_gate())
        with store.engine.connect() as connection:
            pages = int(connection.exec_driver_sql("PRAGMA page_count").scalar_one())
        store.engine.dispose()

        @event.listens_for(store.engine, "connect")
        def _cap(dbapi_connection, _record):  # type: ignore[no-untyped-def]
            dbapi_connection.execute(f"PRAGMA max_page_count = {pages + 2}")

        with pytest.raises(StoreUnavailable, match="full"):
            store.record_many(gate_lines(3000))
        assert store.count() == 1


def test_reader_does_not_change_the_file(db_path: Path) -> None:
    """Opening, reading and iterating read-only leaves the database bytes identical."""
    with BudgetStore.open(db_path) as store:
        store.record_many(gate_lines(50))
    before = db_path.read_bytes()
    with BudgetStore.open(db_path, readonly=True) as store:
        assert len(list(store)) == 50
        store.head()
        store.checkpoint()
    assert db_path.read_bytes() == before


def test_record_many_gives_the_garbage_collector_back(store_target: str) -> None:
    """The collector paused for a bulk append is running again afterwards, after a failure too."""
    import gc

    with BudgetStore.open(store_target) as store:
        store.record_many(gate_lines(10))
        assert gc.isenabled()
        with pytest.raises(InputNotJson):
            store.record_many(["{broken"])
        assert gc.isenabled()
