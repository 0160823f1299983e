"""The audit's witness role (spec 9.3): given checkpoints must carry K cosignatures by the witness keys, and the rows
after the newest checkpoint K witnesses cosigned are `unwitnessed_rows` once that checkpoint is too old.

Cosignatures count from the given note and from the store. A stored cosignature counts for this store only when
the checkpoint text it covers is this store's own at that size (origin, recomputed root, stored chain hash); one
that names another root is a witness's record of a fork, reported as `checkpoint_mismatch`. One filed under a size
its text is not of, or claiming a witness key it does not verify under, is `bad_signature`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.cosignature import WitnessKey, valid_cosignatures
from compute_budget.core.log.merkle import root_from_reader
from compute_budget.core.log.note import CheckpointBody, VerifierKey, parse_checkpoint, parse_note
from compute_budget.core.verify import Finding, FindingKind
from compute_budget.errors import MerkleError, NoteError, StoreDamaged
from compute_budget.store.snapshot import Snapshot

DEFAULT_MAX_WITNESS_AGE = 86400


@dataclass(frozen=True, slots=True)
class WitnessPolicy:
    """What the audit requires of witnesses: their keys, how many must cosign, how old the newest may be."""

    keys: tuple[WitnessKey, ...]
    quorum: int
    max_age: int
    now: int  # the audit's start, seconds since the epoch

    def kth_newest(self, note_or_lines: Iterable[str], text: str) -> tuple[int, int | None]:
        """(how many distinct witness keys validly cosigned `text`, the K-th newest of their timestamps)."""
        newest: dict[WitnessKey, int] = {}
        for line in note_or_lines:
            try:
                found = valid_cosignatures(text + "\n" + line, self.keys, now=self.now)
            except NoteError:
                continue
            for item in found:
                newest[item.key] = max(item.timestamp, newest.get(item.key, -1))
        ordered = sorted(newest.values(), reverse=True)
        return len(ordered), (ordered[self.quorum - 1] if len(ordered) >= self.quorum else None)

    def failing_claim(self, text: str, line: str) -> WitnessKey | None:
        """The witness key `line` claims (its name and key ID) when it is not that key's valid cosignature of
        `text`: a stored line edited or planted by someone without the witness's key. None otherwise."""
        try:
            _, signatures = parse_note(text + "\n" + line)
        except NoteError:
            return None
        for signature in signatures:
            for key in self.keys:
                claimed = (signature.name, signature.key_hash) == (key.name, key.key_id)
                if claimed and key.timestamp_of(text, signature, now=self.now) is None:
                    return key
        return None


def given_note_findings(proof: Checkpoint, snapshot: Snapshot, policy: WitnessPolicy) -> list[Finding]:
    """A given `--since`/`--checkpoint` must carry K valid cosignatures (its own lines and the store's)."""
    count, _ = _given_count(proof, snapshot, policy)
    if count >= policy.quorum:
        return []
    form = " (a JSON checkpoint carries none)" if proof.note is None else ""
    return [Finding(
        FindingKind.BAD_SIGNATURE, proof.budget_id, proof.seq,
        f"the given checkpoint carries {count} of {policy.quorum} cosignatures by the witness keys{form}",
    )]


def _given_count(proof: Checkpoint, snapshot: Snapshot, policy: WitnessPolicy) -> tuple[int, int | None]:
    if proof.note is None:
        return 0, None
    try:
        text, signatures = parse_note(proof.note)
    except NoteError:
        return 0, None
    lines = [signature.line() for signature in signatures] + snapshot.cosignatures_of(text, proof.seq)
    return policy.kth_newest(lines, text)


def witnessed(
    snapshot: Snapshot, policy: WitnessPolicy, origin: str | None, given: Iterable[Checkpoint], max_seq: int
) -> tuple[int, list[Finding]]:
    """The size of the newest checkpoint of this store K witnesses cosigned, and the findings: forks witnesses
    recorded, and `unwitnessed_rows` for the rows after it when it is missing or older than the maximum age."""
    findings: list[Finding] = []
    best: tuple[int, int | None] = (0, None)  # (size, K-th newest timestamp)
    for proof in given:
        count, kth = _given_count(proof, snapshot, policy)
        if count >= policy.quorum and proof.seq > best[0]:
            best = (proof.seq, kth)
    groups: dict[str, list[str]] = {}
    current: int | None = None
    failed: dict[WitnessKey, int] = {}
    for size, text, line in snapshot.cosignatures_newest_first(max_seq):
        _report_failing(policy, size, text, line, failed, findings)
        if current is not None and size != current:
            found = _best_group(snapshot, policy, origin, current, groups, findings)
            if found is not None:
                break
            groups = {}
        current = size
        groups.setdefault(text, []).append(line)
    else:
        found = _best_group(snapshot, policy, origin, current, groups, findings) if current is not None else None
    if found is not None and found[0] > best[0]:
        best = found
    size, kth = best
    if size < max_seq and (kth is None or kth < policy.now - policy.max_age):
        findings.append(_unwitnessed(snapshot, policy, size, kth, max_seq))
    return size, findings


MAX_BAD_COSIGNATURES_PER_KEY = 20  # as for stored checkpoints: a forged table is reported, not verified to the end


def _report_failing(
    policy: WitnessPolicy, size: int, text: str, line: str, failed: dict[WitnessKey, int], findings: list[Finding]
) -> None:
    """A stored cosignature that claims a witness key and does not verify is `bad_signature` (the newest ones, up to
    the checkpoint K witnesses cosigned, as the writer's newest checkpoints are checked)."""
    key = policy.failing_claim(text, line)
    if key is None or failed.get(key, 0) > MAX_BAD_COSIGNATURES_PER_KEY:
        return
    failed[key] = failed.get(key, 0) + 1
    if failed[key] > MAX_BAD_COSIGNATURES_PER_KEY:
        findings.append(Finding(
            FindingKind.BAD_SIGNATURE, None, None,
            f"stopped after {MAX_BAD_COSIGNATURES_PER_KEY} stored cosignatures claiming witness {key.name} failed "
            "to verify",
        ))
        return
    findings.append(Finding(
        FindingKind.BAD_SIGNATURE, None, size,
        f"a stored cosignature of size {size} filed as witness {key.name}'s does not verify under its key (edited "
        "or planted in the store, or dated over 600 s ahead)",
    ))


def _best_group(
    snapshot: Snapshot,
    policy: WitnessPolicy,
    origin: str | None,
    size: int,
    groups: dict[str, list[str]],
    findings: list[Finding],
) -> tuple[int, int | None] | None:
    """Among the checkpoint texts cosigned at `size`, this store's own with K cosignatures, if any."""
    for text, lines in groups.items():
        count, kth = policy.kth_newest(lines, text)
        if count == 0:
            continue
        problem = _not_this_store(snapshot, origin, size, text)
        if problem is not None:
            kind, detail = problem
            findings.append(Finding(kind, None, size, detail))
            continue
        if count >= policy.quorum:
            return size, kth
    return None


def _not_this_store(snapshot: Snapshot, origin: str | None, size: int, text: str) -> tuple[FindingKind, str] | None:
    """Why the cosigned checkpoint `text`, filed at `size`, is not this store's there, or None when it is: another
    root at this size is a fork a witness saw (`checkpoint_mismatch`); a text of another size or log was filed
    under the wrong size (an edited or planted row: `bad_signature`, as it cosigns no checkpoint of size `size`)."""
    try:
        body: CheckpointBody = parse_checkpoint(text)
    except NoteError as error:
        return FindingKind.BAD_SIGNATURE, f"a stored cosignature filed at size {size} covers no checkpoint ({error})"
    if body.origin != origin or body.size != size:
        return FindingKind.BAD_SIGNATURE, (
            f"a stored cosignature filed at size {size} covers size {body.size} of log {body.origin}: it cosigns no "
            "checkpoint of this store at that size (edited or planted in the store)"
        )
    try:
        root = root_from_reader(snapshot.tree(size), size)
    except (MerkleError, StoreDamaged):
        return None  # the tree itself is damaged: the audit's tree check reports that
    if root != body.root or snapshot.chain_at(size) != body.chain_hash:
        return FindingKind.CHECKPOINT_MISMATCH, (
            f"a witness cosigned size {size} with another root or chain hash than this store's: a fork of this log"
        )
    return None


def _unwitnessed(snapshot: Snapshot, policy: WitnessPolicy, size: int, kth: int | None, max_seq: int) -> Finding:
    first = size + 1
    link = snapshot.link_at(first)
    budget_id = link[2] if link is not None and isinstance(link[2], str) else None
    count = max_seq - size
    if kth is None:
        plural = "s" if policy.quorum != 1 else ""
        why = f"no checkpoint carries {policy.quorum} cosignature{plural} by the witness keys"
    else:
        age = policy.now - kth
        why = (f"the newest checkpoint {policy.quorum} witness(es) cosigned (size {size}) is {age} s old, over the "
               f"maximum witness age of {policy.max_age} s")
    return Finding(
        FindingKind.UNWITNESSED_ROWS, budget_id, first,
        f"rows {first}..{max_seq} ({count} row{'s' if count != 1 else ''}) are unwitnessed: {why}",
    )


def witnessed_note(
    snapshot: Snapshot,
    policy: WitnessPolicy,
    size: int,
    given: Iterable[Checkpoint],
    writers: Sequence[VerifierKey] = (),
) -> str | None:
    """The note of this store's checkpoint at `size` that K witnesses cosigned, with the signatures and
    cosignatures of it that verify (for `--save-checkpoint`), or None when no such checkpoint is at hand.

    What the auditor keeps is only what it checked: a line claiming a witness key counts only when it verifies, and
    with `writers` given, a line claiming one of them only when it verifies (a line planted in the store would
    otherwise travel into the kept note and fail the next night's check of it)."""
    texts: dict[str, list[str]] = {}
    for stored in snapshot.checkpoints_at(size):
        try:
            text, signatures = parse_note(stored.note)
        except NoteError:
            continue
        texts.setdefault(text, []).extend(signature.line() for signature in signatures)
    for proof in given:
        if proof.note is not None and proof.seq == size:
            try:
                text, signatures = parse_note(proof.note)
            except NoteError:
                continue
            texts.setdefault(text, []).extend(signature.line() for signature in signatures)
    for text, lines in texts.items():
        everything = [
            line for line in dict.fromkeys([*lines, *snapshot.cosignatures_of(text, size)])
            if _checked_line(text, line, policy, writers)
        ]
        count, _ = policy.kth_newest(everything, text)
        if count >= policy.quorum:
            return text + "\n" + "".join(everything)
    return None


def _checked_line(text: str, line: str, policy: WitnessPolicy, writers: Sequence[VerifierKey]) -> bool:
    """Whether a signature line of `text` may be kept: it verifies when it claims a witness or a given writer key;
    a line by a key the auditor was not given is kept as it is (verifiers ignore keys they do not know)."""
    try:
        signature = parse_note(text + "\n" + line)[1][0]
    except NoteError:
        return False
    if any((signature.name, signature.key_hash) == (key.name, key.key_id) for key in policy.keys):
        return policy.kth_newest([line], text)[0] == 1
    claimed = [key for key in writers if (key.name, key.key_hash) == (signature.name, signature.key_hash)]
    return all(key.verify(text.encode("utf-8"), signature.signature) for key in claimed)
