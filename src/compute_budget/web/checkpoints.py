"""The checkpoints page: the head's checkpoint to keep (or why none is offered), the `--trusted-key` keys as the
audit reads them (`keys.key_files.verifier_key`, the core's key parser), and the newest signed checkpoints with who
signed them, whether a trusted key verifies them and whether their roots still match the rows."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from compute_budget.auditor.key_states import note_problem
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.key_states import KeyStates
from compute_budget.core.log.note import VerifierKey, parse_note, verify_note
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
    """The newest signed checkpoints, each with its root, its signers, and whether a trusted key verifies it."""
    items: list[dict[str, Any]] = []
    for _, tree_size, note in store.newest_signed_checkpoints():
        if tree_size is None or note is None:
            items.append({"tree_size": "?", "root": "", "signers": [], "root_check": "unreadable",
                          "trusted": "unreadable: a value is not of its column's type (run `compute-budget audit`)"})
            continue
        item = _signed_item(tree_size, note, verifiers, tree_size in mismatched, checked)
        problem = judge(note)  # a retired or revoked key's signature that does not count (spec 11.7.4)
        if problem is not None:
            item["trusted"] += f" (but {problem})"
        items.append(item)
    return items


def _signed_item(
    tree_size: int, note: str, verifiers: Sequence[VerifierKey], mismatched: bool, checked: Checked | None
) -> dict[str, Any]:
    """One stored signed checkpoint as the page lists it."""
    try:
        found = Checkpoint.from_note(note)
        _, signatures = parse_note(note)
        outcome = verify_note(note, list(verifiers)) if verifiers else None
    except (NoteError, ValueError) as error:
        return {"tree_size": tree_size, "root": "", "signers": [], "trusted": f"unreadable: {error}",
                "root_check": "unreadable"}
    if outcome is None:
        trusted = "no key given"
    elif outcome.failed:
        trusted = "FAILS: " + ", ".join(key.name for key in outcome.failed)
    elif outcome.verified:
        trusted = "yes: " + ", ".join(key.name for key in outcome.verified)
    else:
        trusted = "no trusted signature"
    if mismatched:
        trusted += " (but the last audit found this root no longer matches the rows: do not keep it)"
    return {
        "tree_size": tree_size,
        "root": base64.b64encode(found.root).decode("ascii") if found.root is not None else "",
        "signers": [f"{signature.name}+{signature.key_hash:08x}" for signature in signatures],
        "trusted": trusted,
        "root_check": _root_check(tree_size, checked),
    }
