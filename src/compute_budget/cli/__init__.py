"""The `compute-budget` command line: a thin Click shell over the core, the store and the auditor."""

from compute_budget.cli.group import cli
from compute_budget.cli.program import main, run

__all__ = ["cli", "main", "run"]
