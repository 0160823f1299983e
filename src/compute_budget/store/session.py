"""One opened store's connection to its database: where it is, its engine and statements, read transactions,
and the few primitives both the write path and the reads need (the append lock, the chain head, the clock)."""

from __future__ import annotations

import datetime as dt
import re
from types import TracebackType
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from compute_budget.core.log.head import EMPTY_HEAD, ChainHead
from compute_budget.errors import StoreClosed, StoreDamaged
from compute_budget.store.backends import Backend, backend_for
from compute_budget.store.engine import Location, translate
from compute_budget.store.seal_tables import SealStatements
from compute_budget.store.statements import Statements

MAX_SEQ = 2**63 - 1  # the largest 64-bit integer, SQLite's and PostgreSQL's BIGINT alike
_HEX64 = re.compile(r"[0-9a-f]{64}")


class StoreSession:
    """An opened store's engine with its backend (chosen once, from the engine) and the backend's statements;
    closing it disposes of every connection."""

    def __init__(self, location: Location, engine: Engine, *, readonly: bool) -> None:
        self.location = location
        self.readonly = readonly
        self.backend: Backend = backend_for(engine)
        self.statements: Statements = self.backend.statements
        self.seal: SealStatements = self.backend.seal
        self.closed = False
        self._engine = engine

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (`StoreClosed` once closed)."""
        self.require_open()
        return self._engine

    def close(self) -> None:
        """Dispose of every connection; later use raises `StoreClosed`."""
        self.closed = True
        self._engine.dispose()

    def require_open(self) -> None:
        """Raise `StoreClosed` once the store was closed."""
        if self.closed:
            raise StoreClosed(f"the store {self.location.display} was closed; open it again to use it")

    def reading(self) -> Reading:
        """A read transaction whose driver errors come out as compute-budget errors."""
        self.require_open()
        return Reading(self)

    def logical(self, row: Any) -> tuple[Any, ...]:
        """A stored row as its logical values (PostgreSQL's encoded copied ids decoded, see `text_codec`)."""
        return self.backend.logical(row)


class Reading:
    """A read transaction whose driver errors come out as compute-budget errors."""

    def __init__(self, session: StoreSession) -> None:
        self._session = session
        self._connection: Connection | None = None

    def __enter__(self) -> Connection:
        try:
            self._connection = self._session.engine.connect()
        except SQLAlchemyError as error:
            raise translate(error, self._session.location, reading=True) from None
        return self._connection

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        assert self._connection is not None
        try:
            self._connection.close()
        except SQLAlchemyError as closing:  # a server that went away fails the close too
            if error is None:
                raise translate(closing, self._session.location, reading=True) from None
        if isinstance(error, SQLAlchemyError):
            raise translate(error, self._session.location, reading=True) from None


def lock_for_append(connection: Connection, *, readonly: bool) -> None:
    """Serialise appenders (the backend's lock; nothing where BEGIN already took it, as on SQLite)."""
    if not readonly:
        backend_for(connection).lock_for_append(connection)


def read_head(connection: Connection, statements: Statements) -> ChainHead:
    """The row with the highest seq; a head that cannot be read is refused, never guessed.

    SQLite sorts text after every number, so a seq tampered into text (anywhere) comes first here and is
    caught; a tampered number in the middle of the chain is the auditor's to find.
    """
    row = connection.exec_driver_sql(statements.head).first()
    if row is None:
        return EMPTY_HEAD
    seq, chain, budget_id = row
    if (
        type(seq) is not int
        or not 0 < seq < MAX_SEQ  # 2**63-1 cannot be followed: a seq set by hand
        or not isinstance(chain, str)
        or not _HEX64.fullmatch(chain)
        or not isinstance(budget_id, str)
    ):
        raise StoreDamaged(
            f"the chain head (seq {seq!r}, budget_id {budget_id!r}) cannot be read: the store was changed "
            "behind its back; run `compute-budget audit` for the details"
        )
    return ChainHead(seq, chain, budget_id)


def prefer_index_order(connection: Connection) -> None:
    """Read a seq range in the primary index's order for the rest of this transaction, without a sort (on
    PostgreSQL a sort of most of the table spills to disk: `PostgreSQLBackend.prefer_index_order`)."""
    backend_for(connection).prefer_index_order(connection)


def utc_now() -> str:
    """Recording time, UTC, microseconds: diagnostic only, never part of a decision or its budget_id."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
