"""The Workbench's model in rooms (issue 29, item 3): keys read by the audit's own key reader, one reader of the
audit report with one size limit for the banner and the checkpoints page, and the policy table worked out by the
policy itself rather than a copy of its rules."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from compute_budget.core.log.note import SignerKey
from compute_budget.core.policy.rules import UNKNOWN_GATE_REASON_CODE, V1, BudgetPolicy
from compute_budget.core.policy.types import ComputeBudgetDecision
from compute_budget.store import BudgetStore
from compute_budget.web import report as web_report
from compute_budget.web.app import create_app
from compute_budget.web.policy_table import policy_rows
from tests.conftest import REPO_ROOT, gate_lines

VERIFIER_KEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
WEB = REPO_ROOT / "src" / "compute_budget" / "web"


# -- keys ---------------------------------------------------------------------------------------------------


def test_a_trusted_key_whose_hash_is_not_its_own_is_refused_as_the_audit_refuses_it(
    store_target: str, tmp_path: Path
) -> None:
    """The checkpoints page reads a --trusted-key with the audit's reader: a key whose hash does not belong to its
    name and key (the shape of a key, not a key) is named as a problem, not shown as a signer."""
    forged = VERIFIER_KEY.replace("+c74f20a3+", "+c74f20a4+")
    with BudgetStore.open(store_target) as store:
        store.record_many(gate_lines(2))
    with TestClient(create_app(store_target, trusted_keys=[VERIFIER_KEY, forged])) as client:
        keys = client.get("/api/checkpoints").json()["trusted_keys"]
        page = client.get("/checkpoints").text
    assert keys[0] == {"given": VERIFIER_KEY, "key": VERIFIER_KEY, "name": "PeterNeumann", "key_hash": "c74f20a3",
                       "problem": None}
    assert (keys[1]["key"], keys[1]["name"], keys[1]["key_hash"]) == (None, None, None)
    assert "not a verifier key" in keys[1]["problem"]
    assert "key hash" in keys[1]["problem"]
    assert "not a verifier key" in page


def test_key_text_is_the_key_whatever_file_has_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spec 9.3, as the audit reads keys: text that parses as a verifier key is that key, even when a file of that
    name exists (the workbench used to read the file first)."""
    db = str(tmp_path / "keys.db")
    with BudgetStore.open(db) as store:
        store.record_many(gate_lines(1))
    folder = tmp_path / "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq"
    folder.mkdir()
    (folder / "LDE4izWy10TW").write_text("garbage\n")
    monkeypatch.chdir(tmp_path)
    with TestClient(create_app(db, trusted_keys=[VERIFIER_KEY])) as client:
        keys = client.get("/api/checkpoints").json()["trusted_keys"]
    assert [(key["name"], key["problem"]) for key in keys] == [("PeterNeumann", None)]


def test_the_workbench_has_no_key_parser_of_its_own() -> None:
    """No regular expression for verifier keys in web/: keys are parsed by the core's parser only."""
    sources = {path.name: path.read_text(encoding="utf-8") for path in WEB.rglob("*.py")}
    assert [name for name, text in sources.items() if "[0-9a-f]{8}" in text] == []


# -- the audit report ---------------------------------------------------------------------------------------


def _signed_store(target: str, tmp_path: Path) -> None:
    key = SignerKey.from_seed("writer", bytes(32))
    with BudgetStore.open(target, signing_key=key, writer_state=str(tmp_path / "state")) as store:
        store.record_many(gate_lines(4))


def _mismatch_report(path: Path, padding: int) -> None:
    """A report whose findings name the checkpoint of tree size 4 mismatched, followed by `padding` spaces (still
    JSON, but a larger file)."""
    body = {"clean": False, "finished_at": "2026-12-04T00:00:00Z",
            "findings": [{"kind": "checkpoint_mismatch", "seq": 4, "message": "root differs"}]}
    path.write_text(json.dumps(body) + " " * padding)


MISMATCH_SAID = "(but the last audit found this root no longer matches the rows"


def test_one_report_reader_for_the_banner_and_the_checkpoints_page(
    store_target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report file over the size limit is no report for either reader: the banner says it cannot be read and
    the checkpoints page does not take its findings (one reader: the page used to read the first bytes and use
    them, the banner to refuse the file). Under the limit both use it."""
    _signed_store(store_target, tmp_path)
    report = tmp_path / "nightly.json"
    _mismatch_report(report, padding=0)
    monkeypatch.setattr(web_report, "MAX_AUDIT_REPORT_BYTES", report.stat().st_size + 10)
    with TestClient(create_app(store_target, audit_report=str(report))) as client:
        page = client.get("/checkpoints").text
    assert MISMATCH_SAID in page
    assert "found 1 problem(s)" in page

    _mismatch_report(report, padding=100)  # the same JSON, but the file is now over the limit
    with TestClient(create_app(store_target, audit_report=str(report))) as client:
        page = client.get("/checkpoints").text
        items = client.get("/api/checkpoints").json()["signed_checkpoints"]["items"]
    assert "cannot be read (it is larger than any audit report)" in page
    assert MISMATCH_SAID not in page
    assert [item["trusted"] for item in items] == ["no key given"]


def test_the_report_is_read_in_one_place() -> None:
    """Only web/report.py opens the audit report or knows its size limit."""
    readers = sorted(path.name for path in WEB.rglob("*.py") if "MAX_AUDIT_REPORT_BYTES" in path.read_text("utf-8"))
    assert readers == ["report.py"]


# -- the policy table ---------------------------------------------------------------------------------------


def _table(policy: BudgetPolicy, status: str = "", reason: str = "") -> list[tuple[Any, ...]]:
    return [
        (row.gate, row.status, row.reason, dataclasses.astuple(row.limits), row.applied)
        for row in policy_rows(policy, status, reason)
    ]


def test_the_v1_table_is_the_one_the_page_always_showed() -> None:
    """V1's table, each line as V1 decides it, in the order the page has shown it; the line that applied marked."""
    assert _table(V1, "budget_blocked", "gate_blocked") == [
        ("malformed (any rule of spec 3.1 broken)", "budget_unassessable", "malformed_gate_decision",
         (0, 0, 0, 0), False),
        ("status not eligible", "budget_blocked", "gate_ineligible / gate_blocked / gate_unassessable",
         (0, 0, 0, 0), True),
        ("eligible, eligible_missing_role", "budget_allowed", "eligible_missing_role", (5, 2, 10, 1), False),
        ("eligible, eligible_missing_relation", "budget_allowed", "eligible_missing_relation", (5, 2, 10, 1), False),
        ("eligible, eligible_missing_proposal", "budget_allowed", "eligible_missing_proposal", (3, 1, 5, 1), False),
        ("eligible, eligible_target_unbound", "budget_allowed", "eligible_target_unbound", (5, 2, 10, 1), False),
        ("eligible, any other reason", "budget_unassessable", "unknown_gate_reason_code", (0, 0, 0, 0), False),
    ]
    applied = [row[0] for row in _table(V1, "budget_allowed", "eligible_missing_proposal") if row[4]]
    assert applied == ["eligible, eligible_missing_proposal"]


@dataclasses.dataclass(frozen=True, slots=True)
class _Lenient(BudgetPolicy):
    """A toy policy that decides unlike v1: an eligible gate with a code it does not know gets the smallest grant
    of its table instead of nothing."""

    def decide(
        self, gate: object, *, defect: str | None = None, defect_rule: str = "3.1.7",
        repeated_keys: Collection[str] = (), nesting_checked: bool = False,
    ) -> ComputeBudgetDecision:
        decision = BudgetPolicy.decide(self, gate, defect=defect, defect_rule=defect_rule,
                                       repeated_keys=repeated_keys, nesting_checked=nesting_checked)
        if decision.reason_code == UNKNOWN_GATE_REASON_CODE and isinstance(gate, dict):
            return BudgetPolicy.decide(self, {**gate, "reason_code": "eligible_missing_proposal"})
        return decision


def test_the_table_shows_what_the_policy_decides_not_a_copy_of_v1s_rules() -> None:
    """A policy that decides otherwise is shown as it decides: the page copies no rule of v1's."""
    lenient = _Lenient("toy.v2", V1.table)
    assert _table(lenient, "budget_allowed", "eligible_missing_proposal")[-1] == (
        "eligible, any other reason", "budget_allowed", "eligible_missing_proposal", (3, 1, 5, 1), True,
    )


def test_the_workbench_copies_none_of_the_policys_outcomes() -> None:
    """web/ names none of the policy's fallback outcomes: they come from the policy's decisions."""
    names = ("MALFORMED_GATE_DECISION", "UNKNOWN_GATE_REASON_CODE", "NO_LIMITS")
    found = sorted(
        (path.name, name) for path in WEB.rglob("*.py") for name in names if name in path.read_text(encoding="utf-8")
    )
    assert found == []
