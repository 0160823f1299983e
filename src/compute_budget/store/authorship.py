"""A writer signs only what it wrote (spec 9.1): the two rules every writer signature obeys, and adoption.

Rule 1 reads the store: its head must be exactly the newest stored checkpoint of this origin that verifies under
the writer's own key or a peer writer key (an empty store has nothing to match). Rows after that checkpoint were
appended by no trusted writer: signing over them would launder them, so the writer refuses and names them, unless
it is told to adopt them (`adopt_unsigned_through`), which re-derives them first.

Rule 2 reads what the database cannot reach: the writer state file (`writer_state.WriterState`), the newest
checkpoint this key signed for this origin, kept on the writer's host. The store must extend it, so a store
truncated, rolled back or rewritten under the writer is never signed again under its origin.

Spec 12.3 widens rule 1 by exactly the writer's own rows: the head may also be the one the writer state recorded
as `committed` (its own transactions' head, which no one else could have made: its size, root and chain hash are
kept outside the database). Any other head, a row an insider inserted between two appends included, is refused.

Everything here runs inside the writer's transaction, after the append lock, on a connection the store hands in.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

from compute_budget.core.leaf import unreadable_leaf_hash
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.head import GENESIS_CHAIN_HASH, ChainHead
from compute_budget.core.log.key_states import handover_in, is_key, verified_handover
from compute_budget.core.log.merkle import CompactRange
from compute_budget.core.log.note import SignerKey, VerifierKey, parse_note, verify_note
from compute_budget.core.row import CHAINED_COUNT
from compute_budget.core.seal_checks import StoredCheckpoint, extends
from compute_budget.core.verify import RangeResult, check_row
from compute_budget.errors import CheckpointError, InputError, KeyRetired, NoteError, StoreDamaged, WriterStateError
from compute_budget.keys.key_files import SIGNING_KEY_ENV_VAR, load_signer_key, verifier_key
from compute_budget.keys.writer_state import WRITER_STATE_ENV_VAR, StateHead, WriterState, resolve, state_path_for
from compute_budget.store import seal_tables as sealing
from compute_budget.store.seal_tables import SealStatements
from compute_budget.store.statements import Statements

ADOPT_PAGE_ROWS = 2000


@dataclass(frozen=True, slots=True)
class WriterKeys:
    """What a signing writer holds: its key, its state file, the peer writer keys it trusts, and whether it may
    (re)create a missing state from the store's newest checkpoint of its own."""

    signer: SignerKey
    state: WriterState
    peers: tuple[VerifierKey, ...] = ()
    init_state: bool = False
    verifier: VerifierKey = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "verifier", self.signer.verifier())

    def trusted(self) -> list[VerifierKey]:
        """The writer's own verifier key first, then its peers."""
        return [self.verifier, *(peer for peer in self.peers if peer != self.verifier)]


def signing_writers(
    signers: Iterable[SignerKey | str | os.PathLike[str]],
    *,
    writer_state: str | os.PathLike[str] | None,
    init_writer_state: bool,
    peer_keys: Iterable[VerifierKey | str],
) -> list[WriterKeys]:
    """The writers of `BudgetStore.signed_checkpoint`: one per key, each with a state file of its own."""
    sources = list(signers)
    if not sources:
        raise InputError("signing a checkpoint needs at least one signing key")
    if writer_state is not None and len(sources) > 1:
        raise InputError("writer_state names one key's state file: sign with one key at a time")
    peers = tuple(peer_keys)
    writers = [
        writer_keys(source, writer_state=writer_state, init_writer_state=init_writer_state, peer_keys=peers)
        for source in sources
    ]
    present = [writer for writer in writers if writer is not None]
    require_own_states(present)
    return present


def require_own_states(writers: Sequence[WriterKeys]) -> None:
    """Each key signing at once keeps its own state file: two sharing one (as `$COMPUTE_BUDGET_WRITER_STATE` makes
    them) would each wait for the other's lock for ever. `InputError` names the file."""
    seen: dict[Path, str] = {}
    for writer in writers:
        path = writer.state.path.resolve()
        if path in seen:
            raise InputError(
                f"keys {seen[path]} and {writer.signer.name} would share the writer state file {writer.state.path} "
                f"(${WRITER_STATE_ENV_VAR} names one file for every key): sign with one key at a time, or unset it "
                "so that each key keeps its state beside its key file"
            )
        seen[path] = writer.signer.name


def writer_keys(
    signing_key: SignerKey | str | os.PathLike[str] | None,
    *,
    writer_state: str | os.PathLike[str] | None = None,
    init_writer_state: bool = False,
    peer_keys: Iterable[VerifierKey | str] = (),
    allow_unsigned: bool = False,
) -> WriterKeys | None:
    """A writer's keys from what it was given (the key, else `$COMPUTE_BUDGET_SIGNING_KEY`); None for a writer
    that does not sign. `InputError` for options that contradict each other or need a key it does not have."""
    peers = tuple(verifier_key(key) for key in peer_keys)
    if allow_unsigned:
        if signing_key is not None:
            raise InputError("--unsigned (allow_unsigned=True) and a signing key contradict each other: give one")
        return None  # and $COMPUTE_BUDGET_SIGNING_KEY is ignored
    source: SignerKey | str | os.PathLike[str] | None = signing_key
    from_environment = False
    if source is None and os.environ.get(SIGNING_KEY_ENV_VAR):
        source, from_environment = os.environ[SIGNING_KEY_ENV_VAR], True
    if source is None:
        if writer_state is not None or init_writer_state or peers:
            raise InputError("writer state and peer keys are for a writer that signs: give a signing key")
        return None
    if isinstance(source, SignerKey):
        signer = source
    else:
        try:
            signer = load_signer_key(source)
        except InputError as error:
            if from_environment:
                raise InputError(f"${SIGNING_KEY_ENV_VAR}: {error}") from None
            raise
    return WriterKeys(signer, WriterState(state_path_for(source, writer_state)), peers, init_writer_state)


@dataclass(slots=True)
class Authorised:
    """What the checks found: the size of the trusted checkpoint the head matched (`signed_size`), how many rows
    were adopted, and the note to keep as the state (when `--init-writer-state` made it from the store)."""

    signed_size: int
    adopted: int = 0
    init_note: str | None = None


def _b64(root: bytes) -> str:
    return base64.b64encode(root).decode("ascii")


def newest_trusted(
    connection: Connection,
    seal: SealStatements,
    origin: str,
    keys: Sequence[VerifierKey],
    verified: set[tuple[str, VerifierKey]],
) -> tuple[StoredCheckpoint, Checkpoint] | None:
    """The newest stored checkpoint of `origin` (by tree size, then insertion) carrying a valid signature by one of
    `keys`; entries that do not verify, cannot be read or are of another origin are skipped (the audit reports
    them). `verified` caches (note, key) pairs this process already verified."""
    for stored in _newest_first(connection, seal):
        if not any((stored.note, key) in verified for key in keys):
            try:
                outcome = verify_note(stored.note, keys)
            except NoteError:
                continue
            if not outcome.verified:
                continue
            verified.update((stored.note, key) for key in outcome.verified)
        try:
            found = Checkpoint.from_note(stored.note)
        except CheckpointError:
            continue
        if found.origin != origin or found.seq != stored.tree_size:
            continue
        return stored, found
    return None


def _newest_first(connection: Connection, seal: SealStatements) -> Iterator[StoredCheckpoint]:
    size, ident = 2**62 + 1, 0
    while True:
        rows = connection.exec_driver_sql(seal.newest_any, (size, size, ident)).fetchall()
        for row in rows:
            try:
                stored = sealing.stored_checkpoint(tuple(row))
            except StoreDamaged:
                continue
            size, ident = stored.tree_size, stored.id
            yield stored
        if len(rows) < sealing.NEWEST_PAGE_ROWS:
            return


def newest_stored_note(connection: Connection, seal: SealStatements) -> str | None:
    """The note of the newest stored checkpoint of any key (unverified): the writer's shortcut compares it with
    the note it signed last."""
    value = connection.exec_driver_sql(seal.newest_any_note).scalar()
    return value if isinstance(value, str) else None


def _signed_by_others(connection: Connection, seal: SealStatements) -> str:
    """Who signed the newest stored checkpoint, when no trusted writer did: a key that is not this log's writer (an
    auditor's, say) is then told apart from rows nobody signed."""
    note = newest_stored_note(connection, seal)
    if note is None:
        return ""
    try:
        names = sorted({signature.name for signature in parse_note(note)[1]})
    except NoteError:
        return ""
    if not names:
        return ""
    return (f"; the newest stored one is signed by {', '.join(names[:3])}: if that is a writer of this log, trust it "
            "with --peer-key, or sign with its key; a key that only audits is no writer's")


def holds_checkpoints(connection: Connection, seal: SealStatements) -> bool:
    """True when the store holds any checkpoint entry at all (readable or not)."""
    return connection.exec_driver_sql(seal.any_checkpoint).first() is not None


def check_signed_head(
    connection: Connection,
    statements: Statements,
    seal: SealStatements,
    keys: WriterKeys,
    origin: str,
    head: ChainHead,
    frontier: CompactRange,
    *,
    verified: set[tuple[str, VerifierKey]],
    adopt_through: int | None,
    decode: Callable[[Any], tuple[Any, ...]],
    committed: StateHead | None = None,
) -> Authorised:
    """Rule 1 (and adoption) as spec 12.3 words it: raise `StoreDamaged` unless the head is exactly the newest
    trusted checkpoint, or the head this writer state recorded as `committed` (rows this writer appended after a
    trusted checkpoint), or the store is empty, or the rows after it are adopted and hold."""
    _refuse_if_state_handed_over(keys, origin)
    refuse_if_handed_over(connection, seal, keys, origin, verified)
    trusted = newest_trusted(connection, seal, origin, keys.trusted(), verified)
    root = frontier.root()
    size = trusted[1].seq if trusted is not None else 0
    if adopt_through is not None and adopt_through != head.seq:
        raise StoreDamaged(
            f"--adopt-unsigned {adopt_through} refused: the head is seq {head.seq} now; adopt exactly the head, after "
            f"reviewing `compute-budget list --after-seq {size}`"
        )
    if trusted is not None:
        stored, checkpoint = trusted
        label = f"checkpoint #{stored.id} (size {checkpoint.seq}, signed by {stored.key_label()})"
        if checkpoint.seq > head.seq:
            raise StoreDamaged(
                f"refusing to sign: the store holds {head.seq} rows but {label} covers {checkpoint.seq}: history was "
                "truncated; nothing was written (see docs/incident.md: salvage with `copy --through`)"
            )
        if checkpoint.seq == head.seq:
            if checkpoint.chain_hash != head.chain_hash or checkpoint.root != root:
                raise StoreDamaged(
                    f"refusing to sign: the head (seq {head.seq}) is not the one {label} names: history was "
                    "rewritten; nothing was written; run `compute-budget audit`"
                )
            return Authorised(size)
    if head.seq == size:
        return Authorised(size)  # an empty store, no checkpoint
    if adopt_through is None and committed == StateHead(head.seq, root, head.chain_hash):
        return Authorised(size)  # the writer's own rows, committed after the trusted checkpoint
    if adopt_through is None:
        since = f"the newest checkpoint a trusted writer signed covers {size}" if trusted else "no trusted writer " \
            "signed any checkpoint of this origin" + _signed_by_others(connection, seal)
        raise StoreDamaged(
            f"refusing to sign: rows {size + 1}..{head.seq} were appended by no trusted writer ({since}); nothing "
            f"was written. Review them (`compute-budget list --after-seq {size}`), then adopt them with "
            f"`record --adopt-unsigned {head.seq}`, or trust the writer that signed them with --peer-key"
        )
    anchor_chain = trusted[1].chain_hash if trusted is not None else GENESIS_CHAIN_HASH
    anchor_root = trusted[1].root if trusted is not None else None
    require_rows_hold(
        connection, statements, seal, size, head, anchor_chain, anchor_root, root, decode=decode
    )
    return Authorised(size, adopted=head.seq - size)


def require_rows_hold(
    connection: Connection,
    statements: Statements,
    seal: SealStatements,
    size: int,
    head: ChainHead,
    anchor_chain: str,
    anchor_root: bytes | None,
    root: bytes,
    *,
    decode: Callable[[Any], tuple[Any, ...]],
    refused: str = "--adopt-unsigned refused",
) -> None:
    """Re-derive rows size+1..head as the audit does, and rebuild the tree over them from the trusted size: any
    row that does not hold, or stored tree nodes that disagree with the rows, raise `StoreDamaged` starting with
    `refused` (an adoption, or the acknowledgement of a repair, is then refused)."""
    stored_chain = sealing.chain_at(connection, statements)(size) if size else GENESIS_CHAIN_HASH
    if stored_chain != anchor_chain:
        raise StoreDamaged(
            f"{refused}: row {size} no longer carries the chain hash its checkpoint names: history "
            "was rewritten; nothing was written"
        )
    rebuilt = sealing.frontier_at(connection, seal, size) if size else CompactRange()
    if anchor_root is not None and rebuilt.root() != anchor_root:
        raise StoreDamaged(
            f"{refused}: the stored tree at size {size} is not the one its checkpoint names; nothing "
            "was written; run `compute-budget audit`"
        )
    prev_seq, prev_chain = size, anchor_chain
    for low in range(size, head.seq, ADOPT_PAGE_ROWS):
        high = min(low + ADOPT_PAGE_ROWS, head.seq)
        rows = [decode(row) for row in connection.exec_driver_sql(statements.seq_range, (low, high)).fetchall()]
        result = RangeResult()
        for row in rows:
            prev_seq, prev_chain = check_row(row, prev_seq, prev_chain, result)
        if result.findings or len(rows) != high - low:
            first = result.findings[0] if result.findings else None
            what = f"row {first.seq} does not hold ({first.kind}: {first.detail})" if first else (
                f"rows {low + 1}..{high} are not all there"
            )
            raise StoreDamaged(f"{refused}: {what}; nothing was written; run `compute-budget audit`")
        # Sliced, not named: a per-row path (see `core.row.CHAINED_COUNT`).
        rebuilt.extend([unreadable_leaf_hash(row[:CHAINED_COUNT]) for row in rows])
    if rebuilt.root() != root:
        raise StoreDamaged(
            f"{refused}: the stored Merkle tree at size {head.seq} does not match its rows; nothing "
            "was written; run `compute-budget audit`"
        )


def own_committed(keys: WriterKeys, origin: str, head: ChainHead, root: bytes) -> StateHead | None:
    """The head this writer state recorded as committed for `origin`, after placing a pending head against the
    store's (`writer_state.resolve`: what a crash between the state's write and the COMMIT left). None when the
    state holds none, or cannot be read (rule 2 then says why, or `--init-writer-state` remakes it)."""
    try:
        held = keys.state.origin_state(origin)
    except WriterStateError:
        return None
    return resolve(held, StateHead(head.seq, root, head.chain_hash)).committed_head()


def check_state(
    connection: Connection,
    statements: Statements,
    seal: SealStatements,
    keys: WriterKeys,
    origin: str,
    head: ChainHead,
    root: bytes,
    *,
    verified: set[tuple[str, VerifierKey]],
) -> str | None:
    """Rule 2: raise unless the store extends the checkpoint the state file holds for `origin`. Returns the note
    to write as the state before signing when `init_state` made it from the store (else None)."""
    state = keys.state
    try:
        note = state.note_for(origin)
    except WriterStateError as error:
        if not keys.init_state or state.is_link():
            raise
        note, problem = None, str(error)
    else:
        problem = f"writer state {state.path} holds no checkpoint of {origin}"
    made = None
    if note is None:
        own = newest_trusted(connection, seal, origin, [keys.verifier], verified)
        if own is None:
            return None  # this key never signed this origin: nothing to extend
        if not keys.init_state:
            raise WriterStateError(
                f"{problem}, but the store holds checkpoint #{own[0].id} (size {own[1].seq}) signed by this key: if "
                "this host signed it, run once with --init-writer-state; nothing was written"
            )
        note = made = own[0].note
    try:
        if (note, keys.verifier) not in verified:
            if verify_note(note, [keys.verifier]).verified != (keys.verifier,):
                raise NoteError("its note does not carry a valid signature by this key")
            verified.add((note, keys.verifier))
        held = Checkpoint.from_note(note)
    except (NoteError, CheckpointError) as error:
        raise WriterStateError(f"writer state {state.path}: the note of {origin} cannot be used ({error})") from None
    _check_held(held, note, origin, keys, from_store=made is not None)
    if _at_own_head(held, keys, origin, head, root, state_made=made is not None):
        return made
    outcome = extends(
        held.body(),
        size=head.seq,
        root=root,
        chain_at=sealing.chain_at(connection, statements),
        reader=sealing.tree_reader(connection, seal, head.seq),
    )
    if not outcome.ok:
        assert held.root is not None
        raise StoreDamaged(
            f"refusing to sign: the store does not extend the checkpoint this key last signed for {origin} (writer "
            f"state {state.path}: size {held.seq}, root {_b64(held.root)}): {outcome.message}; nothing was written "
            "(see docs/incident.md)"
        )
    return made


def _at_own_head(
    held: Checkpoint, keys: WriterKeys, origin: str, head: ChainHead, root: bytes, *, state_made: bool
) -> bool:
    """True when the head is the one this key signed (`held`: the common case at interval 0), or the head this
    writer state recorded as committed (spec 12.3, between two signatures of an interval): each transaction that
    led there passed rule 2 before writing and the same root names the same tree, so the store extends the note as
    it did, and the consistency proof (reading and hashing every row since the note) is not needed again."""
    if held.seq == head.seq and held.chain_hash == head.chain_hash and held.root == root:
        return True
    return not state_made and own_committed(keys, origin, head, root) == StateHead(head.seq, root, head.chain_hash)


def refuse_if_handed_over(
    connection: Connection, seal: SealStatements, keys: WriterKeys, origin: str, verified: set[tuple[str, VerifierKey]]
) -> None:
    """A writer never signs with a key a stored handover retired (`compute-budget rotate`): `KeyRetired` when the
    newest stored checkpoint filed under this key is a handover of this origin it gave to a peer key, both
    signatures verifying. One whose taker does not verify under a peer key is no handover here (spec 11.7.3: a
    keyless insider can append such a line to a note the key signed), and the audit reports it."""
    for stored in sealing.newest_by_key(connection, seal, keys.signer):
        try:
            found = Checkpoint.from_note(stored.note)
        except CheckpointError:
            return
        if found.origin != origin:
            continue
        if signature_verifies(stored.note, keys.verifier, verified):
            _refuse_handover(stored.note, keys, f"stored checkpoint #{stored.id}", from_store=True)
        return


def _refuse_if_state_handed_over(keys: WriterKeys, origin: str) -> None:
    """The writer's own state file holds the handover `rotate` made on this host: refused as retired, before the
    store is read (a handover read from the store counts only with a peer's signature verifying). A state that
    cannot be read is rule 2's to report."""
    try:
        note = keys.state.note_for(origin)
    except WriterStateError:
        return
    if note is not None:
        _refuse_handover(note, keys, f"writer state {keys.state.path}", from_store=False)


def signature_verifies(note: str, key: VerifierKey, verified: set[tuple[str, VerifierKey]]) -> bool:
    """True when `note` carries a valid signature by `key` (and no failing one); cached in `verified`."""
    if (note, key) in verified:
        return True
    try:
        outcome = verify_note(note, [key])
    except NoteError:
        return False
    if outcome.verified and not outcome.failed:
        verified.add((note, key))
        return True
    return False


def _check_held(held: Checkpoint, note: str, origin: str, keys: WriterKeys, *, from_store: bool) -> None:
    """The state's note must be of `origin`, and no handover this key gave (then it was retired)."""
    if held.origin != origin:
        raise WriterStateError(f"writer state {keys.state.path}: the note filed under {origin} is of {held.origin}")
    _refuse_handover(note, keys, f"writer state {keys.state.path}", from_store=from_store)


def _refuse_handover(note: str, keys: WriterKeys, where: str, *, from_store: bool) -> None:
    """`KeyRetired` when `note` is a handover this key gave. The writer's own state file is its own record; a note
    read from the store counts only when a peer key's signature on it verifies too (`verified_handover`)."""
    try:
        handover = handover_in(note)
    except NoteError:
        return
    if handover is None or not is_key(handover.giver, keys.verifier):
        return
    if from_store and verified_handover(note, [keys.verifier], keys.peers) is None:
        return
    size = Checkpoint.from_note(note).seq
    takers = ", ".join(f"{taker.name}+{taker.key_hash:08x}" for taker in handover.takers)
    raise KeyRetired(
        f"refusing to sign with {keys.signer.name}+{keys.verifier.key_hash:08x}: {where} is its handover to "
        f"{takers} at size {size} (`compute-budget rotate`), which retired it; sign with the new key; nothing was "
        "written"
    )
