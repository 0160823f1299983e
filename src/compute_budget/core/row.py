"""A stored row's logical form: its columns, its values as the chain and the tree hash them, and reading it back.

Pure: the store turns database rows into these tuples and back; the auditor, the copy and the proofs read
them with the same functions, so there is one codec for a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from compute_budget.core.chain import CHAINED_COLUMNS
from compute_budget.core.policy.hashing import spans_json
from compute_budget.core.policy.types import ComputeBudgetDecision
from compute_budget.errors import MalformedDecision

# Every stored column, in table order: the chained columns, then chain_hash. `store.table.COLUMNS` must equal
# this (a test holds the two together).
ROW_COLUMNS: tuple[str, ...] = (*CHAINED_COLUMNS, "chain_hash")
SEQ, BUDGET_ID, STATUS, REASON_CODE, EVIDENCE_SPANS, GATE_INPUT, CHAIN_HASH = (
    ROW_COLUMNS.index(name)
    for name in ("seq", "budget_id", "status", "reason_code", "evidence_spans", "gate_input", "chain_hash")
)


@dataclass(frozen=True, slots=True)
class StoredDecision:
    """One stored row: the decision with its `seq`, gate input, recording time and chain hash."""

    seq: int
    decision: ComputeBudgetDecision
    gate_input: str
    recorded_at: str
    chain_hash: str

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON: the decision's fields, then `seq`, `gate_input`, `recorded_at`, `chain_hash`."""
        return {
            **self.decision.to_dict(),
            "seq": self.seq,
            "gate_input": self.gate_input,
            "recorded_at": self.recorded_at,
            "chain_hash": self.chain_hash,
        }


def chained_row(seq: int, decision: ComputeBudgetDecision, gate_input: str, recorded_at: str) -> tuple[Any, ...]:
    """A new row's values in `CHAINED_COLUMNS` order (every column but chain_hash)."""
    return (
        seq,
        decision.budget_id,
        decision.policy_version,
        decision.gate_decision_id,
        decision.gate_policy_version,
        decision.gate_input_digest,
        decision.status.value,
        decision.reason_code,
        decision.max_candidates,
        decision.max_depth,
        decision.max_steps,
        decision.max_wallclock_ms,
        decision.max_parallelism,
        spans_json(decision.evidence_spans),
        decision.explanation,
        gate_input,
        recorded_at,
    )


def stored_from_row(row: tuple[Any, ...]) -> StoredDecision:
    """Read a row (values in `ROW_COLUMNS` order); raises `MalformedDecision` when it cannot be read."""
    values = dict(zip(ROW_COLUMNS, row, strict=True))
    try:
        spans = orjson.loads(values["evidence_spans"])
    except (orjson.JSONDecodeError, TypeError) as error:
        raise MalformedDecision(f"evidence_spans is not JSON ({error})") from None
    decision = ComputeBudgetDecision.from_dict(
        {name: values[name] for name in ComputeBudgetDecision.__dataclass_fields__} | {"evidence_spans": spans}
    )
    seq, gate_input, recorded_at, chain = (
        values["seq"],
        values["gate_input"],
        values["recorded_at"],
        values["chain_hash"],
    )
    if not (
        isinstance(seq, int) and isinstance(gate_input, str) and isinstance(recorded_at, str) and isinstance(chain, str)
    ):
        raise MalformedDecision("seq, gate_input, recorded_at or chain_hash has the wrong type")
    return StoredDecision(seq, decision, gate_input, recorded_at, chain)
