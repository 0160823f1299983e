"""Where a store lives: path-or-URL resolution, engines set up per backend, and driver errors translated.

This is the one choke point where SQLite and PostgreSQL driver errors become compute-budget errors with a
message a person can act on.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.pool import QueuePool

from compute_budget.errors import ArgumentTypeError, ComputeBudgetError, NotABudgetStore, StoreUnavailable, clip
from compute_budget.store.table import TABLE_NAME

ENV_VAR = "COMPUTE_BUDGET_DB"
DEFAULT_DB_FILE = "compute_budget.db"
WRITE_OPTION = "compute_budget_write"  # execution option marking a connection that appends or migrates
WRITER_CACHE_KIB = 262_144  # a writer connection's SQLite page cache ceiling: 256 MiB
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
    if target is not None and not isinstance(target, str | os.PathLike):
        raise ArgumentTypeError(f"a store is a path or a SQLAlchemy URL, not {type(target).__name__}")
    raw = os.fspath(target) if target is not None else default_target()
    if not raw.strip():
        raise StoreUnavailable("the database location is empty: give --db PATH or set COMPUTE_BUDGET_DB")
    if "://" not in raw:
        path = _file_path(raw, raw)
        return Location(URL.create("sqlite", database=str(path)), path, str(path))
    try:
        url = make_url(raw)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        raise StoreUnavailable(f"{_hidden(raw)!r} is neither a file path nor a valid SQLAlchemy URL") from None
    if url.get_backend_name() == "sqlite":
        if not url.database or url.database == ":memory:":
            raise StoreUnavailable("an in-memory SQLite database cannot hold an audit trail: give a file")
        if url.query:
            # Silently dropping `?mode=ro` would let `record` write to a file the user meant to protect.
            raise StoreUnavailable(
                f"{_hidden(raw)!r}: query parameters ({', '.join(sorted(url.query))}) are not supported on a SQLite "
                "URL; give the file's path (readers already open it read-only)"
            )
        path = _file_path(url.database, raw)
        return Location(URL.create("sqlite", database=str(path)), path, str(path))
    shown = url.render_as_string(hide_password=True)
    # A password typed with a raw "@": SQLAlchemy takes its first part for the password, the rest for the host.
    return Location(url, None, _hidden(shown) if "@" in (url.host or "") else shown)


def _hidden(typed: str) -> str:
    """A URL as typed, for a message: everything from "//" (or the start) up to its last "@" shown as ``***@``
    (spec 9.9.6: a password is never printed, even one holding "/", "?", "#" or "@" that ends the user information
    where a parser would not)."""
    if "@" not in typed:
        return typed
    scheme, slashes, _ = typed.partition("//")
    return (scheme + slashes if slashes else "") + "***@" + typed.rpartition("@")[2]


def _file_path(name: str, given: str) -> Path:
    """The absolute path of a SQLite database named `name` (as a path, or inside the URL `given`), refusing a
    name that is only white space or ends in a slash: Path() would drop the slash and make a file of a folder's
    name, or make a file named with spaces."""
    if not name.strip():
        raise StoreUnavailable(f"{given!r} names no database file (only white space): give the file's path")
    if name.endswith(("/", os.sep)):
        raise StoreUnavailable(f"{given!r} names a folder (it ends with '/'): give the database file's path")
    return Path(name).expanduser().absolute()


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

    # A pool of its own connections: "sqlite://" alone would mean one shared in-memory connection per thread.
    engine = create_engine("sqlite://", creator=connect, poolclass=QueuePool)

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves (SQLAlchemy's pysqlite recipe)
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_SECONDS * 1000}")
        if not readonly:
            if _ours_or_empty(cursor):
                cursor.execute("PRAGMA journal_mode = WAL")
            # Appends: the guard's per-row trigger keeps a statement journal, in memory rather than a temporary
            # file; and a larger page cache keeps the indexes' hot pages (a ceiling, filled only as used).
            # Readers keep SQLite's default cache: the audit scans the whole file and stays small.
            cursor.execute("PRAGMA temp_store = MEMORY")
            cursor.execute(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        # An append takes the write lock at BEGIN, so reading the chain head and appending are one atomic
        # step; plain reads begin deferred and never hold other writers up.
        writing = not readonly and connection.get_execution_options().get(WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if writing else "BEGIN")

    return engine


def _ours_or_empty(cursor: sqlite3.Cursor) -> bool:
    """True for a database a writer may turn to WAL: an empty one, or one holding the decisions table. WAL is a
    lasting property of the file, and another application's database is about to be refused: it must be left
    exactly as it was, not switched out of its journal mode."""
    tables = {row[0] for row in cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return not tables or TABLE_NAME in tables


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


def permission_denied(role: object, where: str, detail: str = "permission denied") -> StoreUnavailable:
    """The one message for a PostgreSQL role that may not do what was asked; `detail` is the server's own words
    (which name the object: "permission denied for table alembic_version")."""
    return StoreUnavailable(
        f"role {role!r} may not do this on {where} ({clip(detail, 120)}): creating or migrating the schema is the "
        f"owner's (run `compute-budget migrate` as the owner); `compute-budget grants --role {role} --writer` (or "
        "`--auditor`) prints the grants a role needs to record (or to read), to run again after a migrate"
    )


def translate(error: BaseException, location: Location, *, reading: bool = False) -> ComputeBudgetError:
    """Turn a driver or SQLAlchemy error into one clear compute-budget error about `location`; `reading`: it
    stopped a read (a read-only command, a read transaction), so a lost server is not said to lose a write.

    Decided by the driver's error code, never by its (possibly translated) message: SQLite's extended result
    code name (`sqlite_errorname`), PostgreSQL's SQLSTATE (`sqlstate`). The one exception is an error the
    PostgreSQL server sends while a connection is being set up: libpq keeps its SQLSTATE to itself (psycopg
    reports None, psycopg issue #1188), so `_connect_sqlstate` recovers it for those errors alone.
    """
    original: BaseException = error.orig if isinstance(error, DBAPIError) and error.orig is not None else error
    text = str(original).strip().splitlines()[0] if str(original).strip() else type(original).__name__
    if isinstance(original, sqlite3.Error):
        translated = _translate_sqlite(getattr(original, "sqlite_errorname", None) or "", text, location)
        if translated is not None:
            return translated
        undecodable = _UNDECODABLE.match(text)
        if undecodable is not None:
            return StoreUnavailable(
                f"{location.display}: column {undecodable.group(1)} holds text that is not UTF-8, which compute-budget "
                "never writes: the file was edited outside it (`compute-budget audit` reports such decision rows)"
            )
    elif location.backend == "postgresql":
        code = getattr(original, "sqlstate", None) or _connect_sqlstate(original)
        if code:
            translated = _translate_sqlstate(code, text, location, reading=reading)
            if translated is not None:
                return translated
        if any(sign in text for sign in _CONNECTION_LOST):
            return StoreUnavailable(
                f"the PostgreSQL server at {location.display} closed the connection (stopped or crashed)"
                f"{_lost(reading)}"
            )
        if _is_connection_failure(original):
            return StoreUnavailable(f"cannot connect to PostgreSQL at {location.display}: {_connect_detail(text)}")
    return StoreUnavailable(f"database error on {location.display}: {text}")


# What libpq says when an established connection is lost (no SQLSTATE reaches psycopg for these).
_CONNECTION_LOST = ("server closed the connection", "consuming input failed", "terminating connection",
                    "the connection is lost", "connection is closed")


# Python's sqlite3 module, not SQLite, fails a fetch of text that is not UTF-8: the error has no SQLite code, and
# its message is Python's own (never translated), so it is matched here. Only a raw edit can store such text.
_UNDECODABLE = re.compile(r"Could not decode to UTF-8 column ('[^']*')")


def _disk_full(location: Location) -> bool:
    """True when the folder of a SQLite store has (almost) no space left: SQLite then reports some writes that
    fail for lack of space as a plain I/O error."""
    folder = location.sqlite_path.parent if location.sqlite_path else None
    if folder is None:
        return False
    try:
        return shutil.disk_usage(folder).free < FULL_DISK_BYTES
    except OSError:
        return False


FULL_DISK_BYTES = 64 * 1024


def _translate_sqlite(name: str, text: str, location: Location) -> ComputeBudgetError | None:
    where = location.display
    if name.startswith("SQLITE_CANTOPEN"):
        folder = location.sqlite_path.parent if location.sqlite_path else None
        if folder is not None and not folder.is_dir():
            return StoreUnavailable(f"cannot open database {where}: folder {folder} does not exist")
        if folder is not None and not os.access(folder, os.W_OK):
            return StoreUnavailable(f"cannot write to {where}: its folder {folder} is read-only")
        return StoreUnavailable(f"cannot open database {where}: it does not exist or is not accessible")
    if name == "SQLITE_NOTADB":
        return NotABudgetStore(f"{where} is not a SQLite database (is that the right file?)")
    if name == "SQLITE_READONLY_DBMOVED":
        return StoreUnavailable(
            f"{where} was deleted or replaced while this command had it open (a failed run may have removed the "
            "new, empty store it created); nothing was written: run the command again"
        )
    if name.startswith("SQLITE_READONLY"):
        return StoreUnavailable(f"cannot write to {where}: the file or its folder is read-only")
    if name == "SQLITE_FULL" or (name.startswith("SQLITE_IOERR") and _disk_full(location)):
        return StoreUnavailable(f"{where}: the disk is full; nothing was written")
    if name.startswith("SQLITE_IOERR"):
        return StoreUnavailable(f"{where}: {text}; nothing was written")
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return StoreUnavailable(f"{where} stayed locked by another writer for {BUSY_TIMEOUT_SECONDS} s")
    if name.startswith("SQLITE_CORRUPT"):
        return StoreUnavailable(f"{where} is damaged ({text}); restore it from a backup")
    if name in ("SQLITE_PERM", "SQLITE_AUTH"):
        return StoreUnavailable(f"cannot use {where}: access denied ({text})")
    return None


def _lost(reading: bool) -> str:
    """What a connection lost means for the command: a read lost nothing; a write was not committed."""
    if reading:
        return " while this command was reading: run the command again once the server is back"
    return ": whatever this command was writing was not committed; run it again once the server is back"


def _translate_sqlstate(
    code: str, text: str, location: Location, *, reading: bool = False
) -> ComputeBudgetError | None:
    where = location.display
    role = location.url.username or "(default)"
    database = location.url.database or "(default)"
    if code == "28P01":
        return StoreUnavailable(
            f"PostgreSQL refused the password for role {role!r} at {where} (or there is no such role: the server "
            "does not say which)"
        )
    if code == "28000":
        return StoreUnavailable(
            f"PostgreSQL refused role {role!r} at {where}: the role does not exist, or pg_hba.conf does not let it "
            "log in from here"
        )
    if code == "3D000":
        return StoreUnavailable(f"cannot use {where}: the server has no such database {database!r} (create it first)")
    if code in ("08001", "08004", "08006") or code.startswith("08"):
        return StoreUnavailable(f"cannot connect to PostgreSQL at {where}: the server is down or unreachable")
    if code == "57P01":  # admin_shutdown: a fast shutdown, or pg_terminate_backend, ended this very connection
        return StoreUnavailable(
            f"the PostgreSQL server at {where} ended the connection (shut down, or told to end it){_lost(reading)}"
        )
    if code in ("57P02", "57P03"):
        return StoreUnavailable(f"PostgreSQL at {where} is shutting down or starting up; try again shortly")
    if code == "53300":
        return StoreUnavailable(f"PostgreSQL at {where} has no connection slots left (too many connections)")
    if code == "53400":  # configuration_limit_exceeded: temp_file_limit above all, never a connection limit
        return StoreUnavailable(
            f"PostgreSQL at {where} stopped the command at one of its configured limits ({text}); nothing was "
            "written: raise the limit, or ask the server's administrator"
        )
    if code == "53100":
        return StoreUnavailable(
            f"{where}: the server's disk is full (a write, or the temporary files of a large read, needs space); "
            "nothing was written"
        )
    if code == "42501":
        return permission_denied(role, where, text)
    if code == "25006":
        return StoreUnavailable(f"cannot write to {where}: the connection is read-only")
    return None


# What the PostgreSQL server says when it refuses a new connection, and its SQLSTATE: libpq hands the message
# on but not the code. Only these startup refusals are matched; every later error carries its SQLSTATE.
_STARTUP_REFUSALS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("password authentication failed",), "28P01"),
    (("no password supplied",), "28P01"),
    (("no pg_hba.conf entry",), "28000"),
    (("role \"", "does not exist"), "28000"),
    (("is not permitted to log in",), "28000"),
    (("database \"", "does not exist"), "3D000"),
    (("permission denied",), "42501"),
    (("the database system is starting up",), "57P03"),
    (("the database system is shutting down",), "57P03"),
    (("too many connections",), "53300"),
    (("remaining connection slots are reserved",), "53300"),
)


# libpq's and psycopg's own words for "no server answered" (not translated by either).
_UNREACHABLE = (
    "Connection refused",
    "No such file or directory",
    "timeout expired",
    "Connection timed out",
    "could not translate host name",
    "failed to resolve host",
    "Network is unreachable",
    "No route to host",
)


def _is_connection_failure(error: BaseException) -> bool:
    """A psycopg error raised while connecting (no SQLSTATE: libpq failed before or during the startup)."""
    text = str(error)
    return (
        text.startswith(("connection failed:", "connection is bad:", "failed to resolve host"))
        or type(error).__name__ == "ConnectionTimeout"
    )


def _connect_sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE of a refused PostgreSQL connection: the server's startup refusal, or 08001 when no server
    answered at all (refused, unreachable, timed out)."""
    if not _is_connection_failure(error):
        return None
    text = str(error)
    pgconn = getattr(error, "pgconn", None)
    if pgconn is not None and getattr(pgconn, "needs_password", False):
        return "28P01"
    if "FATAL:" in text:
        for needles, code in _STARTUP_REFUSALS:
            if all(needle in text for needle in needles):
                return code
        return None  # refused for a reason not listed: reported with the server's words
    if type(error).__name__ == "ConnectionTimeout" or any(marker in text for marker in _UNREACHABLE):
        return "08001"
    return None  # SSL trouble and the like: reported with libpq's words


def _connect_detail(text: str) -> str:
    """libpq's connection error without its "connection failed: connection to server at …" preamble."""
    return text.split("FATAL:", 1)[-1].strip() if "FATAL:" in text else text
