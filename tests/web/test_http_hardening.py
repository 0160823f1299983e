"""The workbench over real HTTP (issue 22): Host checks on every bind, timeouts that free silent sockets, no audit
started from another site, and hostile rows that give a page, never a 500."""

from __future__ import annotations

import http.client
import json
import logging
import re
import socket
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compute_budget import BudgetStore
from compute_budget.serving import allowed_hosts
from compute_budget.web.app import create_app
from compute_budget.web.server import server_config
from tests.conftest import gate_lines
from tests.witnessing import serving_in_thread


def _serve(db: str, host: str, extra: tuple[str, ...] = ()) -> Iterator[int]:
    app = create_app(db, allowed_hosts=tuple(allowed_hosts(host, extra)))
    with serving_in_thread(server_config(app, header_timeout=1.0), host) as port:
        yield port


@pytest.fixture
def store_db(tmp_path: Path) -> str:
    db = str(tmp_path / "store.db")
    with BudgetStore.open(db) as store:
        store.record_many(gate_lines(5))
    return db


def _get(
    host: str, port: int, path: str, headers: dict[str, str] | None = None, method: str = "GET"
) -> tuple[int, str]:
    connection = http.client.HTTPConnection(host.strip("[]"), port, timeout=10)
    connection.request(method, path, headers=headers or {})
    response = connection.getresponse()
    answer = (response.status, response.read().decode())
    connection.close()
    return answer


@pytest.mark.parametrize("bind_host", ["127.0.0.2", "::1"])
def test_every_bind_checks_the_host_header(store_db: str, bind_host: str) -> None:
    """Bound to 127.0.0.2 or [::1] (no exact-name special case any more): its own address and the loopback names
    are answered, a rebinding name is refused with 400 and no store content."""
    for port in _serve(store_db, bind_host):
        shown = f"[{bind_host}]" if ":" in bind_host else bind_host
        assert _get(bind_host, port, "/api/decisions", {"Host": f"{shown}:{port}"})[0] == 200
        assert _get(bind_host, port, "/api/decisions", {"Host": "localhost"})[0] == 200
        status, body = _get(bind_host, port, "/api/decisions", {"Host": "attacker.example"})
        assert status == 400
        assert "budget_id" not in body


def test_allow_host_names_another_host(store_db: str) -> None:
    """`--allow-host` adds a name the workbench answers to; others stay refused."""
    for port in _serve(store_db, "127.0.0.1", ("budgets.internal",)):
        assert _get("127.0.0.1", port, "/api/decisions", {"Host": "budgets.internal:8765"})[0] == 200
        assert _get("127.0.0.1", port, "/api/decisions", {"Host": "other.internal"})[0] == 400


@pytest.mark.parametrize("host", ["[::1].attacker.example", "[::1]x", "[::1]:8765:1", "localhost:8765:1", "[::1]:port"])
def test_a_host_header_is_one_exact_name_or_ip_literal(store_db: str, host: str) -> None:
    """Issue 28 m / spec 9.9.6: the Workbench took `[::1].attacker.example` for `[::1]` (the Host check is shared
    with the witness, in serving.py). A Host that is not exactly a name or an IP literal with at most `:port` after
    it is refused; the exact names still pass."""
    from starlette.testclient import TestClient

    with TestClient(create_app(store_db, allowed_hosts=tuple(allowed_hosts("127.0.0.1")))) as client:
        refused = client.get("/api/decisions", headers={"Host": host})
        assert refused.status_code == 400
        assert "budget_id" not in refused.text
        for exact in ("[::1]", "[::1]:8765", "localhost:8765", "127.0.0.1"):
            assert client.get("/api/decisions", headers={"Host": exact}).status_code == 200


def test_silent_and_slow_connections_are_closed(store_db: str) -> None:
    """Idle sockets and a request head that never ends are closed by the server (1 s here): a bounded number of
    them cannot starve the workbench."""
    for port in _serve(store_db, "127.0.0.1"):
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
        slow = socket.create_connection(("127.0.0.1", port))
        slow.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        try:
            for sock in [*idle, slow]:
                sock.settimeout(5)
                assert sock.recv(1024) == b""
        finally:
            for sock in [*idle, slow]:
                sock.close()
        assert _get("127.0.0.1", port, "/api/decisions")[0] == 200


def test_an_audit_is_not_started_from_another_site(store_db: str) -> None:
    """Starting an audit is a POST from the workbench's own page: a GET (an <img> on another page) is 405, a
    cross-site POST (a form elsewhere) 403, and neither starts anything."""
    for port in _serve(store_db, "127.0.0.1"):
        assert _get("127.0.0.1", port, "/audit/run")[0] == 405
        status, _ = _get("127.0.0.1", port, "/api/audit/run", {"Sec-Fetch-Site": "cross-site"}, "POST")
        assert status == 403
        status, _ = _get("127.0.0.1", port, "/audit/run", {"Origin": "http://evil.example"}, "POST")
        assert status == 403
        assert json.loads(_get("127.0.0.1", port, "/api/audit")[1])["audit"] is None
        assert _get("127.0.0.1", port, "/api/audit/run", {"Sec-Fetch-Site": "same-origin"}, "POST")[0] == 202


def test_hostile_rows_give_pages_not_500s(tmp_path: Path) -> None:
    """A legal gate nested 30,000 deep (as deep as a recordable row gets: spec 9.9.8 bounds a row to 65,535 bytes),
    a checkpoint whose tree_size is text, and a row whose seq is text: every page answers 200 (or 404), no
    traceback; the list still shows the readable rows and the audit finds the bad one."""
    db = str(tmp_path / "hostile.db")
    deep = ('{"decision_id": "deep", "status": "eligible", "policy_version": "search-gate-v1", "reason_code": "ok", '
            '"evidence_spans": [], "x": ' + "[" * 30000 + "]" * 30000 + "}")
    with BudgetStore.open(db) as store:
        store.record_many(gate_lines(4))
        deep_id = store.record(deep).decision.budget_id
    with sqlite3.connect(db) as connection:
        connection.execute(
            "INSERT INTO compute_budget_checkpoints (tree_size, key_name, key_hash, note, recorded_at) "
            "VALUES ('abc', 'k', '00000000', 'x', 'now')"
        )
        connection.execute("DROP TRIGGER compute_budget_decisions_no_update")
        connection.execute("UPDATE compute_budget_decisions SET seq = 'two' WHERE seq = 2")
    for port in _serve(db, "127.0.0.1"):
        for path in (f"/decisions/{deep_id}", f"/api/decisions/{deep_id}", "/checkpoints", "/api/checkpoints", "/"):
            status, body = _get("127.0.0.1", port, path)
            assert status in (200, 404), (path, status)
            assert "Traceback" not in body
        listed = json.loads(_get("127.0.0.1", port, "/api/decisions")[1])
        assert listed["head_seq"] == 5
        assert sorted(str(row["seq"]) for row in listed["decisions"]) == ["1", "3", "4", "5", "two"]
        holds = {str(row["seq"]): row["holds"] for row in listed["decisions"]}
        assert holds == {"1": True, "3": False, "4": True, "5": True, "two": False}  # 3 no longer links to 2
        assert _get("127.0.0.1", port, "/api/audit/run", {"Sec-Fetch-Site": "same-origin"}, "POST")[0] == 202
        deadline = time.monotonic() + 20
        run = None
        while time.monotonic() < deadline:
            run = json.loads(_get("127.0.0.1", port, "/api/audit")[1])["audit"]
            if run is not None and not run["running"]:
                break
            time.sleep(0.1)
        assert run is not None
        assert run["report"]["clean"] is False
        assert "malformed_row" in run["report"]["findings_by_kind"]


def test_the_charts_follow_the_filters(tmp_path: Path) -> None:
    """Issue 22: the status chart counts the rows of the reason chosen and the reason chart those of the status
    chosen; a gate, policy or seq filter gives charts drawn under it, as SVG images of their own."""
    from collections import Counter

    from starlette.testclient import TestClient

    from tests.conftest import make_gate

    db = str(tmp_path / "charts.db")
    gates = [make_gate(decision_id=f"g{index}", status="blocked" if index % 3 == 0 else "eligible")
             for index in range(30)]
    with BudgetStore.open(db) as store:
        store.record_many(gates)
        expected = Counter((row.decision.status.value, row.decision.reason_code) for row in store.iter_decisions())
    blocked_reasons = {reason for (status, reason) in expected if status == "budget_blocked"}
    with TestClient(create_app(db, allowed_hosts=("testserver",))) as client:
        page = client.get("/?status=budget_blocked").text
        assert "Decisions by reason (status budget_blocked)" in page
        reason_chart = page[page.index("Decisions by reason"):]
        assert all(reason in reason_chart for reason in blocked_reasons)
        page = client.get("/?after_seq=10&before_seq=21").text
        assert 'src="/charts/status.svg?after_seq=10&amp;before_seq=21"' in page
        svg = client.get("/charts/status.svg?after_seq=10&before_seq=21")
        assert svg.status_code == 200
        assert svg.headers["content-type"].startswith("image/svg+xml")
        counted = sum(int(text.replace(",", "")) for text in re.findall(r"<text x=\"\d+\" y=\"\d+\">([\d,]+)</text>",
                                                                        svg.text))
        assert counted == 10  # rows 11..20 only
        assert client.get("/charts/other.svg").status_code == 404


def test_the_checkpoints_page_says_which_roots_the_last_audit_found_mismatched(tmp_path: Path) -> None:
    """With --audit-report, a signed checkpoint whose root the audit found no longer matching the rows says so
    beside its valid signature; the banner names the row."""
    from starlette.testclient import TestClient

    from compute_budget import audit
    from compute_budget.cli.audit.render import render
    from compute_budget.core.log.note import SignerKey

    db = str(tmp_path / "signed.db")
    key = SignerKey.from_seed("writer", bytes(32))
    with BudgetStore.open(db, signing_key=key, writer_state=str(tmp_path / "state")) as store:
        store.record_many(gate_lines(4))
    with sqlite3.connect(db) as connection:
        connection.execute("DROP TRIGGER compute_budget_decisions_no_update")
        connection.execute("UPDATE compute_budget_decisions SET max_steps = max_steps + 1 WHERE seq = 2")
    report = tmp_path / "nightly.json"
    report.write_text(render(audit(db, trusted_keys=[key.verifier()]), "json"))
    app = create_app(db, trusted_keys=[key.verifier().format()], allowed_hosts=("testserver",),
                     audit_report=str(report))
    with TestClient(app) as client:
        page = client.get("/checkpoints").text
        assert "yes: writer (but the last audit found this root no longer matches the rows" in page
        assert "Rows affected: seq 2." in page


def test_the_web_audit_names_the_affected_rows_first(tmp_path: Path) -> None:
    """The Workbench's audit page opens its findings with the rows affected, as the CLI's report does."""
    from starlette.testclient import TestClient

    db = str(tmp_path / "edited.db")
    with BudgetStore.open(db) as store:
        store.record_many(gate_lines(6))
    with sqlite3.connect(db) as connection:
        connection.execute("DROP TRIGGER compute_budget_decisions_no_update")
        connection.execute("UPDATE compute_budget_decisions SET max_steps = max_steps + 1 WHERE seq = 4")
    with TestClient(create_app(db, allowed_hosts=("testserver",))) as client:
        assert client.post("/api/audit/run", headers={"Sec-Fetch-Site": "same-origin"}).status_code == 202
        deadline = time.monotonic() + 20
        while json.loads(client.get("/api/audit").text)["audit"]["running"] and time.monotonic() < deadline:
            time.sleep(0.05)
        page = client.get("/audit").text
        assert "Rows affected: 1\\n    (seq 4)" in page or "Rows affected: 1" in page
        assert page.index("Rows affected") < page.index("rederive_mismatch")
        assert "--through 3" in page


def test_the_checkpoints_page_checks_roots_once_the_server_audited(tmp_path: Path) -> None:
    """Without an audit report: each stored checkpoint's root is 'not checked since the server started' until the
    server's own audit from seq 0 ran; then it says yes, or NO for a root the rows no longer give."""
    from starlette.testclient import TestClient

    from compute_budget.core.log.note import SignerKey

    db = str(tmp_path / "roots.db")
    key = SignerKey.from_seed("writer", bytes(32))
    with BudgetStore.open(db, signing_key=key, writer_state=str(tmp_path / "state")) as store:
        store.record_many(gate_lines(2))
        store.record_many(gate_lines(2, prefix="later"))
    with sqlite3.connect(db) as connection:
        connection.execute("DROP TRIGGER compute_budget_decisions_no_update")
        connection.execute("UPDATE compute_budget_decisions SET max_steps = max_steps + 1 WHERE seq = 3")
    with TestClient(create_app(db, trusted_keys=[key.verifier().format()], allowed_hosts=("testserver",))) as client:
        before = client.get("/api/checkpoints").json()["signed_checkpoints"]["items"]
        assert {item["root_check"].split(":")[0] for item in before} == {"not checked since the server started"}
        assert client.post("/api/audit/run", headers={"Sec-Fetch-Site": "same-origin"}).status_code == 202
        deadline = time.monotonic() + 20
        while client.get("/api/audit").json()["audit"]["running"] and time.monotonic() < deadline:
            time.sleep(0.05)
        after = {item["tree_size"]: item["root_check"] for item in
                 client.get("/api/checkpoints").json()["signed_checkpoints"]["items"]}
        assert after[2].startswith("yes (audit #1")
        assert after[4].startswith("NO (audit #1")


class _Errors(logging.Handler):
    """Collects the ERROR records of uvicorn's logger (where an unhandled ASGI exception is reported)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _cut_short(port: int, path: str, headers: str) -> None:
    """Send a POST that declares 100 body bytes, send 5, and close the connection."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n{headers}\r\n".encode())
        sock.sendall(b"after")
    time.sleep(0.3)


def test_a_client_that_leaves_mid_body_is_no_traceback_and_starts_nothing(store_db: str) -> None:
    """A POST whose client disconnects before its body arrives was an 'Exception in ASGI application' traceback
    (starlette's ClientDisconnect) on the server's stderr. Now nothing is logged and no audit starts."""
    errors = _Errors()
    for port in _serve(store_db, "127.0.0.1"):
        logging.getLogger("uvicorn.error").addHandler(errors)  # after the server configured its logging
        try:
            form = "Content-Type: application/x-www-form-urlencoded\r\nSec-Fetch-Site: same-origin\r\n"
            _cut_short(port, "/audit/run", form)
            _cut_short(port, "/api/audit/run", form)
            status, body = _get("127.0.0.1", port, "/api/audit")
        finally:
            logging.getLogger("uvicorn.error").removeHandler(errors)
        assert status == 200
        assert json.loads(body)["audit"] is None
    assert [record.getMessage() for record in errors.records] == []
