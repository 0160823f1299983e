"""Causes first, the rows named, and whom the actions address (spec 11.4), on reports built in memory: a
publication's chain break said at the edited entry, a database's findings and actions as they were."""

from __future__ import annotations

import dataclasses
import re

from compute_budget.auditor.causes import KIND_ORDER, causes_first
from compute_budget.auditor.report import ACTIONS, PUBLICATION_ACTIONS, AuditReport
from compute_budget.core.log.head import ChainHead
from compute_budget.core.verify import Finding, FindingKind

LAST = 600
DATABASE_COMMAND = re.compile(r"\b(show|list|migrate|rotate|record)\b|\bcopy\b(?! of )")


def _finding(kind: FindingKind, seq: int | None, budget_id: str | None = None) -> Finding:
    return Finding(kind, budget_id, seq, f"{kind.value} at {seq}")


def _report(*findings: Finding, publication: bool = False) -> AuditReport:
    return AuditReport(
        database="here", rows_checked=LAST, findings=findings, head=ChainHead(LAST, "ab" * 32, "id-last"),
        status_counts={}, reason_counts={}, elapsed_seconds=0.1, publication=publication,
    )


# What an audit of a publication with entry 300 edited makes, in the order the audit makes it.
AS_MADE = (
    _finding(FindingKind.CHECKPOINT_MISMATCH, 512),
    _finding(FindingKind.CHAIN_BREAK, LAST, "id-last"),
    _finding(FindingKind.PUBLISHED_MISMATCH, 300, "id-300"),
    _finding(FindingKind.CHECKPOINT_MISMATCH, LAST),
)


def test_causes_come_first_and_rows_keep_their_order() -> None:
    made = (
        _finding(FindingKind.CHECKPOINT_MISMATCH, 10), _finding(FindingKind.CHAIN_BREAK, 9),
        _finding(FindingKind.REDERIVE_MISMATCH, 4), _finding(FindingKind.BAD_SIGNATURE, 10),
        _finding(FindingKind.UNATTESTED_ROWS, 11), _finding(FindingKind.PUBLISHED_MISMATCH, 3),
    )
    assert [(item.kind.value, item.seq) for item in causes_first(made)] == [
        ("bad_signature", 10), ("published_mismatch", 3), ("chain_break", 9), ("rederive_mismatch", 4),
        ("checkpoint_mismatch", 10), ("unattested_rows", 11),
    ]
    assert KIND_ORDER[:2] == (FindingKind.PUBLISHED_MISMATCH, FindingKind.BAD_SIGNATURE)
    assert set(KIND_ORDER) == set(FindingKind)


def test_a_publications_chain_break_is_said_at_the_edited_entry() -> None:
    report = _report(*AS_MADE, publication=True)
    assert [(item.kind.value, item.seq) for item in report.findings] == [
        ("published_mismatch", 300), ("chain_break", 300), ("checkpoint_mismatch", 512), ("checkpoint_mismatch", LAST),
    ]
    moved = report.findings[1]
    assert moved.budget_id == "id-300"
    assert "does not reach the checkpoint's chain line at seq 600: entry 300" in moved.detail
    assert report.affected_rows == (300,)
    assert [report.cause_seq(item) for item in report.findings] == [300, 300, 300, 300]
    assert list(report.findings_by_kind()) == ["published_mismatch", "chain_break", "checkpoint_mismatch"]
    again = dataclasses.replace(report, warnings=("rebuilt",))  # a report rebuilt stays the same
    assert again.findings == report.findings


def test_a_publications_chain_break_no_entry_explains_names_no_row() -> None:
    report = _report(_finding(FindingKind.CHAIN_BREAK, LAST, "id-last"),
                     _finding(FindingKind.CHECKPOINT_MISMATCH, LAST), publication=True)
    assert report.affected_rows == ()
    assert report.findings[0].seq == LAST
    assert report.cause_seq(report.findings[0]) is None
    with_a_row = _report(_finding(FindingKind.REDERIVE_MISMATCH, 17, "id-17"),
                         _finding(FindingKind.CHAIN_BREAK, LAST, "id-last"), publication=True)
    assert with_a_row.affected_rows == (17,)
    assert with_a_row.cause_seq(with_a_row.findings[1]) == 17


def test_a_database_report_keeps_its_chain_break_and_its_actions() -> None:
    report = _report(*AS_MADE[:2], _finding(FindingKind.SCHEMA_TAMPERED, None))
    assert report.affected_rows == (LAST,)
    assert report.findings[0] == AS_MADE[1]  # the row first, unmoved
    assert all(report.action(kind) == ACTIONS[kind] for kind in FindingKind)
    assert "copy --through" in report.action(FindingKind.CHAIN_BREAK)
    assert "record --adopt-unsigned" in report.action(FindingKind.UNATTESTED_ROWS)
    assert report.to_dict()["freshness_checked"] is None


def test_every_action_for_a_publications_reader_keeps_tells_and_audits_again() -> None:
    report = _report(publication=True)
    assert set(PUBLICATION_ACTIONS) == set(FindingKind)
    for kind in FindingKind:
        action = report.action(kind)
        assert DATABASE_COMMAND.search(action) is None, (kind, action)
        assert "keep a copy of the publication's files" in action, kind
        assert "tell the publisher" in action, kind
        assert "audit again" in action, kind


def test_the_section_the_readers_actions_point_to_exists_and_covers_every_kind_they_meet() -> None:
    from tests.conftest import REPO_ROOT

    incident = (REPO_ROOT / "docs" / "incident.md").read_text(encoding="utf-8")
    assert all('docs/incident.md, "Auditing a publication"' in action for action in PUBLICATION_ACTIONS.values())
    section = incident.split("\n## Auditing a publication\n", 1)[1].split("\n## ", 1)[0]
    for kind in ("published_mismatch", "chain_break", "checkpoint_mismatch", "bad_signature", "unpublished_rows",
                 "unattested_rows", "rederive_mismatch"):
        assert f"`{kind}`" in section, kind
    for said in ("**What to keep.**", "**Whom to tell.**", "**When to audit again.**"):
        assert said in section
