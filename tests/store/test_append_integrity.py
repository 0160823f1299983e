"""Writers cannot lie, incremental audits miss nothing, and a dropped table is caught by its checkpoint."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from compute_budget import BudgetStore, CheckpointError, RepairNotAcknowledged, StoreDamaged, audit
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.errors import NoHistory
from tests.backends import execute, is_postgres, rows, tamper
from tests.conftest import gate_lines


@pytest.fixture
def store(store_target: str) -> str:
    """A store of 10 rows, on each backend."""
    with BudgetStore.open(store_target) as opened:
        opened.record_many(gate_lines(10))
    return store_target


def _checkpoint(target: str) -> Checkpoint:
    with BudgetStore.open(target, readonly=True) as opened:
        return opened.checkpoint()


def _skip_inserts(target: str) -> None:
    """A hand-made trigger that silently drops every insert."""
    if is_postgres(target):
        execute(
            target,
            "CREATE FUNCTION drop_rows() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$",
            "CREATE TRIGGER zz_drop_rows BEFORE INSERT ON compute_budget_decisions FOR EACH ROW "
            "EXECUTE FUNCTION drop_rows()",
        )
    else:
        execute(
            target,
            "CREATE TRIGGER zz_drop_rows BEFORE INSERT ON compute_budget_decisions "
            "BEGIN SELECT RAISE(IGNORE); END",
        )


def test_writers_refuse_a_table_with_a_hand_made_trigger(store: str) -> None:
    """The first line of defence: a trigger added by hand on the table stops every append, saying what to run."""
    _skip_inserts(store)
    with BudgetStore.open(store) as opened, pytest.raises(StoreDamaged, match=r"added by hand.*compute-budget migrate"):
        opened.record(gate_lines(1, prefix="late")[0])
    assert len(rows(store)) == 10


@pytest.fixture
def guard_check_blinded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Suppose a row-dropping trick the schema check cannot see: the writer's own count must still catch it."""
    import compute_budget.store.inserting as inserting

    monkeypatch.setattr(inserting, "schema_problems", lambda connection: [])


@pytest.mark.usefixtures("guard_check_blinded")
def test_writers_never_report_rows_they_did_not_write(store: str) -> None:
    """Rows dropped on insert make the append fail with StoreDamaged and roll back: no "1 new, head seq 11"
    for a row that is not there."""
    _skip_inserts(store)
    with BudgetStore.open(store) as opened, pytest.raises(StoreDamaged, match="stored 0 of the 1 rows"):
        opened.record(gate_lines(1, prefix="late")[0])
    assert len(rows(store)) == 10


@pytest.mark.usefixtures("guard_check_blinded")
def test_writers_check_every_chunk_of_a_batch(store: str) -> None:
    """A batch whose rows vanish is refused whole: nothing of it stays."""
    _skip_inserts(store)
    with BudgetStore.open(store) as opened, pytest.raises(StoreDamaged):
        opened.record_many(gate_lines(1200, prefix="batch"))
    assert len(rows(store)) == 10


@pytest.mark.parametrize("store_target", ["sqlite"], indirect=True)  # PostgreSQL's BIGINT holds no text or real
@pytest.mark.parametrize("sqlite_value", ["'zzz'", "8.5"])
def test_since_checks_every_row_appended_after_the_checkpoint(store: str, sqlite_value: str) -> None:
    """A row appended by hand with a seq of text or a real is found by `--since`, and the audit is not clean
    (so no new checkpoint would be saved)."""
    checkpoint = _checkpoint(store)
    last = rows(store)[-1]
    forged = (sqlite_value, *("'" + str(value).replace("'", "''") + "'" for value in ("f" * 64, *last[2:])))
    with sqlite3.connect(store) as connection:
        names = [row[1] for row in connection.execute("PRAGMA table_info(compute_budget_decisions)")]
        connection.execute(
            f"INSERT INTO compute_budget_decisions ({', '.join(names)}) VALUES ({', '.join(forged)})"
        )
    report = audit(store, since=checkpoint)
    assert not report.clean
    assert any(finding.budget_id == "f" * 64 for finding in report.findings), report.findings


def test_since_sees_a_row_deleted_below_the_checkpoint(store: str) -> None:
    """Deleting a row at or below the checkpoint: the checkpoint no longer holds, so `--since` checks every row
    after all (issue 22) and names the gap itself."""
    checkpoint = _checkpoint(store)
    tamper(store, "DELETE FROM compute_budget_decisions WHERE seq = 3")
    report = audit(store, since=checkpoint)
    counted = [finding for finding in report.findings if finding.kind.value == "chain_break"]
    assert [finding.seq for finding in counted] == [4]
    assert counted[0].detail.startswith("seq jumps from 2 to 4: 1 row(s) missing")
    assert report.escalated
    # The seal sees it too: the rows up to the checkpoint no longer give the checkpoint's tree root.
    assert {finding.kind.value for finding in report.findings} == {"chain_break", "checkpoint_mismatch"}


def test_a_head_seq_set_to_the_largest_integer_is_refused_clearly(store: str) -> None:
    """A seq of 2**63-1 inserted by hand: every later record fails with StoreDamaged, not an OverflowError."""
    tamper(store, ("UPDATE compute_budget_decisions SET seq = :big WHERE seq = 10", {"big": 2**63 - 1}))
    with BudgetStore.open(store) as opened, pytest.raises(StoreDamaged, match="cannot be read"):
        opened.record(gate_lines(1, prefix="after")[0])


def test_a_checkpoint_beyond_64_bits_is_refused() -> None:
    """A checkpoint naming seq 2**63 is not a checkpoint (no store can reach it)."""
    text = '{"format": "compute_budget.checkpoint.v1", "seq": %d, "chain_hash": "%s", "budget_id": null}'
    with pytest.raises(CheckpointError, match="2\\*\\*63-1"):
        Checkpoint.from_json(text % (2**63, "0" * 64))
    assert Checkpoint.from_json(text % (2**63 - 1, "0" * 64)).seq == 2**63 - 1


@pytest.mark.parametrize("damage", ["drop", "empty"])
def test_a_dropped_or_emptied_table_under_a_checkpoint_is_a_finding(store: str, damage: str) -> None:
    """DROP TABLE cannot be stopped by a SQLite trigger, but the checkpoint proves history existed:
    checkpoint_mismatch, not "not a compute-budget database"."""
    checkpoint = _checkpoint(store)
    if damage == "drop":
        execute(store, "DROP TABLE compute_budget_decisions")
    else:
        tamper(store, "DELETE FROM compute_budget_decisions")
    for report in (audit(store, checkpoint=checkpoint), audit(store, since=checkpoint)):
        assert [finding.kind.value for finding in report.findings] == ["checkpoint_mismatch"]
        assert report.findings[0].seq == 10
    if damage == "drop":
        with pytest.raises(NoHistory, match="decisions table is gone"):
            audit(store)
        with pytest.raises(NoHistory):
            BudgetStore.open(store)  # a writer never re-creates a dropped history silently


def test_an_emptied_sqlite_file_under_a_checkpoint_is_a_finding(tmp_path: Path) -> None:
    """A store replaced by an empty file is history gone, when a checkpoint says there was some."""
    target = tmp_path / "store.db"
    with BudgetStore.open(target) as opened:
        opened.record_many(gate_lines(3))
        checkpoint = opened.checkpoint()
    target.unlink()
    for suffix in ("-wal", "-shm"):
        target.with_name(target.name + suffix).unlink(missing_ok=True)
    sqlite3.connect(target).close()
    report = audit(target, checkpoint=checkpoint)
    assert [finding.kind.value for finding in report.findings] == ["checkpoint_mismatch"]
    assert "the database is empty" in report.findings[0].detail


def test_a_failed_insert_must_leave_its_transaction_open_and_the_head_unmoved(tmp_path: Path) -> None:
    """The one-statement append has no savepoint: after a failed insert the writer goes on only if the write
    transaction is still open and the head is the one it started from. A conflict clause changed by hand could
    end the transaction (ROLLBACK) or keep part of the statement (FAIL); either is refused, nothing written."""
    from compute_budget.core.log.head import GENESIS_CHAIN_HASH, ChainHead
    from compute_budget.store.backends import statements_for
    from compute_budget.store.inserting import require_nothing_kept

    target = str(tmp_path / "kept.db")
    with BudgetStore.open(target) as opened:
        opened.record_many(gate_lines(3))
        head = opened.head()
        statements = statements_for("sqlite")
        with opened.engine.connect() as connection:
            with pytest.raises(StoreDamaged, match="a failed insert ended the write transaction"):
                require_nothing_kept(connection, statements, head, opened.location)
            connection.exec_driver_sql("SELECT 1")  # the store's begin hook opens the transaction
            require_nothing_kept(connection, statements, head, opened.location)  # open and unmoved: goes on
            before = ChainHead(2, GENESIS_CHAIN_HASH, None)  # as if the failed statement had kept row 3
            with pytest.raises(StoreDamaged, match="does not keep what is written; nothing was written"):
                require_nothing_kept(connection, statements, before, opened.location)
            connection.rollback()
    assert audit(target).clean


def test_a_writer_that_stays_open_sees_the_guard_changed_between_its_appends(tmp_path: Path) -> None:
    """Issue 23's shortcut (the guard is checked again only when another connection committed): one open store
    appends, the guard is lifted or joined by a hand-made trigger from another connection, and the very next
    append through the same store refuses."""
    import sqlite3

    target = str(tmp_path / "open.db")
    with BudgetStore.open(target) as opened:
        opened.record(gate_lines(1, prefix="first")[0])
        opened.record(gate_lines(1, prefix="second")[0])  # the shortcut taken: nothing changed
        with sqlite3.connect(target) as other:
            other.execute("DROP TRIGGER compute_budget_decisions_no_update")
        with pytest.raises(StoreDamaged, match="refusing to append"):
            opened.record(gate_lines(1, prefix="third")[0])
    with BudgetStore.open(target) as opened, sqlite3.connect(target) as other:
        BudgetStore.migrate(target)
        with pytest.raises(RepairNotAcknowledged):  # the open writer sees the repair too (spec 9.9.10)
            opened.record(gate_lines(1, prefix="fourth")[0])
        opened.record_many(gate_lines(1, prefix="fourth"), after_repair=1)
        other.execute(
            "CREATE TRIGGER hidden BEFORE INSERT ON compute_budget_decisions BEGIN SELECT RAISE(IGNORE); END"
        )
        other.commit()
        with pytest.raises(StoreDamaged, match="refusing to append"):
            opened.record(gate_lines(1, prefix="fifth")[0])


def test_the_writer_shortcut_sees_a_guard_change_on_both_backends(store: str) -> None:
    """The guard check is skipped only while nothing changed (SQLite's data_version, PostgreSQL's catalog
    fingerprint): a trigger disabled from another connection between two appends of one open store stops the
    next one, on each backend."""
    from tests.backends import execute, is_postgres

    disable = (
        "ALTER TABLE compute_budget_decisions DISABLE TRIGGER compute_budget_decisions_no_update_delete"
        if is_postgres(store)
        else "DROP TRIGGER compute_budget_decisions_no_update"
    )
    with BudgetStore.open(store) as opened:
        opened.record(gate_lines(1, prefix="first")[0])
        opened.record(gate_lines(1, prefix="second")[0])  # the shortcut taken: nothing changed
        execute(store, disable)
        with pytest.raises(StoreDamaged, match="refusing to append"):
            opened.record(gate_lines(1, prefix="third")[0])
    assert len(rows(store)) == 12


@pytest.mark.postgres
def test_the_writer_shortcut_sees_a_guard_function_altered_without_its_body(pg_url: str) -> None:
    """`ALTER FUNCTION ... SECURITY DEFINER` changes a guard function's definition but not its source text: the
    writer's catalog fingerprint hashed the source alone, so a long-lived writer skipped the full check that reports
    it. The fingerprint hashes the whole definition now, as the full check compares it."""
    from tests.backends import execute

    with BudgetStore.open(pg_url) as opened:
        opened.record(gate_lines(1, prefix="first")[0])
        opened.record(gate_lines(1, prefix="second")[0])  # the shortcut taken: nothing changed
        execute(pg_url, "ALTER FUNCTION compute_budget_decisions_append_only() SECURITY DEFINER")
        with pytest.raises(StoreDamaged, match="was altered"):
            opened.record(gate_lines(1, prefix="third")[0])
