"""The worked example of docs/hashing.md (leaf, chain, checkpoint note, signed note), reproduced byte for byte, so
the document a reimplementation follows cannot drift from the code."""

from __future__ import annotations

import json
import re

from compute_budget import decide
from compute_budget.core.chain import chain_hash
from compute_budget.core.leaf import leaf_input, row_leaf_hash
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.head import GENESIS_CHAIN_HASH
from compute_budget.core.log.merkle import root_from_leaf_hashes
from compute_budget.core.log.note import SignerKey, format_checkpoint, sign_note, verify_note
from compute_budget.core.row import chained_row
from tests.conftest import REPO_ROOT, make_gate

SIGNER = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"


def _fenced_blocks(text: str) -> list[str]:
    return re.findall(r"```\w*\n(.*?)```", text, flags=re.DOTALL)


def test_the_documented_leaf_chain_and_signed_checkpoint() -> None:
    """docs/hashing.md's example is what the code computes: leaf input, leaf hash, chain hash and the note."""
    doc = (REPO_ROOT / "docs" / "hashing.md").read_text(encoding="utf-8")
    gate = make_gate()
    values = chained_row(1, decide(gate), json.dumps(gate, separators=(",", ":")), "2026-12-02T00:00:00.000000Z")
    blocks = _fenced_blocks(doc)
    assert leaf_input(values).decode("utf-8") + "\n" in blocks
    leaf = row_leaf_hash(values)
    assert f"leaf hash `{leaf.hex()}`" in doc
    chain = chain_hash(GENESIS_CHAIN_HASH, values)
    assert f"`{chain}`" in doc
    text = format_checkpoint("example.org/budgets", 1, root_from_leaf_hashes([leaf]), chain)
    signed = sign_note(text, SignerKey.parse(SIGNER))
    assert signed in blocks
    assert verify_note(signed, [SignerKey.parse(SIGNER).verifier()]).ok
    assert Checkpoint.from_note(signed).root == leaf
