"""The hash chain over stored rows: pure functions, shared by the store (which writes) and the auditor.

    chain_hash(row n) = SHA-256( RFC 8785 JSON of { every stored column of row n but chain_hash,
                                                    "prev_chain_hash": chain_hash(row n-1) } )

with `GENESIS_CHAIN_HASH` (64 zeros) standing for row 0. `evidence_spans` and `gate_input` enter as the exact
stored text; `max_wallclock_ms` as null or an integer. Any edit, deletion, insertion or reordering changes a
link; only a checkpoint kept elsewhere also catches a history rewritten consistently from some row on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from compute_budget.core.canonical import canonical_sha256
from compute_budget.core.policy.types import DECISION_FIELDS

# Every stored column but chain_hash, in table order: seq, the decision's fields, gate_input, recorded_at.
CHAINED_COLUMNS: tuple[str, ...] = ("seq", *DECISION_FIELDS, "gate_input", "recorded_at")


def chain_hash(prev_chain_hash: str, row: Sequence[Any]) -> str:
    """The chain hash of a row given as values in `CHAINED_COLUMNS` order, linked to its predecessor."""
    payload = dict(zip(CHAINED_COLUMNS, row, strict=True))
    payload["prev_chain_hash"] = prev_chain_hash
    return canonical_sha256(payload)
