"""`BudgetStore`: the append-only, hash-chained table of decisions, on SQLite (default) or PostgreSQL.

The facade opens, closes and delegates, one line per method, to role objects it composes: `writing.Writing`
(recording, signing, witnesses; the write transaction is `append`'s), `reads.Reads` (rows, filters, checkpoints),
`scans.Scans` (the auditor's snapshot and scans) and `browse.Browsing` (the workbench's pages); opening and
migrating are `opening`'s and `writing.open_session`'s, importing a copied history `history`'s. Writers take the
append lock for the whole transaction, so concurrent writers queue instead of forking the chain and a batch is
written whole or not at all; readers open the database read-only.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Generator, Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from sqlalchemy import Engine

from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.head import ChainHead
from compute_budget.core.log.note import SignerKey, VerifierKey
from compute_budget.core.policy.rules import V1, BudgetTable
from compute_budget.core.policy.types import ComputeBudgetStatus
from compute_budget.core.row import StoredDecision
from compute_budget.core.verify import Finding
from compute_budget.store import results as outcomes
from compute_budget.store import seal_tables as sealing
from compute_budget.store.browse import Browsing, DecisionFilter, Link, Page
from compute_budget.store.engine import Location
from compute_budget.store.history import import_history
from compute_budget.store.opening import migrate_store, remove_unused_sqlite
from compute_budget.store.reads import Reads
from compute_budget.store.repairs import Repair
from compute_budget.store.results import BatchResult, GateResult, RecordResult, RowCheck, Signed, SkippedConflict
from compute_budget.store.rotation import Rotated
from compute_budget.store.scans import Scans
from compute_budget.store.session import StoreSession
from compute_budget.store.snapshot import Snapshot
from compute_budget.store.writing import OpenOptions, Writing, open_session
from compute_budget.submitter import DEFAULT_TIMEOUT_SECONDS, Submitted, WitnessSubmitter, WitnessTarget

__all__ = ["BatchResult", "BudgetStore", "GateResult", "RecordResult", "RowCheck", "SkippedConflict"]


class BudgetStore:
    """The audit store. Open with `BudgetStore.open(path_or_url)`; use as a context manager."""

    def __init__(self, session: StoreSession, *, created: bool, writing: Writing) -> None:
        self.location: Location = session.location
        self.readonly = session.readonly
        self.created = created  # this open created the SQLite file (see `discard_if_unused`)
        self._session = session
        self._writing = writing
        self._reads = Reads(session)
        self._scans = Scans(session)
        self._browsing = Browsing(session)

    @classmethod
    def open(
        cls, target: str | os.PathLike[str] | None = None, *, readonly: bool = False, origin: str | None = None,
        signing_key: SignerKey | str | os.PathLike[str] | None = None,
        writer_state: str | os.PathLike[str] | None = None, init_writer_state: bool = False,
        peer_keys: Iterable[VerifierKey | str] = (), allow_unsigned: bool = False,
        witnesses: Iterable[WitnessTarget | str] = (), witness_timeout: float = DEFAULT_TIMEOUT_SECONDS,
        policy: BudgetTable = V1, submitter: WitnessSubmitter | None = None, checkpoint_interval: float = 0,
        witness_interval: float | None = None,
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
        `witnesses` (``URL=KEY`` or `WitnessTarget`s, spec 9.5): after each signed append, its checkpoint goes to
        each witness, waiting at most `witness_timeout` seconds; results carry a warning per witness that did not
        cosign and `witnessed` (cosigned, asked), and the rows stay recorded. `submitter` sends them (default: the
        installed one, `witness.client`'s over HTTP). `policy` decides each gate recorded.
        `checkpoint_interval=S` > 0 (spec 12.1, not with `peer_keys`): a signer thread signs instead, at most once per
        S s; witnesses get its checkpoints in the background, at most once per `witness_interval` (default 10 s).
        """
        options = OpenOptions(readonly, origin, signing_key, writer_state, init_writer_state, tuple(peer_keys),
                              allow_unsigned, tuple(witnesses), witness_timeout, policy, submitter,
                              checkpoint_interval, witness_interval)
        session, created, appender, cadence = open_session(target, options)
        return cls(session, created=created, writing=Writing(session, appender, cadence))

    @staticmethod
    def migrate(
        target: str | os.PathLike[str] | None = None, *, origin: str | None = None,
        on_restore: Callable[[list[str]], None] | None = None, on_repair: Callable[[Repair], None] | None = None,
    ) -> tuple[str | None, str]:
        """Bring the schema at `target` to head (creating it if empty); returns (old, new) revision. A guard found
        missing, disabled, altered or joined by hand-made triggers is put back (`on_restore` told what was wrong);
        the seal is completed (the Merkle tree built when missing, the origin set: `origin`, else a random one). A
        repair is recorded (spec 9.9.10; `on_repair` told once committed)."""
        if origin is not None:
            sealing.check_origin_name(origin)
        return migrate_store(target, origin=origin, on_restore=on_restore, on_repair=on_repair)

    @property
    def writer_state(self) -> Path | None:
        """The writer state file this store's signing key keeps (spec 9.1), or None without a key."""
        return self._writing.writer_state

    @property
    def signing_key(self) -> VerifierKey | None:
        """The verifier key of the key this store signs its appends with, if any."""
        return self._writing.signing_key

    def close(self) -> None:
        """Sign the tail an interval left (witnesses: at most `witness_timeout`); later calls raise `StoreClosed`."""
        try:
            self._writing.close()
        finally:
            self._session.close()

    def flush(self) -> str:
        """Sign the committed head now (spec 12.1); the signed checkpoint note."""
        return self._writing.flush()

    def witness_status(self) -> list[outcomes.WitnessStatus]:
        """Per witness (an interval above 0): the largest size it cosigned for this process, and its last error."""
        return self._writing.witness_status()

    @property
    def closed(self) -> bool:
        """True once `close()` was called."""
        return self._session.closed

    def discard_if_unused(self) -> bool:
        """Close the store and delete its SQLite file if this open created it and it still holds no row (what a
        failed command leaves); True when deleted. Only with the store to itself: the file is switched out of WAL
        mode (possible only when no other connection has it open) and held under an exclusive lock while it is
        found empty and deleted, so a store another writer started to use is never removed. PostgreSQL: never."""
        self.close()
        path = self.location.sqlite_path
        if not self.created or path is None:
            return False
        try:
            return remove_unused_sqlite(path)
        except (sqlite3.Error, OSError):
            return False

    def __enter__(self) -> Self:
        self._session.require_open()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    # -- writing -------------------------------------------------------------------------------------------

    def record(self, gate: object, wait: Literal["checkpoint", "witnessed"] | None = None) -> RecordResult:
        """Decide and append one gate; re-recording the same gate is a no-op returning the stored decision. `wait`
        (spec 12.4): return once a signed (``"witnessed"``: and cosigned, else `WitnessTimeout` after
        `witness_timeout`) checkpoint covers the row, with its C2SP tlog-proof as `receipt`."""
        return self._writing.record(gate, wait)

    def record_many(
        self, gates: Iterable[object], *, on_progress: Callable[[int], None] | None = None, results: bool = False,
        on_conflict: Literal["raise", "skip"] = "raise", adopt_unsigned_through: int | None = None,
        after_repair: int | None = None, wait: Literal["checkpoint", "witnessed"] | None = None,
    ) -> BatchResult:
        """Decide and append every gate atomically (all or none), streaming any iterable of any length.

        `results=True`: the `BatchResult` also lists every gate's `GateResult`, in input order (it then holds
        one small object per gate). `on_conflict="skip"`: a gate whose budget_id is recorded with a different
        gate is left out and listed in `BatchResult.conflicts`, and every other gate is recorded; the default,
        ``"raise"``, raises `GateConflict` and writes nothing.

        `adopt_unsigned_through=SEQ` (a signing writer only, spec 9.1): sign over the rows after the newest trusted
        checkpoint through SEQ, which must be the head when the transaction starts; each is re-derived as the
        audit does first, and a signed checkpoint of the head is stored even when no gate is new.
        `after_repair=REPAIR_ID` (spec 9.9.10): after a repair every append raises `RepairNotAcknowledged` until one
        names the newest repair; it re-derives every row first, and a signing writer then signs the head.
        `wait` as `record`'s: each `GateResult` (`results=True`) then carries its row's `receipt`.
        """
        return self._writing.record_many(
            gates, on_progress=on_progress, results=results, on_conflict=on_conflict,
            adopt_unsigned_through=adopt_unsigned_through, after_repair=after_repair, wait=wait,
        )

    def import_history(
        self, rows: Iterable[tuple[Any, ...]], *, origin: str | None = None,
        checkpoints: Iterable[tuple[int, str, str, str, str]] = (), provenance: sealing.Provenance | None = None,
        provenance_from: str | None = None, on_progress: Callable[[int], None] | None = None,
        witness_rows: Iterable[tuple[Any, ...]] = (), cosignature_rows: Iterable[tuple[Any, ...]] = (),
        repair_rows: Iterable[Repair] = (),
    ) -> ChainHead:
        """Append another store's rows exactly as stored (every column, the chain kept), into this empty store,
        with its origin (when it has one) and its signed checkpoints ((tree_size, key_name, key_hash, note,
        recorded_at), oldest first, read after the rows); the tree is rebuilt from the rows.

        All or nothing: an error from `rows` or `checkpoints` (a row failing verification, say) leaves this store
        empty. `provenance` is the source's provenance row, copied as it is; `provenance_from` (salvage, spec 9.8)
        writes a new one naming that origin and the copied head's size, root and chain hash; witness rows and
        cosignature rows (`iter_witness_rows`, `iter_cosignature_rows`) and repairs are copied as stored."""
        return import_history(
            self._session, rows, origin=origin, checkpoints=checkpoints, provenance=provenance,
            provenance_from=provenance_from, on_progress=on_progress, witness_rows=witness_rows,
            cosignature_rows=cosignature_rows, repair_rows=repair_rows)

    def sign(self) -> Signed:
        """Sign and store the head's checkpoint with this store's key (`compute-budget sign`: a tail a writer left),
        under spec 9.1 and 12.3 (the head: the newest trusted checkpoint, or this writer state's committed head; else
        `StoreDamaged`); nothing is stored when the newest stored checkpoint already is this key's note of it."""
        return self._writing.sign()

    def signed_checkpoint(
        self, signers: Iterable[SignerKey | str | os.PathLike[str]], *,
        writer_state: str | os.PathLike[str] | None = None, peer_keys: Iterable[VerifierKey | str] = (),
        init_writer_state: bool = False,
    ) -> str:
        """The checkpoint note of the current head signed by every key of `signers` (key files, or `SignerKey`s with
        `writer_state=`), not stored; under spec 9.1 for each key (else `StoreDamaged` or `WriterStateError`)."""
        return self._writing.signed_checkpoint(
            signers, writer_state=writer_state, peer_keys=peer_keys, init_writer_state=init_writer_state
        )

    def rotate(
        self, new_key: SignerKey | str | os.PathLike[str], *, new_writer_state: str | None = None
    ) -> Rotated:
        """Hand the log over from this store's `signing_key` to `new_key` (spec 11; `compute-budget rotate`): the head's
        checkpoint signed by both keys is stored and both writer states (`new_writer_state`, else the new key file
        plus ``.state``) hold it. Spec 9.1 applies to the old key; `KeyRetired` when a handover already retired it."""
        return self._writing.rotate(new_key, new_writer_state=new_writer_state)

    def submit_to_witnesses(
        self, witnesses: Iterable[WitnessTarget | str], *, timeout: float = DEFAULT_TIMEOUT_SECONDS,
        trusted_keys: Iterable[VerifierKey | str] = (), submitter: WitnessSubmitter | None = None,
    ) -> list[Submitted]:
        """Send the newest stored signed checkpoint (with `trusted_keys`: the newest verifying under one) to each
        witness (spec 9.5, `witness submit`) and store what they cosign; one `Submitted` per witness, in order."""
        return self._writing.submit_to_witnesses(witnesses, timeout=timeout, trusted_keys=trusted_keys,
                                                 submitter=submitter)

    # -- reading -------------------------------------------------------------------------------------------

    def get(self, budget_id: str) -> StoredDecision | None:
        """The stored row with this `budget_id`, or None."""
        return self._reads.get(budget_id)

    def find(self, prefix: str, *, limit: int = 2) -> list[StoredDecision]:
        """Stored rows whose budget_id starts with `prefix` (lowercase hex), at most `limit` of them."""
        return self._reads.find(prefix, limit=limit)

    def find_ids(self, prefix: str, *, limit: int = 2) -> list[str]:
        """The stored budget_ids that start with `prefix` (lowercase hex), at most `limit`; reads no row, so a
        row that cannot be read is still found (to be checked, say)."""
        return self._reads.find_ids(prefix, limit=limit)

    def find_by_gate(self, decision_id: str) -> list[StoredDecision]:
        """The stored decisions of the gate with this `decision_id`, in `seq` order (several when different
        gates shared the id; none when it was never recorded)."""
        return self._reads.find_by_gate(decision_id)

    def check(self, budget_id: str) -> RowCheck | None:
        """Check the stored row `budget_id` as the audit does (re-derive it from its gate input, recompute its
        budget_id, link it to the row stored before it); None when no such row is stored."""
        return self._reads.check(budget_id)

    def __iter__(self) -> Iterator[StoredDecision]:
        """Every stored row, in `seq` order, streamed."""
        return self.iter_decisions()

    def iter_decisions(
        self, *, status: ComputeBudgetStatus | str | None = None, limit: int | None = None,
        reason_code: str | None = None, policy_version: str | None = None, gate_decision_id: str | None = None,
        after_seq: int | None = None, before_seq: int | None = None,
    ) -> Iterator[StoredDecision]:
        """Stored rows in `seq` order (newest last), streamed: only those matching every filter given (a
        status, reason code, policy version, gate decision_id, seq after / before a bound), and of those only
        `limit`. With `after_seq`, the first `limit` after it (page forward with the last seq seen, and no row is
        skipped); without it, the **newest** `limit` (`iter_decisions(limit=10)` is the last ten rows, still
        yielded oldest first), as `compute-budget list --limit N` shows them."""
        return self._reads.iter_decisions(
            status=status, limit=limit, reason_code=reason_code, policy_version=policy_version,
            gate_decision_id=gate_decision_id, after_seq=after_seq, before_seq=before_seq,
        )

    def iter_raw_rows(self) -> Generator[tuple[Any, ...], None, None]:
        """Every stored row as raw column values (`row.ROW_COLUMNS` order), in `seq` order, streamed."""
        return self._reads.iter_raw_rows()

    def count(self) -> int:
        """How many rows are stored."""
        return self._reads.count()

    def head(self) -> ChainHead:
        """The last link of the chain (seq 0 and the genesis hash for an empty store)."""
        return self._reads.head()

    def checkpoint(self) -> Checkpoint:
        """A checkpoint of the current head, to keep outside the database for a later audit: the chain head, the
        store's origin and the root of its Merkle tree (origin and root are None while the store has no origin)."""
        return self._reads.checkpoint()

    def origin(self) -> str | None:
        """The store's origin (its log name), or None while none is set."""
        return self._reads.origin()

    def iter_checkpoint_rows(self) -> Iterator[tuple[int, str, str, str, str]]:
        """Every stored signed checkpoint as (tree_size, key_name, key_hash, note, recorded_at), oldest first."""
        return self._reads.iter_checkpoint_rows()

    def iter_witness_rows(self) -> Iterator[tuple[Any, ...]]:
        """Every stored witness size (spec 9.5) as (witness_name, witness_key_id, tree_size, recorded_at)."""
        return self._reads.iter_witness_rows()

    def iter_cosignature_rows(self) -> Iterator[tuple[Any, ...]]:
        """Every stored cosignature (spec 9.5), oldest first, as `import_history` takes them."""
        return self._reads.iter_cosignature_rows()

    # -- reading for the auditor ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[Snapshot]:
        """One read transaction whose queries all see the same rows (an audit plans its ranges on one)."""
        with self._scans.snapshot() as snapshot:
            yield snapshot

    def scan(self, low: int, high: int, *, batch_rows: int = 2000) -> Iterator[list[tuple[Any, ...]]]:
        """Raw rows with low < seq <= high in seq order, as batches of plain tuples, streamed: SQLite's own
        cursor (the fastest way through the rows), a server-side cursor elsewhere."""
        return self._scans.scan(low, high, batch_rows=batch_rows)

    def published(self) -> None:
        """None: a database serves no checkpoint to read first; its signed checkpoints are stored with its rows."""
        return

    def linked_from(self, since: Checkpoint | None) -> Self:
        """This store: each row stores its own chain hash, so none is taken from a checkpoint."""
        return self

    def take_findings(self) -> list[Finding]:
        """Nothing: a database's rows are read as stored, and the audit checks them."""
        return []

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for the auditor and tests)."""
        return self._session.engine

    # -- browsing, for the workbench ------------------------------------------------------------------------

    def page(self, where: DecisionFilter, *, limit: int = 50) -> Page:
        """One keyset page of raw rows matching `where`, newest first, at most `limit` (1..500) rows."""
        return self._browsing.page(where, limit=limit)

    def filtered_counts(self, where: DecisionFilter) -> dict[tuple[str, str], int]:
        """How many rows matching `where` have each (status, reason_code): a charts' counts under filters."""
        return self._browsing.filtered_counts(where)

    def forward_page(self, where: DecisionFilter, *, limit: int = 50) -> tuple[list[tuple[Any, ...]], int | None]:
        """The first `limit` (1..500) matching rows after `where.after_seq`, oldest first, and the `after_seq` of
        the next page (None when these are the last): a loop tailing new rows reads each exactly once."""
        return self._browsing.forward_page(where, limit=limit)

    def raw_row(self, budget_id: str) -> tuple[Any, ...] | None:
        """The stored row with this `budget_id` as raw column values (`ROW_COLUMNS` order), or None."""
        return self._browsing.raw_row(budget_id)

    def neighbours(self, seq: int) -> tuple[Link | None, Link | None]:
        """The stored rows just before and just after `seq` (their links, as stored), each or None."""
        return self._browsing.neighbours(seq)

    def link_at_seq(self, seq: int) -> Link | None:
        """The stored row at exactly `seq` (its link, as stored), or None."""
        return self._browsing.link_at_seq(seq)

    def head_seq(self) -> int:
        """The highest stored integer seq (0 for an empty store); cheaper than `head()`, never refuses."""
        return self._browsing.head_seq()

    def counts(self, low: int, high: int) -> dict[tuple[str, str], int]:
        """How many rows of each (status, reason_code) lie at low < seq <= high."""
        return self._browsing.counts(low, high)

    def newest_signed_checkpoints(self, limit: int = 50) -> list[tuple[Any, int | None, str | None]]:
        """(id, tree_size, note) of the newest stored signed checkpoints, newest first, at most `limit`; a value not
        of its column's type (set by hand) comes back as None, for the page to show the entry as unreadable."""
        return self._browsing.newest_signed_checkpoints(limit)

    def signed_checkpoint_table(self) -> str | None:
        """The name of the store's table of signed checkpoints, when it has one (None before the seal)."""
        return self._browsing.signed_checkpoint_table()
