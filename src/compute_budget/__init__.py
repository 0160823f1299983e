"""compute-budget: deterministic compute-budget decisions and their append-only, hash-chained audit store.

The core (`decide`, `compute_budget_id`, `admit`) is pure: no I/O, clock, randomness or environment.
The store and the auditor are imported lazily, so importing the core never loads SQLAlchemy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from compute_budget.core.admission import admit
from compute_budget.core.canonical import canonical_json
from compute_budget.core.hashing import budget_payload, compute_budget_id
from compute_budget.core.parse import decide_json, parse_gate_json
from compute_budget.core.policy import (
    COMPUTE_BUDGET_POLICY_VERSION,
    POLICIES,
    BudgetPolicy,
    Limits,
    decide,
    policy_for,
)
from compute_budget.core.types import (
    ComputeBudgetDecision,
    ComputeBudgetStatus,
    SearchGateDecision,
    SearchGateStatus,
    SourceSpan,
)
from compute_budget.errors import (
    BudgetRefused,
    CheckpointError,
    ComputeBudgetError,
    GateConflict,
    GateNotSerializable,
    InputNotJson,
    MalformedDecision,
    MalformedGate,
    NotABudgetStore,
    ReadOnlyStore,
    RefusalReason,
    SchemaBehindHead,
    StoreUnavailable,
    UnsupportedPolicyVersion,
)

if TYPE_CHECKING:  # pragma: no cover  (the store and auditor arrive with their own modules)
    pass

__all__ = [
    "COMPUTE_BUDGET_POLICY_VERSION",
    "POLICIES",
    "AuditReport",
    "BudgetPolicy",
    "BudgetRefused",
    "BudgetStore",
    "CheckpointError",
    "ComputeBudgetDecision",
    "ComputeBudgetError",
    "ComputeBudgetStatus",
    "Finding",
    "GateConflict",
    "GateNotSerializable",
    "InputNotJson",
    "Limits",
    "MalformedDecision",
    "MalformedGate",
    "NotABudgetStore",
    "ReadOnlyStore",
    "RecordResult",
    "RefusalReason",
    "SchemaBehindHead",
    "SearchGateDecision",
    "SearchGateStatus",
    "SourceSpan",
    "StoreUnavailable",
    "UnsupportedPolicyVersion",
    "admit",
    "audit",
    "budget_payload",
    "canonical_json",
    "compute_budget_id",
    "decide",
    "decide_json",
    "parse_gate_json",
    "policy_for",
]

_LAZY = {
    "BudgetStore": "compute_budget.store",
    "RecordResult": "compute_budget.store",
    "audit": "compute_budget.auditor.scan",
    "AuditReport": "compute_budget.auditor.scan",
    "Finding": "compute_budget.auditor.scan",
}


def __getattr__(name: str) -> Any:
    """Load the store and auditor on first use, keeping `import compute_budget` free of SQLAlchemy."""
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'compute_budget' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module_name), name)
