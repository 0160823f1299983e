"""The replay auditor against tampered SQLite files: every kind of finding, at the right row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compute_budget import BudgetStore, decide
from compute_budget.auditor.scan import AuditReport, FindingKind, audit
from compute_budget.core.chain import chain_hash
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.policy.hashing import spans_json
from tests.backends import insert_sql, rows, tamper
from tests.conftest import gate_lines, make_gate

ROWS = 40


@pytest.fixture
def store(store_target: str) -> str:
    """A clean store of 40 varied rows, on each backend."""
    with BudgetStore.open(store_target) as opened:
        opened.record_many(gate_lines(ROWS))
    return store_target


sqlite_only = pytest.mark.parametrize("store_target", ["sqlite"], indirect=True)


def kinds_at(report: AuditReport, seq: int) -> set[str]:
    """The kinds of finding reported for one row."""
    return {finding.kind.value for finding in report.findings if finding.seq == seq}


def test_clean_store_audits_clean(store: str) -> None:
    """Nothing tampered: clean, every row checked, the head reported."""
    report = audit(store)
    assert report.clean
    assert report.rows_checked == ROWS
    assert report.head.seq == ROWS
    assert sum(report.status_counts.values()) == ROWS
    assert report.to_dict()["findings"] == []


@pytest.mark.slow
@sqlite_only
def test_audit_never_changes_the_file(store: str) -> None:
    """The audit is read-only: the database file is byte-identical before and after."""
    before = Path(store).read_bytes()
    audit(store)
    audit(store, jobs=2)
    assert Path(store).read_bytes() == before


@pytest.mark.postgres_smoke
def test_edited_limit(store: str) -> None:
    """max_steps raised on row 7: re-derivation names the field and both values; hash and chain break."""
    tamper(store, "UPDATE compute_budget_decisions SET max_steps = 100 WHERE seq = 7")
    report = audit(store)
    assert kinds_at(report, 7) == {"rederive_mismatch", "budget_id_mismatch", "chain_break"}
    detail = next(f.detail for f in report.findings if f.kind is FindingKind.REDERIVE_MISMATCH)
    assert "max_steps stored 100, policy gives 10" in detail
    assert {f.seq for f in report.findings} == {7}


def test_edited_status(store: str) -> None:
    """A blocked row relabelled allowed is caught on that row."""
    blocked_seq = next(row[0] for row in rows(store) if row[6] == "budget_blocked")
    tamper(store, f"UPDATE compute_budget_decisions SET status = 'budget_allowed' WHERE seq = {blocked_seq}")
    report = audit(store)
    assert {"rederive_mismatch", "budget_id_mismatch", "chain_break"} <= kinds_at(report, blocked_seq)
    assert any("status stored 'budget_allowed'" in f.detail for f in report.findings)


def test_edited_gate_input(store: str) -> None:
    """A gate input rewritten to another reason no longer re-derives its stored decision."""
    row = rows(store)[0]
    gate = json.loads(row[15])
    gate["reason_code"] = "eligible_missing_proposal"
    tamper(store, ("UPDATE compute_budget_decisions SET gate_input = :gate WHERE seq = 1", {"gate": json.dumps(gate)}))
    report = audit(store)
    assert kinds_at(report, 1) == {"rederive_mismatch", "chain_break"}


def test_edited_explanation_breaks_only_the_chain(store: str) -> None:
    """explanation is not re-derived (rewording is not tampering) but the chain covers it."""
    tamper(store, "UPDATE compute_budget_decisions SET explanation = 'all fine, trust me' WHERE seq = 7")
    report = audit(store)
    assert kinds_at(report, 7) == {"chain_break"}
    assert len(report.findings) == 1


def test_unknown_policy_version(store: str) -> None:
    """A row claiming an unregistered policy version is reported as such."""
    tamper(store, "UPDATE compute_budget_decisions SET policy_version = 'compute_budget.v9' WHERE seq = 3")
    report = audit(store)
    assert "unsupported_policy_version" in kinds_at(report, 3)
    assert "compute_budget.v9" in next(f.detail for f in report.findings if f.kind == "unsupported_policy_version")


@pytest.mark.parametrize("column", ["gate_input", "evidence_spans"])
def test_unreadable_json_in_a_column(store: str, column: str) -> None:
    """Broken JSON in a JSON column makes a malformed_row finding, and the audit goes on."""
    tamper(store, f"UPDATE compute_budget_decisions SET {column} = '{{broken' WHERE seq = 9")
    report = audit(store)
    assert "malformed_row" in kinds_at(report, 9)
    assert report.rows_checked == ROWS
    assert all(f.seq == 9 for f in report.findings)


@sqlite_only  # PostgreSQL's typed columns cannot hold text in an integer column
def test_wrong_type_in_a_column(store: str) -> None:
    """A limit stored as text is a malformed row, named with the column."""
    tamper(store, "UPDATE compute_budget_decisions SET max_steps = 'ten' WHERE seq = 11")
    report = audit(store)
    assert kinds_at(report, 11) == {"malformed_row"}
    assert "max_steps is str" in report.findings[0].detail


def test_deleted_middle_row(store: str) -> None:
    """Deleting row 20 breaks the chain at row 21, saying a row is missing."""
    tamper(store, "DELETE FROM compute_budget_decisions WHERE seq = 20")
    report = audit(store)
    assert [(f.kind.value, f.seq) for f in report.findings] == [("chain_break", 21)]
    assert "1 row(s) missing" in report.findings[0].detail


def test_two_rows_swapped(store: str) -> None:
    """Rows 12 and 13 exchanging places breaks the three links through them."""
    tamper(
        store,
        "UPDATE compute_budget_decisions SET seq = 1000012 WHERE seq = 12",
        "UPDATE compute_budget_decisions SET seq = 12 WHERE seq = 13",
        "UPDATE compute_budget_decisions SET seq = 13 WHERE seq = 1000012",
    )
    report = audit(store)
    assert {f.seq for f in report.findings} == {12, 13, 14}
    assert all(f.kind is FindingKind.CHAIN_BREAK for f in report.findings)


def test_consistent_forged_row_in_the_middle(store: str) -> None:
    """A forged row with a correct budget_id and a correctly linked chain hash is still caught after it."""
    forged_gate = make_gate(decision_id="forged", reason_code="eligible_missing_role")
    decision = decide(forged_gate)
    original = rows(store)
    prev = original[14]  # row 15
    values: list[Any] = [
        16, decision.budget_id, decision.policy_version, decision.gate_decision_id, decision.gate_policy_version,
        decision.gate_input_digest, decision.status.value, decision.reason_code, decision.max_candidates,
        decision.max_depth, decision.max_steps, decision.max_wallclock_ms, decision.max_parallelism,
        spans_json(decision.evidence_spans), decision.explanation, json.dumps(forged_gate), prev[16],
    ]
    values.append(chain_hash(prev[-1], values))
    shifts = [f"UPDATE compute_budget_decisions SET seq = seq + 1 WHERE seq = {seq}" for seq in range(ROWS, 15, -1)]
    tamper(store, *shifts, insert_sql(values))
    report = audit(store)
    assert kinds_at(report, 16) == set()  # the forgery itself is internally consistent...
    assert kinds_at(report, 17) == {"chain_break"}  # ...but the row after it no longer links


@pytest.mark.postgres_smoke
def test_truncated_tail_is_caught_only_with_a_checkpoint(store: str) -> None:
    """Dropping the last rows leaves a valid chain; the checkpoint taken before proves the truncation."""
    with BudgetStore.open(store, readonly=True) as opened:
        checkpoint = opened.checkpoint()
    tamper(store, f"DELETE FROM compute_budget_decisions WHERE seq > {ROWS - 3}")
    assert audit(store).clean
    report = audit(store, checkpoint=checkpoint)
    assert [f.kind.value for f in report.findings] == ["checkpoint_mismatch"]
    assert "truncated" in report.findings[0].detail


def test_rewritten_history_is_caught_only_with_a_checkpoint(store: str) -> None:
    """A history rewritten from row 3 on with every chain hash recomputed still fails its checkpoint."""
    with BudgetStore.open(store, readonly=True) as opened:
        checkpoint = opened.checkpoint()
    original = rows(store)
    statements: list[str | tuple[str, dict[str, Any]]] = [
        ("UPDATE compute_budget_decisions SET explanation = :text WHERE seq = 3", {"text": "rewritten"})
    ]
    prev_hash = original[1][-1]
    for row in original[2:]:
        values = list(row[:-1])
        if values[0] == 3:
            values[14] = "rewritten"
        prev_hash = chain_hash(prev_hash, values)
        update = "UPDATE compute_budget_decisions SET chain_hash = :hash WHERE seq = :seq"
        statements.append((update, {"hash": prev_hash, "seq": values[0]}))
    tamper(store, *statements)
    assert audit(store).clean  # consistent from row 3 on: only the checkpoint can tell
    report = audit(store, checkpoint=checkpoint)
    assert [f.kind.value for f in report.findings] == ["checkpoint_mismatch"]
    assert "rewritten" in report.findings[0].detail


def test_appends_after_a_checkpoint_audit_clean_against_it(store: str) -> None:
    """History that only grew since the checkpoint satisfies it."""
    with BudgetStore.open(store) as opened:
        checkpoint = opened.checkpoint()
        opened.record_many(gate_lines(15, prefix="later"))
    report = audit(store, checkpoint=checkpoint)
    assert report.clean
    assert report.rows_checked == ROWS + 15


def test_since_checks_only_rows_after_the_checkpoint(store: str) -> None:
    """Incremental mode proves the checkpoint, then checks only the new rows."""
    with BudgetStore.open(store) as opened:
        checkpoint = opened.checkpoint()
        opened.record_many(gate_lines(10, prefix="later"))
    tamper(store, f"UPDATE compute_budget_decisions SET max_steps = 77 WHERE seq = {ROWS + 4}")
    report = audit(store, since=checkpoint)
    assert report.rows_checked == 10
    assert {f.seq for f in report.findings} == {ROWS + 4}


def test_since_fails_when_its_checkpoint_row_was_changed(store: str) -> None:
    """Incremental mode over a rewritten checkpoint row reports the checkpoint broken, then checks every row
    (issue 22) and so also names the row that changed: its chain hash no longer links."""
    with BudgetStore.open(store) as opened:
        checkpoint = opened.checkpoint()
    tamper(store, f"UPDATE compute_budget_decisions SET chain_hash = '{'a' * 64}' WHERE seq = {ROWS}")
    report = audit(store, since=checkpoint)
    assert sorted(f.kind.value for f in report.findings) == ["chain_break", "checkpoint_mismatch"]
    assert report.escalated
    assert report.affected_rows == (ROWS,)
    assert report.rows_checked == ROWS


@sqlite_only  # PostgreSQL's typed seq column cannot hold text
def test_rows_outside_the_seq_range_are_reported(store: str) -> None:
    """A row whose seq is not a positive integer is not silently skipped."""
    tamper(store, "UPDATE compute_budget_decisions SET seq = 'x' WHERE seq = 40")
    report = audit(store)
    assert report.rows_checked == ROWS
    assert [f.kind.value for f in report.findings] == ["malformed_row"]


@pytest.mark.postgres_smoke
@pytest.mark.slow
def test_parallel_audit_reports_exactly_what_one_process_does(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """--jobs 2 over seq ranges gives the single-process findings, counts and head."""
    import compute_budget.auditor.ranges as audit_module

    monkeypatch.setattr(audit_module, "MIN_ROWS_PER_JOB", 5)
    tamper(
        store,
        "UPDATE compute_budget_decisions SET max_steps = 100 WHERE seq = 5",
        "DELETE FROM compute_budget_decisions WHERE seq = 20",
        "DELETE FROM compute_budget_decisions WHERE seq = 21",
        "UPDATE compute_budget_decisions SET explanation = 'x' WHERE seq = 33",
    )
    single, double = audit(store, jobs=1), audit(store, jobs=2)
    assert double.jobs == 2
    assert single.findings == double.findings
    assert len(single.findings) == 5
    assert (single.rows_checked, single.status_counts, single.head) == (
        double.rows_checked, double.status_counts, double.head
    )


@pytest.mark.slow
def test_auto_jobs_takes_one_process_on_a_small_store(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """jobs="auto" on a store too small to pay for processes runs one, and the report says so."""
    import compute_budget.auditor.ranges as audit_module

    monkeypatch.setattr(audit_module.os, "cpu_count", lambda: 8)
    report = audit(store, jobs="auto")
    assert report.clean
    assert report.jobs == 1
    assert report.to_dict()["jobs"] == 1


@pytest.mark.slow
def test_auto_jobs_takes_every_cpu_on_a_big_enough_store(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """jobs="auto" runs one process per CPU once every process gets AUTO_ROWS_PER_JOB rows, with the findings of
    one process."""
    import compute_budget.auditor.ranges as audit_module

    tamper(store, "UPDATE compute_budget_decisions SET max_steps = 100 WHERE seq = 5")
    monkeypatch.setattr(audit_module, "AUTO_ROWS_PER_JOB", 5)
    monkeypatch.setattr(audit_module.os, "cpu_count", lambda: 2)
    auto, single = audit(store, jobs="auto"), audit(store, jobs=1)
    assert auto.jobs == 2
    assert single.jobs == 1
    assert auto.findings == single.findings
    assert auto.findings
    assert not auto.clean


@pytest.mark.slow
def test_parallel_audit_checks_the_first_range_itself(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With jobs=N the auditing process checks the first range while N - 1 workers check the others, and the
    progress it reports climbs to every row."""
    import compute_budget.auditor.ranges as ranges
    import compute_budget.auditor.workers as audit_module

    pools: list[int] = []
    real_pool = audit_module.worker_pool

    def counting_pool(workers: int) -> Any:
        pools.append(workers)
        return real_pool(workers)

    monkeypatch.setattr(ranges, "MIN_ROWS_PER_JOB", 5)
    monkeypatch.setattr(audit_module, "worker_pool", counting_pool)
    progress: list[tuple[int, int]] = []
    report = audit(store, jobs=3, on_progress=lambda done, total: progress.append((done, total)))
    assert report.jobs == 3
    assert report.clean
    assert pools == [2]
    assert progress[-1] == (ROWS, ROWS)
    assert [done for done, _ in progress] == sorted(done for done, _ in progress)
    assert progress[0][0] < ROWS  # the first range's own progress comes before the workers' rows


@pytest.mark.slow
def test_an_interrupted_parallel_audit_stops_its_workers_at_once(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C (or SIGTERM, which the command line raises the same way) in the auditing process while workers
    check their ranges: the audit stops at once and leaves no worker behind (it used to wait for them)."""
    import multiprocessing
    import os
    import time

    import compute_budget.auditor.ranges as ranges
    import compute_budget.auditor.workers as audit_module

    parent = os.getpid()
    real_range = audit_module.audit_range

    def interrupted_here(*args: Any, **kwargs: Any) -> Any:
        if os.getpid() == parent:
            raise KeyboardInterrupt
        time.sleep(30)  # a worker still busy with its range
        return real_range(*args, **kwargs)

    monkeypatch.setattr(ranges, "MIN_ROWS_PER_JOB", 5)
    monkeypatch.setattr(audit_module, "audit_range", interrupted_here)
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        audit(store, jobs=3)
    assert time.monotonic() - began < 20
    assert multiprocessing.active_children() == []


class _Rows:
    """Just enough of a snapshot for `plan_ranges`: the head seq."""

    def __init__(self, head: int) -> None:
        self.head = head

    def max_seq(self) -> int:
        return self.head


@pytest.mark.parametrize(("rows", "forked", "expected"), [(10_000, True, 2), (9_999, True, 1), (10_000, False, 1),
                                                          (100_000, False, 2), (1_000_000, True, 2)])
def test_auto_jobs_splits_the_nightly_audit_only_where_workers_are_forked(
    rows: int, forked: bool, expected: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On two CPUs, the "auto" plan splits 10,000 rows when workers fork (they start in milliseconds), and waits
    for 100,000 where they would import the package anew (a plan only: no process is started)."""
    import compute_budget.auditor.ranges as audit_module

    monkeypatch.setattr(audit_module.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(audit_module, "AUTO_ROWS_PER_JOB", 5_000 if forked else 50_000)
    plan = audit_module.plan_ranges(_Rows(rows), None, "auto")  # type: ignore[arg-type]
    assert len(plan.ranges) == expected
    assert plan.ranges[0][0] == 0
    assert plan.ranges[-1][1] == rows


@pytest.mark.slow
@pytest.mark.parametrize("jobs", [0, -1, 1.5, True, "two", None])
def test_jobs_must_be_a_positive_integer_or_auto(store: str, jobs: Any) -> None:
    """Anything else is refused before the store is opened."""
    from compute_budget.errors import ArgumentTypeError

    with pytest.raises(ArgumentTypeError, match="jobs"):
        audit(store, jobs=jobs)


def test_checkpoint_round_trip(store: str) -> None:
    """A checkpoint document reads back equal, and a wrong document is refused."""
    from compute_budget import CheckpointError

    with BudgetStore.open(store, readonly=True) as opened:
        checkpoint = opened.checkpoint()
    assert Checkpoint.from_json(checkpoint.to_json()) == checkpoint
    for bad in ("[]", "{}", '{"format": "compute_budget.checkpoint.v1", "seq": -1, "chain_hash": "00"}', "nope"):
        with pytest.raises(CheckpointError):
            Checkpoint.from_json(bad)


def test_audit_takes_a_checkpoint_in_any_form_at_hand(store: str, tmp_path: Path) -> None:
    """A Checkpoint, a chain head, the document as a dict or JSON text, or its file all prove the same."""
    with BudgetStore.open(store, readonly=True) as opened:
        checkpoint = opened.checkpoint()
        head = opened.head()
    path = tmp_path / "cp.json"
    path.write_text(checkpoint.to_json())
    forms: list[Any] = [checkpoint, head, checkpoint.to_dict(), checkpoint.to_json(), path, str(path)]
    for form in forms:
        assert audit(store, checkpoint=form).clean
    tamper(store, f"DELETE FROM compute_budget_decisions WHERE seq = {ROWS}")
    for form in forms:
        assert [f.kind.value for f in audit(store, checkpoint=form).findings] == ["checkpoint_mismatch"]


def append_pre_revision_2_row(store: str, gate_text: str, decision: Any) -> int:
    """Append, as a store written before spec revision 2 would hold it, a row for `gate_text` decided as
    `decision` (consistent: its budget_id and chain hash are right). Returns its seq."""
    last = rows(store)[-1]
    values: list[Any] = [
        last[0] + 1, decision.budget_id, decision.policy_version, decision.gate_decision_id,
        decision.gate_policy_version, decision.gate_input_digest, decision.status.value, decision.reason_code,
        decision.max_candidates, decision.max_depth, decision.max_steps, decision.max_wallclock_ms,
        decision.max_parallelism, spans_json(decision.evidence_spans), decision.explanation, gate_text, last[16],
    ]
    values.append(chain_hash(last[-1], values))
    tamper(store, insert_sql(values))
    return int(values[0])


def test_row_with_a_repeated_top_level_key_from_before_revision_2(store: str) -> None:
    """Revision 1 copied the last of a repeated decision_id; revision 2 copies "": the audit says which rule
    changed, and nothing else is wrong with the row."""
    from compute_budget.core.policy.rules import V1

    text = json.dumps(make_gate()).replace('"decision_id": ', '"decision_id": "first", "decision_id": ', 1)
    old = V1.decide(json.loads(text), defect="duplicate key 'decision_id' in a JSON object")
    assert old.gate_decision_id == "gate-0001"
    seq = append_pre_revision_2_row(store, text, old)
    report = audit(store)
    assert kinds_at(report, seq) == {"rederive_mismatch"}
    assert len(report.findings) == 1
    detail = report.findings[0].detail
    assert "gate_decision_id stored 'gate-0001', policy gives ''" in detail
    assert "spec revision 2" in detail
    assert "decision_id" in detail.split("spec revision 2")[1]


@pytest.mark.parametrize("levels", [40, 900, 100_000])
def test_row_nested_too_deeply_from_before_revision_2(store: str, levels: int) -> None:
    """A gate nested more than 32 levels deep copied its ids before revision 2 (where a parser could read it)
    and copies nothing now; re-parsing it, however deep, never recurses."""
    from compute_budget.core.policy.rules import V1

    text = json.dumps(make_gate())[:-1] + ', "note": ' + "[" * levels + "]" * levels + "}"
    old = V1.decide(make_gate(note=[]), nesting_checked=True)  # what revision 1 decided: copied, malformed (3.1.1)
    assert old.gate_decision_id == "gate-0001"
    seq = append_pre_revision_2_row(store, text, old)
    report = audit(store)
    assert kinds_at(report, seq) == {"rederive_mismatch"}
    detail = report.findings[0].detail
    assert "gate_decision_id stored 'gate-0001', policy gives ''" in detail
    assert "spec revision 2: a gate nested more than 32 levels deep" in detail


def test_other_mismatches_do_not_name_revision_2(store: str) -> None:
    """A row whose gate has neither property is a plain mismatch: revision 2 is not blamed."""
    tamper(store, "UPDATE compute_budget_decisions SET max_steps = 100 WHERE seq = 7")
    detail = next(f.detail for f in audit(store).findings if f.kind is FindingKind.REDERIVE_MISMATCH)
    assert "revision 2" not in detail


@sqlite_only  # PostgreSQL refuses text that is not UTF-8 on the way in
@pytest.mark.parametrize("column", ["explanation", "gate_input", "budget_id", "chain_hash"])
def test_text_that_is_not_utf8_is_a_malformed_row_not_a_failed_audit(store: str, column: str) -> None:
    """A raw edit can store any bytes in a TEXT column, and SQLite's decoder then fails the whole read: the audit
    reads on past it and reports the row as `malformed_row` naming the column (it used to stop with exit 2)."""
    with BudgetStore.open(store, readonly=True) as opened:
        since = Checkpoint.from_head(opened.head())
    tamper(store, (f"UPDATE compute_budget_decisions SET {column} = CAST(:bad AS TEXT) WHERE seq = 7",
                   {"bad": b"\xff" * 64}))
    report = audit(store)
    malformed = [finding for finding in report.findings if finding.kind is FindingKind.MALFORMED_ROW]
    assert [finding.seq for finding in malformed] == [7]
    assert f"{column} is bytes (a blob, or text that is not UTF-8)" in malformed[0].detail
    assert report.rows_checked == ROWS
    with BudgetStore.open(store) as opened:  # and a row after the checkpoint, for the incremental audit
        opened.record_many(gate_lines(3, prefix="late"))
    tamper(store, (f"UPDATE compute_budget_decisions SET {column} = CAST(:bad AS TEXT) WHERE seq = {ROWS + 2}",
                   {"bad": b"\xfe" * 64}))
    report = audit(store, since=since)
    malformed = [finding for finding in report.findings if finding.kind is FindingKind.MALFORMED_ROW]
    assert [finding.seq for finding in malformed] == [ROWS + 2]
    assert report.rows_checked == 3


def test_an_audit_request_is_the_audit_the_keywords_ask_for(store: str) -> None:
    """Issue 29: the options travel as one frozen `AuditRequest`; `run_audit` of a request reports what `audit`
    does given the same options as keywords."""
    import dataclasses

    from compute_budget.auditor.request import AuditRequest
    from compute_budget.auditor.scan import run_audit

    tamper(store, "UPDATE compute_budget_decisions SET max_steps = 100 WHERE seq = 7")
    request = AuditRequest(store, through=20)
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.through = 30  # type: ignore[misc]
    by_request, by_keywords = run_audit(request), audit(store, through=20)
    assert by_request.findings == by_keywords.findings
    assert kinds_at(by_request, 7) == {"rederive_mismatch", "budget_id_mismatch", "chain_break"}
    assert by_request.head.seq == by_keywords.head.seq == 20


def test_audit_hands_its_keywords_to_one_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """`audit(...)` keeps its keyword signature and builds the request once, iterables read into tuples (a
    generator of keys is read once, however many passes the audit makes)."""
    import compute_budget.auditor.scan as scan
    from compute_budget.auditor.request import AuditRequest

    seen: list[AuditRequest] = []

    def recording(request: AuditRequest) -> Any:
        seen.append(request)
        return "the report"

    monkeypatch.setattr(scan, "run_audit", recording)
    keys = (key for key in ["a key"])
    assert scan.audit("x.db", through=3, trusted_keys=keys, look_back=2, look_back_day=5) == "the report"
    assert seen == [AuditRequest("x.db", through=3, trusted_keys=("a key",), look_back=2, look_back_day=5)]
