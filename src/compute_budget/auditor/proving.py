"""Proofs a third party checks without the database (spec section 8): a decision's inclusion bundle, the
consistency of the store with an older checkpoint, and the auditor's cosignature of a head it has verified.

`prove` and `prove_consistency` read a store; their verifiers (`core.receipts.verify_proof`,
`core.receipts.verify_consistency`) need nothing but the bundle, the document and keys.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from compute_budget.auditor.checkpoints import CheckpointLike, as_checkpoint, policy_log_keys, witness_policy
from compute_budget.auditor.key_states import note_problem
from compute_budget.auditor.report import AuditReport
from compute_budget.auditor.source import LogView as Snapshot
from compute_budget.auditor.source import open_source
from compute_budget.auditor.witness_rules import WitnessRequirement
from compute_budget.core.leaf import row_leaf_hash
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.cosignature import WitnessKey, with_cosignatures
from compute_budget.core.log.key_states import KeyStates
from compute_budget.core.log.merkle import consistency_proof, inclusion_proof, verify_inclusion
from compute_budget.core.log.note import (
    ParsedNote,
    Signature,
    SignerKey,
    VerifierKey,
    add_signature,
    parse_note,
    sign_note,
    verified_signatures,
)
from compute_budget.core.log.witness_policy import QuorumTally, TlogPolicy
from compute_budget.core.receipts import ConsistencyProof, ProofBundle, row_from_values
from compute_budget.core.row import named
from compute_budget.core.seal_checks import extends, signature_problem, trusted_signers
from compute_budget.errors import (
    ArgumentTypeError,
    AuditError,
    CheckpointError,
    MerkleError,
    NotConsistent,
    NoteError,
    ProofError,
    StoreDamaged,
    StoreUnavailable,
    UnknownBudgetId,
)
from compute_budget.keys.key_files import verifier_key


def prove(
    budget_id: str,
    target: str | os.PathLike[str] | None = None,
    *,
    checkpoint: CheckpointLike | None = None,
    trusted_keys: Iterable[VerifierKey | str | os.PathLike[str]] = (),
    witness_keys: Iterable[WitnessKey | str | os.PathLike[str]] = (),
    witness_quorum: int | None = None,
    key_states: KeyStates | None = None,
    witness_policy: TlogPolicy | None = None,
) -> ProofBundle:
    """The proof bundle of the decision `budget_id` in the store at `target` (spec section 8).

    Its checkpoint is `checkpoint` when given (a signed note, or a checkpoint with origin and root), else the
    newest stored signed checkpoint covering the row, else the head's note without a signature; with
    `witness_keys` (spec 9.3), the newest covering checkpoint that `witness_quorum` (default: all) of them
    cosigned (`ProofError` when none did); `witness_policy` (C2SP tlog-policy) instead: its witnesses and quorum,
    and its `log` keys as trusted keys. With `trusted_keys` (the writers' verifier keys), only a note whose
    signature by one of them verifies is used: the newest stored one covering the row (`ProofError` when there
    is none), and a given `checkpoint` must verify too. Without them the stored note is used unverified, so a
    newer note planted in the store fails at `verify_proof`. The note carries every stored cosignature of its
    text. Raises `UnknownBudgetId` when no such decision is stored, `ProofError` when the checkpoint does not
    cover the row or is not of this store, `StoreDamaged` when the stored tree does not prove the row against it.
    `key_states` (spec 11): a note whose signature by a retired or revoked key does not count is passed over when
    chosen from the store, and refused (`ProofError`) when given.
    """
    writers = [verifier_key(item) for item in trusted_keys]  # read (a bad key is one error) before the store opens
    policy = _policy(witness_keys, witness_quorum, witness_policy)
    with open_source(target) as store, store.snapshot() as snapshot:  # origin: the log keys' name
        given, keys = _given_and_keys(checkpoint, policy_log_keys(writers, witness_policy, snapshot.origin()))
        raw = snapshot.raw_row(budget_id)
        if raw is None:
            raise UnknownBudgetId(f"no decision with budget_id {budget_id} in {store.location.display}")
        row = named(raw)
        seq = row.seq
        if type(seq) is not int or seq < 1:
            raise StoreDamaged(f"row {budget_id} has seq {seq!r}, not a positive integer: run `compute-budget audit`")
        origin = snapshot.origin()
        head = snapshot.max_seq()
        note = _chosen_note(snapshot, given, keys, policy, key_states or KeyStates(), seq, head, origin,
                            store.location.display)
        note = _with_stored_cosignatures(snapshot, note, policy)
        if policy is not None and not policy.tally(_lines(note), parse_note(note)[0]).met:
            raise ProofError(f"the given checkpoint carries fewer than {policy.quorum} cosignatures by witness keys")
        found = Checkpoint.from_note(note)
        size = found.seq
        try:
            path = inclusion_proof(snapshot.tree(size), seq - 1, size)
        except MerkleError as error:
            raise StoreDamaged(f"cannot prove row {seq}: {error}; run `compute-budget audit`") from None
        leaf = row_leaf_hash(row.chained)
        if found.root is None or not verify_inclusion(leaf, seq - 1, size, path, found.root):
            raise StoreDamaged(
                f"the stored tree does not prove row {seq} against the checkpoint of size {size}: the rows or the "
                "stored tree changed since it was made; run `compute-budget audit`"
            )
    values = row_from_values(row)
    if seq != size:
        del values["chain_hash"]  # spec 9.6: the note names only the last leaf's chain hash; any other is uncovered
    return ProofBundle(values, seq - 1, size, tuple(path), note)


def _chosen_note(
    snapshot: Snapshot, given: Checkpoint | None, keys: list[VerifierKey], policy: WitnessRequirement | None,
    states: KeyStates, seq: int, head: int, origin: str | None, where: str,
) -> str:
    """The note a bundle carries before its cosignatures: witnessed, trusted, given or stored (see `prove`); one
    whose signature by a retired or revoked key does not count is passed over, or refused when given."""
    if policy is not None and given is None:
        note = _witnessed_note_for(snapshot, policy, seq, head, where, keys)
    elif keys and given is None:
        note = _trusted_note_for(snapshot, keys, seq, head, origin, where,
                                 lambda text: note_problem(snapshot, text, states, head) is None)
    else:
        note = _note_for(snapshot, given, seq, head, origin, where)
    problem = note_problem(snapshot, note, states, head)
    if problem is not None:
        raise ProofError(f"the checkpoint is not used for a receipt: {problem}")
    return note


def _note_for(
    snapshot: Snapshot, given: Checkpoint | None, seq: int, head: int, origin: str | None, where: str
) -> str:
    """The checkpoint note a bundle carries (see `prove`)."""
    if origin is None:
        raise ProofError(f"{where} has no origin yet: nothing can be proven before its first append")
    if given is not None:
        if not given.has_root:
            raise ProofError("the given checkpoint names no origin and tree root (an older JSON checkpoint)")
        if given.origin != origin:
            raise ProofError(f"the given checkpoint is of log {given.origin}, this store is {origin}")
        if given.seq < seq:
            raise ProofError(f"the given checkpoint covers {given.seq} rows; row {seq} is not among them")
        if given.seq > head:
            raise ProofError(f"the given checkpoint names {given.seq} rows; the store holds {head}")
        return given.note if given.note is not None else given.note_text()
    stored = snapshot.newest_covering(seq, head)
    if stored is not None:
        return stored.note
    chain = snapshot.chain_at(head)
    if chain is None:
        raise StoreDamaged(f"the chain head (seq {head}) cannot be read: run `compute-budget audit`")
    root = snapshot.frontier(head).root()
    return Checkpoint(head, chain, None, origin, root).note_text()


def _policy(
    witness_keys: Iterable[WitnessKey | str | os.PathLike[str]], quorum: int | None, rule: TlogPolicy | None
) -> WitnessRequirement | None:
    try:
        return witness_policy(witness_keys, quorum, 0, rule)
    except ArgumentTypeError as error:
        raise ProofError(str(error)) from None


def _lines(note: str) -> list[str]:
    return [signature.line() for signature in parse_note(note)[1]]


def _with_stored_cosignatures(snapshot: Snapshot, note: str, policy: WitnessRequirement | None) -> str:
    """`note` with the stored cosignatures of its text (only those valid under the witness keys, when given)."""
    try:
        text = parse_note(note)[0]
        size = Checkpoint.from_note(note).seq
    except (NoteError, CheckpointError):
        return note
    stored = snapshot.cosignatures_of(text, size)
    if policy is not None:
        stored = [line for line in stored if policy.tally([line], text).valid == 1]
    lines: list[Signature] = []
    for line in stored:
        try:
            lines.extend(parse_note(text + "\n" + line)[1])
        except NoteError:
            continue
    return with_cosignatures(note, lines)


def _witnessed_note_for(
    snapshot: Snapshot, policy: WitnessRequirement, seq: int, head: int, where: str, keys: list[VerifierKey]
) -> str:
    """The newest stored checkpoint covering row `seq` that K witnesses cosigned, as a note (spec 9.3); with
    writer `keys`, the newest whose writer signature verifies under one of them too."""
    for size, text, _ in snapshot.cosignatures_newest_first(head):
        if size < seq:
            break
        lines = snapshot.cosignatures_of(text, size)
        if not policy.tally(lines, text).met:
            continue
        notes = (stored.note for stored in snapshot.checkpoints_at(size) if stored.note.startswith(text + "\n"))
        base = next((note for note in notes if not keys or _verifies(note, keys)), None)
        if base is None and keys:
            continue
        return base if base is not None else text + "\n" + "".join(lines)
    signed = " and a signature by a trusted key" if keys else ""
    raise ProofError(
        f"{where}: no stored checkpoint covering row {seq} carries {policy.quorum} cosignature(s) by the witness keys"
        f"{signed} (submit to the witnesses first: `compute-budget witness submit`)"
    )


def _trusted_note_for(
    snapshot: Snapshot, keys: list[VerifierKey], seq: int, head: int, origin: str | None, where: str,
    counts: Callable[[str], bool],
) -> str:
    """The newest stored checkpoint of this log covering row `seq` whose signature by one of the writer `keys`
    verifies (spec 9.9, r): a planted newer note, unsigned or signed by another key, is passed over."""
    best: tuple[int, int, str] | None = None  # (tree size, id, note)
    for key in keys:
        for stored in snapshot.newest_by_key(key, at_most=head):
            if stored.tree_size < seq or (best is not None and (stored.tree_size, stored.id) <= best[:2]):
                break
            if _verifies(stored.note, keys) and _origin_of(stored.note) == origin and counts(stored.note):
                best = (stored.tree_size, stored.id, stored.note)
                break
    if best is None:
        raise ProofError(
            f"{where}: no stored checkpoint covering row {seq} carries a valid signature by a --trusted-key (record "
            "with that key, or run `compute-budget checkpoint --signing-key`, then prove again)"
        )
    return best[2]


def _verifies(note: str | None, keys: list[VerifierKey]) -> bool:
    """True when `note` carries a signature by one of `keys` that verifies and none by them that fails."""
    if note is None:
        return False
    try:
        verified, failed = trusted_signers(note, keys)
    except NoteError:
        return False
    return bool(verified) and not failed


def _origin_of(note: str) -> str | None:
    try:
        return Checkpoint.from_note(note).origin
    except (NoteError, CheckpointError):
        return None


def _given_and_keys(
    checkpoint: CheckpointLike | None, trusted_keys: Iterable[VerifierKey | str | os.PathLike[str]]
) -> tuple[Checkpoint | None, list[VerifierKey]]:
    """The given checkpoint and the writer keys; `ProofError` when the keys do not verify the checkpoint."""
    given = as_checkpoint(checkpoint) if checkpoint is not None else None
    keys = list(dict.fromkeys(verifier_key(item) for item in trusted_keys))
    if given is not None and keys and not _verifies(given.note, keys):
        raise ProofError(
            "the given checkpoint carries no valid signature by a --trusted-key: it is not used for a receipt"
        )
    return given, keys


def prove_consistency(
    old: CheckpointLike,
    target: str | os.PathLike[str] | None = None,
    *,
    trusted_keys: Iterable[VerifierKey | str | os.PathLike[str]] = (),
    witness_keys: Iterable[WitnessKey | str | os.PathLike[str]] = (),
    witness_quorum: int | None = None,
    auditor_key: VerifierKey | str | os.PathLike[str] | None = None,
    key_states: KeyStates | None = None,
    witness_policy: TlogPolicy | None = None,
) -> ConsistencyProof:
    """Prove that the store at `target` extends the older checkpoint `old` (a signed note, or a JSON checkpoint
    with origin and root), in O(log n) hashes, and check the proof before returning it.

    With `trusted_keys`, `old` must carry a valid signature by one of them; with `witness_keys` (spec 9.3), valid
    cosignatures by `witness_quorum` of them (default: all), counted from `old` and the store (`witness_policy`, a
    C2SP tlog-policy, instead: its witnesses and quorum, its `log` keys as trusted keys); with `auditor_key`
    (spec 9.9.5), a valid signature by the auditor who cosigned it after a clean audit. Raises
    `NotConsistent` (its `reason`: ``origin``, ``untrusted``, ``truncated`` or ``rewritten``) when the store does
    not extend it, and `CheckpointError` when `old` cannot be used. `key_states` (spec 11.7.4): `old`'s signature by
    a retired or revoked key that does not count (judged by the store's tree) is ``untrusted``.
    """
    checkpoint = as_checkpoint(old)
    if not checkpoint.has_root:
        raise CheckpointError("the old checkpoint names no origin and tree root: a consistency proof needs both")
    keys = policy_log_keys([verifier_key(item) for item in trusted_keys], witness_policy, checkpoint.origin)
    parsed = checkpoint.parsed_note()  # parsed once (when it was read), for every check below
    if keys:
        _check_old_signature(checkpoint, parsed, keys)
    if auditor_key is not None:
        _check_auditor_line(checkpoint, parsed, verifier_key(auditor_key))
    body = checkpoint.body()
    policy = _policy(witness_keys, witness_quorum, witness_policy)
    with open_source(target) as store, store.snapshot() as snapshot:
        if policy is not None:
            tally = _old_cosignatures(snapshot, checkpoint, parsed, policy)
            if not tally.met:
                why = f"the old checkpoint carries {policy.rule.count_words(tally.counted)} by witness keys"
                raise NotConsistent("untrusted", why)
        origin = snapshot.origin()
        if origin != body.origin:
            raise NotConsistent("origin", f"the old checkpoint is of log {body.origin}, this store is {origin}")
        size = snapshot.max_seq()
        problem = note_problem(snapshot, checkpoint.note, key_states, size) if key_states and checkpoint.note else None
        if problem is not None:
            raise NotConsistent("untrusted", f"the old checkpoint: {problem}")
        reader = snapshot.tree(size)
        root = snapshot.frontier(size).root()
        outcome = extends(body, size=size, root=root, chain_at=snapshot.chain_at, reader=reader)
        if not outcome.ok:
            raise NotConsistent(outcome.reason or "rewritten", outcome.message)
        try:
            path = consistency_proof(reader, body.size, size) if 0 < body.size < size else []
        except MerkleError as error:
            raise StoreDamaged(f"cannot prove consistency: {error}; run `compute-budget audit`") from None
    proof = ConsistencyProof(origin, body.size, body.root, size, root, tuple(path))
    if not proof.verify():
        raise NotConsistent("rewritten", "the consistency proof does not verify")  # pragma: no cover
    return proof


def _check_old_signature(checkpoint: Checkpoint, parsed: ParsedNote | None, keys: list[VerifierKey]) -> None:
    """`NotConsistent` ("untrusted") unless the old checkpoint carries a valid signature by one of `keys` and no
    failing one."""
    if parsed is None or not parsed.signatures:
        form = "a JSON checkpoint" if checkpoint.note is None else "an unsigned note"
        raise NotConsistent("untrusted", f"it is {form}, so it carries no signature by a trusted key")
    verified, failed = trusted_signers(parsed, keys)
    if failed:
        raise NotConsistent("untrusted", f"the old checkpoint's signature by {failed[0].name} does not verify")
    if not verified:
        raise NotConsistent("untrusted", "the old checkpoint carries no signature by a trusted key")


def _check_auditor_line(checkpoint: Checkpoint, parsed: ParsedNote | None, auditor: VerifierKey) -> None:
    """`NotConsistent` ("untrusted") unless the old checkpoint (`parsed`, its note) carries a valid signature by
    the auditor's key."""
    label = f"{auditor.name}+{auditor.key_hash:08x}"
    if checkpoint.note is None:
        raise NotConsistent("untrusted", f"it is a JSON checkpoint, so it carries no signature by auditor {label}")
    problem = signature_problem(checkpoint.note if parsed is None else parsed, auditor)
    if problem is not None:
        raise NotConsistent("untrusted", f"the auditor's line: {problem}")


def _old_cosignatures(
    snapshot: Snapshot, checkpoint: Checkpoint, parsed: ParsedNote | None, policy: WitnessRequirement
) -> QuorumTally:
    if checkpoint.note is None:
        return policy.rule.tally({})  # a JSON checkpoint carries none
    if parsed is None:  # an unsigned note: `parse_note` refuses it (NoteError), as it always did here
        parsed = parse_note(checkpoint.note)
    text = parsed.text
    own = [signature.line() for signature in parsed.signatures]
    return policy.tally([*own, *snapshot.cosignatures_of(text, checkpoint.seq)], text)


def cosign(
    target: str | os.PathLike[str] | None,
    report: AuditReport,
    signer: SignerKey,
    given: Iterable[Checkpoint] = (),
    trusted: Iterable[VerifierKey] = (),
) -> str:
    """The head's checkpoint note after a clean audit, signed by the auditor's `signer` (a witness cosignature).

    The note carries the signatures of exactly this head that the stored checkpoints hold *and* that verify under
    the `trusted` writer keys (the audit's --trusted-key), then the auditor's: a line planted in the store (another
    key's, or a bogus one under a writer's name) is never vouched for. Refuses (`StoreDamaged`) when the store no
    longer extends the newest checkpoint this key signed for the origin (stored, or among the `given` ones), as
    every signer must.

    Spec 9.9.5: `trusted` is required, `signer` is never one of its keys, and every row of the head must be covered
    by a trusted writer's stored checkpoint (`report.attested_size`); else `AuditError`.
    """
    trusted = list(trusted)
    _check_auditor(report, signer, trusted)
    if report.origin is None or report.root is None:
        raise StoreUnavailable(f"{report.database} has no origin yet: there is nothing to cosign")
    checkpoint = report.head_checkpoint()
    text = checkpoint.note_text()
    size = checkpoint.seq
    verifier = signer.verifier()
    with open_source(target) as store, store.snapshot() as snapshot:
        olds: list[tuple[str, Checkpoint]] = []
        for stored in snapshot.newest_by_key(verifier):
            found = Checkpoint.from_note(stored.note)
            if found.origin == report.origin and signature_problem(stored.note, verifier) is None:
                olds.append((f"stored checkpoint #{stored.id}", found))
                break
        for item in given:
            signed = item.note is not None and item.origin == report.origin and bool(item.signatures())
            if signed and item.note is not None and signature_problem(item.note, verifier) is None:
                olds.append(("the given checkpoint", item))
        for where, old in olds:
            outcome = extends(
                old.body(), size=size, root=report.root, chain_at=snapshot.chain_at, reader=snapshot.tree(size)
            )
            if not outcome.ok:
                raise StoreDamaged(
                    f"refusing to cosign with key {signer.name}: the store no longer extends {where}, which this key "
                    f"signed at size {old.seq} ({outcome.message})"
                )
        kept = verified_signatures(text, [stored.note for stored in snapshot.checkpoints_at(size)], trusted)
    if not kept:
        return sign_note(text, signer)
    return add_signature(text + "\n" + "".join(line.line() for line in kept), signer)


def _check_auditor(report: AuditReport, signer: SignerKey, trusted: list[VerifierKey]) -> None:
    """Spec 9.9.5: an auditor signs only a clean audit's head, every row of which a trusted writer's stored checkpoint
    covers, and its key is never a trusted writer key."""
    if not report.clean:
        raise AuditError("only a clean audit is cosigned")
    if not trusted:
        raise AuditError("cosign vouches only for rows a trusted writer signed: give the writer's verifier keys")
    if signer.verifier() in trusted:
        raise AuditError(f"the auditor's key {signer.name} is among the trusted writer keys: it never is one")
    if report.attested_size is None or report.attested_size < report.head.seq:
        raise AuditError(
            f"refusing to cosign size {report.head.seq}: a trusted writer's stored checkpoint covers only "
            f"{report.attested_size or 0} rows"
        )


__all__ = ["ConsistencyProof", "ProofBundle", "cosign", "prove", "prove_consistency"]
