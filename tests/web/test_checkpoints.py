"""The checkpoints page's `--trusted-key` keys (issue 29, item 3): read by the audit's own key reader
(`keys.key_files.verifier_key`), never by a parser of the workbench's own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from compute_budget.store import BudgetStore
from compute_budget.web.app import create_app
from tests.backends import execute
from tests.conftest import REPO_ROOT, gate_lines
from tests.witnessing import WITNESS

VERIFIER_KEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
WEB = REPO_ROOT / "src" / "compute_budget" / "web"


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
                       "problem": None, "state": "active"}
    assert (keys[1]["key"], keys[1]["name"], keys[1]["key_hash"], keys[1]["state"]) == (None, None, None, None)
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


def test_one_row_per_checkpoint_with_its_cosigners_a_handover_mark_and_the_state_said_once(
    run_cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    """Issue 36: the checkpoints page reads at a glance. A rotation files the handover beside the old key's own
    checkpoint of that size: one row (size, a short root, both signers, a handover mark); a witness's stored
    cosignature is in its row's cosigners; what every row shares (its trusted signature, its root check) is said
    once above the table, and a row says only what differs."""
    db = str(tmp_path / "rotated.db")
    keys = {}
    for name in ("old", "new"):
        status, out, err = run_cli("keygen", name, "--out", str(tmp_path / f"{name}.key"))
        assert status == 0, err
        keys[name] = out.strip()
    for name, count in (("old", 3), ("new", 2)):
        gates = tmp_path / f"{name}.jsonl"
        gates.write_text("\n".join(gate_lines(count, prefix=name)) + "\n")
        assert run_cli("record", str(gates), "--db", db, "--signing-key", str(tmp_path / f"{name}.key"))[0] == 0
        if name == "old":
            assert run_cli("rotate", "--db", db, "--signing-key", str(tmp_path / "old.key"),
                           "--new-key", str(tmp_path / "new.key"))[0] == 0
    with BudgetStore.open(db, readonly=True) as store:
        [(_, size, note)] = [entry for entry in store.newest_signed_checkpoints() if entry[1] == 5]
    assert size is not None
    assert note is not None
    text = note.split("\n\n")[0] + "\n"
    execute(db, ("INSERT INTO compute_budget_cosignatures (tree_size, witness_name, witness_key_id, timestamp, "
                 "checkpoint, line, recorded_at) VALUES (5, :name, :key_id, 7, :text, :line, 'test')",
                 {"name": WITNESS.name, "key_id": f"{WITNESS.key_id:08x}", "text": text,
                  "line": WITNESS.cosign(text, 7).line()}))
    with TestClient(create_app(db, trusted_keys=[keys["old"], keys["new"]])) as client:
        items = client.get("/api/checkpoints").json()["signed_checkpoints"]["items"]
        page = client.get("/checkpoints").text
    assert [item["tree_size"] for item in items] == [5, 3]
    newest, handed = items
    assert newest["cosigners"] == [f"{WITNESS.name}+{WITNESS.key_id:08x}"]
    assert [signer.split("+")[0] for signer in handed["signers"]] == ["old", "new"]
    assert handed["handover"].startswith("old+")
    assert " handed over to new+" in handed["handover"]
    assert newest["handover"] is None
    assert handed["short_root"] == handed["root"][:12] + "…"
    table = page[page.index('<table class="checkpoints">'):]
    table = table[: table.index("</table>")]
    assert table.count("<tr") == 3  # the head and one row per checkpoint
    assert table.count("⇄ handover") == 1
    assert "not checked since the server started" not in table  # said once, above the table
    assert page.count("not checked since the server started") == 1
    assert handed["root"] not in page.replace(f'title="{handed["root"]}"', "")  # only the short root is shown
