"""Stored rows as the workbench shows them: as JSON, as a line of the decisions table, and each checked live as
the audit checks it (`core.verify.check_row`, against the row stored before it)."""

from __future__ import annotations

import dataclasses
import urllib.parse
from dataclasses import dataclass
from typing import Any

from compute_budget.core.log.head import GENESIS_CHAIN_HASH
from compute_budget.core.row import StoredDecision, named, stored_from_row
from compute_budget.core.verify import RangeResult, check_row
from compute_budget.errors import MalformedDecision
from compute_budget.store import BudgetStore
from compute_budget.store.browse import DecisionFilter, Link
from compute_budget.web.queries import Query

LIMIT_NAMES = ("max_candidates", "max_depth", "max_steps", "max_parallelism")
TAMPERED_CLASS = "status-tampered"


def row_dict(raw: tuple[Any, ...]) -> dict[str, Any]:
    """A stored row as JSON: the stored decision's fields with `seq`, `gate_input`, `recorded_at` and
    `chain_hash`; a row that cannot be read gives its raw columns and `unreadable` saying why."""
    try:
        return stored_from_row(raw).to_dict()
    except (MalformedDecision, ValueError, TypeError) as error:
        values = {name: _jsonable(value) for name, value in named(raw)._asdict().items()}
        return {**values, "unreadable": str(error)}


def _jsonable(value: object) -> object:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def readable(raw: tuple[Any, ...]) -> StoredDecision | None:
    """The stored decision of a raw row, or None when the row cannot be read."""
    try:
        return stored_from_row(raw)
    except (MalformedDecision, ValueError, TypeError):
        return None


def detail_href(budget_id: object) -> str:
    """The path of a decision's detail page."""
    return "/decisions/" + urllib.parse.quote(str(budget_id), safe="")


def status_class(status: object) -> str:
    """A CSS class for a status: one of a fixed set, never text from the row."""
    known = {
        "budget_allowed": "allowed",
        "budget_blocked": "blocked",
        "budget_unassessable": "unassessable",
        "budget_zero": "zero",
    }
    return known.get(str(status), "other")


@dataclass(frozen=True, slots=True)
class ListedRow:
    """One row of the decisions table."""

    seq: object
    budget_id: str
    href: str
    status: str
    status_class: str
    reason_code: str
    gate_decision_id: str
    gate_href: str
    limits: str
    recorded_at: str
    unreadable: str | None
    problems: tuple[str, ...] = ()  # the kinds of finding a live check of the row found (empty: it holds)


def checked(rows: list[tuple[Any, ...]], store: BudgetStore, query: Query) -> list[ListedRow]:
    """The rows of a page as the table shows them, each checked as the audit does (see `row_problems`), so a
    changed row is marked where it is listed."""
    return [
        # A row that does not hold never keeps its status's colour (a green "allowed"): it is struck through.
        dataclasses.replace(listed(raw, query), problems=problems, status_class=TAMPERED_CLASS)
        if problems else listed(raw, query)
        for raw, problems in zip(rows, row_problems(rows, store), strict=True)
    ]


def row_problems(rows: list[tuple[Any, ...]], store: BudgetStore) -> list[tuple[str, ...]]:
    """For each raw row, the kinds of finding the audit's check finds in it (re-derived, re-hashed and linked to
    the row stored before it): empty when it holds."""
    named_rows = [named(raw) for raw in rows]
    chain_by_seq = {row.seq: row.chain_hash for row in named_rows if type(row.seq) is int}
    found: list[tuple[str, ...]] = []
    for row in named_rows:
        seq = row.seq
        if type(seq) is not int:
            found.append(("malformed_row",))
            continue
        previous_chain = chain_by_seq.get(seq - 1)
        if previous_chain is None and seq > 1:
            link = store.link_at_seq(seq - 1)
            previous_chain = link.chain_hash if link is not None else None
        result = RangeResult()
        check_row(row, seq - 1, previous_chain if isinstance(previous_chain, str) else GENESIS_CHAIN_HASH, result)
        found.append(tuple(dict.fromkeys(finding.kind.value for finding in result.findings)))
    return found


def with_holds(rows: list[tuple[Any, ...]], store: BudgetStore) -> list[dict[str, Any]]:
    """Rows as JSON, each with `holds` (the audit's check of it, live) and, when it does not, its `problems`."""
    items = []
    for raw, problems in zip(rows, row_problems(rows, store), strict=True):
        item = row_dict(raw)
        item["holds"] = not problems
        if problems:
            item["problems"] = list(problems)
        items.append(item)
    return items


def listed(raw: tuple[Any, ...], query: Query) -> ListedRow:
    """A raw row as the decisions table shows it."""
    row = named(raw)
    gate_id = str(row.gate_decision_id)
    return ListedRow(
        seq=row.seq,
        budget_id=str(row.budget_id),
        href=detail_href(row.budget_id),
        status=str(row.status),
        status_class=status_class(row.status),
        reason_code=str(row.reason_code),
        gate_decision_id=gate_id,
        gate_href=Query(DecisionFilter(gate_decision_id=gate_id), query.limit).href(),
        limits="/".join(str(getattr(row, name)) for name in LIMIT_NAMES),
        recorded_at=str(row.recorded_at),
        unreadable=None if readable(raw) is not None else "this row cannot be read; run the audit",
    )


def link_dict(link: Link | None) -> dict[str, Any] | None:
    """A neighbouring row's link as JSON (None at either end of the log)."""
    if link is None:
        return None
    return {"seq": link.seq, "chain_hash": link.chain_hash, "budget_id": link.budget_id}
