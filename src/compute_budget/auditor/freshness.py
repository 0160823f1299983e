"""Whether a publication is fresh (spec 10.2): what `--witness-url` witnesses last cosigned, held against the
published checkpoint. A witness that saw more rows than were published is `unpublished_rows` once the published
checkpoint's K-th newest cosignature is older than `--max-witness-age` (a mirror frozen, or rows held back); a
witness that saw fewer rows, or another root at the published size, saw another log (`checkpoint_mismatch`)."""

from __future__ import annotations

import base64

from compute_budget.auditor.witness_rules import WitnessRequirement
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.cosignature import is_fresh
from compute_budget.core.verify import Finding, FindingKind
from compute_budget.errors import CheckpointError, NoteError, StoreUnavailable, clip

NOT_CHECKED = "freshness not checked: a stale mirror would pass (give --witness-url URL=KEY)"


def freshness_findings(
    published: Checkpoint, answers: list[tuple[str, str]], policy: WitnessRequirement
) -> list[Finding]:
    """The findings of each witness answer (source, note) against the `published` checkpoint."""
    findings: list[Finding] = []
    for source, note in answers:
        try:
            served = Checkpoint.from_note(note, source=source)
        except (CheckpointError, NoteError) as error:
            raise StoreUnavailable(f"{source}: {clip(str(error), 200)}") from None
        findings += _judge(published, source, served, policy)
    return findings


def _judge(published: Checkpoint, source: str, served: Checkpoint, policy: WitnessRequirement) -> list[Finding]:
    size, witnessed = published.seq, served.seq
    if witnessed < size:
        return [_mismatch(published, f"{source} cosigned at most {witnessed} rows, the publication names {size}: "
                                     "the published checkpoint is not one the witnesses saw (a fork)")]
    if witnessed == size:
        if served.root != published.root or served.chain_hash != published.chain_hash:
            return [_mismatch(published, f"{source} cosigned another tree at size {size} (root "
                                         f"{_b64(served.root)}, the publication says {_b64(published.root)}): a fork")]
        return []
    parsed = published.parsed_note()
    lines = [signature.line() for signature in parsed.signatures] if parsed is not None else []
    tally = policy.tally(lines, parsed.text if parsed is not None else published.note_text())
    kth = tally.time
    # A timestamp of 0 makes no freshness claim: never fresh, however large --max-witness-age is.
    if kth is not None and is_fresh(kth, now=policy.now, max_age=policy.max_age):
        return []  # the mirror lags, within the age allowed
    age = "no" if kth is None else "the quorum's newest"
    old = f" is {policy.now - kth} s old" if kth else " has timestamp 0 (no freshness claim)" if kth == 0 else ""
    counted = policy.rule.count_words(tally.counted)
    why = f"{age} cosignature{old} ({counted}), over --max-witness-age {policy.max_age} s"
    missing = witnessed - size
    return [Finding(
        FindingKind.UNPUBLISHED_ROWS, None, size + 1,
        f"rows {size + 1}..{witnessed} ({missing} row{'s' if missing != 1 else ''}): {source} cosigned size "
        f"{witnessed}, the publication stops at {size} and {why}: a stale or frozen mirror, or rows held back",
    )]


def _mismatch(published: Checkpoint, detail: str) -> Finding:
    return Finding(FindingKind.CHECKPOINT_MISMATCH, None, published.seq, detail)


def _b64(value: bytes | None) -> str:
    return "none" if value is None else base64.b64encode(value).decode("ascii")
