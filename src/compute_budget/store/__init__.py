"""The append-only, hash-chained store of decisions (SQLite by default, PostgreSQL for scale-out)."""

from compute_budget.core.row import StoredDecision
from compute_budget.store.facade import (
    BatchResult,
    BudgetStore,
    GateResult,
    RecordResult,
    RowCheck,
    SkippedConflict,
)

__all__ = ["BatchResult", "BudgetStore", "GateResult", "RecordResult", "RowCheck", "SkippedConflict", "StoredDecision"]
