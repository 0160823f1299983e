"""The checkpoints page: the head's checkpoint to keep (or why none is offered), the `--trusted-key` keys as the
audit reads them (`keys.key_files.verifier_key`, the core's key parser), and the newest signed checkpoints with who
signed them, whether a trusted key verifies them and whether their roots still match the rows."""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from compute_budget.auditor.key_states import note_problem
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.key_states import NOTE_SIGNATURE_BYTES, KeyStates, handover_in
from compute_budget.core.log.note import Signature, VerifierKey, parse_note, verify_note
from compute_budget.errors import ComputeBudgetError, NoteError, StoreDamaged
from compute_budget.keys.key_files import verifier_key
from compute_budget.store import BudgetStore
from compute_budget.web.report import mismatched_sizes
from compute_budget.web.rows import detail_href

# (through seq, mismatched sizes, which audit) of the last audit this server ran from seq 0.
Checked = tuple[int, frozenset[int], str]


@dataclass(frozen=True, slots=True)
class TrustedKey:
    """A `--trusted-key` as given: a verifier key (`name+keyhash+base64`) or a file holding one."""

    given: str
    key: str | None
    name: str | None
    key_hash: str | None
    problem: str | None
    verifier: VerifierKey | None = None
    # active, retired at N, revoked at N (`serve --retired/--revoked`); None for a key that cannot be used, which is
    # in no state at all (calling it "active" would dress a forgery up as a signer).
    state: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (the key as given, as read, why it cannot be used, and its state)."""
        return {"given": self.given, "key": self.key, "name": self.name, "key_hash": self.key_hash,
                "problem": self.problem, "state": self.state}


def trusted_key(given: str, states: KeyStates | None = None) -> TrustedKey:
    """Read a `--trusted-key` value as the audit does (key text first, else a file holding one) and name its
    signer and its state in `states`; never raises: a key that cannot be used says why."""
    try:
        key = verifier_key(given)
    except ComputeBudgetError as error:
        return TrustedKey(given, None, None, None, f"not a verifier key (name+keyhash+base64): {error}", None, None)
    state = (states or KeyStates()).of_key(key).words()
    return TrustedKey(given, key.format(), key.name, f"{key.key_hash:08x}", None, key, state)


@dataclass(frozen=True, slots=True)
class SignedCheckpoints:
    """The store's signed checkpoints: its table, if any, and the newest of them."""

    table: str | None
    items: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {"table": self.table, "items": self.items}


@dataclass(frozen=True, slots=True)
class Checkpoints:
    """The checkpoints page: the head's checkpoint, the trusted keys, and the signed checkpoints."""

    head: Checkpoint | None  # None when the head cannot be read (then `head_problem` says why)
    head_href: str | None
    document: str
    trusted_keys: Sequence[TrustedKey]
    signed: SignedCheckpoints
    head_problem: str | None = None
    withheld: str | None = None  # why no checkpoint of the head is offered to keep (None: it is offered)


def checkpoints(
    store: BudgetStore,
    keys: Sequence[str],
    audit_report: str | None = None,
    checked: Checked | None = None,
    withheld: str | None = None,
    states: KeyStates | None = None,
) -> Checkpoints:
    """The checkpoints page's content (a head that cannot be read is said, not a failed page). With the last
    audit's report, a checkpoint whose size it found mismatched says so beside its signature: a valid signature
    says who signed, not that the rows still match. `checked`: (through seq, mismatched sizes, which audit) of the
    last audit this server ran from seq 0, which says for each checkpoint it covered whether its root matches.
    `withheld`: why the head's checkpoint must not be kept now (a broken guard, a row that does not hold): then
    none is offered. `states` (spec 11): each key's state, and a signature of a retired or revoked key that does
    not count says so."""
    trusted = [trusted_key(key, states) for key in keys]
    verifiers = [key.verifier for key in trusted if key.verifier is not None]
    limited = states if states is not None and states.limited() else None

    def judge(note: str) -> str | None:
        if limited is None:
            return None
        with store.snapshot() as snapshot:  # judged by the store's tree, as the audit judges it
            return note_problem(snapshot, note, limited, snapshot.max_seq())

    items = _signed_items(store, verifiers, mismatched_sizes(audit_report), checked, judge)
    signed = SignedCheckpoints(store.signed_checkpoint_table(), items)
    if withheld is not None:
        return Checkpoints(None, None, "", trusted, signed, withheld=withheld)
    try:
        head = store.checkpoint()
    except StoreDamaged as error:
        return Checkpoints(None, None, "", trusted, signed, head_problem=str(error))
    return Checkpoints(
        head=head,
        head_href=detail_href(head.budget_id) if head.budget_id else None,
        document=json.dumps(head.to_dict(), indent=2),
        trusted_keys=trusted,
        signed=signed,
    )


def _root_check(tree_size: int, checked: Checked | None) -> str:
    """Whether a stored checkpoint's root matches the rows, as far as an audit this server ran knows."""
    if checked is None or tree_size > checked[0]:
        return "not checked since the server started: run the audit (from seq 0) to check it"
    _, bad, which = checked
    return f"NO ({which}): the rows no longer give this root" if tree_size in bad else f"yes ({which})"


def _signed_items(
    store: BudgetStore, verifiers: Sequence[VerifierKey], mismatched: frozenset[int], checked: Checked | None,
    judge: Callable[[str], str | None],
) -> list[dict[str, Any]]:
    """The newest signed checkpoints, one item per checkpoint (the entries of one size and root merged: a handover
    is filed beside the old key's own checkpoint), each with its root, signers, cosigners, a handover mark, and
    whether a trusted key verifies it."""
    unreadable: dict[str, Any] = {
        "tree_size": "?", "root": "", "short_root": "", "signers": [], "cosigners": [], "handover": None,
        "root_check": "unreadable",
        "trusted": "unreadable: a value is not of its column's type (run `compute-budget audit`)",
    }
    merged: dict[tuple[int, str] | int, list[str]] = {}
    for place, (_, tree_size, note) in enumerate(store.newest_signed_checkpoints()):
        merged.setdefault((tree_size, _root_of(note)) if tree_size is not None and note is not None else place,
                          []).extend([note] if note is not None else [])
    with store.snapshot() as snapshot:  # each checkpoint's stored cosignatures, read at once
        cosigned = {key: [line for note in notes for line in snapshot.cosignatures_of(_body(note), key[0])]
                    for key, notes in merged.items() if isinstance(key, tuple)}
    return [
        _signed_item(key[0], merged[key], cosigned[key], verifiers, key[0] in mismatched, checked, judge)
        if isinstance(key, tuple) else dict(unreadable)
        for key in merged
    ]


def _body(note: str) -> str:
    """A note's text, without its signatures (what cosignatures are filed under)."""
    return note.split("\n\n")[0] + "\n"


def _root_of(note: str) -> str:
    """A note's root line (its third), to tell checkpoints apart without parsing them twice."""
    lines = note.split("\n")
    return lines[2] if len(lines) > 2 else ""


def _signed_item(
    tree_size: int, notes: list[str], cosigned: list[str], verifiers: Sequence[VerifierKey], mismatched: bool,
    checked: Checked | None, judge: Callable[[str], str | None],
) -> dict[str, Any]:
    """One stored signed checkpoint (its stored notes) as the page lists it."""
    try:
        found = Checkpoint.from_note(notes[0])
        signatures = [signature for note in notes for signature in parse_note(note + "".join(cosigned))[1]]
        outcomes = [verify_note(note, list(verifiers)) for note in notes] if verifiers else []
        handovers = [handover for handover in map(handover_in, notes) if handover is not None]
    except (NoteError, ValueError) as error:
        return {"tree_size": tree_size, "root": "", "short_root": "", "signers": [], "cosigners": [],
                "handover": None, "trusted": f"unreadable: {error}", "root_check": "unreadable"}
    failed = list(dict.fromkeys(key.name for outcome in outcomes for key in outcome.failed))
    verified = list(dict.fromkeys(key.name for outcome in outcomes for key in outcome.verified))
    trusted = ("no key given" if not verifiers else "FAILS: " + ", ".join(failed) if failed
               else "yes: " + ", ".join(verified) if verified else "no trusted signature")
    problem = next((reason for reason in map(judge, notes) if reason is not None), None)
    if problem is not None:  # a retired or revoked key's signature that does not count (spec 11.7.4)
        trusted += f" (but {problem})"
    if mismatched:
        trusted += " (but the last audit found this root no longer matches the rows: do not keep it)"
    root = base64.b64encode(found.root).decode("ascii") if found.root is not None else ""
    writers = [signature for signature in signatures if len(signature.signature) == NOTE_SIGNATURE_BYTES]
    return {
        "tree_size": tree_size, "root": root, "short_root": root[:12] + "…" if root else "",
        "signers": list(dict.fromkeys(_label(signature) for signature in writers)),
        "cosigners": list(dict.fromkeys(_label(signature) for signature in signatures if signature not in writers)),
        "handover": (f"{_label(handovers[0].giver)} handed over to "
                     f"{', '.join(_label(taker) for taker in handovers[0].takers)}") if handovers else None,
        "trusted": trusted,
        "root_check": _root_check(tree_size, checked),
    }


def _label(signature: Signature) -> str:
    return f"{signature.name}+{signature.key_hash:08x}"


def said_once(items: Sequence[dict[str, Any]]) -> tuple[dict[str, str], list[list[str]]]:
    """What the checkpoints table says once, above it (the trusted signature and the root check most rows share),
    and for each item what it says apart from that (empty for an item like the others)."""
    common: dict[str, str] = {}
    for name in ("trusted", "root_check"):
        values = Counter(str(item[name]) for item in items)
        if values:
            common[name] = values.most_common(1)[0][0]
    notes = [[str(item[name]) for name in common if str(item[name]) != common[name]] for item in items]
    return common, notes
