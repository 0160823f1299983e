"""Key rotation (`rotate`, spec 11): the old writer key hands the log over to a new one at the head.

Inside the append lock and under spec 9.1's rules for the old key (the head is the newest checkpoint it or a peer
signed, and the store extends its writer state), the head's checkpoint is signed by the old key, then the new
one, and stored in the signed checkpoints table filed under each key (so each key's newest stored checkpoint is
the handover). Both writer states then hold it: the old key's, so that its writer refuses to sign again; the new
key's, so that it starts from the handover. The handover is a claim the audit cross-checks (`--retired`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from sqlalchemy.exc import SQLAlchemyError

from compute_budget.core.log.head import ChainHead
from compute_budget.core.log.note import VerifierKey
from compute_budget.errors import InputError, ReadOnlyStore, StoreUnavailable
from compute_budget.store import repairs
from compute_budget.store import seal_tables as sealing
from compute_budget.store.authorship import WriterKeys, check_signed_head, check_state
from compute_budget.store.engine import begin_write, translate
from compute_budget.store.reads import stored_root
from compute_budget.store.session import StoreSession, read_head, utc_now


@dataclass(frozen=True, slots=True)
class Rotated:
    """What `rotate` stored: the handover `note`, of the `head` with `root`, for `origin`."""

    origin: str
    head: ChainHead
    root: bytes
    note: str


def rotate(session: StoreSession, old: WriterKeys, new: WriterKeys) -> Rotated:
    """Store the handover checkpoint of the head signed by `old` then `new`, and write it to both writer states.
    `KeyRetired` when a handover already retired `old`; `StoreDamaged` / `WriterStateError` under spec 9.1's rules
    for `old` (and rule 2 for `new`, when its state holds this origin); nothing is written then."""
    location = session.location
    if session.readonly:
        raise ReadOnlyStore(f"{location.display} was opened read-only: rotating a key stores a handover")
    if new.verifier == old.verifier:
        raise InputError("--new-key is the key being retired: make a new one with `compute-budget keygen`")
    verified: set[tuple[str, VerifierKey]] = set()
    with contextlib.ExitStack() as locks:
        for writer in sorted((old, new), key=lambda item: str(item.state.path)):
            locks.enter_context(writer.state.locked())
        try:
            with begin_write(session.engine) as connection:
                session.backend.lock_for_append(connection)
                repairs.require_acknowledged(connection, location.display, None)
                head = read_head(connection, session.statements)
                origin = sealing.read_origin(connection, session.seal)
                if origin is None or head.seq == 0:
                    raise StoreUnavailable(f"{location.display} holds no row yet: there is no log to hand over")
                stored_root(connection, session.seal, head, location)
                frontier = sealing.frontier_at(connection, session.seal, head.seq)
                root = frontier.root()
                check_signed_head(
                    connection, session.statements, session.seal, old, origin, head, frontier,
                    verified=verified, adopt_through=None, decode=session.logical,
                )
                for writer in (old, new):
                    check_state(connection, session.statements, session.seal, writer, origin, head, root,
                                verified=verified)
                note = sealing.signed_note(origin, head, root, [old.signer, new.signer])
                for writer in (old, new):
                    sealing.insert_checkpoint(connection, session.seal, head.seq, writer.signer, note, utc_now())
        except SQLAlchemyError as error:
            raise translate(error, location) from None
        for writer in (old, new):
            writer.state.save(origin, note, discard_unreadable=writer.init_state)
    return Rotated(origin, head, root, note)


__all__ = ["Rotated", "rotate"]
