"""The Alembic history: pytest-alembic's built-in checks, the guard at head, and both ways of running it."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pytest_alembic.tests import (  # the built-in tests, imported explicitly (see pyproject.toml)
    test_model_definitions_match_ddl,
    test_single_head_revision,
    test_up_down_consistency,
    test_upgrade,
)
from sqlalchemy import Engine

from compute_budget import BudgetStore
from compute_budget.auditor.scan import audit
from compute_budget.store.engine import create_store_engine, locate
from compute_budget.store.migrations import head_revision, migrations_path
from tests.conftest import REPO_ROOT, gate_lines

__all__ = [
    "test_model_definitions_match_ddl",
    "test_single_head_revision",
    "test_up_down_consistency",
    "test_upgrade",
]


@pytest.fixture
def alembic_config() -> dict[str, Any]:
    """pytest-alembic runs our own migrations folder."""
    return {"script_location": str(migrations_path())}


@pytest.fixture
def alembic_engine(tmp_path: Path) -> Engine:
    """pytest-alembic works on a real SQLite file, through the store's own engine setup."""
    return create_store_engine(locate(tmp_path / "alembic.db"), readonly=False)


def _triggers(path: Path) -> set[str]:
    with sqlite3.connect(path) as connection:
        return {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}


GUARD = {
    f"compute_budget_{table}_{trigger}"
    for table in (
        "decisions", "origin", "tree_nodes", "checkpoints", "provenance", "witness_sizes", "cosignatures", "repairs"
    )
    for trigger in ("no_update", "no_delete", "no_replace")
}


def test_guard_holds_at_head_after_every_path(tmp_path: Path) -> None:
    """Created at head, or upgraded through the table-rebuilding 0002, the guard triggers are all there."""
    fresh = tmp_path / "fresh.db"
    with BudgetStore.open(fresh) as store:
        store.record_many(gate_lines(3))
    assert _triggers(fresh) == GUARD
    upgraded = tmp_path / "upgraded.db"
    upgraded.write_bytes((REPO_ROOT / "tests" / "data" / "store_0001.db").read_bytes())
    BudgetStore.migrate(upgraded)
    assert _triggers(upgraded) == GUARD
    with sqlite3.connect(upgraded) as connection, pytest.raises(sqlite3.IntegrityError, match="append-only"):
        connection.execute("UPDATE compute_budget_decisions SET max_steps = 100")


def test_committed_old_database_upgrades_intact_and_audits_clean(tmp_path: Path) -> None:
    """The committed revision-0001 store keeps every row and its chain through the upgrade."""
    path = tmp_path / "old.db"
    path.write_bytes((REPO_ROOT / "tests" / "data" / "store_0001.db").read_bytes())
    with sqlite3.connect(path) as connection:
        before = connection.execute("SELECT * FROM compute_budget_decisions ORDER BY seq").fetchall()
    assert BudgetStore.migrate(path) == ("0001", head_revision())
    with sqlite3.connect(path) as connection:
        after = connection.execute("SELECT * FROM compute_budget_decisions ORDER BY seq").fetchall()
    assert after == before
    assert len(after) == 9
    report = audit(path)
    assert report.clean, report.findings
    assert report.rows_checked == 9


def test_migrate_twice_is_a_no_op(db_path: Path) -> None:
    """migrate on a store at head changes nothing."""
    assert BudgetStore.migrate(db_path) == (None, head_revision())
    assert BudgetStore.migrate(db_path) == (head_revision(), head_revision())


@pytest.mark.slow
def test_alembic_command_line_from_the_repo_root(tmp_path: Path) -> None:
    """`alembic -x db=PATH upgrade head` from the repo root builds a store the code accepts."""
    path = tmp_path / "cli.db"
    alembic = Path(sys.executable).with_name("alembic")
    done = subprocess.run(
        [str(alembic), "-x", f"db={path}", "upgrade", "head"], cwd=REPO_ROOT, capture_output=True, text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert _triggers(path) == GUARD
    with BudgetStore.open(path) as store:
        assert store.record_many(gate_lines(2)).new == 2


@pytest.mark.slow
def test_alembic_takes_the_database_from_the_environment(tmp_path: Path) -> None:
    """Without -x db, alembic uses $COMPUTE_BUDGET_DB like the compute-budget command."""
    path = tmp_path / "env.db"
    alembic = Path(sys.executable).with_name("alembic")
    done = subprocess.run(
        [str(alembic), "upgrade", "head"], cwd=REPO_ROOT, capture_output=True, text=True, check=False,
        env={**os.environ, "COMPUTE_BUDGET_DB": str(path)},
    )
    assert done.returncode == 0, done.stderr
    assert _triggers(path) == GUARD


@pytest.mark.slow
@pytest.mark.parametrize(
    ("database", "guard_lines"),
    [
        ("sqlite_file.db", ["CREATE TRIGGER compute_budget_decisions_no_update", "decisions_no_replace"]),
        (
            "postgresql+psycopg://reviewer@localhost/never_connected",
            ["CREATE OR REPLACE FUNCTION compute_budget_decisions_append_only()",
             "CREATE TRIGGER compute_budget_decisions_no_truncate"],
        ),
    ],
)
def test_offline_sql_prints_the_ddl_with_the_guard(tmp_path: Path, database: str, guard_lines: list[str]) -> None:
    """`alembic upgrade head --sql` (a DBA's review) prints every revision's DDL, triggers included, and
    connects to nothing: the revisions carry their own frozen DDL."""
    alembic = Path(sys.executable).with_name("alembic")
    target = str(tmp_path / database) if "://" not in database else database
    done = subprocess.run(
        [str(alembic), "-x", f"db={target}", "upgrade", "head", "--sql"], cwd=REPO_ROOT, capture_output=True,
        text=True, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "CREATE TABLE compute_budget_decisions" in done.stdout
    for line in guard_lines:
        assert line in done.stdout
    assert "Running upgrade 0001 -> 0002" in done.stdout
    assert "ck_compute_budget_decisions_seq_positive" in done.stdout
    assert "Running upgrade 0002 -> 0003" in done.stdout
    assert "Running upgrade 0003 -> 0004" in done.stdout
    assert "Running upgrade 0004 -> 0005" in done.stdout
    assert "Running upgrade 0005 -> 0006" in done.stdout
    for table in ("compute_budget_origin", "compute_budget_tree_nodes", "compute_budget_checkpoints",
                  "compute_budget_provenance", "compute_budget_witness_sizes", "compute_budget_cosignatures",
                  "compute_budget_repairs"):
        assert f"CREATE TABLE {table}" in done.stdout
        assert f"CREATE TRIGGER {table}_no_" in done.stdout
    assert "INSERT INTO compute_budget_origin" not in done.stdout  # the store names itself, never the script
    assert not (tmp_path / database).exists()  # offline: nothing was opened or created


def test_revisions_import_no_live_code() -> None:
    """A revision never imports compute_budget: its meaning must not change when the live guard does."""
    versions = REPO_ROOT / "src" / "compute_budget" / "store" / "alembic" / "versions"
    revisions = sorted(versions.glob("*.py"))
    assert len(revisions) >= 2
    for revision in revisions:
        assert "compute_budget." not in revision.read_text(encoding="utf-8").replace(
            "compute_budget.v1", ""
        ), revision.name


def test_the_written_out_revisions_are_the_scripts() -> None:
    """`REVISIONS` (read on every open, so no run imports Alembic) equals the revision scripts, oldest first,
    and its last is the scripts' single head."""
    from compute_budget.store.migrations import REVISIONS, script_revisions

    head, revisions = script_revisions()
    assert revisions == REVISIONS
    assert head == REVISIONS[-1] == head_revision()


@pytest.mark.slow
def test_opening_a_store_imports_no_alembic(tmp_path: Path) -> None:
    """A reader (the nightly audit, every CLI command but migrate) starts without Alembic's import cost."""
    path = tmp_path / "store.db"
    with BudgetStore.open(path) as store:
        store.record_many(gate_lines(3))
    probe = (
        "import sys\n"
        "from compute_budget.auditor.scan import audit\n"
        f"assert audit({str(path)!r}).clean\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] == 'alembic'))\n"
    )
    finished = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert finished.stdout.strip() == "[]"


def test_several_version_rows_beside_the_head_tables_are_an_edited_record(tmp_path: Path) -> None:
    """A version table holding two rows (never written by this release's linear history) beside exactly this
    release's tables is an edit of the bookkeeping (spec 9.7: readable, reported, repaired by migrate); it was
    refused as a newer release's. With a table of ours this release does not know, it is still ahead."""
    path = tmp_path / "store.db"
    with BudgetStore.open(path) as store:
        store.record_many(gate_lines(1))
    with sqlite3.connect(path) as connection:
        connection.execute("INSERT INTO alembic_version (version_num) VALUES ('zzzz')")
    from compute_budget.store.migrations import SchemaState, schema_state

    engine = create_store_engine(locate(str(path)), readonly=True)
    try:
        with engine.connect() as connection:
            assert schema_state(connection) == (SchemaState.REVISION_TAMPERED, f"{head_revision()},zzzz")
    finally:
        engine.dispose()
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE compute_budget_from_a_newer_release (id INTEGER)")
    engine = create_store_engine(locate(str(path)), readonly=True)
    try:
        with engine.connect() as connection:
            assert schema_state(connection) == (SchemaState.AHEAD, f"{head_revision()},zzzz")
    finally:
        engine.dispose()


def test_a_version_table_that_is_not_alembics_is_a_foreign_database(tmp_path: Path, run_cli: Any) -> None:
    """A table named alembic_version without Alembic's column is someone else's: one clear refusal, and the
    reader never queries a column that is not there."""
    path = tmp_path / "foreign.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE alembic_version (x INTEGER)")
        connection.execute("INSERT INTO alembic_version VALUES (1)")
    from compute_budget.store.migrations import SchemaState, schema_state

    engine = create_store_engine(locate(str(path)), readonly=True)
    try:
        with engine.connect() as connection:
            assert schema_state(connection) == (SchemaState.FOREIGN, None)
    finally:
        engine.dispose()
    code, out, err = run_cli("audit", "--db", str(path))
    assert code == 2
    assert "no such column" not in err
    assert "not a compute-budget database" in err
    assert out == ""
    assert len(err.strip().splitlines()) == 1
