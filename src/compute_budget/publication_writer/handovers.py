"""The handovers a publication carries (spec 11.1): for each `--retired OLD@H` at or below the size published, the
stored note of tree H whose first writer signature is OLD's and whose second is a trusted or retired key's, both
verifying, as `DIR/handover/<H>/<OLD's key ID>` (`core.log.tiles.handover_path`).

The file keeps only the lines that verify (the writers' under the trusted and retired keys, the cosignatures under
the witness policy), from the stored note itself and never from the store's cosignature table, so its bytes never
change once written: like a full tile it is immutable. A note whose root is not the store's tree at H is passed over
(the database audit reports it); a reader of the publication then finds the handover missing, never a wrong one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from compute_budget.auditor.witness_rules import WitnessRequirement
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.key_states import KeyState, KeyStates, KeyStatus, handover_in, is_key
from compute_budget.core.log.note import VerifierKey, parse_note, verified_signatures
from compute_budget.core.log.tiles import handover_path
from compute_budget.core.seal_checks import StoredCheckpoint
from compute_budget.errors import CheckpointError, MerkleError, NoteError, StoreDamaged
from compute_budget.publication_writer.layout import TreeFile
from compute_budget.store.snapshot import Snapshot


def retired_keys(states: KeyStates) -> list[VerifierKey]:
    """The `--retired` keys: each signs for the log up to its handover, so a publish trusts it that far."""
    return [state.key for state in states.limited() if state.status is KeyStatus.RETIRED]


def handover_files(
    snapshot: Snapshot, size: int, states: KeyStates, keys: Sequence[VerifierKey], policy: WitnessRequirement | None
) -> Iterator[TreeFile]:
    """The handover file of each `--retired` key handed over at or below `size` whose stored handover qualifies
    (see the module docstring); `keys`: the trusted writer keys, the retired ones among them."""
    origin = snapshot.origin()
    for state in states.limited():
        if state.status is not KeyStatus.RETIRED or state.size > size:
            continue
        note = _stored_handover(snapshot, state, keys, origin)
        if note is not None:
            yield TreeFile(handover_path(state.size, state.key.key_hash), _kept(note, keys, policy).encode("utf-8"))


def _stored_handover(
    snapshot: Snapshot, state: KeyState, keys: Sequence[VerifierKey], origin: str | None
) -> str | None:
    """The oldest stored note of tree `state.size` that is a handover from `state.key` to a trusted or retired key
    (both signatures verifying), of this log and on the store's tree; None when there is none."""
    root: bytes | None = None
    seen: set[str] = set()
    for stored in snapshot.checkpoints_between(state.size - 1, state.size):
        if stored.note in seen:
            continue  # `rotate` files the handover under each of its keys
        seen.add(stored.note)
        found = _handover_checkpoint(stored, state.key, keys, origin)
        if found is None:
            continue
        if root is None:
            root = _tree_root(snapshot, state.size)
        if found.root == root:
            return stored.note
    return None


def _handover_checkpoint(
    stored: StoredCheckpoint, giver: VerifierKey, keys: Sequence[VerifierKey], origin: str | None
) -> Checkpoint | None:
    """The checkpoint `stored` holds when its first writer signature is `giver`'s and its second a key of `keys`,
    both verifying, and it is of `origin` at its filed size; else None."""
    try:
        parsed = parse_note(stored.note)
        handover = handover_in(parsed)
        found = Checkpoint.from_note(stored.note)
    except (NoteError, CheckpointError):
        return None
    if handover is None or not is_key(handover.giver, giver) or is_key(handover.takers[0], giver):
        return None
    if found.origin != origin or found.seq != stored.tree_size:
        return None
    verified = verified_signatures(parsed.text, [parsed], [giver, *keys])
    return found if handover.giver in verified and handover.takers[0] in verified else None


def _tree_root(snapshot: Snapshot, size: int) -> bytes | None:
    try:
        return snapshot.frontier(size).root()
    except (StoreDamaged, MerkleError):
        return None  # the store's tree cannot give it: the audit says why, and nothing is published for it


def _kept(note: str, keys: Sequence[VerifierKey], policy: WitnessRequirement | None) -> str:
    """`note` with only its lines that verify, in its own order: writer signatures under `keys`, cosignatures
    under the witness policy (none without one)."""
    text, signatures = parse_note(note)
    writers = verified_signatures(text, [note], keys)
    kept = [
        signature for signature in signatures
        if signature in writers or (policy is not None and policy.judge(text, signature.line()).valid)
    ]
    return text + "\n" + "".join(signature.line() for signature in dict.fromkeys(kept))
