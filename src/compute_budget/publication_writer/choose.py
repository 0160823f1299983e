"""Which checkpoint a publish makes `DIR/checkpoint` (spec 10.1): the newest stored one whose signature by a trusted
writer key verifies, with witness keys the newest of those carrying K valid cosignatures; and only the signature
lines of it that verify under a `--trusted-key` or a `--witness-key`.

A stored note is a claim until its signature verifies: a newer note planted in the table, unsigned or signed by
another key, is passed over, and a line the publisher cannot verify never reaches a reader of the publication.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compute_budget.auditor.key_states import note_problem
from compute_budget.auditor.witness_rules import WitnessRequirement
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.key_states import KeyStates
from compute_budget.core.log.note import Signature, VerifierKey, parse_note, verified_signatures
from compute_budget.core.seal_checks import trusted_signers
from compute_budget.errors import CheckpointError, NoteError, NothingToPublish
from compute_budget.store.snapshot import Snapshot

MAX_CANDIDATES_PER_KEY = 1000  # a table of forged notes is passed over this far, then the publish stops and says so


@dataclass(frozen=True, slots=True)
class Chosen:
    """The checkpoint to publish: its parsed form and the note `DIR/checkpoint` gets (verified lines only)."""

    checkpoint: Checkpoint
    note: str

    @property
    def size(self) -> int:
        """Its tree size."""
        return self.checkpoint.seq


def choose(
    snapshot: Snapshot, keys: Sequence[VerifierKey], policy: WitnessRequirement | None, states: KeyStates | None = None
) -> Chosen:
    """The checkpoint to publish (see the module docstring); `NothingToPublish` when there is none. With `states`
    (`--retired`, `--revoked`: spec 11.1), a note whose signature by such a key does not count is passed over."""
    origin, limited, size = snapshot.origin(), states or KeyStates(), snapshot.max_seq()

    def counts(note: str) -> bool:
        return note_problem(snapshot, note, limited, size) is None

    found = (_witnessed(snapshot, keys, policy, origin, counts) if policy is not None
             else _newest_signed(snapshot, keys, origin, counts))
    if found is None:
        quorum = f" carrying {policy.quorum} valid cosignature(s) by the --witness-key keys" if policy else ""
        raise NothingToPublish(
            f"the store holds no checkpoint signed by a --trusted-key{quorum}, so there is nothing to publish: "
            "record with --signing-key KEY (the writer's key"
            + (", then `compute-budget witness submit`" if policy else "")
            + "), then publish again; nothing was written"
        )
    text = parse_note(found)[0]
    lines = _kept_lines(snapshot, text, found, keys, policy)
    note = text + "\n" + "".join(line.line() for line in lines)
    return Chosen(Checkpoint.from_note(note, source="the checkpoint to publish"), note)


def newest_signed(snapshot: Snapshot, keys: Sequence[VerifierKey], states: KeyStates | None = None) -> int | None:
    """The size of the newest stored checkpoint of this log a trusted key signed (its signature counting), whatever
    witnesses cosigned; None when there is none. Above the size `choose` gives with a witness policy, the rows
    between wait for the quorum."""
    limited, size = states or KeyStates(), snapshot.max_seq()
    found = _newest_signed(snapshot, keys, snapshot.origin(),
                           lambda note: note_problem(snapshot, note, limited, size) is None)
    return None if found is None else Checkpoint.from_note(found).seq


def _newest_signed(
    snapshot: Snapshot, keys: Sequence[VerifierKey], origin: str | None, counts: Callable[[str], bool]
) -> str | None:
    """The newest stored note of this log whose signature by one of `keys` verifies."""
    best: tuple[int, int, str] | None = None  # (tree size, id, note)
    for key in keys:
        for tried, stored in enumerate(snapshot.newest_by_key(key)):
            if tried >= MAX_CANDIDATES_PER_KEY or (best is not None and (stored.tree_size, stored.id) <= best[:2]):
                break
            if _signed(stored.note, keys, origin) and counts(stored.note):
                best = (stored.tree_size, stored.id, stored.note)
                break
    return best[2] if best is not None else None


def _witnessed(
    snapshot: Snapshot, keys: Sequence[VerifierKey], policy: WitnessRequirement, origin: str | None,
    counts: Callable[[str], bool],
) -> str | None:
    """The newest stored note of this log signed by a trusted key whose text K witnesses validly cosigned (the
    cosignatures counted from the note's own lines and the store's)."""
    seen: set[tuple[int, str]] = set()
    for size, text, _ in snapshot.cosignatures_newest_first(snapshot.max_seq()):
        if (size, text) in seen:
            continue
        seen.add((size, text))
        for stored in snapshot.checkpoints_at(size):
            if not stored.note.startswith(text + "\n") or not _signed(stored.note, keys, origin):
                continue
            if not counts(stored.note):
                continue
            lines = [line.line() for line in parse_note(stored.note)[1]] + snapshot.cosignatures_of(text, size)
            if policy.tally(lines, text).met:
                return stored.note
    return None


def _signed(note: str, keys: Sequence[VerifierKey], origin: str | None) -> bool:
    """True when `note` is a checkpoint of this log carrying a signature by one of `keys` that verifies, and none by
    them that fails."""
    try:
        verified, failed = trusted_signers(note, keys)
        return bool(verified) and not failed and Checkpoint.from_note(note).origin == origin
    except (NoteError, CheckpointError):
        return False


def _kept_lines(
    snapshot: Snapshot, text: str, note: str, keys: Sequence[VerifierKey], policy: WitnessRequirement | None
) -> list[Signature]:
    """The signature lines of `text` that verify: the writers' (from every stored note of that text), then the
    witnesses' cosignatures (the note's own and the store's), each once."""
    size = Checkpoint.from_note(note).seq
    notes = [stored.note for stored in snapshot.checkpoints_at(size)] + [note]
    writers = verified_signatures(text, notes, keys)
    if policy is None:
        return writers
    candidates = [line.line() for line in parse_note(note)[1]] + snapshot.cosignatures_of(text, size)
    witnesses: list[Signature] = []
    for line in dict.fromkeys(candidates):
        if policy.judge(text, line).valid:
            witnesses += [item for item in parse_note(text + "\n" + line)[1] if item not in witnesses]
    return writers + witnesses

