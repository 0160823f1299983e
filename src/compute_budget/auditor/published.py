"""The audit of a source read from its published checkpoint (`audit --tiles`, spec 10.2), as the one audit sees it:
the source is opened once, its checkpoint read, parsed and pinned (every worker reads the same tree), and given to
the audit as the checkpoint to hold (trusted keys and witness quorum, as for `--checkpoint`). The witnesses'
answers are judged here, against the published size (`freshness`), not by the database rule that the store
extends them.

Before any tile is read (spec 11.2) the checkpoint itself is judged: its origin, a trusted signature that counts
(`--retired`/`--revoked`) and the witness quorum; one that fails is the one finding. Then every hash tile is read and
judged (11.3: the source's `check_tiles`), then the rows; the entry bundles below `--since` and outside the
look-back are named as not read. An audit that meets a missing file while a `publish` replaces the checkpoint
(11.7.6) starts again once from the new one."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, cast

from compute_budget.auditor.checkpoints import key_label, policy_log_keys
from compute_budget.auditor.freshness import NOT_CHECKED, freshness_findings
from compute_budget.auditor.key_states import HandoverFiles, published_rotations
from compute_budget.auditor.report import AuditReport, utc_now
from compute_budget.auditor.request import AuditInputs, AuditRequest
from compute_budget.auditor.source import AuditSource
from compute_budget.auditor.witness_rules import WitnessRequirement
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.head import GENESIS_CHAIN_HASH, ChainHead
from compute_budget.core.log.key_states import KeyStatus, signature_problem
from compute_budget.core.log.note import parse_note
from compute_budget.core.log.tree import TILE_LEVEL, due_tiles
from compute_budget.core.log.witness_policy import TlogPolicy
from compute_budget.core.seal_checks import trusted_signers
from compute_budget.core.verify import Finding, FindingKind
from compute_budget.errors import (
    ArgumentTypeError,
    NoteError,
    PublicationMissing,
    PublicationUnavailable,
    StoreUnavailable,
)
from compute_budget.keys.key_files import witness_key

PUBLISHED_LABEL = "the published checkpoint"


@dataclass(frozen=True, slots=True)
class Pinned:
    """A publication's audit, prepared: the request to run, the checkpoint read, the witnesses' answers."""

    request: AuditRequest
    published: Checkpoint
    answers: tuple[tuple[str, str], ...]


def pin(request: AuditRequest, inputs: AuditInputs, published: Checkpoint) -> tuple[Pinned, AuditInputs]:
    """Prepare the audit of a source read from its `published` checkpoint (`StoreUnavailable`: it cannot run):
    the request and inputs that hold it as the checkpoint, parsed once when it was read."""
    if inputs.checkpoint is not None:
        raise ArgumentTypeError("a publication's audit holds its own checkpoint: give no other checkpoint")
    if request.expected_origin is None:
        raise ArgumentTypeError("auditing a publication needs the log's origin (--origin NAME)")
    if not request.trusted_keys:
        raise ArgumentTypeError("auditing a publication needs the writer's key (--trusted-key KEY)")
    answers = []
    for source, answer in inputs.answers:
        if not isinstance(answer, str):
            raise StoreUnavailable(f"{source}: a witness's answer is its note text")
        answers.append((source, answer))
    pinned = Pinned(
        dataclasses.replace(request, checkpoint=published, witnessed_checkpoints=()), published, tuple(answers)
    )
    return pinned, dataclasses.replace(inputs, checkpoint=published, answers=[], checkpoint_label=PUBLISHED_LABEL)


def with_freshness(report: AuditReport, pinned: Pinned, now: int) -> AuditReport:
    """The report with the witnesses' answers judged against the publication, or saying freshness was not
    checked."""
    request = pinned.request
    if not pinned.answers:
        return dataclasses.replace(report, warnings=(*report.warnings, NOT_CHECKED))
    rule = request.witness_policy
    if rule is None or not rule.requires_witnesses:  # the --witness-key quorum, else all the answering witnesses
        keys = tuple(dict.fromkeys(witness_key(item) for item in (*request.witness_keys, *request.freshness_keys)))
        rule = TlogPolicy.from_witness_keys(keys, request.witness_quorum if request.witness_keys else None)
    policy = WitnessRequirement(rule, request.max_witness_age, now)
    found = freshness_findings(pinned.published, list(pinned.answers), policy)
    return dataclasses.replace(report, findings=(*report.findings, *found))


def another_log(origin: str | None, expected_origin: str, published_size: int | None) -> Finding:
    """The `checkpoint_mismatch` (section 6: not the history that was expected) of a source that is not the log
    `expected_origin` names. A publication's (`published_size`: its checkpoint's size) is worded for what was read,
    its checkpoint, and names that size as the audit's other checkpoint findings do; a store's names no row."""
    if published_size is not None:
        return Finding(
            FindingKind.CHECKPOINT_MISMATCH, None, published_size,
            f"the publication's checkpoint is of log {origin}, not {expected_origin}: another log is published in "
            "its place",
        )
    return Finding(
        FindingKind.CHECKPOINT_MISMATCH, None, None,
        f"this store is log {origin or '(none: the store has no origin)'}, not {expected_origin}: "
        "another store is in its place",
    )


class TileVerdict(Protocol):
    """What reading every hash tile found: the findings, and how many tiles and bytes were read."""

    @property
    def findings(self) -> list[Finding]: ...
    @property
    def tiles(self) -> int: ...


class TiledSource(Protocol):
    """A source read from its published checkpoint (`published()` is not None): its tiles, and the checkpoint again."""

    def check_tiles(self, on_progress: Callable[[int, int], None] | None = None) -> TileVerdict: ...
    def reread(self) -> AuditSource | None: ...


RunAudit = Callable[[AuditSource, AuditRequest, AuditInputs], AuditReport]
RACED = "the publication changed while it was read; run again"


def audit_published(source: AuditSource, request: AuditRequest, inputs: AuditInputs, run: RunAudit) -> AuditReport:
    """The audit of a source read from its published checkpoint (`run`: the audit of its rows). A missing file
    while the checkpoint changed (a `publish` raced the audit) starts it again, once, from the new checkpoint; a
    second change is `PublicationUnavailable` (exit 2), never a finding."""
    try:
        return _audit_pinned(source, request, inputs, run)
    except PublicationMissing:
        fresh = cast(TiledSource, source).reread()
        if fresh is None:
            raise
    try:
        return _audit_pinned(fresh, request, inputs, run)
    except PublicationMissing:
        if cast(TiledSource, fresh).reread() is not None:
            raise PublicationUnavailable(RACED) from None
        raise


def _audit_pinned(source: AuditSource, request: AuditRequest, inputs: AuditInputs, run: RunAudit) -> AuditReport:
    """The checkpoint first, then every tile, then the rows (see the module)."""
    published = source.published()
    assert published is not None  # the caller's condition
    pinned, inputs = pin(request, inputs, published)
    started, started_at = time.perf_counter(), utc_now()
    first = checkpoint_findings(pinned.request, inputs, published,
                                source if isinstance(source, HandoverFiles) else None)
    if first:
        report = AuditReport(
            database=source.location.display, rows_checked=0, findings=tuple(first),
            head=ChainHead(0, GENESIS_CHAIN_HASH, None), status_counts={}, reason_counts={},
            elapsed_seconds=time.perf_counter() - started, checkpoint=published, since=inputs.since,
            started_at=started_at, finished_at=utc_now(), origin=published.origin,
            trusted_keys=tuple(key.format() for key in inputs.keys), head_read=False,
        )
        return with_freshness(report, pinned, int(time.time()))
    verdict = cast(TiledSource, source).check_tiles(request.on_progress)
    report = run(source.linked_from(inputs.since), pinned.request, inputs)
    unread = [] if report.escalated else entries_not_read(published.seq, inputs.since, request.look_back, inputs.day)
    report = dataclasses.replace(
        report, findings=(*verdict.findings, *report.findings), warnings=(*report.warnings, *unread),
    )
    return with_freshness(report, pinned, int(time.time()))


def checkpoint_findings(
    request: AuditRequest, inputs: AuditInputs, published: Checkpoint, handovers: HandoverFiles | None = None
) -> list[Finding]:
    """The published checkpoint judged before any tile is read (spec 11.2), whatever size or root it names: of
    another log, `checkpoint_mismatch` at its size; with no trusted signature that counts or short of the witness
    quorum, `bad_signature`. Empty when it verifies. One no trusted key signed names its signers, and each
    handover from a trusted key the publication holds (`handovers`) with what to obtain (spec 11.6)."""
    expected = request.expected_origin
    if expected is not None and published.origin != expected:
        return [another_log(published.origin, expected, published.seq)]
    keys = policy_log_keys(list(inputs.keys), request.witness_policy, published.origin)

    def bad(detail: str) -> list[Finding]:
        return [Finding(FindingKind.BAD_SIGNATURE, None, published.seq, f"the published checkpoint {detail}")]

    note = published.note or ""
    try:
        verified, failed = trusted_signers(note, keys)
    except NoteError as error:
        return bad(f"cannot be read as a signed note: {error}")
    counting, reasons = [], [f"carries a signature by {key_label(key)} that does not verify" for key in failed]
    for key in verified:
        state = request.key_states.of_key(key)
        # A revoked key's signature below its size counts once the tree proves it: the audit judges that.
        pending = state.status is KeyStatus.REVOKED and published.seq < state.size
        problem = None if pending else signature_problem(state, published.seq, published.root)
        if problem is None:
            counting.append(key)
        else:
            reasons.append(f"carries a signature by {key_label(key)} that does not count: {problem}")
    if not counting:
        if not reasons:
            signers = ", ".join(f"{item.name} (key ID {item.key_hash:08x})" for item in published.signatures())
            reasons.append(f"carries no signature by a trusted key (signed by {signers or 'nobody'}, unverified)")
            if handovers is not None and published.origin is not None:
                known = [inputs.since.seq] if inputs.since is not None else []  # what HTTP, unlisted, can probe
                reasons += published_rotations(handovers, keys, published.origin, published.seq, known)
        return bad("; ".join(reasons) + ": no tile was read")
    return _quorum_findings(published, inputs.policy)


def _quorum_findings(published: Checkpoint, policy: WitnessRequirement | None) -> list[Finding]:
    """With witnesses required, the published checkpoint must carry the quorum's cosignatures itself."""
    if policy is None:
        return []
    try:
        text, signatures = parse_note(published.note or "")
    except NoteError:
        return []  # read as a note already
    tally = policy.tally([signature.line() for signature in signatures], text)
    if tally.met:
        return []
    return [Finding(
        FindingKind.BAD_SIGNATURE, None, published.seq,
        f"the published checkpoint carries {policy.rule.count_words(tally.counted)} by the witness keys: no tile "
        "was read",
    )]


_SHOWN_RANGES = 6


def entries_not_read(size: int, since: Checkpoint | None, look_back: int, day: int) -> list[str]:
    """The report's warning naming the entry bundles an incremental audit did not read (spec 11.3): below
    `--since`, outside today's look-back slice (their hash tiles were all read and checked)."""
    if since is None or not 0 < since.seq <= size:
        return []
    first_read = (since.seq - 1) >> TILE_LEVEL  # the row at --since is read, to hold its chain hash
    due = set(due_tiles(since.seq, look_back, day)) if look_back else set()
    ranges: list[list[int]] = []
    for bundle in range(first_read):
        if bundle in due:
            continue
        if ranges and ranges[-1][1] == bundle - 1:
            ranges[-1][1] = bundle
        else:
            ranges.append([bundle, bundle])
    if not ranges:
        return []
    count = sum(last - first + 1 for first, last in ranges)
    shown = ", ".join(
        f"rows {(first << TILE_LEVEL) + 1}..{(last + 1) << TILE_LEVEL}" for first, last in ranges[:_SHOWN_RANGES]
    )
    more = f" and {len(ranges) - _SHOWN_RANGES} more ranges" if len(ranges) > _SHOWN_RANGES else ""
    slice_words = f" and outside today's --look-back {look_back} slice" if look_back else ""
    return [f"entries not read: {count} entry bundle(s) ({shown}{more}), below --since{slice_words}; their hash "
            "tiles were read and checked"]
