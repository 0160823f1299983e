"""A resolved store location: a value the backends take, apart from `store.engine`, which resolves it with their
help (so that neither imports the other's module back)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.engine import URL

if TYPE_CHECKING:
    from compute_budget.store.facade import BudgetStore


@dataclass(frozen=True, slots=True)
class Location:
    """A resolved store location: its SQLAlchemy URL, the SQLite file (if any) and a safe display name."""

    url: URL
    sqlite_path: Path | None
    display: str

    @property
    def backend(self) -> str:
        """The SQLAlchemy backend name: ``sqlite`` or ``postgresql``."""
        return self.url.get_backend_name()

    @property
    def target(self) -> str:
        """What `locate` turns back into this location (another process reopens the store with it)."""
        if self.sqlite_path is not None:
            return str(self.sqlite_path)
        return self.url.render_as_string(hide_password=False)

    def reopen(self) -> BudgetStore:
        """The store here, opened read-only (an audit's worker process reads it so)."""
        from compute_budget.store.facade import BudgetStore  # here: the backends import this module

        return BudgetStore.open(self.target, readonly=True)
