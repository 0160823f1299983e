"""The built wheel carries its migrations: an installed compute-budget creates and audits a store anywhere."""

from __future__ import annotations

import ast
import email.parser
import importlib.metadata
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import REPO_ROOT


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project built as a wheel, once for this module."""
    wheels = tmp_path_factory.mktemp("wheels")
    built = subprocess.run(
        # No build isolation: the build backend comes from the test environment, so no network is needed.
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels),
         str(REPO_ROOT)],
        capture_output=True, text=True, check=False,
    )
    assert built.returncode == 0, built.stderr
    (found,) = wheels.glob("compute_budget-*.whl")
    return found


@pytest.mark.slow
def test_wheel_records_and_audits_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    """A non-editable wheel, unpacked away from the repository, creates its database by migrations."""
    names = zipfile.ZipFile(wheel).namelist()
    assert "compute_budget/store/alembic/env.py" in names
    assert "compute_budget/store/alembic/script.py.mako" in names
    for revision in ("0002", "0003", "0004", "0005", "0006"):
        assert any(name.startswith(f"compute_budget/store/alembic/versions/{revision}") for name in names)
    assert "compute_budget/web/templates/decisions.html" in names  # the workbench ships its templates and CSS
    assert "compute_budget/web/static/workbench.css" in names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    work = tmp_path / "elsewhere"
    work.mkdir()
    gates = work / "gates.jsonl"
    gates.write_bytes((REPO_ROOT / "examples" / "gates.jsonl").read_bytes())
    program = (
        f"import sys; sys.path.insert(0, {str(site)!r}); import compute_budget, compute_budget.cli as cli; "
        f"assert compute_budget.__file__.startswith({str(site)!r}), compute_budget.__file__; "
        "sys.exit(cli.run(sys.argv[1:]))"
    )
    for argv in (["record", "gates.jsonl"], ["audit"]):
        done = subprocess.run([sys.executable, "-c", program, *argv], cwd=work, capture_output=True, text=True,
                              check=False)
        assert done.returncode == 0, done.stderr
    assert (work / "compute_budget.db").is_file()


def _requirements(wheel: Path) -> list[Requirement]:
    """The wheel's `Requires-Dist` lines, parsed."""
    archive = zipfile.ZipFile(wheel)
    (metadata_name,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
    metadata = email.parser.Parser().parsestr(archive.read(metadata_name).decode("utf-8"))
    return [Requirement(line) for line in metadata.get_all("Requires-Dist") or []]


def _installed_by(requirements: list[Requirement], extra: str) -> set[str]:
    """The distributions `pip install 'compute-budget[extra]'` asks for by name: the dependencies, the extra's, and
    those of the project's own extras it names (`compute-budget[workbench]`)."""
    wanted, extras, seen = set(), [extra], set()
    while extras:
        current = extras.pop()
        seen.add(current)
        for requirement in requirements:
            marker = requirement.marker
            if marker is not None and not marker.evaluate({"extra": current}):
                continue
            name = canonicalize_name(requirement.name)
            if name == "compute-budget":
                extras += [item for item in requirement.extras if item not in seen]
            else:
                wanted.add(name)
    return wanted


def _third_party_modules_the_tests_use() -> set[str]:
    """Top-level modules the test files import, or run with `python -m`, that are neither the standard library
    nor this project's."""
    found = set()
    for path in (REPO_ROOT / "tests").rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
        # a module a Python interpreter is told to run (`[sys.executable, "-m", "mypy", ...]`), not a program's -m
        found.update(re.findall(r'(?:executable|python), "-m", "([A-Za-z_][A-Za-z0-9_]*)"', source))
    # pip comes with every virtual environment (`python3 -m venv`), as the README's test command makes it
    ours_or_given = ("compute_budget", "tests", "pip")
    return {name for name in found if name not in sys.stdlib_module_names and name not in ours_or_given}


@pytest.mark.slow
def test_the_test_extra_installs_every_package_a_test_uses(wheel: Path) -> None:
    """The wheel's `test` extra names, directly or through the project's own extras, a distribution for every
    third-party module the tests import or run (mypy, pytest, playwright, ...): a tool only `dev` installs fails
    here, as it would on a newcomer's machine that ran the README's test command. (CI runs that command in a fresh
    environment with `[test]` alone, which is the end-to-end check of the same rule.)"""
    test_extra = _installed_by(_requirements(wheel), "test")
    assert {"pytest", "mypy", "hypothesis", "pytest-xdist", "playwright", "starlette"} <= test_extra
    providers = importlib.metadata.packages_distributions()
    uncovered = []
    for module in sorted(_third_party_modules_the_tests_use()):
        distributions = {canonicalize_name(name) for name in providers.get(module, [])}
        assert distributions, f"no installed distribution provides {module!r}, which a test uses"
        if not distributions & test_extra:
            uncovered.append(f"{module} (from {', '.join(sorted(distributions))})")
    assert uncovered == [], "modules the tests use that the `test` extra does not install"


def test_the_extra_check_sees_what_only_dev_installs() -> None:
    """The check above is not vacuous: ruff is in `dev` only, so a test importing it would be reported."""
    requirements = [Requirement('ruff>=0.5; extra == "dev"'), Requirement('pytest>=8.0; extra == "test"'),
                    Requirement('compute-budget[workbench]; extra == "test"'),
                    Requirement('starlette>=0.40; extra == "workbench"')]
    assert _installed_by(requirements, "test") == {"pytest", "starlette"}
    assert "ruff" in _installed_by(requirements, "dev")


@pytest.mark.slow
def test_no_database_file_is_tracked_outside_the_test_fixtures() -> None:
    """A database committed by accident (a stray `h.db` once sat at the root) is a file nobody audits: only
    tests/data/ may hold database fixtures, each read by a test."""
    listed = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "ls-files", "-z"], capture_output=True, check=False,
    )
    if listed.returncode != 0:
        assert not (REPO_ROOT / ".git").exists(), listed.stderr
        pytest.skip("not a git checkout (an unpacked sdist): no tracked files to check")
    tracked = [name for name in listed.stdout.decode("utf-8").split("\0") if name]
    assert "pyproject.toml" in tracked
    stray = []
    for name in tracked:
        path = REPO_ROOT / name
        with path.open("rb") as handle:
            is_database = handle.read(16) == b"SQLite format 3\x00"
        if (is_database or name.endswith((".db", ".sqlite", ".sqlite3"))) and not name.startswith("tests/data/"):
            stray.append(name)
    assert stray == []
