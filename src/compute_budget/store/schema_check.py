"""The store checks its own schema: the guard's triggers (and PostgreSQL's guard function) and the guarded
tables' columns, against what this release creates (spec section 8, `schema_tampered`).

Definitions are compared after normalising whitespace, identifier quoting and schema prefixes, because a
fresh store and an upgraded one differ in SQL text, never in meaning. An extra index is not tampering; an extra
trigger on a guarded table is (a `BEFORE INSERT … RAISE(IGNORE)` added by hand would make writers lie), and so is
one elsewhere that could write to them or hide the bookkeeping (`foreign_triggers`).
"""

from __future__ import annotations

import re

from sqlalchemy import Connection

from compute_budget.core.row import ROW_COLUMNS
from compute_budget.errors import StoreDamaged
from compute_budget.store.table import (
    TABLE_NAME,
    checkpoints,
    cosignatures,
    origin,
    provenance,
    repairs,
    tree_nodes,
    witness_sizes,
)
from compute_budget.store.triggers import (
    POSTGRESQL_GUARD,
    POSTGRESQL_SEAL_GUARD,
    SEAL_GUARD_FUNCTION,
    SQLITE_GUARD,
    SQLITE_SEAL_GUARD,
    create_guard,
)

# Every guarded table and its columns, in order: the decisions, then the seal's tables (migration 0003).
GUARDED_COLUMNS: dict[str, tuple[str, ...]] = {
    TABLE_NAME: ROW_COLUMNS,
    **{
        table.name: tuple(column.name for column in table.columns)
        for table in (origin, tree_nodes, checkpoints, provenance, witness_sizes, cosignatures, repairs)
    },
}

_SQLITE_NAME = re.compile(r"CREATE\s+TRIGGER\s+(\S+)\s+\S+\s+\S+\s+ON\s+(\S+)", re.IGNORECASE)

# What PostgreSQL itself prints for the guard (pg_get_triggerdef / pg_get_functiondef), normalised.
_POSTGRESQL_TRIGGERS: dict[str, dict[str, str]] = {
    TABLE_NAME: {
        f"{TABLE_NAME}_no_truncate": (
            f"CREATE TRIGGER {TABLE_NAME}_no_truncate BEFORE TRUNCATE ON {TABLE_NAME} FOR EACH STATEMENT "
            f"EXECUTE FUNCTION {TABLE_NAME}_append_only()"
        ),
        f"{TABLE_NAME}_no_update_delete": (
            f"CREATE TRIGGER {TABLE_NAME}_no_update_delete BEFORE DELETE OR UPDATE ON {TABLE_NAME} FOR EACH ROW "
            f"EXECUTE FUNCTION {TABLE_NAME}_append_only()"
        ),
    }
}
_POSTGRESQL_TRIGGERS.update(
    {
        table: {
            f"{table}_no_truncate": (
                f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} FOR EACH STATEMENT "
                f"EXECUTE FUNCTION {SEAL_GUARD_FUNCTION}()"
            ),
            f"{table}_no_update_delete": (
                f"CREATE TRIGGER {table}_no_update_delete BEFORE DELETE OR UPDATE ON {table} FOR EACH ROW "
                f"EXECUTE FUNCTION {SEAL_GUARD_FUNCTION}()"
            ),
        }
        for table in GUARDED_COLUMNS
        if table != TABLE_NAME
    }
)
_POSTGRESQL_FUNCTIONS: dict[str, str] = {
    SEAL_GUARD_FUNCTION: (
        f"CREATE OR REPLACE FUNCTION {SEAL_GUARD_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $function$ "
        "BEGIN RAISE EXCEPTION USING MESSAGE = TG_TABLE_NAME || ' is append-only: ' || TG_OP || ' is not allowed', "
        "ERRCODE = 'insufficient_privilege'; END $function$"
    ),
    f"{TABLE_NAME}_append_only": (
        f"CREATE OR REPLACE FUNCTION {TABLE_NAME}_append_only() RETURNS trigger LANGUAGE plpgsql AS $function$ "
        f"BEGIN RAISE EXCEPTION USING MESSAGE = '{TABLE_NAME} is append-only: ' || TG_OP || ' is not allowed', "
        "ERRCODE = 'insufficient_privilege'; END $function$"
    )
}
assert all(name in " ".join(POSTGRESQL_GUARD + POSTGRESQL_SEAL_GUARD) for name in _POSTGRESQL_FUNCTIONS)


def normalise(sql: str) -> str:
    """A definition with whitespace collapsed, identifier quotes and `schema.` prefixes removed."""
    text = re.sub(r'["`\[\]]', "", sql)
    text = re.sub(r"\b\w+\.(compute_budget_\w+)", r"\1", text)
    return re.sub(r"\s+", " ", text).strip().rstrip(";").strip()


def _expected_sqlite() -> dict[str, dict[str, str]]:
    expected: dict[str, dict[str, str]] = {table: {} for table in GUARDED_COLUMNS}
    for statement in SQLITE_GUARD + SQLITE_SEAL_GUARD:
        match = _SQLITE_NAME.search(statement)
        assert match is not None
        expected.setdefault(match.group(2), {})[match.group(1)] = normalise(statement)
    return expected


def schema_problems(connection: Connection) -> list[str]:
    """What differs from the schema this release creates, one sentence each (empty: the schema holds)."""
    problems = _revision_problems(connection)
    if connection.dialect.name == "postgresql":
        return problems + _postgresql_problems(connection)
    return problems + _sqlite_problems(connection)


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


def _compare(table: str, expected: dict[str, str], found: dict[str, str], disabled: set[str]) -> list[str]:
    problems = []
    for name in sorted(expected):
        if name not in found:
            problems.append(f"trigger {name} of the append-only guard on {table} is missing")
        elif name in disabled:
            problems.append(f"trigger {name} of the append-only guard on {table} is disabled")
        elif found[name] != expected[name]:
            problems.append(f"trigger {name} on {table} was altered: it now reads {found[name]!r}")
    problems += [f"trigger {name} on {table} was added by hand" for name in sorted(set(found) - set(expected))]
    return problems


def _columns(table: str, found: list[str]) -> list[str]:
    expected = GUARDED_COLUMNS[table]
    if found == list(expected):
        return []
    added = [name for name in found if name not in expected]
    removed = [name for name in expected if name not in found]
    if added or removed:
        changes = [f"added {', '.join(added)}"] * bool(added) + [f"removed {', '.join(removed)}"] * bool(removed)
        return [f"table {table} has columns {' and '.join(changes)}"]
    return [f"table {table} has its columns in another order than this release created"]


# What SQLite itself writes in sqlite_master's `type` column. SQLite builds its schema from the `sql` column and
# never reads `type` back, so a row edited to say 'Trigger' (PRAGMA writable_schema) is still a trigger.
_SQLITE_TYPES = frozenset({"table", "index", "view", "trigger"})
_CREATE_TRIGGER = re.compile(r"\s*CREATE\s+(?:TEMP\s+|TEMPORARY\s+)?TRIGGER\b", re.IGNORECASE)


def _sqlite_schema(connection: Connection) -> list[tuple[str, str, str, str]]:
    """Every row of sqlite_master as (type, name, tbl_name, sql)."""
    rows = connection.exec_driver_sql("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    return [(str(kind), str(name), str(table), "" if sql is None else str(sql)) for kind, name, table, sql in rows]


def _sqlite_triggers(schema: list[tuple[str, str, str, str]]) -> list[tuple[str, str, str]]:
    """The triggers SQLite will run, as (table, name, sql): by what their SQL creates, whatever `type` says."""
    return [
        (table, name, sql) for kind, name, table, sql in schema
        if kind.lower() == "trigger" or _CREATE_TRIGGER.match(sql)
    ]


def _sqlite_problems(connection: Connection) -> list[str]:
    expected = _expected_sqlite()
    schema = _sqlite_schema(connection)
    problems = [
        f"the schema table lists {name!r} with type {kind!r}, which SQLite never writes: sqlite_master was edited "
        "by hand (restore the file from a backup, or salvage its rows with `compute-budget copy --through`)"
        for kind, name, _, _ in schema if kind not in _SQLITE_TYPES
    ]
    triggers = _sqlite_triggers(schema)
    for table in GUARDED_COLUMNS:
        found = {name: normalise(sql) for tbl, name, sql in triggers if tbl == table}
        problems += _compare(table, expected.get(table, {}), found, set())
        columns = [str(row[1]) for row in connection.exec_driver_sql(f"PRAGMA table_info({table})")]
        if columns:
            problems += _columns(table, columns)
    foreign = sorted((table, name) for table, name, _ in triggers if table not in GUARDED_COLUMNS)
    return problems + [_foreign_problem(name, table) for table, name in foreign]


def _foreign_problem(name: str, table: str) -> str:
    return (
        f"trigger {name} on {table} was added by hand: a trigger elsewhere in the store can write to the guarded "
        "tables or hide the bookkeeping"
    )


# On PostgreSQL the store may share its schema with other applications' tables and their triggers: those count only
# when they sit on the store's own bookkeeping (`alembic_version`) or their function names a store table.
_POSTGRESQL_OTHER_TRIGGERS = (
    "SELECT c.relname, t.tgname, p.prosrc FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
    "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_proc p ON p.oid = t.tgfoid "
    "WHERE n.nspname = current_schema() AND NOT t.tgisinternal AND c.relname <> ALL(%s) ORDER BY c.relname, t.tgname"
)


# The store's own tables, its bookkeeping included: a rule or row-level security on any of them is tampering (this
# release creates neither; a rule rewrites statements before any trigger runs, a policy filters what a role reads).
_STORE_TABLES = (*GUARDED_COLUMNS, "alembic_version")


def _postgresql_rules(connection: Connection) -> list[tuple[str, str]]:
    rows = connection.exec_driver_sql(
        "SELECT c.relname, r.rulename FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relname = ANY(%s) "
        "ORDER BY c.relname, r.rulename",
        (list(_STORE_TABLES),),
    ).fetchall()
    return [(str(table), str(name)) for table, name in rows]


def _postgresql_row_security(connection: Connection) -> list[str]:
    rows = connection.exec_driver_sql(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND c.relname = ANY(%s) AND (c.relrowsecurity OR c.relforcerowsecurity) "
        "ORDER BY c.relname",
        (list(_STORE_TABLES),),
    ).fetchall()
    return [str(table) for (table,) in rows]


def foreign_triggers(connection: Connection) -> list[tuple[str, str]]:
    """Triggers this release did not make outside the guarded tables, as (table, trigger name): on SQLite every one
    (the file is the store's alone); on PostgreSQL those on `alembic_version` or whose function names a store table."""
    if connection.dialect.name == "postgresql":
        rows = connection.exec_driver_sql(_POSTGRESQL_OTHER_TRIGGERS, (list(GUARDED_COLUMNS),)).fetchall()
        return [
            (str(table), str(name))
            for table, name, source in rows
            if str(table) == "alembic_version" or "compute_budget" in str(source).lower()
        ]
    triggers = _sqlite_triggers(_sqlite_schema(connection))
    return sorted((table, name) for table, name, _ in triggers if table not in GUARDED_COLUMNS)


def _postgresql_problems(connection: Connection) -> list[str]:
    problems: list[str] = []
    for table in GUARDED_COLUMNS:
        rows = connection.exec_driver_sql(
            "SELECT tgname, tgenabled, pg_get_triggerdef(t.oid) FROM pg_trigger t "
            "JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relname = %s AND n.nspname = current_schema() AND NOT t.tgisinternal",
            (table,),
        ).fetchall()
        found = {str(name): normalise(str(definition)) for name, _, definition in rows}
        disabled = {str(name) for name, enabled, _ in rows if enabled == "D"}
        problems += _compare(table, _POSTGRESQL_TRIGGERS.get(table, {}), found, disabled)
        columns = [
            str(name)
            for (name,) in connection.exec_driver_sql(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                "AND table_schema = current_schema() ORDER BY ordinal_position",
                (table,),
            )
        ]
        if columns:
            problems += _columns(table, columns)
    problems += [_foreign_problem(name, table) for table, name in foreign_triggers(connection)]
    problems += [
        f"rule {name} on {table} was added by hand: a rule can drop or redirect what a writer inserts or reads"
        for table, name in _postgresql_rules(connection)
    ]
    problems += [
        f"row-level security is enabled on {table}: a policy can hide rows from the auditor's role"
        for table in _postgresql_row_security(connection)
    ]
    for function, expected in _POSTGRESQL_FUNCTIONS.items():
        row = connection.exec_driver_sql(
            "SELECT pg_get_functiondef(p.oid) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE p.proname = %s AND n.nspname = current_schema()",
            (function,),
        ).first()
        if row is None:
            problems.append(f"function {function} of the append-only guard is missing")
        elif normalise(str(row[0])) != expected:
            problems.append(f"function {function} of the append-only guard was altered")
    return problems


def clear_foreign(connection: Connection) -> list[str]:
    """Remove what this release never makes and could interfere with a repair (`foreign_triggers`, and on
    PostgreSQL rules and row-level security on the store's tables); one sentence per thing removed. `migrate`
    runs it before it writes anything (a trigger on `alembic_version` could swallow the repair of the record)."""
    postgresql = connection.dialect.name == "postgresql"
    removed = [_foreign_problem(name, table) for table, name in foreign_triggers(connection)]
    if postgresql:
        removed += [f"rule {name} on {table} was added by hand" for table, name in _postgresql_rules(connection)]
        removed += [f"row-level security was enabled on {table}" for table in _postgresql_row_security(connection)]
    if removed:
        _drop_foreign(connection)
    return removed


def _drop_foreign(connection: Connection) -> None:
    postgresql = connection.dialect.name == "postgresql"
    for table, name in foreign_triggers(connection):
        quoted = '"' + name.replace('"', '""') + '"'
        on_table = ' ON "' + table.replace('"', '""') + '"' if postgresql else ""
        connection.exec_driver_sql(f"DROP TRIGGER IF EXISTS {quoted}{on_table}")
    if postgresql:
        for table, name in _postgresql_rules(connection):
            connection.exec_driver_sql(f'DROP RULE IF EXISTS "{name.replace(chr(34), chr(34) * 2)}" ON {table}')
        for table in _postgresql_row_security(connection):
            connection.exec_driver_sql(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
            connection.exec_driver_sql(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")


def refuse_edited_sqlite_schema(connection: Connection) -> None:
    """`StoreDamaged` when sqlite_master holds a row of a type SQLite never writes (PRAGMA writable_schema)."""
    edited = [name for kind, name, _, _ in _sqlite_schema(connection) if kind not in _SQLITE_TYPES]
    if edited:  # DROP TRIGGER deletes only rows whose type is 'trigger': this cannot be undone from SQL
        raise StoreDamaged(
            f"sqlite_master was edited by hand (rows {', '.join(repr(name) for name in edited[:5])} have a type "
            "SQLite never writes); migrate cannot repair that: restore the file from a backup, or salvage its "
            "rows with `compute-budget copy --through`"
        )


def restore_guard(connection: Connection) -> None:
    """Drop every trigger on the guarded tables (hand-made ones too) and those `foreign_triggers` finds elsewhere,
    and install the guard this release creates."""
    postgresql = connection.dialect.name == "postgresql"
    if not postgresql:
        refuse_edited_sqlite_schema(connection)
    _drop_foreign(connection)
    for table in GUARDED_COLUMNS:
        if postgresql:
            names = connection.exec_driver_sql(
                "SELECT tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.relname = %s AND n.nspname = current_schema() AND NOT t.tgisinternal",
                (table,),
            ).scalars().all()
        else:
            names = [name for tbl, name, _ in _sqlite_triggers(_sqlite_schema(connection)) if tbl == table]
        for name in names:
            quoted = '"' + str(name).replace('"', '""') + '"'
            connection.exec_driver_sql(f"DROP TRIGGER IF EXISTS {quoted}" + (f" ON {table}" if postgresql else ""))
    if postgresql:
        for function in _POSTGRESQL_FUNCTIONS:
            connection.exec_driver_sql(f"DROP FUNCTION IF EXISTS {function}() CASCADE")
    create_guard(connection)
    for statement in POSTGRESQL_SEAL_GUARD if postgresql else SQLITE_SEAL_GUARD:
        connection.exec_driver_sql(statement)
