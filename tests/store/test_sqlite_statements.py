"""The multi-row INSERT that SQLite appends use: built once per row count, one group of marks a row."""

from __future__ import annotations

import sqlite3

from compute_budget.core.row import ROW_COLUMNS
from compute_budget.store.backends import statements_for
from compute_budget.store.backends.sqlite import MULTI_ROW_MAX


def test_insert_rows_has_one_group_a_row_and_is_built_once() -> None:
    sql = statements_for("sqlite")
    three = sql.insert_rows(3)
    assert three.count("(" + ", ".join(["?"] * len(ROW_COLUMNS)) + ")") == 3
    assert three.count("?") == 3 * len(ROW_COLUMNS)
    assert sql.insert_rows(3) is three
    assert sql.insert_rows(1).count("?") == len(ROW_COLUMNS)


def test_a_full_statement_fits_sqlites_parameter_limit() -> None:
    limit = 32_766 if sqlite3.sqlite_version_info >= (3, 32, 0) else 999
    assert MULTI_ROW_MAX * len(ROW_COLUMNS) <= limit
    raw = sqlite3.connect(":memory:")
    raw.execute(f"CREATE TABLE compute_budget_decisions ({', '.join(ROW_COLUMNS)})")
    statement = statements_for("sqlite").insert_rows(MULTI_ROW_MAX)
    flat = tuple(range(MULTI_ROW_MAX * len(ROW_COLUMNS)))
    assert raw.execute(statement, flat).rowcount == MULTI_ROW_MAX
    raw.close()
