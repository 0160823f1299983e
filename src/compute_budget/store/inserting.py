"""What an append checks around its inserts: the append-only guard (once per connection while nothing changed), and
that the table stored exactly the rows written (no trigger made by hand drops or replaces one)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from compute_budget.core.log.head import ChainHead
from compute_budget.errors import StoreDamaged
from compute_budget.store.backends import backend_for
from compute_budget.store.engine import Location
from compute_budget.store.grants import Role
from compute_budget.store.schema_check import schema_problems
from compute_budget.store.session import read_head
from compute_budget.store.statements import Statements

_GUARD_SEEN = "compute_budget.guard_data_version"


def require_guard_once(connection: Connection, location: Location) -> None:
    """`require_guard`, skipped on a connection that already checked it while the backend's `guard_version` stays
    the same: on SQLite when no other connection has committed anything since (`PRAGMA data_version`, inside the
    write lock this transaction already holds).

    Sound because changing the guard (a trigger dropped, altered or added, a column changed, `alembic_version`
    edited) is a write another connection must commit, and any such commit changes this connection's
    `data_version`; this connection itself runs only this release's statements. Not `schema_version`, which any
    client can set. On PostgreSQL the sign is a fingerprint of the catalog state the full check compares (every
    trigger's definition and enabled state on this schema's tables, the guard functions' source, the columns, the
    recorded revision, every rule and which tables have row-level security), read in one round trip: unchanged
    since a full check that held, the guard still holds.
    The audit always runs the full check."""
    version = backend_for(connection).guard_version(connection, location)
    remembered = connection.connection.info  # lives as long as the DBAPI connection itself
    if remembered.get(_GUARD_SEEN) == version:
        return
    require_guard(connection, location)
    remembered[_GUARD_SEEN] = version


def require_guard(connection: Connection, location: Location) -> None:
    """Writers append only under the guard this release created: a missing, disabled or altered trigger, or
    one added by hand on a guarded table, stops the append (inside its transaction, so nothing is written)."""
    # Asked before inserting: a refused INSERT inside psycopg's pipeline would also log driver noise.
    backend = backend_for(connection)
    backend.require_grants(connection, Role.WRITER, location.display)
    problems = schema_problems(connection)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise StoreDamaged(
            f"{location.display}: {problems[0]}{more}; refusing to append: run `compute-budget migrate --db "
            f"{location.display}`{backend.owner_hint} to restore the append-only guard, then `compute-budget audit`"
        )


def insert_exactly(connection: Connection, rows: list[tuple[Any, ...]], location: Location) -> None:
    """Insert `rows` the backend's way (`Backend.insert`), and prove the database stored every one: a hand-made
    trigger that skips rows (`RAISE(IGNORE)`, a PostgreSQL trigger returning NULL) must not let a writer report
    rows it never wrote."""
    written = backend_for(connection).insert(connection, rows)
    if written != len(rows):
        raise StoreDamaged(
            f"{location.display} stored {written} of the {len(rows)} rows just inserted: something on the table "
            "drops rows (a trigger added by hand?); nothing was written; run `compute-budget audit`"
        )


def require_planned_head(
    connection: Connection, statements: Statements, planned: ChainHead, location: Location
) -> None:
    """After a chunk, the stored head must be the one the writer planned, or the transaction is rolled back."""
    stored = read_head(connection, statements)
    if stored != planned:
        raise StoreDamaged(
            f"{location.display}: after appending up to seq {planned.seq} the stored head is seq {stored.seq} "
            f"({stored.budget_id}); the table does not keep what is written; nothing was written; "
            "run `compute-budget audit`"
        )


def require_nothing_kept(connection: Connection, statements: Statements, head: ChainHead, location: Location) -> None:
    """After a failed one-statement insert without a savepoint: the write transaction must still be open and the
    stored head unchanged (the new rows all come after it), so the failed statement kept none of its rows. A
    conflict clause changed by hand (``ON CONFLICT FAIL`` keeps earlier rows, ``ROLLBACK`` ends the transaction)
    is refused rather than written around."""
    raw = connection.connection.dbapi_connection
    if not getattr(raw, "in_transaction", False):
        raise StoreDamaged(
            f"{location.display}: a failed insert ended the write transaction (a conflict clause changed by hand?); "
            "nothing was written; run `compute-budget audit`"
        )
    require_planned_head(connection, statements, head, location)


def stored_gates(connection: Connection, statements: Statements, budget_ids: set[str]) -> dict[str, tuple[int, str]]:
    """The `seq` and `gate_input` of those of `budget_ids` already stored."""
    if not budget_ids:
        return {}
    rows = connection.exec_driver_sql(statements.stored_gates(len(budget_ids)), tuple(budget_ids))
    stored: dict[str, tuple[int, str]] = {}
    for budget_id, seq, gate_input in rows:
        if type(seq) is not int or not isinstance(gate_input, str):
            raise StoreDamaged(
                f"stored row {budget_id} (seq {seq!r}) cannot be read; run `compute-budget audit` for the details"
            )
        stored[str(budget_id)] = (seq, gate_input)
    return stored
