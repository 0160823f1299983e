"""Budget policies as data, registered by version, and the one `decide` that reads them (spec section 3)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from compute_budget.core.canonical import canonical_sha256
from compute_budget.core.policy.gate import NESTING_DEFECT, CheckedGate, check_gate, is_valid_text, nests_too_deep
from compute_budget.core.policy.hashing import hashed_payload
from compute_budget.core.policy.types import (
    DECISION_FIELDS,
    ComputeBudgetDecision,
    ComputeBudgetStatus,
    SearchGateDecision,
    SearchGateStatus,
    SourceSpan,
)
from compute_budget.errors import ArgumentTypeError, MalformedGate, UnsupportedPolicyVersion

COMPUTE_BUDGET_POLICY_VERSION = "compute_budget.v1"

MALFORMED_GATE_DECISION = "malformed_gate_decision"
UNKNOWN_GATE_REASON_CODE = "unknown_gate_reason_code"


@dataclass(frozen=True, slots=True)
class Limits:
    """One row of a policy table: the ceilings granted to an eligible gate with one reason code.

    `max_wallclock_ms` is never hashed (spec 3.3) but the policy fixes it all the same: v1 leaves it null.
    """

    max_candidates: int
    max_depth: int
    max_steps: int
    max_parallelism: int
    max_wallclock_ms: int | None = None


NO_LIMITS = Limits(0, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class BudgetTable:
    """The budget table of one policy version: a fixed table from eligible reason codes to limits; everything else
    gets none. `decide` evaluates a gate under it (spec 3.2)."""

    version: str
    table: Mapping[str, Limits]

    def decide(
        self,
        gate: object,
        *,
        defect: str | None = None,
        defect_rule: str = "3.1.7",
        repeated_keys: Collection[str] = (),
        nesting_checked: bool = False,
    ) -> ComputeBudgetDecision:
        """Map any gate to a decision; never raises.

        For a gate that came as text: `defect` says how the text broke rule `defect_rule` (3.1.7 or 3.1.8),
        `repeated_keys` are the keys its top-level object repeated (copied as "", spec 3.2), and
        `nesting_checked` says the text's nesting was already measured (rule 3.1.8), so the value need not be.
        """
        try:
            if defect is not None:
                raise MalformedGate(defect_rule, defect)
            valid = check_gate(gate)
        except Exception as error:  # a hostile mapping can raise anything: still a malformed gate, never a crash
            return self._rejected(gate, error, repeated_keys, nesting_checked=nesting_checked)
        return self._evaluate(valid)

    def _rejected(
        self, gate: object, error: Exception, repeated_keys: Collection[str], *, nesting_checked: bool
    ) -> ComputeBudgetDecision:
        """The decision for a gate that validation (or its text) rejected.

        Rule 3.1.8 comes first: a gate nested more than 32 levels deep copies nothing, whatever else is wrong
        with it. Only rejected gates need measuring: a gate validation accepts nests at most 3 levels (a str or
        int that is also a mapping is measured where validation meets it), so the decision is the one a check
        before validation would give, at no cost to well-formed gates.
        """
        if isinstance(error, MalformedGate) and error.rule == "3.1.8":
            return self._malformed(gate, error.message, copy=False)
        if not nesting_checked:
            try:
                too_deep = nests_too_deep(gate)
            except Exception:  # unreadable all the way down: validation's own reason stands
                too_deep = False
            if too_deep:
                return self._malformed(gate, NESTING_DEFECT, copy=False)
        if isinstance(error, MalformedGate):
            return self._malformed(gate, error.message, repeated_keys)
        return self._malformed(gate, f"the gate could not be read ({type(error).__name__})", repeated_keys)

    def _evaluate(self, gate: CheckedGate) -> ComputeBudgetDecision:
        status = gate.status
        if status is not SearchGateStatus.ELIGIBLE:
            return self._build(
                gate.decision_id,
                gate.policy_version,
                gate.input_digest,
                ComputeBudgetStatus.BUDGET_BLOCKED,
                "gate_" + status.value,
                NO_LIMITS,
                gate.evidence_spans,
                gate.span_payload,
                f"Blocked: the search gate's status is {status.value} (reason {_quote(gate.reason_code)}), "
                "and only an eligible gate can receive compute, so every limit is 0.",
            )
        limits = self.table.get(gate.reason_code)
        if limits is None:
            return self._build(
                gate.decision_id,
                gate.policy_version,
                gate.input_digest,
                ComputeBudgetStatus.BUDGET_UNASSESSABLE,
                UNKNOWN_GATE_REASON_CODE,
                NO_LIMITS,
                gate.evidence_spans,
                gate.span_payload,
                f"Unassessable: the gate is eligible but its reason code {_quote(gate.reason_code)} is not in "
                f"policy {self.version}, so the budget fails closed and every limit is 0.",
            )
        return self._build(
            gate.decision_id,
            gate.policy_version,
            gate.input_digest,
            ComputeBudgetStatus.BUDGET_ALLOWED,
            gate.reason_code,
            limits,
            gate.evidence_spans,
            gate.span_payload,
            _allowed_explanation(self.version, gate.reason_code, limits),
        )

    def _malformed(
        self, gate: object, why: str, repeated_keys: Collection[str] = (), *, copy: bool = True
    ) -> ComputeBudgetDecision:
        """A malformed gate's decision: valid identifying strings copied (spec 3.2), except keys the top-level
        object repeated, and nothing at all from a gate nested too deeply (rule 3.1.8)."""

        def copied(key: str) -> str:
            return _copied(gate, key) if copy and key not in repeated_keys else ""

        return self._build(
            copied("decision_id"),
            copied("policy_version"),
            copied("input_digest"),
            ComputeBudgetStatus.BUDGET_UNASSESSABLE,
            MALFORMED_GATE_DECISION,
            NO_LIMITS,
            (),
            [],
            f"Unassessable: the gate decision is malformed ({why}), so the budget fails closed and every limit is 0.",
        )

    def _build(
        self,
        gate_decision_id: str,
        gate_policy_version: str,
        gate_input_digest: str,
        status: ComputeBudgetStatus,
        reason_code: str,
        limits: Limits,
        evidence_spans: tuple[SourceSpan, ...],
        span_payload: list[dict[str, Any]],
        explanation: str,
    ) -> ComputeBudgetDecision:
        payload = hashed_payload(
            self.version,
            gate_decision_id,
            gate_policy_version,
            gate_input_digest,
            status.value,
            reason_code,
            limits.max_candidates,
            limits.max_depth,
            limits.max_steps,
            limits.max_parallelism,
            span_payload,
        )
        return _new_decision(
            (
                canonical_sha256(payload),
                self.version,
                gate_decision_id,
                gate_policy_version,
                gate_input_digest,
                status,
                reason_code,
                limits.max_candidates,
                limits.max_depth,
                limits.max_steps,
                limits.max_wallclock_ms,
                limits.max_parallelism,
                evidence_spans,
                explanation,
            )
        )


def _slot_setter(name: str) -> Callable[[ComputeBudgetDecision, Any], None]:
    setter: Callable[[ComputeBudgetDecision, Any], None] = getattr(ComputeBudgetDecision, name).__set__
    return setter


(
    _set_budget_id,
    _set_policy_version,
    _set_gate_decision_id,
    _set_gate_policy_version,
    _set_gate_input_digest,
    _set_status,
    _set_reason_code,
    _set_max_candidates,
    _set_max_depth,
    _set_max_steps,
    _set_max_wallclock_ms,
    _set_max_parallelism,
    _set_evidence_spans,
    _set_explanation,
) = (_slot_setter(name) for name in DECISION_FIELDS)


def _new_decision(values: tuple[Any, ...]) -> ComputeBudgetDecision:
    # Writes the slots directly: the frozen dataclass __init__ costs twice as much on the hot path, and every
    # value here was produced by the policy itself. Unrolled on purpose: a loop costs as much as the writes.
    decision = object.__new__(ComputeBudgetDecision)
    _set_budget_id(decision, values[0])
    _set_policy_version(decision, values[1])
    _set_gate_decision_id(decision, values[2])
    _set_gate_policy_version(decision, values[3])
    _set_gate_input_digest(decision, values[4])
    _set_status(decision, values[5])
    _set_reason_code(decision, values[6])
    _set_max_candidates(decision, values[7])
    _set_max_depth(decision, values[8])
    _set_max_steps(decision, values[9])
    _set_max_wallclock_ms(decision, values[10])
    _set_max_parallelism(decision, values[11])
    _set_evidence_spans(decision, values[12])
    _set_explanation(decision, values[13])
    return decision


@functools.lru_cache(maxsize=256)
def _allowed_explanation(version: str, reason_code: str, limits: Limits) -> str:
    wallclock = "" if limits.max_wallclock_ms is None else f", {limits.max_wallclock_ms} ms of wall-clock"
    return (
        f"Allowed: the gate is eligible with reason {reason_code}, so policy {version} grants at most "
        f"{limits.max_candidates} candidates, depth {limits.max_depth}, {limits.max_steps} steps{wallclock} and "
        f"parallelism {limits.max_parallelism}; these are ceilings only and authorise nothing."
    )


def _copied(gate: object, key: str) -> str:
    """A malformed gate's identifying field, copied only when it is valid text (spec 3.2)."""
    try:
        if isinstance(gate, SearchGateDecision):
            value = getattr(gate, key)
        elif isinstance(gate, Mapping):
            value = gate.get(key)
        else:
            return ""
    except Exception:  # a hostile mapping may raise on lookup: then there is nothing to copy
        return ""
    if not isinstance(value, str):
        return ""
    text = str.__str__(value)  # plain text first: a str subclass's own methods may raise or lie
    return text if is_valid_text(text) else ""


def _quote(text: str) -> str:
    """Show a gate-supplied code unambiguously (escaped, so control characters cannot mislead a reader)."""
    return json.dumps(text)


V1 = BudgetTable(
    version=COMPUTE_BUDGET_POLICY_VERSION,
    table={
        "eligible_missing_role": Limits(5, 2, 10, 1),
        "eligible_missing_relation": Limits(5, 2, 10, 1),
        "eligible_missing_proposal": Limits(3, 1, 5, 1),
        "eligible_target_unbound": Limits(5, 2, 10, 1),
    },
)

# Every policy a stored row or a decision may name. Recording under a policy needs it here, because the audit and
# admission re-derive each decision under the policy its own `policy_version` names, looked up in this table.
POLICIES: Mapping[str, BudgetTable] = {V1.version: V1}

# The name this class had before it said what it is: deprecated, kept for callers (docs/upgrading.md).
BudgetPolicy = BudgetTable


def policy_for(version: str) -> BudgetTable:
    """The policy registered under `version`; raises `UnsupportedPolicyVersion` for any other."""
    try:
        return POLICIES[version]
    except (KeyError, TypeError):
        raise UnsupportedPolicyVersion(f"no budget policy is registered under version {version!r}") from None


def registered_policy(policy: object) -> BudgetTable:
    """`policy` itself when it is the `BudgetTable` registered under its version, so that what is recorded under it
    can be re-derived; raises `ArgumentTypeError` or `UnsupportedPolicyVersion` otherwise."""
    if not isinstance(policy, BudgetTable):
        raise ArgumentTypeError(f"policy must be a BudgetTable, not {type(policy).__name__}")
    if POLICIES.get(policy.version) != policy:
        raise UnsupportedPolicyVersion(
            f"policy {policy.version!r} is not the one registered in POLICIES under that version; register it "
            "there first, or the audit could not re-derive what is recorded under it"
        )
    return policy


def decide(gate: object, policy: BudgetTable = V1) -> ComputeBudgetDecision:
    """Decide a gate (a `SearchGateDecision` or a parsed JSON object) under `policy` (default v1); never raises."""
    return policy.decide(gate)
