"""`BudgetStore`: the append-only, hash-chained table of decisions, on SQLite (default) or PostgreSQL.

Writers take the append lock for the whole transaction (SQLite ``BEGIN IMMEDIATE``, a PostgreSQL table lock),
read the chain head, and append; so concurrent writers queue instead of forking the chain, and a batch is
written whole or not at all. Readers open the database read-only and never write.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import itertools
import os
import queue
import re
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import orjson
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from compute_budget.chain import EMPTY_HEAD, ChainHead, chain_hash
from compute_budget.checkpoint import Checkpoint
from compute_budget.engine import Location, begin_write, create_store_engine, locate, translate
from compute_budget.errors import (
    ComputeBudgetError,
    DestinationNotEmpty,
    GateConflict,
    MalformedDecision,
    NotABudgetStore,
    ReadOnlyStore,
    SchemaBehindHead,
    StoreDamaged,
    StoreUnavailable,
)
from compute_budget.gate_record import PreparedGate, differing_keys, prepare_gate, same_gate
from compute_budget.migration import SchemaState, head_revision, schema_state, upgrade_to_head
from compute_budget.schema import COLUMNS, TABLE_NAME
from compute_budget.types import ComputeBudgetDecision, ComputeBudgetStatus, SourceSpan

CHUNK_SIZE = 500  # gates decided, looked up and inserted per round trip
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM {TABLE_NAME}"


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


@dataclass(frozen=True, slots=True)
class StoredDecision:
    """One stored row: the decision with its `seq`, gate input, recording time and chain hash."""

    seq: int
    decision: ComputeBudgetDecision
    gate_input: str
    recorded_at: str
    chain_hash: str

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON: the decision's fields, then `seq`, `gate_input`, `recorded_at`, `chain_hash`."""
        return {
            **self.decision.to_dict(),
            "seq": self.seq,
            "gate_input": self.gate_input,
            "recorded_at": self.recorded_at,
            "chain_hash": self.chain_hash,
        }


class BudgetStore:
    """The audit store. Open with `BudgetStore.open(path_or_url)`; use as a context manager."""

    def __init__(self, location: Location, engine: Engine, *, readonly: bool) -> None:
        self.location = location
        self.readonly = readonly
        self._engine = engine

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
                _lock_for_append(connection, readonly=readonly)
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
    def migrate(target: str | os.PathLike[str] | None = None) -> tuple[str | None, str]:
        """Bring the schema at `target` to head (creating it if empty); returns (old, new) revision."""
        location = locate(target)
        _check_file(location, readonly=False)
        engine = create_store_engine(location, readonly=False)
        try:
            with begin_write(engine) as connection:
                _lock_for_append(connection, readonly=False)
                state, revision = schema_state(connection)
                if state is SchemaState.FOREIGN:
                    raise NotABudgetStore(f"{location.display} is not a compute-budget database: it has other tables")
                if state is SchemaState.AHEAD:
                    _require_head(location, state, revision)
                if state is not SchemaState.AT_HEAD:
                    upgrade_to_head(connection)
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
        with _collector_paused():
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
        chunks = _prepared_chunks(gates, ahead=results is None)
        first = next(chunks, None)
        try:
            with begin_write(self._engine) as connection:
                _lock_for_append(connection, readonly=False)
                head = _head(connection)
                insert = _insert_sql(connection)
                optimistic = True
                for prepared in itertools.chain([first] if first is not None else [], chunks):
                    recorded_at = _utc_now()
                    plan: _ChunkPlan | None = None
                    if optimistic:
                        plan = _plan_chunk(prepared, {}, head, recorded_at)
                        try:
                            with connection.begin_nested():
                                connection.exec_driver_sql(insert, plan.rows)
                        except IntegrityError:
                            optimistic, plan = False, None
                    if plan is None:
                        stored = _stored_gates(connection, {item.decision.budget_id for item in prepared})
                        plan = _plan_chunk(prepared, stored, head, recorded_at)
                        if plan.rows:
                            connection.exec_driver_sql(insert, plan.rows)
                    head = plan.head
                    new += len(plan.rows)
                    present += len(prepared) - len(plan.rows)
                    if results is not None:
                        results.extend(plan.results)
                    if on_progress is not None:
                        on_progress(len(prepared))
        except SQLAlchemyError as error:
            raise translate(error, self.location) from None
        finally:
            chunks.close()  # stops the decide-ahead thread whatever happened
        return head, new, present

    # -- reading -------------------------------------------------------------------------------------------

    def get(self, budget_id: str) -> StoredDecision | None:
        """The stored row with this `budget_id`, or None."""
        with self._reading() as connection:
            row = connection.exec_driver_sql(
                f"{_SELECT} WHERE budget_id = {_placeholder(connection)}", (budget_id,)
            ).first()
        return None if row is None else _readable(tuple(row))

    def find(self, prefix: str, *, limit: int = 2) -> list[StoredDecision]:
        """Stored rows whose budget_id starts with `prefix` (lowercase hex), at most `limit` of them."""
        if not re.fullmatch(r"[0-9a-f]{1,64}", prefix):
            return []
        with self._reading() as connection:
            mark = _placeholder(connection)
            rows = connection.exec_driver_sql(
                f"{_SELECT} WHERE budget_id >= {mark} AND budget_id < {mark} ORDER BY budget_id LIMIT {int(limit)}",
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
            mark = _placeholder(connection)
            where = f" WHERE status = {mark}" if status is not None else ""
            params: tuple[Any, ...] = (str(status),) if status is not None else ()
            if limit is not None:
                query = f"SELECT * FROM ({_SELECT}{where} ORDER BY seq DESC LIMIT {int(limit)}) AS newest ORDER BY seq"
            else:
                query = f"{_SELECT}{where} ORDER BY seq"
            result = connection.execution_options(stream_results=True, yield_per=1000).exec_driver_sql(query, params)
            for row in result:
                yield _readable(tuple(row))

    def iter_raw_rows(self) -> Iterator[tuple[Any, ...]]:
        """Every stored row as raw column values (`schema.COLUMNS` order), in `seq` order, streamed."""
        with self._reading() as connection:
            result = connection.execution_options(stream_results=True, yield_per=2000).exec_driver_sql(
                f"{_SELECT} ORDER BY seq"
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
                _lock_for_append(connection, readonly=False)
                existing = _head(connection)
                if existing.seq != 0:
                    raise DestinationNotEmpty(
                        f"{self.location.display} already holds {existing.seq} rows; copy needs an empty store"
                    )
                insert = _insert_sql(connection)
                head = existing
                source = iter(rows)
                while chunk := list(itertools.islice(source, CHUNK_SIZE * 4)):
                    connection.exec_driver_sql(insert, chunk)
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
            return int(connection.exec_driver_sql(f"SELECT count(*) FROM {TABLE_NAME}").scalar_one())

    def head(self) -> ChainHead:
        """The last link of the chain (seq 0 and the genesis hash for an empty store)."""
        with self._reading() as connection:
            return _head(connection)

    def checkpoint(self) -> Checkpoint:
        """A checkpoint of the current head, to keep outside the database for a later audit."""
        return Checkpoint.from_head(self.head())

    def _reading(self) -> _Reading:
        return _Reading(self)

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for the auditor and tests)."""
        return self._engine


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


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for a bulk append (about 10% faster in the benchmarks).

    A batch allocates millions of short-lived, acyclic objects that reference counting frees at once; the
    collector would only keep re-walking every long-lived object of the process (the caller's own data too).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _prepared_chunks(gates: Iterable[object], *, ahead: bool) -> Generator[list[PreparedGate], None, None]:
    """The gates in decided chunks. With `ahead`, a helper thread reads and decides the next chunk while the
    caller inserts this one: SQLite and psycopg release the GIL while the database works, so the two overlap.
    Whatever the helper raises (a bad line, a gate JSON cannot hold) is raised here, in the caller.
    """
    source = iter(gates)
    if not ahead:
        while chunk := list(itertools.islice(source, CHUNK_SIZE)):
            yield [prepare_gate(gate) for gate in chunk]
        return
    handoff: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=2)
    stop = threading.Event()

    def offer(item: tuple[str, Any]) -> None:
        while not stop.is_set():
            try:
                handoff.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def work() -> None:
        try:
            while not stop.is_set() and (chunk := list(itertools.islice(source, CHUNK_SIZE))):
                offer(("chunk", [prepare_gate(gate) for gate in chunk]))
            offer(("end", None))
        except BaseException as error:  # handed to the caller, who decides what it means
            offer(("error", error))

    helper = threading.Thread(target=work, name="compute-budget-decide", daemon=True)
    helper.start()
    try:
        while True:
            kind, payload = handoff.get()
            if kind == "end":
                return
            if kind == "error":
                raise payload
            yield payload
    finally:
        stop.set()
        if threading.current_thread() is not helper:
            helper.join()


@dataclass(frozen=True, slots=True)
class _ChunkPlan:
    """What appending one chunk does: the rows to insert, the head after them, each gate's outcome."""

    rows: list[tuple[Any, ...]]
    head: ChainHead
    results: list[tuple[ComputeBudgetDecision, bool, int]]


def _plan_chunk(
    prepared: list[PreparedGate], stored: dict[str, tuple[int, str]], head: ChainHead, recorded_at: str
) -> _ChunkPlan:
    """Number and chain the new gates of a chunk after `head`; raises `GateConflict` for a changed gate.

    `stored` maps the budget_ids already in the database to their (seq, gate_input); gates repeated within
    the chunk are matched against their first occurrence.
    """
    seq, prev, last_id = head.seq, head.chain_hash, head.budget_id
    seen = dict(stored)
    rows: list[tuple[Any, ...]] = []
    results: list[tuple[ComputeBudgetDecision, bool, int]] = []
    for item in prepared:
        budget_id = item.decision.budget_id
        existing = seen.get(budget_id)
        if existing is not None:
            if not same_gate(existing[1], item):
                raise GateConflict(
                    budget_id, existing[1], item.gate_input, differing_keys(existing[1], item), item.line
                )
            results.append((item.decision, False, existing[0]))
            continue
        seq += 1
        row = _row(seq, item, recorded_at)
        prev = chain_hash(prev, row)
        rows.append((*row, prev))
        seen[budget_id] = (seq, item.gate_input)
        last_id = budget_id
        results.append((item.decision, True, seq))
    return _ChunkPlan(rows, ChainHead(seq, prev, last_id), results)


def _check_file(location: Location, *, readonly: bool) -> None:
    path = location.sqlite_path
    if path is None:
        return
    if path.is_dir():
        raise StoreUnavailable(f"{path} is a folder, not a database file")
    if readonly and not path.exists():
        raise StoreUnavailable(f"no database at {path} (check the path, or record something first)")
    if not readonly and not path.parent.is_dir():
        raise StoreUnavailable(f"cannot create database {path}: folder {path.parent} does not exist")


def _require_head(location: Location, state: SchemaState, revision: str | None) -> None:
    where = location.display
    if state is SchemaState.AT_HEAD:
        return
    if state is SchemaState.EMPTY:
        raise StoreUnavailable(f"{where} holds no compute-budget store yet (an empty database)")
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


def _lock_for_append(connection: Connection, *, readonly: bool) -> None:
    """Serialise appenders on backends without SQLite's BEGIN IMMEDIATE."""
    if readonly or connection.dialect.name != "postgresql":
        return
    # Transaction-scoped: held until commit or rollback. A fixed key shared by every compute-budget writer
    # (and by the first writer creating the schema, before the table exists).
    connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7227022700)")


def _head(connection: Connection) -> ChainHead:
    """The row with the highest seq; a head that cannot be read is refused, never guessed.

    SQLite sorts text after every number, so a seq tampered into text (anywhere) comes first here and is
    caught; a tampered number in the middle of the chain is the auditor's to find.
    """
    row = connection.exec_driver_sql(
        f"SELECT seq, chain_hash, budget_id FROM {TABLE_NAME} ORDER BY seq DESC LIMIT 1"
    ).first()
    if row is None:
        return EMPTY_HEAD
    seq, chain, budget_id = row
    if (
        type(seq) is not int
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


def _placeholder(connection: Connection) -> str:
    return "?" if connection.dialect.paramstyle == "qmark" else "%s"


def _insert_sql(connection: Connection) -> str:
    marks = ", ".join([_placeholder(connection)] * len(COLUMNS))
    return f"INSERT INTO {TABLE_NAME} ({', '.join(COLUMNS)}) VALUES ({marks})"


def _stored_gates(connection: Connection, budget_ids: set[str]) -> dict[str, tuple[int, str]]:
    """The `seq` and `gate_input` of those of `budget_ids` already stored."""
    if not budget_ids:
        return {}
    marks = ", ".join([_placeholder(connection)] * len(budget_ids))
    rows = connection.exec_driver_sql(
        f"SELECT budget_id, seq, gate_input FROM {TABLE_NAME} WHERE budget_id IN ({marks})", tuple(budget_ids)
    )
    stored: dict[str, tuple[int, str]] = {}
    for budget_id, seq, gate_input in rows:
        if type(seq) is not int or not isinstance(gate_input, str):
            raise StoreDamaged(
                f"stored row {budget_id} (seq {seq!r}) cannot be read; run `compute-budget audit` for the details"
            )
        stored[str(budget_id)] = (seq, gate_input)
    return stored


def _row(seq: int, item: PreparedGate, recorded_at: str) -> tuple[Any, ...]:
    """A row's values in `chain.CHAINED_COLUMNS` order (every column but chain_hash)."""
    decision = item.decision
    return (
        seq,
        decision.budget_id,
        decision.policy_version,
        decision.gate_decision_id,
        decision.gate_policy_version,
        decision.gate_input_digest,
        decision.status.value,
        decision.reason_code,
        decision.max_candidates,
        decision.max_depth,
        decision.max_steps,
        decision.max_wallclock_ms,
        decision.max_parallelism,
        spans_json(decision.evidence_spans),
        decision.explanation,
        item.gate_input,
        recorded_at,
    )


def spans_json(spans: tuple[SourceSpan, ...]) -> str:
    """Evidence spans as the stored JSON text (an array of span objects, gate order kept)."""
    return orjson.dumps([span.to_dict() for span in spans]).decode("utf-8")


def _readable(row: tuple[Any, ...]) -> StoredDecision:
    """A stored row for a viewer: one that cannot be read is reported with where it is, not skipped."""
    try:
        return stored_from_row(row)
    except MalformedDecision as error:
        raise StoreDamaged(
            f"row seq {row[0]!r} (budget_id {row[1]!r}) cannot be read: {error}; run `compute-budget audit`"
        ) from None


def stored_from_row(row: tuple[Any, ...]) -> StoredDecision:
    """Read a row (in `schema.COLUMNS` order); raises `MalformedDecision` when it cannot be read."""
    values = dict(zip(COLUMNS, row, strict=True))
    try:
        spans = orjson.loads(values["evidence_spans"])
    except (orjson.JSONDecodeError, TypeError) as error:
        raise MalformedDecision(f"evidence_spans is not JSON ({error})") from None
    decision = ComputeBudgetDecision.from_dict(
        {name: values[name] for name in ComputeBudgetDecision.__dataclass_fields__} | {"evidence_spans": spans}
    )
    seq, gate_input, recorded_at, chain = (
        values["seq"],
        values["gate_input"],
        values["recorded_at"],
        values["chain_hash"],
    )
    if not (
        isinstance(seq, int) and isinstance(gate_input, str) and isinstance(recorded_at, str) and isinstance(chain, str)
    ):
        raise MalformedDecision("seq, gate_input, recorded_at or chain_hash has the wrong type")
    return StoredDecision(seq, decision, gate_input, recorded_at, chain)


def _utc_now() -> str:
    """Recording time, UTC, microseconds: diagnostic only, never part of a decision or its budget_id."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


__all__ = ["BatchResult", "BudgetStore", "ComputeBudgetError", "RecordResult", "StoredDecision"]
