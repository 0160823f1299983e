"""What every database backend provides: the interface the rest of the store talks to, and what the backends share.

A backend is one class in one module of this package (`sqlite.py`, `postgresql.py`): its SQL (the shared
statements built with its placeholder and its few dialect phrases), its engine and its error translation, the
append lock, the insert strategy, the append-only guard's DDL, check and fingerprint, the grants check, the text
codec and the scan. Nothing outside this package asks which database it is talking to.
"""

from __future__ import annotations

import functools
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import Connection, Engine

from compute_budget.core.row import ROW_COLUMNS
from compute_budget.errors import ComputeBudgetError
from compute_budget.store.browse_sql import BrowseStatements
from compute_budget.store.seal_sql import SealStatements
from compute_budget.store.statements import Statements
from compute_budget.store.table import (
    CHECKPOINTS_TABLE,
    COSIGNATURES_TABLE,
    NODES_TABLE,
    ORIGIN_TABLE,
    PROVENANCE_TABLE,
    REPAIRS_TABLE,
    TABLE_NAME,
    WITNESS_SIZES_TABLE,
    checkpoints,
    cosignatures,
    origin,
    provenance,
    repairs,
    tree_nodes,
    witness_sizes,
)

if TYPE_CHECKING:
    from compute_budget.store.grants import Role
    from compute_budget.store.location import Location

WRITE_OPTION = "compute_budget_write"  # execution option marking a connection that appends or migrates

# Every guarded table and its columns, in order: the decisions, then the seal's tables (migration 0003).
GUARDED_COLUMNS: dict[str, tuple[str, ...]] = {
    TABLE_NAME: ROW_COLUMNS,
    **{
        table.name: tuple(column.name for column in table.columns)
        for table in (origin, tree_nodes, checkpoints, provenance, witness_sizes, cosignatures, repairs)
    },
}

# The seal's tables (migration 0003) are append-only too: the origin is set once, the signed checkpoints and the
# stored tree nodes are only ever added. A no-replace trigger costs one primary-key probe per insert, which these
# small tables (one row per append transaction, one node per 128 rows) can afford.
SEAL_KEYS = {
    ORIGIN_TABLE: "id = NEW.id",
    NODES_TABLE: "level = NEW.level AND idx = NEW.idx",
    CHECKPOINTS_TABLE: "id = NEW.id",
    PROVENANCE_TABLE: "id = NEW.id",  # migration 0004
    WITNESS_SIZES_TABLE: "id = NEW.id",  # migration 0005
    COSIGNATURES_TABLE: "id = NEW.id",
    REPAIRS_TABLE: "id = NEW.id",  # migration 0006
}


class Backend(ABC):
    """One database: everything the store does differently on it. One instance per backend, for the process."""

    name: ClassVar[str]  # SQLAlchemy's dialect name, the registry's key
    mark: ClassVar[str]  # the driver's parameter placeholder
    missing_driver_hint: ClassVar[str]  # what to install when SQLAlchemy has no driver for it
    guard: ClassVar[tuple[str, ...]]  # the decisions table's append-only guard (DDL)
    unguard: ClassVar[tuple[str, ...]]
    seal_guard: ClassVar[tuple[str, ...]]  # the seal's tables' guard (migration 0003 on)
    seal_unguard: ClassVar[tuple[str, ...]]
    atomic_rows: ClassVar[int] = 0  # rows one INSERT statement takes atomically (0: the chunk needs a savepoint)
    owner_hint: ClassVar[str] = ""  # who may run `migrate` here, as said after the command
    has_roles: ClassVar[bool] = False  # roles need grants on each table (`compute-budget grants`)
    keeps_a_file: ClassVar[bool] = False  # a database that is one local file (`locate` takes its path literally)
    status_condition: ClassVar[str] = "status = {mark}"  # the browse filter on status (a planner hint may wrap it)

    @functools.cached_property
    def statements(self) -> Statements:
        """The store's SQL on this backend."""
        return self._statements()

    def _statements(self) -> Statements:
        return Statements(self.mark)

    @functools.cached_property
    def seal(self) -> SealStatements:
        """The seal's SQL on this backend."""
        return SealStatements(self.mark)

    @functools.cached_property
    def browse(self) -> BrowseStatements:
        """The browsing SQL on this backend."""
        return BrowseStatements(self.mark, status_condition=self.status_condition)

    @abstractmethod
    def create_engine(self, location: Location, *, readonly: bool) -> Engine:
        """An engine for `location`: writers wait for each other, readers cannot write."""

    @abstractmethod
    def translate(
        self, original: BaseException, text: str, location: Location, *, reading: bool
    ) -> ComputeBudgetError | None:
        """The compute-budget error for a driver error of this backend (None: not one it knows)."""

    def lock_for_append(self, connection: Connection) -> None:  # noqa: B027  (a default: nothing to do)
        """Queue behind other writers before the chain head is read (nothing where BEGIN already does)."""

    @abstractmethod
    def insert(self, connection: Connection, rows: list[tuple[Any, ...]]) -> int:
        """Insert `rows` (`ROW_COLUMNS` order, logical values); how many rows the database says it stored."""

    def insert_skipping_stored(self, connection: Connection, rows: list[tuple[Any, ...]]) -> int | None:
        """Insert `rows` assumed new, skipping any whose budget_id is stored (how many were written); None where
        the backend cannot skip and a stored row raises `IntegrityError` instead."""
        return None

    @abstractmethod
    def guard_version(self, connection: Connection, location: Location) -> object:
        """A value that changes whenever the guard or the schema may have changed (the full check is skipped
        while it stays the same on one connection)."""

    @abstractmethod
    def guard_problems(self, connection: Connection) -> list[str]:
        """What differs from the guard and the columns this release creates, one sentence each."""

    @abstractmethod
    def foreign_triggers(self, connection: Connection) -> list[tuple[str, str]]:
        """Triggers this release did not make outside the guarded tables, as (table, trigger name)."""

    def foreign_extras(self, connection: Connection) -> list[str]:
        """Other things this release never makes that can interfere (rules, row security), one sentence each."""
        return []

    @abstractmethod
    def drop_foreign(self, connection: Connection) -> None:
        """Drop what `foreign_triggers` and `foreign_extras` find."""

    @abstractmethod
    def restore_guard(self, connection: Connection) -> None:
        """Drop every trigger on the guarded tables and what `drop_foreign` drops; install this release's guard."""

    def refuse_edited_schema(self, connection: Connection) -> None:  # noqa: B027  (a default: nothing to do)
        """`StoreDamaged` when the database's own catalogue was edited so that migrate cannot repair it."""

    def require_grants(self, connection: Connection, role: Role, where: str) -> None:  # noqa: B027  (no roles)
        """`StoreUnavailable` naming the first privilege this connection's role lacks for `role` (no roles: none)."""

    def write_privileges(self, connection: Connection) -> list[str]:
        """Which of INSERT, UPDATE, DELETE, TRUNCATE the connection's role holds on the decisions table (none
        where a reader opens the database read-only)."""
        return []

    def consistent(self, connection: Connection) -> Connection:
        """`connection` set so that every query of one read transaction sees the same rows."""
        return connection

    def prefer_index_order(self, connection: Connection) -> None:  # noqa: B027  (a default: nothing to do)
        """Read a seq range in index order, without a sort, for the rest of this transaction."""

    def logical(self, row: Any) -> tuple[Any, ...]:
        """A stored row as its logical values (`text_codec`)."""
        return tuple(row)

    def stored_text(self, value: str) -> str:
        """A copied gate id as this backend stores it (`text_codec`)."""
        return value

    @abstractmethod
    def tolerant_text(self, connection: Connection) -> AbstractContextManager[None]:
        """Reads on `connection` give text that is not UTF-8 as bytes instead of failing."""

    @abstractmethod
    def scan(
        self, connection: Connection, sql: str, low: int, high: int, batch_rows: int
    ) -> Iterator[list[tuple[Any, ...]]]:
        """The rows of `sql` over (low, high] in seq order, as batches of logical tuples, streamed."""


def normalise(sql: str) -> str:
    """A definition with whitespace collapsed, identifier quotes and `schema.` prefixes removed."""
    text = re.sub(r'["`\[\]]', "", sql)
    text = re.sub(r"\b\w+\.(compute_budget_\w+)", r"\1", text)
    return re.sub(r"\s+", " ", text).strip().rstrip(";").strip()


def compare(table: str, expected: dict[str, str], found: dict[str, str], disabled: set[str]) -> list[str]:
    """What differs between the guard's triggers on `table` and those found there."""
    problems = []
    for name in sorted(expected):
        if name not in found:
            problems.append(f"trigger {name} of the append-only guard on {table} is missing")
        elif name in disabled:
            problems.append(f"trigger {name} of the append-only guard on {table} is disabled")
        elif found[name] != expected[name]:
            problems.append(f"trigger {name} on {table} was altered: it now reads {found[name]!r}")
    problems += [f"trigger {name} on {table} was added by hand" for name in sorted(set(found) - set(expected))]
    return problems


def column_problems(table: str, found: list[str]) -> list[str]:
    """What differs between `table`'s columns and those this release created."""
    expected = GUARDED_COLUMNS[table]
    if found == list(expected):
        return []
    added = [name for name in found if name not in expected]
    removed = [name for name in expected if name not in found]
    if added or removed:
        changes = [f"added {', '.join(added)}"] * bool(added) + [f"removed {', '.join(removed)}"] * bool(removed)
        return [f"table {table} has columns {' and '.join(changes)}"]
    return [f"table {table} has its columns in another order than this release created"]


def foreign_problem(name: str, table: str) -> str:
    """The sentence for a trigger this release did not make, outside the guarded tables."""
    return (
        f"trigger {name} on {table} was added by hand: a trigger elsewhere in the store can write to the guarded "
        "tables or hide the bookkeeping"
    )


def quoted(name: str) -> str:
    """`name` as a double-quoted SQL identifier."""
    return '"' + str(name).replace('"', '""') + '"'
