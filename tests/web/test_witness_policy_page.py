"""The Workbench with a witness policy (`serve --policy`, issue 31 item 5's second half): the checkpoints page and
the audit page say the quorum in words with the policy's SHA-256, the policy's log key is a trusted key whose
state is shown, and a policy whose log key is not named by the store's origin is refused before anything is
served."""

from __future__ import annotations

import hashlib

import pytest
from starlette.testclient import TestClient

from compute_budget.core.log.cosignature import generate_witness
from compute_budget.core.log.note import generate_signer
from compute_budget.core.log.witness_policy_file import parse_policy
from compute_budget.errors import PolicyOriginMismatch
from compute_budget.store import BudgetStore
from compute_budget.web.app import create_app
from tests.conftest import gate_lines
from tests.web.test_pages import run_audit

pytestmark = pytest.mark.usefixtures("writer_state_env")  # SignerKey objects keep their state there


def _policy_text(log_key: str) -> bytes:
    first, second, spare = (generate_witness(f"witness.example/{name}").verifier().format()
                            for name in ("w1", "w2", "spare"))
    return (f"log {log_key}\nwitness w1 {first}\nwitness w2 {second}\nwitness spare {spare}\n"
            "group ours 2 w1 w2\nquorum ours\n").encode()


def test_the_pages_say_the_policy_in_words_and_trust_its_log_key(store_target: str) -> None:
    signer = generate_signer("example.org/prod")
    with BudgetStore.open(store_target, signing_key=signer, origin="example.org/prod") as store:
        store.record_many(gate_lines(3))
    text = _policy_text(signer.verifier().format())
    policy = parse_policy(text)
    words = f"all of w1, w2 (policy SHA-256 {hashlib.sha256(text).hexdigest()})"
    with TestClient(create_app(store_target, witness_policy=policy)) as client:
        body = client.get("/api/checkpoints").json()
        checkpoints_page = client.get("/checkpoints").text
        audit_page = client.get("/audit").text
        audited = run_audit(client)
    assert body["witness_policy"] == words
    assert words in checkpoints_page
    assert words in audit_page
    assert [(key["name"], key["state"]) for key in body["trusted_keys"]] == [("example.org/prod", "active")]
    # The page's audit judges by the policy: the log key vouches for the rows, and no witness cosigned them.
    assert [finding["kind"] for finding in audited["report"]["findings"]] == ["unwitnessed_rows"]
    assert audited["report"]["attested_size"] == 3
    assert audited["report"]["witness_policy"]["optional"] == ["spare"]


def test_a_policy_for_another_log_is_refused_before_anything_is_served(store_target: str) -> None:
    with BudgetStore.open(store_target, signing_key=generate_signer("example.org/prod"),
                          origin="example.org/prod") as store:
        store.record_many(gate_lines(1))
    policy = parse_policy(_policy_text(generate_signer("someone.else/log").verifier().format()))
    with pytest.raises(PolicyOriginMismatch, match=r"^line 1: .*keygen ORIGIN"):
        create_app(store_target, witness_policy=policy)
