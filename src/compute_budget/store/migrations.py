"""Alembic glue: where the migrations are, which revision is head, and what state a database is in.

The schema is only ever created or changed by the migrations (never `create_all`), because the
append-only guard lives in them.
"""

from __future__ import annotations

import functools
from enum import StrEnum
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect

from compute_budget.store.table import TABLE_NAME

_PACKAGE_DIR = Path(__file__).resolve().parent


def migrations_path() -> Path:
    """The Alembic environment and revisions, shipped inside the package (`store/alembic`)."""
    return _PACKAGE_DIR / "alembic"


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config for our migrations; with `connection`, migrations run on it (shared connection)."""
    config = Config()
    config.set_main_option("script_location", str(migrations_path()))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@functools.cache
def head_revision() -> str:
    """The single head revision of this release's migrations."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:  # pragma: no cover  (a release always ships its migrations)
        raise RuntimeError(f"no migrations found in {migrations_path()}")
    return head


@functools.cache
def known_revisions() -> frozenset[str]:
    """Every revision this release knows."""
    return frozenset(script.revision for script in ScriptDirectory.from_config(alembic_config()).walk_revisions())


class SchemaState(StrEnum):
    """What a database holds, as far as compute-budget is concerned."""

    EMPTY = "empty"  # no tables at all: a writer creates the schema here
    AT_HEAD = "at_head"
    BEHIND = "behind"  # a known, older revision: `compute-budget migrate` upgrades it
    AHEAD = "ahead"  # a revision this release does not know (written by a newer release?)
    FOREIGN = "foreign"  # tables, but not ours
    TABLE_MISSING = "table_missing"  # our revision, but the decisions table was dropped


def schema_state(connection: Connection) -> tuple[SchemaState, str | None]:
    """The database's state and its current revision."""
    tables = set(inspect(connection).get_table_names())
    if not tables:
        return SchemaState.EMPTY, None
    if "alembic_version" not in tables:
        return SchemaState.FOREIGN, None
    revision = MigrationContext.configure(connection).get_current_revision()
    if revision is None:
        return (SchemaState.EMPTY, None) if tables == {"alembic_version"} else (SchemaState.FOREIGN, None)
    if revision == head_revision():
        return (SchemaState.AT_HEAD if TABLE_NAME in tables else SchemaState.TABLE_MISSING), revision
    if revision in known_revisions():
        return SchemaState.BEHIND, revision
    return SchemaState.AHEAD, revision


def upgrade_to_head(connection: Connection) -> None:
    """Run every pending migration on `connection`, inside its current transaction."""
    command.upgrade(alembic_config(connection), "head")
