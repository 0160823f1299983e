"""`BudgetStore`: the append-only, hash-chained table of decisions, on SQLite (default) or PostgreSQL.

Writers take the append lock for the whole transaction (SQLite ``BEGIN IMMEDIATE``, a PostgreSQL table lock),
read the chain head, and append; so concurrent writers queue instead of forking the chain, and a batch is
written whole or not at all. Readers open the database read-only and never write.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import itertools
import os
import re
import sqlite3
import urllib.parse
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.head import EMPTY_HEAD, GENESIS_CHAIN_HASH, ChainHead
from compute_budget.core.log.merkle import CompactRange
from compute_budget.core.log.note import SignerKey, VerifierKey
from compute_budget.core.log.tree import TILE_LEVEL, TiledTree
from compute_budget.core.policy.prepare import PreparedGate
from compute_budget.core.policy.types import ComputeBudgetDecision, ComputeBudgetStatus
from compute_budget.core.row import StoredDecision, stored_from_row
from compute_budget.core.seal import StoredCheckpoint
from compute_budget.core.verify import Finding, RangeResult, check_row
from compute_budget.errors import (
    DestinationNotEmpty,
    GateConflict,
    InputError,
    MalformedDecision,
    NoHistory,
    NotABudgetStore,
    ReadOnlyStore,
    SchemaBehindHead,
    StoreClosed,
    StoreDamaged,
    StoreUnavailable,
    UnsignedAppendRefused,
)
from compute_budget.store import seal as sealing
from compute_budget.store.append import CHUNK_SIZE, ChunkPlan, collector_paused, plan_chunk, prepared_chunks
from compute_budget.store.authorship import (
    WriterKeys,
    check_signed_head,
    check_state,
    holds_checkpoints,
    newest_stored_note,
    writer_keys,
)
from compute_budget.store.backend import (
    Location,
    begin_write,
    create_store_engine,
    locate,
    translate,
)
from compute_budget.store.browse import Browsing
from compute_budget.store.grants import Role, require_grants
from compute_budget.store.migrations import SchemaState, head_revision, schema_state, upgrade_to_head
from compute_budget.store.schema_check import restore_guard, schema_problems
from compute_budget.store.seal import SealStatements, seal_statements_for
from compute_budget.store.statements import MULTI_ROW_MAX, Statements, statements_for
from compute_budget.store.table import TABLE_NAME, VERSION_TABLE
from compute_budget.store.text_codec import decode_row, encode_rows, encode_text, tolerant_text


@dataclass(frozen=True, slots=True)
class RecordResult:
    """The outcome of recording one gate: its decision, whether it was new, and its row's `seq`."""

    decision: ComputeBudgetDecision
    new: bool
    seq: int


@dataclass(frozen=True, slots=True)
class GateResult:
    """One gate of a `record_many` batch: where it was in the input, its `budget_id`, its row's `seq`, and
    whether this batch stored it (`new`) or found it already stored. `line` is the input line the gate started
    on when it came from a stream of lines (the CLI's INPUT), else None."""

    index: int
    budget_id: str
    seq: int
    new: bool
    line: int | None = None


@dataclass(frozen=True, slots=True)
class SkippedConflict:
    """A gate `record_many(..., on_conflict="skip")` left out: its `budget_id` is already recorded (in the store
    or earlier in the batch) with a different gate; `differing` names the top-level keys that differ."""

    index: int
    budget_id: str
    line: int | None
    differing: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class BatchResult:
    """The outcome of `record_many`: how many decisions were new, how many already present, the new head.

    `results` holds one `GateResult` per recorded gate, in input order, when `record_many(..., results=True)`
    asked for them (else it is empty); `conflicts` the gates skipped with `on_conflict="skip"`.
    """

    new: int
    present: int
    head: ChainHead
    results: tuple[GateResult, ...] = ()
    conflicts: tuple[SkippedConflict, ...] = ()
    adopted: int = 0  # rows signed over by `adopt_unsigned_through` (seq adopted_after+1 .. adopted_after+adopted)
    adopted_after: int = 0
    writer_state_created: bool = False  # `init_writer_state` made the state from the store's own checkpoint


@dataclass(frozen=True, slots=True)
class RowCheck:
    """A stored row re-derived, re-hashed and re-linked to the row before it (`BudgetStore.check`): the audit's
    check of one row. It `holds` when there are no findings."""

    budget_id: str
    seq: int | None
    findings: tuple[Finding, ...]

    @property
    def holds(self) -> bool:
        """True when the row re-derives, hashes to its budget_id and links to the row stored before it."""
        return not self.findings


@dataclass(slots=True)
class _Appended:
    head: ChainHead
    new: int = 0
    present: int = 0
    results: list[tuple[int, PreparedGate, bool, int]] | None = None
    conflicts: list[tuple[int, GateConflict]] | None = None
    adopted: int = 0
    adopted_after: int = 0
    state_created: bool = False


class _StoredAlready(Exception):
    """The optimistic insert of a chunk met a stored budget_id (rolls its savepoint back)."""


class BudgetStore(Browsing):
    """The audit store. Open with `BudgetStore.open(path_or_url)`; use as a context manager."""

    def __init__(
        self,
        location: Location,
        engine: Engine,
        *,
        readonly: bool,
        created: bool = False,
        writer: WriterKeys | None = None,
        origin: str | None = None,
        allow_unsigned: bool = False,
    ) -> None:
        self.location = location
        self.readonly = readonly
        self.created = created  # this open created the SQLite file (see `discard_if_unused`)
        self._engine = engine
        self._sql = statements_for(engine.dialect.name)
        self._postgresql = engine.dialect.name == "postgresql"
        self._closed = False
        self._seal = seal_statements_for(engine.dialect.name)
        self._writer = writer
        self._signer = writer.signer if writer is not None else None
        self._verifier = writer.verifier if writer is not None else None
        self._allow_unsigned = allow_unsigned
        self._wanted_origin = origin
        # The tree's frontier after this process's last append, keyed by the head it belongs to: a process that
        # appends one gate at a time then never rereads its tile of rows.
        self._frontier_cache: tuple[ChainHead, CompactRange] | None = None
        # (note, key) pairs whose signature this process already verified
        self._verified_notes: set[tuple[str, VerifierKey]] = set()
        self._last_signed: tuple[str, ChainHead] | None = None  # the note this process signed last, and its head

    @classmethod
    def open(
        cls,
        target: str | os.PathLike[str] | None = None,
        *,
        readonly: bool = False,
        origin: str | None = None,
        signing_key: SignerKey | str | os.PathLike[str] | None = None,
        writer_state: str | os.PathLike[str] | None = None,
        init_writer_state: bool = False,
        peer_keys: Iterable[VerifierKey | str] = (),
        allow_unsigned: bool = False,
    ) -> BudgetStore:
        """Open the store at a path or SQLAlchemy URL (None: `$COMPUTE_BUDGET_DB` or `compute_budget.db`).

        A writer creates a new, empty database at the schema head; a reader needs an existing store. Either
        refuses a schema behind head (`SchemaBehindHead`, fixed by `compute-budget migrate`).

        `origin` names a new store's log (spec section 8; refused if the store already has another); without it
        the first append sets a random one. `signing_key` (a `SignerKey` or a key file; default: the file named by
        `$COMPUTE_BUDGET_SIGNING_KEY`, if set) signs a checkpoint of the new head in every append transaction, under
        spec 9.1's rules: the head must be the newest checkpoint signed by this key or one of `peer_keys`, and the
        store must extend the checkpoint this key last signed, kept in `writer_state` (default
        `$COMPUTE_BUDGET_WRITER_STATE`, else the key file's path plus ``.state``; `init_writer_state=True` makes a
        missing one from the store). Without a key, appending to a store that holds signed checkpoints raises
        `UnsignedAppendRefused` unless `allow_unsigned=True` (which also ignores the environment's key).
        """
        writing_options = (signing_key, writer_state) != (None, None) or init_writer_state or allow_unsigned
        if readonly and (origin is not None or writing_options or tuple(peer_keys)):
            raise InputError(
                "origin, signing_key, writer_state, init_writer_state, peer_keys and allow_unsigned are for a store "
                "opened for writing, not readonly=True"
            )
        if origin is not None:
            sealing.check_origin_name(origin)
        writer = None
        if not readonly:
            writer = writer_keys(
                signing_key, writer_state=writer_state, init_writer_state=init_writer_state, peer_keys=peer_keys,
                allow_unsigned=allow_unsigned,
            )
        location = locate(target)
        _check_file(location, readonly=readonly)
        created = not readonly and location.sqlite_path is not None and not location.sqlite_path.exists()
        engine = create_store_engine(location, readonly=readonly)
        try:
            with engine.begin() if readonly else begin_write(engine) as connection:
                _lock_for_append(connection, statements_for(engine.dialect.name), readonly=readonly)
                if readonly:
                    require_grants(connection, Role.AUDITOR, location.display)
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
        return cls(
            location, engine, readonly=readonly, created=created, writer=writer, origin=origin,
            allow_unsigned=allow_unsigned,
        )

    @staticmethod
    def migrate(
        target: str | os.PathLike[str] | None = None,
        *,
        origin: str | None = None,
        on_restore: Callable[[list[str]], None] | None = None,
    ) -> tuple[str | None, str]:
        """Bring the schema at `target` to head (creating it if empty); returns (old, new) revision.

        A guard found missing, disabled, altered or joined by hand-made triggers is put back as this release
        creates it; `on_restore` is told what was wrong (added or removed columns are the audit's to report).
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
                if state in (SchemaState.AHEAD, SchemaState.TABLE_MISSING):
                    _require_head(location, state, revision)
                if state is SchemaState.REVISION_TAMPERED:
                    # Spec 9.7: the tables are already head's; only the record is wrong. Repair the record (the
                    # guard is checked next, as on every migrate).
                    connection.exec_driver_sql(
                        f"UPDATE {VERSION_TABLE} SET version_num = {statements_for(engine.dialect.name).mark}",
                        (head_revision(),),
                    )
                    if on_restore is not None:
                        on_restore([
                            f"repaired the schema's bookkeeping: alembic_version recorded revision {revision!r} under "
                            f"this release's head tables; it now records {head_revision()}"
                        ])
                elif state is not SchemaState.AT_HEAD:
                    upgrade_to_head(connection)
                problems = schema_problems(connection)
                if problems:
                    restore_guard(connection)
                    if on_restore is not None:
                        on_restore(problems)
                _seal_on_open(connection, origin, create_origin=True)
        except SQLAlchemyError as error:
            raise translate(error, location) from None
        finally:
            engine.dispose()
        return revision, head_revision()

    @property
    def writer_state(self) -> Path | None:
        """The writer state file this store's signing key keeps (spec 9.1), or None without a key."""
        return self._writer.state.path if self._writer is not None else None

    @property
    def signing_key(self) -> VerifierKey | None:
        """The verifier key of the key this store signs its appends with, if any."""
        return self._verifier

    def close(self) -> None:
        """Release the database connections; every later call on this store raises `StoreClosed`."""
        self._closed = True
        self._engine.dispose()

    @property
    def closed(self) -> bool:
        """True once `close()` was called."""
        return self._closed

    def _require_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"the store {self.location.display} was closed; open it again to use it")

    def discard_if_unused(self) -> bool:
        """Close the store and delete its SQLite file if this open created it and it still holds no row: what a
        failed command leaves behind. Returns True when the file was deleted.

        Only with the store to itself: the file is switched out of WAL mode (possible only when no other
        connection has it open) and held under an exclusive lock while it is found empty and deleted, so a
        store another writer has started to use is never removed. PostgreSQL databases are never dropped.
        """
        self.close()
        path = self.location.sqlite_path
        if not self.created or path is None:
            return False
        try:
            return _remove_unused_sqlite(path)
        except (sqlite3.Error, OSError):
            return False

    def __enter__(self) -> Self:
        self._require_open()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    # -- writing -------------------------------------------------------------------------------------------

    def record(self, gate: object) -> RecordResult:
        """Decide and append one gate; re-recording the same gate is a no-op returning the stored decision."""
        appended = self._append([gate], results=True, ahead=False, skip_conflicts=False)
        assert appended.results is not None
        _, item, new, seq = appended.results[0]
        return RecordResult(item.decision, new, seq)

    def record_many(
        self,
        gates: Iterable[object],
        *,
        on_progress: Callable[[int], None] | None = None,
        results: bool = False,
        on_conflict: Literal["raise", "skip"] = "raise",
        adopt_unsigned_through: int | None = None,
    ) -> BatchResult:
        """Decide and append every gate atomically (all or none), streaming any iterable of any length.

        `results=True`: the `BatchResult` also lists every gate's `GateResult`, in input order (it then holds
        one small object per gate). `on_conflict="skip"`: a gate whose budget_id is recorded with a different
        gate is left out and listed in `BatchResult.conflicts`, and every other gate is recorded; the default,
        ``"raise"``, raises `GateConflict` and writes nothing.

        `adopt_unsigned_through=SEQ` (a signing writer only, spec 9.1): sign over the rows after the newest trusted
        checkpoint through SEQ, which must be the head when the transaction starts; each is re-derived as the
        audit does first, and a signed checkpoint of the head is stored even when no gate is new.
        """
        if on_conflict not in ("raise", "skip"):
            raise ValueError(f"on_conflict must be 'raise' or 'skip', not {on_conflict!r}")
        if adopt_unsigned_through is not None:
            if self._writer is None:
                raise InputError("adopting unsigned rows signs them: it needs a signing key (--signing-key)")
            if type(adopt_unsigned_through) is not int or adopt_unsigned_through < 0:
                raise InputError(f"adopt_unsigned_through must be a row number, not {adopt_unsigned_through!r}")
        with collector_paused():
            appended = self._append(
                gates, results=results, ahead=True, skip_conflicts=on_conflict == "skip", on_progress=on_progress,
                adopt_through=adopt_unsigned_through,
            )
        per_gate = tuple(
            GateResult(index, item.decision.budget_id, seq, new, item.line)
            for index, item, new, seq in appended.results or ()
        )
        skipped = tuple(
            SkippedConflict(index, conflict.budget_id, conflict.line, conflict.differing)
            for index, conflict in appended.conflicts or ()
        )
        return BatchResult(
            appended.new, appended.present, appended.head, per_gate, skipped, appended.adopted, appended.adopted_after,
            appended.state_created,
        )

    def _append(
        self,
        gates: Iterable[object],
        *,
        results: bool,
        ahead: bool,
        skip_conflicts: bool,
        on_progress: Callable[[int], None] | None = None,
        adopt_through: int | None = None,
    ) -> _Appended:
        """Append in one write transaction, a chunk of gates at a time.

        Each chunk is first inserted optimistically, as if every gate were new, inside a savepoint; a gate
        already stored makes the insert fail (SQLite: primary key, or the guard's no-replace trigger) or insert
        fewer rows than planned (PostgreSQL: ``ON CONFLICT DO NOTHING``), the savepoint rolls back, and from
        then on chunks look their gates up before inserting. Fresh appends, the common case, so cost no lookup
        at all.
        """
        self._require_open()
        if self.readonly:
            raise ReadOnlyStore(f"{self.location.display} was opened read-only; open it for writing to record")
        # Decide the first chunk before taking the append lock: a single batch then holds the lock only to
        # chain and insert, and concurrent writers wait less.
        chunks = prepared_chunks(gates, ahead=ahead)
        first = next(chunks, None)
        appended = _Appended(EMPTY_HEAD, results=[] if results else None, conflicts=[] if skip_conflicts else None)
        writer = self._writer
        note: str | None = None
        to_keep: str | None = None  # the note the writer state gets once the transaction committed
        # Spec 9.1: the state file's lock is taken before the transaction begins and released after the state was
        # replaced, so writers sharing a key queue here first, then on the append lock, always in that order.
        state_lock = writer.state.locked() if writer is not None else contextlib.nullcontext()
        try:
            with state_lock:
                with begin_write(self._engine) as connection:
                    _lock_for_append(connection, self._sql, readonly=False)
                    _require_guard(connection, self.location)
                    head = _head(connection, self._sql)
                    origin = sealing.ensure_origin(connection, self._seal, self._wanted_origin, create=True)
                    assert origin is not None
                    frontier = self._frontier(connection, head)
                    if writer is None:
                        if not self._allow_unsigned and holds_checkpoints(connection, self._seal):
                            raise UnsignedAppendRefused(
                                f"{self.location.display} holds signed checkpoints: an append without the writer's key "
                                "would leave rows no writer signed; record with --signing-key, or with --unsigned to "
                                "append unsigned rows anyway; nothing was written"
                            )
                    else:
                        if adopt_through is not None or not self._still_signed_by_me(connection, head):
                            authorised = check_signed_head(
                                connection, self._sql, self._seal, writer, origin, head, frontier,
                                verified=self._verified_notes, adopt_through=adopt_through, decode=self._logical,
                            )
                            appended.adopted, appended.adopted_after = authorised.adopted, authorised.signed_size
                        to_keep = check_state(
                            connection, self._sql, self._seal, writer, origin, head, frontier.root(),
                            verified=self._verified_notes,
                        )
                        appended.state_created = to_keep is not None
                    start = head
                    insert_if_new = self._sql.insert_if_new
                    optimistic = True
                    offset = 0
                    for prepared in itertools.chain([first] if first is not None else [], chunks):
                        recorded_at = _utc_now()
                        plan: ChunkPlan | None = None
                        if optimistic:
                            plan = plan_chunk(
                                prepared, {}, head, recorded_at, results=results, skip_conflicts=skip_conflicts
                            )
                            if insert_if_new is None and len(plan.rows) <= MULTI_ROW_MAX:
                                # SQLite, a chunk that is one statement: a statement is atomic, so a stored gate
                                # (the primary key, or the guard's no-replace trigger) undoes the whole statement
                                # and nothing of it stays; no savepoint is needed.
                                try:
                                    _insert_exactly(connection, self._sql, plan.rows, self.location)
                                except IntegrityError:
                                    _require_nothing_kept(connection, self._sql, head, self.location)
                                    optimistic, plan = False, None
                            else:
                                try:
                                    with connection.begin_nested():
                                        if insert_if_new is None:
                                            _insert_exactly(connection, self._sql, plan.rows, self.location)
                                        else:
                                            stored_rows = encode_rows(plan.rows)  # PostgreSQL text holds no NUL
                                            written = connection.exec_driver_sql(insert_if_new, stored_rows).rowcount
                                            if written != len(plan.rows):
                                                raise _StoredAlready  # then every row is looked up, inserted exactly
                                except (IntegrityError, _StoredAlready):
                                    optimistic, plan = False, None
                        if plan is None:
                            wanted = {item.decision.budget_id for item in prepared}
                            stored = _stored_gates(connection, self._sql, wanted)
                            plan = plan_chunk(
                                prepared, stored, head, recorded_at, results=results, skip_conflicts=skip_conflicts
                            )
                            if plan.rows:
                                _insert_exactly(connection, self._sql, plan.rows, self.location)
                        if plan.rows:
                            _require_planned_head(connection, self._sql, plan.head, self.location)
                        sealing.insert_nodes(connection, self._seal, frontier.extend(plan.leaves, min_level=TILE_LEVEL))
                        head = plan.head
                        appended.new += len(plan.rows)
                        appended.present += len(prepared) - len(plan.rows) - len(plan.conflicts)
                        if appended.results is not None:
                            appended.results.extend(
                                (offset + index, item, new, seq) for index, item, new, seq in plan.results
                            )
                        if appended.conflicts is not None:
                            appended.conflicts.extend((offset + index, conflict) for index, conflict in plan.conflicts)
                        offset += len(prepared)
                        if on_progress is not None:
                            on_progress(len(prepared))
                    if writer is not None and (head != start or adopt_through is not None):
                        note = sealing.signed_note(origin, head, frontier.root(), [writer.signer])
                        sealing.insert_checkpoint(connection, self._seal, head.seq, writer.signer, note, _utc_now())
                        to_keep = note
                if writer is not None and to_keep is not None:
                    writer.state.save(origin, to_keep, discard_unreadable=writer.init_state)
        except SQLAlchemyError as error:
            raise translate(error, self.location) from None
        except OverflowError:
            raise StoreDamaged(
                f"{self.location.display}: the chain head's seq is too large to follow (it was set by hand); "
                "run `compute-budget audit` for the details"
            ) from None
        finally:
            chunks.close()  # stops the decide-ahead thread whatever happened
        if note is not None and writer is not None:
            self._verified_notes = {(note, writer.verifier)}
            self._last_signed = (note, head)
        self._frontier_cache = (head, frontier)
        appended.head = head
        return appended

    def _still_signed_by_me(self, connection: Connection, head: ChainHead) -> bool:
        """True when the head is the one this process signed last and that note is still the newest stored
        checkpoint of any key: then it is the newest trusted one and names the head (rule 1), with nothing to
        reread or re-verify."""
        if self._last_signed is None or self._last_signed[1] != head:
            return False
        return newest_stored_note(connection, self._seal) == self._last_signed[0]

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
        return None if row is None else _readable(self._logical(row))

    def find(self, prefix: str, *, limit: int = 2) -> list[StoredDecision]:
        """Stored rows whose budget_id starts with `prefix` (lowercase hex), at most `limit` of them."""
        if not re.fullmatch(r"[0-9a-f]{1,64}", prefix):
            self._require_open()
            return []
        with self._reading() as connection:
            rows = connection.exec_driver_sql(
                self._sql.by_prefix(limit),
                (prefix, prefix + "g"),  # "g" sorts after every hex digit: the range is exactly the prefix
            ).fetchall()
        return [_readable(self._logical(row)) for row in rows]

    def find_ids(self, prefix: str, *, limit: int = 2) -> list[str]:
        """The stored budget_ids that start with `prefix` (lowercase hex), at most `limit`; reads no row, so a
        row that cannot be read is still found (to be checked, say)."""
        if not re.fullmatch(r"[0-9a-f]{1,64}", prefix):
            self._require_open()
            return []
        with self._reading() as connection:
            rows = connection.exec_driver_sql(self._sql.ids_by_prefix(limit), (prefix, prefix + "g")).fetchall()
        return [str(row[0]) for row in rows]

    def find_by_gate(self, decision_id: str) -> list[StoredDecision]:
        """The stored decisions of the gate with this `decision_id`, in `seq` order (several when different
        gates shared the id; none when it was never recorded)."""
        with self._reading() as connection:
            wanted = encode_text(decision_id) if self._postgresql else decision_id
            rows = connection.exec_driver_sql(self._sql.by_gate, (wanted,)).fetchall()
        return [_readable(self._logical(row)) for row in rows]

    def check(self, budget_id: str) -> RowCheck | None:
        """Check the stored row `budget_id` as the audit does (re-derive it from its gate input, recompute its
        budget_id, link it to the row stored before it); None when no such row is stored."""
        with self._reading() as connection:
            row = connection.exec_driver_sql(self._sql.by_budget_id, (budget_id,)).first()
            if row is None:
                return None
            raw = self._logical(row)
            seq = raw[0]
            anchor: tuple[int, str] = (0, GENESIS_CHAIN_HASH)
            if type(seq) is int and seq > 1:
                before = connection.exec_driver_sql(self._sql.link_at_or_before, (seq - 1,)).first()
                if before is not None and type(before[0]) is int and isinstance(before[1], str):
                    anchor = (before[0], before[1])
        result = RangeResult()
        check_row(raw, anchor[0], anchor[1], result)
        return RowCheck(budget_id, seq if type(seq) is int else None, tuple(result.findings))

    def __iter__(self) -> Iterator[StoredDecision]:
        """Every stored row, in `seq` order, streamed."""
        return self.iter_decisions()

    def iter_decisions(
        self,
        *,
        status: ComputeBudgetStatus | str | None = None,
        limit: int | None = None,
        reason_code: str | None = None,
        policy_version: str | None = None,
        gate_decision_id: str | None = None,
        after_seq: int | None = None,
        before_seq: int | None = None,
    ) -> Iterator[StoredDecision]:
        """Stored rows in `seq` order (newest last), streamed: only those matching every filter given (a
        status, reason code, policy version, gate decision_id, seq after / before a bound), and of those only
        `limit`: the first after `after_seq` when it is given (page forward with the last seq seen, and no row is
        skipped), else the newest."""
        self._require_open()
        wanted = {
            "status": None if status is None else str(status),
            "reason_code": reason_code,
            "policy_version": policy_version,
            "gate_decision_id": (
                encode_text(gate_decision_id) if self._postgresql and gate_decision_id is not None else gate_decision_id
            ),
            "after_seq": after_seq,
            "before_seq": before_seq,
        }
        filters = tuple(name for name, value in wanted.items() if value is not None)
        query = self._sql.listing(filters, limit)
        return self._stream(query, tuple(wanted[name] for name in filters))

    def _stream(self, query: str, params: tuple[Any, ...]) -> Iterator[StoredDecision]:
        with self._reading() as connection:
            result = connection.execution_options(stream_results=True, yield_per=1000).exec_driver_sql(query, params)
            for row in result:
                yield _readable(self._logical(row))

    def iter_raw_rows(self) -> Generator[tuple[Any, ...], None, None]:
        """Every stored row as raw column values (`row.ROW_COLUMNS` order), in `seq` order, streamed."""
        self._require_open()
        return self._raw_rows()

    def _raw_rows(self) -> Generator[tuple[Any, ...], None, None]:
        with self._reading() as connection:
            result = connection.execution_options(stream_results=True, yield_per=2000).exec_driver_sql(
                f"{self._sql.select} ORDER BY seq"
            )
            for partition in result.partitions():
                for row in partition:
                    yield self._logical(row)

    def import_history(
        self,
        rows: Iterable[tuple[Any, ...]],
        *,
        origin: str | None = None,
        checkpoints: Iterable[tuple[int, str, str, str, str]] = (),
        provenance: sealing.Provenance | None = None,
        provenance_from: str | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> ChainHead:
        """Append another store's rows exactly as stored (every column, the chain kept), into this empty store,
        with its origin (when it has one) and its signed checkpoints ((tree_size, key_name, key_hash, note,
        recorded_at), oldest first, read after the rows); the tree is rebuilt from the rows.

        All or nothing: an error from `rows` or `checkpoints` (a row failing verification, say) leaves this store
        empty. `provenance` is the source's provenance row, copied as it is; `provenance_from` (salvage, spec 9.8)
        writes a new one naming that origin and the copied head's size, root and chain hash.
        """
        self._require_open()
        if self.readonly:
            raise ReadOnlyStore(f"{self.location.display} was opened read-only; open it for writing to copy into it")
        from compute_budget.core.leaf import unreadable_leaf_hash

        try:
            with begin_write(self._engine) as connection:
                _lock_for_append(connection, self._sql, readonly=False)
                _require_guard(connection, self.location)
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
                head = existing
                frontier = CompactRange()
                source = iter(rows)
                while chunk := list(itertools.islice(source, CHUNK_SIZE * 4)):
                    _insert_exactly(connection, self._sql, chunk, self.location)
                    hashes = [unreadable_leaf_hash(row[:17]) for row in chunk]
                    sealing.insert_nodes(connection, self._seal, frontier.extend(hashes, min_level=TILE_LEVEL))
                    last = chunk[-1]
                    head = ChainHead(int(last[0]), str(last[-1]), str(last[1]))
                    if on_progress is not None:
                        on_progress(len(chunk))
                for batch in _batched(checkpoints, CHUNK_SIZE):
                    connection.exec_driver_sql(self._seal.insert_checkpoint, list(batch))
                if provenance_from is not None:
                    root = base64.b64encode(frontier.root()).decode("ascii")
                    connection.exec_driver_sql(
                        self._seal.insert_provenance,
                        (provenance_from, head.seq, root, head.chain_hash, _utc_now()),
                    )
                elif provenance is not None:
                    connection.exec_driver_sql(self._seal.insert_provenance, provenance)
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

    def signed_checkpoint(
        self,
        signers: Iterable[SignerKey | str | os.PathLike[str]],
        *,
        writer_state: str | os.PathLike[str] | None = None,
        peer_keys: Iterable[VerifierKey | str] = (),
        init_writer_state: bool = False,
    ) -> str:
        """The checkpoint note of the current head signed by every key of `signers` (key files, or `SignerKey`s
        with `writer_state=`); it is not stored. Spec 9.1, inside the append lock: the head must be the newest
        checkpoint signed by the key or a peer, and the store must extend each key's writer state, which then
        holds this note (else `StoreDamaged` or `WriterStateError`, and nothing is signed)."""
        self._require_open()
        sources = list(signers)
        if not sources:
            raise InputError("signing a checkpoint needs at least one signing key")
        if writer_state is not None and len(sources) > 1:
            raise InputError("writer_state names one key's state file: sign with one key at a time")
        if self.readonly:
            raise ReadOnlyStore(
                f"{self.location.display} was opened read-only: a writer signs inside the append lock, so open the "
                "store for writing to sign a checkpoint"
            )
        peers = tuple(peer_keys)
        writers = [
            writer_keys(source, writer_state=writer_state, init_writer_state=init_writer_state, peer_keys=peers)
            for source in sources
        ]
        chosen = [writer for writer in writers if writer is not None]
        with contextlib.ExitStack() as locks:
            # Always in the order of the paths: two processes signing with the same keys never wait on each other.
            for writer in sorted(chosen, key=lambda item: str(item.state.path)):
                locks.enter_context(writer.state.locked())
            try:
                with begin_write(self._engine) as connection:
                    _lock_for_append(connection, self._sql, readonly=False)
                    head = _head(connection, self._sql)
                    origin = sealing.read_origin(connection, self._seal)
                    if origin is None:
                        raise StoreUnavailable(
                            f"{self.location.display} has no origin yet: record a gate first, or run "
                            "`compute-budget migrate --origin NAME`"
                        )
                    self._stored_root(connection, head)  # refuses a store whose tree was never built
                    frontier = sealing.frontier_at(connection, self._seal, head.seq)
                    for writer in chosen:
                        check_signed_head(
                            connection, self._sql, self._seal, writer, origin, head, frontier,
                            verified=self._verified_notes, adopt_through=None, decode=self._logical,
                        )
                        check_state(
                            connection, self._sql, self._seal, writer, origin, head, frontier.root(),
                            verified=self._verified_notes,
                        )
                    note = sealing.signed_note(origin, head, frontier.root(), [writer.signer for writer in chosen])
            except SQLAlchemyError as error:
                raise translate(error, self.location) from None
            for writer in chosen:
                writer.state.save(origin, note, discard_unreadable=writer.init_state)
        return note

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
        self._require_open()
        return self._scan(low, high, batch_rows)

    def _scan(self, low: int, high: int, batch_rows: int) -> Iterator[list[tuple[Any, ...]]]:
        with self._reading() as connection:
            params = (low, high)
            if connection.dialect.name == "sqlite":
                raw = connection.connection.driver_connection
                resume = yield from _sqlite_batches(raw, self._sql.seq_range, low, high, batch_rows)
                if resume is not None:  # a text value that is not UTF-8: the rest is read tolerantly
                    with tolerant_text(connection):
                        yield from _sqlite_batches(raw, self._sql.seq_range, resume, high, batch_rows)
                return
            result = connection.execution_options(stream_results=True, yield_per=batch_rows).exec_driver_sql(
                self._sql.seq_range, params
            )
            try:
                for partition in result.partitions():
                    yield [decode_row(row) for row in partition]
            finally:
                result.close()

    def _logical(self, row: Any) -> tuple[Any, ...]:
        """A stored row as its logical values (PostgreSQL's encoded copied ids decoded, see `text_codec`)."""
        return decode_row(row) if self._postgresql else tuple(row)

    def _reading(self) -> _Reading:
        self._require_open()
        return _Reading(self)

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for the auditor and tests)."""
        self._require_open()
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

    def provenance(self) -> sealing.Provenance | None:
        """Where a salvaged store came from (spec 9.8): (source origin, through seq, root, chain hash, recorded at),
        or None for a store that was not made by `copy --through`."""
        return sealing.read_provenance(self._connection, self._seal)

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

    def unreadable_checkpoints(self) -> list[tuple[int, str]]:
        """(id, names of the wrongly typed columns) of stored checkpoint entries that are no checkpoint at all: a
        value not of its column's type, which every other reader of checkpoints skips (at most 100)."""
        rows = self._connection.exec_driver_sql(self._seal.unreadable_checkpoints).fetchall()
        return [(row[0], str(row[1]).strip()) for row in rows]

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
            with tolerant_text(self._connection):
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
        with tolerant_text(self._connection):
            row = self._connection.exec_driver_sql(self._statements.link_at, (seq,)).first()
        return None if row is None else (row[0], row[1], row[2])

    def link_at_or_before(self, seq: int) -> tuple[int, str] | None:
        """The (seq, chain_hash) of the last row at or before `seq`, when it is readable."""
        with tolerant_text(self._connection):
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
        with tolerant_text(self._connection):
            rows = self._connection.exec_driver_sql(self._statements.misplaced, (max_seq,)).fetchall()
        return [(row[0], row[1]) for row in rows]


def _sqlite_batches(
    raw: Any, sql: str, low: Any, high: int, batch_rows: int
) -> Generator[list[tuple[Any, ...]], None, Any]:
    """Rows of `sql` over (low, high] in batches, straight from SQLite's cursor (the fastest way through them).

    A text value that is not UTF-8 (a raw edit of the file can store any bytes) makes SQLite's decoder fail the
    fetch: then this stops and returns the seq of the last row it yielded, for the caller to read the rest
    tolerantly. Returns None when every row was read."""
    cursor = raw.cursor()
    try:
        cursor.execute(sql, (low, high))
        while True:
            try:
                batch = cursor.fetchmany(batch_rows)
            except sqlite3.OperationalError as error:
                if "decode" not in str(error):
                    raise
                return low
            if not batch:
                return None
            low = batch[-1][0]
            yield batch
    finally:
        cursor.close()


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
    if path.exists() and not path.is_file():
        # A FIFO would hang every reader, a device would collect a -journal beside it: only files are stores.
        raise StoreUnavailable(f"{path} is not a regular file (a device, pipe or socket) and cannot be a database")
    if readonly and not path.exists():
        raise StoreUnavailable(f"no database at {path} (check the path, or record something first)")
    if not readonly and not path.parent.is_dir():
        raise StoreUnavailable(f"cannot create database {path}: folder {path.parent} does not exist")


def _require_head(location: Location, state: SchemaState, revision: str | None) -> None:
    where = location.display
    if state in (SchemaState.AT_HEAD, SchemaState.REVISION_TAMPERED):
        return  # a tampered revision record is read and reported (schema_tampered); appends refuse it
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
    # Asked before inserting: a refused INSERT inside psycopg's pipeline would also log driver noise.
    require_grants(connection, Role.WRITER, location.display)
    problems = schema_problems(connection)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise StoreDamaged(
            f"{location.display}: {problems[0]}{more}; refusing to append: run `compute-budget migrate --db "
            f"{location.display}` to restore the append-only guard, then `compute-budget audit`"
        )


def _insert_exactly(
    connection: Connection, statements: Statements, rows: list[tuple[Any, ...]], location: Location
) -> None:
    """Insert `rows`, and prove the database stored every one: a hand-made trigger that skips rows
    (`RAISE(IGNORE)`, a PostgreSQL trigger returning NULL) must not let a writer report rows it never wrote.

    SQLite takes up to `MULTI_ROW_MAX` rows per multi-row INSERT (one statement, one program run, instead of one
    per row); PostgreSQL takes them all through the driver's executemany.
    """
    if connection.dialect.name == "postgresql":
        written = connection.exec_driver_sql(statements.insert, encode_rows(rows)).rowcount
    else:
        written = 0
        for start in range(0, len(rows), MULTI_ROW_MAX):
            piece = rows[start : start + MULTI_ROW_MAX]
            flat = tuple(itertools.chain.from_iterable(piece))
            written += connection.exec_driver_sql(statements.insert_rows(len(piece)), flat).rowcount
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


def _require_nothing_kept(connection: Connection, statements: Statements, head: ChainHead, location: Location) -> None:
    """After a failed one-statement insert without a savepoint: the write transaction must still be open and the
    stored head unchanged (the new rows all come after it), so the failed statement kept none of its rows. A
    conflict clause changed by hand (``ON CONFLICT FAIL`` keeps earlier rows, ``ROLLBACK`` ends the transaction)
    is refused rather than written around."""
    raw = connection.connection.dbapi_connection
    if not getattr(raw, "in_transaction", False):
        raise StoreDamaged(
            f"{location.display}: a failed insert ended the write transaction (a conflict clause changed by hand?); "
            "nothing was written; run `compute-budget audit`"
        )
    _require_planned_head(connection, statements, head, location)


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



def _remove_unused_sqlite(path: Path) -> bool:
    """Delete the SQLite store at `path` if no other connection has it open and it holds no row (see
    `BudgetStore.discard_if_unused`)."""
    uri = f"file:{urllib.parse.quote(str(path))}?mode=rw"
    connection = sqlite3.connect(uri, uri=True, timeout=0.2, isolation_level=None)
    try:
        # Keep every lock taken from here on until the connection closes, then leave WAL mode: SQLite allows
        # that only to the last connection, so from here on nobody else has the file open.
        connection.execute("PRAGMA locking_mode = EXCLUSIVE")
        if connection.execute("PRAGMA journal_mode = DELETE").fetchone()[0] != "delete":
            return False
        connection.execute("BEGIN EXCLUSIVE")
        if connection.execute(f"SELECT count(*) FROM {TABLE_NAME}").fetchone()[0] != 0:
            connection.execute("ROLLBACK")
            return False
        # Still holding the exclusive lock: a process that opened the path meanwhile waits, and SQLite then
        # refuses its writes to the deleted file (SQLITE_READONLY_DBMOVED) instead of losing them.
        path.unlink()
        connection.execute("ROLLBACK")
        return True
    finally:
        connection.close()


def _utc_now() -> str:
    """Recording time, UTC, microseconds: diagnostic only, never part of a decision or its budget_id."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


__all__ = [
    "BatchResult",
    "BudgetStore",
    "GateResult",
    "RecordResult",
    "RowCheck",
    "SkippedConflict",
    "StoredDecision",
]
