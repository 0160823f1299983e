"""The workbench's one reader of the audit report (issue 29, item 3), with one size limit for the banner and the
checkpoints page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from compute_budget.core.log.note import SignerKey
from compute_budget.store import BudgetStore
from compute_budget.web import report as web_report
from compute_budget.web.app import create_app
from tests.conftest import REPO_ROOT, gate_lines

WEB = REPO_ROOT / "src" / "compute_budget" / "web"


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
