"""The publication viewer's checkpoint: read from the publication, verified before anything it names is shown
(a trusted writer's signature that counts under `--retired`/`--revoked`, the `--origin`, the witness quorum), and
re-read at most once a minute. A checkpoint read later must verify and be consistent with the last one shown (a
consistency proof from the tiles); one that is not raises the `publication rolled back or forked` alarm, which
stays for the server's life, and the last good tree is kept: a mirror that serves an older or another tree is
evidence, not an update."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.cosignature import WitnessKey, valid_cosignatures
from compute_budget.core.log.key_states import NOTE_SIGNATURE_BYTES, KeyStates, is_key, signature_problem
from compute_budget.core.log.merkle import consistency_proof, verify_consistency
from compute_budget.core.log.note import Signature, VerifierKey, verify_note
from compute_budget.core.log.tile_reader import TileNodeReader
from compute_budget.core.log.witness_policy import TlogPolicy
from compute_budget.errors import (
    ArgumentTypeError,
    ComputeBudgetError,
    MerkleError,
    NoteError,
    TileError,
    TileMissing,
    UntrustedCheckpoint,
)
from compute_budget.publication_reader.fetch import CHECKPOINT_LIMIT, Fetcher
from compute_budget.publication_reader.receipt import PublishedTiles
from compute_budget.publication_reader.snapshot import Publication, PublicationTarget

# Spec 11.8: the checkpoint is re-read at most this often.
REREAD_SECONDS = 60.0
ALARM = "publication rolled back or forked"


@dataclass(frozen=True, slots=True)
class Trust:
    """What a checkpoint must carry to be shown: the log's `origin`, a signature by one of `keys` that counts under
    `states`, and the witness quorum of `rule` (None: no witnesses)."""

    origin: str
    keys: tuple[VerifierKey, ...]
    rule: TlogPolicy | None = None
    states: KeyStates = field(default_factory=KeyStates)

    def writers(self) -> tuple[VerifierKey, ...]:
        """The writer keys: `keys` and the policy's log keys for this origin."""
        logs = self.rule.store_log_keys(self.origin) if self.rule is not None and self.rule.logs else ()
        return tuple(dict.fromkeys([*self.keys, *logs]))


@dataclass(frozen=True, slots=True)
class Signer:
    """One signature line of the checkpoint as the page shows it: who it claims to be and what it is worth."""

    name: str
    key_id: str
    cosigner: bool  # a witness's cosignature (or any line that is not a writer's Ed25519 signature)
    verdict: str

    def to_dict(self) -> dict[str, object]:
        """The JSON form."""
        return {"name": self.name, "key_id": self.key_id, "cosigner": self.cosigner, "verdict": self.verdict}


@dataclass(frozen=True, slots=True)
class Verified:
    """A checkpoint that verified: parsed, its note text, each signature line judged, and when it was read."""

    checkpoint: Checkpoint
    note: str
    signers: tuple[Signer, ...]
    read_at: float

    @property
    def size(self) -> int:
        """The tree size."""
        return self.checkpoint.seq

    @property
    def root(self) -> bytes:
        """The tree's root (a verified checkpoint always has one)."""
        assert self.checkpoint.root is not None
        return self.checkpoint.root


def verify(note: str, trust: Trust, *, now: float | None = None) -> Verified:
    """The checkpoint `note`, verified under `trust`; `UntrustedCheckpoint` (one line) when it is not."""
    moment = time.time() if now is None else now
    try:
        found = Checkpoint.from_note(note, source="the published checkpoint")
    except (ComputeBudgetError, ValueError) as error:
        raise UntrustedCheckpoint(f"untrusted checkpoint: {error}") from None
    if found.origin != trust.origin or found.root is None:
        raise UntrustedCheckpoint(f"checkpoint of another log: {found.origin}, not {trust.origin} (--origin)")
    try:
        outcome = verify_note(note, list(trust.writers()))
    except NoteError as error:
        raise UntrustedCheckpoint(f"untrusted checkpoint: {error}") from None
    counting = [key for key in outcome.verified
                if signature_problem(trust.states.of_key(key), found.seq, found.root) is None]
    if outcome.failed or not counting:
        why = "a signature by a --trusted-key does not verify" if outcome.failed else (
            "no signature by a --trusted-key that counts")
        raise UntrustedCheckpoint(f"untrusted checkpoint: {why} (size {found.seq})")
    cosigned = {item.key: item.timestamp for item in valid_cosignatures(note, trust.rule.witness_keys,
                                                                          now=int(moment))} if trust.rule else {}
    if trust.rule is not None and trust.rule.requires_witnesses:
        tally = trust.rule.tally(cosigned)
        if not tally.met:
            raise UntrustedCheckpoint(
                f"untrusted checkpoint: it carries {trust.rule.count_words(tally.counted)} by the witnesses"
            )
    signers = tuple(_judged(signature, found, trust, set(outcome.verified), cosigned)
                    for signature in found.signatures())
    return Verified(found, note, signers, moment)


def _judged(signature: Signature, found: Checkpoint, trust: Trust, verified: set[VerifierKey],
            cosigned: dict[WitnessKey, int]) -> Signer:
    """One signature line in words: a trusted writer's that counts (or why not), a witness's cosignature and its
    time, or a line by a key that was not given (not checked)."""
    cosigner = len(signature.signature) != NOTE_SIGNATURE_BYTES
    key_id = f"{signature.key_hash:08x}"
    for key in verified:
        if is_key(signature, key):
            problem = signature_problem(trust.states.of_key(key), found.seq, found.root)
            verdict = f"trusted writer key, verified, but it does not count: {problem}" if problem else (
                f"trusted writer key ({trust.states.of_key(key).words()}), verified")
            return Signer(signature.name, key_id, False, verdict)
    for witness, stamp in cosigned.items():
        if (witness.name, witness.key_id) == (signature.name, signature.key_hash):
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))
            return Signer(signature.name, key_id, True, f"witness cosignature, verified, made {when}")
    return Signer(signature.name, key_id, cosigner, "not a key this viewer was given: not checked")


def inconsistency(last: Verified, new: Verified, publication: Publication) -> str | None:
    """Why `new` is not an extension of `last` (a rollback, a fork, tiles that prove no consistency), or None."""
    old_size, size = last.size, new.size
    if size < old_size:
        return f"the checkpoint now published is of size {size}, smaller than the one shown (size {old_size})"
    if size == old_size:
        if new.root != last.root or new.checkpoint.chain_hash != last.checkpoint.chain_hash:
            return f"the checkpoint now published names another tree of size {size} than the one shown"
        return None
    if old_size == 0:
        return None
    try:
        proof = consistency_proof(TileNodeReader(size, new.root, PublishedTiles(publication)), old_size, size)
    except TileMissing:
        raise  # not evidence: a publication mid-way, or a mirror behind; the caller tries again later
    except (MerkleError, TileError, ArgumentTypeError) as error:
        return f"its tiles prove no consistency of size {size} with the tree shown (size {old_size}): {error}"
    if not verify_consistency(old_size, size, last.root, new.root, proof):
        return f"the tree of size {size} now published does not extend the one shown (size {old_size})"
    return None


@dataclass(frozen=True, slots=True)
class Seen:
    """What the viewer shows now: the last good checkpoint, the alarm (once raised, kept), and why the last
    re-read could not be used when it failed for another reason (an outage, not evidence)."""

    good: Verified
    alarm: str | None
    unreadable: str | None


class CheckpointWatch:
    """The last good checkpoint of a publication, re-read at most every `max_age` seconds (see the module)."""

    def __init__(self, target: PublicationTarget, trust: Trust, *, max_age: float = REREAD_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._target, self._trust, self._max_age, self._clock = target, trust, max_age, clock
        self._lock = threading.Lock()
        # Unreadable (PublicationUnavailable) or untrusted (UntrustedCheckpoint): raised before anything is served.
        self._seen = Seen(verify(self._fetch(), trust), None, None)
        self._read_at = clock()

    @property
    def trust(self) -> Trust:
        """What a checkpoint must carry."""
        return self._trust

    def current(self, *, force: bool = False) -> Seen:
        """What to show now, after re-reading the checkpoint when the last read is `max_age` old (or `force`)."""
        with self._lock:
            if force or self._clock() - self._read_at >= self._max_age:
                self._seen = self._reread(self._seen)
                self._read_at = self._clock()
            return self._seen

    def publication(self, seen: Seen) -> Publication:
        """The publication read at `seen`'s good checkpoint (pinned: its rows are those that tree holds)."""
        return self._pinned(seen.good.note)

    def _fetch(self) -> str:
        """The checkpoint's text as published now, fetched within 10.2's bounds (`PublicationUnavailable`)."""
        fetcher = Fetcher(self._target.location, self._target.timeout, self._target.retries)
        return fetcher.read("checkpoint", CHECKPOINT_LIMIT).decode("utf-8", "replace")

    def _pinned(self, note: str) -> Publication:
        return Publication(PublicationTarget(self._target.location, self._target.timeout, self._target.retries,
                                             checkpoint=note))

    def _reread(self, seen: Seen) -> Seen:
        try:
            note = self._fetch()
        except ComputeBudgetError as error:  # an outage, not evidence: tried again at the next re-read
            return Seen(seen.good, seen.alarm, f"the checkpoint could not be read again: {error}")
        if note == seen.good.note:
            return Seen(seen.good, seen.alarm, None)
        try:
            new = verify(note, self._trust)
        except UntrustedCheckpoint as error:
            return Seen(seen.good, _alarm(seen, f"the checkpoint now published does not verify ({error})"), None)
        try:
            problem = inconsistency(seen.good, new, self._pinned(note))
        except ComputeBudgetError as error:  # a tile that cannot be fetched now: an outage, tried again later
            return Seen(seen.good, seen.alarm, f"the new checkpoint's tiles could not be read: {error}")
        if problem is not None:
            return Seen(seen.good, _alarm(seen, problem), None)
        return Seen(new, seen.alarm, None)


def _alarm(seen: Seen, problem: str) -> str:
    """The alarm's text: the first problem seen is kept (the evidence), a later one is said beside it."""
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    text = (f"{ALARM}: {problem} (seen {when}). This viewer keeps showing the last good tree (size "
            f"{seen.good.size}); keep a copy of the publication's files as evidence and tell the publisher.")
    return text if seen.alarm is None else seen.alarm
