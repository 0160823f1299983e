"""The `compute-budget` command line: a thin Click shell over the core, the store and the auditor."""

from compute_budget.cli.commands import cli, main, run

__all__ = ["cli", "main", "run"]
