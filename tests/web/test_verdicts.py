"""Issue 28 f, g, h: the Workbench tells the truth without being asked.

f: `serve --trusted-key` / `--witness-key` / `--witness-quorum` reach the Workbench's audit, so it finds what the
command line finds. g: every page checks the guard and schema live and leads with a red banner when they are
broken; a row that does not hold never keeps its green badge; no checkpoint is offered to keep while the guard is
broken or a row does not hold. h: a clean `--audit-report` is green only when it embeds the auditor's `--cosign`
note, signed by `--auditor-key`, of this store's rows as they are now; otherwise grey, saying why.
"""

from __future__ import annotations

import json
import re
import time
import types
import urllib.request
from collections.abc import Callable
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from compute_budget import audit
from compute_budget.core.log.cosignature import generate_witness
from compute_budget.core.log.note import SignerKey, VerifierKey, generate_signer, verify_note
from compute_budget.store import BudgetStore
from compute_budget.store.triggers import POSTGRESQL_UNGUARD, SQLITE_UNGUARD
from compute_budget.web.app import create_app
from tests import backends
from tests.conftest import gate_lines
from tests.sealing import rewrite_consistently
from tests.web.test_pages import fill, run_audit

pytestmark = pytest.mark.usefixtures("writer_state_env")  # SignerKey objects keep their state there

Run = Callable[..., tuple[int, str, str]]


def kinds(report: dict[str, Any]) -> list[str]:
    return [finding["kind"] for finding in report["findings"]]


def signed_then_unsigned(target: str) -> SignerKey:
    """10 rows a writer signed, then 2 appended without its key (`unattested_rows` under its key)."""
    writer = generate_signer("writer")
    with BudgetStore.open(target, signing_key=writer) as store:
        store.record_many(gate_lines(10))
    with BudgetStore.open(target, allow_unsigned=True) as store:
        store.record_many(gate_lines(2, prefix="unsigned"))
    return writer


def drop_guard(target: str, *statements: str) -> None:
    """Drop the decisions table's append-only guard with a raw client (and leave it dropped), then run
    `statements`."""
    unguard = POSTGRESQL_UNGUARD if backends.is_postgres(target) else SQLITE_UNGUARD
    backends.execute(target, *unguard, *statements)


def banners(html: str) -> list[tuple[str, str]]:
    """(class, text) of each banner on a page, in order."""
    found = re.findall(r'<p class="(banner[^"]*)" role="\w+">(.*?)</p>', html, re.S)
    return [(css, unescape(text)) for css, text in found]


# -- f: the keys serve was given reach its audit ------------------------------------------------------------------


def test_the_workbench_audit_finds_what_the_cli_finds_with_the_trusted_key(store_target: str) -> None:
    """Issue 28 f: `clean: true` in the Workbench where the CLI reported `unattested_rows`, because serve's
    --trusted-key never reached its audit."""
    writer = signed_then_unsigned(store_target)
    assert [finding.kind.value for finding in audit(store_target, trusted_keys=[writer.verifier()]).findings] == [
        "unattested_rows"
    ]
    with TestClient(create_app(store_target, trusted_keys=[writer.verifier().format()])) as client:
        report = run_audit(client)["report"]
        page = client.get("/audit").text
    assert report["clean"] is False
    assert kinds(report) == ["unattested_rows"]
    assert report["findings"][0]["seq"] == 11
    assert report["trusted_keys"] == [writer.verifier().format()]
    assert "<caption><strong>unattested_rows</strong>: 1</caption>" in page
    assert "It checks signatures with the 1 <code>--trusted-key</code>" in page


def test_a_range_audit_with_keys_does_not_report_its_own_start(tmp_path: Path) -> None:
    """A range audit starts from the stored row (not a note someone gave), so no `bad_signature` is reported about
    its start; the store's own signature findings still are."""
    db = str(tmp_path / "range.db")
    writer = signed_then_unsigned(db)
    with TestClient(create_app(db, trusted_keys=[writer.verifier().format()])) as client:
        report = run_audit(client, after_seq=4, through_seq=12)["report"]
    assert kinds(report) == ["unattested_rows"]
    assert report["rows_checked"] == 8


def test_the_workbench_audit_counts_the_witnesses_serve_was_given(store_target: str) -> None:
    """With --witness-key (and --witness-quorum), rows no witness cosigned are `unwitnessed_rows` there too."""
    writer = generate_signer("writer")
    with BudgetStore.open(store_target, signing_key=writer) as store:
        store.record_many(gate_lines(6))
    witnesses = [generate_witness(f"witness.example/w{number}").verifier().format() for number in (1, 2)]
    app = create_app(store_target, trusted_keys=[writer.verifier().format()], witness_keys=witnesses,
                     witness_quorum=1)
    with TestClient(app) as client:
        report = run_audit(client)["report"]
    assert kinds(report) == ["unwitnessed_rows"]
    assert report["witness_keys"] == witnesses


@pytest.mark.slow
def test_serve_passes_its_keys_to_the_audit(tmp_path: Path) -> None:
    """End to end: `compute-budget serve --trusted-key --witness-key --witness-quorum`, its audit started over
    HTTP, reports what `audit` with the same keys reports."""
    from tests.e2e.test_workbench_browser import Served

    db = tmp_path / "served.db"
    writer = signed_then_unsigned(str(db))
    witness = generate_witness("witness.example/w1").verifier().format()
    server = Served(db, "--trusted-key", writer.verifier().format(), "--witness-key", witness,
                    "--witness-quorum", "1")
    try:
        start = urllib.request.Request(server.url + "/api/audit/run", method="POST", data=b"",
                                       headers={"Origin": server.url})
        with urllib.request.urlopen(start, timeout=10) as answer:
            assert answer.status == 202
        deadline = time.monotonic() + 30
        while True:
            with urllib.request.urlopen(server.url + "/api/audit", timeout=10) as answer:
                run = json.load(answer)["audit"]
            if not run["running"] or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        server.stop()
    assert run["error"] is None
    assert kinds(run["report"]) == ["unattested_rows", "unwitnessed_rows"]


def test_serve_refuses_a_witness_quorum_it_cannot_meet(run_cli: Run, tmp_path: Path) -> None:
    db = str(tmp_path / "q.db")
    fill(db, 3)
    witness = generate_witness("witness.example/w1").verifier().format()
    status, _, err = run_cli("serve", "--db", db, "--port", "0", "--witness-key", witness, "--witness-quorum", "2")
    assert status == 2
    assert "2 is not between 1 and the number of distinct --witness-key keys (1)" in err


def test_serve_refuses_an_auditor_key_that_is_a_writer_key(run_cli: Run, tmp_path: Path) -> None:
    """Spec 9.9.5: an auditor's signature is never a writer's, so the same key cannot be both."""
    db = str(tmp_path / "a.db")
    fill(db, 3)
    key = generate_signer("writer").verifier().format()
    status, _, err = run_cli("serve", "--db", db, "--port", "0", "--trusted-key", key, "--auditor-key", key)
    assert status == 2
    assert "the auditor's key is one of the --trusted-key writer keys" in err


# -- g: the guard, the rows and the checkpoint to keep ------------------------------------------------------------


@pytest.mark.postgres_smoke
def test_a_dropped_guard_leads_every_page_with_a_red_banner(store_target: str) -> None:
    """Issue 28 g: a store whose guard was dropped and a row edited looked exactly like a clean one on the front
    page. Now every page (and the JSON) opens with what is wrong and what to do."""
    fill(store_target, 12)
    with TestClient(create_app(store_target)) as client:
        assert banners(client.get("/").text) == []
        assert client.get("/api/decisions").json()["guard_problems"] == []
        budget_id = client.get("/api/decisions", params={"limit": 1}).json()["decisions"][0]["budget_id"]
    drop_guard(store_target, "UPDATE compute_budget_decisions SET max_steps = 99 WHERE seq = 5")
    with TestClient(create_app(store_target)) as client:
        for path in ("/", f"/decisions/{budget_id}", "/audit", "/checkpoints", "/no/such/page"):
            html = client.get(path).text
            shown = banners(html)
            assert shown, path
            css, text = shown[0]
            assert css.split()[:2] == ["banner", "red"], path
            assert "The store's append-only guard is broken:" in text
            assert "compute-budget migrate --db" in text
            assert "full `compute-budget audit --db" in text
            assert html.index("append-only guard is broken") < html.index("<h1")
        problems = client.get("/api/decisions").json()["guard_problems"]
        assert problems
        assert client.get("/api/checkpoints").json()["guard_problems"] == problems
        assert problems[0] in banners(client.get("/").text)[0][1]


def test_an_unacknowledged_repair_leads_every_page_until_a_writer_acknowledges_it(store_target: str) -> None:
    """After `migrate` restored a dropped guard (spec 9.9.10), the audit says `schema_tampered` until a writer
    acknowledges the repair; the Workbench said nothing once the guard held again. Now every page leads with the
    repair and what to do, and no checkpoint is offered to keep, until `record --after-repair`."""
    fill(store_target, 12)
    drop_guard(store_target)
    repaired: list[int] = []
    BudgetStore.migrate(store_target, on_repair=lambda repair: repaired.append(repair.id))
    assert len(repaired) == 1
    with TestClient(create_app(store_target)) as client:
        for path in ("/", "/audit", "/checkpoints"):
            shown = banners(client.get(path).text)
            assert shown, path
            css, text = shown[0]
            assert css.split()[:2] == ["banner", "red"], path
            assert "The store was repaired and the repair is not acknowledged" in text
            assert f"--after-repair {repaired[0]}" in text
        checkpoints = client.get("/api/checkpoints").json()
        assert checkpoints["head"] is None
        assert any("not acknowledged" in problem for problem in checkpoints["guard_problems"])
    with BudgetStore.open(store_target) as store:
        store.record_many([], after_repair=repaired[0])
    with TestClient(create_app(store_target)) as client:
        assert banners(client.get("/").text) == []
        assert client.get("/api/checkpoints").json()["head"] is not None


def test_the_guard_is_checked_again_within_five_seconds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check is cached at most 5 s: a guard dropped while the Workbench runs is on the pages after that."""
    from compute_budget.web import verdicts

    db = str(tmp_path / "live.db")
    fill(db, 5)
    with TestClient(create_app(db)) as client:
        assert client.get("/api/decisions").json()["guard_problems"] == []
        drop_guard(db)
        real = time.monotonic
        monkeypatch.setattr(verdicts, "time", types.SimpleNamespace(monotonic=lambda: real() + 5.1))
        assert client.get("/api/decisions").json()["guard_problems"]
        assert "append-only guard is broken" in client.get("/").text


def _allowed_seqs(target: str) -> list[int]:
    return [row[0] for row in backends.rows(target) if "budget_allowed" in row]


def test_a_row_that_does_not_hold_never_shows_a_green_badge(store_target: str) -> None:
    """Issue 28 g: the list marked an edited row `does not hold` but kept its green `allowed` badge."""
    fill(store_target, 30)
    edited, intact = _allowed_seqs(store_target)[2], _allowed_seqs(store_target)[5]
    backends.tamper(store_target, f"UPDATE compute_budget_decisions SET max_steps = 99 WHERE seq = {edited}")
    with TestClient(create_app(store_target)) as client:
        page = client.get("/", params={"before_seq": edited + 1, "limit": 1}).text
        control = client.get("/", params={"before_seq": intact + 1, "limit": 1}).text
        detail = client.get("/decisions/" + str(backends.rows(store_target)[edited - 1][1])).text
    assert "does not hold" in page
    assert 'class="status allowed"' not in page
    assert 'class="status status-tampered"' in page
    assert 'class="status allowed"' in control  # a row that holds keeps its colour
    assert 'class="status allowed"' not in detail


def _offered(client: TestClient) -> bool:
    return _offered_html(client.get("/checkpoints").text)


def _offered_html(html: str) -> bool:
    return "Its checkpoint document" in html


def test_no_checkpoint_is_offered_to_keep_while_the_guard_is_broken(store_target: str) -> None:
    """Issue 28 g: the checkpoints page offered the damaged head 'to keep'."""
    fill(store_target, 8)
    with TestClient(create_app(store_target)) as client:
        assert _offered(client)
        assert client.get("/api/checkpoints").json()["head"] is not None
    drop_guard(store_target, "UPDATE compute_budget_decisions SET max_steps = 99 WHERE seq = 3")
    with TestClient(create_app(store_target)) as client:
        html = client.get("/checkpoints").text
        body = client.get("/api/checkpoints").json()
    assert not _offered_html(html)
    assert "No checkpoint of the head is offered to keep: the store's append-only guard is broken" in unescape(html)
    assert body["head"] is None
    assert body["withheld"].startswith("the store's append-only guard is broken")


def test_no_checkpoint_is_offered_while_the_head_row_does_not_hold(tmp_path: Path) -> None:
    """The guard restored (or never dropped: an owner's edit), but the head row does not hold, checked live."""
    db = str(tmp_path / "head.db")
    fill(db, 8)
    head = backends.rows(db)[-1]
    backends.tamper(db, f"UPDATE compute_budget_decisions SET explanation = 'edited' WHERE seq = {head[0]}")
    with TestClient(create_app(db)) as client:
        html = client.get("/checkpoints").text
        body = client.get("/api/checkpoints").json()
    assert not _offered_html(html)
    assert f"the head row (seq {head[0]}) does not hold" in body["withheld"]
    assert body["head"] is None


def test_no_checkpoint_is_offered_after_the_servers_audit_found_a_row(tmp_path: Path) -> None:
    """A row below the head that does not hold, found by this server's audit: nothing to keep either."""
    db = str(tmp_path / "below.db")
    fill(db, 8)
    backends.tamper(db, "UPDATE compute_budget_decisions SET max_steps = 99 WHERE seq = 2")
    with TestClient(create_app(db)) as client:
        assert _offered(client)  # the head itself holds, and nothing has looked below it yet
        run_audit(client)
        body = client.get("/api/checkpoints").json()
    assert body["head"] is None
    assert "audit #1 found rows that do not hold (the first is seq 2)" in body["withheld"]


# -- h: the audit report's banner -----------------------------------------------------------------------------


@pytest.fixture
def signed_store(run_cli: Run, store_target: str, tmp_path: Path) -> tuple[str, str, Path, str]:
    """A writer-signed store of 6 rows: (target, writer verifier key, auditor key file, auditor verifier key)."""
    keys = {}
    for name in ("writer", "auditor"):
        path = tmp_path / f"{name}.key"
        status, out, err = run_cli("keygen", name, "--out", str(path))
        assert status == 0, err
        keys[name] = (path, out.strip())
    lines = tmp_path / "gates.jsonl"
    lines.write_text("\n".join(gate_lines(6)) + "\n")
    status, _, err = run_cli("record", str(lines), "--db", store_target, "--signing-key", str(keys["writer"][0]),
                             "--origin", "example.org/truth")
    assert status == 0, err
    return store_target, keys["writer"][1], keys["auditor"][0], keys["auditor"][1]


def nightly(run_cli: Run, target: str, writer: str, auditor_file: Path, folder: Path) -> Path:
    """The nightly audit with the auditor's --cosign (and --trusted-key, spec 9.9.5): its JSON report."""
    report = folder / "nightly.json"
    status, out, err = run_cli(
        "audit", "--db", target, "--trusted-key", writer, "--cosign", str(auditor_file),
        "--save-checkpoint", str(folder / "checkpoint.note"), "--report", f"json:{report}",
    )
    assert status == 0, out + err
    return report


def test_the_json_report_embeds_the_note_cosign_made(
    run_cli: Run, signed_store: tuple[str, str, Path, str], tmp_path: Path
) -> None:
    """`audit --report json:` gains `checkpoint_note`: what --save-checkpoint wrote, the auditor's line included;
    null without --cosign."""
    target, writer, auditor_file, auditor = signed_store
    document = json.loads(nightly(run_cli, target, writer, auditor_file, tmp_path).read_text())
    assert document["checkpoint_note"] == (tmp_path / "checkpoint.note").read_text()
    verified = verify_note(document["checkpoint_note"], [VerifierKey.parse(writer), VerifierKey.parse(auditor)])
    assert {key.name for key in verified.verified} == {"writer", "auditor"}
    status, out, _ = run_cli("audit", "--db", target, "--trusted-key", writer, "--format", "json")
    assert status == 0
    assert json.loads(out)["checkpoint_note"] is None


def test_a_report_the_auditor_signed_of_this_store_is_green(
    run_cli: Run, signed_store: tuple[str, str, Path, str], tmp_path: Path
) -> None:
    target, writer, auditor_file, auditor = signed_store
    report = nightly(run_cli, target, writer, auditor_file, tmp_path)
    with TestClient(create_app(target, audit_report=str(report), auditor_key=auditor)) as client:
        [(css, text)] = banners(client.get("/").text)
    assert css == "banner green clean"
    assert "auditor auditor signed rows 1..6 of this store" in text


def test_a_signed_clean_report_turns_grey_while_the_guard_is_broken_and_says_its_time_is_unsigned(
    run_cli: Run, signed_store: tuple[str, str, Path, str], tmp_path: Path
) -> None:
    """Red team on issue 28 h: the green banner stood beside the red guard banner, over rows that may have changed
    since the auditor signed; and the report's `finished_at` (a forged year 2099) read as the auditor's word. Now
    the report's banner is grey while the guard banner is up, and the time is marked as the report's word, which the
    signature does not cover."""
    target, writer, auditor_file, auditor = signed_store
    report = nightly(run_cli, target, writer, auditor_file, tmp_path)
    document = json.loads(report.read_text())
    document["finished_at"] = "2099-01-01T00:00:00Z"
    report.write_text(json.dumps(document))
    with TestClient(create_app(target, audit_report=str(report), auditor_key=auditor)) as client:
        [(css, text)] = banners(client.get("/").text)
        assert css == "banner green clean"
        assert "The report says it finished 2099-01-01T00:00:00Z: the signature covers the rows, not that time" in text
        assert "unsigned" not in text  # issue 36: a green banner does not also call the report unsigned
    drop_guard(target)
    with TestClient(create_app(target, audit_report=str(report), auditor_key=auditor)) as client:
        shown = banners(client.get("/").text)
    assert [css.split()[:2] for css, _ in shown] == [["banner", "red"], ["banner", "grey"]]
    assert "the store's guard is not whole now" in shown[1][1]


def test_a_report_replaced_by_clean_true_is_grey(
    run_cli: Run, signed_store: tuple[str, str, Path, str], tmp_path: Path
) -> None:
    """Issue 28 h: `{"clean": true}` written over the report gave a green banner for a store the CLI flags."""
    target, writer, auditor_file, auditor = signed_store
    report = tmp_path / "forged.json"
    report.write_text('{"clean": true}')
    unauthenticated = f"unauthenticated report: anyone who can write {report} could have written it"
    with TestClient(create_app(target, audit_report=str(report))) as client:
        [(css, text)] = banners(client.get("/").text)
    assert css == "banner grey"
    assert unauthenticated in text
    with TestClient(create_app(target, audit_report=str(report), auditor_key=auditor)) as client:
        [(css, text)] = banners(client.get("/").text)
    assert css == "banner grey"
    assert unauthenticated in text
    assert "it embeds no checkpoint note signed by the auditor" in text
    # The auditor's own report, but no --auditor-key to check it by: grey too.
    genuine = nightly(run_cli, target, writer, auditor_file, tmp_path)
    with TestClient(create_app(target, audit_report=str(genuine))) as client:
        [(css, text)] = banners(client.get("/").text)
    assert css == "banner grey"
    assert "could have written it" in text
    assert "--auditor-key" in text


def test_a_report_signed_by_another_key_is_grey(
    run_cli: Run, signed_store: tuple[str, str, Path, str], tmp_path: Path
) -> None:
    target, writer, auditor_file, _ = signed_store
    report = nightly(run_cli, target, writer, auditor_file, tmp_path)
    someone = generate_signer("auditor").verifier().format()  # the same name, another key
    with TestClient(create_app(target, audit_report=str(report), auditor_key=someone)) as client:
        [(css, text)] = banners(client.get("/").text)
    assert css == "banner grey"
    assert "unauthenticated report" in text
    assert "it carries no signature by auditor+" in text


def test_a_report_of_another_store_is_grey(
    run_cli: Run, signed_store: tuple[str, str, Path, str], tmp_path: Path
) -> None:
    target, writer, auditor_file, auditor = signed_store
    report = nightly(run_cli, target, writer, auditor_file, tmp_path)
    other = str(tmp_path / "other.db")
    fill(other, 6)
    with TestClient(create_app(other, audit_report=str(report), auditor_key=auditor)) as client:
        [(css, text)] = banners(client.get("/").text)
    assert css == "banner grey"
    assert "the report is not of this store: its checkpoint is of log example.org/truth" in text


def test_a_report_of_rows_rewritten_since_is_grey(
    run_cli: Run, signed_store: tuple[str, str, Path, str], tmp_path: Path
) -> None:
    """Rows rewritten consistently after the night (guard restored): the store's tree at the signed size (its last
    partial tile re-hashed from the rows) no longer gives the auditor's root, so the banner says the store changed
    since."""
    target, writer, auditor_file, auditor = signed_store
    report = nightly(run_cli, target, writer, auditor_file, tmp_path)
    rewrite_consistently(target, 3)
    with TestClient(create_app(target, audit_report=str(report), auditor_key=auditor)) as client:
        [(css, text)] = banners(client.get("/").text)
    assert css == "banner grey"
    assert "the store changed since: its rows 1..6 no longer give the root the auditor signed" in text


def test_a_report_of_rows_removed_since_is_grey(
    run_cli: Run, signed_store: tuple[str, str, Path, str], tmp_path: Path
) -> None:
    target, writer, auditor_file, auditor = signed_store
    report = nightly(run_cli, target, writer, auditor_file, tmp_path)
    backends.tamper(target, "DELETE FROM compute_budget_decisions WHERE seq > 4")
    with TestClient(create_app(target, audit_report=str(report), auditor_key=auditor)) as client:
        shown = banners(client.get("/").text)
    assert shown[-1][0] == "banner grey"
    assert "the store changed since: the report's checkpoint covers 6 rows, the store holds 4" in shown[-1][1]


def test_a_report_of_a_tree_rewritten_since_is_grey(
    run_cli: Run, signed_store: tuple[str, str, Path, str], tmp_path: Path
) -> None:
    """The root is computed from the store's tree at the signed size: stored tree nodes changed since (a full tile
    of 256 rows has them) no longer give it, though every row is as it was."""
    target, writer, auditor_file, auditor = signed_store
    lines = tmp_path / "more.jsonl"
    lines.write_text("\n".join(gate_lines(300, prefix="more")) + "\n")
    status, _, err = run_cli("record", str(lines), "--db", target, "--signing-key", str(tmp_path / "writer.key"))
    assert status == 0, err
    report = nightly(run_cli, target, writer, auditor_file, tmp_path)
    backends.tamper_all(target, f"UPDATE compute_budget_tree_nodes SET hash = '{'ab' * 32}'")
    with TestClient(create_app(target, audit_report=str(report), auditor_key=auditor)) as client:
        [(css, text)] = banners(client.get("/").text)
    assert css == "banner grey"
    assert "the store changed since: its rows 1..306 no longer give the root the auditor signed" in text


def test_the_report_banner_follows_the_file_and_the_store(
    run_cli: Run, signed_store: tuple[str, str, Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The banner is worked out again as soon as the report file changes, and at most 5 s after the store did."""
    from compute_budget.web import verdicts

    target, writer, auditor_file, auditor = signed_store
    report = nightly(run_cli, target, writer, auditor_file, tmp_path)
    genuine = report.read_text()
    with TestClient(create_app(target, audit_report=str(report), auditor_key=auditor)) as client:
        assert banners(client.get("/").text)[0][0] == "banner green clean"
        report.write_text('{"clean": true}')
        assert banners(client.get("/").text)[0][0] == "banner grey"
        report.write_text(genuine)
        assert banners(client.get("/").text)[0][0] == "banner green clean"
        rewrite_consistently(target, 2)
        real = time.monotonic
        monkeypatch.setattr(verdicts, "time", types.SimpleNamespace(monotonic=lambda: real() + 5.1))
        [(css, text)] = banners(client.get("/").text)
    assert css == "banner grey"
    assert "the store changed since" in text
