"""Which findings are causes and which rows they name (spec 11.4), as pure functions over findings that the report
applies whenever it is built.

Causes come first: `published_mismatch` (a file edited after publishing) and `bad_signature` (a checkpoint nobody
trusted signed) before everything, then the row findings, then the `checkpoint_mismatch` and the rest that follow
from them. A publication has no stored chain hash per row: the chain is recomputed from the entries and only its
end meets a signed value (the checkpoint's `chain` line), so the break shows at the last row whatever entry was
edited. When an entry is known to differ from its tile, the break is that entry's, and it is said there; a break no
entry can be named for is no row's (the row at the end may be intact), so it names no affected row.
"""

from __future__ import annotations

from collections.abc import Iterable

from compute_budget.core.verify import Finding, FindingKind

# The kinds of finding about one row itself: what an operator looks for first.
ROW_KINDS = frozenset({
    FindingKind.BUDGET_ID_MISMATCH, FindingKind.REDERIVE_MISMATCH, FindingKind.CHAIN_BREAK,
    FindingKind.UNSUPPORTED_POLICY_VERSION, FindingKind.MALFORMED_ROW,
})
# What the other findings follow from when they come together.
CAUSES = (FindingKind.PUBLISHED_MISMATCH, FindingKind.BAD_SIGNATURE)
# The order of kinds in every rendering: the causes, then the spec's order.
KIND_ORDER: tuple[FindingKind, ...] = (*CAUSES, *(kind for kind in FindingKind if kind not in CAUSES))
_KIND_RANK = {kind: index for index, kind in enumerate(KIND_ORDER)}


def _rank(finding: Finding) -> int:
    """0 for a cause, 1 for a row finding (rows keep their `seq` order among themselves), then by kind."""
    if finding.kind in CAUSES:
        return 0
    if finding.kind in ROW_KINDS:
        return 1
    return 1 + _KIND_RANK[finding.kind]


def causes_first(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    """The findings, causes first (a stable sort: findings of one rank keep the order the audit made them in)."""
    return tuple(sorted(findings, key=_rank))


def names_an_entry(finding: Finding) -> bool:
    """True for a `published_mismatch` of one entry (a bundle's entry that differs from its tile): it names the
    entry's seq and budget_id; one naming a file and no entry carries no budget_id."""
    return (finding.kind is FindingKind.PUBLISHED_MISMATCH and finding.seq is not None
            and finding.budget_id is not None)


def is_row_finding(finding: Finding, publication: bool) -> bool:
    """True when the finding is about its row itself: a row finding, or (in a publication) an edited entry."""
    return finding.kind in ROW_KINDS or (publication and names_an_entry(finding))


def affected_rows(findings: Iterable[Finding], publication: bool) -> tuple[int, ...]:
    """The seqs of the rows whose entry or hashes are wrong. In a publication a chain break names its row only when
    an edited entry is there (`break_at_edited_entry` put it there)."""
    findings = list(findings)
    if not publication:
        return tuple(sorted({item.seq for item in findings if item.kind in ROW_KINDS and item.seq is not None}))
    edited = {item.seq for item in findings if names_an_entry(item)}
    rows = {
        item.seq for item in findings
        if item.kind in ROW_KINDS and item.seq is not None
        and (item.kind is not FindingKind.CHAIN_BREAK or item.seq in edited)
    }
    return tuple(sorted(rows | {seq for seq in edited if seq is not None}))


def break_at_edited_entry(findings: tuple[Finding, ...], last_seq: int) -> tuple[Finding, ...]:
    """A publication's findings with its chain break at the last row (`last_seq`: the chain recomputed from the
    entries does not reach the checkpoint's `chain` line) said at the first entry that differs from its tile, whose
    edit is what changed every chain hash from it on. Unchanged when no entry is named (applying it twice is
    applying it once)."""
    edited = [item for item in findings if names_an_entry(item) and item.seq is not None and item.seq <= last_seq]
    if not edited:
        return findings
    first = min(edited, key=lambda item: item.seq or 0)
    moved = Finding(
        FindingKind.CHAIN_BREAK, first.budget_id, first.seq,
        f"the chain recomputed from the entries does not reach the checkpoint's chain line at seq {last_seq}: "
        f"entry {first.seq} differs from what was published (published_mismatch), so every chain hash from it on "
        "changes",
    )
    placed: list[Finding] = []
    for item in findings:
        if item.kind is FindingKind.CHAIN_BREAK and item.seq == last_seq:
            if moved not in placed:
                placed.append(moved)
        else:
            placed.append(item)
    return tuple(placed)
