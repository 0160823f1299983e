"""The writing role of an opened store: checking `BudgetStore.open`'s writing options, recording gates, signing
the head and submitting to witnesses. The write transaction itself is `append`'s; importing a copied history,
`history`'s."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from compute_budget.core.log.note import SignerKey, VerifierKey
from compute_budget.core.policy.rules import V1, BudgetTable, registered_policy
from compute_budget.errors import InputError
from compute_budget.store import seal_tables as sealing
from compute_budget.store.append import Appended, Appender
from compute_budget.store.authorship import signing_writers, writer_keys
from compute_budget.store.cadence import DEFAULT_WITNESS_INTERVAL, Cadence, Wait, raise_timeout
from compute_budget.store.group_commit import Call, GroupCommit, joins_group
from compute_budget.store.opening import open_engine
from compute_budget.store.plan import CHUNK_SIZE, collector_paused, decided
from compute_budget.store.results import (
    BatchResult,
    GateResult,
    RecordOptions,
    RecordResult,
    Signed,
    SkippedConflict,
    WitnessStatus,
)
from compute_budget.store.rotation import Rotated, rotate
from compute_budget.store.session import StoreSession
from compute_budget.submitter import Submitted, WitnessSubmitter, WitnessTarget, witness_targets


@dataclass(frozen=True, slots=True)
class OpenOptions:
    """`BudgetStore.open`'s arguments past the target (see its docstring)."""

    readonly: bool
    origin: str | None
    signing_key: SignerKey | str | os.PathLike[str] | None
    writer_state: str | os.PathLike[str] | None
    init_writer_state: bool
    peer_keys: tuple[VerifierKey | str, ...]
    allow_unsigned: bool
    witnesses: tuple[WitnessTarget | str, ...]
    witness_timeout: float
    policy: BudgetTable = V1
    submitter: WitnessSubmitter | None = None
    checkpoint_interval: float = 0.0
    witness_interval: float | None = None


def _intervals(options: OpenOptions) -> tuple[float, float]:
    """The checkpoint interval and witness interval (spec 12.1), checked: `InputError` names the rule broken."""
    interval, witness_interval = options.checkpoint_interval, options.witness_interval
    for name, value in (("checkpoint_interval", interval), ("witness_interval", witness_interval)):
        if value is not None and (type(value) not in (int, float) or not 0 <= value < float("inf")):
            raise InputError(f"{name} must be a number of seconds, 0 or more, not {value!r}")
    if interval > 0 and options.readonly:
        raise InputError("checkpoint_interval is for a store opened for writing, not readonly=True")
    if interval > 0 and options.peer_keys:
        raise InputError(
            "checkpoint_interval above 0 signs from one host's writer state: writers on several hosts sharing a key "
            "(peer_keys) must use 0, signing in every append (spec 12.1)"
        )
    if witness_interval is None:
        return float(interval), max(DEFAULT_WITNESS_INTERVAL, float(interval))
    if witness_interval < interval:
        raise InputError(f"witness_interval ({witness_interval} s) must be at least checkpoint_interval ({interval} s)")
    return float(interval), float(witness_interval)


def open_session(
    target: str | os.PathLike[str] | None, options: OpenOptions
) -> tuple[StoreSession, bool, Appender, Cadence]:
    """Check the options, then open the database: its session, whether this open created it, its appender and its
    signing cadence."""
    interval, witness_interval = _intervals(options)
    targets = witness_targets(options.witnesses)
    if targets and (options.readonly or not options.witness_timeout > 0):
        raise InputError("witnesses need a store opened for writing and a witness_timeout above 0 seconds")
    writing_options = (
        (options.signing_key, options.writer_state) != (None, None) or options.init_writer_state
        or options.allow_unsigned
    )
    if options.readonly and (options.origin is not None or writing_options or options.peer_keys):
        raise InputError(
            "origin, signing_key, writer_state, init_writer_state, peer_keys and allow_unsigned are for a store "
            "opened for writing, not readonly=True"
        )
    if options.origin is not None:
        sealing.check_origin_name(options.origin)
    writer = None
    if not options.readonly:
        writer = writer_keys(
            options.signing_key, writer_state=options.writer_state, init_writer_state=options.init_writer_state,
            peer_keys=options.peer_keys, allow_unsigned=options.allow_unsigned,
        )
    location, engine, created = open_engine(target, readonly=options.readonly, origin=options.origin)
    if targets and writer is None:
        engine.dispose()
        raise InputError("witnesses cosign what this writer signs: give a signing key (--signing-key)")
    session = StoreSession(location, engine, readonly=options.readonly)
    appender = Appender(session, writer, origin=options.origin, allow_unsigned=options.allow_unsigned,
                        witnesses=targets, witness_timeout=options.witness_timeout, policy=options.policy,
                        submitter=options.submitter, interval=interval)
    cadence = Cadence(session, appender, interval=interval, witnesses=targets, witness_interval=witness_interval)
    return session, created, appender, cadence


class Writing:
    """The write side of an opened store (`BudgetStore` delegates to it; the docstrings are there)."""

    def __init__(self, session: StoreSession, appender: Appender, cadence: Cadence) -> None:
        self._session = session
        self._appender = appender
        self._cadence = cadence
        self._group = GroupCommit(appender.append)

    @property
    def writer_state(self) -> Path | None:
        """The writer state file of this store's signing key, or None without a key."""
        writer = self._appender.writer
        return writer.state.path if writer is not None else None

    @property
    def signing_key(self) -> VerifierKey | None:
        """The verifier key of this store's signing key, if any."""
        writer = self._appender.writer
        return writer.verifier if writer is not None else None

    def record(self, gate: object, wait: Wait = None) -> RecordResult:
        """Decide and append one gate (a no-op returning the stored decision when it is recorded); with `wait`,
        return once a signed (or witnessed) checkpoint covers its row, with the row's receipt (spec 12.4)."""
        self._cadence.require_usable(wait)
        began = time.monotonic()
        appended = self._grouped([gate], results=True, skip_conflicts=False)
        assert appended.results is not None
        _, item, new, seq = appended.results[0]
        result = RecordResult(item.decision, new, seq, appended.witness_warnings, appended.witnessed,
                              appended.cosigned_by)
        if wait is None:
            return result
        note = self._covering(appended, seq, wait, began, result)
        return replace(result, receipt=self._cadence.receipt(item.decision.budget_id, note,
                                                             cosigned=wait == "witnessed"))

    def _covering(self, appended: Appended, seq: int, wait: Wait, began: float, result: object) -> str:
        """The note of a checkpoint covering row `seq`, witnessed when `wait` asks (else `WitnessTimeout`)."""
        note = self._cadence.covering_note(seq, appended.note)
        if wait != "witnessed":
            return note
        fresh = appended.note is not None and appended.witnessed is not None
        witnessed, cosigned = self._cadence.witnessed_note(seq, began, note, fresh)
        if fresh:
            assert appended.witnessed is not None
            done, asked = appended.witnessed
            witnessed, cosigned = (note if done == asked else None), f"{done} of {asked}"
        if witnessed is None:
            raise_timeout(result, cosigned)
        assert witnessed is not None
        return witnessed

    def flush(self) -> str:
        """Sign the committed head now; the signed note (spec 12.1)."""
        self._session.require_open()
        return self._cadence.flush()

    def witness_status(self) -> list[WitnessStatus]:
        """Per witness: the largest size it cosigned for this process and its last error."""
        return self._cadence.witness_status()

    def close(self) -> None:
        """Sign the tail a checkpoint interval left, and wait for the witnesses (at most `witness_timeout`)."""
        if not self._session.closed:
            self._cadence.close()

    def record_many(
        self,
        gates: Iterable[object],
        *,
        on_progress: Callable[[int], None] | None,
        results: bool,
        on_conflict: Literal["raise", "skip"],
        adopt_unsigned_through: int | None,
        after_repair: int | None,
        wait: Wait = None,
    ) -> BatchResult:
        """Decide and append every gate atomically (all or none), streaming any iterable; `wait` as `record`."""
        self._cadence.require_usable(wait)
        began = time.monotonic()
        options = RecordOptions(on_progress, results, on_conflict, adopt_unsigned_through, after_repair)
        if adopt_unsigned_through is not None:
            if self._appender.writer is None:
                raise InputError("adopting unsigned rows signs them: it needs a signing key (--signing-key)")
            if type(adopt_unsigned_through) is not int or adopt_unsigned_through < 0:
                raise InputError(f"adopt_unsigned_through must be a row number, not {adopt_unsigned_through!r}")
        if adopt_unsigned_through is None and after_repair is None and joins_group(gates):
            assert isinstance(gates, Sequence)
            appended = self._grouped(gates, results=results, skip_conflicts=options.skip_conflicts)
            if on_progress is not None:  # in the caller's thread, a chunk at a time as alone
                for start in range(0, len(gates), CHUNK_SIZE):
                    on_progress(min(CHUNK_SIZE, len(gates) - start))
        else:
            with collector_paused():
                appended = self._appender.append(gates, options)
        per_gate = tuple(
            GateResult(index, item.decision.budget_id, seq, new, item.line)
            for index, item, new, seq in appended.results or ()
        )
        skipped = tuple(
            SkippedConflict(index, conflict.budget_id, conflict.line, conflict.differing, conflict.new_gate)
            for index, conflict in appended.conflicts or ()
        )
        batch = BatchResult(
            appended.new, appended.present, appended.head, per_gate, skipped, appended.adopted, appended.adopted_after,
            appended.state_created, appended.witness_warnings, appended.witnessed,
            appended.acknowledging.id if appended.acknowledging is not None else None, appended.cosigned_by,
        )
        if wait is None or appended.head.seq == 0:
            return batch
        note = self._covering(appended, appended.head.seq, wait, began, batch)
        receipts = tuple(replace(gate, receipt=self._cadence.receipt(gate.budget_id, note,
                                                                      cosigned=wait == "witnessed"))
                         for gate in per_gate)
        return replace(batch, results=receipts)

    def _grouped(self, gates: Iterable[object], *, results: bool, skip_conflicts: bool) -> Appended:
        """Decide `gates` here, in the caller's thread, then record them in a transaction shared with the calls
        queued meanwhile (spec 12.2, `group_commit`)."""
        self._session.require_open()
        call = Call.of(decided(gates, registered_policy(self._appender.policy)), results=results,
                       skip_conflicts=skip_conflicts)
        return self._group.run(call)

    def sign(self) -> Signed:
        """Sign and store the head's checkpoint with this store's key (`Appender.sign_tail`)."""
        self._session.require_open()
        self._cadence.require_usable(None)
        signed = self._appender.sign_tail()
        assert isinstance(signed, Signed)
        return signed

    def signed_checkpoint(
        self,
        signers: Iterable[SignerKey | str | os.PathLike[str]],
        *,
        writer_state: str | os.PathLike[str] | None,
        peer_keys: Iterable[VerifierKey | str],
        init_writer_state: bool,
    ) -> str:
        """The checkpoint note of the current head signed by every key of `signers`; not stored."""
        self._session.require_open()
        writers = signing_writers(
            signers, writer_state=writer_state, init_writer_state=init_writer_state, peer_keys=peer_keys
        )
        return self._appender.sign_head(writers)

    def rotate(self, new_key: SignerKey | str | os.PathLike[str], *, new_writer_state: str | None) -> Rotated:
        """Hand the log over from this store's signing key to `new_key` (`rotation.rotate`)."""
        self._session.require_open()
        old = self._appender.writer
        if old is None:
            raise InputError("rotating a key needs the old key: open the store with signing_key=OLD")
        new = writer_keys(new_key, writer_state=new_writer_state)
        assert new is not None
        return rotate(self._session, old, new)

    def submit_to_witnesses(
        self, witnesses: Iterable[WitnessTarget | str], *, timeout: float, trusted_keys: Iterable[VerifierKey | str],
        submitter: WitnessSubmitter | None,
    ) -> list[Submitted]:
        """Send the newest stored signed checkpoint to each witness and store what they cosign."""
        return self._appender.submit_newest(witness_targets(witnesses), timeout=timeout, trusted=trusted_keys,
                                            submitter=submitter)


__all__ = ["OpenOptions", "Writing", "open_session"]
