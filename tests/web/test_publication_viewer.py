"""`serve --tiles` (spec 11.8): the Workbench over a publication, read-only and with no database. Every row shown is
authenticated up to a verified checkpoint; a checkpoint read later that rolls the tree back or forks it raises the
red `publication rolled back or forked` banner on every page, and the last good tree is kept."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from compute_budget.auditor.key_states import configured_states
from compute_budget.core.log.note import generate_signer
from compute_budget.core.log.witness_policy import TlogPolicy
from compute_budget.core.receipts import verify_proof
from compute_budget.errors import UntrustedCheckpoint
from compute_budget.keys.key_files import load_signer_key, write_new_signer_key
from compute_budget.publication_reader.snapshot import PublicationTarget
from compute_budget.store import BudgetStore
from compute_budget.web import server as web_server
from compute_budget.web.guard import CONTENT_SECURITY_POLICY
from compute_budget.web.publication_app import create_publication_app
from compute_budget.web.publication_watch import ALARM, Trust
from tests.conftest import BuiltOnce, copy_built, gate_lines
from tests.publications import publish_store
from tests.witnessing import WITNESS

ORIGIN = "example.org/viewer-log"
SMALL, LARGE, FORK = 5, 305, 7


def _record(store: Path, key_file: Path, count: int, prefix: str) -> None:
    with BudgetStore.open(str(store), signing_key=str(key_file), origin=ORIGIN) as opened:
        opened.record_many([json.loads(line) for line in gate_lines(count, prefix=prefix)])


def build_publications(folder: Path) -> None:
    """Into `folder`: a writer key; its store published at 5 rows (`small/`) and at 305 (`large/`); and a fork of
    7 other rows signed by the same key (a stolen copy, `fork/`)."""
    key = generate_signer("writer")
    write_new_signer_key(folder / "writer.key", key)
    _record(folder / "store.db", folder / "writer.key", SMALL, "gate")
    publish_store(str(folder / "store.db"), folder / "small", key.verifier())
    _record(folder / "store.db", folder / "writer.key", LARGE - SMALL, "more")
    publish_store(str(folder / "store.db"), folder / "large", key.verifier())
    (folder / "stolen").mkdir()
    write_new_signer_key(folder / "stolen" / "writer.key", key)
    _record(folder / "fork.db", folder / "stolen" / "writer.key", FORK, "forged")
    publish_store(str(folder / "fork.db"), folder / "fork", key.verifier())


@pytest.fixture
def built(built_once: BuiltOnce, tmp_path: Path) -> Path:
    return copy_built(built_once("viewer", build_publications), tmp_path / "built")


Serve = Callable[..., TestClient]


@pytest.fixture
def serve(built: Path, tmp_path: Path) -> Serve:
    """`serve(which)`: a copy of publication `which` in `served/`, and a client of the viewer over it (the checkpoint
    re-read only when a test forces it)."""

    def start(which: str, **trust: Any) -> TestClient:
        served = tmp_path / "served"
        shutil.copytree(built / which, served)
        key = load_signer_key(str(built / "writer.key")).verifier()
        app = create_publication_app(PublicationTarget(str(served)), Trust(ORIGIN, (key,), **trust),
                                     allowed_hosts=("127.0.0.1", "testserver"), max_age=3600.0)
        return TestClient(app)

    return start


def _force(client: TestClient) -> None:
    client.app.workbench.watch.current(force=True)  # type: ignore[attr-defined]


def edit_row_3(served: Path) -> None:
    """Change the year row 3 was recorded in, in its entry bundle (same length: the bundle still reads)."""
    bundle = served / "tile" / "entries" / "000"
    data = bundle.read_bytes()
    at = data.rfind(b'"recorded_at":"', 0, data.index(b',"seq":3,"'))
    bundle.write_bytes(data[: at + 15] + b"3" + data[at + 16 :])


def _alarms(html: str) -> list[str]:
    return re.findall(r'<p class="banner red"[^>]*>([^<]*)</p>', html)


def test_rows_are_listed_newest_first_and_addressed_by_seq(serve: Serve) -> None:
    with serve("large") as client:
        page = client.get("/")
        api = client.get("/api/decisions").json()
        older = client.get("/api/decisions", params={"before_seq": 56}).json()
        row = client.get("/rows/7")
    assert page.status_code == 200
    assert [item["seq"] for item in api["decisions"]] == list(range(LARGE, LARGE - 50, -1))
    assert all(item["holds"] and item["shown"] for item in api["decisions"])
    assert [item["seq"] for item in older["decisions"]] == list(range(55, 5, -1))
    assert 'href="/rows/305"' in page.text
    assert "<select" not in page.text
    assert "name=\"status\"" not in page.text
    assert row.status_code == 200
    assert "✓ Authenticated" in row.text
    assert "✓ Re-derived from its gate: holds" in row.text


def test_a_rows_receipt_verifies_in_both_formats(serve: Serve, built: Path) -> None:
    key = load_signer_key(str(built / "writer.key")).verifier()
    with serve("large") as client:
        for seq in (7, LARGE):
            found = client.get(f"/api/rows/{seq}").json()
            page = client.get(f"/rows/{seq}").text
            for receipt in (found["receipt"], found["tlog_proof"]):
                outcome = verify_proof(receipt if isinstance(receipt, str) else json.dumps(receipt), [key])
                assert outcome.valid, outcome
            assert "compute_budget.proof.v1" in page
            assert "c2sp.org/tlog-proof" in page
    assert found["receipt"]["row"]["chain_hash"]  # the last row's chain hash, from the checkpoint's line


def test_a_decision_by_budget_id_is_a_scan_and_says_so(serve: Serve) -> None:
    with serve("large") as client:
        budget_id = client.get("/api/rows/260").json()["row"]["budget_id"]
        found = client.get(f"/decisions/{budget_id}")
        prefix = client.get(f"/decisions/{budget_id[:12]}")
        missing = client.get(f"/decisions/{'ab' * 32}")
        junk = client.get("/decisions/not-hex")
    assert found.status_code == 200
    assert "Row 260" in found.text
    assert "Found by scanning 2 entry bundle(s)" in found.text
    assert prefix.status_code == 200
    assert "Row 260" in prefix.text
    assert missing.status_code == 404
    assert "scanned all 2 entry bundle(s)" in missing.text
    assert junk.status_code == 404
    assert "is not a budget_id" in junk.text


def test_the_checkpoint_page_names_its_signers(serve: Serve) -> None:
    with serve("large") as client:
        page = client.get("/checkpoints").text
        api = client.get("/api/checkpoints").json()
    assert api["tree_size"] == LARGE
    assert api["alarm"] is None
    assert [signer["name"] for signer in api["signers"]] == ["writer"]
    assert "trusted writer key (active), verified" in api["signers"][0]["verdict"]
    assert api["cosigners"] == []
    assert "trusted writer key (active), verified" in page
    assert ORIGIN in page


def test_an_edited_bundle_row_does_not_hold_and_is_not_shown(serve: Serve, tmp_path: Path) -> None:
    with serve("large") as client:
        edit_row_3(tmp_path / "served")
        row = client.get("/rows/3")
        listed = client.get("/api/decisions", params={"before_seq": 5}).json()["decisions"]
        api = client.get("/api/rows/3").json()
    assert "does not hold (published_mismatch)" in row.text
    assert "recorded at (UTC)" not in row.text
    assert api["row"] is None
    assert api["receipt"] is None
    assert [(item["seq"], item["published_mismatch"]) for item in listed] == [(4, False), (3, True), (2, False),
                                                                             (1, False)]


def test_an_edited_tile_hides_every_row_under_it(serve: Serve, tmp_path: Path) -> None:
    with serve("large") as client:
        tile = tmp_path / "served" / "tile" / "0" / "000"
        data = bytearray(tile.read_bytes())
        data[40] ^= 1
        tile.write_bytes(bytes(data))
        listed = client.get("/api/decisions", params={"before_seq": 258}).json()["decisions"]
    assert listed[0]["seq"] == 257
    assert listed[0]["holds"]
    assert all(item["published_mismatch"] and not item["shown"] for item in listed[1:])
    assert "does not hold (published_mismatch)" in listed[1]["problem"]


def test_a_checkpoint_that_extends_the_tree_is_taken(serve: Serve, built: Path, tmp_path: Path) -> None:
    with serve("small") as client:
        assert client.get("/api/checkpoints").json()["tree_size"] == SMALL
        shutil.copytree(built / "large", tmp_path / "served", dirs_exist_ok=True)
        assert client.get("/api/checkpoints").json()["tree_size"] == SMALL  # read at most once a minute
        _force(client)
        api = client.get("/api/checkpoints").json()
        page = client.get("/").text
    assert (api["tree_size"], api["alarm"]) == (LARGE, None)
    assert _alarms(page) == []


@pytest.mark.parametrize("change", ["rolled back", "forked", "unsigned"])
def test_a_rolled_back_or_forked_publication_is_said_on_every_page(
    serve: Serve, built: Path, tmp_path: Path, change: str
) -> None:
    served = tmp_path / "served"
    with serve("large" if change == "rolled back" else "small") as client:
        if change == "rolled back":
            shutil.copyfile(built / "small" / "checkpoint", served / "checkpoint")
        elif change == "forked":
            shutil.copytree(built / "fork", served, dirs_exist_ok=True)  # its tiles too: they prove nothing
        else:
            text = (served / "checkpoint").read_text().split("\n\n")[0]
            (served / "checkpoint").write_text(text + "\n\n")
        _force(client)
        pages = {path: client.get(path).text for path in ("/", "/rows/2", "/checkpoints", "/audit", "/nowhere")}
        api = client.get("/api/checkpoints").json()
        row = client.get("/api/rows/2").json()
    kept = LARGE if change == "rolled back" else SMALL
    for path, html in pages.items():
        alarms = _alarms(html)
        assert len(alarms) == 1, path
        assert alarms[0].startswith(f"{ALARM}: "), alarms[0]
        assert f"the last good tree (size {kept})" in alarms[0]
    assert api["tree_size"] == kept
    assert api["alarm"].startswith(ALARM)
    assert row["holds"]
    assert row["tree_size"] == kept
    if change == "forked":
        assert "does not extend the one shown" in api["alarm"] or "prove no consistency" in api["alarm"]


def test_a_checkpoint_that_does_not_verify_is_refused_before_serving(built: Path) -> None:
    other = generate_signer("writer").verifier()
    target = PublicationTarget(str(built / "large"))
    with pytest.raises(UntrustedCheckpoint, match="untrusted checkpoint"):
        create_publication_app(target, Trust(ORIGIN, (other,)))
    key = load_signer_key(str(built / "writer.key")).verifier()
    with pytest.raises(UntrustedCheckpoint, match="checkpoint of another log"):
        create_publication_app(target, Trust("example.org/another", (key,)))


def test_every_response_is_guarded_and_read_only(serve: Serve) -> None:
    with serve("small") as client:
        pages = [client.get(path) for path in ("/", "/rows/1", "/checkpoints", "/audit", "/static/workbench.css")]
        posted = client.post("/rows/1")
        wrong_host = client.get("/", headers={"Host": "evil.example"})
        page = client.get("/").text + client.get("/rows/1").text + client.get("/checkpoints").text
        cross = client.post("/api/audit/run", headers={"Sec-Fetch-Site": "cross-site"})
    assert all(response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY for response in pages)
    assert (posted.status_code, wrong_host.status_code, cross.status_code) == (405, 400, 403)
    assert "<form" not in page  # no forms but the audit page's, which starts the audit and changes nothing


def test_the_audit_page_runs_audit_tiles(serve: Serve, tmp_path: Path) -> None:
    with serve("large") as client:
        started = client.post("/api/audit/run", headers={"Sec-Fetch-Site": "same-origin"})
        client.app.workbench.audits.wait()  # type: ignore[attr-defined]
        clean = client.get("/api/audit").json()["audit"]
        edit_row_3(tmp_path / "served")
        client.post("/audit/run", headers={"Sec-Fetch-Site": "same-origin"})
        client.app.workbench.audits.wait()  # type: ignore[attr-defined]
        found = client.get("/api/audit").json()["audit"]
        page = client.get("/audit").text
    assert started.status_code == 202
    assert clean["error"] is None, clean
    assert clean["report"]["clean"], clean
    assert clean["report"]["rows_checked"] == LARGE
    assert not found["report"]["clean"]
    assert "published_mismatch" in {finding["kind"] for finding in found["report"]["findings"]}
    assert 'href="/rows/3"' in page


def test_serve_publication_uses_the_servers_limits(built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same uvicorn configuration as the database Workbench: header and idle timeouts, a connection limit."""
    configs: list[Any] = []

    class Server:
        def __init__(self, config: Any) -> None:
            configs.append(config)

        def run(self, sockets: Any) -> None:
            return None

    monkeypatch.setattr(web_server.uvicorn, "Server", Server)
    key = load_signer_key(str(built / "writer.key")).verifier()
    said: list[str] = []
    web_server.serve_publication(PublicationTarget(str(built / "small")), Trust(ORIGIN, (key,)), host="127.0.0.1",
                                 port=0, say=said.append)
    (config,) = configs
    assert config.limit_concurrency == web_server.CONNECTION_LIMIT
    assert config.timeout_keep_alive == web_server.IDLE_TIMEOUT_SECONDS
    assert "read-only at http://127.0.0.1:" in said[0]


def test_a_witness_quorum_and_key_states_are_held_as_the_audit_holds_them(
    serve: Serve, built: Path, tmp_path: Path
) -> None:
    """With witnesses, the checkpoint must carry the quorum (its cosigner is listed, verified, with its time); a
    writer key retired below the published size counts for nothing."""
    key = load_signer_key(str(built / "writer.key")).verifier()
    rule = TlogPolicy.from_witness_keys([WITNESS.verifier()], 1)
    target = PublicationTarget(str(built / "large"))
    with pytest.raises(UntrustedCheckpoint, match="untrusted checkpoint: it carries 0 of 1"):
        create_publication_app(target, Trust(ORIGIN, (key,), rule))
    retired = configured_states(retired=[f"{key.format()}@{SMALL}"])
    with pytest.raises(UntrustedCheckpoint, match="no signature by a --trusted-key that counts"):
        create_publication_app(target, Trust(ORIGIN, (key,), states=retired))
    cosigned = tmp_path / "cosigned"
    shutil.copytree(built / "large", cosigned)
    note = (cosigned / "checkpoint").read_text()
    (cosigned / "checkpoint").write_text(note + WITNESS.cosign(note.split("\n\n")[0] + "\n", 1_700_000_000).line())
    with TestClient(create_publication_app(PublicationTarget(str(cosigned)), Trust(ORIGIN, (key,), rule))) as client:
        api = client.get("/api/checkpoints").json()
        page = client.get("/checkpoints").text
    assert [signer["name"] for signer in api["cosigners"]] == [WITNESS.name]
    assert api["cosigners"][0]["verdict"] == "witness cosignature, verified, made 2023-11-14T22:13:20Z"
    assert "cosigner" in page


def test_a_checkpoint_that_cannot_be_fetched_again_is_an_outage_not_an_alarm(serve: Serve, tmp_path: Path) -> None:
    with serve("small") as client:
        (tmp_path / "served" / "checkpoint").unlink()
        _force(client)
        page = client.get("/").text
        api = client.get("/api/checkpoints").json()
    assert _alarms(page) == []
    assert (api["alarm"], api["tree_size"]) == (None, SMALL)
    assert api["unreadable"].startswith("the checkpoint could not be read again")
    assert 'class="banner grey"' in page


def test_an_audit_stopped_at_the_checkpoint_names_no_row(serve: Serve, tmp_path: Path) -> None:
    """A forged size under the signature stops the audit before any row is read: the page says so (not that it
    audited a checkpoint of the forged size) and what the reader does."""
    with serve("small") as client:
        checkpoint = tmp_path / "served" / "checkpoint"
        lines = checkpoint.read_text().split("\n")
        lines[1] = str(int(lines[1]) * 10)
        checkpoint.write_text("\n".join(lines))
        client.post("/audit/run", headers={"Sec-Fetch-Site": "same-origin"})
        client.app.workbench.audits.wait()  # type: ignore[attr-defined]
        found = client.get("/api/audit").json()["audit"]
        page = client.get("/audit").text
    assert [finding["kind"] for finding in found["report"]["findings"]] == ["bad_signature"]
    assert "It stopped at the published checkpoint: no tile or entry was read." in page
    assert "It audited the checkpoint" not in page
    # the reader of a publication is told what a reader does (spec 11.4), never a database command
    assert "tell the publisher" in page
    assert "--through" not in page
