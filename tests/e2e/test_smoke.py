"""The package imports and decides the bundled examples."""

from compute_budget import COMPUTE_BUDGET_POLICY_VERSION, ComputeBudgetStatus, decide
from tests.conftest import make_gate


def test_policy_version_constant() -> None:
    """The policy version constant is the contract's string."""
    assert COMPUTE_BUDGET_POLICY_VERSION == "compute_budget.v1"


def test_example_gate_is_allowed() -> None:
    """An eligible gate with a known reason is allowed with the v1 limits."""
    decision = decide(make_gate())
    assert decision.status is ComputeBudgetStatus.BUDGET_ALLOWED
    assert (decision.max_candidates, decision.max_depth, decision.max_steps, decision.max_parallelism) == (5, 2, 10, 1)
