"""Consumer admission (spec section 4): the check a search run makes before it starts."""

from __future__ import annotations

from compute_budget.core.policy.hashing import compute_budget_id
from compute_budget.core.policy.parse import decide_json
from compute_budget.core.policy.rules import POLICIES, BudgetTable
from compute_budget.core.policy.types import REDERIVED_FIELDS, ComputeBudgetDecision, ComputeBudgetStatus
from compute_budget.errors import ArgumentTypeError, BudgetRefused, InputNotJson, RefusalReason

# Re-deriving for admission also compares the wall-clock limit: never hashed, but fixed by the policy's table.
_ADMISSION_COMPARED = (*REDERIVED_FIELDS, "max_wallclock_ms")


def admit(decision: ComputeBudgetDecision, *, gate: object = None) -> None:
    """Return None when `decision` may bound a run; otherwise raise `BudgetRefused` with its reason.

    Checks run in this order, first failure wins: policy version, status, invalid limits (revision 3: under v1
    `max_wallclock_ms` must be null, under any policy it must be what the policy's table gives the reason code,
    and no limit may be negative), exhausted limits, `budget_id`, and (when
    `gate` is given) re-derivation. A version is checked first because nothing else of a decision can be read
    without its policy; status and limits come before the hash so the plainest reason is the one reported.
    """
    if not isinstance(decision, ComputeBudgetDecision):
        raise ArgumentTypeError(f"admit takes a ComputeBudgetDecision, not {type(decision).__name__}")
    policy = POLICIES.get(decision.policy_version) if isinstance(decision.policy_version, str) else None
    if policy is None:
        raise BudgetRefused(
            RefusalReason.UNSUPPORTED_POLICY_VERSION,
            f"policy version {decision.policy_version!r} is not supported (known: {', '.join(POLICIES)})",
        )
    if decision.status != ComputeBudgetStatus.BUDGET_ALLOWED:
        raise BudgetRefused(
            RefusalReason.STATUS_NOT_ALLOWED, f"status is {decision.status}, only budget_allowed may run"
        )
    invalid = _invalid_limits(decision, policy)
    if invalid:
        raise BudgetRefused(RefusalReason.LIMITS_INVALID, invalid)
    if not _positive(decision.max_candidates) or not _positive(decision.max_steps):
        raise BudgetRefused(
            RefusalReason.LIMITS_EXHAUSTED,
            f"max_candidates is {decision.max_candidates} and max_steps is {decision.max_steps}",
        )
    try:
        recomputed = compute_budget_id(decision)
    except Exception:  # fields of the wrong type cannot hash to anything: that is a mismatch, not a crash
        recomputed = "<unhashable>"
    if recomputed != decision.budget_id:
        raise BudgetRefused(
            RefusalReason.BUDGET_ID_MISMATCH,
            f"budget_id {decision.budget_id} does not match {recomputed} recomputed from its fields",
        )
    if gate is not None:
        if isinstance(gate, str | bytes):
            try:
                rederived = decide_json(gate, policy)
            except InputNotJson as error:
                raise BudgetRefused(RefusalReason.GATE_REDERIVE_MISMATCH, f"the given gate text is {error}") from None
        else:
            rederived = policy.decide(gate)
        differing = [name for name in _ADMISSION_COMPARED if getattr(rederived, name) != getattr(decision, name)]
        if differing:
            raise BudgetRefused(
                RefusalReason.GATE_REDERIVE_MISMATCH,
                f"deciding the given gate does not reproduce this decision (differs in {', '.join(differing)})",
            )


def _positive(limit: object) -> bool:
    """A limit that is 0 (or, never emitted but not to be trusted, negative or not an integer) is exhausted."""
    return isinstance(limit, int) and not isinstance(limit, bool) and limit > 0


def _invalid_limits(decision: ComputeBudgetDecision, policy: BudgetTable) -> str:
    """Why the decision's limits are ones its policy never gives (spec 4, revision 3), or ""."""
    wallclock = decision.max_wallclock_ms
    if wallclock is not None and not any(limits.max_wallclock_ms is not None for limits in policy.table.values()):
        return f"max_wallclock_ms is {wallclock!r}; policy {policy.version} never sets a wall-clock limit"
    granted = policy.table.get(decision.reason_code) if isinstance(decision.reason_code, str) else None
    expected = granted.max_wallclock_ms if granted is not None else None
    if wallclock != expected or type(wallclock) is not type(expected):  # the limit is not hashed: check it here
        return (
            f"max_wallclock_ms is {wallclock!r}; policy {policy.version} gives {expected!r} "
            f"for reason {decision.reason_code!r}"
        )
    for name in ("max_candidates", "max_depth", "max_steps", "max_parallelism"):
        value = getattr(decision, name)
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            return f"{name} is {value}: a limit is never negative"
    return ""
