"""Raw access to a store's database behind the code's back, per backend: the tamperer's tools.

SQLite goes through the stdlib `sqlite3` client, PostgreSQL through a plain psycopg connection. Statements use
named parameters (`:name`) on both.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from compute_budget.store.table import COLUMNS
from compute_budget.store.triggers import (
    POSTGRESQL_GUARD,
    POSTGRESQL_SEAL_GUARD,
    POSTGRESQL_SEAL_UNGUARD,
    POSTGRESQL_UNGUARD,
    SQLITE_GUARD,
    SQLITE_SEAL_GUARD,
    SQLITE_SEAL_UNGUARD,
    SQLITE_UNGUARD,
)

Statement = str | tuple[str, Mapping[str, Any]]


def is_postgres(target: str | os.PathLike[str]) -> bool:
    """True for a PostgreSQL URL."""
    return str(target).startswith("postgresql")


def _pg_connect(target: str) -> Any:
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(target)
    return psycopg.connect(
        host=url.host, port=url.port, user=url.username, password=url.password, dbname=url.database
    )


def _pg_sql(sql: str) -> str:
    return re.sub(r"(?<!:):([a-z_][a-z0-9_]*)", r"%(\1)s", sql)


def execute(
    target: str | os.PathLike[str], *statements: Statement, lift_guard: bool = False, lift_seal: bool = False
) -> None:
    """Run statements in one transaction; with `lift_guard` (`lift_seal`: the seal tables' guard too), drop the
    guard first and put it back after."""
    target = str(target)
    if is_postgres(target):
        unguard = (*POSTGRESQL_UNGUARD, *POSTGRESQL_SEAL_UNGUARD) if lift_seal else POSTGRESQL_UNGUARD
        guard = (*POSTGRESQL_GUARD, *POSTGRESQL_SEAL_GUARD) if lift_seal else POSTGRESQL_GUARD
        with _pg_connect(target) as connection, connection.cursor() as cursor:
            if lift_guard:
                for statement in unguard:
                    cursor.execute(statement)
            for item in statements:
                sql, params = (item, {}) if isinstance(item, str) else item
                cursor.execute(_pg_sql(sql), dict(params) or None)
            if lift_guard:
                for statement in guard:
                    cursor.execute(statement)
        return
    unguard = (*SQLITE_UNGUARD, *SQLITE_SEAL_UNGUARD) if lift_seal else SQLITE_UNGUARD
    guard = (*SQLITE_GUARD, *SQLITE_SEAL_GUARD) if lift_seal else SQLITE_GUARD
    connection = sqlite3.connect(target)
    try:
        connection.execute("PRAGMA ignore_check_constraints = ON")
        if lift_guard:
            for statement in unguard:
                connection.execute(statement)
        for item in statements:
            sql, params = (item, {}) if isinstance(item, str) else item
            connection.execute(sql, dict(params))
        if lift_guard:
            for statement in guard:
                connection.execute(statement)
        connection.commit()
    finally:
        connection.close()


def tamper(target: str | os.PathLike[str], *statements: Statement) -> None:
    """Lift the append-only guard with a raw client, change rows, and put the guard back."""
    execute(target, *statements, lift_guard=True)


def tamper_all(target: str | os.PathLike[str], *statements: Statement) -> None:
    """Lift every guard (the decisions table's and the seal's tables'), run the statements, put them back."""
    execute(target, *statements, lift_guard=True, lift_seal=True)


def query(target: str | os.PathLike[str], sql: str) -> list[tuple[Any, ...]]:
    """The rows of one read-only query, through a raw client."""
    target = str(target)
    if is_postgres(target):
        with _pg_connect(target) as connection, connection.cursor() as cursor:
            cursor.execute(sql)
            return [tuple(row) for row in cursor.fetchall()]
    with sqlite3.connect(target) as connection:
        return connection.execute(sql).fetchall()


def rows(target: str | os.PathLike[str]) -> list[tuple[Any, ...]]:
    """Every stored row in seq order, as raw tuples in table column order."""
    target = str(target)
    query = f"SELECT {', '.join(COLUMNS)} FROM compute_budget_decisions ORDER BY seq"
    if is_postgres(target):
        with _pg_connect(target) as connection, connection.cursor() as cursor:
            cursor.execute(query)
            return [tuple(row) for row in cursor.fetchall()]
    with sqlite3.connect(target) as connection:
        return connection.execute(query).fetchall()


def insert_sql(values: Sequence[Any]) -> Statement:
    """An INSERT of one full row (values in table column order) as a named-parameter statement."""
    names = ", ".join(f":c{index}" for index in range(len(values)))
    return (
        f"INSERT INTO compute_budget_decisions ({', '.join(COLUMNS)}) VALUES ({names})",
        {f"c{index}": value for index, value in enumerate(values)},
    )


def acknowledge_repair(target: str | os.PathLike[str]) -> int:
    """Acknowledge the newest repair `migrate` recorded, as `record --unsigned --after-repair ID` does (spec
    9.9.10); returns its id."""
    from compute_budget import BudgetStore

    ((newest,),) = query(target, "SELECT max(id) FROM compute_budget_repairs WHERE kind = 'repair'")
    with BudgetStore.open(target, allow_unsigned=True) as store:
        store.record_many([], after_repair=int(newest))
    return int(newest)


def assert_clean_after_repair(target: str | os.PathLike[str]) -> None:
    """After `migrate` repaired the store, the audit's one finding is the unacknowledged repair (spec 9.9.10); once
    acknowledged, the audit is clean."""
    from compute_budget import audit

    details = [(finding.kind.value, finding.detail) for finding in audit(target).findings]
    assert len(details) == 1, details
    assert details[0][0] == "schema_tampered"
    assert "not acknowledged" in details[0][1]
    acknowledge_repair(target)
    assert audit(target).clean
