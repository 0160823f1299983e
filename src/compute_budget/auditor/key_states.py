"""The audit's side of key rotation and revocation (spec 11.1, 11.6, 11.7.3-4): which stored signatures of a retired
or revoked writer key count, what a key's newest counting checkpoint is, and the stored handovers held against
the configured retirements. The rules themselves are `core.log.key_states`.

* A stored checkpoint whose signature by a retired key is above its size, or by a revoked key is above its size
  or not on the store's tree (a fork), is `bad_signature` (`retired at SIZE` / `revoked at SIZE`), and the rows
  it covers are attested only by what counts.
* A revocation whose (SIZE, ROOT) is not the store's tree is `checkpoint_mismatch`.
* A stored handover by a trusted key to a key that is not trusted is `bad_signature`; a configured retirement with
  no stored handover at its size by that key to a trusted key is `checkpoint_mismatch` (`handover missing`); a
  stored trusted handover with no `--retired` for its giver is a warning.
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from compute_budget.auditor.source import LogView as Snapshot
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.key_states import (
    KeyState,
    KeyStates,
    KeyStatus,
    handover_in,
    is_key,
    parse_key_state,
    signature_problem,
)
from compute_budget.core.log.note import Signature, VerifierKey
from compute_budget.core.seal_checks import StoredCheckpoint, trusted_signers
from compute_budget.core.seal_checks import signature_problem as note_signature_problem
from compute_budget.core.verify import Finding, FindingKind
from compute_budget.errors import CheckpointError, MerkleError, NoteError, PublicationUnavailable, StoreDamaged
from compute_budget.keys.key_files import verifier_key

_SIGNATURE_LINE = "\n\u2014 "  # how every signature line of a note starts (the first follows the empty line)
MAX_FINDINGS_PER_KEY = 20  # a forger's table of checkpoints is reported, not listed to the end

KeyStateLike = KeyState | str


def configured_states(
    retired: Iterable[KeyStateLike] = (), revoked: Iterable[KeyStateLike] = ()
) -> KeyStates:
    """The states `--retired KEY@SIZE` and `--revoked KEY@SIZE:ROOT` give (KEY: verifier key text, else a file);
    `KeyStateError` naming the option for one that cannot be used."""

    def parsed(item: KeyStateLike, status: KeyStatus) -> KeyState:
        if isinstance(item, KeyState):
            return item
        return parse_key_state(item, status, lambda text: verifier_key(text, what="key"))

    return KeyStates.of([
        *(parsed(item, KeyStatus.RETIRED) for item in retired),
        *(parsed(item, KeyStatus.REVOKED) for item in revoked),
    ])


def label(key: VerifierKey | Signature) -> str:
    """A key (or the key a signature claims) as findings name it: ``name+hash``."""
    return f"{key.name}+{key.key_hash:08x}"


@dataclass(slots=True)
class KeyStateSurvey:
    """What the key states found: findings, report warnings, and for each limited trusted key its newest stored
    checkpoint that counts (label -> (size, id); absent when none does)."""

    findings: list[Finding] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    attested: dict[str, tuple[int, int]] = field(default_factory=dict)


def survey_key_states(
    snapshot: Snapshot, keys: list[VerifierKey], states: KeyStates, origin: str | None, max_seq: int,
    attested: dict[str, tuple[int, int]] | None = None,
) -> KeyStateSurvey:
    """Judge every stored signature of a limited key (whatever key the entry is filed under: anyone can file a
    note), and the stored handovers against the retirements, in one pass over the stored checkpoints. `attested`
    (the audit's label -> (size, id)) then holds each limited trusted key's newest stored checkpoint that counts."""
    survey = _survey(snapshot, keys, states, origin, max_seq)
    if attested is not None:
        apply_attestation(attested, keys, states, survey)
    return survey


def _survey(
    snapshot: Snapshot, keys: list[VerifierKey], states: KeyStates, origin: str | None, max_seq: int
) -> KeyStateSurvey:
    survey = KeyStateSurvey()
    limited = states.limited()
    if not keys and not limited:
        return survey
    keys = _with_retired(keys, states)
    roots = _TreeRoots(snapshot, max_seq)
    anchored = {state.key: _anchored(state, roots, survey) for state in limited}
    handed: set[tuple[VerifierKey, int]] = set()
    seen: set[str] = set()
    bad: dict[VerifierKey | None, int] = {}
    published = isinstance(snapshot, PublishedHandovers)
    notes = snapshot.checkpoints_between(-1, max_seq)
    if published:  # a publication's one checkpoint is judged as a stored one would be
        notes = itertools.chain(notes, snapshot.checkpoints_at(max_seq))
    for stored in notes:
        # Most notes carry one signature by an active key: told apart by text before anything is parsed.
        multi = stored.note.count(_SIGNATURE_LINE) >= 2
        named = [state for state in limited if f"{_SIGNATURE_LINE}{state.key.name} " in stored.note]
        if not named and not (multi and keys):
            continue
        if multi:
            if stored.note in seen:
                continue  # rotate files the handover under each of its keys
            seen.add(stored.note)
        found = _checkpoint(stored, origin)
        if found is None:
            continue  # unreadable, or another log's: the tree check reports those
        for state in named:
            reason = _judge_signature(stored, found, state, anchored[state.key], roots, survey)
            if reason is not None:
                _add_bad(survey, bad, state.key, _bad(stored, f"its signature by {state.label()} does not count: "
                                                              f"{reason}"))
        if multi:
            _judge_handover(stored, keys, states, handed, bad, survey)
    rejected: dict[tuple[VerifierKey, int], FindingKind] = {}
    if isinstance(snapshot, PublishedHandovers):
        for state in limited:
            if state.status is KeyStatus.RETIRED and (state.key, state.size) not in handed:
                kind = _judge_published_handover(snapshot, state, keys, origin, roots, handed, survey)
                if kind is not None:
                    rejected[(state.key, state.size)] = kind
    _missing_handovers(states, handed, survey, published, rejected)
    return survey


@runtime_checkable
class PublishedHandovers(Protocol):
    """A publication's view: the handovers it publishes (spec 11.1), read by the retired key's size and hash."""

    def published_handover(self, size: int, key_hash: int) -> str | None: ...


def _judge_published_handover(
    snapshot: PublishedHandovers, state: KeyState, keys: list[VerifierKey], origin: str | None, roots: _TreeRoots,
    handed: set[tuple[VerifierKey, int]], survey: KeyStateSurvey,
) -> FindingKind | None:
    """`handover/<SIZE>/<key ID>` for a `--retired KEY@SIZE`, judged as a stored handover is: the retired key's
    signature, then a trusted (or retired) key's, both verifying (else, or when it is no note, `bad_signature`), of
    this log at SIZE with the tiles' root there (else `checkpoint_mismatch`). Returns the kind of the finding that
    rejected the file, else None. Not published: left to `_missing_handovers`."""
    path = f"handover/{state.size}/{state.key.key_hash:08x}"
    note = snapshot.published_handover(state.size, state.key.key_hash)
    if note is None:
        return None
    try:
        found = Checkpoint.from_note(note)
    except (CheckpointError, NoteError) as error:
        # No signature of it verifies: skipped and reported as the database audit reports a stored note that
        # cannot be read under a key (spec 11.7.3, 9.1), and the retirement then has no handover.
        survey.findings.append(Finding(FindingKind.BAD_SIGNATURE, None, state.size,
                                       f"the published {path} is no signed checkpoint ({error})"))
        return FindingKind.BAD_SIGNATURE
    if found.origin != origin or found.seq != state.size or found.root != roots.at(state.size):
        survey.findings.append(Finding(
            FindingKind.CHECKPOINT_MISMATCH, None, state.size,
            f"the published {path} is of log {found.origin} at size {found.seq} with root {_b64(found.root)}, but "
            f"the tiles' tree at size {state.size} has root {_b64(roots.at(state.size))}: it is not this log's "
            "handover",
        ))
        return FindingKind.CHECKPOINT_MISMATCH
    verdict = _handover(note, keys)
    problem: str | None = None
    if verdict is None or verdict[0] != state.key:
        problem = f"it carries no verifying signature by {state.label()} followed by a trusted key's"
    else:
        problem = verdict[1]
    if problem is not None:
        survey.findings.append(Finding(FindingKind.BAD_SIGNATURE, None, state.size, f"the published {path}: {problem}"))
        return FindingKind.BAD_SIGNATURE
    handed.add((state.key, state.size))
    return None


def _anchored(state: KeyState, roots: _TreeRoots, survey: KeyStateSurvey) -> bool:
    """A revocation's (SIZE, ROOT) must be the store's tree: else `checkpoint_mismatch`, and nothing of it counts."""
    if state.status is not KeyStatus.REVOKED or roots.at(state.size) == state.root:
        return True
    survey.findings.append(Finding(
        FindingKind.CHECKPOINT_MISMATCH, None, state.size,
        f"--revoked {state.label()} names tree size {state.size} with root {_b64(state.root)}, but the store's "
        f"tree there is {_b64(roots.at(state.size))}: no signature of that key counts (history rewritten, or "
        "the wrong root was given)",
    ))
    return False


def _judge_signature(
    stored: StoredCheckpoint, found: Checkpoint, state: KeyState, anchored: bool, roots: _TreeRoots,
    survey: KeyStateSurvey,
) -> str | None:
    """Why `state.key`'s valid signature on `stored` does not count, or None (it counts, or there is none)."""
    if not any(is_key(signature, state.key) for signature in found.signatures()):
        return None
    if note_signature_problem(stored.note, state.key) is not None:
        return None  # a signature that fails: the attestation reports those of trusted keys
    proven = anchored and found.seq <= state.size and roots.at(found.seq) == found.root
    reason = signature_problem(state, found.seq, found.root, proven=proven)
    if reason is None:
        newest = survey.attested.get(state.label())
        if newest is None or (found.seq, stored.id) > newest:
            survey.attested[state.label()] = (found.seq, stored.id)
    return reason


def _add_bad(survey: KeyStateSurvey, bad: dict[VerifierKey | None, int], key: VerifierKey | None,
             finding: Finding) -> None:
    """Add a `bad_signature` finding, at most `MAX_FINDINGS_PER_KEY` per key, then one saying it stopped."""
    bad[key] = bad.get(key, 0) + 1
    if bad[key] <= MAX_FINDINGS_PER_KEY:
        survey.findings.append(finding)
    elif bad[key] == MAX_FINDINGS_PER_KEY + 1:
        who = label(key) if key is not None else "handovers"
        survey.findings.append(Finding(
            FindingKind.BAD_SIGNATURE, None, None,
            f"stopped after {MAX_FINDINGS_PER_KEY} stored checkpoints of {who} whose signatures do not count",
        ))


def apply_attestation(attested: dict[str, tuple[int, int]], keys: list[VerifierKey], states: KeyStates,
                      survey: KeyStateSurvey) -> None:
    """Replace each limited trusted key's attestation by its newest stored checkpoint that counts."""
    for state in states.limited():
        if state.key in keys:
            attested.pop(state.label(), None)
            if state.label() in survey.attested:
                attested[state.label()] = survey.attested[state.label()]


class _TreeRoots:
    """The store's tree root at a size (None beyond the head or when the stored tree cannot give it), cached."""

    def __init__(self, snapshot: Snapshot, max_seq: int) -> None:
        self._snapshot, self._max_seq, self._cache = snapshot, max_seq, dict[int, bytes | None]()

    def at(self, size: int) -> bytes | None:
        if size not in self._cache:
            try:
                root = self._snapshot.frontier(size).root() if 0 <= size <= self._max_seq else None
            except (StoreDamaged, MerkleError):
                root = None  # the tree's own findings say why
            self._cache[size] = root
        return self._cache[size]


def _judge_handover(
    stored: StoredCheckpoint, keys: list[VerifierKey], states: KeyStates, handed: set[tuple[VerifierKey, int]],
    bad: dict[VerifierKey | None, int], survey: KeyStateSurvey,
) -> None:
    """A stored handover by a trusted key: to an untrusted key, `bad_signature`; else noted, and a warning when its
    giver has no `--retired`."""
    verdict = _handover(stored.note, keys)
    if verdict is None:
        return
    giver, problem = verdict
    if problem is not None:
        _add_bad(survey, bad, None, _bad(stored, problem))
        return
    handed.add((giver, stored.tree_size))
    if states.of_key(giver).status is KeyStatus.ACTIVE:
        survey.warnings.append(
            f"stored checkpoint #{stored.id} hands the log over from {label(giver)} at size {stored.tree_size} "
            f"(`rotate`), but no --retired {label(giver)}@{stored.tree_size} is given: that key's signatures "
            "above it still count here"
        )


def _missing_handovers(
    states: KeyStates, handed: set[tuple[VerifierKey, int]], survey: KeyStateSurvey, published: bool = False,
    rejected: dict[tuple[VerifierKey, int], FindingKind] | None = None,
) -> None:
    """Each configured retirement needs its stored (or published) handover: else `checkpoint_mismatch` (`handover
    missing`). A published file that is there but was `rejected` (its finding's kind) is said to be no valid one."""
    for state in states.limited():
        if state.status is KeyStatus.RETIRED and (state.key, state.size) not in handed:
            path = f"handover/{state.size}/{state.key.key_hash:08x}"
            kind = (rejected or {}).get((state.key, state.size))
            why = "does not verify" if kind is FindingKind.BAD_SIGNATURE else "is not this log's handover"
            held = f"no valid {path} (the file there {why}: reported above as {kind.value})" if kind else f"no {path}"
            holds = (f"the publication holds {held}, a checkpoint of size {state.size} signed by that key and then "
                     "by a trusted key (`publish --retired` writes it)"
                     if published else
                     f"the store holds no checkpoint of size {state.size} signed by that key and then by a trusted "
                     "key (`rotate` stores one)")
            survey.findings.append(Finding(
                FindingKind.CHECKPOINT_MISMATCH, None, state.size,
                f"handover missing: --retired {state.label()}@{state.size} is given, but {holds}",
            ))


def _with_retired(keys: list[VerifierKey], states: KeyStates) -> list[VerifierKey]:
    """The trusted keys and the `--retired` ones: a retired key was the log's writer up to its size, so it gives a
    handover (and `--trusted-key NEW --retired OLD@H`, as `rotate` prints them, is enough)."""
    retired = [state.key for state in states.limited() if state.status is KeyStatus.RETIRED]
    return list(dict.fromkeys([*keys, *retired]))


def _handover(note: str, keys: list[VerifierKey]) -> tuple[VerifierKey, str | None] | None:
    """(giver, problem) for a handover note whose giver is a trusted key that verifies; None for anything else."""
    try:
        handover = handover_in(note)
    except NoteError:
        return None
    if handover is None:
        return None
    giver = next((key for key in keys if is_key(handover.giver, key)), None)
    if giver is None or note_signature_problem(note, giver) is not None:
        return None
    for taker in handover.takers:
        key = next((item for item in keys if is_key(taker, item)), None)
        if key is None:
            return giver, _untrusted_taker(note, giver, taker)
        problem = note_signature_problem(note, key)
        if problem is not None:
            return giver, f"a handover from {label(giver)}: {problem}"
    return giver, None


def _untrusted_taker(note: str, giver: VerifierKey, taker: Signature) -> str:
    """A handover from a trusted key to one this audit does not trust: a thief's, or a rotation nobody told the
    auditor of (spec 11.6)."""
    try:
        size = str(Checkpoint.from_note(note).seq)
    except CheckpointError:
        size = "SIZE"
    return untold_rotation(giver, [taker], size)


def untold_rotation(giver: VerifierKey, takers: Iterable[Signature], size: int | str) -> str:
    """What a handover from trusted `giver` at `size` to keys this audit does not trust says (spec 11.6): the
    takers as the note shows them, and what to obtain, never a verifier key the audit was not given."""
    names = ", ".join(label(taker) for taker in takers)
    return (f"a handover from {label(giver)} to {names} (unverified) at size {size}, a key that is not "
            "trusted (a stolen key's forged rotation, or a rotation this audit was not told of: obtain the new "
            f"verifier key from the log's operator out of band, then add --trusted-key <that key> --retired "
            f"{giver.format()}@{size})")


@runtime_checkable
class HandoverFiles(Protocol):
    """A publication's handover files (spec 11.1), read by size and key hash; `handover_sizes` is None when the
    publication cannot be listed (HTTP)."""

    def handover(self, size: int, key_hash: int) -> str | None: ...
    def handover_sizes(self, key_hash: int) -> list[int] | None: ...


def published_rotations(
    files: HandoverFiles, keys: list[VerifierKey], origin: str, size: int, known: Iterable[int] = ()
) -> list[str]:
    """For a published checkpoint of `size` no trusted key signed (spec 11.6): each trusted key's newest published
    handover at or below `size` that verifies (its signature first, of this `origin`), as `untold_rotation` says
    it, naming its file. Where the publication cannot be listed, only the `known` sizes are looked at (a verified
    --since note's); a file that cannot be read or does not verify names nothing."""
    found = []
    for key in keys:
        sizes = files.handover_sizes(key.key_hash)
        for at in sorted(set(known if sizes is None else sizes), reverse=True):
            try:
                note = files.handover(at, key.key_hash) if 0 < at <= size else None
            except PublicationUnavailable:
                continue  # an advice is not worth an audit that stops: the finding stands without it
            takers = handover_by(note, key, origin, at) if note is not None else None
            if takers is not None:
                found.append(f"the publication holds handover/{at}/{key.key_hash:08x}, "
                             + untold_rotation(key, takers, at))
                break
    return found


def handover_by(note: str, key: VerifierKey, origin: str | None, size: int) -> tuple[Signature, ...] | None:
    """The takers of `note` when it is a handover of `origin` at `size` whose first signature is `key`'s and
    verifies; else None (another log's, another size's, a forgery)."""
    try:
        found = Checkpoint.from_note(note)
        handover = handover_in(note)
    except (CheckpointError, NoteError):
        return None
    if handover is None or found.origin != origin or found.seq != size or not is_key(handover.giver, key):
        return None
    return handover.takers if note_signature_problem(note, key) is None else None


def _checkpoint(stored: StoredCheckpoint, origin: str | None) -> Checkpoint | None:
    try:
        found = Checkpoint.from_note(stored.note)
    except CheckpointError:
        return None
    return found if found.origin == origin and found.seq == stored.tree_size else None


def _bad(stored: StoredCheckpoint, problem: str) -> Finding:
    return Finding(
        FindingKind.BAD_SIGNATURE, None, stored.tree_size,
        f"stored checkpoint #{stored.id} (size {stored.tree_size}, filed as signed by {stored.key_label()}): {problem}",
    )


def _b64(root: bytes | None) -> str:
    return "none" if root is None else base64.b64encode(root).decode("ascii")




def note_problem(snapshot: Snapshot, note: str, states: KeyStates, max_seq: int) -> str | None:
    """Why a checkpoint note signed by a retired or revoked key does not count against this store (`prove`,
    `consistency`), or None: each of its valid signatures by a limited key must count, judged by the store's tree."""
    try:
        found = Checkpoint.from_note(note)
    except CheckpointError:
        return None  # the caller's own checks say why
    roots = _TreeRoots(snapshot, max_seq)
    for state in states.limited():
        if not any(is_key(signature, state.key) for signature in found.signatures()):
            continue
        if note_signature_problem(note, state.key) is not None:
            continue
        reason = _counts(state, found, roots)
        if reason is not None:
            return f"its signature by {state.label()} does not count: {reason}"
    return None


def _counts(state: KeyState, found: Checkpoint, roots: _TreeRoots) -> str | None:
    """Why a valid signature of `state.key` on `found` does not count, judged by the store's tree; or None."""
    anchored = state.status is not KeyStatus.REVOKED or roots.at(state.size) == state.root
    proven = anchored and found.seq <= state.size and roots.at(found.seq) == found.root
    return signature_problem(state, found.seq, found.root, proven=proven)


def since_vouched(
    snapshot: Snapshot, since: Checkpoint | None, keys: list[VerifierKey], states: KeyStates, origin: str | None,
    max_seq: int, attested: int = 0,
) -> tuple[int, str] | None:
    """(S, the signer's label) when the `--since` note is of this log at S, on the store's tree there, with a
    trusted key's signature that verifies and counts: it vouches for rows 1..S whatever the store's checkpoints
    table holds (spec 11.6). None otherwise (its own findings say why), and when a stored checkpoint that counts
    covers S already (`attested`: the newest one's size; the store's tree is then not read)."""
    if since is None or since.note is None or since.origin != origin or not attested < since.seq <= max_seq:
        return None
    roots = _TreeRoots(snapshot, max_seq)
    if roots.at(since.seq) != since.root:
        return None
    try:
        verified, _ = trusted_signers(since.note, keys)
    except NoteError:
        return None
    for key in verified:
        if _counts(states.of_key(key), since, roots) is None:
            return since.seq, label(key)
    return None


__all__ = [
    "HandoverFiles", "KeyStateSurvey", "apply_attestation", "configured_states", "handover_by", "note_problem",
    "published_rotations", "since_vouched", "survey_key_states", "untold_rotation",
]
