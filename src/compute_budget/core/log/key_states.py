"""Writer keys that change (rotated, revoked: spec 11): each key's state, and whether one of its signatures counts.
Pure: the key files behind `KEY` are read by the caller, which hands in a resolver.

* active: every signature counts.
* retired at SIZE (`--retired KEY@SIZE`, after `rotate` handed the log over at SIZE): a signature on a checkpoint
  of size at most SIZE counts; above SIZE it is `retired at SIZE`.
* revoked at SIZE with ROOT (`--revoked KEY@SIZE:ROOT`, after the key leaked): a signature counts only on a
  checkpoint of size at most SIZE proven consistent with (SIZE, ROOT) (by the store's tree in the audit; offline by
  being exactly (SIZE, ROOT), or by the witness quorum); anything else is `revoked at SIZE`.

A *handover* is a checkpoint note carrying two or more writer (Ed25519 note) signatures: the first is the key
handing the log over, the others the keys taking it (the note `rotate` stores).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

from compute_budget.core.log.encoding import strict_b64decode
from compute_budget.core.log.note import ParsedNote, Signature, VerifierKey, parse_note, verify_note
from compute_budget.errors import InputError, KeyStateError, NoteError

NOTE_SIGNATURE_BYTES = 64  # an Ed25519 note signature; cosignatures carry a timestamp too, so they are longer


class KeyStatus(StrEnum):
    """What a writer key may still sign."""

    ACTIVE = "active"
    RETIRED = "retired"
    REVOKED = "revoked"


@dataclass(frozen=True, slots=True)
class KeyState:
    """One writer key's state: `status`, and for a retired or revoked key the `size` (and, revoked, the `root`)."""

    key: VerifierKey
    status: KeyStatus = KeyStatus.ACTIVE
    size: int = 0
    root: bytes | None = None

    def words(self) -> str:
        """``active``, ``retired at SIZE`` or ``revoked at SIZE``: the reason findings give."""
        return "active" if self.status is KeyStatus.ACTIVE else f"{self.status.value} at {self.size}"

    def label(self) -> str:
        """The key as findings name it: ``name+hash``."""
        return f"{self.key.name}+{self.key.key_hash:08x}"


def parse_key_state(text: str, status: KeyStatus, resolve: Callable[[str], VerifierKey]) -> KeyState:
    """`KEY@SIZE` (retired) or `KEY@SIZE:ROOT` (revoked; ROOT in standard base64 of 32 bytes): split at the last
    ``@``, then the last ``:``. `resolve` turns KEY (verifier key text or a file) into a key. `KeyStateError`, one
    line naming the option, for anything else."""
    option = f"--{status.value}"
    shape = "KEY@SIZE:ROOT" if status is KeyStatus.REVOKED else "KEY@SIZE"
    key_text, at, rest = text.rpartition("@")
    if not at or not key_text:
        raise KeyStateError(f"{option} {text!r}: expected {shape}")
    size_text, root = rest, None
    if status is KeyStatus.REVOKED:
        size_text, colon, root_text = rest.rpartition(":")
        if not colon:
            raise KeyStateError(f"{option} {text!r}: expected {shape} (the root after the last ':')")
        root = _root(root_text, option)
    if not size_text.isascii() or not size_text.isdigit() or (len(size_text) > 1 and size_text[0] == "0"):
        raise KeyStateError(f"{option} {text!r}: SIZE must be a tree size in decimal, not {size_text!r}")
    size = int(size_text)
    if size >= 2**63:
        raise KeyStateError(f"{option} {text!r}: SIZE must be below 2^63")
    try:
        key = resolve(key_text)
    except (InputError, OSError, ValueError) as error:
        raise KeyStateError(f"{option} {text!r}: {error}") from None
    return KeyState(key, status, size, root)


def _root(text: str, option: str) -> bytes:
    root = strict_b64decode(text)
    if root is None or len(root) != 32:
        raise KeyStateError(f"{option}: ROOT must be the standard base64 of a 32-byte tree root, not {text!r}")
    return root


@dataclass(frozen=True, slots=True)
class KeyStates:
    """The configured states of writer keys (each key at most once; a key not named is active)."""

    states: tuple[KeyState, ...] = ()

    @classmethod
    def of(cls, states: Iterable[KeyState]) -> KeyStates:
        """The states, refusing a key given twice (`KeyStateError`): its two states would contradict."""
        seen: dict[VerifierKey, KeyState] = {}
        for state in states:
            if state.key in seen and seen[state.key] != state:
                raise KeyStateError(f"key {state.label()} is given twice ({seen[state.key].words()}, {state.words()})")
            seen[state.key] = state
        return cls(tuple(seen.values()))

    def of_key(self, key: VerifierKey) -> KeyState:
        """The key's state (active when it is not named)."""
        for state in self.states:
            if state.key == key:
                return state
        return KeyState(key)

    def limited(self) -> tuple[KeyState, ...]:
        """The retired and revoked keys."""
        return tuple(state for state in self.states if state.status is not KeyStatus.ACTIVE)


def signature_problem(state: KeyState, size: int, root: bytes | None, *, proven: bool = False) -> str | None:
    """None when a signature of `state.key` on a checkpoint of (`size`, `root`) counts; else the reason words
    (``retired at SIZE`` / ``revoked at SIZE``). `proven`: the checkpoint was proven consistent with the
    revocation's (SIZE, ROOT) otherwise (the store's tree, or the witness quorum); being exactly it is proof."""
    if state.status is KeyStatus.ACTIVE:
        return None
    if size > state.size:
        return state.words()
    if state.status is KeyStatus.RETIRED:
        return None
    exact = size == state.size and root == state.root
    return None if exact or proven else state.words()


def vouches_for_chain(states: KeyStates, signers: Iterable[VerifierKey]) -> bool:
    """True when a note's `chain` line is covered: one of its verified trusted `signers` does not stand revoked. A
    note only revoked keys signed counts offline for its size and root alone (they can be checked against the
    revocation's or the tree's; a chain line the thief wrote cannot)."""
    return any(states.of_key(key).status is not KeyStatus.REVOKED for key in signers)


@dataclass(frozen=True, slots=True)
class Handover:
    """A handover note's writer signatures: `giver` (the first), and `takers` (the others)."""

    giver: Signature
    takers: tuple[Signature, ...]


def handover_in(note: str | ParsedNote) -> Handover | None:
    """The handover a note is (two or more writer signatures), or None (`NoteError` if it is malformed)."""
    _, signatures = note if isinstance(note, ParsedNote) else parse_note(note)
    writers = [signature for signature in signatures if len(signature.signature) == NOTE_SIGNATURE_BYTES]
    if len(writers) < 2:
        return None
    return Handover(writers[0], tuple(writers[1:]))


def verified_handover(
    note: str, givers: Iterable[VerifierKey], takers: Iterable[VerifierKey]
) -> tuple[VerifierKey, VerifierKey] | None:
    """(giver, taker) when `note` is a handover whose first writer signature verifies under one of `givers` and a
    later one under one of `takers`; else None. A note counts as a handover only so: anyone who can write the
    checkpoints table can append a line that merely looks like a taker's signature to a note the giver signed."""
    try:
        parsed = parse_note(note)
        handover = handover_in(parsed)
    except NoteError:
        return None
    if handover is None:
        return None
    giver = next((key for key in givers if is_key(handover.giver, key)), None)
    if giver is None:
        return None
    claimed = [key for key in takers if key != giver and any(is_key(item, key) for item in handover.takers)]
    try:
        outcome = verify_note(parsed, [giver, *claimed])
    except NoteError:
        return None
    if giver not in outcome.verified or giver in outcome.failed:
        return None
    taker = next((key for key in claimed if key in outcome.verified and key not in outcome.failed), None)
    return None if taker is None else (giver, taker)


def is_key(signature: Signature, key: VerifierKey) -> bool:
    """True when `signature` claims `key` (name and key hash; whether it verifies is the caller's)."""
    return (signature.name, signature.key_hash) == (key.name, key.key_hash)


__all__ = [
    "Handover",
    "KeyState",
    "KeyStates",
    "KeyStatus",
    "handover_in",
    "is_key",
    "parse_key_state",
    "signature_problem",
    "verified_handover",
    "vouches_for_chain",
]
