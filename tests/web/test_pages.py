"""The workbench (`compute-budget serve`): every page and its JSON twin, in-process through Starlette's TestClient.

Pages, filters and keyset pagination on each backend; the detail with its live re-derivation; the one-at-a-time
audit; the checkpoints page; read-only everywhere (GET only, the database unchanged); safety headers on every
response; gate text always escaped; and the `serve` command's own behaviour.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient  # the workbench extra is part of [test]: never skipped for lack of it

from compute_budget.store import BudgetStore
from compute_budget.web import app as web_app
from compute_budget.web.app import CONTENT_SECURITY_POLICY, Guard, create_app
from tests import backends
from tests.conftest import REPO_ROOT, gate_lines, make_gate

pytestmark = pytest.mark.usefixtures("writer_state_env")  # SignerKey objects keep their state there

ROWS = 120
XSS_GATE_ID = '"><img src=x onerror=alert(1)>'
XSS_SPAN = "<script>alert(1)</script>"
VERIFIER_KEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"


def xss_gate() -> dict[str, Any]:
    """A well-formed eligible gate whose id and evidence text are HTML that would run if not escaped."""
    return make_gate(
        decision_id=XSS_GATE_ID,
        evidence_spans=[{"text": XSS_SPAN, "start": 0, "end": len(XSS_SPAN), "sentence_index": 0}],
    )


def fill(target: str, count: int = ROWS, *, extra: list[dict[str, Any]] | None = None) -> None:
    """Record `count` varied gates (and `extra` ones after them) into the store at `target`."""
    gates: list[Any] = [json.loads(line) for line in gate_lines(count)]
    gates += extra or []
    with BudgetStore.open(target) as store:
        store.record_many(gates)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> str:
    """A SQLite store of ROWS varied decisions and the XSS gate last."""
    path = str(tmp_path / "web.db")
    fill(path, extra=[xss_gate()])
    return path


@pytest.fixture
def any_store(store_target: str) -> str:
    """The same store on each backend under test."""
    fill(store_target, extra=[xss_gate()])
    return store_target


@pytest.fixture
def client(sqlite_store: str) -> Iterator[TestClient]:
    """A TestClient over the SQLite store (its lifespan runs, so the store closes at the end)."""
    with TestClient(create_app(sqlite_store)) as test_client:
        yield test_client


@pytest.fixture
def any_client(any_store: str) -> Iterator[TestClient]:
    """A TestClient over the store on each backend."""
    with TestClient(create_app(any_store)) as test_client:
        yield test_client


def bench(client: TestClient) -> web_app.Workbench:
    """The application state behind a client."""
    app = client.app
    assert isinstance(app, Guard)
    return app.workbench


def all_rows(target: str) -> list[tuple[Any, ...]]:
    return backends.rows(target)


ROUTES = [
    "/",
    "/?status=budget_blocked",
    "/decisions/{budget_id}",
    "/audit",
    "/checkpoints",
    "/api/decisions",
    "/api/decisions/{budget_id}",
    "/api/audit",
    "/api/checkpoints",
    "/static/workbench.css",
    "/static/favicon.svg",
]


def first_budget_id(client: TestClient) -> str:
    return str(client.get("/api/decisions", params={"limit": 1}).json()["decisions"][0]["budget_id"])


# -- the decisions page and /api/decisions -------------------------------------------------------------------


def test_the_first_page_shows_the_newest_fifty_with_links_to_their_details(client: TestClient) -> None:
    """`/` lists 50 decisions newest first, each linking to its detail, with an older-page link."""
    response = client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    html = response.text
    seqs = [int(seq) for seq in re.findall(r'<td class="num">(\d+)</td>\s*<td><a class="id"', html)]
    assert seqs == list(range(ROWS + 1, ROWS + 1 - 50, -1))
    assert html.count('href="/decisions/') == 50
    assert f'href="/?before_seq={ROWS + 1 - 49}" rel="next"' in html
    assert "Newer" not in html


def test_keyset_pages_walk_every_row_once_newest_first(any_client: TestClient) -> None:
    """Following next_before_seq visits every row exactly once, in seq order descending, then stops."""
    seen: list[int] = []
    params: dict[str, Any] = {}
    sizes = []
    while True:
        body = any_client.get("/api/decisions", params=params).json()
        sizes.append(len(body["decisions"]))
        seen += [row["seq"] for row in body["decisions"]]
        if body["next_before_seq"] is None:
            break
        assert body["next_before_seq"] == body["decisions"][-1]["seq"]
        params = {"before_seq": body["next_before_seq"]}
    assert seen == list(range(ROWS + 1, 0, -1))
    assert sizes == [50, 50, ROWS + 1 - 100]


@pytest.mark.parametrize(
    ("params", "expected_seqs", "next_before"),
    [
        ({"before_seq": 1}, [], None),
        ({"before_seq": 2}, [1], None),
        ({"before_seq": 51}, list(range(50, 0, -1)), None),  # exactly one full page left: no older page
        ({"before_seq": 52}, list(range(51, 1, -1)), 2),
        ({"limit": 1}, [ROWS + 1], ROWS + 1),
        ({"limit": 1, "before_seq": 2}, [1], None),
        ({"after_seq": ROWS - 2}, [ROWS - 1, ROWS, ROWS + 1], None),  # after_seq alone pages forward (issue 22)
        ({"after_seq": ROWS - 2, "limit": 2}, [ROWS - 1, ROWS], ROWS),
        ({"after_seq": 10, "before_seq": 14}, [13, 12, 11], None),
        ({"after_seq": ROWS + 1}, [], None),
        ({"before_seq": 10**15}, list(range(ROWS + 1, ROWS + 1 - 50, -1)), ROWS + 1 - 49),
    ],
)
def test_pagination_boundaries(client: TestClient, params: dict[str, Any], expected_seqs: list[int],
                               next_before: int | None) -> None:
    """Pages at the edges: the first and last rows, a page that ends exactly at seq 1, empty ranges; with
    `after_seq` alone the page runs forward, oldest first, and names `next_after_seq` instead."""
    body = client.get("/api/decisions", params=params).json()
    assert [row["seq"] for row in body["decisions"]] == expected_seqs
    forward = "after_seq" in params and "before_seq" not in params
    assert body["next_after_seq" if forward else "next_before_seq"] == next_before


def test_the_html_pager_links_newer_and_older_pages(client: TestClient) -> None:
    """Page 2 links back to page 1 (no before_seq) and on to page 3; page 3 links back to page 2 exactly."""
    second = client.get("/", params={"before_seq": ROWS + 1 - 49}).text
    assert 'href="/" rel="prev"' in second
    third_bound = ROWS + 1 - 99
    assert f'href="/?before_seq={third_bound}" rel="next"' in second
    third = client.get("/", params={"before_seq": third_bound}).text
    assert f'href="/?before_seq={ROWS + 1 - 49}" rel="prev"' in third
    assert 'rel="next"' not in third
    assert 'href="/">⇤ Newest' in third


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"limit": 0}, "limit must be a whole number from 1 to 500"),
        ({"limit": 501}, "limit must be a whole number from 1 to 500"),
        ({"before_seq": "abc"}, "before_seq must be a whole number"),
        ({"before_seq": -3}, "before_seq must be a whole number"),
        ({"before_seq": 0}, "before_seq must be a whole number from 1"),
        ({"after_seq": "1e3"}, "after_seq must be a whole number"),
        ({"after_seq": "9" * 30}, "after_seq must be a whole number"),
        ({"gate": "x" * 1001}, "gate is longer than 1000 characters"),
    ],
)
def test_bad_parameters_are_a_clear_400(client: TestClient, params: dict[str, Any], message: str) -> None:
    """A parameter that cannot be used is named, on the page and in the API."""
    page = client.get("/", params=params)
    assert page.status_code == 400
    assert message in page.text
    api = client.get("/api/decisions", params=params)
    assert api.status_code == 400
    assert message in api.json()["error"]


def test_empty_form_fields_count_as_absent(client: TestClient) -> None:
    """The filter form submits every field; the empty ones filter nothing."""
    params = {"status": "", "reason": "", "gate": "", "policy_version": "", "after_seq": "", "before_seq": "",
              "limit": "50"}
    response = client.get("/api/decisions", params=params)
    assert response.status_code == 200
    assert len(response.json()["decisions"]) == 50


@pytest.mark.parametrize(
    ("params", "column"),
    [
        ({"status": "budget_blocked"}, "status"),
        ({"status": "budget_allowed"}, "status"),
        ({"reason": "eligible_missing_proposal"}, "reason_code"),
        ({"reason": "gate_unassessable"}, "reason_code"),
        ({"gate": "gate-0000042"}, "gate_decision_id"),
        ({"gate": XSS_GATE_ID}, "gate_decision_id"),
        ({"policy_version": "compute_budget.v1"}, "policy_version"),
        ({"status": "budget_zero"}, "status"),
        ({"reason": "no_such_reason"}, "reason_code"),
        ({"policy_version": "compute_budget.v9"}, "policy_version"),
        ({"gate": "no-such-gate"}, "gate_decision_id"),
    ],
)
@pytest.mark.postgres_smoke
def test_each_filter_returns_exactly_the_matching_rows(any_client: TestClient, any_store: str,
                                                       params: dict[str, str], column: str) -> None:
    """Walking every page of a filter gives exactly the stored rows with that value, newest first."""
    index = backends.COLUMNS.index(column)
    value = next(iter(params.values()))
    expected = [row[0] for row in reversed(all_rows(any_store)) if row[index] == value]
    seen: list[int] = []
    query: dict[str, Any] = dict(params, limit=7)
    while True:
        body = any_client.get("/api/decisions", params=query).json()
        assert all(row[column] == value for row in body["decisions"])
        seen += [row["seq"] for row in body["decisions"]]
        if body["next_before_seq"] is None:
            break
        query["before_seq"] = body["next_before_seq"]
    assert seen == expected


def test_filters_combine(any_client: TestClient, any_store: str) -> None:
    """status, reason, policy_version and a seq window together: all must hold."""
    params = {"status": "budget_allowed", "reason": "eligible_missing_role", "policy_version": "compute_budget.v1",
              "after_seq": 20, "before_seq": 100, "limit": 500}
    body = any_client.get("/api/decisions", params=params).json()
    expected = [
        row[0] for row in reversed(all_rows(any_store))
        if row[6] == "budget_allowed" and row[7] == "eligible_missing_role" and 20 < row[0] < 100
    ]
    assert expected
    assert [row["seq"] for row in body["decisions"]] == expected
    assert body["next_before_seq"] is None


def test_the_filter_page_keeps_its_filters_in_the_form_and_the_pager(client: TestClient, sqlite_store: str) -> None:
    """A filtered page shows its values in the form, the number of matches, and pages within the filter."""
    html = client.get("/", params={"status": "budget_allowed", "limit": 10}).text
    assert '<option value="budget_allowed" selected>' in html
    assert 'id="f-limit" name="limit" inputmode="numeric" pattern="[0-9]*" value="10"' in html
    assert re.search(r'href="/\?status=budget_allowed&amp;before_seq=\d+&amp;limit=10" rel="next"', html)
    allowed = sum(1 for row in all_rows(sqlite_store) if row[6] == "budget_allowed")
    assert f"{allowed:,} match the filters" in html


def test_counts_by_status_and_reason_and_their_chart(client: TestClient, sqlite_store: str) -> None:
    """The counts equal the stored rows', the page draws them as SVG bars linking to their filters."""
    rows = all_rows(sqlite_store)
    body = client.get("/api/decisions").json()
    assert body["counts"]["status"] == dict(Counter(row[6] for row in rows))
    assert body["counts"]["reason"] == dict(Counter(row[7] for row in rows))
    assert body["head_seq"] == len(rows)
    html = client.get("/").text
    assert html.count("<svg ") == 2
    for status, count in Counter(row[6] for row in rows).items():
        assert f'<a href="/?status={status}">' in html
        assert f">{count:,}</text>" in html
    assert '<rect class="bar allowed"' in html


def test_counts_follow_new_rows_by_counting_only_them(client: TestClient, sqlite_store: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Counts are cached per head: rows appended later are counted alone and added."""
    store = bench(client).store
    client.get("/")
    calls: list[tuple[int, int]] = []
    counts = store.counts

    def spy(low: int, high: int) -> dict[tuple[str, str], int]:
        calls.append((low, high))
        return counts(low, high)

    monkeypatch.setattr(store, "counts", spy)
    client.get("/")
    assert calls == []  # same head: no counting at all
    head = store.head_seq()
    with BudgetStore.open(sqlite_store) as writer:
        writer.record(make_gate(decision_id="late-gate", status="blocked"))
    body = client.get("/api/decisions").json()
    assert calls == [(head, head + 1)]
    assert body["counts"]["status"]["budget_blocked"] == sum(
        1 for row in all_rows(sqlite_store) if row[6] == "budget_blocked"
    )


# -- one decision -------------------------------------------------------------------------------------------


def test_the_detail_explains_limits_spans_gate_and_chain(client: TestClient, sqlite_store: str) -> None:
    """Why in words, limits next to the v1 row, evidence text, the gate pretty-printed, the chain and re-derivation."""
    rows = all_rows(sqlite_store)
    row = rows[1]  # seq 2: eligible_missing_relation (see conftest.gate_lines)
    assert row[6] == "budget_allowed"
    html = client.get(f"/decisions/{row[1]}").text
    assert "Why: <span class=\"status allowed\">Allowed</span>" in html
    assert "The search gate said status &#34;eligible&#34;, reason &#34;eligible_missing_relation&#34;." in html
    assert "Allowed: the gate is eligible with reason eligible_missing_relation" in html
    assert "✓ Re-derived from its gate: holds." in html
    assert "(“eligible, eligible_missing_relation”)" in html  # the v1 row that gave the limits
    assert '<tr class="applied" aria-current="true">' in html
    assert "<th scope=\"row\"><code>max_steps</code></th>\n        <td class=\"num\">10</td>" in html
    assert "span 1 é" in html  # the evidence span's text
    assert "\n  &#34;decision_id&#34;: &#34;gate-0000001&#34;,\n" in html  # the gate input, indented
    assert f'<a href="/decisions/{rows[0][1]}" rel="prev">seq 1</a>' in html
    assert f'<a href="/decisions/{rows[2][1]}" rel="next">seq 3</a>' in html
    assert row[17] in html  # its chain hash


@pytest.mark.parametrize(
    ("seq", "headline", "applied"),
    [
        (4, "Blocked", "status not eligible"),
        (5, "Blocked", "status not eligible"),
        (6, "Blocked", "status not eligible"),
        (25, "Unassessable", "eligible, any other reason"),
    ],
)
def test_the_detail_of_a_refused_budget_names_why(client: TestClient, sqlite_store: str, seq: int,
                                                  headline: str, applied: str) -> None:
    """Blocked and unassessable decisions name their headline and the v1 row that gave them nothing."""
    row = all_rows(sqlite_store)[seq - 1]
    html = client.get(f"/decisions/{row[1]}").text
    assert f">{headline}</span></h2>" in html
    assert f"(“{applied}”)" in html


def test_the_head_has_no_next_and_the_first_row_links_to_genesis(client: TestClient, sqlite_store: str) -> None:
    rows = all_rows(sqlite_store)
    assert "none: this row links to the genesis hash" in client.get(f"/decisions/{rows[0][1]}").text
    assert "none: this is the head of the chain" in client.get(f"/decisions/{rows[-1][1]}").text


def test_the_detail_api_returns_the_stored_row_and_its_rederivation(any_client: TestClient, any_store: str) -> None:
    """`/api/decisions/{id}`: every stored field, seq, and `rederived` holding."""
    with BudgetStore.open(any_store, readonly=True) as store:
        (stored,) = list(store.iter_decisions(limit=1))
    expected = stored.to_dict()
    body = any_client.get(f"/api/decisions/{expected['budget_id']}").json()
    assert body["rederived"] == {"holds": True, "differences": []}
    assert {key: body[key] for key in expected} == expected
    assert body["chain"]["next"] is None
    assert body["chain"]["previous"]["seq"] == expected["seq"] - 1


@pytest.mark.parametrize("budget_id", ["0" * 64, "f" * 64, "not-an-id", "%3Cscript%3E"])
def test_an_unknown_budget_id_is_404(client: TestClient, budget_id: str) -> None:
    page = client.get(f"/decisions/{budget_id}")
    assert page.status_code == 404
    assert "No decision with budget_id" in page.text
    assert "<script>" not in page.text
    api = client.get(f"/api/decisions/{budget_id}")
    assert api.status_code == 404
    assert api.json()["error"].startswith("no decision with budget_id")


def test_a_tampered_row_shows_its_differences_field_by_field(client: TestClient, sqlite_store: str) -> None:
    """Re-derivation is the audit's own check: a changed limit is named, with what the policy gives instead."""
    row = all_rows(sqlite_store)[9]
    backends.tamper(sqlite_store, f"UPDATE compute_budget_decisions SET max_steps = 99 WHERE seq = {row[0]}")
    body = client.get(f"/api/decisions/{row[1]}").json()
    assert body["rederived"]["holds"] is False
    kinds = [difference["kind"] for difference in body["rederived"]["differences"]]
    assert kinds == ["chain_break", "rederive_mismatch", "budget_id_mismatch"]
    assert "max_steps stored 99, policy gives " in body["rederived"]["differences"][1]["detail"]
    html = client.get(f"/decisions/{row[1]}").text
    assert "✗ Re-deriving this row found 3 differences:" in html
    assert "max_steps stored 99, policy gives" in html
    # The row after it still links to the stored (tampered) row, as the audit checks it.
    after = client.get(f"/api/decisions/{all_rows(sqlite_store)[10][1]}").json()
    assert after["rederived"]["holds"] is True


def test_an_unreadable_row_is_shown_as_stored(client: TestClient, sqlite_store: str) -> None:
    """A row whose evidence_spans is not JSON: the page shows it raw and the audit's finding, without failing."""
    row = all_rows(sqlite_store)[3]
    backends.tamper(sqlite_store, f"UPDATE compute_budget_decisions SET evidence_spans = '[{{' WHERE seq = {row[0]}")
    page = client.get(f"/decisions/{row[1]}")
    assert page.status_code == 200
    assert "This row cannot be read as a decision" in page.text
    listed = client.get("/", params={"before_seq": row[0] + 1, "limit": 1}).text
    assert "this row cannot be read; run the audit" in listed
    body = client.get(f"/api/decisions/{row[1]}").json()
    assert body["evidence_spans"] == "[{"
    assert "unreadable" in body
    assert body["rederived"]["holds"] is False


SAME_ORIGIN = {"Sec-Fetch-Site": "same-origin"}


# -- the audit -----------------------------------------------------------------------------------------------


def run_audit(client: TestClient, **params: Any) -> dict[str, Any]:
    response = client.post("/audit/run", data=params, headers=SAME_ORIGIN, follow_redirects=False)
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/audit"
    bench(client).audits.wait()
    return dict(client.get("/api/audit").json()["audit"])


def test_an_audit_runs_on_demand_and_reports_clean(client: TestClient) -> None:
    """/audit/run starts the replay audit of the whole store; /audit shows it clean."""
    assert client.get("/api/audit").json() == {"audit": None}
    first = client.get("/audit").text
    assert '<form class="filters" method="post" action="/audit/run"' in first
    audit = run_audit(client)
    assert audit["running"] is False
    assert audit["report"]["clean"] is True
    assert audit["report"]["rows_checked"] == ROWS + 1
    html = client.get("/audit").text
    assert f"{ROWS + 1:,} rows checked in" in html
    assert "clean, no findings." in html
    assert 'http-equiv="refresh"' not in html


def test_an_audit_over_a_seq_range_checks_only_that_range(client: TestClient, sqlite_store: str) -> None:
    """after_seq/through_seq bound the audit: a tampered row outside the range is not reported."""
    backends.tamper(sqlite_store, "UPDATE compute_budget_decisions SET max_steps = 99 WHERE seq = 100")
    audit = run_audit(client, after_seq=10, through_seq=40)
    assert audit["report"]["clean"] is True
    assert audit["report"]["rows_checked"] == 30
    assert audit["report"]["head"]["seq"] == 40
    audit = run_audit(client, after_seq=90, through_seq=110)
    assert audit["report"]["findings_by_kind"] == {"chain_break": 1, "rederive_mismatch": 1, "budget_id_mismatch": 1}


def test_the_audit_groups_findings_by_kind_with_links(client: TestClient, sqlite_store: str) -> None:
    rows = all_rows(sqlite_store)
    backends.tamper(sqlite_store, "UPDATE compute_budget_decisions SET max_steps = 99 WHERE seq = 30")
    run_audit(client)
    html = client.get("/audit").text
    assert "— findings</h2>" in html
    assert "<caption><strong>chain_break</strong>: 1</caption>" in html
    assert "<caption><strong>rederive_mismatch</strong>: 1</caption>" in html
    assert f'href="/decisions/{rows[29][1]}"' in html


def test_a_second_audit_while_one_runs_is_409(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """One audit at a time per server: a second request while one runs gets a clear 409, page and API."""
    from compute_budget.web import audit_runner

    release = threading.Event()
    started = threading.Event()
    real_audit = audit_runner.audit

    def slow_audit(*args: Any, **kwargs: Any) -> Any:
        kwargs["on_progress"](3, 10)  # before `started`: the page read next must see this progress
        started.set()
        release.wait(10)
        return real_audit(*args, **kwargs)

    monkeypatch.setattr(audit_runner, "audit", slow_audit)
    assert client.post("/audit/run", headers=SAME_ORIGIN, follow_redirects=False).status_code == 303
    assert started.wait(10)
    try:
        page = client.get("/audit")
        assert '<meta http-equiv="refresh" content="1">' in page.text  # progress without JavaScript
        assert '<progress max="100" value="30">' in page.text
        assert "3 of 10 rows (30%)" in page.text
        assert 'action="/audit/run"' not in page.text
        second = client.post("/audit/run", headers=SAME_ORIGIN, follow_redirects=False)
        assert second.status_code == 409
        assert "an audit is already running" in second.text
        api = client.post("/api/audit/run", headers=SAME_ORIGIN)
        assert api.status_code == 409
        assert "an audit is already running" in api.json()["error"]
        assert client.get("/api/audit").json()["audit"]["running"] is True
    finally:
        release.set()
    bench(client).audits.wait()
    assert client.get("/api/audit").json()["audit"]["report"]["clean"] is True
    assert client.post("/api/audit/run", headers=SAME_ORIGIN).status_code == 202


def test_the_workbench_audit_does_not_wait_for_a_live_writer_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spec 12.5: the Workbench's audit uses an attest wait of 0 whatever $COMPUTE_BUDGET_ATTEST_WAIT says, and the
    page says so, before the audit and in its report: rows the writer has not signed yet are unattested_rows."""
    from tests.sealing import signer

    target, key = str(tmp_path / "live.db"), signer()
    with BudgetStore.open(target, signing_key=key) as store:
        store.record_many(gate_lines(3, prefix="signed"))
    with BudgetStore.open(target, allow_unsigned=True) as store:
        store.record_many(gate_lines(2, prefix="unsigned"))
    monkeypatch.setenv("COMPUTE_BUDGET_ATTEST_WAIT", "30")
    with TestClient(create_app(target, trusted_keys=[key.verifier().format()])) as client:
        assert "It does not wait for a live writer's next checkpoint" in client.get("/audit").text
        began = time.monotonic()
        audit = run_audit(client)
        assert time.monotonic() - began < 10
        assert audit["report"]["findings_by_kind"] == {"unattested_rows": 1}
        assert audit["report"]["attest_wait"]["limit_seconds"] == 0
        assert "Attest wait: did not wait (attest wait 0 s)" in client.get("/audit").text


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"after_seq": 50, "through_seq": 10}, "after_seq 50 is past through_seq 10"),
        ({"after_seq": "x"}, "after_seq must be a whole number"),
        ({"after_seq": 5000}, "after_seq 5000 is past through_seq"),
    ],
)
def test_a_bad_audit_range_is_a_clear_400(client: TestClient, params: dict[str, Any], message: str) -> None:
    response = client.post("/audit/run", data=params, headers=SAME_ORIGIN, follow_redirects=False)
    assert response.status_code == 400
    assert message in response.text
    assert client.get("/api/audit").json() == {"audit": None}


# -- checkpoints ----------------------------------------------------------------------------------------------


def test_the_checkpoints_page_shows_the_head_and_the_trusted_keys(sqlite_store: str, tmp_path: Path) -> None:
    """The head's checkpoint, 'no signed checkpoints yet', and every --trusted-key (a key, a file, a bad one)."""
    key_file = tmp_path / "witness.pub"
    key_file.write_text("EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop\n")
    with BudgetStore.open(sqlite_store, readonly=True) as store:
        head = store.checkpoint()
    keys = [VERIFIER_KEY, str(key_file), "<b>not a key</b>"]
    with TestClient(create_app(sqlite_store, trusted_keys=keys)) as test_client:
        html = test_client.get("/checkpoints").text
        body = test_client.get("/api/checkpoints").json()
    assert f"<dt>seq</dt><dd>{head.seq}</dd>" in html
    assert head.chain_hash in html
    assert "No signed checkpoints are stored yet: record with a signing key" in html
    assert "<td>PeterNeumann</td><td><code>c74f20a3</code></td>" in html
    assert "<td>EnochRoot</td><td><code>af0cfe78</code></td>" in html
    assert "&lt;b&gt;not a key&lt;/b&gt;" in html
    assert "not a verifier key" in html
    assert body["head"] == head.to_dict()
    assert body["signed_checkpoints"] == {"table": "compute_budget_checkpoints", "items": []}
    assert [key["name"] for key in body["trusted_keys"]] == ["PeterNeumann", "EnochRoot", None]


def test_the_checkpoints_page_lists_signed_checkpoints_and_who_vouches(tmp_path: Path) -> None:
    """A store recorded with a signing key: its checkpoints are listed newest first with their signers, marked
    trusted for a key given with --trusted-key, and not for an unknown one."""
    from compute_budget.core.log.note import generate_signer

    signer = generate_signer("writer")
    target = str(tmp_path / "signed.db")
    with BudgetStore.open(target, signing_key=signer) as store:
        store.record_many(gate_lines(3))
        store.record_many(gate_lines(2, prefix="later"))
    writer_key = signer.verifier().format()
    with TestClient(create_app(target, trusted_keys=[writer_key])) as test_client:
        items = test_client.get("/api/checkpoints").json()["signed_checkpoints"]["items"]
        html = test_client.get("/checkpoints").text
    assert [item["tree_size"] for item in items] == [5, 3]
    assert all(item["signers"] == [f"writer+{signer.key_hash:08x}"] for item in items)
    assert all(item["trusted"] == "yes: writer" for item in items)
    assert "yes: writer" in html
    with TestClient(create_app(target, trusted_keys=[VERIFIER_KEY])) as test_client:
        items = test_client.get("/api/checkpoints").json()["signed_checkpoints"]["items"]
    assert {item["trusted"] for item in items} == {"no trusted signature"}


def test_the_checkpoints_page_without_keys_says_how_to_give_them(client: TestClient) -> None:
    assert "None given. Start the workbench with <code>--trusted-key KEY</code>" in client.get("/checkpoints").text


# -- read-only and safety -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [*ROUTES, "/no/such/page"])
def test_every_method_but_get_is_405(client: TestClient, path: str) -> None:
    """Nothing but GET (and HEAD) is answered, on every route, static files and unknown paths included."""
    url = path.format(budget_id=first_budget_id(client))
    for method in ("POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"):
        response = client.request(method, url, content=b"x=1")
        assert response.status_code == 405, method
        assert response.headers["allow"] == "GET, HEAD"
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert client.get("/api/audit").json() == {"audit": None}  # /audit/run with POST started nothing


@pytest.mark.parametrize("path", ["/audit/run", "/api/audit/run"])
def test_starting_an_audit_is_a_same_origin_post_only(client: TestClient, path: str) -> None:
    """Issue 22: the one POST the workbench answers. GET there is 405; a POST without `Sec-Fetch-Site:
    same-origin` and without the served Origin is 403; any other method is 405; none starts an audit."""
    response = client.get(path)
    assert response.status_code == 405
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert client.post(path).status_code == 403
    assert client.post(path, headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
    assert client.post(path, headers={"Origin": "http://evil.example"}).status_code == 403
    for method in ("PUT", "PATCH", "DELETE"):
        assert client.request(method, path).status_code == 405
    assert client.get("/api/audit").json() == {"audit": None}
    assert client.post(path, headers={"Origin": "http://testserver"}, follow_redirects=False).status_code in (
        202, 303
    )


def test_head_is_answered_like_get(client: TestClient) -> None:
    response = client.head("/")
    assert response.status_code == 200
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY


def every_response(client: TestClient) -> Iterator[tuple[str, Any]]:
    budget_id = first_budget_id(client)
    for path in ROUTES:
        yield path, client.get(path.format(budget_id=budget_id))
    for path in ["/no/such/page", "/decisions/" + "0" * 64, "/api/decisions/nope", "/static/nope.css",
                 "/?limit=0", "/api/decisions?limit=0"]:
        yield path, client.get(path)
    yield "POST /", client.post("/")


def test_every_response_carries_the_security_headers(client: TestClient) -> None:
    """A strict CSP (no inline script or style, nothing from another origin) on pages, API, static files and
    errors alike; HTML pages load only same-origin resources and hold no inline script or style."""
    statuses = set()
    for path, response in every_response(client):
        statuses.add(response.status_code)
        headers = response.headers
        assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY, path
        assert headers["x-content-type-options"] == "nosniff", path
        assert headers["x-frame-options"] == "DENY", path
        assert headers["referrer-policy"] == "no-referrer", path
        if headers["content-type"].startswith("text/html"):
            html = response.text
            for inline in ("<script", "<style", " style="):
                assert inline not in html, path
            assert not re.search(r"""(?:src|href)=["'](?:https?:)?//""", html), path
    assert statuses >= {200, 400, 404, 405}
    assert "'unsafe-inline'" not in CONTENT_SECURITY_POLICY
    assert "default-src 'self'" in CONTENT_SECURITY_POLICY


def test_a_server_error_still_carries_the_headers(sqlite_store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Even the 500 of a bug passes through the guard."""
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(web_app.checkpoints, "checkpoints", broken)
    with TestClient(create_app(sqlite_store), raise_server_exceptions=False) as test_client:
        response = test_client.get("/checkpoints")
    assert response.status_code == 500
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY


def test_gate_text_is_escaped_everywhere(client: TestClient) -> None:
    """A gate id and a span text that are HTML arrive as text: escaped on the list, the filter, the detail and
    the audit findings, never as markup."""
    xss_id = client.get("/api/decisions", params={"gate": XSS_GATE_ID}).json()["decisions"][0]["budget_id"]
    pages = [
        client.get("/").text,
        client.get("/", params={"gate": XSS_GATE_ID}).text,
        client.get(f"/decisions/{xss_id}").text,
    ]
    for html in pages:
        # the only images are the page's own charts under a gate filter (issue 22), their source URL-encoded
        assert [tag for tag in re.findall(r"<img[^>]*>", html) if 'src="/charts/' not in tag] == []
        assert re.search(r"<img[^>]*\sonerror=", html) is None  # in a chart's src it is URL-encoded, inert
        assert "<script>" not in html
        assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pages[2]
    assert 'value="&#34;&gt;&lt;img src=x onerror=alert(1)&gt;"' in pages[1]  # in the form's input, too


def test_no_template_marks_anything_safe() -> None:
    """Autoescape is never turned off: no template uses |safe, Markup or autoescape false."""
    templates = REPO_ROOT / "src" / "compute_budget" / "web" / "templates"
    for path in templates.glob("*.html"):
        text = path.read_text()
        assert "|safe" not in text.replace(" ", ""), path
        assert "autoescape false" not in text, path
    sources = (REPO_ROOT / "src" / "compute_budget" / "web").glob("*.py")
    assert not any("Markup(" in path.read_text() for path in sources)


def test_the_host_header_is_checked_when_serving_on_loopback(sqlite_store: str) -> None:
    """Bound to localhost, the workbench answers only to loopback Host names (no DNS rebinding)."""
    app = create_app(sqlite_store, allowed_hosts=web_app.loopback_hosts("127.0.0.1"))
    with TestClient(app, base_url="http://127.0.0.1:8765") as test_client:
        assert test_client.get("/").status_code == 200
        assert test_client.get("/", headers={"host": "localhost:8765"}).status_code == 200
        assert test_client.get("/", headers={"host": "[::1]:8765"}).status_code == 200
        evil = test_client.get("/", headers={"host": "evil.example:8765"})
        assert evil.status_code == 400
        assert evil.headers["content-security-policy"] == CONTENT_SECURITY_POLICY


def sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def browse_everything(client: TestClient) -> None:
    """A browsing session over every page: lists, filters, pages, details, an audit, checkpoints, errors."""
    for path, response in every_response(client):
        assert response.status_code < 500, path
    body = client.get("/api/decisions", params={"limit": 500}).json()
    for row in body["decisions"][:20]:
        assert client.get(f"/decisions/{row['budget_id']}").status_code == 200
    for params in ({"status": "budget_allowed"}, {"reason": "gate_blocked"}, {"before_seq": 30}):
        assert client.get("/", params=params).status_code == 200
    run_audit(client)
    assert client.get("/audit").status_code == 200


def test_a_browsing_session_leaves_the_sqlite_file_byte_identical(sqlite_store: str) -> None:
    """The server never writes: the database file's SHA-256 is the same before and after."""
    before = sha256(sqlite_store)
    with TestClient(create_app(sqlite_store)) as test_client:
        browse_everything(test_client)
    assert sha256(sqlite_store) == before


@pytest.mark.postgres
def test_a_browsing_session_on_postgresql_is_read_only(pg_url: str) -> None:
    """On PostgreSQL every connection of the workbench is a read-only transaction, and the rows are unchanged."""
    fill(pg_url, extra=[xss_gate()])
    before = backends.rows(pg_url)
    with TestClient(create_app(pg_url)) as test_client:
        browse_everything(test_client)
        with bench(test_client).store.engine.connect() as connection:
            assert connection.exec_driver_sql("SHOW transaction_read_only").scalar() == "on"
            with pytest.raises(Exception, match="read-only transaction"):
                connection.exec_driver_sql("CREATE TABLE should_fail (x int)")
    assert backends.rows(pg_url) == before


@pytest.mark.postgres
def test_no_page_shows_a_database_password(pg_url_with_password: str) -> None:
    """A URL's password never reaches a page or an error: the store is shown by its safe display name."""
    with TestClient(create_app(pg_url_with_password)) as test_client:
        for path, response in every_response(test_client):
            assert "s3cret-pw" not in response.text, path
        run_audit(test_client)
        assert "s3cret-pw" not in test_client.get("/audit").text
        assert "s3cret-pw" not in json.dumps(test_client.get("/api/audit").json())


@pytest.fixture
def pg_url_with_password(pg_url: str) -> str:
    """A store on PostgreSQL reached as a reader role with a password (a role of its own, in a throwaway cluster)."""
    import uuid

    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    role = f"wb_{uuid.uuid4().hex[:12]}"
    fill(pg_url, 10)
    owner = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    with owner.connect() as connection:
        connection.exec_driver_sql(f"CREATE ROLE {role} LOGIN PASSWORD 's3cret-pw'")
        connection.exec_driver_sql(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    owner.dispose()
    return make_url(pg_url).set(username=role, password="s3cret-pw").render_as_string(hide_password=False)


# -- the serve command --------------------------------------------------------------------------------------


def test_serve_is_listed_and_documented(run_cli: Callable[..., tuple[int, str, str]]) -> None:
    status, out, _ = run_cli("--help")
    assert status == 0
    assert "serve" in out
    status, out, _ = run_cli("serve", "--help")
    assert status == 0
    for option in ("--db", "--host", "--port", "--trusted-key", "127.0.0.1", "8765", "no authentication"):
        assert option in out


@pytest.mark.slow
def test_the_command_line_loads_no_web_code_until_serve_runs() -> None:
    """`compute-budget --help` and every other command work without the extra: nothing of it is imported."""
    code = (
        "import sys, compute_budget.cli as cli\n"
        "assert cli.run(['--help']) == 0\n"
        "loaded = [name for name in sys.modules if name.split('.')[0] in ('starlette', 'jinja2', 'uvicorn')\n"
        "          or name.startswith('compute_budget.web')]\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "serve" in done.stdout


def test_serve_without_the_extra_says_what_to_install(run_cli: Callable[..., tuple[int, str, str]],
                                                      monkeypatch: pytest.MonkeyPatch, sqlite_store: str) -> None:
    """Without Starlette (the extra missing), serve prints one line naming the extra and exits 2."""
    for name in list(sys.modules):
        if name.startswith(("compute_budget.web", "starlette")):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "starlette", None)
    status, out, err = run_cli("serve", "--db", sqlite_store)
    assert status == 2
    assert err == "compute-budget: serve needs the workbench extra: pip install 'compute-budget[workbench]'\n"
    assert out == ""


def test_serve_warns_when_not_on_localhost(run_cli: Callable[..., tuple[int, str, str]],
                                           monkeypatch: pytest.MonkeyPatch, sqlite_store: str) -> None:
    """Any other host than loopback is served with a warning that the workbench has no authentication."""
    from compute_budget.web import server

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(server, "serve", lambda db, **kwargs: calls.append({"db": db, **kwargs}))
    status, _, err = run_cli("serve", "--db", sqlite_store, "--host", "192.0.2.10", "--trusted-key", VERIFIER_KEY)
    assert status == 2  # issue 22: a non-loopback bind names the Host it answers to
    assert "--allow-host" in err
    assert calls == []
    status, _, err = run_cli("serve", "--db", sqlite_store, "--host", "192.0.2.10", "--trusted-key", VERIFIER_KEY,
                             "--allow-host", "budgets.internal")
    assert status == 0
    assert "warning: serving on 192.0.2.10, not localhost: the workbench has no authentication" in err
    assert calls[0]["host"] == "192.0.2.10"
    assert calls[0]["trusted_keys"] == (VERIFIER_KEY,)
    status, _, err = run_cli("serve", "--db", sqlite_store)
    assert "warning" not in err
    assert calls[1]["host"] == "127.0.0.1"
    assert calls[1]["port"] == 8765


def test_serve_on_a_port_in_use_is_one_line(run_cli: Callable[..., tuple[int, str, str]], sqlite_store: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        status, _, err = run_cli("serve", "--db", sqlite_store, "--port", str(port))
    assert status == 2
    assert err == (
        f"compute-budget: error: port {port} on 127.0.0.1 is already in use: stop what uses it, "
        "or pick another with --port\n"
    )


def test_serve_without_a_store_is_one_line(run_cli: Callable[..., tuple[int, str, str]], tmp_path: Path) -> None:
    status, _, err = run_cli("serve", "--db", str(tmp_path / "missing.db"))
    assert status == 2
    assert err.count("\n") == 1
    assert "no database at" in err


@pytest.mark.slow
def test_serve_answers_and_stops_cleanly_on_ctrl_c(sqlite_store: str) -> None:
    """The real command: it serves on localhost, answers a page, and Ctrl-C (SIGINT) stops it with exit 0."""
    import urllib.request

    process = subprocess.Popen(
        [sys.executable, "-m", "compute_budget", "serve", "--db", sqlite_store, "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        match = re.search(r"at (http://127\.0\.0\.1:\d+/) \(Ctrl-C stops it\)", line)
        assert match, line
        with urllib.request.urlopen(match.group(1), timeout=10) as response:
            assert response.status == 200
            assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
            assert "<h1>Decisions</h1>" in response.read().decode()
        time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        _, rest = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, rest
    assert "Traceback" not in rest
    assert rest.strip().endswith("compute-budget: workbench stopped")


def test_serve_refuses_an_unusable_trusted_key_before_serving(
    run_cli: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch, sqlite_store: str, tmp_path: Path
) -> None:
    """--trusted-key naming a FIFO or holding garbage is one line and exit 2, as on audit (the workbench used to
    start and show the FIFO as "not a verifier key" on its checkpoints page)."""
    import os

    from compute_budget.web import server

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(server, "serve", lambda db, **kwargs: calls.append({"db": db, **kwargs}))
    fifo = tmp_path / "key.fifo"
    os.mkfifo(fifo)
    for given, said in ((str(fifo), "is not a regular file (a device, pipe or socket)"), ("garbage", "verifier key")):
        status, out, err = run_cli("serve", "--db", sqlite_store, "--trusted-key", given)
        assert (status, out) == (2, "")
        assert err.count("\n") == 1
        assert said in err
    assert calls == []
