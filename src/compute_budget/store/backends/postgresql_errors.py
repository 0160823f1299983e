"""PostgreSQL's errors as compute-budget errors: by SQLSTATE, and for a refused connection (whose SQLSTATE libpq
keeps to itself, psycopg issue #1188) by the server's startup refusal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compute_budget.errors import ComputeBudgetError, StoreUnavailable, clip

if TYPE_CHECKING:
    from compute_budget.store.location import Location


def permission_denied(role: object, where: str, detail: str = "permission denied") -> StoreUnavailable:
    """The one message for a PostgreSQL role that may not do what was asked; `detail` is the server's own words
    (which name the object: "permission denied for table alembic_version")."""
    return StoreUnavailable(
        f"role {role!r} may not do this on {where} ({clip(detail, 120)}): creating or migrating the schema is the "
        f"owner's (run `compute-budget migrate` as the owner); `compute-budget grants --role {role} --writer` (or "
        "`--auditor`) prints the grants a role needs to record (or to read), to run again after a migrate"
    )


# What libpq says when an established connection is lost (no SQLSTATE reaches psycopg for these).
_CONNECTION_LOST = ("server closed the connection", "consuming input failed", "terminating connection",
                    "the connection is lost", "connection is closed")


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


def translate_postgresql(
    original: BaseException, text: str, location: Location, *, reading: bool
) -> ComputeBudgetError | None:
    """The error for a psycopg error (None: not one known here). Decided by SQLSTATE, never by the (possibly
    translated) message, except for a lost connection and a refused one, which carry none."""
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
    return None
