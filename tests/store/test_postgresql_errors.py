"""PostgreSQL as the practice loop meets it: no driver noise, connection errors that name their cause (issue 11)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from compute_budget import BudgetStore
from tests.conftest import REPO_ROOT, gate_lines

pytestmark = pytest.mark.postgres
Run = Callable[..., tuple[int, str, str]]
EXAMPLES = str(REPO_ROOT / "examples" / "gates.jsonl")


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """The installed command line in its own process: stderr exactly as a user's terminal gets it."""
    return subprocess.run(
        [sys.executable, "-m", "compute_budget", *argv], capture_output=True, text=True, check=False, cwd=REPO_ROOT
    )


@pytest.mark.slow
def test_recording_gates_already_present_prints_nothing_on_stderr(pg_url: str) -> None:
    """Re-recording stored gates (alone, and mixed with new ones) is quiet: no psycopg pipeline warning."""
    first = _cli("record", EXAMPLES, "--db", pg_url)
    assert (first.returncode, first.stderr) == (0, "")
    again = _cli("record", EXAMPLES, "--db", pg_url)
    assert (again.returncode, again.stderr) == (0, "")
    assert "0 new, 8 already present" in again.stdout


@pytest.mark.slow
def test_mixed_batch_after_a_stored_gate_is_quiet_and_correct(pg_url: str, tmp_path: Path) -> None:
    """A batch whose first chunk meets a stored gate falls back to lookups: right counts, nothing on stderr."""
    lines = gate_lines(1200)
    with BudgetStore.open(pg_url) as store:
        store.record_many(lines[100:101] + lines[900:901])
    source = tmp_path / "gates.jsonl"
    source.write_text("\n".join(lines) + "\n")
    done = _cli("record", str(source), "--db", pg_url)
    assert (done.returncode, done.stderr) == (0, "")
    assert "1198 new, 2 already present (head seq 1200)" in done.stdout


def _socket_url(pg_url: str, **changes: str) -> str:
    """The server's Unix socket (trust authentication in the throwaway cluster), or skip when unknown."""
    engine = create_engine(pg_url)
    try:
        with engine.connect() as connection:
            folders = str(connection.exec_driver_sql("SHOW unix_socket_directories").scalar_one())
            port = str(connection.exec_driver_sql("SHOW port").scalar_one())
    finally:
        engine.dispose()
    folder = folders.split(",")[0].strip()
    if not folder or not Path(folder).is_dir():
        pytest.skip("the server's Unix socket is not reachable from here")
    url = make_url(pg_url).set(host=None, port=None, password=None, query={"host": folder, "port": port})
    for key, value in changes.items():
        url = url.set(**{key: value})
    return url.render_as_string(hide_password=False)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["list", "audit"])
def test_a_role_that_does_not_exist_is_named(pg_url: str, command: str) -> None:
    """A missing role (trust authentication: the server says so) is reported as a role problem, not a server
    that is down."""
    url = _socket_url(pg_url, username="no_such_role")
    done = _cli(command, "--db", url)
    assert done.returncode == 2
    assert "refused role 'no_such_role'" in done.stderr
    assert "does not exist" in done.stderr
    assert "down or unreachable" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_missing_role_over_password_authentication_says_the_server_does_not_tell(pg_url: str) -> None:
    """Over TCP with SCRAM, the server answers a missing role like a wrong password: the message says both."""
    url = make_url(pg_url).set(username="no_such_role").render_as_string(hide_password=False)
    done = _cli("list", "--db", url)
    assert done.returncode == 2
    assert "refused the password for role 'no_such_role'" in done.stderr
    assert "no such role" in done.stderr
    assert "down or unreachable" not in done.stderr


@pytest.mark.slow
def test_a_missing_database_is_named(pg_url: str) -> None:
    """A database the server does not have: named, with what to do."""
    url = make_url(pg_url).set(database="no_such_database").render_as_string(hide_password=False)
    done = _cli("audit", "--db", url)
    assert done.returncode == 2
    assert "has no such database 'no_such_database' (create it first)" in done.stderr
    over_socket = _cli("list", "--db", _socket_url(pg_url, database="no_such_database"))
    assert "has no such database 'no_such_database' (create it first)" in over_socket.stderr


def test_translation_goes_by_sqlstate() -> None:
    """Errors that carry a SQLSTATE are translated by it, whatever their message says."""
    import psycopg
    from sqlalchemy.exc import OperationalError

    from compute_budget.store.engine import locate, translate

    location = locate("postgresql+psycopg://writer:secret@db.example/practice")

    class Refused(psycopg.errors.InsufficientPrivilege):
        def __str__(self) -> str:
            return "connection failed: la connexion a échoué"  # a translated message says nothing to us

    wrapped = OperationalError("INSERT …", {}, Refused())
    message = str(translate(wrapped, location))
    assert "role 'writer' may not do this" in message
    assert "secret" not in message
