"""The `budget_id` of spec section 3.3 (SHA-256 over the canonical form of eleven decision fields), and the one
serialisation of evidence spans that hashing and storage share."""

from __future__ import annotations

from typing import Any

import orjson

from compute_budget.core.canonical import canonical_sha256
from compute_budget.core.policy.types import ComputeBudgetDecision, SourceSpan


def span_payload(spans: tuple[SourceSpan, ...]) -> list[dict[str, Any]]:
    """Evidence spans as an array of span objects, gate order kept: hashed (keys sorted by the canonical form)
    and stored (`spans_json`) alike."""
    return [span.to_dict() for span in spans]


def spans_json(spans: tuple[SourceSpan, ...]) -> str:
    """Evidence spans as the stored JSON text (the `evidence_spans` column)."""
    return orjson.dumps(span_payload(spans)).decode("utf-8")


def hashed_payload(
    policy_version: str,
    gate_decision_id: str,
    gate_policy_version: str,
    gate_input_digest: str,
    status: str,
    reason_code: str,
    max_candidates: int,
    max_depth: int,
    max_steps: int,
    max_parallelism: int,
    evidence_spans: list[dict[str, Any]],
) -> dict[str, Any]:
    """The eleven hashed fields of spec 3.3 as one object; never `explanation`, `max_wallclock_ms`, clocks or the
    environment. The one place the payload is built: `decide` hashes it before a decision exists."""
    return {
        "evidence_spans": evidence_spans,
        "gate_decision_id": gate_decision_id,
        "gate_input_digest": gate_input_digest,
        "gate_policy_version": gate_policy_version,
        "max_candidates": max_candidates,
        "max_depth": max_depth,
        "max_parallelism": max_parallelism,
        "max_steps": max_steps,
        "policy_version": policy_version,
        "reason_code": reason_code,
        "status": status,
    }


def budget_payload(decision: ComputeBudgetDecision) -> dict[str, Any]:
    """A decision's hashed payload (spec 3.3)."""
    return hashed_payload(
        decision.policy_version,
        decision.gate_decision_id,
        decision.gate_policy_version,
        decision.gate_input_digest,
        str(decision.status),
        decision.reason_code,
        decision.max_candidates,
        decision.max_depth,
        decision.max_steps,
        decision.max_parallelism,
        span_payload(decision.evidence_spans),
    )


def compute_budget_id(decision: ComputeBudgetDecision) -> str:
    """Recompute a decision's `budget_id` from its fields (spec 3.3); the stored id is not consulted."""
    return canonical_sha256(budget_payload(decision))
