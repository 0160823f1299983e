"""The database-level append-only guard, as DDL per backend, installed and restored by the migrations.

SQLite: triggers that abort UPDATE and DELETE, and an INSERT that would replace a stored row (``INSERT OR
REPLACE`` deletes without firing DELETE triggers). PostgreSQL: row triggers on UPDATE and DELETE and a
statement trigger on TRUNCATE (which skips row triggers). Every message contains ``append-only``.
"""

from __future__ import annotations

from sqlalchemy import Connection

from compute_budget.store.table import (
    CHECKPOINTS_TABLE,
    COSIGNATURES_TABLE,
    NODES_TABLE,
    ORIGIN_TABLE,
    PROVENANCE_TABLE,
    REPAIRS_TABLE,
    TABLE_NAME,
    WITNESS_SIZES_TABLE,
)

SQLITE_GUARD: tuple[str, ...] = (
    f"""CREATE TRIGGER {TABLE_NAME}_no_update BEFORE UPDATE ON {TABLE_NAME}
    BEGIN SELECT RAISE(ABORT, '{TABLE_NAME} is append-only: UPDATE is not allowed'); END""",
    f"""CREATE TRIGGER {TABLE_NAME}_no_delete BEFORE DELETE ON {TABLE_NAME}
    BEGIN SELECT RAISE(ABORT, '{TABLE_NAME} is append-only: DELETE is not allowed'); END""",
    f"""CREATE TRIGGER {TABLE_NAME}_no_replace BEFORE INSERT ON {TABLE_NAME}
    WHEN EXISTS (SELECT 1 FROM {TABLE_NAME} WHERE budget_id = NEW.budget_id OR seq = NEW.seq)
    BEGIN SELECT RAISE(ABORT, '{TABLE_NAME} is append-only: a stored row cannot be replaced'); END""",
)
SQLITE_UNGUARD: tuple[str, ...] = tuple(
    f"DROP TRIGGER IF EXISTS {TABLE_NAME}_{name}" for name in ("no_update", "no_delete", "no_replace")
)

POSTGRESQL_GUARD: tuple[str, ...] = (
    f"""CREATE OR REPLACE FUNCTION {TABLE_NAME}_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION USING
            MESSAGE = '{TABLE_NAME} is append-only: ' || TG_OP || ' is not allowed',
            ERRCODE = 'insufficient_privilege';
    END $$""",
    f"""CREATE TRIGGER {TABLE_NAME}_no_update_delete BEFORE UPDATE OR DELETE ON {TABLE_NAME}
    FOR EACH ROW EXECUTE FUNCTION {TABLE_NAME}_append_only()""",
    f"""CREATE TRIGGER {TABLE_NAME}_no_truncate BEFORE TRUNCATE ON {TABLE_NAME}
    FOR EACH STATEMENT EXECUTE FUNCTION {TABLE_NAME}_append_only()""",
)
POSTGRESQL_UNGUARD: tuple[str, ...] = (
    f"DROP TRIGGER IF EXISTS {TABLE_NAME}_no_update_delete ON {TABLE_NAME}",
    f"DROP TRIGGER IF EXISTS {TABLE_NAME}_no_truncate ON {TABLE_NAME}",
    f"DROP FUNCTION IF EXISTS {TABLE_NAME}_append_only()",
)

# The seal's tables (migration 0003) are append-only too: the origin is set once, the signed checkpoints and the
# stored tree nodes are only ever added. A no-replace trigger costs one primary-key probe per insert, which these
# small tables (one row per append transaction, one node per 128 rows) can afford.
_SEAL_KEYS = {
    ORIGIN_TABLE: "id = NEW.id",
    NODES_TABLE: "level = NEW.level AND idx = NEW.idx",
    CHECKPOINTS_TABLE: "id = NEW.id",
    PROVENANCE_TABLE: "id = NEW.id",  # migration 0004
    WITNESS_SIZES_TABLE: "id = NEW.id",  # migration 0005
    COSIGNATURES_TABLE: "id = NEW.id",
    REPAIRS_TABLE: "id = NEW.id",  # migration 0006
}

SQLITE_SEAL_GUARD: tuple[str, ...] = tuple(
    statement
    for table, key in _SEAL_KEYS.items()
    for statement in (
        f"""CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table}
    BEGIN SELECT RAISE(ABORT, '{table} is append-only: UPDATE is not allowed'); END""",
        f"""CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table}
    BEGIN SELECT RAISE(ABORT, '{table} is append-only: DELETE is not allowed'); END""",
        f"""CREATE TRIGGER {table}_no_replace BEFORE INSERT ON {table}
    WHEN EXISTS (SELECT 1 FROM {table} WHERE {key})
    BEGIN SELECT RAISE(ABORT, '{table} is append-only: a stored row cannot be replaced'); END""",
    )
)
SQLITE_SEAL_UNGUARD: tuple[str, ...] = tuple(
    f"DROP TRIGGER IF EXISTS {table}_{name}"
    for table in _SEAL_KEYS
    for name in ("no_update", "no_delete", "no_replace")
)

SEAL_GUARD_FUNCTION = "compute_budget_seal_append_only"
POSTGRESQL_SEAL_GUARD: tuple[str, ...] = (
    f"""CREATE OR REPLACE FUNCTION {SEAL_GUARD_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION USING
            MESSAGE = TG_TABLE_NAME || ' is append-only: ' || TG_OP || ' is not allowed',
            ERRCODE = 'insufficient_privilege';
    END $$""",
    *(
        statement
        for table in _SEAL_KEYS
        for statement in (
            f"""CREATE TRIGGER {table}_no_update_delete BEFORE UPDATE OR DELETE ON {table}
    FOR EACH ROW EXECUTE FUNCTION {SEAL_GUARD_FUNCTION}()""",
            f"""CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table}
    FOR EACH STATEMENT EXECUTE FUNCTION {SEAL_GUARD_FUNCTION}()""",
        )
    ),
)
POSTGRESQL_SEAL_UNGUARD: tuple[str, ...] = (
    *(
        f"DROP TRIGGER IF EXISTS {table}_{name} ON {table}"
        for table in _SEAL_KEYS
        for name in ("no_update_delete", "no_truncate")
    ),
    f"DROP FUNCTION IF EXISTS {SEAL_GUARD_FUNCTION}()",
)

_GUARDS = {"sqlite": (SQLITE_GUARD, SQLITE_UNGUARD), "postgresql": (POSTGRESQL_GUARD, POSTGRESQL_UNGUARD)}


def create_guard(connection: Connection) -> None:
    """Install the append-only guard for the connection's backend (an unknown backend is refused)."""
    for statement in _statements(connection)[0]:
        connection.exec_driver_sql(statement)


def drop_guard(connection: Connection) -> None:
    """Remove the guard (only a migration's downgrade, or a rebuild that restores it, may do this)."""
    for statement in _statements(connection)[1]:
        connection.exec_driver_sql(statement)


def _statements(connection: Connection) -> tuple[tuple[str, ...], tuple[str, ...]]:
    backend = connection.dialect.name
    if backend not in _GUARDS:
        raise NotImplementedError(f"no append-only guard is written for the {backend} backend")
    return _GUARDS[backend]
