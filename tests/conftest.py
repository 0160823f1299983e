"""Shared fixtures: example gates, temporary database files, and the CLI runner."""

from __future__ import annotations

import copy
import os
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

# An audit that finds rows above the newest trusted checkpoint waits 5 s by default for a live writer to sign them
# (spec 12.5): the suite's audits do not wait (subprocesses inherit this); the tests of the wait give it explicitly.
os.environ["COMPUTE_BUDGET_ATTEST_WAIT"] = "0"


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


SetUp = Callable[..., str]


@pytest.fixture
def set_up(run_cli: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch) -> SetUp:
    """A recipe's set-up step (not the documented block itself) run in this process, as the shell of
    `tests.e2e.test_docs.shell` would run it: `set_up(folder, "keygen", "writer", stdout="writer.pub")` runs in
    `folder` with no $COMPUTE_BUDGET_DB, fails the test on a non-zero exit, and returns its stdout (writing it to
    `folder / stdout` when given, as `> file` would). A process costs ~1 s of imports; this, ~0.1 s."""
    monkeypatch.delenv("COMPUTE_BUDGET_DB", raising=False)

    def step(folder: Path, *argv: str, stdout: str | None = None) -> str:
        monkeypatch.chdir(folder)
        status, out, err = run_cli(*argv)
        assert status == 0, (argv, err)
        if stdout is not None:
            (folder / stdout).write_text(out, encoding="utf-8")
        return out

    return step


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
    """--no-postgres: the explicit way for a developer without PostgreSQL to skip its tests; --all-backends: every
    backend-parametrized test on every backend, not only the store's own tests and the PostgreSQL smoke set."""
    parser.addoption(
        "--no-postgres", action="store_true", default=False,
        help="skip the PostgreSQL tests (CI never does)",
    )
    parser.addoption(
        "--all-backends", action="store_true", default=False,
        help="run every store_target test on PostgreSQL too, not only tests/store/ and the postgres_smoke set",
    )


# Where PostgreSQL runs a backend-parametrized test: the store's own tests (the contract every backend keeps) and the
# tests marked `postgres_smoke` (a named few per package, each reaching backend code the store's tests do not).
# Everywhere else the store is only the place the rows sit, and SQLite stands for both.
POSTGRES_EVERYWHERE_UNDER = ("tests/store/",)


def _on_postgres_by_parameter(item: pytest.Item) -> bool:
    """True for the PostgreSQL instance of a `store_target` or `new_store_target` test (also one parametrized
    indirectly, which carries no `postgres` mark)."""
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "postgresql" in (
        callspec.params.get("store_target"), callspec.params.get("new_store_target")
    )


def _on_postgres_only_by_parameter(item: pytest.Item) -> bool:
    """True for the PostgreSQL instance of a `store_target` test outside the store's tests and the smoke set."""
    if not _on_postgres_by_parameter(item):
        return False
    relative = Path(str(item.path)).resolve().relative_to(REPO_ROOT).as_posix()
    return not relative.startswith(POSTGRES_EVERYWHERE_UNDER) and item.get_closest_marker("postgres_smoke") is None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep PostgreSQL where its code is reached (see `POSTGRES_EVERYWHERE_UNDER`), unless --all-backends; skip the
    postgres-marked tests, and only them, when --no-postgres is given."""
    if not config.getoption("--all-backends"):
        deselected = [item for item in items if _on_postgres_only_by_parameter(item)]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = [item for item in items if not _on_postgres_only_by_parameter(item)]
    if not config.getoption("--no-postgres"):
        return
    skip = pytest.mark.skip(reason="--no-postgres given")
    for item in items:
        if "postgres" in item.keywords or _on_postgres_by_parameter(item):
            item.add_marker(skip)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Two test processes per core (at most 8): about a third of the suite's time is spent waiting on a process it
    started or on PostgreSQL, and a second process per core fills it (on 2 cores: 5:09 against 6:00 with
    coverage)."""
    import os

    return min(8, 2 * (os.cpu_count() or 1))


def pytest_configure(config: pytest.Config) -> None:
    """In the controlling process: name the folder where the first test process that needs PostgreSQL starts one
    throwaway cluster for every process of the run (pytest-xdist's workers inherit the variable)."""
    import os
    import tempfile

    if hasattr(config, "workerinput") or os.environ.get("COMPUTE_BUDGET_TEST_PG_URL"):
        return
    folder = Path(tempfile.gettempdir()) / f"compute-budget-pg-{os.getpid()}"
    os.environ["COMPUTE_BUDGET_TEST_PG_CLUSTER"] = str(folder)
    config.stash[_CLUSTER_KEY] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the run's cluster, if a test process started one (`pg_cluster.stop` removes only a folder it made)."""
    import os

    folder = config.stash.get(_CLUSTER_KEY, None)
    if folder is None:
        return
    os.environ.pop("COMPUTE_BUDGET_TEST_PG_CLUSTER", None)
    import contextlib

    from tests import pg_cluster

    if (folder / "url").exists():
        pg_cluster.stop(folder)
    with contextlib.suppress(OSError):
        (folder.parent / (folder.name + ".lock")).unlink()


_CLUSTER_KEY = pytest.StashKey[Path]()


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    """An admin URL of a PostgreSQL server: $COMPUTE_BUDGET_TEST_PG_URL, else the run's throwaway local cluster,
    started by the first test process that asks (the others wait on a lock and share it)."""
    import fcntl
    import os

    from tests import pg_cluster

    url = os.environ.get("COMPUTE_BUDGET_TEST_PG_URL")
    if url:
        return url
    if not pg_cluster.available():
        if os.environ.get("CI"):
            pytest.fail("CI must run the PostgreSQL tests, but PostgreSQL's server programs are not installed")
        pytest.skip("PostgreSQL is not installed here: install it, or pass --no-postgres to skip explicitly")
    folder = Path(os.environ["COMPUTE_BUDGET_TEST_PG_CLUSTER"])
    with (folder.parent / (folder.name + ".lock")).open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "url").exists():
            started = pg_cluster.start(folder)
            (folder / "url").write_text(started)
        return (folder / "url").read_text()


def _pg_database(admin_url: str, *, template: str | None = None) -> Iterator[str]:
    """A new PostgreSQL database (empty, or a copy of `template`), dropped afterwards: its URL."""
    import uuid

    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    name = f"cbt_{uuid.uuid4().hex[:16]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture
def pg_url(pg_admin_url: str) -> Iterator[str]:
    """A URL of a fresh, empty PostgreSQL database, dropped after the test."""
    yield from _pg_database(pg_admin_url)


@pytest.fixture(scope="session")
def pg_template(pg_admin_url: str) -> Iterator[str]:
    """The name of a PostgreSQL database holding an empty store at the schema head, made once per test process by
    the migrations: `CREATE DATABASE … TEMPLATE` copies it in a fraction of a migration's time."""
    from sqlalchemy.engine import make_url

    from compute_budget import BudgetStore

    for url in _pg_database(pg_admin_url):
        BudgetStore.open(url).close()  # closes its engine: a template may have no open connection
        yield str(make_url(url).database)


@pytest.fixture
def pg_store_url(pg_admin_url: str, pg_template: str) -> Iterator[str]:
    """A URL of a new PostgreSQL database holding an empty store at the schema head (a copy of `pg_template`)."""
    yield from _pg_database(pg_admin_url, template=pg_template)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty SQLite store at the schema head, made once per test process by the migrations: copying it (a few
    milliseconds) stands in for migrating a new file (about 0.14 s) wherever a test only needs an empty store."""
    from compute_budget import BudgetStore

    path = tmp_path_factory.mktemp("template") / "store.db"
    BudgetStore.open(path).close()
    assert not path.with_name("store.db-wal").exists()  # closed cleanly: the one file is the whole store
    return path


@pytest.fixture
def empty_store_path(sqlite_template: Path, tmp_path: Path) -> Path:
    """An empty SQLite store at the schema head (a copy of `sqlite_template`), as a writer's first open leaves it."""
    import shutil

    return Path(shutil.copyfile(sqlite_template, tmp_path / "store.db"))


BuiltOnce = Callable[[str, Callable[[Path], None]], Path]


@pytest.fixture(scope="module")
def built_once(tmp_path_factory: pytest.TempPathFactory) -> BuiltOnce:
    """`built_once(name, build)`: a folder `build(folder)` filled, made once per test module and name, for set-ups
    that many tests only read (a signed SQLite store and its publication, say). A test copies it into its own
    folder (`copy_built`) and changes only its copy."""
    made: dict[str, Path] = {}

    def get(name: str, build: Callable[[Path], None]) -> Path:
        if name not in made:
            folder = tmp_path_factory.mktemp(name)
            build(folder)
            made[name] = folder
        return made[name]

    return get


def copy_built(built: Path, destination: Path) -> Path:
    """Copy a `built_once` folder's files into `destination` (which may exist, holding an empty store to replace)."""
    import shutil

    shutil.copytree(built, destination, dirs_exist_ok=True)
    return destination


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_target(request: pytest.FixtureRequest) -> str:
    """An empty store at the schema head on each backend under test (a path for SQLite, a URL for PostgreSQL), as
    a writer's first open leaves a new location; `new_store_target` where nothing may exist yet."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("empty_store_path"))
    return str(request.getfixturevalue("pg_store_url"))


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def new_store_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A location with nothing there yet on each backend (a path with no file, an empty PostgreSQL database), for
    the tests of creating a store."""
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    return str(request.getfixturevalue("pg_url"))


def gate_lines(count: int, *, prefix: str = "gate") -> list[str]:
    """`count` distinct, compact gate JSON lines of varied statuses and reasons."""
    import json

    reasons = ["eligible_missing_role", "eligible_missing_relation", "eligible_missing_proposal",
               "eligible_target_unbound", "eligible_unknown"]
    statuses = ["eligible", "eligible", "eligible", "ineligible", "blocked", "unassessable"]
    # `make_gate`'s gate, without its deep copy (each gate is dumped at once): a test of 200,000 rows saves seconds.
    return [
        json.dumps({
            **EXAMPLE_GATE,
            "decision_id": f"{prefix}-{index:07d}",
            "status": statuses[index % len(statuses)],
            "reason_code": reasons[index % len(reasons)],
            "evidence_spans": [{"text": f"span {index} é", "start": index, "end": index + 7,
                                "sentence_index": index % 5}],
        }, ensure_ascii=False)
        for index in range(count)
    ]


from tests.witnessing import http_servers, served, witness_servers, writer  # noqa: E402, F401  (witnesses served over HTTP, the writer's key file, for every module)
