"""Repairs (spec 9.9.10): what `migrate` repaired, and the writer's acknowledgement that the rows still hold.

A guard that had to be restored was down for a while, and rows may have been edited meanwhile. So a repair is
recorded (`compute_budget_repairs`, kind ``repair``), writers refuse to append until one is told
`after_repair=ID` (`record --after-repair ID`), which re-derives every row first and then records an
``acknowledged`` row, and the audit reports every repair no later acknowledgement covers as `schema_tampered`.
Order is meaning: an acknowledgement covers every repair recorded before it (so a copy, which numbers the rows
anew, keeps what they say).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, inspect

from compute_budget.errors import InputError, RepairNotAcknowledged, StoreDamaged, clip
from compute_budget.store.backends import backend_for
from compute_budget.store.session import read_head
from compute_budget.store.statements import Statements
from compute_budget.store.table import REPAIRS_TABLE

REPAIR = "repair"
ACKNOWLEDGED = "acknowledged"
# What every unacknowledged repair's finding says (spec 9.9.10); `migrate` tells its own repair's finding apart by it.
NOT_ACKNOWLEDGED = "not acknowledged"
_COLUMNS = "id, kind, recorded_at, what, head_size"


@dataclass(frozen=True, slots=True)
class Repair:
    """One row of `compute_budget_repairs`: a repair `migrate` made, or an acknowledgement of the repairs before it."""

    id: int
    kind: str
    recorded_at: str
    what: str
    head_size: int


def _mark(connection: Connection) -> str:
    return backend_for(connection).mark


def _append(connection: Connection, kind: str, what: str, head_size: int, recorded_at: str) -> Repair:
    m = _mark(connection)
    ident = connection.exec_driver_sql(
        f"INSERT INTO {REPAIRS_TABLE} (kind, recorded_at, what, head_size) VALUES ({m}, {m}, {m}, {m}) RETURNING id",
        (kind, recorded_at, what, head_size),
    ).scalar_one()
    return Repair(int(ident), kind, recorded_at, what, head_size)


def record_repair(connection: Connection, problems: list[str], head_size: int, recorded_at: str) -> Repair:
    """Append the repair `migrate` just made (its problems, one per line) at a head of `head_size` rows."""
    return _append(connection, REPAIR, "\n".join(problems), head_size, recorded_at)


def copy_row(connection: Connection, row: Repair) -> Repair:
    """Append `row` as another store holds it (a whole `copy`): numbered anew, in the same order, so it means the
    same."""
    return _append(connection, row.kind, row.what, row.head_size, row.recorded_at)


def head_size(connection: Connection, statements: Statements) -> int:
    """The head's seq for a repair row; a head that cannot be read (a row edited by hand) counts the rows."""
    try:
        return read_head(connection, statements).seq
    except StoreDamaged:
        return int(connection.exec_driver_sql(statements.count).scalar_one())


def read_all(connection: Connection) -> tuple[list[Repair], list[str]]:
    """Every readable row, oldest first, and one problem per row whose values are not of their columns' types (a
    plain INSERT can put text in an INTEGER column on SQLite). No table (an older schema): nothing."""
    if not inspect(connection).has_table(REPAIRS_TABLE):
        return [], []
    found: list[Repair] = []
    problems: list[str] = []
    for ident, kind, recorded_at, what, size in connection.exec_driver_sql(
        f"SELECT {_COLUMNS} FROM {REPAIRS_TABLE} ORDER BY id"
    ):
        if type(ident) is not int or type(size) is not int or not isinstance(what, str) or kind not in (
            REPAIR, ACKNOWLEDGED
        ) or not isinstance(recorded_at, str):
            problems.append(f"{REPAIRS_TABLE} row {clip(repr(ident), 40)} cannot be read: it was written by hand")
            continue
        found.append(Repair(ident, kind, recorded_at, what, size))
    return found, problems


def pending(repairs: list[Repair]) -> list[Repair]:
    """The repairs no later acknowledgement covers, oldest first."""
    waiting: list[Repair] = []
    for row in repairs:
        waiting = [] if row.kind == ACKNOWLEDGED else [*waiting, row]
    return waiting


def problems(connection: Connection) -> list[str]:
    """What the audit reports as `schema_tampered`: each repair not acknowledged, and each acknowledgement that
    follows no repair or was made at a smaller head than the repair it covers (written by hand, not by a writer)."""
    rows, unreadable = read_all(connection)
    found = list(unreadable)
    waiting: list[Repair] = []
    for row in rows:
        if row.kind == REPAIR:
            waiting.append(row)
            continue
        if not waiting:
            found.append(f"acknowledgement #{row.id} in {REPAIRS_TABLE} follows no repair: it was written by hand")
        elif row.head_size < waiting[-1].head_size:
            found.append(
                f"acknowledgement #{row.id} was made at seq {row.head_size}, below the head (seq "
                f"{waiting[-1].head_size}) of repair #{waiting[-1].id} it covers: it was written by hand"
            )
        waiting = []
    return found + [_unacknowledged(row) for row in waiting]


def _unacknowledged(row: Repair) -> str:
    first = row.what.splitlines()[0] if row.what else "(nothing said)"
    more = f" (and {len(row.what.splitlines()) - 1} more)" if len(row.what.splitlines()) > 1 else ""
    return (
        f"repair #{row.id} on {row.recorded_at} ({clip(first, 120)}{more}): repaired at seq {row.head_size}, "
        f"{NOT_ACKNOWLEDGED}: rows may have changed while the guard was down; once a full audit finds nothing "
        f"else, acknowledge it with `compute-budget record --after-repair {row.id}` (docs/incident.md)"
    )


def newest_is_repair(connection: Connection) -> bool:
    """True when the newest row is a repair (one indexed read: what every append asks)."""
    kind = connection.exec_driver_sql(f"SELECT kind FROM {REPAIRS_TABLE} ORDER BY id DESC LIMIT 1").scalar()
    return kind != ACKNOWLEDGED and kind is not None


def require_acknowledged(connection: Connection, where: str, after_repair: int | None) -> Repair | None:
    """Refuse an append while a repair waits (`RepairNotAcknowledged`, naming it), unless `after_repair` names the
    newest waiting one: then return it (the caller re-derives the rows, then calls `acknowledge`)."""
    if after_repair is None and not newest_is_repair(connection):
        return None
    rows, _ = read_all(connection)
    waiting = pending(rows)
    if after_repair is None:
        if not waiting:
            return None
        newest = waiting[-1]
        raise RepairNotAcknowledged(
            f"{where}: refusing to append: the store was repaired (repair #{newest.id} at seq {newest.head_size}, "
            f"not acknowledged) and rows may have changed while its guard was down; run a full `compute-budget "
            f"audit`, review what it finds (docs/incident.md), then record once with `--after-repair {newest.id}`; "
            "nothing was written",
            repair_id=newest.id,
        )
    if type(after_repair) is not int or after_repair < 1:
        raise InputError(f"after_repair names a repair by its number, not {after_repair!r}")
    if not waiting:
        raise InputError(f"--after-repair {after_repair}: {where} has no repair waiting for an acknowledgement")
    newest = waiting[-1]
    if after_repair != newest.id:
        known = {row.id for row in waiting}
        said = "is not the newest repair waiting" if after_repair in known else "names no repair waiting"
        raise InputError(
            f"--after-repair {after_repair} {said}: give --after-repair {newest.id} (repair #{newest.id} at seq "
            f"{newest.head_size}), after a full audit; nothing was written"
        )
    return newest


def acknowledge(connection: Connection, repair: Repair, head_size: int, who: str, recorded_at: str) -> Repair:
    """Append the acknowledgement of `repair` (and every repair before it), made at a head of `head_size` rows."""
    what = f"acknowledged repair #{repair.id}: rows 1..{head_size} re-derived and the tree rebuilt from them ({who})"
    return _append(connection, ACKNOWLEDGED, what, head_size, recorded_at)
