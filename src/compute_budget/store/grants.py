"""PostgreSQL roles: the exact GRANTs a writer or an auditor needs on this release's schema, and which of them a
connected role lacks.

One list of what each role needs (`needed`) drives both the statements `compute-budget grants` prints and the check
a store makes when it opens (`PostgreSQLBackend.require_grants`), so a table added by a later migration is in both
the day it lands (a test holds the list to the tables a migrated database really has).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from compute_budget.errors import InputError
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


def fix_statement(role: Role, need: Need, role_name: str, schema: str) -> str:
    """The statement that grants one missing privilege, and the command that prints them all."""
    grantee = quote_identifier(role_name, "role name") if role_name else "ROLE"
    return (
        f"GRANT {need.privileges} ON {need.kind} {schema}.{need.name} TO {grantee}; "
        f"(`compute-budget grants --role {role_name} --{role.value}` prints every grant)"
    )
