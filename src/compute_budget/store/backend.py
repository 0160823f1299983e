"""Where a store lives: path-or-URL resolution, engines set up per backend, and driver errors translated.

This is the one choke point where SQLite and PostgreSQL driver errors become compute-budget errors with a
message a person can act on.
"""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError

from compute_budget.errors import ComputeBudgetError, NotABudgetStore, StoreUnavailable

ENV_VAR = "COMPUTE_BUDGET_DB"
DEFAULT_DB_FILE = "compute_budget.db"
WRITE_OPTION = "compute_budget_write"  # execution option marking a connection that appends or migrates
BUSY_TIMEOUT_SECONDS = 300  # writers wait for each other (minutes, not forever) rather than fail


@dataclass(frozen=True, slots=True)
class Location:
    """A resolved store location: its SQLAlchemy URL, the SQLite file (if any) and a safe display name."""

    url: URL
    sqlite_path: Path | None
    display: str

    @property
    def backend(self) -> str:
        """The SQLAlchemy backend name: ``sqlite`` or ``postgresql``."""
        return self.url.get_backend_name()

    @property
    def target(self) -> str:
        """What `locate` turns back into this location (another process reopens the store with it)."""
        if self.sqlite_path is not None:
            return str(self.sqlite_path)
        return self.url.render_as_string(hide_password=False)


def default_target() -> str:
    """`$COMPUTE_BUDGET_DB`, else `compute_budget.db` in the current folder."""
    return os.environ.get(ENV_VAR) or DEFAULT_DB_FILE


def locate(target: str | os.PathLike[str] | None) -> Location:
    """Resolve a file path or SQLAlchemy URL (None: the default) into a `Location`."""
    raw = os.fspath(target) if target is not None else default_target()
    if not raw:
        raise StoreUnavailable("the database location is empty: give --db PATH or set COMPUTE_BUDGET_DB")
    if "://" not in raw:
        path = Path(raw).expanduser().absolute()
        return Location(URL.create("sqlite", database=str(path)), path, str(path))
    try:
        url = make_url(raw)
    except ArgumentError:
        raise StoreUnavailable(f"{raw!r} is neither a file path nor a valid SQLAlchemy URL") from None
    if url.get_backend_name() == "sqlite":
        if not url.database or url.database == ":memory:":
            raise StoreUnavailable("an in-memory SQLite database cannot hold an audit trail: give a file")
        if url.query:
            # Silently dropping `?mode=ro` would let `record` write to a file the user meant to protect.
            raise StoreUnavailable(
                f"{raw!r}: query parameters ({', '.join(sorted(url.query))}) are not supported on a SQLite URL; "
                "give the file's path (readers already open it read-only)"
            )
        path = Path(url.database).expanduser().absolute()
        return Location(URL.create("sqlite", database=str(path)), path, str(path))
    return Location(url, None, url.render_as_string(hide_password=True))


def begin_write(engine: Engine) -> Any:
    """A write transaction (context manager yielding the connection) holding the append lock from BEGIN."""
    return engine.execution_options(**{WRITE_OPTION: True}).begin()


def create_store_engine(location: Location, *, readonly: bool) -> Engine:
    """An engine for `location`: SQLite in WAL mode with waiting writers, or a read-only reader."""
    try:
        if location.sqlite_path is not None:
            return _sqlite_engine(location.sqlite_path, readonly=readonly)
        connect_args: dict[str, Any] = {}
        if readonly and location.backend == "postgresql":
            connect_args["options"] = "-c default_transaction_read_only=on"
        return create_engine(location.url, connect_args=connect_args)
    except (NoSuchModuleError, ModuleNotFoundError) as error:
        hint = "install 'compute-budget[postgres]'" if location.backend == "postgresql" else "use SQLite or PostgreSQL"
        raise StoreUnavailable(f"no database driver for {location.display}: {hint} ({error})") from None
    except SQLAlchemyError as error:
        raise translate(error, location) from None


def _sqlite_engine(path: Path, *, readonly: bool) -> Engine:
    # The connection is made here, not from a URL string: a path is a path, every character literal. A URL
    # would cut `s?v=2.db` at the `?`, drop what follows `#` and decode `%41`, and a reader would then open
    # (and create!) some other file.
    if readonly:
        mode = "ro&immutable=1" if _on_read_only_filesystem(path) else "ro"
        uri = f"file:{urllib.parse.quote(str(path), safe='/')}?mode={mode}"

        def connect() -> sqlite3.Connection:
            return sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_SECONDS, check_same_thread=False)

    else:

        def connect() -> sqlite3.Connection:
            return sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_SECONDS, check_same_thread=False)

    engine = create_engine("sqlite://", creator=connect)

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves (SQLAlchemy's pysqlite recipe)
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_SECONDS * 1000}")
        if not readonly:
            cursor.execute("PRAGMA journal_mode = WAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        # An append takes the write lock at BEGIN, so reading the chain head and appending are one atomic
        # step; plain reads begin deferred and never hold other writers up.
        writing = not readonly and connection.get_execution_options().get(WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if writing else "BEGIN")

    return engine


def _on_read_only_filesystem(path: Path) -> bool:
    """True when a WAL reader could not create its shared-memory file beside the database (a read-only folder
    or filesystem, a backup mount). Such a file cannot change under us, so SQLite may read it as immutable,
    unless a write-ahead log still holds transactions the file itself does not have yet.
    """
    if os.access(path.parent, os.W_OK) or path.with_name(path.name + "-shm").exists():
        return False
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise StoreUnavailable(
            f"cannot read {path} where it is: its folder is read-only and its write-ahead log {wal.name} still "
            "holds transactions; copy the database with its -wal file to a writable folder and read it there"
        )
    return True


def translate(error: BaseException, location: Location) -> ComputeBudgetError:
    """Turn a driver or SQLAlchemy error into one clear compute-budget error about `location`."""
    where = location.display
    original = error.orig if isinstance(error, DBAPIError) else error
    text = str(original).strip().splitlines()[0] if str(original).strip() else type(original).__name__
    lowered = text.lower()
    if "unable to open database file" in lowered:
        folder = location.sqlite_path.parent if location.sqlite_path else None
        if folder is not None and not folder.is_dir():
            return StoreUnavailable(f"cannot open database {where}: folder {folder} does not exist")
        if folder is not None and not os.access(folder, os.W_OK):
            return StoreUnavailable(f"cannot write to {where}: its folder {folder} is read-only")
        return StoreUnavailable(f"cannot open database {where}: it does not exist or is not accessible")
    if "file is not a database" in lowered or "file is encrypted" in lowered:
        return NotABudgetStore(f"{where} is not a SQLite database (is that the right file?)")
    if "readonly database" in lowered or ("read-only" in lowered and "transaction" not in lowered):
        return StoreUnavailable(f"cannot write to {where}: the file or its folder is read-only")
    if "disk is full" in lowered or "no space left" in lowered or "disk i/o error" in lowered:
        return StoreUnavailable(f"cannot write to {where}: {text} (nothing was written)")
    if "database is locked" in lowered:
        return StoreUnavailable(f"{where} stayed locked by another writer for {BUSY_TIMEOUT_SECONDS} s")
    if 'database "' in lowered and "does not exist" in lowered:
        return StoreUnavailable(f"cannot use {where}: the server has no such database (create it first)")
    if "password authentication failed" in lowered:
        return StoreUnavailable(f"PostgreSQL refused the password for {where}")
    if "connection refused" in lowered or "could not connect" in lowered or "connection failed" in lowered:
        return StoreUnavailable(f"cannot connect to PostgreSQL at {where}: the server is down or unreachable")
    if "does not exist" in lowered and location.sqlite_path is None:
        return StoreUnavailable(f"cannot use {where}: {text}")
    return StoreUnavailable(f"database error on {where}: {text}")
