"""The built wheel carries its migrations: an installed compute-budget creates and audits a store anywhere."""

from __future__ import annotations

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
    for revision in ("0002", "0003"):
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
