"""The databases the store runs on, one module each, behind one interface (`base.Backend`).

The backend is chosen here, once, from SQLAlchemy's dialect name, and handed to the rest of the store: this is the
one place that asks which database it is. Adding a backend is one module with a `Backend` subclass, one entry in
`_BACKENDS`, and one parameter of the tests' `store_target` fixture (docs/design/store.md, "Adding a backend").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine

from compute_budget.store.backends.base import Backend
from compute_budget.store.backends.postgresql import PostgreSQLBackend
from compute_budget.store.backends.sqlite import SQLiteBackend

if TYPE_CHECKING:
    from compute_budget.store.browse_sql import BrowseStatements
    from compute_budget.store.seal_sql import SealStatements
    from compute_budget.store.statements import Statements

_BACKENDS: dict[str, Backend] = {backend.name: backend for backend in (SQLiteBackend(), PostgreSQLBackend())}


def find_backend(name: str) -> Backend | None:
    """The backend for a SQLAlchemy dialect (or URL backend) name, or None when compute-budget has none."""
    return _BACKENDS.get(name)


def backend_named(name: str) -> Backend:
    """The backend for a SQLAlchemy dialect name (`NotImplementedError` for a database compute-budget has none for)."""
    backend = _BACKENDS.get(name)
    if backend is None:
        raise NotImplementedError(f"compute-budget has no SQL written for the {name} backend")
    return backend


def backend_for(bind: Engine | Connection) -> Backend:
    """The backend of an engine or a connection."""
    return backend_named(bind.dialect.name)


def statements_for(name: str) -> Statements:
    """The store's SQL on the backend of this dialect name."""
    return backend_named(name).statements


def seal_statements_for(name: str) -> SealStatements:
    """The seal's SQL on the backend of this dialect name."""
    return backend_named(name).seal


def browse_statements_for(name: str) -> BrowseStatements:
    """The browsing SQL on the backend of this dialect name."""
    return backend_named(name).browse


__all__ = [
    "Backend",
    "PostgreSQLBackend",
    "SQLiteBackend",
    "backend_for",
    "backend_named",
    "browse_statements_for",
    "find_backend",
    "seal_statements_for",
    "statements_for",
]
