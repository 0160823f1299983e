"""The store checks its own schema: a dropped, disabled, altered or added trigger, or a changed column, is seen."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from compute_budget import BudgetStore, StoreDamaged, audit
from compute_budget.store.schema_check import normalise
from tests.backends import acknowledge_repair, assert_clean_after_repair, execute, is_postgres, rows
from tests.conftest import REPO_ROOT, gate_lines

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def store(store_target: str) -> str:
    """A store of 5 rows, on each backend."""
    with BudgetStore.open(store_target) as opened:
        opened.record_many(gate_lines(5))
    return store_target


def _drop_guard(target: str) -> None:
    if is_postgres(target):
        execute(target, "DROP TRIGGER compute_budget_decisions_no_update_delete ON compute_budget_decisions",
                "DROP TRIGGER compute_budget_decisions_no_truncate ON compute_budget_decisions")
    else:
        execute(target, *(f"DROP TRIGGER compute_budget_decisions_{name}"
                          for name in ("no_update", "no_delete", "no_replace")))


def _kinds(target: str) -> list[str]:
    return [finding.kind.value for finding in audit(target).findings]


def test_a_fresh_store_and_an_upgraded_one_hold_the_schema(store: str, tmp_path: Path) -> None:
    """No finding on a new store, nor on a store written by revision 0001 and migrated."""
    assert audit(store).clean
    old = tmp_path / "old.db"
    old.write_bytes((REPO_ROOT / "tests" / "data" / "store_0001.db").read_bytes())
    BudgetStore.migrate(old)
    assert audit(old).clean


def test_dropping_every_trigger_is_schema_tampered_and_stops_writers(store: str) -> None:
    """The audit reports each missing trigger; `record` refuses to append; `migrate` restores the guard."""
    _drop_guard(store)
    assert set(_kinds(store)) == {"schema_tampered"}
    with BudgetStore.open(store) as opened, pytest.raises(StoreDamaged, match="is missing"):
        opened.record(gate_lines(1, prefix="new")[0])
    restored: list[str] = []
    BudgetStore.migrate(store, on_restore=restored.extend)
    assert restored
    assert all("missing" in problem for problem in restored)
    assert_clean_after_repair(store)
    with BudgetStore.open(store) as opened:
        assert opened.record(gate_lines(1, prefix="new")[0]).new
    with pytest.raises(Exception, match="append-only"):
        execute(store, "DELETE FROM compute_budget_decisions")
    assert len(rows(store)) == 6


def test_an_altered_trigger_is_schema_tampered(store: str) -> None:
    """A guard trigger replaced by one that lets deletes through is reported as altered, and restored."""
    if is_postgres(store):
        execute(
            store,
            "DROP TRIGGER compute_budget_decisions_no_update_delete ON compute_budget_decisions",
            "CREATE TRIGGER compute_budget_decisions_no_update_delete BEFORE UPDATE ON compute_budget_decisions "
            "FOR EACH ROW EXECUTE FUNCTION compute_budget_decisions_append_only()",
        )
    else:
        execute(
            store,
            "DROP TRIGGER compute_budget_decisions_no_delete",
            "CREATE TRIGGER compute_budget_decisions_no_delete BEFORE DELETE ON compute_budget_decisions "
            "WHEN 0 BEGIN SELECT RAISE(ABORT, 'compute_budget_decisions is append-only: DELETE is not allowed'); END",
        )
    findings = audit(store).findings
    assert [finding.kind.value for finding in findings] == ["schema_tampered"]
    assert "altered" in findings[0].detail
    BudgetStore.migrate(store)
    assert_clean_after_repair(store)


@pytest.mark.parametrize("store_target", ["postgresql"], indirect=True)
def test_a_disabled_trigger_counts_as_missing_on_postgresql(store: str) -> None:
    """ALTER TABLE … DISABLE TRIGGER leaves the trigger in place but off: reported, and writers refuse."""
    execute(store, "ALTER TABLE compute_budget_decisions DISABLE TRIGGER compute_budget_decisions_no_update_delete")
    findings = audit(store).findings
    assert [finding.kind.value for finding in findings] == ["schema_tampered"]
    assert "disabled" in findings[0].detail
    with BudgetStore.open(store) as opened, pytest.raises(StoreDamaged, match="disabled"):
        opened.record(gate_lines(1, prefix="new")[0])
    BudgetStore.migrate(store)
    assert_clean_after_repair(store)


@pytest.mark.parametrize("store_target", ["postgresql"], indirect=True)
def test_an_altered_guard_function_is_schema_tampered(store: str) -> None:
    """The PostgreSQL guard function rewritten to let everything through is reported."""
    execute(
        store,
        "CREATE OR REPLACE FUNCTION compute_budget_decisions_append_only() RETURNS trigger LANGUAGE plpgsql "
        "AS $$ BEGIN RETURN OLD; END $$",
    )
    findings = audit(store).findings
    assert [finding.detail for finding in findings] == [
        "function compute_budget_decisions_append_only of the append-only guard was altered"
    ]


def test_an_added_column_is_schema_tampered_but_an_extra_index_is_not(store: str) -> None:
    """A column added by hand is reported; an index added by a DBA is not tampering."""
    execute(store, "CREATE INDEX dba_recorded_at ON compute_budget_decisions (recorded_at)")
    assert audit(store).clean
    execute(store, "ALTER TABLE compute_budget_decisions ADD COLUMN note TEXT")
    findings = audit(store).findings
    assert [finding.detail for finding in findings] == ["table compute_budget_decisions has columns added note"]


def test_migrate_says_what_it_restored(run_cli: Run, tmp_path: Path) -> None:
    """`compute-budget migrate` on a store with no guard prints each problem it fixed."""
    target = tmp_path / "store.db"
    with BudgetStore.open(target) as opened:
        opened.record_many(gate_lines(2))
    _drop_guard(str(target))
    status, out, err = run_cli("migrate", "--db", str(target))
    assert status == 0
    assert err.count("restored the append-only guard") == 3
    assert "already at head" not in out  # it did change the schema
    assert out.startswith("schema at head revision ")
    assert "repaired 3 problem(s)" in out
    status, out, err = run_cli("migrate", "--db", str(target))
    assert (status, err) == (0, "")
    assert out.startswith("schema already at head revision ")
    acknowledge_repair(target)
    status, out, _ = run_cli("audit", "--db", str(target))
    assert status == 0


def test_normalise_ignores_whitespace_quoting_and_schema_prefixes() -> None:
    """Fresh and upgraded stores differ in SQL text only: spacing, quotes and `public.` do not count."""
    assert normalise('CREATE  TRIGGER "t"\n ON public.compute_budget_decisions ;') == (
        "CREATE TRIGGER t ON compute_budget_decisions"
    )
    assert normalise("WHEN 0 BEGIN") != normalise("BEGIN")


@pytest.mark.parametrize("where", ["alembic_version", "a new table", "a new view"])
def test_a_trigger_outside_the_guarded_tables_is_schema_tampered(store: str, where: str) -> None:
    """A trigger on the bookkeeping table, or one on a new table or view that writes to a store table, is
    schema_tampered: writers refuse, and `migrate` drops it and restores the guard."""
    insert = ("INSERT INTO compute_budget_witness_sizes (witness_name, witness_key_id, tree_size, recorded_at) "
              "VALUES ('w', '00000000', 1, 'x')")
    if is_postgres(store):
        body = "BEGIN RETURN NULL; END" if where == "alembic_version" else f"BEGIN {insert}; RETURN NULL; END"
        statements = [f"CREATE FUNCTION sneak() RETURNS trigger LANGUAGE plpgsql AS $$ {body} $$"]
        if where == "alembic_version":
            statements.append(
                "CREATE TRIGGER sneak BEFORE UPDATE ON alembic_version FOR EACH ROW EXECUTE FUNCTION sneak()"
            )
        elif where == "a new table":
            statements += ["CREATE TABLE notes (body text)",
                           "CREATE TRIGGER sneak AFTER INSERT ON notes FOR EACH ROW EXECUTE FUNCTION sneak()"]
        else:
            statements += ["CREATE VIEW notes AS SELECT 1 AS one",
                           "CREATE TRIGGER sneak INSTEAD OF INSERT ON notes FOR EACH ROW EXECUTE FUNCTION sneak()"]
    elif where == "alembic_version":
        statements = ["CREATE TRIGGER sneak BEFORE UPDATE ON alembic_version BEGIN SELECT RAISE(IGNORE); END"]
    elif where == "a new table":
        statements = ["CREATE TABLE notes (body TEXT)",
                      f"CREATE TRIGGER sneak AFTER INSERT ON notes BEGIN {insert}; END"]
    else:
        statements = ["CREATE VIEW notes AS SELECT 1 AS one",
                      f"CREATE TRIGGER sneak INSTEAD OF INSERT ON notes BEGIN {insert}; END"]
    execute(store, *statements)
    findings = audit(store).findings
    assert [finding.kind.value for finding in findings] == ["schema_tampered"]
    assert "trigger sneak on" in findings[0].detail
    with BudgetStore.open(store) as opened, pytest.raises(StoreDamaged, match="added by hand"):
        opened.record(gate_lines(1, prefix="new")[0])
    restored: list[str] = []
    BudgetStore.migrate(store, on_restore=restored.extend)
    assert any("trigger sneak" in problem for problem in restored)
    assert_clean_after_repair(store)


@pytest.mark.postgres
def test_another_applications_trigger_in_a_shared_postgresql_schema_is_not_tampering(pg_url: str) -> None:
    """A store may share its PostgreSQL schema with other tables: their triggers, which name no store table, are
    left alone."""
    with BudgetStore.open(pg_url) as opened:
        opened.record_many(gate_lines(2))
    execute(pg_url, "CREATE TABLE orders (id int, touched timestamptz)",
            "CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.touched := now(); RETURN NEW; "
            "END $$",
            "CREATE TRIGGER touch BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION touch()")
    assert audit(pg_url).clean
    with BudgetStore.open(pg_url) as opened:
        assert opened.record(gate_lines(1, prefix="new")[0]).new


def _sqlite_schema_version(path: str) -> int:
    import sqlite3

    with sqlite3.connect(path) as connection:
        return int(connection.execute("PRAGMA schema_version").fetchone()[0])


def test_a_trigger_filed_under_another_type_is_still_seen_and_migrate_refuses_to_guess(tmp_path: Path) -> None:
    """SQLite builds its schema from sqlite_master's SQL and never reads `type` back: a hand-edited row of type
    'Trigger' whose SQL creates a RAISE(IGNORE) trigger still fires. It used to pass the check (which asked for
    type = 'trigger') while writers' checkpoints were silently dropped; now it is schema_tampered, writers refuse,
    and migrate says it cannot repair it (nothing changed) instead of claiming the schema holds."""
    import sqlite3

    target = str(tmp_path / "store.db")
    with BudgetStore.open(target) as opened:
        opened.record_many(gate_lines(3))
    version = _sqlite_schema_version(target)
    connection = sqlite3.connect(target, isolation_level=None)
    connection.execute("PRAGMA writable_schema = ON")
    connection.execute(
        "INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql) VALUES ('Trigger', 'evil', "
        "'compute_budget_checkpoints', 0, 'CREATE TRIGGER evil BEFORE INSERT ON compute_budget_checkpoints "
        "BEGIN SELECT RAISE(IGNORE); END')"
    )
    connection.execute(f"PRAGMA schema_version = {version + 1}")
    connection.close()
    findings = audit(target).findings
    assert {finding.kind.value for finding in findings} == {"schema_tampered"}
    details = " ".join(finding.detail for finding in findings)
    assert "type 'Trigger'" in details
    assert "trigger evil on compute_budget_checkpoints was added by hand" in details
    with BudgetStore.open(target) as opened, pytest.raises(StoreDamaged, match="refusing to append"):
        opened.record(gate_lines(1, prefix="new")[0])
    with pytest.raises(StoreDamaged, match="sqlite_master was edited by hand"):
        BudgetStore.migrate(target)
    assert len(audit(target).findings) == len(findings)  # migrate changed nothing


def test_migrate_removes_a_trigger_that_would_swallow_its_repair_of_the_revision(tmp_path: Path) -> None:
    """A trigger on alembic_version that ignores updates, beside an edited revision record: migrate drops the
    trigger first, so its repair of the record holds, in one run."""
    target = str(tmp_path / "store.db")
    with BudgetStore.open(target) as opened:
        opened.record_many(gate_lines(2))
    execute(target, "UPDATE alembic_version SET version_num = '0004'",
            "CREATE TRIGGER keep BEFORE UPDATE ON alembic_version BEGIN SELECT RAISE(IGNORE); END")
    said: list[str] = []
    BudgetStore.migrate(target, on_restore=said.extend)
    assert any("trigger keep on alembic_version" in line for line in said)
    assert any("it now records" in line for line in said)
    assert_clean_after_repair(target)
    assert rows_of(target, "SELECT version_num FROM alembic_version") == [("0006",)]


def rows_of(target: str, sql: str) -> list[tuple[object, ...]]:
    import sqlite3

    with sqlite3.connect(target) as connection:
        return [tuple(row) for row in connection.execute(sql)]


@pytest.mark.postgres
def test_a_rule_or_row_level_security_on_a_store_table_is_schema_tampered(pg_url: str) -> None:
    """PostgreSQL: a DO INSTEAD NOTHING rule on the checkpoints drops a writer's signed checkpoints, and row-level
    security can hide the newest rows from the auditor's role; both passed the check. Now each is schema_tampered,
    a long-lived writer notices the change between two appends, and migrate removes them."""
    with BudgetStore.open(pg_url) as opened:
        opened.record_many(gate_lines(3))
        opened.record(gate_lines(1, prefix="one")[0])  # the guard checked in full; the next may take the shortcut
        execute(pg_url, "CREATE RULE quiet AS ON INSERT TO compute_budget_checkpoints DO INSTEAD NOTHING")
        with pytest.raises(StoreDamaged, match="rule quiet on compute_budget_checkpoints"):
            opened.record(gate_lines(1, prefix="two")[0])
    execute(pg_url, "ALTER TABLE compute_budget_decisions ENABLE ROW LEVEL SECURITY",
            "CREATE POLICY hide ON compute_budget_decisions FOR SELECT USING (seq <= 2)")
    details = [finding.detail for finding in audit(pg_url).findings]
    assert any("rule quiet on compute_budget_checkpoints was added by hand" in detail for detail in details)
    assert any("row-level security is enabled on compute_budget_decisions" in detail for detail in details)
    said: list[str] = []
    BudgetStore.migrate(pg_url, on_restore=said.extend)
    assert any("rule quiet" in line for line in said)
    assert any("row-level security" in line for line in said)
    assert_clean_after_repair(pg_url)


@pytest.mark.parametrize(
    "edit", ["DELETE FROM alembic_version", "DROP TABLE alembic_version", "INSERT INTO alembic_version VALUES ('0004')"]
)
def test_an_emptied_or_dropped_revision_record_is_schema_tampered_and_migrate_repairs_it(
    store: str, edit: str, run_cli: Run
) -> None:
    """Spec 9.7 for a revision record that is gone, or doubled, not just wrong: it was 'not a compute-budget
    database' (or 'unknown to this release') to every command, migrate included. Now the audit runs every check
    and reports schema_tampered, writers refuse, and one migrate records the head revision again."""
    execute(store, edit)
    findings = audit(store).findings
    assert [finding.kind.value for finding in findings] == ["schema_tampered"]
    assert ("0004,0006" if edit.startswith("INSERT") else "records no revision") in findings[0].detail
    with BudgetStore.open(store) as opened, pytest.raises(StoreDamaged):
        opened.record(gate_lines(1, prefix="new")[0])
    status, out, err = run_cli("migrate", "--db", store)
    assert status == 0, err
    assert ("recorded revision '0004,0006'" if edit.startswith("INSERT") else "recorded no revision") in err
    assert out.startswith("schema at head revision ")  # a repair, not "migrated from ... to head"
    assert_clean_after_repair(store)
    with BudgetStore.open(store) as opened:
        assert opened.record(gate_lines(1, prefix="new")[0]).new


def test_migrate_says_nothing_was_repaired_when_a_problem_survives(tmp_path: Path) -> None:
    """A column order migrate cannot restore, beside a trigger it can drop: migrate used to announce every repair,
    then fail and roll them back. Now it is one error saying it changed nothing and what to do instead, and the
    trigger is still there (nothing was committed)."""
    import sqlite3

    target = str(tmp_path / "store.db")
    with BudgetStore.open(target) as opened:
        opened.record_many(gate_lines(2))
    execute(target,
            "CREATE TRIGGER keep BEFORE UPDATE ON alembic_version BEGIN SELECT RAISE(IGNORE); END",
            "ALTER TABLE compute_budget_witness_sizes RENAME TO old_sizes",
            "CREATE TABLE compute_budget_witness_sizes (id INTEGER PRIMARY KEY, tree_size INTEGER NOT NULL, "
            "witness_name TEXT NOT NULL, witness_key_id VARCHAR(8) NOT NULL, recorded_at TEXT NOT NULL)",
            "DROP TABLE old_sizes")
    said: list[str] = []
    with pytest.raises(StoreDamaged, match="cannot repair this, and changed nothing") as raised:
        BudgetStore.migrate(target, on_restore=said.extend)
    assert "copy --through" in str(raised.value)
    assert said == []
    with sqlite3.connect(target) as connection:
        names = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")]
    assert "keep" in names


@pytest.mark.postgres
def test_a_dropped_revision_record_in_a_shared_postgresql_schema_is_repaired(pg_url: str) -> None:
    """Beside another application's table, a dropped alembic_version made the store 'not a compute-budget
    database' (the tables were compared for equality, not inclusion): it is schema_tampered and migrate repairs
    it, saying to rerun grants since the table is new."""
    with BudgetStore.open(pg_url) as opened:
        opened.record_many(gate_lines(2))
    execute(pg_url, "CREATE TABLE orders (id int)", "DROP TABLE alembic_version")
    assert [finding.kind.value for finding in audit(pg_url).findings] == ["schema_tampered"]
    said: list[str] = []
    BudgetStore.migrate(pg_url, on_restore=said.extend)
    assert any("run `compute-budget grants` again" in line for line in said)
    assert_clean_after_repair(pg_url)


def test_list_and_show_warn_when_the_schema_is_not_this_releases(store: str, run_cli: Run) -> None:
    """A reader may not see every row when the schema was changed (row-level security hides rows from a role):
    `list` and `show` still answer, with one warning line pointing at the audit; an intact store gets none."""
    status, _, err = run_cli("list", "--db", store)
    assert (status, err) == (0, "")
    _drop_guard(store)
    for argv in (("list", "--db", store), ("show", "--gate", "gate-0000000", "--db", store)):
        status, out, err = run_cli(*argv)
        assert status == 0
        assert "gate-0000000" in out
        assert err.startswith("compute-budget: warning: trigger ")
        assert "run `compute-budget audit`" in err.splitlines()[0]
    assert run_cli("list", "--db", store)[1]
