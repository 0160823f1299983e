"""The pure check of stored rows (spec sections 6 and 8): re-derive, re-hash and re-link each row.

The auditor streams rows through `check_row`; `copy` verifies each row it carries with the same function.
It reads no database: a row is a tuple of values in `row.ROW_COLUMNS` order, read by name as a `row.StoredRow`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from compute_budget.core.chain import chain_hash
from compute_budget.core.leaf import leaf_and_chain, unreadable_leaf_hash
from compute_budget.core.log.head import GENESIS_CHAIN_HASH
from compute_budget.core.policy.hashing import compute_budget_id, spans_json
from compute_budget.core.policy.parse import ParsedGate, decide_parsed, parse_gate_json
from compute_budget.core.policy.rules import POLICIES
from compute_budget.core.policy.types import REDERIVED_FIELDS, ComputeBudgetDecision
from compute_budget.core.row import ROW_COLUMNS, StoredRow, stored_from_row
from compute_budget.errors import InputNotJson, MalformedDecision, clip


class FindingKind(StrEnum):
    """The kinds of finding of spec sections 6, 8 and 9."""

    BUDGET_ID_MISMATCH = "budget_id_mismatch"
    REDERIVE_MISMATCH = "rederive_mismatch"
    CHAIN_BREAK = "chain_break"
    UNSUPPORTED_POLICY_VERSION = "unsupported_policy_version"
    MALFORMED_ROW = "malformed_row"
    CHECKPOINT_MISMATCH = "checkpoint_mismatch"
    BAD_SIGNATURE = "bad_signature"
    UNATTESTED_ROWS = "unattested_rows"
    SCHEMA_TAMPERED = "schema_tampered"
    UNWITNESSED_ROWS = "unwitnessed_rows"  # spec revision 3, section 9.3
    PUBLISHED_MISMATCH = "published_mismatch"  # spec revision 4, section 10
    UNPUBLISHED_ROWS = "unpublished_rows"  # spec revision 4, section 10.2


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem with one row (or with the chain as a whole, where `seq` may be None)."""

    kind: FindingKind
    budget_id: str | None
    seq: int | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        """The finding's JSON form."""
        return {"kind": self.kind.value, "budget_id": self.budget_id, "seq": self.seq, "detail": self.detail}


@dataclass(slots=True)
class RangeResult:
    """What checking a run of rows found: counts, findings and the last link it left."""

    rows: int = 0
    findings: list[Finding] = field(default_factory=list)
    status_counts: Counter[str] = field(default_factory=Counter)
    reason_counts: Counter[str] = field(default_factory=Counter)
    policy_counts: Counter[str] = field(default_factory=Counter)
    last_seq: int = 0
    last_chain_hash: str = GENESIS_CHAIN_HASH
    last_budget_id: str | None = None
    # The leaf hash of every row checked, in order, for the Merkle tree: the caller drains it as it goes.
    leaves: list[bytes] = field(default_factory=list)


_INTEGER_COLUMNS = ("seq", "max_candidates", "max_depth", "max_steps", "max_parallelism")
# The plain (non-span) fields re-derivation compares: every hashed field but budget_id and evidence_spans.
_COMPARED = tuple(name for name in REDERIVED_FIELDS if name not in ("budget_id", "evidence_spans"))


_NONE = type(None)
# The column types of a readable row, in `ROW_COLUMNS` order (max_wallclock_ms: null in v1, or an integer).
_ROW_TYPES = (int, str, str, str, str, str, str, str, int, int, int, _NONE, int, str, str, str, str, str)
_ROW_TYPES_WITH_WALLCLOCK = (*_ROW_TYPES[:11], int, *_ROW_TYPES[12:])


def check_row(raw: Sequence[Any], prev_seq: int, prev_chain: str, result: RangeResult) -> tuple[int, str]:
    """Check one stored row (values in `ROW_COLUMNS` order); returns the (seq, chain_hash) it leaves.

    The common, clean row takes the fast path: one type check, one chain hash, one re-derivation and one
    comparison of the stored fields; findings are worked out in detail only for rows that fail.
    """
    row = raw if type(raw) is StoredRow else StoredRow._make(raw)  # `row.named`, inlined on the hot path
    result.rows += 1
    types = tuple(map(type, row))
    if types != _ROW_TYPES and types != _ROW_TYPES_WITH_WALLCLOCK:
        result.leaves.append(unreadable_leaf_hash(row.chained))
        return _unreadable_row(row, prev_seq, prev_chain, result)
    seq, budget_id, policy_version, status, reason_code = (
        row.seq,
        row.budget_id,
        row.policy_version,
        row.status,
        row.reason_code,
    )
    stored_chain = row.chain_hash
    findings = result.findings
    result.status_counts[status] += 1
    result.reason_counts[reason_code] += 1
    result.policy_counts[policy_version] += 1
    result.last_seq, result.last_chain_hash, result.last_budget_id = seq, stored_chain, budget_id

    # The chain: this row must link to the stored row before it. The leaf comes from the same serialisation.
    leaf, computed_chain = leaf_and_chain(prev_chain, row.chained)
    result.leaves.append(leaf)
    if seq != prev_seq + 1 or computed_chain != stored_chain:
        findings.append(_chain_break(row, prev_seq, prev_chain))

    policy = POLICIES.get(policy_version)
    if policy is None:
        findings.append(_unsupported_policy(budget_id, seq, policy_version))
        return seq, stored_chain
    try:
        parsed = parse_gate_json(row.gate_input)
    except InputNotJson as error:
        findings.append(Finding(FindingKind.MALFORMED_ROW, budget_id, seq, f"gate_input is {error}"))
        return seq, stored_chain
    derived = decide_parsed(parsed, policy)
    if _same_fields(row, derived) and spans_json(derived.evidence_spans) == row.evidence_spans:
        # Every hashed field equals the re-derived decision's, so its budget_id is the recomputed one.
        if derived.budget_id != budget_id:
            findings.append(_budget_id_mismatch(budget_id, seq, derived.budget_id))
        return seq, stored_chain
    findings.extend(_rederive_findings(row, derived, parsed))
    return seq, stored_chain


def _unsupported_policy(budget_id: str, seq: int, policy_version: str) -> Finding:
    """The finding for a row whose policy version no registered policy has: nothing to re-derive it with."""
    return Finding(
        FindingKind.UNSUPPORTED_POLICY_VERSION,
        budget_id,
        seq,
        f"policy_version {policy_version!r} has no registered policy (known: {', '.join(POLICIES)}); its decision "
        "cannot be re-derived",
    )


def _budget_id_mismatch(budget_id: str, seq: int, recomputed: str) -> Finding:
    """The finding for a row whose stored fields hash to `recomputed`, not to its stored budget_id."""
    return Finding(
        FindingKind.BUDGET_ID_MISMATCH, budget_id, seq,
        f"the stored fields hash to {recomputed}, not to the stored budget_id",
    )


def _same_fields(row: StoredRow, derived: ComputeBudgetDecision) -> bool:
    """Whether the row stores every plain field the policy re-derives (all but budget_id and the spans)."""
    return bool(
        derived.policy_version == row.policy_version
        and derived.gate_decision_id == row.gate_decision_id
        and derived.gate_policy_version == row.gate_policy_version
        and derived.gate_input_digest == row.gate_input_digest
        and derived.status == row.status
        and derived.reason_code == row.reason_code
        and derived.max_candidates == row.max_candidates
        and derived.max_depth == row.max_depth
        and derived.max_steps == row.max_steps
        and derived.max_parallelism == row.max_parallelism
        and derived.max_wallclock_ms == row.max_wallclock_ms
    )


def _chain_break(row: StoredRow, prev_seq: int, prev_chain: str) -> Finding:
    seq = row.seq
    problems = []
    if seq != prev_seq + 1:
        problems.append(
            f"seq jumps from {prev_seq} to {seq}: {seq - prev_seq - 1} row(s) missing"
            if seq > prev_seq + 1
            else f"seq {seq} follows seq {prev_seq}: rows reordered or duplicated"
        )
    if chain_hash(prev_chain, row.chained) != row.chain_hash:
        problems.append(
            f"chain_hash does not follow from row {prev_seq} and this row's columns: "
            "a row here was edited, inserted, deleted or reordered"
        )
    return Finding(FindingKind.CHAIN_BREAK, row.budget_id, seq, "; ".join(problems))


def _unreadable_row(row: StoredRow, prev_seq: int, prev_chain: str, result: RangeResult) -> tuple[int, str]:
    seq, budget_id, stored_chain = row.seq, row.budget_id, row.chain_hash
    result.findings.append(
        Finding(
            FindingKind.MALFORMED_ROW,
            budget_id if isinstance(budget_id, str) else None,
            seq if type(seq) is int else None,
            f"cannot read the row: {_wrong_types(row)}",
        )
    )
    next_seq = seq if type(seq) is int else prev_seq + 1
    return next_seq, stored_chain if isinstance(stored_chain, str) else prev_chain


def _rederive_findings(row: StoredRow, derived: ComputeBudgetDecision, parsed: ParsedGate) -> list[Finding]:
    """Field-by-field differences between a stored row and its re-derived decision, and its hash check."""
    seq, budget_id = row.seq, row.budget_id
    stored = row._asdict()
    differences = [
        f"{name} stored {_shown(stored[name])}, policy gives {_shown(getattr(derived, name))}"
        for name in _COMPARED
        if stored[name] != getattr(derived, name)
    ]
    if stored["max_wallclock_ms"] != derived.max_wallclock_ms:  # never hashed, but the policy fixes it (revision 3)
        differences.append(
            f"max_wallclock_ms stored {_shown(stored['max_wallclock_ms'])}, policy "
            f"{stored['policy_version']} gives {_shown(derived.max_wallclock_ms)}"
        )
    derived_spans = spans_json(derived.evidence_spans)
    if stored["evidence_spans"] != derived_spans:
        differences.append(
            f"evidence_spans stored {clip(stored['evidence_spans'], 120)}, policy gives {clip(derived_spans, 120)}"
        )
    detail = "; ".join(differences) + _revision_2_note(parsed)
    findings = [Finding(FindingKind.REDERIVE_MISMATCH, budget_id, seq, detail)]
    recomputed = _recompute_budget_id(row)
    if isinstance(recomputed, MalformedDecision):
        findings.append(
            Finding(FindingKind.MALFORMED_ROW, budget_id, seq, f"the stored decision cannot be read: {recomputed}")
        )
    elif recomputed != budget_id:
        findings.append(_budget_id_mismatch(budget_id, seq, recomputed))
    return findings


_COPIED_KEYS = frozenset({"decision_id", "policy_version", "input_digest"})


def _revision_2_note(parsed: ParsedGate) -> str:
    """Why a row stored before spec revision 2 may no longer re-derive: its gate is one revision 2 decides
    differently (a repeated top-level key that is copied, or nesting deeper than 32 levels); else ""."""
    if parsed.too_deep:
        return (
            " (spec revision 2: a gate nested more than 32 levels deep is now malformed and copies nothing; "
            "a row stored before it may hold the copied fields)"
        )
    repeated = sorted(_COPIED_KEYS & parsed.repeated)
    if repeated:
        return (
            f' (spec revision 2: a key repeated in the gate\'s top-level object now copies as "": '
            f"{', '.join(repeated)}; a row stored before it may hold one of its values)"
        )
    return ""


def _wrong_types(row: StoredRow) -> str:
    wrong = []
    for name, value in zip(ROW_COLUMNS, row, strict=True):
        if name in _INTEGER_COLUMNS:
            ok = type(value) is int
        elif name == "max_wallclock_ms":
            ok = value is None or type(value) is int
        else:
            ok = type(value) is str
        if not ok:
            kind = "bytes (a blob, or text that is not UTF-8)" if isinstance(value, bytes) else type(value).__name__
            wrong.append(f"{name} is {kind}")
    return ", ".join(wrong)


def _recompute_budget_id(row: StoredRow) -> str | MalformedDecision:
    """The budget_id the stored fields hash to, or why the stored fields cannot be read as a decision."""
    try:
        return compute_budget_id(stored_from_row(row).decision)
    except MalformedDecision as error:
        return error
    except (ValueError, TypeError) as error:
        return MalformedDecision(str(error))


def _shown(value: object) -> str:
    """A value as a person reads it in a detail: strings (enum members too) quoted, numbers as they are."""
    return repr(str.__str__(value)) if isinstance(value, str) else repr(value)
