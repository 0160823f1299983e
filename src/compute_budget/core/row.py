"""A stored row's logical form: its columns, its values as the chain and the tree hash them, and reading it back.

Pure: the store turns database rows into these tuples and back; the auditor, the copy and the proofs read
them with the same functions, so there is one codec for a row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from compute_budget.core.chain import CHAINED_COLUMNS
from compute_budget.core.policy.hashing import spans_json
from compute_budget.core.policy.types import ComputeBudgetDecision
from compute_budget.errors import MalformedDecision

# Every stored column, in table order: the chained columns, then chain_hash. `store.table.COLUMNS` must equal
# this (a test holds the two together).
ROW_COLUMNS: tuple[str, ...] = (*CHAINED_COLUMNS, "chain_hash")
# How many leading columns the chain and the leaf hash (every column but chain_hash). Per-row leaf loops over raw
# driver rows slice `row[:CHAINED_COUNT]` rather than `named(row).chained`: naming a row copies it, about six times
# the cost of the slice, on paths that hash every row of the store.
CHAINED_COUNT = len(CHAINED_COLUMNS)


class StoredRow(NamedTuple):
    """One stored row as the database gives it, its columns by name (in `ROW_COLUMNS` order).

    Still a tuple (SQL drivers give tuples; `StoredRow._make(raw)` names one for the price of a copy), and its
    values are typed `Any` on purpose: a tampered row may hold anything, which the audit reports.
    """

    seq: Any
    budget_id: Any
    policy_version: Any
    gate_decision_id: Any
    gate_policy_version: Any
    gate_input_digest: Any
    status: Any
    reason_code: Any
    max_candidates: Any
    max_depth: Any
    max_steps: Any
    max_wallclock_ms: Any
    max_parallelism: Any
    evidence_spans: Any
    explanation: Any
    gate_input: Any
    recorded_at: Any
    chain_hash: Any

    @property
    def chained(self) -> tuple[Any, ...]:
        """The values the chain and the leaf hash: every column but chain_hash, in `CHAINED_COLUMNS` order."""
        return self[:CHAINED_COUNT]


def named(raw: Sequence[Any]) -> StoredRow:
    """A database row (values in `ROW_COLUMNS` order) as a `StoredRow`; one already named is returned as is."""
    return raw if type(raw) is StoredRow else StoredRow._make(raw)


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
