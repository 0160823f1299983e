"""The database-level append-only guard, installed and removed on the connection's backend.

Each backend owns its guard's DDL (`SQLiteBackend.guard`, `PostgreSQLBackend.guard`, and the seal's tables'
`seal_guard`): SQLite has triggers that abort UPDATE and DELETE, and an INSERT that would replace a stored row
(``INSERT OR REPLACE`` deletes without firing DELETE triggers); PostgreSQL has row triggers on UPDATE and DELETE
and a statement trigger on TRUNCATE (which skips row triggers). Every message contains ``append-only``. The DDL is
named here too, as the tests and benchmarks that lift the guard know it.
"""

from __future__ import annotations

from sqlalchemy import Connection

from compute_budget.store.backends import backend_for
from compute_budget.store.backends.base import SEAL_KEYS
from compute_budget.store.backends.postgresql import (
    POSTGRESQL_GUARD,
    POSTGRESQL_SEAL_GUARD,
    POSTGRESQL_SEAL_UNGUARD,
    POSTGRESQL_UNGUARD,
    SEAL_GUARD_FUNCTION,
)
from compute_budget.store.backends.sqlite import SQLITE_GUARD, SQLITE_SEAL_GUARD, SQLITE_SEAL_UNGUARD, SQLITE_UNGUARD

__all__ = [
    "POSTGRESQL_GUARD",
    "POSTGRESQL_SEAL_GUARD",
    "POSTGRESQL_SEAL_UNGUARD",
    "POSTGRESQL_UNGUARD",
    "SEAL_GUARD_FUNCTION",
    "SEAL_KEYS",
    "SQLITE_GUARD",
    "SQLITE_SEAL_GUARD",
    "SQLITE_SEAL_UNGUARD",
    "SQLITE_UNGUARD",
    "create_guard",
    "drop_guard",
]


def create_guard(connection: Connection) -> None:
    """Install the decisions table's append-only guard for the connection's backend (an unknown one is refused)."""
    for statement in backend_for(connection).guard:
        connection.exec_driver_sql(statement)


def drop_guard(connection: Connection) -> None:
    """Remove the guard (only a migration's downgrade, or a rebuild that restores it, may do this)."""
    for statement in backend_for(connection).unguard:
        connection.exec_driver_sql(statement)
