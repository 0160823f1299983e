"""The `budget_id` of spec section 3.3 (SHA-256 over the canonical form of eleven decision fields), and the one
serialisation of evidence spans that hashing and storage share."""

from __future__ import annotations

from typing import Any

import orjson

from compute_budget.core.canonical import canonical_sha256
from compute_budget.core.types import ComputeBudgetDecision, SourceSpan


def span_payload(spans: tuple[SourceSpan, ...]) -> list[dict[str, Any]]:
    """Evidence spans as an array of span objects, gate order kept: hashed (keys sorted by the canonical form)
    and stored (`spans_json`) alike."""
    return [span.to_dict() for span in spans]


def spans_json(spans: tuple[SourceSpan, ...]) -> str:
    """Evidence spans as the stored JSON text (the `evidence_spans` column)."""
    return orjson.dumps(span_payload(spans)).decode("utf-8")


def budget_payload(decision: ComputeBudgetDecision) -> dict[str, Any]:
    """The eleven hashed fields; never `explanation`, `max_wallclock_ms`, clocks or the environment."""
    return {
        "evidence_spans": span_payload(decision.evidence_spans),
        "gate_decision_id": decision.gate_decision_id,
        "gate_input_digest": decision.gate_input_digest,
        "gate_policy_version": decision.gate_policy_version,
        "max_candidates": decision.max_candidates,
        "max_depth": decision.max_depth,
        "max_parallelism": decision.max_parallelism,
        "max_steps": decision.max_steps,
        "policy_version": decision.policy_version,
        "reason_code": decision.reason_code,
        "status": str(decision.status),
    }


def compute_budget_id(decision: ComputeBudgetDecision) -> str:
    """Recompute a decision's `budget_id` from its fields (spec 3.3); the stored id is not consulted."""
    return canonical_sha256(budget_payload(decision))
