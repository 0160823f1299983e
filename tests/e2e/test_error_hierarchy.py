"""Every error compute-budget raises is a ComputeBudgetError: one root to catch, typed bases beneath it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import compute_budget
from compute_budget import (
    AuditError,
    BudgetStore,
    ComputeBudgetError,
    InputError,
    StoreError,
    admit,
    audit,
    decide_json,
)
from compute_budget.errors import ArgumentTypeError


def _self_containing() -> dict[str, object]:
    gate: dict[str, object] = {}
    gate["x"] = gate
    return gate


def _calls(tmp_path: Path) -> list[tuple[str, Callable[[], object], type[ComputeBudgetError]]]:
    db = str(tmp_path / "store.db")
    missing = str(tmp_path / "missing.db")
    return [
        ("a store of another database kind", lambda: BudgetStore.open("mysql://u@h/db"), StoreError),
        ("an in-memory SQLite store", lambda: BudgetStore.open("sqlite://"), StoreError),
        ("a folder as a store", lambda: BudgetStore.open(str(tmp_path)), StoreError),
        ("a store named by an int", lambda: BudgetStore.open(5), InputError),  # type: ignore[arg-type]
        ("an audit of nothing", lambda: audit(missing), StoreError),
        ("a checkpoint of the wrong type", lambda: audit(db, checkpoint=123), InputError),  # type: ignore[arg-type]
        ("a checkpoint that is not JSON", lambda: audit(db, checkpoint="{garbage"), AuditError),
        ("a gate that contains itself", lambda: BudgetStore.open(db).record(_self_containing()), InputError),
        ("a gate that is not JSON", lambda: BudgetStore.open(db).record(b"\xff\xfe"), InputError),
        ("record_many of a number", lambda: BudgetStore.open(db).record_many(5), InputError),  # type: ignore[arg-type]
        ("decide_json of a number", lambda: decide_json(5), InputError),  # type: ignore[arg-type]
        ("admit of a string", lambda: admit("decision"), InputError),  # type: ignore[arg-type]
    ]


def test_every_error_raised_is_under_the_one_root(tmp_path: Path) -> None:
    """Hostile and mistaken calls of the API raise a ComputeBudgetError of the expected base, never a bare
    TypeError, AttributeError or driver error."""
    with BudgetStore.open(tmp_path / "store.db"):
        pass
    for name, call, base in _calls(tmp_path):
        with pytest.raises(ComputeBudgetError) as raised:
            call()
        assert isinstance(raised.value, base), (name, type(raised.value))


def test_wrong_argument_types_are_also_type_errors() -> None:
    """A wrong argument type is an InputError and still a TypeError, so `except TypeError` keeps working."""
    assert issubclass(ArgumentTypeError, TypeError)
    assert issubclass(ArgumentTypeError, InputError)


def test_the_callers_own_exception_passes_through_unchanged(tmp_path: Path) -> None:
    """An exception raised by the caller's own iterator is the caller's: it is not wrapped, and nothing is written."""

    def gates() -> object:
        yield '{"decision_id": 1}'
        raise KeyError("from the caller")

    with BudgetStore.open(tmp_path / "store.db") as store, pytest.raises(KeyError, match="from the caller"):
        store.record_many(gates())  # type: ignore[arg-type]
    with BudgetStore.open(tmp_path / "store.db", readonly=True) as store:
        assert store.count() == 0


def test_every_public_error_is_exported_under_the_root() -> None:
    """Each error class the package exports descends from ComputeBudgetError."""
    exported = [getattr(compute_budget, name) for name in compute_budget.__all__]
    errors = [value for value in exported if isinstance(value, type) and issubclass(value, BaseException)]
    assert len(errors) >= 10
    assert all(issubclass(error, ComputeBudgetError) for error in errors)
