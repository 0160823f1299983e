"""Shared fixtures: example gates, temporary database files, and the CLI runner."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

EXAMPLE_GATE: dict[str, Any] = {
    "decision_id": "gate-0001",
    "policy_version": "search_gate.v1",
    "input_digest": "sha256:5d41402abc4b2a76b9719d911017c592",
    "status": "eligible",
    "reason_code": "eligible_missing_role",
    "residual_ids": ["residual-17"],
    "candidate_organ": "frame_builder",
    "evidence_spans": [{"text": "the courier left before noon", "start": 0, "end": 28, "sentence_index": 0}],
}

REPO_ROOT = Path(__file__).resolve().parent.parent


def make_gate(**changes: Any) -> dict[str, Any]:
    """A well-formed eligible gate (a fresh deep copy) with `changes` applied."""
    gate = copy.deepcopy(EXAMPLE_GATE)
    gate.update(changes)
    return gate


@pytest.fixture
def gate_factory() -> Callable[..., dict[str, Any]]:
    """Build gates: `gate_factory(status="blocked")`."""
    return make_gate


@pytest.fixture
def run_cli(capsysbinary: pytest.CaptureFixture[bytes]) -> Callable[..., tuple[int, str, str]]:
    """Run the CLI in-process: returns (exit status, stdout, stderr)."""
    from compute_budget.cli import run

    def invoke(*argv: str) -> tuple[int, str, str]:
        status = run(list(argv))
        captured = capsysbinary.readouterr()
        return status, captured.out.decode("utf-8"), captured.err.decode("utf-8")

    return invoke


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A fresh SQLite database path (the file does not exist yet)."""
    return tmp_path / "store.db"


@pytest.fixture(params=["sqlite"])
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A location for a new, empty store on each backend under test (path for SQLite, URL otherwise)."""
    return str(tmp_path / "store.db")


def gate_lines(count: int, *, prefix: str = "gate") -> list[str]:
    """`count` distinct, compact gate JSON lines of varied statuses and reasons."""
    import json

    reasons = ["eligible_missing_role", "eligible_missing_relation", "eligible_missing_proposal",
               "eligible_target_unbound", "eligible_unknown"]
    statuses = ["eligible", "eligible", "eligible", "ineligible", "blocked", "unassessable"]
    lines = []
    for index in range(count):
        gate = make_gate(
            decision_id=f"{prefix}-{index:07d}",
            status=statuses[index % len(statuses)],
            reason_code=reasons[index % len(reasons)],
            evidence_spans=[{"text": f"span {index} é", "start": index, "end": index + 7, "sentence_index": index % 5}],
        )
        lines.append(json.dumps(gate, ensure_ascii=False))
    return lines
