"""One stored decision as its detail page shows it: why in words, its limits next to the policy's table, the gate
it came from, its neighbours in the chain, and the auditor's own check of it (`core.verify.check_row`, run on
the raw stored row against the row stored before it: the workbench never compares fields itself)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from compute_budget.core.log.head import GENESIS_CHAIN_HASH
from compute_budget.core.policy.rules import POLICIES
from compute_budget.core.row import StoredDecision, named
from compute_budget.core.verify import Finding, RangeResult, check_row
from compute_budget.store import BudgetStore
from compute_budget.store.browse import Link
from compute_budget.web.policy_table import PolicyRow, policy_rows
from compute_budget.web.rows import LIMIT_NAMES, detail_href, readable, row_dict, status_class

_HEADLINES = {
    "budget_allowed": "Allowed",
    "budget_blocked": "Blocked",
    "budget_unassessable": "Unassessable",
    "budget_zero": "Zero (reserved: a refusal)",
}


@dataclass(frozen=True, slots=True)
class Rederived:
    """The auditor's check of one row: re-derived from its gate input, re-hashed, re-linked to the row before."""

    holds: bool
    findings: list[Finding]
    previous_seq: int

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: `holds` and the findings as `differences`."""
        return {"holds": self.holds, "differences": [finding.to_dict() for finding in self.findings]}


def rederive(raw: tuple[Any, ...], previous: Link | None) -> Rederived:
    """Check a raw row as the audit does, against the stored row before it (genesis when there is none)."""
    if previous is None:
        prev_seq, prev_chain = 0, GENESIS_CHAIN_HASH
    else:
        prev_seq = previous.seq if type(previous.seq) is int else 0
        prev_chain = previous.chain_hash if isinstance(previous.chain_hash, str) else GENESIS_CHAIN_HASH
    result = RangeResult()
    check_row(raw, prev_seq, prev_chain, result)
    return Rederived(not result.findings, list(result.findings), prev_seq)


@dataclass(frozen=True, slots=True)
class Detail:
    """Everything the detail page shows about one stored row."""

    raw: dict[str, Any]
    stored: StoredDecision | None
    headline: str
    status_class: str
    gate_said: str
    gate_pretty: str
    policy_version: str
    policy: list[PolicyRow] | None
    applied: PolicyRow | None
    limits: list[tuple[str, object, object]]
    previous: Link | None
    previous_href: str | None
    next: Link | None
    next_href: str | None
    rederived: Rederived
    api_href: str


def detail(store: BudgetStore, budget_id: str) -> Detail | None:
    """The detail of the stored row `budget_id`, or None when no row has it."""
    raw = store.raw_row(budget_id)
    if raw is None:
        return None
    row = named(raw)
    seq = row.seq
    previous, following = store.neighbours(seq) if type(seq) is int else (None, None)
    status, reason = str(row.status), str(row.reason_code)
    policy = POLICIES.get(row.policy_version) if isinstance(row.policy_version, str) else None
    table = policy_rows(policy, status, reason) if policy is not None else None
    applied = next((line for line in table if line.applied), None) if table else None
    limits: list[tuple[str, object, object]] = [
        (name, getattr(row, name), getattr(applied.limits, name) if applied else None) for name in LIMIT_NAMES
    ]
    limits.append(("max_wallclock_ms", row.max_wallclock_ms, None))
    return Detail(
        raw=row_dict(row),
        stored=readable(row),
        headline=_HEADLINES.get(status, f"Unknown status {json.dumps(status)}"),
        status_class=status_class(status),
        gate_said=_gate_said(row.gate_input),
        gate_pretty=_pretty(row.gate_input),
        policy_version=str(row.policy_version),
        policy=table,
        applied=applied,
        limits=limits,
        previous=previous,
        previous_href=detail_href(previous.budget_id) if previous is not None else None,
        next=following,
        next_href=detail_href(following.budget_id) if following is not None else None,
        rederived=rederive(row, previous),
        api_href="/api" + detail_href(row.budget_id),
    )


def _gate_said(gate_input: object) -> str:
    """What the gate itself said, in words: its status and reason code."""
    try:
        gate = json.loads(gate_input) if isinstance(gate_input, str) else None
    except ValueError:
        return "The stored gate input is not JSON."
    except RecursionError:  # legal JSON nested deeper than Python's parser goes: not a well-formed gate anyway
        return "The stored gate input is nested too deeply to read as a gate decision."
    if not isinstance(gate, dict):
        return "The stored gate input is not a JSON object, so it is not a gate decision."
    status, reason = gate.get("status"), gate.get("reason_code")
    return f"The search gate said status {json.dumps(status)}, reason {json.dumps(reason)}."


def _pretty(gate_input: object) -> str:
    """The gate input pretty-printed, or as stored when it is not JSON."""
    if not isinstance(gate_input, str):
        return repr(gate_input)
    try:
        return json.dumps(json.loads(gate_input), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        return gate_input
