"""Helpers for the seal's tests: keys, and the attacker's consistent rewrite of history."""

from __future__ import annotations

import json
import os
from typing import Any

from compute_budget import decide
from compute_budget.core.chain import chain_hash
from compute_budget.core.log.head import GENESIS_CHAIN_HASH
from compute_budget.core.log.note import SignerKey, generate_signer
from compute_budget.core.row import ROW_COLUMNS, chained_row
from tests.backends import Statement, rows, tamper
from tests.conftest import make_gate


def signer(name: str = "writer") -> SignerKey:
    """A fresh signer key."""
    return generate_signer(name)


def rewrite_consistently(target: str | os.PathLike[str], seq: int, **gate_changes: Any) -> dict[str, Any]:
    """Replace row `seq` by the decision of another gate and recompute every later chain_hash, as an attacker
    with raw access would: the chain, every budget_id and every re-derivation still hold. Returns the new gate."""
    stored = rows(target)
    gate = make_gate(decision_id=f"rewritten-{seq}", **gate_changes)
    new_row = chained_row(seq, decide(gate), json.dumps(gate), stored[seq - 1][16])
    prev = stored[seq - 2][17] if seq > 1 else GENESIS_CHAIN_HASH
    statements: list[Statement] = []
    for row in stored[seq - 1 :]:
        values = new_row if row[0] == seq else tuple(row[:17])
        prev = chain_hash(prev, values)
        assignments = ", ".join(f"{name} = :{name}" for name in ROW_COLUMNS if name != "seq")
        params = dict(zip(ROW_COLUMNS, (*values, prev), strict=True))
        statements.append((f"UPDATE compute_budget_decisions SET {assignments} WHERE seq = :seq", params))
    tamper(target, *statements)
    return gate


def forged_row(target: str | os.PathLike[str], **gate_changes: Any) -> tuple[Any, ...]:
    """A correctly chained next row, as anyone able to INSERT can compute it (no key needed)."""
    stored = rows(target)
    last = stored[-1]
    gate = make_gate(decision_id=f"forged-{len(stored) + 1}", **gate_changes)
    values = chained_row(last[0] + 1, decide(gate), json.dumps(gate), last[16])
    return (*values, chain_hash(last[17], values))
