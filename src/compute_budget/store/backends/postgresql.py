"""PostgreSQL (psycopg 3): a schema that may hold other applications' tables, roles with grants, a server to lose.

Writers queue on a transaction-scoped advisory lock; the guard is row and TRUNCATE triggers calling a plpgsql
function; the guard's fingerprint is a digest of the catalogue state the full check compares; rows go in through
the driver's executemany (a stored budget_id skipped, not raised, in the optimistic append); a copied gate id
holding NUL is stored encoded (`text_codec`); errors are translated by SQLSTATE.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from compute_budget.errors import ComputeBudgetError, StoreDamaged, StoreUnavailable
from compute_budget.store.backends.base import (
    GUARDED_COLUMNS,
    SEAL_KEYS,
    Backend,
    column_problems,
    compare,
    foreign_problem,
    normalise,
    quoted,
)
from compute_budget.store.backends.postgresql_errors import translate_postgresql
from compute_budget.store.grants import Role, fix_statement, needed, quote_identifier
from compute_budget.store.statements import Statements
from compute_budget.store.table import TABLE_NAME
from compute_budget.store.text_codec import decode_row, encode_rows, encode_text

if TYPE_CHECKING:
    from compute_budget.store.location import Location

# A transaction-scoped PostgreSQL advisory lock that every compute-budget writer takes before it reads the
# chain head: the key is fixed, so writers of any version queue on it (even before the table exists).
APPEND_LOCK_KEY = 7227022700


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
        for table in SEAL_KEYS
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
        for table in SEAL_KEYS
        for name in ("no_update_delete", "no_truncate")
    ),
    f"DROP FUNCTION IF EXISTS {SEAL_GUARD_FUNCTION}()",
)


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
        problems += compare(table, _POSTGRESQL_TRIGGERS.get(table, {}), found, disabled)
        columns = [
            str(name)
            for (name,) in connection.exec_driver_sql(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                "AND table_schema = current_schema() ORDER BY ordinal_position",
                (table,),
            )
        ]
        if columns:
            problems += column_problems(table, columns)
    problems += [foreign_problem(name, table) for table, name in _foreign_triggers(connection)]
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


# Everything the guard check compares, as one text: a change to any of it changes the digest.
_POSTGRESQL_FINGERPRINT = (
    "SELECT md5(concat_ws('|', "
    "(SELECT string_agg(c.relname || '.' || t.tgname || ':' || t.tgenabled::text || ':' "
    "|| pg_get_triggerdef(t.oid), ',' ORDER BY c.relname, t.tgname) "
    "FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND NOT t.tgisinternal), "
    # The whole definition, as the full check compares it: SECURITY DEFINER or a SET leaves prosrc as it was.
    "(SELECT string_agg(p.proname || ':' || md5(pg_get_functiondef(p.oid)), ',' ORDER BY p.proname) FROM pg_proc p "
    "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = current_schema() AND p.prokind <> 'a'), "
    "(SELECT string_agg(table_name || '.' || column_name || ':' || data_type || ':' || is_nullable, ',' "
    "ORDER BY table_name, ordinal_position) FROM information_schema.columns WHERE table_schema = current_schema()), "
    "(SELECT string_agg(version_num, ',') FROM alembic_version), "
    "(SELECT string_agg(c.relname || '.' || r.rulename || ':' || md5(pg_get_ruledef(r.oid)), ',' "
    "ORDER BY c.relname, r.rulename) FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class "
    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema()), "
    "(SELECT string_agg(c.relname, ',' ORDER BY c.relname) FROM pg_class c "
    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() "
    "AND (c.relrowsecurity OR c.relforcerowsecurity))))"
)


def _close_scan(connection: Connection, result: Any) -> None:
    """Close a PostgreSQL scan's server-side cursor. When the server went away the close fails too: then the driver's
    connection is closed and the cursor closed locally, so that the error that stopped the scan is the one said, and
    neither a close error (logged or raised) nor psycopg's 'deleted while still open' warning follows it (a scan
    dropped unfinished is closed when it is collected)."""
    # The driver's cursor is closed first, here: SQLAlchemy's own close of a cursor whose server went away logs the
    # failure, traceback and all ("Error closing cursor"), on the pool's logger, beside the one line the command says.
    cursor = getattr(result, "cursor", None)
    if cursor is not None and not getattr(cursor, "closed", True):
        try:
            cursor.close()
        except Exception:  # the server is gone: close the socket, and the cursor then closes locally
            with contextlib.suppress(Exception):
                connection.connection.driver_connection.close()  # type: ignore[union-attr]
            with contextlib.suppress(Exception):
                cursor.close()
    with contextlib.suppress(SQLAlchemyError):
        result.close()


def _foreign_triggers(connection: Connection) -> list[tuple[str, str]]:
    """Triggers outside the guarded tables that are on `alembic_version` or whose function names a store table."""
    rows = connection.exec_driver_sql(_POSTGRESQL_OTHER_TRIGGERS, (list(GUARDED_COLUMNS),)).fetchall()
    return [
        (str(table), str(name))
        for table, name, source in rows
        if str(table) == "alembic_version" or "compute_budget" in str(source).lower()
    ]


class PostgreSQLBackend(Backend):
    """PostgreSQL through psycopg 3."""

    name = "postgresql"
    mark = "%s"
    missing_driver_hint = "install 'compute-budget[postgres]'"
    guard = POSTGRESQL_GUARD
    unguard = POSTGRESQL_UNGUARD
    seal_guard = POSTGRESQL_SEAL_GUARD
    seal_unguard = POSTGRESQL_SEAL_UNGUARD
    owner_hint = " as the store's owner"
    has_roles = True

    def _statements(self) -> Statements:
        # On PostgreSQL a stored budget_id must not raise inside psycopg's executemany pipeline (the aborted
        # pipeline is then logged on stderr while the error unwinds): the optimistic append skips it instead.
        return Statements(
            self.mark,
            conflict_clause="ON CONFLICT (budget_id) DO NOTHING",
            append_lock=f"SELECT pg_advisory_xact_lock({APPEND_LOCK_KEY})",
        )

    def create_engine(self, location: Location, *, readonly: bool) -> Engine:
        """A reader's sessions default to read-only transactions."""
        connect_args: dict[str, Any] = {}
        if readonly:
            connect_args["options"] = "-c default_transaction_read_only=on"
        return create_engine(location.url, connect_args=connect_args)

    def translate(
        self, original: BaseException, text: str, location: Location, *, reading: bool
    ) -> ComputeBudgetError | None:
        """By SQLSTATE (`postgresql_errors`)."""
        return translate_postgresql(original, text, location, reading=reading)

    def lock_for_append(self, connection: Connection) -> None:
        """The advisory lock every compute-budget writer takes first."""
        assert self.statements.append_lock is not None
        connection.exec_driver_sql(self.statements.append_lock)

    def insert(self, connection: Connection, rows: list[tuple[Any, ...]]) -> int:
        """All the rows through the driver's executemany, copied ids encoded."""
        return int(connection.exec_driver_sql(self.statements.insert, encode_rows(rows)).rowcount)

    def insert_skipping_stored(self, connection: Connection, rows: list[tuple[Any, ...]]) -> int | None:
        """`ON CONFLICT (budget_id) DO NOTHING`: a stored row is skipped, and fewer rows are counted."""
        assert self.statements.insert_if_new is not None
        return int(connection.exec_driver_sql(self.statements.insert_if_new, encode_rows(rows)).rowcount)

    def guard_version(self, connection: Connection, location: Location) -> object:
        """A digest of every trigger, function, column, rule, row-security flag and the recorded revision of this
        schema, read in one round trip."""
        try:
            return connection.exec_driver_sql(_POSTGRESQL_FINGERPRINT).scalar()
        except DBAPIError as error:
            if getattr(error.orig, "sqlstate", None) != "42P01":  # undefined_table: the one table it may lack
                raise
            raise StoreDamaged(
                f"{location.display}: table alembic_version is gone (the schema's bookkeeping was dropped by hand); "
                f"refusing to append: run `compute-budget migrate --db {location.display}` as the store's owner, then "
                "`compute-budget audit`"
            ) from None

    def guard_problems(self, connection: Connection) -> list[str]:
        """Triggers, columns, the guard functions, rules and row-level security on the store's tables."""
        return _postgresql_problems(connection)

    def foreign_triggers(self, connection: Connection) -> list[tuple[str, str]]:
        """Those on `alembic_version` or whose function names a store table (the schema may be shared)."""
        return _foreign_triggers(connection)

    def foreign_extras(self, connection: Connection) -> list[str]:
        """Rules and row-level security on the store's tables."""
        return [f"rule {name} on {table} was added by hand" for table, name in _postgresql_rules(connection)] + [
            f"row-level security was enabled on {table}" for table in _postgresql_row_security(connection)
        ]

    def drop_foreign(self, connection: Connection) -> None:
        """Drop foreign triggers and rules, and disable row-level security, on the store's tables."""
        for table, name in _foreign_triggers(connection):
            connection.exec_driver_sql(f"DROP TRIGGER IF EXISTS {quoted(name)} ON {quoted(table)}")
        for table, name in _postgresql_rules(connection):
            connection.exec_driver_sql(f"DROP RULE IF EXISTS {quoted(name)} ON {table}")
        for table in _postgresql_row_security(connection):
            connection.exec_driver_sql(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
            connection.exec_driver_sql(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")

    def restore_guard(self, connection: Connection) -> None:
        """Drop every trigger on the guarded tables and the guard functions, then create this release's guard."""
        self.drop_foreign(connection)
        for table in GUARDED_COLUMNS:
            names = connection.exec_driver_sql(
                "SELECT tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.relname = %s AND n.nspname = current_schema() AND NOT t.tgisinternal",
                (table,),
            ).scalars().all()
            for name in names:
                connection.exec_driver_sql(f"DROP TRIGGER IF EXISTS {quoted(name)} ON {table}")
        for function in _POSTGRESQL_FUNCTIONS:
            connection.exec_driver_sql(f"DROP FUNCTION IF EXISTS {function}() CASCADE")
        for statement in self.guard + self.seal_guard:
            connection.exec_driver_sql(statement)

    def require_grants(self, connection: Connection, role: Role, where: str) -> None:
        """The schema's USAGE, then every privilege of `needed(role)` on the objects that exist, in one query."""
        role_name, schema = connection.exec_driver_sql("SELECT current_user, current_schema()").one()
        role_name = str(role_name)
        if schema is None or not connection.exec_driver_sql(
            "SELECT has_schema_privilege(current_user, %s, 'USAGE')", (str(schema),)
        ).scalar():
            shown = schema or "public"
            raise StoreUnavailable(
                f"role {role_name!r} cannot use schema {shown} on {where}: as its owner, run GRANT USAGE ON SCHEMA "
                f"{shown} TO {quote_identifier(role_name, 'role name')}; (`compute-budget grants --role {role_name} "
                f"--{role.value}` prints every grant)"
            )
        # has_table_privilege with "SELECT, INSERT" is true if *either* is held: each privilege is asked alone.
        checks = [(need, privilege) for need in needed(role) for privilege in need.privileges.split(", ")]
        rows = connection.exec_driver_sql(
            _MISSING_PRIVILEGES,
            (
                [need.kind for need, _ in checks],
                [need.name for need, _ in checks],
                [privilege for _, privilege in checks],
                str(schema),
            ),
        ).scalars().all()
        if rows:
            missing, privilege = checks[int(rows[0]) - 1]
            object_kind = "sequence" if missing.kind == "SEQUENCE" else "table"
            action = {"SELECT": "read", "INSERT": "append to"}.get(privilege, "use")
            more = f" (and {len(rows) - 1} more missing)" if len(rows) > 1 else ""
            raise StoreUnavailable(
                f"role {role_name!r} cannot {action} {object_kind} {missing.name} on {where}{more}: as the owner, run "
                + fix_statement(role, missing, role_name, str(schema))
            )

    def write_privileges(self, connection: Connection) -> list[str]:
        """A reader's `default_transaction_read_only` can be lifted by `SET TRANSACTION READ WRITE`; only a
        SELECT-only role is a real guarantee."""
        held = connection.exec_driver_sql(
            "SELECT privilege FROM unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) AS privilege "
            "WHERE has_table_privilege(current_user, %s, privilege)",
            (TABLE_NAME,),
        ).scalars().all()
        return [str(privilege) for privilege in held]

    def consistent(self, connection: Connection) -> Connection:
        """REPEATABLE READ: one snapshot for the whole transaction."""
        return connection.execution_options(isolation_level="REPEATABLE READ")

    def prefer_index_order(self, connection: Connection) -> None:
        """For a range of most of the table the planner would otherwise choose a parallel sequential scan and a
        sort that spills about 0.9 KB of temporary file per row, so a read-only audit fails on a server short of
        disk. The index already yields the order the audit needs; memory and temporary space stay flat."""
        for setting in ("enable_sort = off", "enable_seqscan = off", "max_parallel_workers_per_gather = 0"):
            connection.exec_driver_sql(f"SET LOCAL {setting}")

    def logical(self, row: Any) -> tuple[Any, ...]:
        """Copied ids holding NUL are stored encoded (`text_codec`)."""
        return decode_row(row)

    def stored_text(self, value: str) -> str:
        """A copied id as stored (`text_codec`)."""
        return encode_text(value)

    @contextlib.contextmanager
    def tolerant_text(self, connection: Connection) -> Iterator[None]:
        """Nothing to do: PostgreSQL refuses text that is not UTF-8 on the way in."""
        yield

    def scan(
        self, connection: Connection, sql: str, low: int, high: int, batch_rows: int
    ) -> Iterator[list[tuple[Any, ...]]]:
        """A server-side cursor in index order, fetched `batch_rows` at a time."""
        self.prefer_index_order(connection)
        result = connection.execution_options(stream_results=True).exec_driver_sql(sql, (low, high))
        try:
            # The size must be given: exec_driver_sql ignores yield_per, and a bare partitions() asks the server
            # for the whole range at once, which PostgreSQL materialises in a temporary file as big as the range.
            for partition in result.partitions(batch_rows):
                yield [decode_row(row) for row in partition]
        finally:
            _close_scan(connection, result)


# Which (kind, name, privilege) checks fail, by their place in the arrays given (objects that do not exist are the
# schema check's concern, not this one's).
_MISSING_PRIVILEGES = (
    "SELECT need.ord FROM unnest(%s::text[], %s::text[], %s::text[]) "
    "WITH ORDINALITY AS need(kind, name, priv, ord) "
    "CROSS JOIN LATERAL (SELECT to_regclass(quote_ident(%s) || '.' || quote_ident(need.name))::oid AS id) found "
    "WHERE found.id IS NOT NULL AND NOT CASE need.kind "
    "  WHEN 'SEQUENCE' THEN has_sequence_privilege(current_user, found.id, need.priv) "
    "  ELSE has_table_privilege(current_user, found.id, need.priv) END "
    "ORDER BY need.ord"
)
