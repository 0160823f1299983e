"""The write transaction: lock, head, plan, insert, verify, seal, state.

One append is one transaction under the append lock (SQLite ``BEGIN IMMEDIATE``, a PostgreSQL table lock), so
concurrent writers queue instead of forking the chain and a batch is written whole or not at all. Inside it the
writer checks the guard, reads the head, checks its authority to sign (spec 9.1), inserts each planned chunk
and proves the table kept it, extends the Merkle tree, and signs the new head; the writer state is replaced
after the commit. What the writer remembers between appends (the frontier, the notes it verified, the note it
signed last) lives on the `Appender`.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from compute_budget.core.log.cosignature import WitnessKey
from compute_budget.core.log.head import EMPTY_HEAD, GENESIS_CHAIN_HASH, ChainHead
from compute_budget.core.log.merkle import CompactRange
from compute_budget.core.log.note import VerifierKey
from compute_budget.core.log.tree import TILE_LEVEL
from compute_budget.core.policy.prepare import PreparedGate
from compute_budget.core.policy.rules import V1, BudgetTable, registered_policy
from compute_budget.errors import (
    GateConflict,
    InputError,
    ReadOnlyStore,
    StoreDamaged,
    StoreUnavailable,
    UnsignedAppendRefused,
)
from compute_budget.keys.key_files import verifier_key
from compute_budget.keys.writer_state import StateHead
from compute_budget.store import repairs
from compute_budget.store import seal_tables as sealing
from compute_budget.store.authorship import (
    WriterKeys,
    check_signed_head,
    check_state,
    holds_checkpoints,
    newest_stored_note,
    newest_trusted,
    own_committed,
    require_rows_hold,
    signature_verifies,
)
from compute_budget.store.engine import begin_write, translate
from compute_budget.store.inserting import (
    insert_exactly,
    require_guard_once,
    require_nothing_kept,
    require_planned_head,
    stored_gates,
)
from compute_budget.store.plan import ChunkPlan, plan_chunk, prepared_chunks
from compute_budget.store.reads import stored_root
from compute_budget.store.repairs import Repair
from compute_budget.store.results import Deferred, RecordOptions, Signed
from compute_budget.store.session import StoreSession, read_head, utc_now
from compute_budget.store.witness_submit import submit
from compute_budget.submitter import (
    DEFAULT_TIMEOUT_SECONDS,
    Submitted,
    WitnessSubmitter,
    WitnessTarget,
    default_submitter,
)


@dataclass(slots=True)
class Appended:
    """What one append transaction did: the new head, counts, per-gate outcomes and conflicts when asked for."""

    head: ChainHead
    new: int = 0
    present: int = 0
    results: list[tuple[int, PreparedGate, bool, int]] | None = None
    conflicts: list[tuple[int, GateConflict]] | None = None
    adopted: int = 0
    adopted_after: int = 0
    state_created: bool = False
    witness_warnings: tuple[str, ...] = ()
    witnessed: tuple[int, int] | None = None  # (cosigned, asked) when the new checkpoint went to witnesses
    cosigned_by: tuple[WitnessKey, ...] = ()  # the witnesses that cosigned it, for a C2SP tlog-policy's verdict
    acknowledging: Repair | None = None  # the repair `after_repair` acknowledges in this transaction (spec 9.9.10)
    start_root: bytes = b""  # the tree's root at the head the transaction found
    note: str | None = None  # the checkpoint this transaction signed, if it signed one


class _StoredAlready(Exception):
    """The optimistic insert of a chunk met a stored budget_id (rolls its savepoint back)."""


class Appender:
    """The write path of one opened store, and what its writer remembers between appends."""

    def __init__(
        self,
        session: StoreSession,
        writer: WriterKeys | None,
        *,
        origin: str | None,
        allow_unsigned: bool,
        witnesses: tuple[WitnessTarget, ...] = (),
        witness_timeout: float = DEFAULT_TIMEOUT_SECONDS,
        policy: BudgetTable = V1,
        submitter: WitnessSubmitter | None = None,
        interval: float = 0.0,
    ) -> None:
        self._session = session
        # Spec 12.1: with an interval above 0 appends do not sign; a signer loop signs the committed head
        # (`sign_tail`), told of each commit through `after_commit`.
        self.interval = interval
        self.after_commit: Callable[[ChainHead, str | None], None] | None = None
        self.policy = policy  # every gate this store records is decided under it
        self.witnesses = witnesses
        self.witness_timeout = witness_timeout
        self.submitter = submitter  # None: `default_submitter()`, asked when a checkpoint is first submitted
        self._sql = session.statements
        self._seal = session.seal
        self.writer = writer
        self._wanted_origin = origin
        self._allow_unsigned = allow_unsigned
        # The tree's frontier after this process's last append, keyed by the head it belongs to: a process that
        # appends one gate at a time then never rereads its tile of rows.
        self._frontier_cache: tuple[ChainHead, CompactRange] | None = None
        # (note, key) pairs whose signature this process already verified
        self.verified_notes: set[tuple[str, VerifierKey]] = set()
        self._last_signed: tuple[str, ChainHead] | None = None  # the note this process signed last, and its head
        self._authorised_at: str | None = None  # the newest stored note when rule 1 last passed here in full

    def append(self, gates: Iterable[object], options: RecordOptions) -> Appended:
        """Append in one write transaction, a chunk of gates at a time (all or nothing)."""
        self._session.require_open()
        location = self._session.location
        if self._session.readonly:
            raise ReadOnlyStore(f"{location.display} was opened read-only; open it for writing to record")
        # Decide the first chunk before taking the append lock: a single batch then holds the lock only to
        # chain and insert, and concurrent writers wait less.
        # Checked at each append, not at open: what is recorded must re-derive under the policy registered now.
        chunks = prepared_chunks(gates, ahead=options.ahead, policy=registered_policy(self.policy))
        first = next(chunks, None)
        appended = Appended(
            EMPTY_HEAD, results=[] if options.results else None, conflicts=[] if options.skip_conflicts else None
        )
        writer = self.writer
        note: str | None = None
        # Spec 9.1: the state file's lock is taken before the transaction begins and released after the state was
        # replaced, so writers sharing a key queue here first, then on the append lock, always in that order.
        state_lock = writer.state.locked() if writer is not None else contextlib.nullcontext()
        try:
            with state_lock:
                with begin_write(self._session.engine) as connection:
                    head, origin, frontier, to_keep = self._begin(connection, appended, options)
                    if appended.acknowledging is not None:
                        self._acknowledge(connection, appended.acknowledging, head, frontier)
                    start = StateHead(head.seq, appended.start_root, head.chain_hash)
                    prepared_all = itertools.chain([first] if first is not None else [], chunks)
                    head = self._write_chunks(connection, prepared_all, head, frontier, appended, options.on_progress)
                    if options.check_skipped is not None:
                        options.check_skipped(appended.conflicts or [])
                    if writer is not None:
                        note = self._seal_head(connection, writer, origin, head, frontier, start, options)
                        to_keep = note or to_keep
                ended = StateHead(head.seq, frontier.root(), head.chain_hash) if head.seq != start.size else None
                if writer is not None and (to_keep is not None or ended is not None):
                    # spec 12.3: after the COMMIT, pending is committed
                    writer.state.save(origin, to_keep, committed=ended, discard_unreadable=writer.init_state)
        except SQLAlchemyError as error:
            raise translate(error, location) from None
        except OverflowError:
            raise StoreDamaged(
                f"{location.display}: the chain head's seq is too large to follow (it was set by hand); "
                "run `compute-budget audit` for the details"
            ) from None
        finally:
            chunks.close()  # stops the decide-ahead thread whatever happened
        self._remember(head, frontier, note, writer)
        appended.head, appended.note = head, note
        if self.after_commit is not None:
            self.after_commit(head, note)
        # Spec 9.5: after the commit and the state file, never before; with an interval, in the background (12.1).
        if note is not None and self.witnesses and self.interval <= 0:
            self._submit(note, appended)
        return appended

    def _seal_head(
        self, connection: Connection, writer: WriterKeys, origin: str, head: ChainHead, frontier: CompactRange,
        start: StateHead, options: RecordOptions,
    ) -> str | None:
        """Inside the transaction, before its COMMIT: sign and store the new head's checkpoint (section 8, unless a
        checkpoint interval leaves it to the signer loop, spec 12.1; always when `options` signs anyway), and write
        the new head to the writer state as `pending` (spec 12.3), so that a crash after the COMMIT leaves a state
        that knows the head is this writer's. Returns the note signed, if any."""
        moved = head.seq != start.size
        signs = options.signs_anyway or (moved and self.interval <= 0)
        root = frontier.root()
        note = sealing.signed_note(origin, head, root, [writer.signer]) if signs else None
        if note is not None:
            sealing.insert_checkpoint(connection, self._seal, head.seq, writer.signer, note, utc_now())
        if moved:
            writer.state.prepare(origin, start, StateHead(head.seq, root, head.chain_hash),
                                 discard_unreadable=writer.init_state)
        return note

    def _remember(self, head: ChainHead, frontier: CompactRange, note: str | None, writer: WriterKeys | None) -> None:
        """Keep what the next append of this process may reuse: the tree's frontier at `head`, and the note it
        signed (verified by its own key, naming `head`)."""
        if note is not None and writer is not None:
            self.verified_notes = {(note, writer.verifier)}
            self._last_signed = (note, head)
        self._frontier_cache = (head, frontier)

    def _submit(self, note: str, appended: Appended) -> None:
        """Send the new checkpoint `note` to this writer's witnesses; `appended` gets their warnings and count."""
        submitted = submit(self._session, note, self.witnesses, timeout=self.witness_timeout,
                           submitter=self.witness_submitter())
        appended.witness_warnings = tuple(item.warning for item in submitted if item.warning is not None)
        appended.witnessed = (sum(item.cosigned for item in submitted), len(submitted))
        appended.cosigned_by = tuple(item.witness.key for item in submitted if item.cosigned)

    def _begin(
        self, connection: Connection, appended: Appended, options: RecordOptions
    ) -> tuple[ChainHead, str, CompactRange, str | None]:
        """Lock, check the guard, refuse while a repair waits for its acknowledgement (spec 9.9.10), read the head,
        origin and frontier, and check the writer's authority (spec 9.1). Returns them with the note the writer
        state gets after the commit when nothing is appended."""
        location = self._session.location
        self._session.backend.lock_for_append(connection)
        require_guard_once(connection, location)
        appended.acknowledging = repairs.require_acknowledged(connection, location.display, options.after_repair)
        head = read_head(connection, self._sql)
        origin = sealing.ensure_origin(connection, self._seal, self._wanted_origin, create=True)
        assert origin is not None
        frontier = self._frontier(connection, head)
        appended.start_root = frontier.root()
        writer = self.writer
        if writer is None:
            if not self._allow_unsigned and holds_checkpoints(connection, self._seal):
                raise UnsignedAppendRefused(
                    f"{location.display} holds signed checkpoints: an append without the writer's key "
                    "would leave rows no writer signed; record with --signing-key, or with --unsigned to "
                    "append unsigned rows anyway; nothing was written"
                )
            return head, origin, frontier, None
        # Spec 12.3: before anything is written, the head must be the newest trusted checkpoint (the shortcut: the
        # one this process signed, still the newest stored) or the head this writer state recorded as committed.
        if options.adopt_unsigned_through is not None or not self._still_authorised(connection, head, writer, origin,
                                                                                     appended.start_root):
            authorised = check_signed_head(
                connection, self._sql, self._seal, writer, origin, head, frontier, verified=self.verified_notes,
                adopt_through=options.adopt_unsigned_through, decode=self._session.logical,
                committed=own_committed(writer, origin, head, appended.start_root),
            )
            appended.adopted, appended.adopted_after = authorised.adopted, authorised.signed_size
            self._authorised_at = newest_stored_note(connection, self._seal)
        to_keep = check_state(
            connection, self._sql, self._seal, writer, origin, head, appended.start_root, verified=self.verified_notes
        )
        appended.state_created = to_keep is not None
        return head, origin, frontier, to_keep

    def _acknowledge(self, connection: Connection, repair: Repair, head: ChainHead, frontier: CompactRange) -> None:
        """Re-derive every row and rebuild the tree from them (the store's own rows must all hold before anyone
        appends after a repair), then record the acknowledgement of `repair` and every repair before it."""
        require_rows_hold(
            connection, self._sql, self._seal, 0, head, GENESIS_CHAIN_HASH, None, frontier.root(),
            decode=self._session.logical, refused=f"--after-repair {repair.id} refused",
        )
        writer = self.writer
        who = f"signed by {writer.signer.name}" if writer is not None else "an unsigned writer"
        repairs.acknowledge(connection, repair, head.seq, who, utc_now())

    def _write_chunks(
        self,
        connection: Connection,
        chunks: Iterator[list[PreparedGate]],
        head: ChainHead,
        frontier: CompactRange,
        appended: Appended,
        on_progress: Callable[[int], None] | None,
    ) -> ChainHead:
        """Insert every chunk after `head`, extending the tree; returns the new head.

        Each chunk is first inserted optimistically, as if every gate were new; a gate already stored makes the
        insert fail (SQLite: primary key, or the guard's no-replace trigger) or insert fewer rows than planned
        (PostgreSQL: ``ON CONFLICT DO NOTHING``), nothing of it stays, and from then on chunks look their gates
        up before inserting. Fresh appends, the common case, so cost no lookup at all.
        """
        optimistic = True
        offset = 0
        for prepared in chunks:
            recorded_at = utc_now()
            plan: ChunkPlan | None = None
            want = {"results": appended.results is not None, "skip_conflicts": appended.conflicts is not None}
            if optimistic:
                plan = plan_chunk(prepared, {}, head, recorded_at, offset=offset, **want)
                if not self._inserted_optimistically(connection, plan, head):
                    optimistic, plan = False, None
            if plan is None:
                stored = stored_gates(connection, self._sql, {item.decision.budget_id for item in prepared})
                plan = plan_chunk(prepared, stored, head, recorded_at, offset=offset, **want)
                if plan.rows:
                    insert_exactly(connection, plan.rows, self._session.location)
            if plan.rows:
                require_planned_head(connection, self._sql, plan.head, self._session.location)
            sealing.insert_nodes(connection, self._seal, frontier.extend(plan.leaves, min_level=TILE_LEVEL))
            head = plan.head
            appended.new += len(plan.rows)
            appended.present += len(prepared) - len(plan.rows) - len(plan.conflicts)
            if appended.results is not None:
                appended.results.extend((offset + index, item, new, seq) for index, item, new, seq in plan.results)
            if appended.conflicts is not None:
                appended.conflicts.extend((offset + index, conflict) for index, conflict in plan.conflicts)
            offset += len(prepared)
            if on_progress is not None:
                on_progress(len(prepared))
        return head

    def _inserted_optimistically(self, connection: Connection, plan: ChunkPlan, head: ChainHead) -> bool:
        """Insert a chunk planned as all new; False (and nothing of it kept) when one of its gates is stored."""
        location = self._session.location
        backend = self._session.backend
        if 0 < len(plan.rows) <= backend.atomic_rows:
            # A chunk that is one statement (SQLite): a statement is atomic, so a stored gate (the primary key, or
            # the guard's no-replace trigger) undoes the whole statement and nothing of it stays; no savepoint.
            try:
                insert_exactly(connection, plan.rows, location)
            except IntegrityError:
                require_nothing_kept(connection, self._sql, head, location)
                return False
            return True
        try:
            with connection.begin_nested():
                written = backend.insert_skipping_stored(connection, plan.rows)
                if written is None:  # a stored row raised instead of being skipped
                    insert_exactly(connection, plan.rows, location)
                elif written != len(plan.rows):
                    raise _StoredAlready  # then every row is looked up, inserted exactly
        except (IntegrityError, _StoredAlready):
            return False
        return True

    def _still_authorised(
        self, connection: Connection, head: ChainHead, writer: WriterKeys, origin: str, root: bytes
    ) -> bool:
        """Rule 1 with nothing to reread or re-verify: true when the newest stored checkpoint of any key is the note
        this process signed last and it names the head (it is then the newest trusted one), or is still the one
        stored when rule 1 last passed in full here and the head is the one this writer state recorded as
        committed (spec 12.3: the head is then authorised whatever is trusted, and no handover or longer checkpoint
        was stored since, as one would be the newest). Between the signatures of an interval, every append."""
        signed_here = self._last_signed is not None and self._last_signed[1] == head
        if not signed_here and self._authorised_at is None:
            return False
        newest = newest_stored_note(connection, self._seal)
        if signed_here and self._last_signed is not None and newest == self._last_signed[0]:
            return True
        return newest is not None and newest == self._authorised_at and own_committed(
            writer, origin, head, root) == StateHead(head.seq, root, head.chain_hash)

    def _frontier(self, connection: Connection, head: ChainHead) -> CompactRange:
        """The tree's frontier at `head`: this process's own from its last append when nobody appended since,
        else read from the stored nodes and the last tile of rows (building the tree if it was never built)."""
        if self._frontier_cache is not None and self._frontier_cache[0] == head:
            return self._frontier_cache[1].copy()
        if not sealing.tree_is_built(connection, self._seal, head.seq):
            return sealing.build_tree(connection, self._sql, self._seal, head.seq)
        return sealing.frontier_at(connection, self._seal, head.seq)

    def witness_submitter(self) -> WitnessSubmitter:
        """The submitter this store was handed, else the installed default (kept for the next append)."""
        if self.submitter is None:
            self.submitter = default_submitter()
        return self.submitter

    def submit_newest(
        self, witnesses: tuple[WitnessTarget, ...], *, timeout: float, trusted: Iterable[VerifierKey | str] = (),
        submitter: WitnessSubmitter | None = None,
    ) -> list[Submitted]:
        """Send the newest stored signed checkpoint to `witnesses` (spec 9.5's `witness submit`): with `trusted`
        keys, the newest one that verifies under one of them; else the newest, unverified."""
        keys = tuple(dict.fromkeys(verifier_key(key) for key in trusted))
        location = self._session.location
        if self._session.readonly:
            raise ReadOnlyStore(f"{location.display} was opened read-only: submitting stores what witnesses cosign")
        with self._session.reading() as connection:
            if not keys:
                note = newest_stored_note(connection, self._seal)
            else:
                origin = sealing.read_origin(connection, self._seal)
                found = newest_trusted(connection, self._seal, origin, keys, set()) if origin is not None else None
                note = found[0].note if found is not None else None
                if note is None and holds_checkpoints(connection, self._seal):
                    names = ", ".join(dict.fromkeys(key.name for key in keys))
                    raise StoreUnavailable(
                        f"{location.display} holds no checkpoint that verifies under the trusted keys ({names}): "
                        "give the writer's verifier key, or run `compute-budget audit` to see what is stored"
                    )
        if note is None:
            raise StoreUnavailable(f"{location.display} holds no signed checkpoint to submit: record with a key first")
        return submit(self._session, note, witnesses, timeout=timeout, submitter=submitter or self.witness_submitter())

    def sign_tail(self, *, interval: float = 0.0) -> Signed | Deferred:
        """Sign and store the head's checkpoint with this store's key (`compute-budget sign`), inside the append lock
        under spec 9.1 and 12.3: the head must be the newest trusted checkpoint or the one this writer state
        committed (a pending head the store holds included), else `StoreDamaged` naming the rows; nothing stored
        when the newest stored checkpoint is already this key's note of the head. With an `interval` (the signer
        loop, spec 12.1): `Deferred` when the newest trusted checkpoint is the writer state's note, signed less
        than `interval` seconds ago by the time the state recorded."""
        writer = self.writer
        location = self._session.location
        if writer is None:
            raise InputError("signing the head needs the writer's key (--signing-key)")
        if self._session.readonly:
            raise ReadOnlyStore(f"{location.display} was opened read-only: open it for writing to sign its head")
        appended = Appended(EMPTY_HEAD)
        try:
            with writer.state.locked():
                with begin_write(self._session.engine) as connection:
                    head, origin, frontier, _ = self._begin(connection, appended, RecordOptions(ahead=False))
                    if head.seq == 0:
                        raise StoreUnavailable(f"{location.display} holds no row yet: there is no head to sign")
                    note = self._own_note_of(connection, writer, head, appended.start_root)
                    stored = note is None
                    due = self._due(connection, writer, origin, interval) if stored and interval > 0 else None
                    if due is not None:
                        return Deferred(due)
                    if note is None:
                        note = sealing.signed_note(origin, head, appended.start_root, [writer.signer])
                        sealing.insert_checkpoint(connection, self._seal, head.seq, writer.signer, note, utc_now())
                writer.state.save(origin, note, discard_unreadable=writer.init_state,
                                  signed_at=time.time() if stored else None)
        except SQLAlchemyError as error:
            raise translate(error, location) from None
        self._remember(head, frontier, note, writer)
        return Signed(origin, head.seq, note, stored, appended.state_created)

    def _due(self, connection: Connection, writer: WriterKeys, origin: str, interval: float) -> float | None:
        """When the signer may sign next (spec 12.1), None for now: the writer state's signed-at time of its note
        plus `interval`, while that note is the newest trusted checkpoint (a time no one recorded counts as old)."""
        held = writer.state.origin_state(origin)
        if held.note is None or held.signed_at is None or held.signed_at + interval <= time.time():
            return None
        newest = newest_trusted(connection, self._seal, origin, writer.trusted(), self.verified_notes)
        return held.signed_at + interval if newest is not None and newest[0].note == held.note else None

    def _own_note_of(self, connection: Connection, writer: WriterKeys, head: ChainHead, root: bytes) -> str | None:
        """The newest stored checkpoint when it is this key's note of `head` (then signing again adds nothing)."""
        note = newest_stored_note(connection, self._seal)
        if note is None or StateHead.of_note(note) != StateHead(head.seq, root, head.chain_hash):
            return None
        return note if signature_verifies(note, writer.verifier, self.verified_notes) else None

    def sign_head(self, writers: list[WriterKeys]) -> str:
        """The checkpoint note of the current head signed by every writer, each under spec 9.1's rules inside
        the append lock; each writer state then holds it. The note is not stored."""
        location = self._session.location
        if self._session.readonly:
            raise ReadOnlyStore(
                f"{location.display} was opened read-only: a writer signs inside the append lock, so open the "
                "store for writing to sign a checkpoint"
            )
        with contextlib.ExitStack() as locks:
            # Always in the order of the paths: two processes signing with the same keys never wait on each other.
            for writer in sorted(writers, key=lambda item: str(item.state.path)):
                locks.enter_context(writer.state.locked())
            try:
                with begin_write(self._session.engine) as connection:
                    self._session.backend.lock_for_append(connection)
                    repairs.require_acknowledged(connection, location.display, None)
                    head = read_head(connection, self._sql)
                    origin = sealing.read_origin(connection, self._seal)
                    if origin is None:
                        raise StoreUnavailable(
                            f"{location.display} has no origin yet: record a gate first, or run "
                            "`compute-budget migrate --origin NAME`"
                        )
                    stored_root(connection, self._seal, head, location)  # refuses a store whose tree was never built
                    frontier = sealing.frontier_at(connection, self._seal, head.seq)
                    for writer in writers:
                        check_signed_head(
                            connection, self._sql, self._seal, writer, origin, head, frontier,
                            verified=self.verified_notes, adopt_through=None, decode=self._session.logical,
                        )
                        check_state(
                            connection, self._sql, self._seal, writer, origin, head, frontier.root(),
                            verified=self.verified_notes,
                        )
                    note = sealing.signed_note(origin, head, frontier.root(), [writer.signer for writer in writers])
            except SQLAlchemyError as error:
                raise translate(error, location) from None
            for writer in writers:
                writer.state.save(origin, note, discard_unreadable=writer.init_state)
        return note
