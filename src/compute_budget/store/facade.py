"""`BudgetStore`: the append-only, hash-chained table of decisions, on SQLite (default) or PostgreSQL.

Writers take the append lock for the whole transaction (SQLite ``BEGIN IMMEDIATE``, a PostgreSQL table lock),
read the chain head, and append; so concurrent writers queue instead of forking the chain, and a batch is
written whole or not at all. Readers open the database read-only and never write.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import os
import re
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from compute_budget.core.chain import EMPTY_HEAD, ChainHead
from compute_budget.core.checkpoint import Checkpoint
from compute_budget.core.row import StoredDecision, stored_from_row
from compute_budget.core.types import ComputeBudgetDecision, ComputeBudgetStatus
from compute_budget.errors import (
    DestinationNotEmpty,
    MalformedDecision,
    NoHistory,
    NotABudgetStore,
    ReadOnlyStore,
    SchemaBehindHead,
    StoreDamaged,
    StoreUnavailable,
)
from compute_budget.store.append import CHUNK_SIZE, ChunkPlan, collector_paused, plan_chunk, prepared_chunks
from compute_budget.store.backend import Location, begin_write, create_store_engine, locate, translate
from compute_budget.store.browse import Browsing
from compute_budget.store.migrations import SchemaState, head_revision, schema_state, upgrade_to_head
from compute_budget.store.schema_check import restore_guard, schema_problems
from compute_budget.store.statements import Statements, statements_for
from compute_budget.store.table import TABLE_NAME


@dataclass(frozen=True, slots=True)
class RecordResult:
    """The outcome of recording one gate: its decision, whether it was new, and its row's `seq`."""

    decision: ComputeBudgetDecision
    new: bool
    seq: int


@dataclass(frozen=True, slots=True)
class BatchResult:
    """The outcome of `record_many`: how many decisions were new, how many already present, the new head."""

    new: int
    present: int
    head: ChainHead


class BudgetStore(Browsing):
    """The audit store. Open with `BudgetStore.open(path_or_url)`; use as a context manager."""

    def __init__(self, location: Location, engine: Engine, *, readonly: bool) -> None:
        self.location = location
        self.readonly = readonly
        self._engine = engine
        self._sql = statements_for(engine.dialect.name)

    @classmethod
    def open(cls, target: str | os.PathLike[str] | None = None, *, readonly: bool = False) -> BudgetStore:
        """Open the store at a path or SQLAlchemy URL (None: `$COMPUTE_BUDGET_DB` or `compute_budget.db`).

        A writer creates a new, empty database at the schema head; a reader needs an existing store. Either
        refuses a schema behind head (`SchemaBehindHead`, fixed by `compute-budget migrate`).
        """
        location = locate(target)
        _check_file(location, readonly=readonly)
        engine = create_store_engine(location, readonly=readonly)
        try:
            with engine.begin() if readonly else begin_write(engine) as connection:
                _lock_for_append(connection, statements_for(engine.dialect.name), readonly=readonly)
                state, revision = schema_state(connection)
                if state is SchemaState.EMPTY and not readonly:
                    upgrade_to_head(connection)
                else:
                    _require_head(location, state, revision)
        except SQLAlchemyError as error:
            engine.dispose()
            raise translate(error, location) from None
        except BaseException:
            engine.dispose()
            raise
        return cls(location, engine, readonly=readonly)

    @staticmethod
    def migrate(
        target: str | os.PathLike[str] | None = None, *, on_restore: Callable[[list[str]], None] | None = None
    ) -> tuple[str | None, str]:
        """Bring the schema at `target` to head (creating it if empty); returns (old, new) revision.

        A guard found missing, disabled, altered or joined by hand-made triggers is put back as this release
        creates it; `on_restore` is told what was wrong. Added or removed columns are the audit's to report.
        """
        location = locate(target)
        _check_file(location, readonly=False)
        engine = create_store_engine(location, readonly=False)
        try:
            with begin_write(engine) as connection:
                _lock_for_append(connection, statements_for(engine.dialect.name), readonly=False)
                state, revision = schema_state(connection)
                if state is SchemaState.FOREIGN:
                    raise NotABudgetStore(f"{location.display} is not a compute-budget database: it has other tables")
                if state in (SchemaState.AHEAD, SchemaState.TABLE_MISSING):
                    _require_head(location, state, revision)
                if state is not SchemaState.AT_HEAD:
                    upgrade_to_head(connection)
                problems = schema_problems(connection)
                if problems:
                    restore_guard(connection)
                    if on_restore is not None:
                        on_restore(problems)
        except SQLAlchemyError as error:
            raise translate(error, location) from None
        finally:
            engine.dispose()
        return revision, head_revision()

    def close(self) -> None:
        """Release the database connections."""
        self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    # -- writing -------------------------------------------------------------------------------------------

    def record(self, gate: object) -> RecordResult:
        """Decide and append one gate; re-recording the same gate is a no-op returning the stored decision."""
        results: list[tuple[ComputeBudgetDecision, bool, int]] = []
        self._append([gate], results)
        decision, new, seq = results[0]
        return RecordResult(decision, new, seq)

    def record_many(self, gates: Iterable[object], *, on_progress: Callable[[int], None] | None = None) -> BatchResult:
        """Decide and append every gate atomically (all or none), streaming any iterable of any length."""
        with collector_paused():
            head, new, present = self._append(gates, None, on_progress)
        return BatchResult(new, present, head)

    def _append(
        self,
        gates: Iterable[object],
        results: list[tuple[ComputeBudgetDecision, bool, int]] | None,
        on_progress: Callable[[int], None] | None = None,
    ) -> tuple[ChainHead, int, int]:
        """Append in one write transaction, a chunk of gates at a time.

        Each chunk is first inserted optimistically, as if every gate were new, inside a savepoint; a gate
        already stored makes the insert fail (primary key, or the guard's no-replace trigger), the savepoint
        rolls back, and from then on chunks look their gates up before inserting. Fresh appends, the common
        case, so cost no lookup at all.
        """
        if self.readonly:
            raise ReadOnlyStore(f"{self.location.display} was opened read-only; open it for writing to record")
        new = present = 0
        # Decide the first chunk before taking the append lock: a single batch then holds the lock only to
        # chain and insert, and concurrent writers wait less.
        chunks = prepared_chunks(gates, ahead=results is None)
        first = next(chunks, None)
        try:
            with begin_write(self._engine) as connection:
                _lock_for_append(connection, self._sql, readonly=False)
                _require_guard(connection, self.location)
                head = _head(connection, self._sql)
                insert = self._sql.insert
                optimistic = True
                for prepared in itertools.chain([first] if first is not None else [], chunks):
                    recorded_at = _utc_now()
                    plan: ChunkPlan | None = None
                    if optimistic:
                        plan = plan_chunk(prepared, {}, head, recorded_at)
                        try:
                            with connection.begin_nested():
                                _insert_exactly(connection, insert, plan.rows, self.location)
                        except IntegrityError:
                            optimistic, plan = False, None
                    if plan is None:
                        stored = _stored_gates(connection, self._sql, {item.decision.budget_id for item in prepared})
                        plan = plan_chunk(prepared, stored, head, recorded_at)
                        if plan.rows:
                            _insert_exactly(connection, insert, plan.rows, self.location)
                    if plan.rows:
                        _require_planned_head(connection, self._sql, plan.head, self.location)
                    head = plan.head
                    new += len(plan.rows)
                    present += len(prepared) - len(plan.rows)
                    if results is not None:
                        results.extend(plan.results)
                    if on_progress is not None:
                        on_progress(len(prepared))
        except SQLAlchemyError as error:
            raise translate(error, self.location) from None
        except OverflowError:
            raise StoreDamaged(
                f"{self.location.display}: the chain head's seq is too large to follow (it was set by hand); "
                "run `compute-budget audit` for the details"
            ) from None
        finally:
            chunks.close()  # stops the decide-ahead thread whatever happened
        return head, new, present

    # -- reading -------------------------------------------------------------------------------------------

    def get(self, budget_id: str) -> StoredDecision | None:
        """The stored row with this `budget_id`, or None."""
        with self._reading() as connection:
            row = connection.exec_driver_sql(self._sql.by_budget_id, (budget_id,)).first()
        return None if row is None else _readable(tuple(row))

    def find(self, prefix: str, *, limit: int = 2) -> list[StoredDecision]:
        """Stored rows whose budget_id starts with `prefix` (lowercase hex), at most `limit` of them."""
        if not re.fullmatch(r"[0-9a-f]{1,64}", prefix):
            return []
        with self._reading() as connection:
            rows = connection.exec_driver_sql(
                self._sql.by_prefix(limit),
                (prefix, prefix + "g"),  # "g" sorts after every hex digit: the range is exactly the prefix
            ).fetchall()
        return [_readable(tuple(row)) for row in rows]

    def __iter__(self) -> Iterator[StoredDecision]:
        """Every stored row, in `seq` order, streamed."""
        return self.iter_decisions()

    def iter_decisions(
        self, *, status: ComputeBudgetStatus | str | None = None, limit: int | None = None
    ) -> Iterator[StoredDecision]:
        """Stored rows in `seq` order (newest last), optionally of one status and only the newest `limit`."""
        with self._reading() as connection:
            params: tuple[Any, ...] = (str(status),) if status is not None else ()
            query = self._sql.listing(status=status is not None, limit=limit)
            result = connection.execution_options(stream_results=True, yield_per=1000).exec_driver_sql(query, params)
            for row in result:
                yield _readable(tuple(row))

    def iter_raw_rows(self) -> Generator[tuple[Any, ...], None, None]:
        """Every stored row as raw column values (`row.ROW_COLUMNS` order), in `seq` order, streamed."""
        with self._reading() as connection:
            result = connection.execution_options(stream_results=True, yield_per=2000).exec_driver_sql(
                f"{self._sql.select} ORDER BY seq"
            )
            for partition in result.partitions():
                for row in partition:
                    yield tuple(row)

    def import_history(
        self, rows: Iterable[tuple[Any, ...]], *, on_progress: Callable[[int], None] | None = None
    ) -> ChainHead:
        """Append another store's rows exactly as stored (every column, the chain kept), into this empty store.

        All or nothing: an error from `rows` (a row failing verification, say) leaves this store empty.
        """
        if self.readonly:
            raise ReadOnlyStore(f"{self.location.display} was opened read-only; open it for writing to copy into it")
        try:
            with begin_write(self._engine) as connection:
                _lock_for_append(connection, self._sql, readonly=False)
                _require_guard(connection, self.location)
                existing = _head(connection, self._sql)
                if existing.seq != 0:
                    raise DestinationNotEmpty(
                        f"{self.location.display} already holds {existing.seq} rows; copy needs an empty store"
                    )
                insert = self._sql.insert
                head = existing
                source = iter(rows)
                while chunk := list(itertools.islice(source, CHUNK_SIZE * 4)):
                    _insert_exactly(connection, insert, chunk, self.location)
                    last = chunk[-1]
                    head = ChainHead(int(last[0]), str(last[-1]), str(last[1]))
                    if on_progress is not None:
                        on_progress(len(chunk))
        except SQLAlchemyError as error:
            raise translate(error, self.location) from None
        return head

    def count(self) -> int:
        """How many rows are stored."""
        with self._reading() as connection:
            return int(connection.exec_driver_sql(self._sql.count).scalar_one())

    def head(self) -> ChainHead:
        """The last link of the chain (seq 0 and the genesis hash for an empty store)."""
        with self._reading() as connection:
            return _head(connection, self._sql)

    def checkpoint(self) -> Checkpoint:
        """A checkpoint of the current head, to keep outside the database for a later audit."""
        return Checkpoint.from_head(self.head())

    # -- reading for the auditor ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[Snapshot]:
        """One read transaction whose queries all see the same rows (an audit plans its ranges on one)."""
        with self._reading() as connection:
            yield Snapshot(connection, self._sql)

    def scan(self, low: int, high: int, *, batch_rows: int = 2000) -> Iterator[list[tuple[Any, ...]]]:
        """Raw rows with low < seq <= high in seq order, as batches of plain tuples, streamed: SQLite's own
        cursor (the fastest way through the rows), a server-side cursor elsewhere."""
        with self._reading() as connection:
            params = (low, high)
            if connection.dialect.name == "sqlite":
                cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
                try:
                    cursor.execute(self._sql.seq_range, params)
                    while batch := cursor.fetchmany(batch_rows):
                        yield batch
                finally:
                    cursor.close()
                return
            result = connection.execution_options(stream_results=True, yield_per=batch_rows).exec_driver_sql(
                self._sql.seq_range, params
            )
            try:
                for partition in result.partitions():
                    yield [tuple(row) for row in partition]
            finally:
                result.close()

    def _reading(self) -> _Reading:
        return _Reading(self)

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for the auditor and tests)."""
        return self._engine


class Snapshot:
    """Reads inside one transaction of a store (see `BudgetStore.snapshot`)."""

    def __init__(self, connection: Connection, statements: Statements) -> None:
        self._connection = connection
        self._statements = statements

    def max_seq(self) -> int:
        """The highest seq that is an integer (0 for an empty store)."""
        value = self._connection.exec_driver_sql(self._statements.max_integer_seq).scalar()
        return int(value) if value is not None else 0

    def link_at(self, seq: int) -> tuple[Any, Any, Any] | None:
        """The raw (seq, chain_hash, budget_id) stored at `seq`, as stored (tampered values included), or None."""
        row = self._connection.exec_driver_sql(self._statements.link_at, (seq,)).first()
        return None if row is None else (row[0], row[1], row[2])

    def link_at_or_before(self, seq: int) -> tuple[int, str] | None:
        """The (seq, chain_hash) of the last row at or before `seq`, when it is readable."""
        row = self._connection.exec_driver_sql(self._statements.link_at_or_before, (seq,)).first()
        if row is None or type(row[0]) is not int or not isinstance(row[1], str):
            return None
        return row[0], row[1]

    def schema_problems(self) -> list[str]:
        """How the guard and the guarded tables differ from what this release creates (empty: they do not)."""
        return schema_problems(self._connection)

    def write_privileges(self) -> list[str]:
        """On PostgreSQL, which of INSERT, UPDATE, DELETE and TRUNCATE this connection's role holds on the
        decisions table (a reader's `default_transaction_read_only` can be lifted by `SET TRANSACTION READ
        WRITE`; only a SELECT-only role is a real guarantee). SQLite: none (readers open the file read-only)."""
        if self._connection.dialect.name != "postgresql":
            return []
        held = self._connection.exec_driver_sql(
            "SELECT privilege FROM unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) AS privilege "
            "WHERE has_table_privilege(current_user, %s, privilege)",
            (TABLE_NAME,),
        ).scalars().all()
        return [str(privilege) for privilege in held]

    def count(self) -> int:
        """How many rows the table holds."""
        return int(self._connection.exec_driver_sql(self._statements.count).scalar_one())

    def misplaced_rows(self, max_seq: int) -> list[tuple[Any, Any]]:
        """(budget_id, seq) of the rows whose seq is missing, not a positive integer, or beyond `max_seq`."""
        return [(row[0], row[1]) for row in self._connection.exec_driver_sql(self._statements.misplaced, (max_seq,))]


class _Reading:
    """A read transaction whose driver errors come out as compute-budget errors."""

    def __init__(self, store: BudgetStore) -> None:
        self._store = store
        self._connection: Connection | None = None

    def __enter__(self) -> Connection:
        try:
            self._connection = self._store.engine.connect()
        except SQLAlchemyError as error:
            raise translate(error, self._store.location) from None
        return self._connection

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        assert self._connection is not None
        self._connection.close()
        if isinstance(error, SQLAlchemyError):
            raise translate(error, self._store.location) from None


def _check_file(location: Location, *, readonly: bool) -> None:
    path = location.sqlite_path
    if path is None:
        return
    if path.is_dir():
        raise StoreUnavailable(f"{path} is a folder, not a database file")
    if path.exists() and not path.is_file():
        # A FIFO would hang every reader, a device would collect a -journal beside it: only files are stores.
        raise StoreUnavailable(f"{path} is not a regular file (a device, pipe or socket) and cannot be a database")
    if readonly and not path.exists():
        raise StoreUnavailable(f"no database at {path} (check the path, or record something first)")
    if not readonly and not path.parent.is_dir():
        raise StoreUnavailable(f"cannot create database {path}: folder {path.parent} does not exist")


def _require_head(location: Location, state: SchemaState, revision: str | None) -> None:
    where = location.display
    if state is SchemaState.AT_HEAD:
        return
    if state is SchemaState.EMPTY:
        raise NoHistory(f"{where} holds no compute-budget store yet (an empty database)", where=where, dropped=False)
    if state is SchemaState.TABLE_MISSING:
        raise NoHistory(
            f"{where} is a compute-budget store (revision {revision}) whose decisions table is gone: it was dropped "
            "by hand; restore the database from a backup",
            where=where,
            dropped=True,
        )
    if state is SchemaState.BEHIND:
        raise SchemaBehindHead(
            f"{where} has schema revision {revision}, behind this release's {head_revision()}: "
            f"run `compute-budget migrate --db {where}` first"
        )
    if state is SchemaState.AHEAD:
        raise NotABudgetStore(
            f"{where} has schema revision {revision}, unknown to this release (written by a newer compute-budget?)"
        )
    raise NotABudgetStore(f"{where} is not a compute-budget database (it has other tables and no budget schema)")


def _require_guard(connection: Connection, location: Location) -> None:
    """Writers append only under the guard this release created: a missing, disabled or altered trigger, or
    one added by hand on a guarded table, stops the append (inside its transaction, so nothing is written)."""
    problems = schema_problems(connection)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise StoreDamaged(
            f"{location.display}: {problems[0]}{more}; refusing to append: run `compute-budget migrate --db "
            f"{location.display}` to restore the append-only guard, then `compute-budget audit`"
        )


def _insert_exactly(connection: Connection, insert: str, rows: list[tuple[Any, ...]], location: Location) -> None:
    """Insert `rows`, and prove the database stored every one: a hand-made trigger that skips rows
    (`RAISE(IGNORE)`, a PostgreSQL trigger returning NULL) must not let a writer report rows it never wrote."""
    written = connection.exec_driver_sql(insert, rows).rowcount
    if written != len(rows):
        raise StoreDamaged(
            f"{location.display} stored {written} of the {len(rows)} rows just inserted: something on the table "
            "drops rows (a trigger added by hand?); nothing was written; run `compute-budget audit`"
        )


def _require_planned_head(
    connection: Connection, statements: Statements, planned: ChainHead, location: Location
) -> None:
    """After a chunk, the stored head must be the one the writer planned, or the transaction is rolled back."""
    stored = _head(connection, statements)
    if stored != planned:
        raise StoreDamaged(
            f"{location.display}: after appending up to seq {planned.seq} the stored head is seq {stored.seq} "
            f"({stored.budget_id}); the table does not keep what is written; nothing was written; "
            "run `compute-budget audit`"
        )


def _lock_for_append(connection: Connection, statements: Statements, *, readonly: bool) -> None:
    """Serialise appenders on backends without SQLite's BEGIN IMMEDIATE."""
    if not readonly and statements.append_lock is not None:
        connection.exec_driver_sql(statements.append_lock)


def _head(connection: Connection, statements: Statements) -> ChainHead:
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


_HEX64 = re.compile(r"[0-9a-f]{64}")
MAX_SEQ = 2**63 - 1  # the largest 64-bit integer, SQLite's and PostgreSQL's BIGINT alike


def _stored_gates(
    connection: Connection, statements: Statements, budget_ids: set[str]
) -> dict[str, tuple[int, str]]:
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


def _readable(row: tuple[Any, ...]) -> StoredDecision:
    """A stored row for a viewer: one that cannot be read is reported with where it is, not skipped."""
    try:
        return stored_from_row(row)
    except MalformedDecision as error:
        raise StoreDamaged(
            f"row seq {row[0]!r} (budget_id {row[1]!r}) cannot be read: {error}; run `compute-budget audit`"
        ) from None



def _utc_now() -> str:
    """Recording time, UTC, microseconds: diagnostic only, never part of a decision or its budget_id."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


__all__ = ["BatchResult", "BudgetStore", "RecordResult", "StoredDecision"]
