"""The built wheel carries its migrations: an installed compute-budget creates and audits a store anywhere."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT


@pytest.mark.slow
def test_wheel_records_and_audits_outside_the_checkout(tmp_path: Path) -> None:
    """A non-editable wheel, unpacked away from the repository, creates its database by migrations."""
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        # No build isolation: the build backend comes from the test environment, so no network is needed.
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels),
         str(REPO_ROOT)],
        capture_output=True, text=True, check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("compute_budget-*.whl")
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


@pytest.mark.slow
def test_the_test_extra_alone_runs_a_test_that_needs_mypy(tmp_path: Path) -> None:
    """Issue 18: the package built into a fresh virtual environment with only `[test]` (nothing of `[dev]`, nothing
    of this environment) runs tests/e2e/test_public_api.py, which type-checks a client with mypy. A tool a test needs
    but only `[dev]` installs fails here, as it would on a newcomer's machine."""
    import os

    venv = tmp_path / "venv"
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, check=False)
    assert made.returncode == 0, made.stderr
    python = str(venv / "bin" / "python")
    installed = subprocess.run(
        [python, "-m", "pip", "install", "-q", f"{REPO_ROOT}[test]"], capture_output=True, text=True, check=False,
        timeout=1200,
    )
    assert installed.returncode == 0, installed.stderr
    where = subprocess.run([python, "-c", "import compute_budget; print(compute_budget.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, check=False)
    assert where.returncode == 0, where.stderr
    assert where.stdout.startswith(str(venv)), where.stdout  # the built package, not this checkout's src/
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("PYTEST_", "COMPUTE_BUDGET_", "COV_", "VIRTUAL_ENV"))}
    public_api = REPO_ROOT / "tests" / "e2e" / "test_public_api.py"
    done = subprocess.run(
        [python, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(public_api)],
        cwd=REPO_ROOT, env=environment, capture_output=True, text=True, check=False, timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"\b[1-9]\d* passed\b", done.stdout), done.stdout[-500:]
    assert not re.search(r"\b(failed|error|errors|skipped)\b", done.stdout.splitlines()[-1]), done.stdout[-500:]


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
