"""The checkpoints page's `--trusted-key` keys (issue 29, item 3): read by the audit's own key reader
(`keys.key_files.verifier_key`), never by a parser of the workbench's own."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from compute_budget.store import BudgetStore
from compute_budget.web.app import create_app
from tests.conftest import REPO_ROOT, gate_lines

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
