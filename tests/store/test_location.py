"""Where a store lives: a path is a path, every character literal; only regular files are stores."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from compute_budget import BudgetStore, StoreUnavailable
from compute_budget.store.engine import locate
from tests.conftest import REPO_ROOT

Run = Callable[..., tuple[int, str, str]]
EXAMPLES = str(REPO_ROOT / "examples" / "gates.jsonl")


@pytest.mark.parametrize("name", ["s?v=2.db", "a#b.db", "pct%41.db", "q?mode=rw&x#y.db", "sp ace.db"])
def test_audit_audits_the_store_it_names_not_a_decoy(run_cli: Run, tmp_path: Path, name: str) -> None:
    """A `?`, `#` or `%41` in a path never cuts or decodes it: the audit of a tampered `s?v=2.db` sees the
    tampering, and no decoy file (`s`, `a`, `pctA.db`) is opened or created."""
    target = tmp_path / name
    assert run_cli("record", EXAMPLES, "--db", str(target))[0] == 0
    import sqlite3

    with sqlite3.connect(target) as connection:  # a literal path: the stdlib does not parse it
        connection.execute("DROP TRIGGER compute_budget_decisions_no_update")
        connection.execute("UPDATE compute_budget_decisions SET max_steps = 99 WHERE seq = 2")
    before = sorted(path.name for path in tmp_path.iterdir())
    status, out, _ = run_cli("audit", "--db", str(target))
    assert status == 1
    assert "rederive_mismatch" in out
    assert str(target) in out
    assert sorted(path.name for path in tmp_path.iterdir() if not path.name.endswith(("-wal", "-shm"))) == [
        name for name in before if not name.endswith(("-wal", "-shm"))
    ]


def test_parallel_audit_workers_reopen_the_same_odd_path(tmp_path: Path) -> None:
    """`--jobs` hands workers the path itself, not a URL that would cut it at `?`."""
    location = locate(str(tmp_path / "x?y#z.db"))
    assert location.target == str(tmp_path / "x?y#z.db")
    assert locate(location.target) == location


def test_sqlite_url_query_parameters_are_refused_not_dropped(tmp_path: Path) -> None:
    """`sqlite:///x.db?mode=ro` is refused: dropping `mode=ro` silently would let `record` write."""
    with pytest.raises(StoreUnavailable, match="query parameters"):
        BudgetStore.open(f"sqlite:///{tmp_path / 'x.db'}?mode=ro")
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("readonly", [True, False])
def test_a_fifo_is_refused_without_hanging(tmp_path: Path, readonly: bool) -> None:
    """A FIFO as --db is one clear error, for readers and writers, and nothing is left beside it."""
    fifo = tmp_path / "pipe.db"
    os.mkfifo(fifo)
    with pytest.raises(StoreUnavailable, match="not a regular file"):
        BudgetStore.open(fifo, readonly=readonly)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["pipe.db"]


def test_a_character_device_is_refused_by_writers() -> None:
    """/dev/null as a database: refused before SQLite could leave a -journal beside it."""
    with pytest.raises(StoreUnavailable, match="not a regular file"):
        BudgetStore.open("/dev/null")
    assert not Path("/dev/null-journal").exists()


def test_fifo_and_device_are_refused_by_every_reading_command(run_cli: Run, tmp_path: Path) -> None:
    """audit, show, list, checkpoint and copy on a FIFO: exit 2 with one line (none of them hangs)."""
    fifo = tmp_path / "pipe.db"
    os.mkfifo(fifo)
    for argv in (
        ["audit", "--db", str(fifo)],
        ["show", "a" * 64, "--db", str(fifo)],
        ["list", "--db", str(fifo)],
        ["checkpoint", "--db", str(fifo)],
        ["copy", str(fifo), str(tmp_path / "copy.db")],
    ):
        status, _, err = run_cli(*argv)
        assert status == 2, argv
        assert "not a regular file" in err, argv


def test_each_sqlite_connection_is_its_own(tmp_path: Path) -> None:
    """Two connections of one store are two SQLite connections (a read transaction held on one does not make
    the other start a transaction inside it)."""
    with (
        BudgetStore.open(tmp_path / "store.db") as store,
        store.engine.connect() as first,
        store.engine.connect() as second,
    ):
        assert first.connection.driver_connection is not second.connection.driver_connection


@pytest.mark.parametrize(("given", "said"), [("   ", "the database location is empty"),
                                             ("new-folder/", "names a folder (it ends with '/')"),
                                             ("sqlite:///new-folder/", "names a folder (it ends with '/')"),
                                             ("sqlite:///   ", "names no database file (only white space)")])
def test_a_blank_path_or_one_ending_in_a_slash_is_no_database(
    given: str, said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--db new-folder/` used to create a file named `new-folder`, and a path of spaces a file named so: both are
    refused before anything is made."""
    monkeypatch.chdir(tmp_path)
    for readonly in (False, True):
        with pytest.raises(StoreUnavailable, match=re.escape(said)):
            BudgetStore.open(given, readonly=readonly)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "typed",
    [
        "postgresql ://alice:Secr3t@127.0.0.1/db",  # not a URL SQLAlchemy reads: was echoed whole
        "sqlite://alice:Secr3t@/x.db?mode=ro",  # a SQLite URL with a query: was echoed whole
        "postgresql ://alice:Sec/r3t@127.0.0.1/db",  # a raw "/" in the password, in a URL that cannot be read
        "postgresql://alice:Secr3t@127.0.0.1:notaport/db",  # a port that is not a number: was an internal error
    ],
)
def test_a_database_url_that_is_refused_never_shows_its_password(typed: str) -> None:
    """Red team on issue 28 n (spec 9.9.6, any URL): `--db` URLs that `locate` refuses were printed as typed,
    password included. Everything up to the last `@` is hidden now."""
    with pytest.raises(StoreUnavailable) as refused:
        locate(typed)
    assert "Sec" not in str(refused.value)
    assert "r3t" not in str(refused.value)
    assert "***@" in str(refused.value)


def test_a_password_typed_with_a_raw_at_sign_is_not_shown_in_part() -> None:
    """SQLAlchemy reads `alice:Se@cr3t@host` as the password `Se` at host `cr3t@host`: its hidden rendering still
    showed `cr3t`, the rest of the password. The display hides everything up to the last `@` then."""
    location = locate("postgresql://alice:Se@cr3t@127.0.0.1:5432/db")
    assert "cr3t" not in location.display
    assert location.display == "postgresql://***@127.0.0.1:5432/db"
    assert locate("postgresql://alice:Secr3t@127.0.0.1:5432/db").display == "postgresql://alice:***@127.0.0.1:5432/db"


def test_a_database_without_a_backend_is_refused_by_name() -> None:
    """The registry (`store/backends`) names a database it has no backend for; a URL of one is refused in one line
    naming what compute-budget runs on, never with a traceback."""
    from compute_budget.store.backends import backend_named, find_backend

    assert find_backend("mysql") is None
    assert find_backend("sqlite") is not None
    with pytest.raises(NotImplementedError, match="no SQL written for the mysql backend"):
        backend_named("mysql")
    with pytest.raises(StoreUnavailable, match=r"no database driver for .*use SQLite or PostgreSQL"):
        BudgetStore.open("mysql://someone@localhost/store")


def test_each_backend_words_its_own_sql() -> None:
    """One builder, each backend's words: SQLite's placeholder and planner hint, PostgreSQL's placeholder, its
    conflict clause for the optimistic append and its advisory lock (SQLite's BEGIN IMMEDIATE is the lock)."""
    from compute_budget.store.backends import backend_named

    sqlite, postgresql = backend_named("sqlite"), backend_named("postgresql")
    assert sqlite.statements.by_budget_id.endswith("budget_id = ?")
    assert postgresql.statements.by_budget_id.endswith("budget_id = %s")
    assert sqlite.statements.insert_if_new is None
    assert sqlite.statements.append_lock is None
    assert postgresql.statements.insert_if_new is not None
    assert postgresql.statements.insert_if_new.endswith("ON CONFLICT (budget_id) DO NOTHING")
    assert postgresql.statements.append_lock == "SELECT pg_advisory_xact_lock(7227022700)"
    assert "+status = ?" in sqlite.browse.page(("status",), 10)
    assert "+status" not in postgresql.browse.page(("status",), 10)
    assert sqlite.seal.set_origin.endswith("VALUES (1, ?)")
    assert postgresql.seal.set_origin.endswith("VALUES (1, %s)")
