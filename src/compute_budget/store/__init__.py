"""The append-only, hash-chained store of decisions (SQLite by default, PostgreSQL for scale-out)."""

from compute_budget.core.row import StoredDecision
from compute_budget.store.facade import BatchResult, BudgetStore, RecordResult

__all__ = ["BatchResult", "BudgetStore", "RecordResult", "StoredDecision"]
