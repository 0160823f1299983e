"""Shared fixtures: example gates, temporary database files, and the CLI runner."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
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
def writer_state_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$COMPUTE_BUDGET_WRITER_STATE set to a fresh file: a test that signs with one `SignerKey` object (which has
    no key file to keep its state beside, spec 9.1) gets one state file; a test of several keys gives each its own
    `writer_state=`."""
    path = tmp_path / "writer.state"
    monkeypatch.setenv("COMPUTE_BUDGET_WRITER_STATE", str(path))
    return path


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A fresh SQLite database path (the file does not exist yet)."""
    return tmp_path / "store.db"


def pytest_addoption(parser: pytest.Parser) -> None:
    """--no-postgres: the explicit way for a developer without PostgreSQL to skip its tests."""
    parser.addoption(
        "--no-postgres", action="store_true", default=False,
        help="skip the PostgreSQL tests (CI never does)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the postgres-marked tests, and only them, when --no-postgres is given."""
    if not config.getoption("--no-postgres"):
        return
    skip = pytest.mark.skip(reason="--no-postgres given")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[str]:
    """An admin URL of a PostgreSQL server: $COMPUTE_BUDGET_TEST_PG_URL, else a throwaway local cluster."""
    import os
    import tempfile

    from tests import pg_cluster

    url = os.environ.get("COMPUTE_BUDGET_TEST_PG_URL")
    if url:
        yield url
        return
    if not pg_cluster.available():
        if os.environ.get("CI"):
            pytest.fail("CI must run the PostgreSQL tests, but PostgreSQL's server programs are not installed")
        pytest.skip("PostgreSQL is not installed here: install it, or pass --no-postgres to skip explicitly")
    folder = Path(tempfile.mkdtemp(prefix="compute-budget-pg-"))
    try:
        yield pg_cluster.start(folder)
    finally:
        pg_cluster.stop(folder)


@pytest.fixture
def pg_url(pg_admin_url: str) -> Iterator[str]:
    """A URL of a fresh, empty PostgreSQL database, dropped after the test."""
    import uuid

    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    name = f"cbt_{uuid.uuid4().hex[:16]}"
    admin = create_engine(pg_admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(pg_admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A location for a new, empty store on each backend under test (a path for SQLite, a URL for PostgreSQL)."""
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    return str(request.getfixturevalue("pg_url"))


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


from tests.witnessing import http_servers, served, witness_servers, writer  # noqa: E402, F401  (witnesses served over HTTP, the writer's key file, for every module)
