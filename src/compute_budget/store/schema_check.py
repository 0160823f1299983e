"""The store checks its own schema: the guard's triggers (and PostgreSQL's guard function) and the guarded
tables' columns, against what this release creates (spec section 8, `schema_tampered`).

Definitions are compared after normalising whitespace, identifier quoting and schema prefixes, because a
fresh store and an upgraded one differ in SQL text, never in meaning. An extra index is not tampering; an extra
trigger on a guarded table is (a `BEFORE INSERT … RAISE(IGNORE)` added by hand would make writers lie), and so is
one elsewhere that could write to them or hide the bookkeeping (`foreign_triggers`). What is read, and how, is
each backend's (`Backend.guard_problems` and the methods beside it); the order and the repair are here.
"""

from __future__ import annotations

from sqlalchemy import Connection

from compute_budget.store.backends import backend_for
from compute_budget.store.backends.base import GUARDED_COLUMNS, foreign_problem, normalise

__all__ = [
    "GUARDED_COLUMNS",
    "clear_foreign",
    "foreign_triggers",
    "normalise",
    "refuse_edited_schema",
    "restore_guard",
    "schema_problems",
]


def schema_problems(connection: Connection) -> list[str]:
    """What differs from the schema this release creates, one sentence each (empty: the schema holds)."""
    return _revision_problems(connection) + backend_for(connection).guard_problems(connection)


def _revision_problems(connection: Connection) -> list[str]:
    """Spec 9.7: the recorded revision of a database whose tables are this release's head tables."""
    from compute_budget.store.migrations import SchemaState, head_revision, schema_state

    state, revision = schema_state(connection)
    if state is not SchemaState.REVISION_TAMPERED:
        return []
    recorded = f"records schema revision {revision!r}" if revision else "records no revision (emptied or dropped)"
    return [
        f"alembic_version {recorded}, but the tables are this release's head revision "
        f"{head_revision()}: the schema's bookkeeping was edited by hand (`compute-budget migrate` repairs it)"
    ]


def foreign_triggers(connection: Connection) -> list[tuple[str, str]]:
    """Triggers this release did not make outside the guarded tables, as (table, trigger name): on SQLite every one
    (the file is the store's alone); on PostgreSQL those on `alembic_version` or whose function names a store table."""
    return backend_for(connection).foreign_triggers(connection)


def clear_foreign(connection: Connection) -> list[str]:
    """Remove what this release never makes and could interfere with a repair (`foreign_triggers`, and on
    PostgreSQL rules and row-level security on the store's tables); one sentence per thing removed. `migrate`
    runs it before it writes anything (a trigger on `alembic_version` could swallow the repair of the record)."""
    backend = backend_for(connection)
    removed = [foreign_problem(name, table) for table, name in backend.foreign_triggers(connection)]
    removed += backend.foreign_extras(connection)
    if removed:
        backend.drop_foreign(connection)
    return removed


def refuse_edited_schema(connection: Connection) -> None:
    """`StoreDamaged` when the database's own catalogue was edited so that migrate cannot repair it (SQLite:
    sqlite_master rows of a type SQLite never writes, PRAGMA writable_schema)."""
    backend_for(connection).refuse_edited_schema(connection)


def restore_guard(connection: Connection) -> None:
    """Drop every trigger on the guarded tables (hand-made ones too) and those `foreign_triggers` finds elsewhere,
    and install the guard this release creates."""
    backend_for(connection).restore_guard(connection)
