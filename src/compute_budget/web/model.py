"""What the workbench shows, worked out from a read-only store: pages of rows, counts and their chart, one
decision explained and re-derived, and the checkpoints. No HTTP here: the routes (`app`) render these.

Re-derivation is the auditor's own check (`core.verify.check_row`) run on the raw stored row against the
stored row before it: the workbench never compares fields itself.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import threading
import urllib.parse
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.head import GENESIS_CHAIN_HASH
from compute_budget.core.policy.rules import (
    MALFORMED_GATE_DECISION,
    NO_LIMITS,
    POLICIES,
    UNKNOWN_GATE_REASON_CODE,
    BudgetPolicy,
    Limits,
)
from compute_budget.core.policy.types import ComputeBudgetStatus
from compute_budget.core.row import ROW_COLUMNS, StoredDecision, stored_from_row
from compute_budget.core.verify import Finding, RangeResult, check_row
from compute_budget.errors import MalformedDecision
from compute_budget.store import BudgetStore
from compute_budget.store.browse import MAX_PAGE_ROWS, DecisionFilter, Link

PAGE_ROWS = 50
MAX_FILTER_TEXT = 1000
_HEX64 = re.compile(r"[0-9a-f]{64}")
_SEQ_LIMIT = 2**63 - 1


class BadQuery(ValueError):
    """A query parameter that cannot be used (the page says which, with status 400)."""


# -- query parameters -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Query:
    """The decisions page's parameters, as given (empty form fields count as absent)."""

    where: DecisionFilter
    limit: int

    def params(self, **changes: object) -> dict[str, str]:
        """The query string's parameters (by their public names), with `changes` applied (None drops one)."""
        where = self.where
        values: dict[str, object] = {
            "status": where.status,
            "reason": where.reason_code,
            "gate": where.gate_decision_id,
            "policy_version": where.policy_version,
            "after_seq": where.after_seq,
            "before_seq": where.before_seq,
            "limit": None if self.limit == PAGE_ROWS else self.limit,
        }
        values.update(changes)
        return {name: str(value) for name, value in values.items() if value is not None}

    def href(self, path: str = "/", **changes: object) -> str:
        """A link to `path` with these parameters and `changes`."""
        params = self.params(**changes)
        return path + ("?" + urllib.parse.urlencode(params) if params else "")

    @property
    def filtered(self) -> bool:
        """True when any filter other than the page position is given."""
        where = self.where
        given = (where.status, where.reason_code, where.gate_decision_id, where.policy_version, where.after_seq)
        return any(value is not None for value in given)


def parse_query(params: Mapping[str, str]) -> Query:
    """The decisions page's parameters from a query string; raises `BadQuery` naming a bad one."""
    limit = int_param(params, "limit", low=1, high=MAX_PAGE_ROWS)
    return Query(
        DecisionFilter(
            status=_status_param(params),
            reason_code=_text_param(params, "reason"),
            gate_decision_id=_text_param(params, "gate"),
            policy_version=_text_param(params, "policy_version"),
            after_seq=int_param(params, "after_seq", low=0, high=_SEQ_LIMIT),
            before_seq=int_param(params, "before_seq", low=1, high=_SEQ_LIMIT),
        ),
        PAGE_ROWS if limit is None else limit,
    )


def _status_param(params: Mapping[str, str]) -> str | None:
    value = _text_param(params, "status")
    if value is not None and value not in {status.value for status in ComputeBudgetStatus}:
        choices = ", ".join(status.value for status in ComputeBudgetStatus)
        raise BadQuery(f"status {value[:40]!r} is not a budget status (one of: {choices})")
    return value


def _text_param(params: Mapping[str, str], name: str) -> str | None:
    value = params.get(name)
    if value is None or value == "":
        return None
    if len(value) > MAX_FILTER_TEXT:
        raise BadQuery(f"{name} is longer than {MAX_FILTER_TEXT} characters")
    return value


def int_param(params: Mapping[str, str], name: str, *, low: int, high: int) -> int | None:
    value = params.get(name)
    if value is None or value.strip() == "":
        return None
    if not re.fullmatch(r"\s*[0-9]{1,19}\s*", value):
        raise BadQuery(f"{name} must be a whole number from {low} to {high}")
    number = int(value)
    if not low <= number <= high:
        raise BadQuery(f"{name} must be a whole number from {low} to {high}")
    return number


# -- rows -----------------------------------------------------------------------------------------------


def row_dict(raw: tuple[Any, ...]) -> dict[str, Any]:
    """A stored row as JSON: the stored decision's fields with `seq`, `gate_input`, `recorded_at` and
    `chain_hash`; a row that cannot be read gives its raw columns and `unreadable` saying why."""
    try:
        return stored_from_row(raw).to_dict()
    except (MalformedDecision, ValueError, TypeError) as error:
        values = {name: _jsonable(value) for name, value in zip(ROW_COLUMNS, raw, strict=True)}
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


TAMPERED_CLASS = "status-tampered"


def row_problems(rows: list[tuple[Any, ...]], store: BudgetStore) -> list[tuple[str, ...]]:
    """For each raw row, the kinds of finding the audit's check finds in it (re-derived, re-hashed and linked to
    the row stored before it): empty when it holds."""
    chain_by_seq = {raw[0]: raw[-1] for raw in rows if type(raw[0]) is int}
    found: list[tuple[str, ...]] = []
    for raw in rows:
        seq = raw[0]
        if type(seq) is not int:
            found.append(("malformed_row",))
            continue
        previous_chain = chain_by_seq.get(seq - 1)
        if previous_chain is None and seq > 1:
            link = store.link_at_seq(seq - 1)
            previous_chain = link.chain_hash if link is not None else None
        result = RangeResult()
        check_row(raw, seq - 1, previous_chain if isinstance(previous_chain, str) else GENESIS_CHAIN_HASH, result)
        found.append(tuple(dict.fromkeys(finding.kind.value for finding in result.findings)))
    return found


def listed(raw: tuple[Any, ...], query: Query) -> ListedRow:
    """A raw row as the decisions table shows it."""
    values = dict(zip(ROW_COLUMNS, raw, strict=True))
    stored = readable(raw)
    limits = "/".join(
        str(values[name]) for name in ("max_candidates", "max_depth", "max_steps", "max_parallelism")
    )
    gate_id = str(values["gate_decision_id"])
    return ListedRow(
        seq=values["seq"],
        budget_id=str(values["budget_id"]),
        href=detail_href(values["budget_id"]),
        status=str(values["status"]),
        status_class=status_class(values["status"]),
        reason_code=str(values["reason_code"]),
        gate_decision_id=gate_id,
        gate_href=Query(DecisionFilter(gate_decision_id=gate_id), query.limit).href(),
        limits=limits,
        recorded_at=str(values["recorded_at"]),
        unreadable=None if stored is not None else "this row cannot be read; run the audit",
    )


def status_class(status: object) -> str:
    """A CSS class for a status: one of a fixed set, never text from the row."""
    known = {
        "budget_allowed": "allowed",
        "budget_blocked": "blocked",
        "budget_unassessable": "unassessable",
        "budget_zero": "zero",
    }
    return known.get(str(status), "other")


# -- counts and their chart ---------------------------------------------------------------------------------


class CountCache:
    """Counts of rows by (status, reason_code), kept per head seq: an append-only store's counts at a new head
    are the old counts plus those of the rows appended since, so only those are counted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        self._counts: Counter[tuple[str, str]] = Counter()

    def get(self, store: BudgetStore) -> tuple[int, Counter[tuple[str, str]]]:
        """(head seq, counts) for the store's current head."""
        with self._lock:
            head = store.head_seq()
            if head < self._seq:  # fewer rows than before: the store was changed behind its back; recount
                self._seq, self._counts = 0, Counter()
            if head > self._seq:
                self._counts.update(store.counts(self._seq, head))
                self._seq = head
            return self._seq, Counter(self._counts)


@dataclass(frozen=True, slots=True)
class Bar:
    """One bar of a chart: its label, count, link, and geometry in the SVG's user units."""

    label: str
    count: int
    href: str
    css: str
    y: int
    width: int
    selected: bool


LABEL_WIDTH, BAR_SPACE, ROW_HEIGHT = 230, 260, 26


@dataclass(frozen=True, slots=True)
class Chart:
    """A horizontal bar chart drawn by the server as SVG."""

    title: str
    ident: str
    bars: list[Bar]
    height: int
    label_width: int = LABEL_WIDTH
    bar_space: int = BAR_SPACE
    row_height: int = ROW_HEIGHT

    @property
    def width(self) -> int:
        """The SVG's width in user units (labels, bars, and room for the count)."""
        return self.label_width + self.bar_space + 90


def charts(counts: Counter[tuple[str, str]], query: Query) -> list[Chart]:
    """The status chart and the reason chart; each bar links to its filter. Each follows the other's filter: the
    status chart counts the rows with the reason chosen, the reason chart the rows with the status chosen (the
    counts are the whole store's, cached per head: the other filters are drawn separately, see `needs_own_counts`)."""
    by_status: Counter[str] = Counter()
    by_reason: Counter[str] = Counter()
    for (status, reason), count in counts.items():
        if query.where.reason_code in (None, reason):
            by_status[status] += count
        if query.where.status in (None, status):
            by_reason[reason] += count
    status_order = [status.value for status in ComputeBudgetStatus]
    statuses = sorted(by_status, key=lambda name: (status_order.index(name) if name in status_order else 99, name))
    reasons = sorted(by_reason, key=lambda name: (-by_reason[name], name))
    first = Query(DecisionFilter(), query.limit)
    of_reason = f" (reason {query.where.reason_code})" if query.where.reason_code else ""
    of_status = f" (status {query.where.status})" if query.where.status else ""
    return [
        _chart(
            "Decisions by status" + of_reason,
            "chart-status",
            [(name, by_status[name], first.href(status=name), status_class(name)) for name in statuses],
            query.where.status,
        ),
        _chart(
            "Decisions by reason" + of_status,
            "chart-reason",
            [(name, by_reason[name], first.href(reason=name), "reason") for name in reasons],
            query.where.reason_code,
        ),
    ]


def _chart(title: str, ident: str, items: list[tuple[str, int, str, str]], selected: str | None) -> Chart:
    largest = max((count for _, count, _, _ in items), default=0)
    row = ROW_HEIGHT
    space = BAR_SPACE
    bars = [
        Bar(
            label=label,
            count=count,
            href=href,
            css=css,
            y=index * row,
            width=max(1, round(space * count / largest)) if largest else 0,
            selected=label == selected,
        )
        for index, (label, count, href, css) in enumerate(items)
    ]
    return Chart(title, ident, bars, height=max(row, len(bars) * row))


def match_count(counts: Counter[tuple[str, str]], query: Query) -> int | None:
    """How many rows match the page's filters, when the counts can tell (status and reason filters only)."""
    where = query.where
    if any(value is not None for value in (where.gate_decision_id, where.policy_version, where.after_seq)):
        return None
    return sum(
        count
        for (status, reason), count in counts.items()
        if where.status in (None, status) and where.reason_code in (None, reason)
    )


# -- one decision ---------------------------------------------------------------------------------------------


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
class PolicyRow:
    """One row of a policy table as the detail page shows it, and whether it is the one that applied."""

    gate: str
    status: str
    reason: str
    limits: Limits
    applied: bool


def policy_rows(policy: BudgetPolicy, status: str, reason: str) -> list[PolicyRow]:
    """The policy's table as the README writes it, with the row that gave this decision its limits marked."""
    allowed = ComputeBudgetStatus.BUDGET_ALLOWED.value
    blocked = ComputeBudgetStatus.BUDGET_BLOCKED.value
    unassessable = ComputeBudgetStatus.BUDGET_UNASSESSABLE.value
    rows = [
        PolicyRow(
            "malformed (any rule of spec 3.1 broken)",
            unassessable,
            MALFORMED_GATE_DECISION,
            NO_LIMITS,
            status == unassessable and reason == MALFORMED_GATE_DECISION,
        ),
        PolicyRow(
            "status not eligible",
            blocked,
            "gate_ineligible / gate_blocked / gate_unassessable",
            NO_LIMITS,
            status == blocked,
        ),
    ]
    rows += [
        PolicyRow(f"eligible, {code}", allowed, code, limits, status == allowed and reason == code)
        for code, limits in policy.table.items()
    ]
    rows.append(
        PolicyRow(
            "eligible, any other reason",
            unassessable,
            UNKNOWN_GATE_REASON_CODE,
            NO_LIMITS,
            status == unassessable and reason == UNKNOWN_GATE_REASON_CODE,
        )
    )
    return rows


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


_HEADLINES = {
    "budget_allowed": "Allowed",
    "budget_blocked": "Blocked",
    "budget_unassessable": "Unassessable",
    "budget_zero": "Zero (reserved: a refusal)",
}


def detail(store: BudgetStore, budget_id: str) -> Detail | None:
    """The detail of the stored row `budget_id`, or None when no row has it."""
    raw = store.raw_row(budget_id)
    if raw is None:
        return None
    values = dict(zip(ROW_COLUMNS, raw, strict=True))
    seq = values["seq"]
    previous, following = store.neighbours(seq) if type(seq) is int else (None, None)
    status, reason = str(values["status"]), str(values["reason_code"])
    policy = POLICIES.get(values["policy_version"]) if isinstance(values["policy_version"], str) else None
    table = policy_rows(policy, status, reason) if policy is not None else None
    applied = next((row for row in table if row.applied), None) if table else None
    limit_names = ("max_candidates", "max_depth", "max_steps", "max_parallelism")
    limits: list[tuple[str, object, object]] = [
        (name, values[name], getattr(applied.limits, name) if applied else None) for name in limit_names
    ]
    limits.append(("max_wallclock_ms", values["max_wallclock_ms"], None))
    return Detail(
        raw=row_dict(raw),
        stored=readable(raw),
        headline=_HEADLINES.get(status, f"Unknown status {json.dumps(status)}"),
        status_class=status_class(status),
        gate_said=_gate_said(values["gate_input"]),
        gate_pretty=_pretty(values["gate_input"]),
        policy_version=str(values["policy_version"]),
        policy=table,
        applied=applied,
        limits=limits,
        previous=previous,
        previous_href=detail_href(previous.budget_id) if previous is not None else None,
        next=following,
        next_href=detail_href(following.budget_id) if following is not None else None,
        rederived=rederive(raw, previous),
        api_href="/api" + detail_href(values["budget_id"]),
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


# -- checkpoints ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrustedKey:
    """A `--trusted-key` as given: a verifier key (`name+keyhash+base64`) or a file holding one."""

    given: str
    key: str | None
    name: str | None
    key_hash: str | None
    problem: str | None


_VERIFIER_KEY = re.compile(r"([^+\s]+)\+([0-9a-f]{8})\+([A-Za-z0-9+/]+={0,2})")


def trusted_key(given: str) -> TrustedKey:
    """Read a `--trusted-key` value (a file path is read) and name its signer; never raises."""
    text = given
    if os.path.isfile(given):
        try:
            with open(given, encoding="utf-8") as handle:
                text = handle.read().strip()
        except (OSError, UnicodeDecodeError) as error:
            return TrustedKey(given, None, None, None, f"cannot read the key file: {error}")
    match = _VERIFIER_KEY.fullmatch(text.strip())
    if match is None:
        return TrustedKey(given, None, None, None, "not a verifier key (name+keyhash+base64)")
    return TrustedKey(given, match.group(0), match.group(1), match.group(2), None)


@dataclass(frozen=True, slots=True)
class SignedCheckpoints:
    """The store's signed checkpoints: its table, if any, and the newest of them."""

    table: str | None
    items: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {"table": self.table, "items": self.items}


@dataclass(frozen=True, slots=True)
class Checkpoints:
    """The checkpoints page: the head's checkpoint, the trusted keys, and the signed checkpoints."""

    head: Checkpoint | None  # None when the head cannot be read (then `head_problem` says why)
    head_href: str | None
    document: str
    trusted_keys: Sequence[TrustedKey]
    signed: SignedCheckpoints
    head_problem: str | None = None
    withheld: str | None = None  # why no checkpoint of the head is offered to keep (None: it is offered)


def checkpoints(
    store: BudgetStore,
    keys: Sequence[str],
    audit_report: str | None = None,
    checked: tuple[int, frozenset[int], str] | None = None,
    withheld: str | None = None,
) -> Checkpoints:
    """The checkpoints page's content (a head that cannot be read is said, not a failed page). With the last
    audit's report, a checkpoint whose size it found mismatched says so beside its signature: a valid signature
    says who signed, not that the rows still match. `checked`: (through seq, mismatched sizes, which audit) of the
    last audit this server ran from seq 0, which says for each checkpoint it covered whether its root matches.
    `withheld`: why the head's checkpoint must not be kept now (a broken guard, a row that does not hold): then
    none is offered."""
    if withheld is not None:
        return Checkpoints(
            None, None, "", [trusted_key(key) for key in keys],
            SignedCheckpoints(store.signed_checkpoint_table(),
                              _signed_items(store, keys, _mismatched_sizes(audit_report), checked)),
            withheld=withheld,
        )
    mismatched = _mismatched_sizes(audit_report)
    from compute_budget.errors import StoreDamaged

    try:
        head = store.checkpoint()
    except StoreDamaged as error:
        return Checkpoints(
            None, None, "", [trusted_key(key) for key in keys],
            SignedCheckpoints(store.signed_checkpoint_table(), _signed_items(store, keys, mismatched, checked)),
            head_problem=str(error),
        )
    return Checkpoints(
        head=head,
        head_href=detail_href(head.budget_id) if head.budget_id else None,
        document=json.dumps(head.to_dict(), indent=2),
        trusted_keys=[trusted_key(key) for key in keys],
        signed=SignedCheckpoints(store.signed_checkpoint_table(), _signed_items(store, keys, mismatched, checked)),
    )


def _mismatched_sizes(audit_report: str | None) -> frozenset[int]:
    """The tree sizes the audit report's checkpoint_mismatch findings name (none without a readable report)."""
    if audit_report is None:
        return frozenset()
    try:
        with open(audit_report, "rb") as handle:
            report = json.loads(handle.read(MAX_AUDIT_REPORT_BYTES))
        findings = report.get("findings", []) if isinstance(report, dict) else []
    except (OSError, ValueError, RecursionError):
        return frozenset()
    return frozenset(
        item["seq"] for item in findings if isinstance(item, dict) and item.get("kind") == "checkpoint_mismatch"
        and type(item.get("seq")) is int
    )


def _root_check(tree_size: int, checked: tuple[int, frozenset[int], str] | None) -> str:
    """Whether a stored checkpoint's root matches the rows, as far as an audit this server ran knows."""
    if checked is None or tree_size > checked[0]:
        return "not checked since the server started: run the audit (from seq 0) to check it"
    _, bad, which = checked
    return f"NO ({which}): the rows no longer give this root" if tree_size in bad else f"yes ({which})"


def _signed_items(
    store: BudgetStore,
    keys: Sequence[str],
    mismatched: frozenset[int] = frozenset(),
    checked: tuple[int, frozenset[int], str] | None = None,
) -> list[dict[str, Any]]:
    """The newest signed checkpoints, each with its root, its signers, and whether a trusted key verifies it."""
    from compute_budget.core.log.note import VerifierKey, parse_note, verify_note
    from compute_budget.errors import NoteError

    verifiers = []
    for key in keys:
        known = trusted_key(key)
        if known.key is not None:
            try:
                verifiers.append(VerifierKey.parse(known.key))
            except NoteError:
                continue
    items: list[dict[str, Any]] = []
    for _, tree_size, note in store.newest_signed_checkpoints():
        if tree_size is None or note is None:
            items.append({"tree_size": "?", "root": "", "signers": [], "root_check": "unreadable",
                          "trusted": "unreadable: a value is not of its column's type (run `compute-budget audit`)"})
            continue
        try:
            found = Checkpoint.from_note(note)
            _, signatures = parse_note(note)
            outcome = verify_note(note, verifiers) if verifiers else None
        except (NoteError, ValueError) as error:
            items.append({"tree_size": tree_size, "root": "", "signers": [], "trusted": f"unreadable: {error}",
                          "root_check": "unreadable"})
            continue
        if outcome is None:
            trusted = "no key given"
        elif outcome.failed:
            trusted = "FAILS: " + ", ".join(key.name for key in outcome.failed)
        elif outcome.verified:
            trusted = "yes: " + ", ".join(key.name for key in outcome.verified)
        else:
            trusted = "no trusted signature"
        if tree_size in mismatched:
            trusted += " (but the last audit found this root no longer matches the rows: do not keep it)"
        root = base64.b64encode(found.root).decode("ascii") if found.root is not None else ""
        items.append(
            {
                "tree_size": tree_size,
                "root": root,
                "signers": [f"{signature.name}+{signature.key_hash:08x}" for signature in signatures],
                "trusted": trusted,
                "root_check": _root_check(tree_size, checked),
            }
        )
    return items


def is_budget_id(text: str) -> bool:
    """True for 64 lowercase hex digits."""
    return _HEX64.fullmatch(text) is not None


MAX_AUDIT_REPORT_BYTES = 64 << 20


def needs_own_counts(query: Query) -> bool:
    """True when the charts must count under filters the cached whole-store counts cannot apply (gate, policy
    version, a seq range): they are then drawn by `/charts/{which}.svg`, loaded as images beside the page."""
    where = query.where
    return any(value is not None for value in (where.gate_decision_id, where.policy_version, where.after_seq,
                                               where.before_seq))


BAR_COLOURS = {"allowed": "#1a7f37", "blocked": "#cf222e", "unassessable": "#9a6700", "zero": "#6e7781",
               "reason": "#0969da"}


def chart_svg(chart: Chart) -> str:
    """A chart as a standalone SVG document (colours as attributes: it is shown as an image, outside the CSS)."""
    from xml.sax.saxutils import escape, quoteattr

    rows = []
    for bar in chart.bars:
        fill = BAR_COLOURS.get(bar.css, "#8250df")
        weight = ' font-weight="bold"' if bar.selected else ""
        rows.append(
            f'<text x="{chart.label_width - 8}" y="{bar.y + 17}" text-anchor="end"{weight}>{escape(bar.label)}</text>'
            f'<rect x="{chart.label_width}" y="{bar.y + 4}" width="{bar.width}" height="{chart.row_height - 8}" '
            f'fill="{fill}"/><text x="{chart.label_width + bar.width + 6}" y="{bar.y + 17}">{bar.count:,}</text>'
        )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {chart.width} {chart.height}" '
        f'width="{chart.width}" height="{chart.height}" font-family="sans-serif" font-size="14" role="img" '
        f'aria-label={quoteattr(chart.title)}><title>{escape(chart.title)}</title>{"".join(rows)}</svg>'
    )
