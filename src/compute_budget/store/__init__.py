"""The append-only, hash-chained store of decisions (SQLite by default, PostgreSQL for scale-out).

`BudgetStore` and its result types load on first use, so importing a module of this package (the key files,
say) does not load SQLAlchemy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from compute_budget.core.row import StoredDecision
    from compute_budget.store.facade import BudgetStore
    from compute_budget.store.results import BatchResult, GateResult, RecordResult, RowCheck, SkippedConflict

__all__ = ["BatchResult", "BudgetStore", "GateResult", "RecordResult", "RowCheck", "SkippedConflict", "StoredDecision"]

_HOMES = {
    "BudgetStore": "compute_budget.store.facade",
    "StoredDecision": "compute_budget.core.row",
    **dict.fromkeys(
        ("BatchResult", "GateResult", "RecordResult", "RowCheck", "SkippedConflict"), "compute_budget.store.results"
    ),
}


def __getattr__(name: str) -> Any:
    """Load a public name's module on first use."""
    import importlib

    if name not in _HOMES:
        raise AttributeError(f"module 'compute_budget.store' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
