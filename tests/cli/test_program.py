"""The command line behaves the same under Click's CliRunner and as the installed console script."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from compute_budget.cli import cli
from tests.conftest import REPO_ROOT

SCRIPT = Path(sys.executable).with_name("compute-budget")


def _error_paths(tmp_path: Path) -> list[tuple[str, ...]]:
    """One failing call per command and kind of failure, each with its known exit status."""
    missing = str(tmp_path / "missing.db")
    not_json = tmp_path / "bad.jsonl"
    not_json.write_text('{"decision_id": \nnot json at all\n', encoding="utf-8")
    folder = str(tmp_path)
    return [
        ("decide", str(not_json)),
        ("decide", str(tmp_path / "no-such-input.jsonl")),
        ("record", str(not_json), "--db", str(tmp_path / "r.db")),
        ("record", folder, "--db", str(tmp_path / "r2.db")),
        ("audit", "--db", missing),
        ("audit", "--db", folder),
        ("audit", "--db", missing, "--format", "yaml"),
        ("checkpoint", "--db", missing),
        ("show", "nothex", "--db", missing),
        ("show", "a" * 64, "--db", missing),
        ("list", "--db", missing),
        ("list", "--db", missing, "--limit", "-1"),
        ("migrate", "--db", folder),
        ("copy", missing, str(tmp_path / "dst.db")),
        ("no-such-command",),
    ]


EXPECTED_STATUS = [2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]


@pytest.mark.slow
def test_clirunner_and_the_console_script_agree(tmp_path: Path) -> None:
    """Exit status and stderr are identical both ways, for every command's error paths. The in-process calls run
    first, then one console script per path, all started at once (each spends its time importing, and no path
    writes what another reads: a failing command leaves nothing behind)."""
    assert SCRIPT.exists(), "the console script is installed with the package"
    runner = CliRunner()
    paths = _error_paths(tmp_path)
    in_process = [runner.invoke(cli, list(argv), prog_name="compute-budget") for argv in paths]
    started = [
        subprocess.Popen([str(SCRIPT), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                         env={**os.environ, "COLUMNS": "200"})
        for argv in paths
    ]
    installed = [(process.communicate(timeout=300)[1], process.returncode) for process in started]
    for argv, expected, here, (stderr, status) in zip(paths, EXPECTED_STATUS, in_process, installed, strict=True):
        assert (here.exit_code, status) == (expected, expected), (argv, here.stderr)
        assert here.stderr == stderr, argv
        assert stderr.startswith("compute-budget: "), argv
        assert "Traceback" not in stderr, argv


def test_findings_exit_1_under_clirunner(tmp_path: Path) -> None:
    """A result that needs a person (a tampered row) exits 1 through Click, not only through our own runner."""
    db = tmp_path / "store.db"
    runner = CliRunner()
    assert runner.invoke(cli, ["record", str(REPO_ROOT / "examples" / "gates.jsonl"), "--db", str(db)]).exit_code == 0
    import sqlite3

    with sqlite3.connect(db) as connection:
        connection.execute("DROP TRIGGER compute_budget_decisions_no_update")
        connection.execute("UPDATE compute_budget_decisions SET max_steps = 100 WHERE seq = 1")
    done = runner.invoke(cli, ["audit", "--db", str(db)])
    assert done.exit_code == 1
    assert "rederive_mismatch" in done.stdout
    assert runner.invoke(cli, ["show", "f" * 64, "--db", str(db)]).exit_code == 1


def test_debug_shows_the_traceback_of_an_unexpected_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A bug of ours is one line by default and a full traceback with --debug."""
    from compute_budget.core.policy import rules as policy

    def broken(*_args: object, **_kwargs: object) -> object:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(policy.BudgetTable, "decide", broken)
    gates = tmp_path / "gates.jsonl"
    shutil.copy(REPO_ROOT / "examples" / "gates.jsonl", gates)
    runner = CliRunner()
    quiet = runner.invoke(cli, ["decide", str(gates)])
    assert quiet.exit_code == 2
    assert quiet.stderr == (
        "compute-budget: error: unexpected RuntimeError: simulated bug "
        "(please report this; --debug shows the traceback)\n"
    )
    loud = runner.invoke(cli, ["--debug", "decide", str(gates)])
    assert isinstance(loud.exception, RuntimeError)
    assert loud.exit_code == 1


@pytest.mark.slow
@pytest.mark.parametrize("args", [["--help"], ["--version"], ["audit", "--help"]])
def test_help_and_version_into_a_full_disk_or_a_closed_pipe(args: list[str]) -> None:
    """--help and --version are output like any other: a full disk is one line and exit 2 (it was a traceback),
    a reader that went away (`| head`, `| true`) ends quietly with 0 (Click would exit 1)."""
    import subprocess
    import sys

    tool = [sys.executable, "-m", "compute_budget", *args]
    with open("/dev/full", "w", encoding="utf-8") as full:
        done = subprocess.run(tool, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr == "compute-budget: error: No space left on device\n"
    reader = subprocess.Popen(tool, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert reader.stdout is not None
    assert reader.stderr is not None
    reader.stdout.close()  # before the program starts writing: its first write meets a closed pipe
    with reader.stderr:
        error = reader.stderr.read()
    assert reader.wait(timeout=60) == 0
    assert error == b""


def test_the_status_choices_are_the_policy_statuses() -> None:
    """`list --status` takes exactly ComputeBudgetStatus's values, written out so that the command line loads no
    policy module to build its options (issue 23)."""
    from compute_budget.cli.browse import STATUSES
    from compute_budget.core.policy.types import ComputeBudgetStatus

    assert tuple(status.value for status in ComputeBudgetStatus) == STATUSES


def test_the_version_printed_is_the_installed_packages(run_cli: Callable[..., tuple[int, str, str]]) -> None:
    """`--version` prints `_version.__version__` without reading package metadata (issue 23), and that is the
    version the installed package's metadata names (pyproject.toml reads it from the same file)."""
    import importlib.metadata

    from compute_budget._version import __version__

    assert importlib.metadata.version("compute-budget") == __version__
    status, out, _ = run_cli("--version")
    assert (status, out) == (0, f"compute-budget, version {__version__}\n")


@pytest.mark.slow
@pytest.mark.parametrize(("typed", "meant"), [("recrod", "record"), ("aduit", "audit"), ("decdie", "decide"),
                                              ("witnes", "witness"), ("lis", "list")])
def test_a_misspelt_command_gets_a_suggestion_lazy_or_not(typed: str, meant: str) -> None:
    """Click suggests from the commands loaded so far: once most commands loaded lazily, only `decide` got a
    "Did you mean". Now every command is a candidate (a fresh process, where no lazy command is loaded yet)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "compute_budget", typed], capture_output=True, text=True,
                          timeout=60, check=False)
    assert (done.returncode, done.stdout) == (2, "")
    assert f"No such command '{typed}'. Did you mean '{meant}'?" in done.stderr
    assert done.stderr.count("\n") == 1


def test_a_group_named_without_its_subcommand_prints_its_help(run_cli: Callable[..., tuple[int, str, str]]) -> None:
    """`compute-budget witness` alone: the group's help on stderr and exit 2, as the program alone does, not the
    help wrapped in an 'error:' line."""
    status, out, err = run_cli("witness")
    assert (status, out) == (2, "")
    assert err.startswith("Usage: compute-budget witness")
    assert "error:" not in err
