"""Conventions of the test suite itself, checked rather than remembered."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO_ROOT

SPAWNS = ("subprocess.", "Popen", "ProcessPoolExecutor", "multiprocessing", '"--jobs"', "jobs=")


def _spawning_tests(path: Path) -> list[tuple[str, bool]]:
    """(name, marked slow) of every test in `path` that starts a process, directly or through a module helper."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    helpers = {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and not node.name.startswith("test_")
        and any(word in (ast.get_source_segment(source, node) or "") for word in SPAWNS)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            body = ast.get_source_segment(source, node) or ""
            if any(word in body for word in SPAWNS) or any(f"{helper}(" in body for helper in helpers):
                slow = any("slow" in ast.unparse(decorator) for decorator in node.decorator_list)
                found.append((node.name, slow))
    return found


def test_every_test_that_starts_a_process_is_marked_slow() -> None:
    """`-m "not slow"` gives a quick run: every test that spawns a process carries the `slow` mark."""
    unmarked = [
        f"{path.name}::{name}"
        for path in sorted((REPO_ROOT / "tests").glob("test_*.py"))
        for name, slow in _spawning_tests(path)
        if not slow
    ]
    assert unmarked == []


def test_the_convention_check_sees_spawning_tests() -> None:
    """The check above is not vacuous: it finds the suite's known process-spawning tests."""
    names = {name for name, _ in _spawning_tests(REPO_ROOT / "tests" / "test_packaging.py")}
    assert "test_wheel_records_and_audits_outside_the_checkout" in names
