"""The checkpoints an audit is given and the ones it finds stored, and their signatures: `--checkpoint`,
`--since` and its `FILE.head`, the witnesses' answers, the trusted writers' attestation and the salvage provenance."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

from compute_budget.auditor.head_note import HeadNote, head_signature_findings, load_head_note, parse_head_note
from compute_budget.auditor.source import LogView
from compute_budget.auditor.witness_rules import (
    WitnessRequirement,
)
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.cosignature import WitnessKey
from compute_budget.core.log.head import GENESIS_CHAIN_HASH, ChainHead
from compute_budget.core.log.note import VerifierKey
from compute_budget.core.log.witness_policy import TlogPolicy
from compute_budget.core.seal_checks import StoredCheckpoint, signature_problem, trusted_signers
from compute_budget.core.verify import Finding, FindingKind
from compute_budget.errors import (
    ArgumentTypeError,
    CheckpointError,
    MerkleError,
    NoteError,
    StoreDamaged,
    clip,
)
from compute_budget.keys.key_files import witness_key
from compute_budget.keys.small_files import read_small_file

MAX_BAD_SIGNATURES_PER_KEY = 20  # a forged checkpoint table is reported, not verified to the end

CheckpointLike = Checkpoint | ChainHead | Mapping[str, Any] | str | os.PathLike[str]
# A checkpoint a witness served (`--witness-url`), with the source findings name: (source, note or checkpoint).
WitnessAnswer = CheckpointLike | tuple[str, CheckpointLike]
HeadLike = HeadNote | str | os.PathLike[str]


def head_note_for(since: CheckpointLike | None, since_head: HeadLike | None, witnesses: bool) -> HeadNote | None:
    """The `FILE.head` of spec 9.9.2: as given; else, with witness keys and `since` named by a file path, that
    path's `.head` (required: `CheckpointError` when missing)."""
    if isinstance(since_head, HeadNote):
        return since_head
    if since_head is not None:
        text = os.fspath(since_head)
        return parse_head_note(text) if "\n" in text else load_head_note(text)
    if not witnesses or not isinstance(since, str | os.PathLike):
        return None
    path = os.fspath(since)
    if path.lstrip().startswith("{") or "\n" in path:
        return None  # the checkpoint's own text: no file beside it
    return load_head_note(path + ".head")


def witness_answer(index: int, item: WitnessAnswer) -> tuple[str, Checkpoint | str]:
    """A witness's answer as (source, checkpoint or raw note text): the text is judged against the store later."""
    source, value = item if isinstance(item, tuple) else (f"witness checkpoint #{index + 1}", item)
    if isinstance(value, str) and "\n" in value and not value.lstrip().startswith("{"):
        return source, value
    return source, as_checkpoint(value)


def hold_given(
    snapshot: LogView,
    sources: list[tuple[str, Checkpoint | None]],
    head: HeadNote | None,
    origin: str | None,
    keys: list[VerifierKey],
    max_seq: int,
) -> tuple[list[Checkpoint], list[Finding]]:
    """The given checkpoints the store holds (each with its own signature lines: they count as cosignatures), and
    the findings of the rest, each naming its source (its file or flag). `FILE.head` must be signed by a trusted
    writer (spec 9.9.2: else `checkpoint_mismatch`); the others, with trusted keys, carry a trusted signature (else
    `bad_signature`)."""
    held: list[Checkpoint] = []
    findings: list[Finding] = []
    if head is not None:
        findings += head_signature_findings(head, keys)
    for source, proof in [*sources, *([(head.source, head.checkpoint)] if head is not None else [])]:
        if proof is None:
            continue
        # Another log's checkpoint says nothing about this one's rows: that is the one finding, not a "rewritten
        # history" its chain hash cannot match anyway.
        problems = _check_origin(proof, origin) or _check_checkpoint(snapshot, proof, max_seq)
        findings += _named(problems, source)
        if not problems:
            held.append(proof)
        if keys and (head is None or proof is not head.checkpoint):
            findings += _check_given_signature(proof, keys)
    return held, findings


def _named(findings: list[Finding], source: str) -> list[Finding]:
    """`findings` about a given checkpoint, each naming where that checkpoint came from."""
    return [dataclasses.replace(finding, detail=f"{source}: {finding.detail}") for finding in findings]


def distinct_given(held: list[Checkpoint]) -> list[Checkpoint]:
    """One given checkpoint per size, root and chain hash: the tree checks each once (one finding, not one per
    source that gave it)."""
    first: dict[tuple[int, bytes | None, str], Checkpoint] = {}
    for proof in held:
        first.setdefault((proof.seq, proof.root, proof.chain_hash), proof)
    return list(first.values())


def witness_policy(
    witness_keys: Iterable[WitnessKey | str | os.PathLike[str]],
    quorum: int | None,
    max_age: int,
    rule: TlogPolicy | None = None,
) -> WitnessRequirement | None:
    """The audit's witness requirement: the C2SP tlog-policy `rule`, or `witness_keys` with `quorum` of them
    (default: all) as its one-group shorthand; None when neither requires a cosignature (`quorum none`). Both at
    once, a quorum without keys or outside 1..N, or a negative age is an error."""
    keys = tuple(dict.fromkeys(witness_key(item) for item in witness_keys))
    if rule is not None and (keys or quorum is not None):
        raise ArgumentTypeError("give a witness policy or --witness-key/--witness-quorum, not both")
    if rule is None and not keys:
        if quorum is not None:
            raise ArgumentTypeError("a witness quorum needs witness keys")
        return None
    if rule is None:
        wanted = len(keys) if quorum is None else quorum
        if isinstance(wanted, bool) or not isinstance(wanted, int) or not 1 <= wanted <= len(keys):
            raise ArgumentTypeError(
                f"the witness quorum must be 1..{len(keys)} (distinct witness keys), not {wanted!r}"
            )
        rule = TlogPolicy.from_witness_keys(keys, wanted)
    if isinstance(max_age, bool) or not isinstance(max_age, int) or max_age < 0:
        raise ArgumentTypeError(f"the maximum witness age is a number of seconds, not {max_age!r}")
    if not rule.requires_witnesses:
        return None
    return WitnessRequirement(rule, max_age, int(time.time()))


def policy_log_keys(keys: list[VerifierKey], rule: TlogPolicy | None, origin: str | None) -> list[VerifierKey]:
    """The writer `keys` and the `log` keys of the policy `rule` for a log named `origin`: C2SP names a log key by
    the log's origin, so a `log` line whose key is named otherwise is refused (`PolicyOriginMismatch`, naming it)."""
    if rule is None or not rule.logs:
        return keys
    return list(dict.fromkeys([*keys, *rule.store_log_keys(origin or "")]))


def check_provenance(snapshot: LogView) -> tuple[dict[str, Any] | None, list[Finding]]:
    """The salvaged store's provenance (spec 9.8) for the report, and a finding when its row no longer names the
    chain hash stored at its size (the copied history changed after it was salvaged)."""
    try:
        found = snapshot.provenance()
    except StoreDamaged as damaged:
        return None, [Finding(FindingKind.SCHEMA_TAMPERED, None, None, str(damaged))]
    if found is None:
        return None, []
    source, through, root, chain, recorded_at = found
    document = {"source_origin": source, "through_seq": through, "root": root, "chain_hash": chain,
                "recorded_at": recorded_at}
    try:
        tree_root: bytes | None = snapshot.frontier(through).root() if 0 <= through <= snapshot.max_seq() else None
    except (StoreDamaged, MerkleError):
        tree_root = None  # the tree's own findings say why
    if tree_root is None or base64.b64encode(tree_root).decode("ascii") != root:
        shown = base64.b64encode(tree_root).decode("ascii") if tree_root is not None else "not computable"
        return document, [
            Finding(
                FindingKind.CHECKPOINT_MISMATCH,
                None,
                through,
                f"the provenance row says this store was salvaged from {clip(source, 80)} through seq {through} with "
                f"root {clip(root, 60)}, but the tree's root at that size is {shown}: the row was not written by "
                "`copy --through`, or the salvaged history changed",
            )
        ]
    stored = snapshot.chain_at(through)
    if stored != chain:
        return document, [
            Finding(
                FindingKind.CHECKPOINT_MISMATCH,
                None,
                through,
                f"the provenance row says this store was salvaged from {source} through seq {through} with chain_hash "
                f"{chain}, but row {through} now has {stored}: the salvaged history was rewritten",
            )
        ]
    return document, []


def _check_checkpoint(snapshot: LogView, proof: Checkpoint, max_seq: int) -> list[Finding]:
    """A checkpoint holds iff the stored row at its `seq` carries its chain hash (seq 0: the genesis)."""
    if proof.seq == 0:
        if proof.chain_hash == GENESIS_CHAIN_HASH:
            return []
        return [Finding(FindingKind.CHECKPOINT_MISMATCH, None, 0, "checkpoint at seq 0 must name the genesis hash")]
    if proof.seq > max_seq:
        return [
            Finding(
                FindingKind.CHECKPOINT_MISMATCH,
                proof.budget_id,
                proof.seq,
                f"the store ends at seq {max_seq} but the checkpoint names seq {proof.seq}: history was truncated",
            )
        ]
    link = snapshot.link_at(proof.seq)
    row = None if link is None else (link[1], link[2])
    if row is None:
        return [
            Finding(
                FindingKind.CHECKPOINT_MISMATCH,
                proof.budget_id,
                proof.seq,
                f"no row has seq {proof.seq}, which the checkpoint names: history was rewritten",
            )
        ]
    if row[0] != proof.chain_hash or (proof.budget_id is not None and row[1] != proof.budget_id):
        return [
            Finding(
                FindingKind.CHECKPOINT_MISMATCH,
                str(row[1]),
                proof.seq,
                f"row {proof.seq} has chain_hash {row[0]} (budget_id {row[1]}), the checkpoint says "
                f"{proof.chain_hash} (budget_id {proof.budget_id}): history before it was rewritten",
            )
        ]
    return []


def _check_origin(proof: Checkpoint, origin: str | None) -> list[Finding]:
    """A checkpoint naming an origin must name this store's."""
    if proof.origin is None or proof.origin == origin:
        return []
    return [
        Finding(
            FindingKind.CHECKPOINT_MISMATCH,
            proof.budget_id,
            proof.seq,
            f"the checkpoint is of log {proof.origin}, but this store is {origin or 'a store without an origin'}",
        )
    ]


def _check_given_signature(proof: Checkpoint, keys: list[VerifierKey]) -> list[Finding]:
    """With trusted keys, a given checkpoint must be a note carrying a valid signature by one of them."""
    def finding(detail: str) -> Finding:
        return Finding(FindingKind.BAD_SIGNATURE, proof.budget_id, proof.seq, detail)

    if proof.note is None or not proof.signatures():
        form = "a JSON checkpoint" if proof.note is None else "an unsigned note"
        return [finding(f"the given checkpoint is {form}: it carries no signature by a trusted key")]
    try:
        verified, failed = trusted_signers(proof.note, keys)
    except NoteError as error:
        return [finding(f"the given checkpoint's signatures cannot be read: {error}")]
    found = [finding(f"the given checkpoint's signature by {key_label(key)} does not verify") for key in failed]
    if not verified and not failed:
        # Each signer as the note shows it (spec 11.6): never a verifier key, which the auditor was not given.
        names = ", ".join(sorted({f"{item.name}+{item.key_hash:08x}" for item in proof.signatures()}))
        found.append(finding(f"the given checkpoint carries no signature by a trusted key (it is signed by {names}, "
                             "unverified)"))
    return found


def attestation(
    snapshot: LogView, keys: list[VerifierKey], origin: str | None, max_seq: int
) -> tuple[dict[str, tuple[int, int]], list[Finding]]:
    """For each trusted key, the newest stored checkpoint of this origin whose signature by it verifies: label ->
    (tree size, checkpoint id). Newer ones claiming the key whose signature fails are `bad_signature`."""
    attested: dict[str, tuple[int, int]] = {}
    findings: list[Finding] = []
    for key in keys:
        label = key_label(key)
        bad = 0
        for stored in snapshot.newest_by_key(key, at_most=max_seq):
            try:
                found = Checkpoint.from_note(stored.note)
            except CheckpointError:
                found = None
            if found is not None and found.origin != origin:
                continue  # another log's note: the tree check reports it
            problem = signature_problem(stored.note, key)
            if problem is None and found is not None:
                attested[label] = (stored.tree_size, stored.id)
                break
            bad += 1
            findings.append(bad_stored(stored, problem or "its note cannot be read"))
            if bad >= MAX_BAD_SIGNATURES_PER_KEY:
                findings.append(
                    Finding(
                        FindingKind.BAD_SIGNATURE,
                        None,
                        None,
                        f"stopped after {bad} stored checkpoints claiming key {label} failed to verify",
                    )
                )
                break
    return attested, findings


def bad_stored(stored: StoredCheckpoint, problem: str) -> Finding:
    """A stored checkpoint whose signature claiming a trusted key fails: `bad_signature`."""
    return Finding(
        FindingKind.BAD_SIGNATURE,
        None,
        stored.tree_size,
        f"stored checkpoint #{stored.id} (size {stored.tree_size}, filed as signed by {stored.key_label()}): {problem}",
    )


def unattested_findings(
    snapshot: LogView, keys: list[VerifierKey], attested: dict[str, tuple[int, int]], max_seq: int,
    since: tuple[int, str] | None = None,
) -> list[Finding]:
    """The rows after the newest stored checkpoint a trusted key signed, as one finding naming the first; never
    from below the size `since` (size, signer) of a `--since` note that counts vouches for (spec 11.6)."""
    if not keys:
        return []
    newest = max(attested.items(), key=lambda item: item[1][0], default=None)
    covered = newest[1][0] if newest is not None else 0
    if since is not None and since[0] > covered:
        covered, newest = since[0], None
    if covered >= max_seq:
        return []
    first = covered + 1
    link = snapshot.link_at(first)
    budget_id = link[2] if link is not None and isinstance(link[2], str) else None
    count = max_seq - covered
    if newest is not None:
        after = f"the newest checkpoint signed by a trusted key (size {covered}, by {newest[0]})"
    elif since is not None:
        after = f"the --since checkpoint (size {covered}, signed by {since[1]}): no newer one a trusted key signed"
    else:
        after = "any checkpoint signed by a trusted key (none is stored)"
    return [
        Finding(
            FindingKind.UNATTESTED_ROWS,
            budget_id,
            first,
            f"rows {first}..{max_seq} ({count} row{'s' if count != 1 else ''}) come after {after}: no trusted key "
            "vouches for them (appended without the writer's key?)",
        )
    ]


def unique_keys(keys: Iterable[VerifierKey]) -> list[VerifierKey]:
    """The keys, each once, in the order given."""
    unique: list[VerifierKey] = []
    for key in keys:
        if key not in unique:
            unique.append(key)
    return unique


def key_label(key: VerifierKey) -> str:
    """How findings name a key: name+hash."""
    return f"{key.name}+{key.key_hash:08x}"


def b64(value: bytes | None) -> str:
    """A hash as findings show it (base64, or "none")."""
    return "none" if value is None else base64.b64encode(value).decode("ascii")


def as_checkpoint(value: CheckpointLike) -> Checkpoint:
    """A checkpoint from what a caller has at hand: a `Checkpoint`, a chain head, the document (as a mapping
    or as JSON text), a checkpoint note (signed or not), or the path of a file holding either."""
    if isinstance(value, Checkpoint):
        return value
    if isinstance(value, ChainHead):
        return Checkpoint.from_head(value)
    if isinstance(value, Mapping):
        return Checkpoint.from_json(json.dumps(dict(value)))
    if not isinstance(value, str | os.PathLike):
        raise ArgumentTypeError(
            f"a checkpoint is a Checkpoint, a chain head, a mapping, JSON text or a path, not {type(value).__name__}"
        )
    text = os.fspath(value)
    if text.lstrip().startswith("{") or "\n" in text:
        return Checkpoint.parse(text)
    return load_checkpoint(text)


def load_checkpoint(path: str) -> Checkpoint:
    """Read a checkpoint file (JSON or a checkpoint note); raises `CheckpointError` when it is missing, not a
    regular file, or not a checkpoint. A FIFO or device is refused without blocking on it."""
    text = read_small_file(path, _MAX_CHECKPOINT_BYTES, "checkpoint file", CheckpointError)
    if len(text) > _MAX_CHECKPOINT_BYTES:
        raise CheckpointError(f"checkpoint {path} is larger than any checkpoint ({_MAX_CHECKPOINT_BYTES} bytes)")
    return Checkpoint.parse(text, source=f"checkpoint {path}")


_MAX_CHECKPOINT_BYTES = 1 << 20
