"""`python -m compute_budget` runs the command line, like the `compute-budget` program."""

from compute_budget.cli import main

main()
