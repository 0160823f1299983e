"""Where a store lives (path-or-URL resolution) and its engine: made from its backend, and driver errors translated.

This is the one choke point where driver errors become compute-budget errors with a message a person can act on
(each backend knows its own driver's errors: `Backend.translate`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError

from compute_budget.errors import ArgumentTypeError, ComputeBudgetError, StoreUnavailable
from compute_budget.store.backends import find_backend
from compute_budget.store.backends.base import WRITE_OPTION
from compute_budget.store.backends.postgresql_errors import permission_denied
from compute_budget.store.backends.sqlite import BUSY_TIMEOUT_SECONDS, WRITER_CACHE_KIB
from compute_budget.store.location import Location

ENV_VAR = "COMPUTE_BUDGET_DB"
DEFAULT_DB_FILE = "compute_budget.db"
__all__ = [
    "BUSY_TIMEOUT_SECONDS",
    "DEFAULT_DB_FILE",
    "ENV_VAR",
    "WRITER_CACHE_KIB",
    "WRITE_OPTION",
    "Location",
    "begin_write",
    "create_store_engine",
    "default_target",
    "locate",
    "permission_denied",
    "translate",
]


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
    backend = find_backend(url.get_backend_name())
    if backend is not None and backend.keeps_a_file:
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
    """An engine for `location`, made by its backend (SQLite in WAL mode with waiting writers, or a read-only
    reader; PostgreSQL with read-only transactions for a reader)."""
    backend = find_backend(location.backend)
    try:
        if backend is None:
            return create_engine(location.url)  # a database compute-budget has no SQL for: refused when opened
        return backend.create_engine(location, readonly=readonly)
    except (NoSuchModuleError, ModuleNotFoundError) as error:
        hint = backend.missing_driver_hint if backend is not None else "use SQLite or PostgreSQL"
        raise StoreUnavailable(f"no database driver for {location.display}: {hint} ({error})") from None
    except SQLAlchemyError as error:
        raise translate(error, location) from None


def translate(error: BaseException, location: Location, *, reading: bool = False) -> ComputeBudgetError:
    """Turn a driver or SQLAlchemy error into one clear compute-budget error about `location`; `reading`: it
    stopped a read (a read-only command, a read transaction), so a lost server is not said to lose a write.

    Decided by the driver's error code, never by its (possibly translated) message, by the location's backend
    (`Backend.translate`: SQLite's extended result code name, PostgreSQL's SQLSTATE).
    """
    original: BaseException = error.orig if isinstance(error, DBAPIError) and error.orig is not None else error
    text = str(original).strip().splitlines()[0] if str(original).strip() else type(original).__name__
    backend = find_backend(location.backend)
    translated = None if backend is None else backend.translate(original, text, location, reading=reading)
    if translated is not None:
        return translated
    return StoreUnavailable(f"database error on {location.display}: {text}")
