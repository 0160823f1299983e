"""Opening and migrating a store: the file checks, the schema's revision, the seal's opening step, and removing
a store a failed command created and never used."""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from compute_budget.errors import NoHistory, NotABudgetStore, SchemaBehindHead, StoreDamaged, StoreUnavailable
from compute_budget.store import repairs
from compute_budget.store import seal_tables as sealing
from compute_budget.store.backends import backend_for
from compute_budget.store.engine import Location, begin_write, create_store_engine, locate, translate
from compute_budget.store.grants import Role
from compute_budget.store.migrations import (
    SchemaState,
    head_revision,
    repair_revision,
    schema_state,
    upgrade_to_head,
)
from compute_budget.store.repairs import Repair
from compute_budget.store.schema_check import (
    clear_foreign,
    refuse_edited_schema,
    restore_guard,
    schema_problems,
)
from compute_budget.store.session import lock_for_append, read_head, utc_now
from compute_budget.store.table import TABLE_NAME


def open_engine(
    target: str | os.PathLike[str] | None, *, readonly: bool, origin: str | None
) -> tuple[Location, Engine, bool]:
    """The engine of the store at `target` after the opening checks: (location, engine, created).

    A writer creates a new, empty database at the schema head and takes the seal's opening step; a reader needs
    an existing store whose role holds the auditor's grants. Either refuses a schema that is not at head.
    """
    location = locate(target)
    check_file(location, readonly=readonly)
    created = not readonly and location.sqlite_path is not None and not location.sqlite_path.exists()
    engine = create_store_engine(location, readonly=readonly)
    try:
        with engine.begin() if readonly else begin_write(engine) as connection:
            lock_for_append(connection, readonly=readonly)
            if readonly:
                backend_for(connection).require_grants(connection, Role.AUDITOR, location.display)
            state, revision = schema_state(connection)
            if state is SchemaState.EMPTY and not readonly:
                upgrade_to_head(connection)
            else:
                require_head(location, state, revision)
            if not readonly:
                seal_on_open(connection, origin, create_origin=False)
    except SQLAlchemyError as error:
        engine.dispose()
        raise translate(error, location, reading=readonly) from None
    except BaseException:
        engine.dispose()
        raise
    return location, engine, created


def migrate_store(
    target: str | os.PathLike[str] | None,
    *,
    origin: str | None,
    on_restore: Callable[[list[str]], None] | None,
    on_repair: Callable[[Repair], None] | None = None,
) -> tuple[str | None, str]:
    """Bring the schema at `target` to head, restore its guard and complete its seal (see `BudgetStore.migrate`)."""
    location = locate(target)
    repair_row: Repair | None = None
    check_file(location, readonly=False)
    engine = create_store_engine(location, readonly=False)
    try:
        with begin_write(engine) as connection:
            lock_for_append(connection, readonly=False)
            state, revision = schema_state(connection)
            if state is SchemaState.FOREIGN:
                raise NotABudgetStore(f"{location.display} is not a compute-budget database: it has other tables")
            if state in (SchemaState.AHEAD, SchemaState.TABLE_MISSING):
                require_head(location, state, revision)
            refuse_edited_schema(connection)
            # Repairs are said only once they hold (the transaction commits them): a repair that did not hold is
            # one error, and nothing changes.
            repaired = clear_foreign(connection)  # before any write: a trigger could swallow the repair itself
            if state is SchemaState.REVISION_TAMPERED:
                # Spec 9.7: the tables are already head's; only the record is wrong (or gone). Repair the record
                # (the guard is checked next, as on every migrate).
                made = repair_revision(connection)
                recorded = "no revision" if revision is None else f"revision {revision!r}"
                repaired.append(
                    f"repaired the schema's bookkeeping: alembic_version recorded {recorded} under this release's "
                    f"head tables; it now records {head_revision()}"
                    + (" (the table was made anew: run `compute-budget grants` again for every role)"
                       if made and backend_for(connection).has_roles else "")
                )
            elif state is not SchemaState.AT_HEAD:
                upgrade_to_head(connection)
            problems = schema_problems(connection)
            if problems:
                restore_guard(connection)
                repaired += problems
            left = schema_problems(connection) if problems else []  # nothing restored: nothing to check again
            if left:
                raise StoreDamaged(
                    f"{location.display}: migrate cannot repair this, and changed nothing: {left[0]}; restore the "
                    "database from a backup, or salvage its rows into a new store with `compute-budget copy --through`"
                )
            if repaired:
                repair_row = _record_repair(connection, repaired)
                if on_restore is not None:
                    on_restore(repaired)
            seal_on_open(connection, origin, create_origin=True)
    except SQLAlchemyError as error:
        raise translate(error, location) from None
    finally:
        engine.dispose()
    if repair_row is not None and on_repair is not None:
        on_repair(repair_row)  # committed
    return revision, head_revision()


def _record_repair(connection: Connection, repaired: list[str]) -> Repair:
    """Spec 9.9.10: the guard was down for a while; say so in the store, in the repair's own transaction."""
    size = repairs.head_size(connection, backend_for(connection).statements)
    return repairs.record_repair(connection, repaired, size, utc_now())


def seal_on_open(connection: Connection, origin: str | None, *, create_origin: bool) -> None:
    """A writer's opening step for the seal: set a wanted origin, build the tree of rows written before it."""
    backend = backend_for(connection)
    statements, seal = backend.statements, backend.seal
    try:
        head = read_head(connection, statements)
    except StoreDamaged:
        return  # a damaged head stops the first append, with its own message
    sealing.ensure_origin(connection, seal, origin, create=create_origin and head.seq > 0)
    if not sealing.tree_is_built(connection, seal, head.seq):
        sealing.build_tree(connection, statements, seal, head.seq)


def check_file(location: Location, *, readonly: bool) -> None:
    path = location.sqlite_path
    if path is None:
        return
    if path.is_dir():
        raise StoreUnavailable(f"{path} is a folder, not a database file")
    if path.exists() and not path.is_file():
        # A FIFO would hang every reader, a device would collect a -journal beside it: only files are stores.
        raise StoreUnavailable(f"{path} is not a regular file (a device, pipe or socket) and cannot be a database")
    if readonly and not path.exists():
        raise StoreUnavailable(f"no database at {path} (check the path, or record something first)")
    if not readonly and not path.parent.is_dir():
        raise StoreUnavailable(f"cannot create database {path}: folder {path.parent} does not exist")


def require_head(location: Location, state: SchemaState, revision: str | None) -> None:
    where = location.display
    if state in (SchemaState.AT_HEAD, SchemaState.REVISION_TAMPERED):
        return  # a tampered revision record is read and reported (schema_tampered); appends refuse it
    if state is SchemaState.EMPTY:
        raise NoHistory(f"{where} holds no compute-budget store yet (an empty database)", where=where, dropped=False)
    if state is SchemaState.TABLE_MISSING:
        raise NoHistory(
            f"{where} is a compute-budget store (revision {revision}) whose decisions table is gone: it was dropped "
            "by hand; restore the database from a backup",
            where=where,
            dropped=True,
        )
    if state is SchemaState.BEHIND:
        raise SchemaBehindHead(
            f"{where} has schema revision {revision}, behind this release's {head_revision()}: "
            f"run `compute-budget migrate --db {where}` first"
        )
    if state is SchemaState.AHEAD:
        raise NotABudgetStore(
            f"{where} has schema revision {revision}, unknown to this release (written by a newer compute-budget?)"
        )
    raise NotABudgetStore(f"{where} is not a compute-budget database (it has other tables and no budget schema)")


def _remove_on_a_full_disk(connection: sqlite3.Connection, path: Path) -> bool:
    """On a full disk SQLite cannot leave WAL mode (that writes): take the write lock in exclusive locking mode
    instead, and when no row was ever committed, delete the file and its -wal and -shm together. A file the failed
    command created moments ago and could not fill is what this removes; a store with a row is never touched."""
    try:
        connection.execute("BEGIN EXCLUSIVE")
        try:
            rows = connection.execute(f"SELECT count(*) FROM {TABLE_NAME}").fetchone()[0]
        except sqlite3.OperationalError as error:
            if "no such table" not in str(error):
                raise
            rows = 0  # the schema itself never committed
        if rows != 0:
            return False
        for leftover in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            leftover.unlink(missing_ok=True)
        return True
    finally:
        if connection.in_transaction:
            connection.execute("ROLLBACK")


def remove_unused_sqlite(path: Path) -> bool:
    """Delete the SQLite store at `path` if no other connection has it open and it holds no row (see
    `BudgetStore.discard_if_unused`)."""
    uri = f"file:{urllib.parse.quote(str(path))}?mode=rw"
    connection = sqlite3.connect(uri, uri=True, timeout=0.2, isolation_level=None)
    try:
        # Keep every lock taken from here on until the connection closes, then leave WAL mode: SQLite allows
        # that only to the last connection, so from here on nobody else has the file open.
        connection.execute("PRAGMA locking_mode = EXCLUSIVE")
        try:
            mode = connection.execute("PRAGMA journal_mode = DELETE").fetchone()[0]
        except sqlite3.OperationalError as error:
            if getattr(error, "sqlite_errorname", "") != "SQLITE_FULL" and "full" not in str(error):
                raise
            return _remove_on_a_full_disk(connection, path)
        if mode != "delete":
            return False
        connection.execute("BEGIN EXCLUSIVE")
        if connection.execute(f"SELECT count(*) FROM {TABLE_NAME}").fetchone()[0] != 0:
            connection.execute("ROLLBACK")
            return False
        # Still holding the exclusive lock: a process that opened the path meanwhile waits, and SQLite then
        # refuses its writes to the deleted file (SQLITE_READONLY_DBMOVED) instead of losing them.
        path.unlink()
        connection.execute("ROLLBACK")
        return True
    finally:
        connection.close()
