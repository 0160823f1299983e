"""The audit's witness role (spec 9.3): given checkpoints must carry K cosignatures by the witness keys, and the rows
after the newest checkpoint K witnesses cosigned are `unwitnessed_rows` once that checkpoint is too old.

Cosignatures count from the given note and from the store. A stored cosignature counts for the size its own
checkpoint text names, when that text is this store's own there (origin, recomputed root, stored chain hash); one of
this log with another root is a witness's record of a fork (`checkpoint_mismatch`); one of another log, or a line
claiming a witness key that does not verify, is `bad_signature`.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from compute_budget.auditor.source import LogView
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.cosignature import WitnessKey, is_fresh
from compute_budget.core.log.merkle import root_from_reader
from compute_budget.core.log.note import (
    CheckpointBody,
    TlogCheckpoint,
    VerifierKey,
    format_checkpoint,
    parse_checkpoint,
    parse_note,
    parse_tlog_checkpoint,
)
from compute_budget.core.log.witness_policy import QuorumTally, TlogPolicy
from compute_budget.core.seal_checks import trusted_signers
from compute_budget.core.verify import Finding, FindingKind
from compute_budget.errors import CheckpointError, MerkleError, NoteError, StoreDamaged, StoreUnavailable, clip

DEFAULT_MAX_WITNESS_AGE = 86400


@dataclass(frozen=True, slots=True)
class LineJudgement:
    """What one signature line says of one checkpoint text: the witness keys it validly cosigns it with (and their
    timestamps), and the witness keys it claims (by name and key ID) without verifying under them."""

    valid: tuple[tuple[WitnessKey, int], ...]
    failing: tuple[WitnessKey, ...]


_NOTHING = LineJudgement((), ())


@dataclass(frozen=True, slots=True)
class WitnessRequirement:
    """What the audit requires of witnesses: the C2SP tlog-policy `rule` (its witness keys, groups and quorum; the
    `--witness-key`/`--witness-quorum` shorthand is a one-group policy), how old the quorum may be, the clock."""

    rule: TlogPolicy
    max_age: int
    now: int  # the audit's start, seconds since the epoch
    # Each (text, line) is verified once per policy, however many times the store or the given notes repeat it. Not
    # an init field: a copy made with dataclasses.replace (another clock) starts with no judgements.
    judged: dict[tuple[str, str], LineJudgement] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    @property
    def keys(self) -> tuple[WitnessKey, ...]:
        """Every witness key of the policy, optional ones included (their cosignatures are verified, not counted)."""
        return self.rule.witness_keys

    def described(self) -> dict[str, Any]:
        """The policy as a report names it: its SHA-256, its quorum in words, its optional witnesses."""
        return {"sha256": self.rule.sha256, "quorum": self.rule.quorum_in_words(),
                "optional": list(self.rule.optional_witnesses())}

    @property
    def quorum(self) -> str:
        """What the quorum needs, for messages: ``2`` for 2 of N witnesses, else the rule in words."""
        return self.rule.need_words()

    def judge(self, text: str, line: str) -> LineJudgement:
        """Verify `line` as a cosignature of the checkpoint `text` under every witness key it claims."""
        known = self.judged.get((text, line))
        if known is not None:
            return known
        judgement = _NOTHING
        try:
            _, signatures = parse_note(text + "\n" + line)
        except NoteError:
            signatures = []
        valid: list[tuple[WitnessKey, int]] = []
        failing: list[WitnessKey] = []
        for signature in signatures:
            for key in self.keys:
                if (signature.name, signature.key_hash) != (key.name, key.key_id):
                    continue
                timestamp = key.timestamp_of(text, signature, now=self.now)
                if timestamp is None:
                    failing.append(key)
                else:
                    valid.append((key, timestamp))
        if valid or failing:
            judgement = LineJudgement(tuple(valid), tuple(failing))
        self.judged[(text, line)] = judgement
        return judgement

    def tally(self, note_or_lines: Iterable[str], text: str) -> QuorumTally:
        """What the valid cosignatures of `text` among `note_or_lines` come to: how many witnesses cosigned, whether
        the quorum is met, and its time (for K of N witnesses, the K-th newest timestamp; None when not met)."""
        newest: dict[WitnessKey, int] = {}
        for line in note_or_lines:
            for key, timestamp in self.judge(text, line).valid:
                newest[key] = max(timestamp, newest.get(key, -1))
        return self.rule.tally(newest)


def given_note_findings(proof: Checkpoint, snapshot: LogView, policy: WitnessRequirement) -> list[Finding]:
    """A given `--since`/`--checkpoint` must carry K valid cosignatures (its own lines and the store's)."""
    tally = _given_tally(proof, snapshot, policy)
    if tally.met:
        return []
    form = " (a JSON checkpoint carries none)" if proof.note is None else ""
    return [Finding(
        FindingKind.BAD_SIGNATURE, proof.budget_id, proof.seq,
        f"the given checkpoint carries {policy.rule.count_words(tally.counted)} by the witness keys{form}",
    )]


def _given_tally(proof: Checkpoint, snapshot: LogView, policy: WitnessRequirement) -> QuorumTally:
    if proof.note is None:
        return policy.rule.tally({})
    try:
        text, signatures = parse_note(proof.note)
    except NoteError:
        return policy.rule.tally({})
    lines = [signature.line() for signature in signatures] + snapshot.cosignatures_of(text, proof.seq)
    return policy.tally(lines, text)


def witnessed(
    snapshot: LogView,
    policy: WitnessRequirement,
    origin: str | None,
    given: Iterable[Checkpoint],
    max_seq: int,
    *,
    all_signatures: bool = False,
    head: tuple[int, int] | None = None,
) -> tuple[int, list[Finding]]:
    """The size of the newest checkpoint of this store K witnesses cosigned, and the findings: stored cosignatures
    that claim a witness key and do not verify, ones of another log or no checkpoint (`bad_signature`), forks
    witnesses recorded (`checkpoint_mismatch`), and `unwitnessed_rows` for the rows after the newest witnessed
    checkpoint when there is none or it is older than the maximum age.

    Stored rows are read newest first and each distinct line is verified once; the scan stops below the newest
    size K witnesses cosigned, unless `all_signatures` asks for every stored cosignature to be checked. A valid
    cosignature counts for the size its own text names (it is that checkpoint's signature wherever the row was
    filed), and only when that text is this store's own at that size.

    `head` (spec 9.9.2: `FILE.head`'s size and its audit's start, seconds since the epoch): the rows after the newest
    witnessed size and at or below the head's are `unwitnessed_rows` once that audit started more than the maximum
    age ago, whatever any cosignature timestamp says; the timestamp rule then judges only the rows above it."""
    findings: list[Finding] = []
    best: tuple[int, int | None] = (0, None)  # (size, K-th newest timestamp)
    for proof in given:
        tally = _given_tally(proof, snapshot, policy)
        if tally.met and proof.seq > best[0]:
            best = (proof.seq, tally.time)
    scan = _CosignatureScan(snapshot, policy, origin, max_seq, findings)
    current: int | None = None
    for filed, text, line in snapshot.cosignatures_newest_first(max_seq):
        done = not all_signatures and current is not None and filed != current
        if done and scan.best_at_or_above(filed + 1) is not None:
            break
        current = filed
        scan.add(filed, text, line)
    found = scan.best_at_or_above(0)
    if found is not None and found[0] > best[0]:
        best = found
    size, kth = best
    findings += _age_findings(snapshot, policy, size, kth, max_seq, head)
    return size, findings


def _age_findings(
    snapshot: LogView, policy: WitnessRequirement, size: int, kth: int | None, max_seq: int,
    head: tuple[int, int] | None,
) -> list[Finding]:
    """The `unwitnessed_rows` finding (at most one: its first row, the range in detail) of spec 9.3 and 9.9.2."""
    stale = kth is None or not is_fresh(kth, now=policy.now, max_age=policy.max_age)  # 0: no claim, never fresh
    seen, started = (min(head[0], max_seq), head[1]) if head is not None else (0, 0)
    first: int | None = None
    last = 0
    whys: list[str] = []
    if head is not None and size < seen and started < policy.now - policy.max_age:
        first, last = size + 1, seen
        whys.append(
            f"they were in the store at the audit of {policy.now - started} s ago (its FILE.head, size {head[0]}), "
            f"over the maximum witness age of {policy.max_age} s, and {policy.quorum} witness(es) have still not "
            "cosigned them"
        )
    top = max(size, seen)
    if top < max_seq and stale:
        first = top + 1 if first is None else first
        last = max_seq
        whys.append(_stale_why(policy, size, kth))
    if first is None:
        return []
    return [_unwitnessed(snapshot, first, last, "; ".join(whys))]


def _stale_why(policy: WitnessRequirement, size: int, kth: int | None) -> str:
    if kth is None:
        plural = "s" if policy.quorum != "1" else ""
        return f"no checkpoint carries {policy.quorum} cosignature{plural} by the witness keys"
    if kth == 0:
        return (f"the newest checkpoint {policy.quorum} witness(es) cosigned (size {size}) has timestamp 0 among "
                "its newest cosignatures, which makes no freshness claim (counted as infinitely old)")
    age = policy.now - kth
    return (f"the newest checkpoint {policy.quorum} witness(es) cosigned (size {size}) is {age} s old, over the "
            f"maximum witness age of {policy.max_age} s")


MAX_BAD_COSIGNATURES_PER_KEY = 20  # reported per witness key; every line is still verified (a valid one may follow)


class _CosignatureScan:
    """The stored cosignatures read so far: valid ones by the size they cosign, and the findings of the rest."""

    def __init__(
        self, snapshot: LogView, policy: WitnessRequirement, origin: str | None, max_seq: int, findings: list[Finding]
    ) -> None:
        self._snapshot, self._policy, self._origin, self._max_seq = snapshot, policy, origin, max_seq
        self._findings = findings
        self._newest: dict[int, dict[WitnessKey, int]] = {}  # size -> witness key -> newest valid timestamp
        self._placed: dict[str, int | None] = {}  # checkpoint text -> the size it counts for (None: it counts for none)
        self._failed: dict[WitnessKey, int] = {}
        self._reported: set[tuple[int, str, str]] = set()
        self._best = -1  # the largest size K keys cosigned so far: kept as rows come, so each check is O(1)

    def add(self, filed: int, text: str, line: str) -> None:
        judgement = self._policy.judge(text, line)
        if judgement.failing and (filed, text, line) not in self._reported:  # a copied row is one finding
            self._reported.add((filed, text, line))
            for key in judgement.failing:
                self._report_failing(key, filed)
        if not judgement.valid:
            return
        size = self._place(filed, text)
        if size is None:
            return
        newest = self._newest.setdefault(size, {})
        for key, timestamp in judgement.valid:
            newest[key] = max(timestamp, newest.get(key, -1))
        if size > self._best and self._policy.rule.tally(newest).met:
            self._best = size

    def best_at_or_above(self, low: int) -> tuple[int, int | None] | None:
        """The largest size at or above `low` that K witness keys cosigned, with the K-th newest timestamp."""
        if self._best < 0 or self._best < low:
            return None
        return self._best, self._policy.rule.tally(self._newest[self._best]).time

    def _report_failing(self, key: WitnessKey, filed: int) -> None:
        failed = self._failed.get(key, 0) + 1
        self._failed[key] = failed
        if failed <= MAX_BAD_COSIGNATURES_PER_KEY:
            self._findings.append(Finding(
                FindingKind.BAD_SIGNATURE, None, filed,
                f"a stored cosignature of size {filed} filed as witness {key.name}'s does not verify under its key "
                "(edited or planted in the store, or dated over 600 s ahead)",
            ))
        elif failed == MAX_BAD_COSIGNATURES_PER_KEY + 1:
            self._findings.append(Finding(
                FindingKind.BAD_SIGNATURE, None, None,
                f"more than {MAX_BAD_COSIGNATURES_PER_KEY} stored cosignatures claiming witness {key.name} failed to "
                "verify; the rest are not listed",
            ))

    def _place(self, filed: int, text: str) -> int | None:
        """The size a validly cosigned `text` counts for, judged once per text (findings for those that count
        for none)."""
        if text in self._placed:
            return self._placed[text]
        size, finding = _placement(self._snapshot, self._origin, filed, text, self._max_seq)
        if finding is not None:
            self._findings.append(finding)
        self._placed[text] = size
        return size


def _placement(
    snapshot: LogView, origin: str | None, filed: int, text: str, max_seq: int
) -> tuple[int | None, Finding | None]:
    """Where a validly cosigned checkpoint `text`, stored under size `filed`, counts: its own size when it is this
    store's checkpoint there; a finding when it is another log's or no checkpoint (`bad_signature`: it cosigns
    nothing of this store), or this log's with another root (`checkpoint_mismatch`: a fork a witness saw)."""
    try:
        body: CheckpointBody = parse_checkpoint(text)
    except NoteError as error:
        return None, Finding(
            FindingKind.BAD_SIGNATURE, None, filed, f"a stored cosignature filed at size {filed} covers no checkpoint "
            f"({error})",
        )
    if body.origin != origin:
        return None, Finding(
            FindingKind.BAD_SIGNATURE, None, filed,
            f"a stored cosignature filed at size {filed} covers size {body.size} of log {body.origin}, not this "
            "store's log (edited or planted in the store)",
        )
    if body.size > max_seq:
        return None, None  # above the rows this audit checks: it says nothing of them
    try:
        root = root_from_reader(snapshot.tree(body.size), body.size)
    except (MerkleError, StoreDamaged):
        return None, None  # the tree itself is damaged: the audit's tree check reports that
    if root != body.root or snapshot.chain_at(body.size) != body.chain_hash:
        return None, Finding(
            FindingKind.CHECKPOINT_MISMATCH, None, body.size,
            f"a witness cosigned size {body.size} with another root or chain hash than this store's: a fork of this "
            "log",
        )
    return body.size, None


def _unwitnessed(snapshot: LogView, first: int, last: int, why: str) -> Finding:
    link = snapshot.link_at(first)
    budget_id = link[2] if link is not None and isinstance(link[2], str) else None
    count = last - first + 1
    return Finding(
        FindingKind.UNWITNESSED_ROWS, budget_id, first,
        f"rows {first}..{last} ({count} row{'s' if count != 1 else ''}) are unwitnessed: {why}",
    )


def witnessed_note(
    snapshot: LogView,
    policy: WitnessRequirement,
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
        if policy.tally(everything, text).met:
            return text + "\n" + "".join(everything)
    return None


def _checked_line(text: str, line: str, policy: WitnessRequirement, writers: Sequence[VerifierKey]) -> bool:
    """Whether a signature line of `text` may be kept: it verifies when it claims a witness or a given writer key;
    a line by a key the auditor was not given is kept as it is (verifiers ignore keys they do not know)."""
    try:
        signature = parse_note(text + "\n" + line)[1][0]
    except NoteError:
        return False
    if any((signature.name, signature.key_hash) == (key.name, key.key_id) for key in policy.keys):
        return policy.tally([line], text).valid == 1
    claimed = [key for key in writers if (key.name, key.key_hash) == (signature.name, signature.key_hash)]
    return all(key.verify(text.encode("utf-8"), signature.signature) for key in claimed)


MAX_SIZE_WARNINGS = 20  # stored witness sizes named one by one; the rest are counted


def witness_size_warnings(snapshot: LogView, policy: WitnessRequirement | None) -> list[str]:
    """Spec 9.9.1: a warning for each stored witness size that no valid stored cosignature of that witness at exactly
    that size backs (a planted row, or a 409's word stored by an earlier release). With the witness's key among the
    policy's, the cosignature must verify under it; without it, one claiming that witness (name and key ID) must be
    stored there: no key, no verification, but a size with no cosignature at all is still named."""
    unbacked = 0
    warnings: list[str] = []
    for name, key_id, size in snapshot.witness_sizes():
        if _size_backed(snapshot, policy, name, key_id, size):
            continue
        unbacked += 1
        if unbacked <= MAX_SIZE_WARNINGS:
            warnings.append(
                f"the store says witness {clip(name, 60)} (key ID {clip(key_id, 8)}) cosigned size {size}, but no "
                f"valid stored cosignature of that witness at exactly size {size} backs it: a claim, not a "
                "cosignature (planted, or a refusal's word); submitters no longer read it"
            )
    if unbacked > MAX_SIZE_WARNINGS:
        warnings.append(f"{unbacked - MAX_SIZE_WARNINGS} more stored witness sizes that no cosignature backs")
    return warnings


def _size_backed(snapshot: LogView, policy: WitnessRequirement | None, name: str, key_id: str, size: int) -> bool:
    keys = policy.keys if policy is not None else ()
    key = next((item for item in keys if (item.name, f"{item.key_id:08x}") == (name, key_id)), None)
    for text, line in snapshot.cosignatures_filed_at(size):
        try:
            if parse_tlog_checkpoint(text).size != size:
                continue
            signatures = parse_note(text + "\n" + line)[1]
        except NoteError:
            continue
        if policy is not None and key is not None:
            if any(valid is key for valid, _ in policy.judge(text, line).valid):
                return True
        elif any((item.name, f"{item.key_hash:08x}") == (name, key_id) for item in signatures):
            return True
    return False


def judge_witness_answer(
    snapshot: LogView,
    source: str,
    answer: Checkpoint | str,
    origin: str | None,
    writers: Sequence[VerifierKey],
    max_seq: int,
) -> tuple[Checkpoint | None, list[Finding]]:
    """A witness's `GET /latest` answer against the store (spec 9.5, 9.9.4): the checkpoint to hold the store to, or
    a finding. The witness vouches for the origin, size and root; the extension lines (the `chain` line) only a
    writer's signature authenticates. So an answer of this store's size and root whose extension lines differ from
    the store's checkpoint is `checkpoint_mismatch` when a trusted writer signature on it verifies (the writer
    signed two texts of one size), and `StoreUnavailable` (exit 2, its word cannot be weighed) when none does."""
    if isinstance(answer, Checkpoint):
        return answer, []
    try:
        text = parse_note(answer)[0]
        served = parse_tlog_checkpoint(text)
    except NoteError as error:
        raise StoreUnavailable(f"{source} served no checkpoint note: {error}") from None
    if served.origin != origin or served.size > max_seq or served.size == 0:
        return _as_checkpoint(source, answer, served)
    try:
        root = root_from_reader(snapshot.tree(served.size), served.size)
    except (MerkleError, StoreDamaged):
        return _as_checkpoint(source, answer, served)  # the tree's own findings say why
    chain = snapshot.chain_at(served.size)
    if root != served.root or chain is None:
        return _as_checkpoint(source, answer, served)
    if not _CHAIN.fullmatch(chain):
        return _as_checkpoint(source, answer, served)  # an edited row: its own findings say so
    if text == format_checkpoint(served.origin, served.size, root, chain):
        return Checkpoint.from_note(answer, source=source), []
    return None, [_extension_mismatch(source, answer, served.size, writers)]


_CHAIN = re.compile(r"[0-9a-f]{64}")


def _as_checkpoint(source: str, answer: str, served: TlogCheckpoint) -> tuple[Checkpoint | None, list[Finding]]:
    """An answer that is not this store's checkpoint at its size: this project's checkpoint is held to the store as
    any given one; another text (no `chain` line) is reported from its first three lines."""
    try:
        return Checkpoint.from_note(answer, source=source), []
    except CheckpointError:
        pass
    return None, [Finding(
        FindingKind.CHECKPOINT_MISMATCH, None, served.size,
        f"{source}: the witness cosigned size {served.size} of log {clip(served.origin, 80)} with root "
        f"{base64.b64encode(served.root).decode('ascii')}, which this store does not extend",
    )]


def _extension_mismatch(source: str, answer: str, size: int, writers: Sequence[VerifierKey]) -> Finding:
    try:
        verified, failed = trusted_signers(answer, writers)
    except NoteError:
        verified, failed = [], []
    if not verified or failed:
        raise StoreUnavailable(
            f"{source} serves size {size} with this store's root but other extension lines than the store's "
            "checkpoint, and no trusted writer signature on it verifies (give the writer's --trusted-key): its word "
            "cannot be weighed"
        )
    return Finding(
        FindingKind.CHECKPOINT_MISMATCH, None, size,
        f"{source}: the witness's checkpoint of size {size} has this store's root but other extension lines (the "
        f"chain line) than the store's, and writer {verified[0].name}'s signature on it verifies: the writer signed "
        "two texts of one size",
    )
