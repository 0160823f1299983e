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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from compute_budget.core.chain import EMPTY_HEAD, ChainHead
from compute_budget.core.checkpoint import Checkpoint
from compute_budget.core.merkle import CompactRange
from compute_budget.core.note import SignerKey, VerifierKey
from compute_budget.core.row import StoredDecision, stored_from_row
from compute_budget.core.seal import StoredCheckpoint
from compute_budget.core.tree import TILE_LEVEL, TiledTree
from compute_budget.core.types import ComputeBudgetDecision, ComputeBudgetStatus
from compute_budget.errors import (
    DestinationNotEmpty,
    InputError,
    MalformedDecision,
    NotABudgetStore,
    ReadOnlyStore,
    SchemaBehindHead,
    StoreDamaged,
    StoreUnavailable,
)
from compute_budget.store import seal as sealing
from compute_budget.store.append import CHUNK_SIZE, ChunkPlan, collector_paused, plan_chunk, prepared_chunks
from compute_budget.store.backend import Location, begin_write, create_store_engine, locate, translate
from compute_budget.store.keys import signer_from_environment, signer_key
from compute_budget.store.migrations import SchemaState, head_revision, schema_state, upgrade_to_head
from compute_budget.store.seal import SealStatements, seal_statements_for
from compute_budget.store.statements import Statements, statements_for


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


class BudgetStore:
    """The audit store. Open with `BudgetStore.open(path_or_url)`; use as a context manager."""

    def __init__(
        self,
        location: Location,
        engine: Engine,
        *,
        readonly: bool,
        signer: SignerKey | None = None,
        origin: str | None = None,
    ) -> None:
        self.location = location
        self.readonly = readonly
        self._engine = engine
        self._sql = statements_for(engine.dialect.name)
        self._seal = seal_statements_for(engine.dialect.name)
        self._signer = signer
        self._verifier = signer.verifier() if signer is not None else None
        self._wanted_origin = origin
        # The tree's frontier after this process's last append, keyed by the head it belongs to: a process that
        # appends one gate at a time then never rereads its tile of rows.
        self._frontier_cache: tuple[ChainHead, CompactRange] | None = None
        self._verified_notes: set[str] = set()  # own checkpoints whose signature this process already verified
        self._last_signed: tuple[str, ChainHead] | None = None  # the note this process signed last, and its head

    @classmethod
    def open(
        cls,
        target: str | os.PathLike[str] | None = None,
        *,
        readonly: bool = False,
        origin: str | None = None,
        signing_key: SignerKey | str | os.PathLike[str] | None = None,
    ) -> BudgetStore:
        """Open the store at a path or SQLAlchemy URL (None: `$COMPUTE_BUDGET_DB` or `compute_budget.db`).

        A writer creates a new, empty database at the schema head; a reader needs an existing store. Either
        refuses a schema behind head (`SchemaBehindHead`, fixed by `compute-budget migrate`).

        `origin` names a new store's log (spec section 8; refused if the store already has another); without it
        the first append sets a random one. `signing_key` (a `SignerKey` or a key file; default: the file named by
        `$COMPUTE_BUDGET_SIGNING_KEY`, if set) signs a checkpoint of the new head in every append transaction.
        """
        if readonly and (origin is not None or signing_key is not None):
            raise InputError("origin and signing_key are for a store opened for writing, not readonly=True")
        if origin is not None:
            sealing.check_origin_name(origin)
        signer = None
        if not readonly:
            signer = signer_key(signing_key) if signing_key is not None else signer_from_environment()
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
                if not readonly:
                    _seal_on_open(connection, origin, create_origin=False)
        except SQLAlchemyError as error:
            engine.dispose()
            raise translate(error, location) from None
        except BaseException:
            engine.dispose()
            raise
        return cls(location, engine, readonly=readonly, signer=signer, origin=origin)

    @staticmethod
    def migrate(target: str | os.PathLike[str] | None = None, *, origin: str | None = None) -> tuple[str | None, str]:
        """Bring the schema at `target` to head (creating it if empty); returns (old, new) revision.

        Also completes the seal of an existing store: builds the Merkle tree of its rows when it has none yet
        (after migration 0003, or an offline ``--sql`` migration), and sets its origin (`origin`, else a random
        one) when it holds rows and has none.
        """
        if origin is not None:
            sealing.check_origin_name(origin)
        location = locate(target)
        _check_file(location, readonly=False)
        engine = create_store_engine(location, readonly=False)
        try:
            with begin_write(engine) as connection:
                _lock_for_append(connection, statements_for(engine.dialect.name), readonly=False)
                state, revision = schema_state(connection)
                if state is SchemaState.FOREIGN:
                    raise NotABudgetStore(f"{location.display} is not a compute-budget database: it has other tables")
                if state is SchemaState.AHEAD:
                    _require_head(location, state, revision)
                if state is not SchemaState.AT_HEAD:
                    upgrade_to_head(connection)
                _seal_on_open(connection, origin, create_origin=True)
        except SQLAlchemyError as error:
            raise translate(error, location) from None
        finally:
            engine.dispose()
        return revision, head_revision()

    @property
    def signing_key(self) -> VerifierKey | None:
        """The verifier key of the key this store signs its appends with, if any."""
        return self._verifier

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
                head = _head(connection, self._sql)
                origin = sealing.ensure_origin(connection, self._seal, self._wanted_origin, create=True)
                assert origin is not None
                frontier = self._frontier(connection, head)
                if self._verifier is not None and not self._still_signed_by_me(connection, head):
                    sealing.require_extends(
                        connection, self._sql, self._seal, self._verifier, origin, head, frontier.root(),
                        verified=self._verified_notes,
                    )
                start = head
                insert = self._sql.insert
                optimistic = True
                for prepared in itertools.chain([first] if first is not None else [], chunks):
                    recorded_at = _utc_now()
                    plan: ChunkPlan | None = None
                    if optimistic:
                        plan = plan_chunk(prepared, {}, head, recorded_at)
                        try:
                            with connection.begin_nested():
                                connection.exec_driver_sql(insert, plan.rows)
                        except IntegrityError:
                            optimistic, plan = False, None
                    if plan is None:
                        stored = _stored_gates(connection, self._sql, {item.decision.budget_id for item in prepared})
                        plan = plan_chunk(prepared, stored, head, recorded_at)
                        if plan.rows:
                            connection.exec_driver_sql(insert, plan.rows)
                    sealing.insert_nodes(connection, self._seal, frontier.extend(plan.leaves, min_level=TILE_LEVEL))
                    head = plan.head
                    new += len(plan.rows)
                    present += len(prepared) - len(plan.rows)
                    if results is not None:
                        results.extend(plan.results)
                    if on_progress is not None:
                        on_progress(len(prepared))
                if self._signer is not None and head != start:
                    note = sealing.signed_note(origin, head, frontier.root(), [self._signer])
                    sealing.insert_checkpoint(connection, self._seal, head.seq, self._signer, note, _utc_now())
        except SQLAlchemyError as error:
            raise translate(error, self.location) from None
        finally:
            chunks.close()  # stops the decide-ahead thread whatever happened
        if self._signer is not None and head != start:
            self._verified_notes = {note}
            self._last_signed = (note, head)
        self._frontier_cache = (head, frontier)
        return head, new, present

    def _still_signed_by_me(self, connection: Connection, head: ChainHead) -> bool:
        """True when the head is the one this process signed last and that note is still the newest filed under
        its key: then the store trivially extends it, with nothing to reread or re-verify."""
        if self._last_signed is None or self._last_signed[1] != head or self._verifier is None:
            return False
        return sealing.newest_note_by_key(connection, self._seal, self._verifier) == self._last_signed[0]

    def _frontier(self, connection: Connection, head: ChainHead) -> CompactRange:
        """The tree's frontier at `head`: this process's own from its last append when nobody appended since,
        else read from the stored nodes and the last tile of rows (building the tree if it was never built)."""
        if self._frontier_cache is not None and self._frontier_cache[0] == head:
            return self._frontier_cache[1].copy()
        if not sealing.tree_is_built(connection, self._seal, head.seq):
            return sealing.build_tree(connection, self._sql, self._seal, head.seq)
        return sealing.frontier_at(connection, self._seal, head.seq)

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

    def iter_raw_rows(self) -> Iterator[tuple[Any, ...]]:
        """Every stored row as raw column values (`row.ROW_COLUMNS` order), in `seq` order, streamed."""
        with self._reading() as connection:
            result = connection.execution_options(stream_results=True, yield_per=2000).exec_driver_sql(
                f"{self._sql.select} ORDER BY seq"
            )
            for partition in result.partitions():
                for row in partition:
                    yield tuple(row)

    def import_history(
        self,
        rows: Iterable[tuple[Any, ...]],
        *,
        origin: str | None = None,
        checkpoints: Iterable[tuple[int, str, str, str, str]] = (),
        on_progress: Callable[[int], None] | None = None,
    ) -> ChainHead:
        """Append another store's rows exactly as stored (every column, the chain kept), into this empty store,
        with its origin (when it has one) and its signed checkpoints ((tree_size, key_name, key_hash, note,
        recorded_at), oldest first, read after the rows); the tree is rebuilt from the rows.

        All or nothing: an error from `rows` or `checkpoints` (a row failing verification, say) leaves this store
        empty.
        """
        if self.readonly:
            raise ReadOnlyStore(f"{self.location.display} was opened read-only; open it for writing to copy into it")
        from compute_budget.core.leaf import unreadable_leaf_hash

        try:
            with begin_write(self._engine) as connection:
                _lock_for_append(connection, self._sql, readonly=False)
                existing = _head(connection, self._sql)
                if existing.seq != 0:
                    raise DestinationNotEmpty(
                        f"{self.location.display} already holds {existing.seq} rows; copy needs an empty store"
                    )
                present = sealing.read_origin(connection, self._seal)
                if origin is not None and present is not None and present != origin:
                    raise DestinationNotEmpty(
                        f"{self.location.display} already has origin {present}, not the source's {origin}; "
                        "copy into a new, empty database"
                    )
                if present is None and origin is not None:
                    sealing.ensure_origin(connection, self._seal, origin, create=False)
                insert = self._sql.insert
                head = existing
                frontier = CompactRange()
                source = iter(rows)
                while chunk := list(itertools.islice(source, CHUNK_SIZE * 4)):
                    connection.exec_driver_sql(insert, chunk)
                    hashes = [unreadable_leaf_hash(row[:17]) for row in chunk]
                    sealing.insert_nodes(connection, self._seal, frontier.extend(hashes, min_level=TILE_LEVEL))
                    last = chunk[-1]
                    head = ChainHead(int(last[0]), str(last[-1]), str(last[1]))
                    if on_progress is not None:
                        on_progress(len(chunk))
                for batch in _batched(checkpoints, CHUNK_SIZE):
                    connection.exec_driver_sql(self._seal.insert_checkpoint, list(batch))
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
        """A checkpoint of the current head, to keep outside the database for a later audit: the chain head, the
        store's origin and the root of its Merkle tree (origin and root are None while the store has no origin)."""
        with self._reading() as connection:
            head = _head(connection, self._sql)
            origin = sealing.read_origin(connection, self._seal)
            if origin is None:
                return Checkpoint.from_head(head)
            return Checkpoint.from_head(head, origin=origin, root=self._stored_root(connection, head))

    def signed_checkpoint(self, signers: Iterable[SignerKey | str | os.PathLike[str]]) -> str:
        """The checkpoint note of the current head signed by every key of `signers` (keys or key files); it is
        not stored. Each key must find the store extending the newest checkpoint it signed (else `StoreDamaged`)."""
        keys = [signer_key(item) for item in signers]
        if not keys:
            raise InputError("signing a checkpoint needs at least one signing key")
        with self._reading() as connection:
            head = _head(connection, self._sql)
            origin = sealing.read_origin(connection, self._seal)
            if origin is None:
                raise StoreUnavailable(
                    f"{self.location.display} has no origin yet: record a gate first, or run "
                    "`compute-budget migrate --origin NAME`"
                )
            root = self._stored_root(connection, head)
            for key in keys:
                sealing.require_extends(connection, self._sql, self._seal, key.verifier(), origin, head, root)
            return sealing.signed_note(origin, head, root, keys)

    def origin(self) -> str | None:
        """The store's origin (its log name), or None while none is set."""
        with self._reading() as connection:
            return sealing.read_origin(connection, self._seal)

    def iter_checkpoint_rows(self) -> Iterator[tuple[int, str, str, str, str]]:
        """Every stored signed checkpoint as (tree_size, key_name, key_hash, note, recorded_at), oldest first."""
        after = 0
        while True:
            with self._reading() as connection:
                rows = connection.exec_driver_sql(self._seal.copy_checkpoints, (after,)).fetchall()
            for row in rows:
                after = row[0]
                yield (row[1], row[2], row[3], row[4], row[5])
            if len(rows) < sealing.PAGE_ROWS:
                return

    def _stored_root(self, connection: Connection, head: ChainHead) -> bytes:
        """The root of the stored tree at `head` (a store not yet built refuses: run migrate)."""
        if not sealing.tree_is_built(connection, self._seal, head.seq):
            raise StoreUnavailable(
                f"{self.location.display} has no Merkle tree yet (migrated offline): run `compute-budget migrate` or "
                "record with it once to build it"
            )
        return sealing.frontier_at(connection, self._seal, head.seq).root()

    # -- reading for the auditor ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[Snapshot]:
        """One read transaction whose queries all see the same rows (an audit plans its ranges on one)."""
        with self._reading() as connection:
            if connection.dialect.name == "postgresql":
                connection = connection.execution_options(isolation_level="REPEATABLE READ")
            yield Snapshot(connection, self._sql, self._seal)

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

    def __init__(self, connection: Connection, statements: Statements, seal: SealStatements) -> None:
        self._connection = connection
        self._statements = statements
        self._seal = seal

    # -- the seal -----------------------------------------------------------------------------------------------

    def origin(self) -> str | None:
        """The store's origin, or None while none is set."""
        return sealing.read_origin(self._connection, self._seal)

    def tree(self, size: int) -> TiledTree:
        """A `NodeReader` over the stored tree of the first `size` rows."""
        return sealing.tree_reader(self._connection, self._seal, size)

    def tree_is_built(self, size: int) -> bool:
        """True when the stored tree covers `size` rows (False for a store migrated without its tree yet)."""
        return sealing.tree_is_built(self._connection, self._seal, size)

    def has_tree_nodes(self) -> bool:
        """True when any tree node is stored."""
        return not sealing.tree_is_empty(self._connection, self._seal)

    def frontier(self, size: int) -> CompactRange:
        """The compact range of the stored tree at `size` (`StoreDamaged` when it cannot be read)."""
        return sealing.frontier_at(self._connection, self._seal, size)

    def chain_at(self, seq: int) -> str | None:
        """The stored chain_hash of row `seq` (the genesis for 0), or None."""
        return sealing.chain_at(self._connection, self._statements)(seq)

    def raw_row(self, budget_id: str) -> tuple[Any, ...] | None:
        """The stored row with this budget_id, raw (`row.ROW_COLUMNS` order), or None."""
        row = self._connection.exec_driver_sql(self._statements.by_budget_id, (budget_id,)).first()
        return None if row is None else tuple(row)

    def newest_by_key(self, key: VerifierKey, *, at_most: int | None = None) -> Iterator[StoredCheckpoint]:
        """Stored checkpoints recorded as signed by `key`, newest first (up to tree size `at_most`)."""
        return sealing.newest_by_key(self._connection, self._seal, key, at_most=at_most)

    def newest_covering(self, seq: int, at_most: int) -> StoredCheckpoint | None:
        """The newest stored checkpoint whose tree covers row `seq` (size seq..at_most), or None."""
        row = self._connection.exec_driver_sql(self._seal.newest_covering, (seq, at_most)).first()
        return None if row is None else sealing.stored_checkpoint(tuple(row))

    def checkpoints_at(self, size: int) -> list[StoredCheckpoint]:
        """The stored checkpoints of tree size `size`, newest first (at most 20)."""
        rows = self._connection.exec_driver_sql(self._seal.at_size, (size,)).fetchall()
        return [sealing.stored_checkpoint(tuple(row)) for row in rows]

    def checkpoints_beyond(self, size: int) -> list[StoredCheckpoint]:
        """Stored checkpoints naming more rows than `size` (at most 100)."""
        rows = self._connection.exec_driver_sql(self._seal.beyond, (size,)).fetchall()
        return [sealing.stored_checkpoint(tuple(row)) for row in rows]

    def misplaced_nodes(self, size: int) -> list[tuple[Any, Any]]:
        """(level, idx) of stored tree nodes below the stored levels or over rows beyond `size` (at most 100)."""
        return [(row[0], row[1]) for row in self._connection.exec_driver_sql(self._seal.misplaced_nodes, (size,))]

    def checkpoints_between(self, low: int, high: int) -> Iterator[StoredCheckpoint]:
        """Stored checkpoints with low < tree_size <= high, in size order."""
        return sealing.checkpoints_between(self._connection, self._seal, low, high)

    def nodes_at(self, level: int, first: int, last: int) -> Iterator[tuple[int, str]]:
        """Stored tree nodes (idx, hex hash) of `level` with first <= idx <= last, in order."""
        while first <= last:
            rows = self._connection.exec_driver_sql(self._seal.nodes_at, (level, first, last)).fetchall()
            for row in rows:
                first = int(row[0]) + 1
                yield int(row[0]), str(row[1])
            if len(rows) < sealing.PAGE_ROWS:
                return

    def rows_between(self, low: int, high: int, *, batch_rows: int = 2000) -> Iterator[list[tuple[Any, ...]]]:
        """Raw rows with low < seq <= high in seq order, a batch per query."""
        while low < high:
            upper = min(low + batch_rows, high)
            rows = self._connection.exec_driver_sql(self._statements.seq_range, (low, upper)).fetchall()
            yield [tuple(row) for row in rows]
            low = upper

    # -- the chain ----------------------------------------------------------------------------------------------

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


def _seal_on_open(connection: Connection, origin: str | None, *, create_origin: bool) -> None:
    """A writer's opening step for the seal: set a wanted origin, build the tree of rows written before it."""
    statements = statements_for(connection.dialect.name)
    seal = seal_statements_for(connection.dialect.name)
    try:
        head = _head(connection, statements)
    except StoreDamaged:
        return  # a damaged head stops the first append, with its own message
    sealing.ensure_origin(connection, seal, origin, create=create_origin and head.seq > 0)
    if not sealing.tree_is_built(connection, seal, head.seq):
        sealing.build_tree(connection, statements, seal, head.seq)


def _batched(items: Iterable[Any], size: int) -> Iterator[tuple[Any, ...]]:
    source = iter(items)
    while batch := tuple(itertools.islice(source, size)):
        yield batch


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
