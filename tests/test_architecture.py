"""The functional core stays pure: it imports nothing from storage, the CLI, the clock or the environment."""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.conftest import REPO_ROOT

CORE = ["types", "errors", "validation", "canonical", "budget_id", "policy", "gate_json", "admission", "chain",
        "checkpoint"]
FORBIDDEN = {"os", "time", "random", "datetime", "sqlalchemy", "alembic", "click", "rich", "uuid", "secrets",
             "socket", "platform"}
FORBIDDEN_OWN = {"store", "engine", "schema", "migration", "audit", "cli", "gate_record", "report", "guard"}


def _imports(module: str) -> set[str]:
    tree = ast.parse((REPO_ROOT / "src" / "compute_budget" / f"{module}.py").read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_core_modules_import_nothing_impure() -> None:
    """No core module imports os, time, random, SQLAlchemy, the store or the CLI."""
    for module in CORE:
        for name in _imports(module):
            top = name.split(".")[0]
            assert top not in FORBIDDEN, f"{module} imports {name}"
            if top == "compute_budget":
                assert name.split(".")[-1] not in FORBIDDEN_OWN, f"{module} imports {name}"


def test_importing_the_package_loads_no_database_code() -> None:
    """`import compute_budget` and a decision load neither SQLAlchemy nor the store."""
    code = (
        "import sys, compute_budget\n"
        "compute_budget.decide({})\n"
        "heavy = ('sqlalchemy', 'alembic', 'compute_budget.store', 'compute_budget.cli')\n"
        "loaded = [name for name in heavy if name in sys.modules]\n"
        "print(loaded)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
