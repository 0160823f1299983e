"""Alembic glue: where the migrations are, which revision is head, and what state a database is in.

The schema is only ever created or changed by the migrations (never `create_all`), because the
append-only guard lives in them.
"""

from __future__ import annotations

import functools
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, inspect, text

from compute_budget.store.table import HEAD_TABLES, TABLE_NAME

if TYPE_CHECKING:
    from alembic.config import Config

_PACKAGE_DIR = Path(__file__).resolve().parent

# This release's revisions, oldest first. Written out so that opening a store (every CLI run, the nightly audit)
# needs no Alembic import and no reading of the revision scripts; a test holds them equal to the scripts.
REVISIONS: tuple[str, ...] = ("0001", "0002", "0003", "0004", "0005", "0006")


def migrations_path() -> Path:
    """The Alembic environment and revisions, shipped inside the package (`store/alembic`)."""
    return _PACKAGE_DIR / "alembic"


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config for our migrations; with `connection`, migrations run on it (shared connection)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_path()))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The single head revision of this release's migrations."""
    return REVISIONS[-1]


def known_revisions() -> frozenset[str]:
    """Every revision this release knows."""
    return frozenset(REVISIONS)


@functools.cache
def script_revisions() -> tuple[str | None, tuple[str, ...]]:
    """The head and every revision as Alembic reads them from the scripts (what `REVISIONS` must equal)."""
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(alembic_config())
    return scripts.get_current_head(), tuple(reversed([script.revision for script in scripts.walk_revisions()]))


class SchemaState(StrEnum):
    """What a database holds, as far as compute-budget is concerned."""

    EMPTY = "empty"  # no tables at all: a writer creates the schema here
    AT_HEAD = "at_head"
    BEHIND = "behind"  # a known, older revision: `compute-budget migrate` upgrades it
    AHEAD = "ahead"  # a revision this release does not know (written by a newer release?)
    FOREIGN = "foreign"  # tables, but not ours
    TABLE_MISSING = "table_missing"  # our revision, but the decisions table was dropped
    # Spec 9.7: the tables are exactly this release's head tables, but alembic_version records another revision
    # (behind head or unknown): its bookkeeping was edited. Read and audited (`schema_tampered`); `migrate` repairs.
    REVISION_TAMPERED = "revision_tampered"


def schema_state(connection: Connection) -> tuple[SchemaState, str | None]:
    """The database's state and its current revision."""
    tables = set(inspect(connection).get_table_names())
    if not tables:
        return SchemaState.EMPTY, None
    # The store's tables are exactly this release's head tables (spec 9.7). Only compute_budget_* tables count: a
    # PostgreSQL schema may hold other applications' tables beside them, while a newer release's added table of
    # ours makes the store "ahead", never "tampered" (migrate must not rewrite a newer release's record).
    ours = {table for table in tables if table.startswith("compute_budget_")}
    head_tables = ours == HEAD_TABLES - {"alembic_version"}
    if "alembic_version" not in tables:
        # The head tables with the bookkeeping table dropped: edited like a wrong revision (spec 9.7).
        return (SchemaState.REVISION_TAMPERED if head_tables else SchemaState.FOREIGN), None
    if "version_num" not in {column["name"] for column in inspect(connection).get_columns("alembic_version")}:
        return SchemaState.FOREIGN, None  # a table of that name, but not Alembic's
    # What Alembic's MigrationContext.get_current_revision reads, without importing Alembic.
    versions = [row[0] for row in connection.execute(text("SELECT version_num FROM alembic_version"))]
    if len(versions) > 1:  # branches: never written by this release's linear history
        listed = ",".join(sorted(str(version) for version in versions))
        # Beside this release's head tables, a second record is an edit of the bookkeeping (spec 9.7), not a newer
        # release's branches.
        return (SchemaState.REVISION_TAMPERED if head_tables else SchemaState.AHEAD), listed
    revision = str(versions[0]) if versions and versions[0] is not None else None
    if revision is None:
        if head_tables:  # the head tables, their revision record emptied (spec 9.7)
            return SchemaState.REVISION_TAMPERED, None
        return (SchemaState.EMPTY, None) if tables == {"alembic_version"} else (SchemaState.FOREIGN, None)
    if revision == head_revision():
        return (SchemaState.AT_HEAD if TABLE_NAME in tables else SchemaState.TABLE_MISSING), revision
    if head_tables:
        return SchemaState.REVISION_TAMPERED, revision
    if revision in known_revisions():
        return SchemaState.BEHIND, revision
    return SchemaState.AHEAD, revision


def repair_revision(connection: Connection) -> bool:
    """Record this release's head revision in `alembic_version` (spec 9.7), the table made again as Alembic makes it
    when it was dropped (then True: roles need their grants on it again), and emptied of any other record first."""
    made = "alembic_version" not in set(inspect(connection).get_table_names())
    if made:
        connection.execute(text(
            "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL, "
            "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))"
        ))
    connection.execute(text("DELETE FROM alembic_version"))
    connection.execute(text("INSERT INTO alembic_version (version_num) VALUES (:head)"), {"head": head_revision()})
    return made


def upgrade_to_head(connection: Connection) -> None:
    """Run every pending migration on `connection`, inside its current transaction."""
    from alembic import command

    command.upgrade(alembic_config(connection), "head")
