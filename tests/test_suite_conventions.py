"""Conventions of the test suite itself, checked rather than remembered."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO_ROOT

SPAWNS = ("subprocess.", "Popen", "ProcessPoolExecutor", "multiprocessing", '"--jobs"', "jobs=")
TESTS = REPO_ROOT / "tests"
PACKAGE = REPO_ROOT / "src" / "compute_budget"
# The checks of the whole house, which belong to no one room: the only test files that sit flat in tests/.
HOUSE_WIDE = ("test_architecture.py", "test_suite_conventions.py")
# Whole-system tests (processes, the docs' recipes, packaging, the browser): the one folder that is no room of the
# package.
WHOLE_SYSTEM = "e2e"


def _spawning_tests(path: Path) -> list[tuple[str, bool]]:
    """(name, marked slow) of every test in `path` that starts a process, directly or through a module helper."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)

    def text(node: ast.FunctionDef) -> str:
        # The function's whole lines: `ast.get_source_segment` splits the whole file again on every call, which made
        # this check one of the suite's slowest tests.
        return "".join(lines[node.lineno - 1 : node.end_lineno])

    helpers = {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and not node.name.startswith("test_")
        and any(word in text(node) for word in SPAWNS)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            body = text(node)
            if any(word in body for word in SPAWNS) or any(f"{helper}(" in body for helper in helpers):
                slow = any("slow" in ast.unparse(decorator) for decorator in node.decorator_list)
                found.append((node.name, slow))
    return found


def test_every_test_that_starts_a_process_is_marked_slow() -> None:
    """`-m "not slow"` gives a quick run: every test that spawns a process carries the `slow` mark."""
    unmarked = [
        f"{path.relative_to(TESTS)}::{name}"
        for path in sorted(TESTS.rglob("test_*.py"))
        for name, slow in _spawning_tests(path)
        if not slow
    ]
    assert unmarked == []


def test_the_convention_check_sees_spawning_tests() -> None:
    """The check above is not vacuous: it finds the suite's known process-spawning tests."""
    names = {name for name, _ in _spawning_tests(TESTS / "e2e" / "test_packaging.py")}
    assert "test_wheel_records_and_audits_outside_the_checkout" in names


def _test_folders() -> list[Path]:
    """Every folder that holds a test file, with each folder between it and tests/ (tests/ itself included)."""
    folders = set()
    for path in TESTS.rglob("test_*.py"):
        folder = path.parent
        while folder != REPO_ROOT:
            folders.add(folder)
            folder = folder.parent
    return sorted(folders)


def test_no_test_file_sits_flat_in_tests_but_the_house_wide_checks() -> None:
    """tests/ mirrors the package (issue 29): a test file goes in the folder of the room it tests, named after what
    it tests; only the checks of the whole house stay at the top."""
    flat = sorted(path.name for path in TESTS.glob("test_*.py"))
    assert [name for name in flat if name not in HOUSE_WIDE] == []


def test_every_test_folder_has_an_init() -> None:
    """Each test folder is a package: two rooms may then each hold a `test_audit.py` without a clash of module
    names, and a test imports another's helpers as `tests.web.test_pages`."""
    folders = _test_folders()
    missing = [str(folder.relative_to(REPO_ROOT)) for folder in folders if not (folder / "__init__.py").is_file()]
    assert missing == []


def test_every_test_folder_but_e2e_is_a_room_of_the_package() -> None:
    """tests/store is for src/compute_budget/store, tests/core/log for src/compute_budget/core/log: a folder of tests
    names a package that exists, so a renamed room cannot leave its tests behind under the old name."""
    rooms = [folder.relative_to(TESTS) for folder in _test_folders() if folder != TESTS]
    strays = [str(room) for room in rooms if room.parts[0] != WHOLE_SYSTEM and not (PACKAGE / room).is_dir()]
    assert strays == []


def test_the_layout_checks_see_the_folders() -> None:
    """The three checks above are not vacuous: they see the rooms' folders, the e2e folder and tests/ itself."""
    folders = {str(folder.relative_to(REPO_ROOT)) for folder in _test_folders()}
    assert {"tests", "tests/core/policy", "tests/store", "tests/e2e"} <= folders
