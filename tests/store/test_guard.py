"""The database-level append-only guard: UPDATE, DELETE and row replacement fail from any client."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from compute_budget import BudgetStore
from tests.conftest import gate_lines

STATEMENTS = [
    "UPDATE compute_budget_decisions SET max_steps = 100",
    "UPDATE compute_budget_decisions SET explanation = 'nothing to see' WHERE seq = 1",
    "DELETE FROM compute_budget_decisions WHERE seq = 2",
    "DELETE FROM compute_budget_decisions",
    "INSERT OR REPLACE INTO compute_budget_decisions SELECT * FROM compute_budget_decisions WHERE seq = 1",
    "REPLACE INTO compute_budget_decisions SELECT * FROM compute_budget_decisions WHERE seq = 3",
]


@pytest.fixture
def filled(db_path: Path) -> Path:
    """A store holding three rows."""
    with BudgetStore.open(db_path) as store:
        store.record_many(gate_lines(3))
    return db_path


def _rows(path: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as connection:
        return connection.execute("SELECT * FROM compute_budget_decisions ORDER BY seq").fetchall()


@pytest.mark.parametrize("statement", STATEMENTS)
def test_raw_sqlite3_client_cannot_change_rows(filled: Path, statement: str) -> None:
    """The stdlib sqlite3 client gets an error naming the table append-only; the rows stay as they were."""
    before = _rows(filled)
    connection = sqlite3.connect(filled)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            connection.execute(statement)
        connection.commit()
    finally:
        connection.close()
    assert _rows(filled) == before


@pytest.mark.parametrize("statement", STATEMENTS)
def test_sqlalchemy_cannot_change_rows(filled: Path, statement: str) -> None:
    """Through SQLAlchemy, on the store's own engine, the same statements fail the same way."""
    before = _rows(filled)
    with (
        BudgetStore.open(filled) as store,
        pytest.raises(IntegrityError, match="append-only"),
        store.engine.begin() as connection,
    ):
        connection.execute(text(statement))
    assert _rows(filled) == before


def test_appending_still_works_under_the_guard(filled: Path) -> None:
    """The guard stops changes, not appends."""
    with BudgetStore.open(filled) as store:
        assert store.record_many(gate_lines(5, prefix="more")).new == 5
        assert store.count() == 8
