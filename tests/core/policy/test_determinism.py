"""Determinism: the same gates give byte-identical decisions in any process, hash seed, time zone and locale,
and the pure core does not even import what could make it otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from compute_budget.cli import run
from tests.conftest import REPO_ROOT, make_gate

ENVIRONMENTS = [
    {"PYTHONHASHSEED": "0", "TZ": "UTC", "LC_ALL": "C"},
    {"PYTHONHASHSEED": "1", "TZ": "Pacific/Chatham", "LC_ALL": "C.UTF-8"},
    {"PYTHONHASHSEED": "4294967295", "TZ": "America/St_Johns", "LC_ALL": "POSIX"},
    {"PYTHONHASHSEED": "random", "TZ": "Asia/Kathmandu", "LC_ALL": "tr_TR.UTF-8"},
]


def gate_texts() -> list[str]:
    """Gates whose decisions could vary if anything depended on hashing order, the clock or the locale."""
    many_extra = make_gate(**{f"extra_{index}": index for index in range(40)})
    many_missing = {f"k{index}": None for index in range(30)}
    return [
        *(REPO_ROOT / "examples" / "gates.jsonl").read_text(encoding="utf-8").splitlines(),
        *(vector["gate"] for vector in json.loads(
            (REPO_ROOT / "tests" / "vectors" / "decide_v1.json").read_text(encoding="utf-8"))["vectors"]),
        json.dumps(many_extra),
        json.dumps(many_missing),
        json.dumps(make_gate(status={"z": 1, "a": [1.5, None, True], "m": "\u0130i"})),
        json.dumps(make_gate(reason_code="I\u0131\u0130i")),  # dotted and dotless i: locale-sensitive case
        json.dumps(make_gate(status="blocked", reason_code="\u00df")),
        json.dumps(make_gate(status=1e300)),
    ]


def gates_text() -> str:
    """All the gates as one JSON Lines input (the pretty-printed vector spans several lines)."""
    return "\n".join(gate_texts()) + "\n"


def run_in_subprocess(path: Path, env_changes: dict[str, str]) -> bytes:
    """Decide `path` in a fresh interpreter with `env_changes` and return its stdout bytes."""
    env = dict(os.environ, **env_changes)
    done = subprocess.run(
        [sys.executable, "-c", "from compute_budget.cli import main; main()", "decide", str(path)],
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode("utf-8", "backslashreplace")
    assert done.stderr == b""
    return done.stdout


@pytest.mark.slow
def test_decisions_are_byte_identical_across_processes(tmp_path: Path) -> None:
    """Subprocesses with different PYTHONHASHSEED, TZ and LC_ALL print byte-identical decisions."""
    path = tmp_path / "gates.jsonl"
    path.write_text(gates_text(), encoding="utf-8")
    outputs = [run_in_subprocess(path, env) for env in ENVIRONMENTS]
    assert outputs[0].count(b"\n") == len(gate_texts())
    for env, output in zip(ENVIRONMENTS[1:], outputs[1:], strict=True):
        assert output == outputs[0], env


@pytest.mark.slow
def test_subprocess_output_equals_in_process_output(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """The bytes a separate process prints are the bytes this process prints for the same input."""
    path = tmp_path / "gates.jsonl"
    path.write_text(gates_text(), encoding="utf-8")
    assert run(["decide", str(path)]) == 0
    here = capsysbinary.readouterr().out
    assert run_in_subprocess(path, ENVIRONMENTS[1]) == here


def test_repeated_runs_in_one_process_are_identical(
    tmp_path: Path, run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    """Deciding the same input twice in one process gives the same output (no state carried between runs)."""
    path = tmp_path / "gates.jsonl"
    path.write_text(gates_text(), encoding="utf-8")
    assert run_cli("decide", str(path)) == run_cli("decide", str(path))


@pytest.mark.slow
def test_importing_the_core_loads_no_store_or_cli() -> None:
    """`import compute_budget` and a decision load neither SQLAlchemy, Alembic, Click nor the store."""
    code = (
        "import sys, compute_budget\n"
        "compute_budget.decide({})\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('sqlalchemy', 'alembic', 'click', 'rich') or m in ('compute_budget.store', 'compute_budget.cli'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == ""
