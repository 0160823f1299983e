"""The output type of spec section 2 (`ComputeBudgetDecision`) and its JSON form; the input types live in
`core.policy.gate` beside their well-formedness rules and are re-exported here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from compute_budget.core.policy.gate import GATE_KEYS, SPAN_KEYS, SearchGateDecision, SearchGateStatus, SourceSpan
from compute_budget.errors import MalformedDecision


class ComputeBudgetStatus(StrEnum):
    """Status of a budget; only `BUDGET_ALLOWED` may ever be admitted (`BUDGET_ZERO` is reserved, a refusal)."""

    BUDGET_ALLOWED = "budget_allowed"
    BUDGET_BLOCKED = "budget_blocked"
    BUDGET_ZERO = "budget_zero"
    BUDGET_UNASSESSABLE = "budget_unassessable"


DECISION_FIELDS: tuple[str, ...] = (
    "budget_id",
    "policy_version",
    "gate_decision_id",
    "gate_policy_version",
    "gate_input_digest",
    "status",
    "reason_code",
    "max_candidates",
    "max_depth",
    "max_steps",
    "max_wallclock_ms",
    "max_parallelism",
    "evidence_spans",
    "explanation",
)
# What re-derivation compares (audit, admission, proofs, storing a Python gate): every field but the
# explanation (wording may change between releases) and max_wallclock_ms (always null in v1).
REDERIVED_FIELDS: tuple[str, ...] = tuple(
    name for name in DECISION_FIELDS if name not in ("explanation", "max_wallclock_ms")
)


@dataclass(frozen=True, slots=True)
class ComputeBudgetDecision:
    """The output: a resource ceiling for one gate. It authorises nothing; it only bounds."""

    budget_id: str
    policy_version: str
    gate_decision_id: str
    gate_policy_version: str
    gate_input_digest: str
    status: ComputeBudgetStatus
    reason_code: str
    max_candidates: int
    max_depth: int
    max_steps: int
    max_wallclock_ms: int | None
    max_parallelism: int
    evidence_spans: tuple[SourceSpan, ...]
    explanation: str

    def to_dict(self) -> dict[str, Any]:
        """The decision's JSON form: the fourteen keys in the record's order."""
        return {
            "budget_id": self.budget_id,
            "policy_version": self.policy_version,
            "gate_decision_id": self.gate_decision_id,
            "gate_policy_version": self.gate_policy_version,
            "gate_input_digest": self.gate_input_digest,
            "status": str(self.status),
            "reason_code": self.reason_code,
            "max_candidates": self.max_candidates,
            "max_depth": self.max_depth,
            "max_steps": self.max_steps,
            "max_wallclock_ms": self.max_wallclock_ms,
            "max_parallelism": self.max_parallelism,
            "evidence_spans": [span.to_dict() for span in self.evidence_spans],
            "explanation": self.explanation,
        }

    @classmethod
    def from_dict(cls, value: object) -> ComputeBudgetDecision:
        """Read a decision's JSON form strictly; raises `MalformedDecision` saying which key is wrong."""
        if not isinstance(value, Mapping):
            raise MalformedDecision(f"a decision must be a JSON object, not {type(value).__name__}")
        keys = set(value.keys())
        if keys != set(DECISION_FIELDS):
            missing = sorted(set(DECISION_FIELDS) - keys)
            extra = sorted(str(key) for key in keys - set(DECISION_FIELDS))
            raise MalformedDecision(f"decision keys are wrong: missing {missing}, unexpected {extra}")
        status = _decision_text(value, "status")
        try:
            budget_status = ComputeBudgetStatus(status)
        except ValueError:
            raise MalformedDecision(f"status {status!r} is not a ComputeBudgetStatus value") from None
        wallclock = value["max_wallclock_ms"]
        spans_value = value["evidence_spans"]
        if not isinstance(spans_value, list | tuple):
            raise MalformedDecision("evidence_spans must be an array")
        spans: list[SourceSpan] = []
        for position, span in enumerate(spans_value):
            try:
                spans.append(SourceSpan.from_dict(span))
            except ValueError as error:
                raise MalformedDecision(f"evidence_spans[{position}]: {error}") from None
        return cls(
            budget_id=_decision_text(value, "budget_id"),
            policy_version=_decision_text(value, "policy_version"),
            gate_decision_id=_decision_text(value, "gate_decision_id"),
            gate_policy_version=_decision_text(value, "gate_policy_version"),
            gate_input_digest=_decision_text(value, "gate_input_digest"),
            status=budget_status,
            reason_code=_decision_text(value, "reason_code"),
            max_candidates=_decision_int(value, "max_candidates"),
            max_depth=_decision_int(value, "max_depth"),
            max_steps=_decision_int(value, "max_steps"),
            max_wallclock_ms=None if wallclock is None else _decision_int(value, "max_wallclock_ms"),
            max_parallelism=_decision_int(value, "max_parallelism"),
            evidence_spans=tuple(spans),
            explanation=_decision_text(value, "explanation"),
        )


def _decision_text(value: Mapping[Any, Any], key: str) -> str:
    item = value[key]
    if not isinstance(item, str):
        raise MalformedDecision(f"{key} must be a string, not {type(item).__name__}")
    return str.__str__(item)


def _decision_int(value: Mapping[Any, Any], key: str) -> int:
    item = value[key]
    if isinstance(item, bool) or not isinstance(item, int):
        raise MalformedDecision(f"{key} must be an integer, not {type(item).__name__}")
    return int(item)


__all__ = [
    "DECISION_FIELDS",
    "GATE_KEYS",
    "REDERIVED_FIELDS",
    "SPAN_KEYS",
    "ComputeBudgetDecision",
    "ComputeBudgetStatus",
    "SearchGateDecision",
    "SearchGateStatus",
    "SourceSpan",
]
