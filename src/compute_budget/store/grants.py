"""PostgreSQL roles: the exact GRANTs a writer or an auditor needs on this release's schema, and which of them a
connected role lacks.

One list of what each role needs (`needed`) drives both the statements `compute-budget grants` prints and the check
a store makes when it opens, so a table added by a later migration is in both the day it lands (a test holds the
list to the tables a migrated database really has).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import Connection

from compute_budget.errors import InputError, StoreUnavailable
from compute_budget.store.table import (
    CHECKPOINTS_TABLE,
    NODES_TABLE,
    ORIGIN_TABLE,
    PROVENANCE_TABLE,
    REPAIRS_TABLE,
    TABLE_NAME,
    VERSION_TABLE,
    WITNESS_TABLES,
)

# The one sequence a writer draws from: the checkpoints' id (BIGSERIAL on PostgreSQL).
CHECKPOINT_ID_SEQUENCE = f"{CHECKPOINTS_TABLE}_id_seq"
# The writer also appends witness sizes and cosignatures after its appends (spec 9.5), and the acknowledgement of a
# repair (`record --after-repair`, spec 9.9.10), drawing their ids.
WRITER_SEQUENCES: tuple[str, ...] = (
    CHECKPOINT_ID_SEQUENCE, *(f"{table}_id_seq" for table in (*WITNESS_TABLES, REPAIRS_TABLE))
)
# What a writer appends to (the origin once, on its first append); every other table it only reads.
APPENDED_TABLES: tuple[str, ...] = (
    TABLE_NAME, ORIGIN_TABLE, NODES_TABLE, CHECKPOINTS_TABLE, *WITNESS_TABLES, REPAIRS_TABLE
)
# A writer only reads the provenance: `copy --through` writes it, into an empty store, as the owner.
RELEASE_TABLES: tuple[str, ...] = (VERSION_TABLE, *APPENDED_TABLES, PROVENANCE_TABLE)
# PostgreSQL cuts identifiers to NAMEDATALEN - 1 bytes: a longer role name would grant to another role.
MAX_IDENTIFIER_BYTES = 63


class Role(StrEnum):
    """What a PostgreSQL role of a store does."""

    WRITER = "writer"
    AUDITOR = "auditor"


@dataclass(frozen=True, slots=True)
class Need:
    """One privilege a role needs: `privileges` (comma-separated, as in GRANT) on `kind` `name`."""

    kind: str  # "TABLE" or "SEQUENCE"
    name: str
    privileges: str


def needed(role: Role) -> tuple[Need, ...]:
    """Every table (and sequence) privilege `role` needs, in the order the statements are printed."""
    if role is Role.AUDITOR:
        return tuple(Need("TABLE", table, "SELECT") for table in RELEASE_TABLES)
    tables = tuple(
        Need("TABLE", table, "SELECT, INSERT" if table in APPENDED_TABLES else "SELECT") for table in RELEASE_TABLES
    )
    return (*tables, *(Need("SEQUENCE", sequence, "USAGE") for sequence in WRITER_SEQUENCES))


def quote_identifier(name: str, what: str) -> str:
    """`name` as a PostgreSQL quoted identifier, or `InputError` when no identifier can say it exactly."""
    if name == "":
        raise InputError(f"{what} is empty")
    if any("\ud800" <= char <= "\udfff" for char in name):
        raise InputError(f"{what} {name!r} is not valid UTF-8")
    if any(char < " " or char == "\x7f" for char in name):
        raise InputError(f"{what} {name!r} holds a control character (a GRANT is printed one per line)")
    size = len(name.encode("utf-8"))
    if size > MAX_IDENTIFIER_BYTES:
        raise InputError(
            f"{what} {name[:40]!r}… is {size} bytes: PostgreSQL cuts names to {MAX_IDENTIFIER_BYTES} bytes, so the "
            "GRANT would name another role"
        )
    return '"' + name.replace('"', '""') + '"'


def grant_statements(role_name: str, role: Role, *, database: str | None = None, schema: str = "public") -> list[str]:
    """The GRANT statements, one per line, that give `role_name` what `role` needs on this release's schema."""
    grantee = quote_identifier(role_name, "role name")
    namespace = quote_identifier(schema, "schema name")
    statements = []
    if database is not None:
        statements.append(f"GRANT CONNECT ON DATABASE {quote_identifier(database, 'database name')} TO {grantee};")
    statements.append(f"GRANT USAGE ON SCHEMA {namespace} TO {grantee};")
    statements.extend(
        f"GRANT {need.privileges} ON {need.kind} {namespace}.{quote_identifier(need.name, 'table name')} TO {grantee};"
        for need in needed(role)
    )
    return statements


def _fix(role: Role, need: Need, role_name: str, schema: str) -> str:
    """The statement that grants one missing privilege, and the command that prints them all."""
    grantee = quote_identifier(role_name, "role name") if role_name else "ROLE"
    return (
        f"GRANT {need.privileges} ON {need.kind} {schema}.{need.name} TO {grantee}; "
        f"(`compute-budget grants --role {role_name} --{role.value}` prints every grant)"
    )


def require_grants(connection: Connection, role: Role, where: str) -> None:
    """On PostgreSQL, raise `StoreUnavailable` naming the first table (or sequence) this connection's role cannot
    use as `role` needs, and the GRANT that fixes it. Objects that do not exist are the schema check's concern."""
    if connection.dialect.name != "postgresql":
        return
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
    needs = needed(role)
    # has_table_privilege with "SELECT, INSERT" is true if *either* is held: each privilege is asked alone.
    checks = [(need, privilege) for need in needs for privilege in need.privileges.split(", ")]
    rows = connection.exec_driver_sql(
        "SELECT need.ord FROM unnest(%s::text[], %s::text[], %s::text[]) "
        "WITH ORDINALITY AS need(kind, name, priv, ord) "
        "CROSS JOIN LATERAL (SELECT to_regclass(quote_ident(%s) || '.' || quote_ident(need.name))::oid AS id) found "
        "WHERE found.id IS NOT NULL AND NOT CASE need.kind "
        "  WHEN 'SEQUENCE' THEN has_sequence_privilege(current_user, found.id, need.priv) "
        "  ELSE has_table_privilege(current_user, found.id, need.priv) END "
        "ORDER BY need.ord",
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
            + _fix(role, missing, role_name, str(schema))
        )
