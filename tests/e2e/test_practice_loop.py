"""The practice loop under four processes, on SQLite and PostgreSQL: each records its runs through the API with
per-gate results, then finds its gates again by decision_id (issue 11)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from compute_budget import BudgetStore
from compute_budget.auditor.scan import audit
from tests.conftest import REPO_ROOT

WORKER = """
import json, sys
from compute_budget import BudgetStore
from tests.conftest import gate_lines
target, name = sys.argv[1], sys.argv[2]
shared = gate_lines(20, prefix="shared")          # every worker records these too
report = {"results": [], "lookups": {}}
with BudgetStore.open(target) as store:
    for run in range(5):
        own = gate_lines(30, prefix=f"{name}-run{run}")
        batch = store.record_many([*own, *shared[run * 4:(run + 1) * 4]], results=True)
        assert [result.index for result in batch.results] == list(range(34)), batch.results
        report["results"] += [[r.budget_id, r.seq, r.new] for r in batch.results]
        for line, result in zip(own[::10], batch.results[::10]):
            decision_id = json.loads(line)["decision_id"]
            found = store.find_by_gate(decision_id)
            assert [stored.decision.budget_id for stored in found] == [result.budget_id], (decision_id, found)
            assert found[0].seq == result.seq
            report["lookups"][decision_id] = result.seq
print(json.dumps(report))
"""


@pytest.mark.postgres_smoke
@pytest.mark.slow
def test_four_practice_loops_at_once(store_target: str) -> None:
    """4 processes, 5 runs each (150 own gates, 20 shared by all): every per-gate result agrees with the store,
    a shared gate has one seq in every process and exactly one process stored it, the chain audits clean."""
    BudgetStore.open(store_target).close()  # the schema first, so the workers race only to append
    workers = [
        subprocess.Popen([sys.executable, "-c", WORKER, store_target, f"w{index}"], cwd=REPO_ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for index in range(4)
    ]
    reports = []
    for worker in workers:
        out, err = worker.communicate(timeout=600)
        assert worker.returncode == 0, err
        assert err == ""
        reports.append(json.loads(out))
    with BudgetStore.open(store_target, readonly=True) as store:
        stored = {row.decision.budget_id: row.seq for row in store}
        for report in reports:
            for decision_id, seq in report["lookups"].items():
                assert [row.seq for row in store.find_by_gate(decision_id)] == [seq]
    assert len(stored) == 4 * 150 + 20
    assert sorted(stored.values()) == list(range(1, 621))
    by_id: dict[str, list[tuple[int, bool]]] = {}
    for report in reports:
        for budget_id, seq, new in report["results"]:
            assert stored[budget_id] == seq
            by_id.setdefault(budget_id, []).append((seq, new))
    shared = [outcomes for outcomes in by_id.values() if len(outcomes) > 1]
    assert len(shared) == 20
    assert all(len(outcomes) == 4 and sum(new for _, new in outcomes) == 1 for outcomes in shared)
    report = audit(store_target)
    assert report.clean, report.findings[:5]
    assert report.rows_checked == 620
