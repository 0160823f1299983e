"""The Workbench's checkpoints page shows each trusted key's state (issue 31, item 5's first half): active,
retired at N, revoked at N; and a listed checkpoint whose signature by such a key does not count says so."""

from __future__ import annotations

import base64

import pytest
from starlette.testclient import TestClient

from compute_budget.auditor.key_states import configured_states
from compute_budget.core.log.note import generate_signer
from compute_budget.store import BudgetStore
from compute_budget.web.app import create_app
from tests.conftest import gate_lines
from tests.web.test_pages import run_audit

pytestmark = pytest.mark.usefixtures("writer_state_env")  # SignerKey objects keep their state there


def test_the_checkpoints_page_shows_each_keys_state_and_what_does_not_count(store_target: str) -> None:
    signer, other = generate_signer("writer"), generate_signer("other")
    with BudgetStore.open(store_target, signing_key=signer) as store:
        store.record_many(gate_lines(3))
        root3 = store.checkpoint().root
        store.record_many(gate_lines(2, prefix="later"))
    assert root3 is not None
    writer, spare = signer.verifier().format(), other.verifier().format()
    states = configured_states(revoked=[f"{writer}@3:{base64.b64encode(root3).decode('ascii')}"],
                               retired=[f"{spare}@9"])
    app = create_app(store_target, trusted_keys=[writer, spare], key_states=states)
    with TestClient(app) as client:
        body = client.get("/api/checkpoints").json()
        html = client.get("/checkpoints").text
        audited = run_audit(client)  # the page's own audit judges signatures the same way
    kinds = {finding["kind"] for finding in audited["report"]["findings"]}
    assert {"bad_signature", "unattested_rows", "checkpoint_mismatch"} <= kinds  # checkpoint_mismatch: no handover
    assert [key["state"] for key in body["trusted_keys"]] == ["revoked at 3", "retired at 9"]
    assert "<td>revoked at 3</td>" in html
    by_size = {item["tree_size"]: item["trusted"] for item in body["signed_checkpoints"]["items"]}
    assert by_size[3] == "yes: writer"
    assert by_size[5].startswith("yes: writer (but its signature by writer+")
    assert by_size[5].endswith("does not count: revoked at 3)")
    # Without states every key is active and nothing is said.
    with TestClient(create_app(store_target, trusted_keys=[writer])) as client:
        body = client.get("/api/checkpoints").json()
    assert [key["state"] for key in body["trusted_keys"]] == ["active"]
    assert {item["trusted"] for item in body["signed_checkpoints"]["items"]} == {"yes: writer"}
