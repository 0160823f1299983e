"""The public surface: what `compute_budget.__all__` names is importable, and a client's type checker sees it."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import pytest

import compute_budget

CLIENT = textwrap.dedent(
    """
    from compute_budget import (
        AuditReport, BatchResult, BudgetStore, ChainHead, Checkpoint, ConsistencyProof, GateResult, ProofBundle,
        ProofVerification, RecordResult, RowCheck, SkippedConflict, StoreClosed, StoredDecision, VerifierKey, audit,
        decide, prove, prove_consistency, verify_consistency, verify_proof,
    )

    def practice(path: str, gate: dict[str, object], key: VerifierKey) -> tuple[str, int, bool]:
        with BudgetStore.open(path, signing_key="writer.key") as store:
            result: RecordResult = store.{record}(gate)
            batch: BatchResult = store.record_many([gate], results=True, on_conflict="skip")
            per_gate: tuple[GateResult, ...] = batch.results
            skipped: tuple[SkippedConflict, ...] = batch.conflicts
            stored: StoredDecision | None = store.get(result.decision.budget_id)
            by_gate: list[StoredDecision] = store.find_by_gate("gate-0001")
            check: RowCheck | None = store.check(result.decision.budget_id)
            head: ChainHead = store.head()
            checkpoint: Checkpoint = store.checkpoint()
            note: str = store.signed_checkpoint(["writer.key"])
        try:
            store.count()
        except StoreClosed:
            pass
        report: AuditReport = audit(path, checkpoint=checkpoint, trusted_keys=[key])
        bundle: ProofBundle = prove(result.decision.budget_id, path)
        outcome: ProofVerification = verify_proof(bundle.to_json(), [key], origin=checkpoint.origin)
        proof: ConsistencyProof = prove_consistency(note, path, trusted_keys=[key])
        assert stored is not None and batch.new >= 0 and head.seq >= 0 and per_gate and not skipped
        assert by_gate and check is not None and check.holds and outcome.valid
        assert verify_consistency(proof, old=checkpoint)
        return decide(gate).budget_id, result.seq, report.clean
    """
)


@pytest.fixture(scope="module")
def type_checked(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """One `mypy --strict` run over two clients: `client.py` as written, and `typo.py` calling `store.recrod(...)`
    (one run: most of mypy's time is reading compute_budget's own types, shared by both files)."""
    folder = tmp_path_factory.mktemp("mypy")
    (folder / "client.py").write_text(CLIENT.format(record="record"), encoding="utf-8")
    (folder / "typo.py").write_text(CLIENT.format(record="recrod"), encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(folder / "cache"),
         "client.py", "typo.py"],
        cwd=folder, capture_output=True, text=True, check=False,
    )


def _errors_in(done: subprocess.CompletedProcess[str], file_name: str) -> list[str]:
    return [line for line in done.stdout.splitlines() if line.startswith(f"{file_name}:")]


@pytest.mark.slow
def test_a_client_program_type_checks_against_the_real_types(
    type_checked: subprocess.CompletedProcess[str],
) -> None:
    """mypy --strict accepts a client using the store, the audit and the results with their real types."""
    assert type_checked.returncode in (0, 1), type_checked.stdout + type_checked.stderr  # 2: mypy itself failed
    assert _errors_in(type_checked, "client.py") == [], type_checked.stdout


@pytest.mark.slow
def test_a_typo_in_a_client_program_fails_type_checking(type_checked: subprocess.CompletedProcess[str]) -> None:
    """`store.recrod(...)` is an error for mypy: the lazily loaded BudgetStore is not `Any`."""
    assert type_checked.returncode == 1
    assert any('"BudgetStore" has no attribute "recrod"' in line for line in _errors_in(type_checked, "typo.py"))


def test_every_public_name_resolves() -> None:
    """Every name in `__all__` is an attribute of the package (lazy ones load on first use)."""
    for name in compute_budget.__all__:
        assert getattr(compute_budget, name) is not None, name


def test_dir_lists_the_whole_public_api() -> None:
    """`dir(compute_budget)` names every public name, the lazily loaded ones included (issue 28, item 12)."""
    listed = dir(compute_budget)
    assert set(compute_budget.__all__) <= set(listed)
    assert listed == sorted(listed)


def test_a_lazy_name_is_looked_up_through_the_hook_only_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """After its first use every lazy name lives in the package's globals: `compute_budget.decide` (or any other)
    in a loop no longer goes through the module's `__getattr__` each time (that cost 13% of a decision)."""
    lazy: dict[str, str] = vars(compute_budget)["_LAZY"]
    assert "decide" in lazy
    assert set(lazy) <= set(compute_budget.__all__)  # the names the hook serves are all public
    hook = vars(compute_budget)["__getattr__"]
    asked: list[str] = []

    def counting(name: str) -> object:
        asked.append(name)
        return hook(name)

    monkeypatch.setitem(vars(compute_budget), "__getattr__", counting)
    for name, module_name in lazy.items():
        monkeypatch.delitem(vars(compute_budget), name, raising=False)  # as if not used yet in this process
        asked.clear()
        first = getattr(compute_budget, name)
        assert name in vars(compute_budget), name
        second = getattr(compute_budget, name)
        assert asked == [name], name
        assert first is second is getattr(importlib.import_module(module_name), name), name


def test_audit_is_the_function_even_after_the_auditor_is_imported() -> None:
    """`from compute_budget import audit` is the function, never a module, whatever was imported before."""
    import compute_budget.auditor.scan  # noqa: F401  (loads the auditor package first)
    from compute_budget import audit

    assert callable(audit)
    assert audit.__module__ == "compute_budget.auditor.scan"
    assert type(audit).__name__ == "function"


# The public surface, pinned: moving a module inside the package must not add, drop or swap an exported name.
PUBLIC_HOMES = [
    ('COMPUTE_BUDGET_POLICY_VERSION', 'compute_budget.core.policy.rules'),
    ('POLICIES', 'compute_budget.core.policy.rules'),
    ('AuditError', 'compute_budget.errors'),
    ('AuditReport', 'compute_budget.auditor.report'),
    ('BatchResult', 'compute_budget.store.results'),
    ('BudgetPolicy', 'compute_budget.core.policy.rules'),
    ('BudgetRefused', 'compute_budget.errors'),
    ('BudgetStore', 'compute_budget.store.facade'),
    ('BudgetTable', 'compute_budget.core.policy.rules'),
    ('ChainHead', 'compute_budget.core.log.head'),
    ('Checkpoint', 'compute_budget.core.log.checkpoint'),
    ('CheckpointError', 'compute_budget.errors'),
    ('ComputeBudgetDecision', 'compute_budget.core.policy.types'),
    ('ComputeBudgetError', 'compute_budget.errors'),
    ('ComputeBudgetStatus', 'compute_budget.core.policy.types'),
    ('ConsistencyProof', 'compute_budget.core.receipts'),
    ('Finding', 'compute_budget.core.verify'),
    ('FindingKind', 'compute_budget.core.verify'),
    ('GateConflict', 'compute_budget.errors'),
    ('GateNotSerializable', 'compute_budget.errors'),
    ('GateResult', 'compute_budget.store.results'),
    ('GateTooLarge', 'compute_budget.errors'),
    ('InputError', 'compute_budget.errors'),
    ('InputNotJson', 'compute_budget.errors'),
    ('Limits', 'compute_budget.core.policy.rules'),
    ('MalformedDecision', 'compute_budget.errors'),
    ('MalformedGate', 'compute_budget.errors'),
    ('MalformedProof', 'compute_budget.errors'),
    ('NotABudgetStore', 'compute_budget.errors'),
    ('NotConsistent', 'compute_budget.errors'),
    ('ProofBundle', 'compute_budget.core.receipts'),
    ('ProofError', 'compute_budget.errors'),
    ('ProofVerification', 'compute_budget.core.receipts'),
    ('ReadOnlyStore', 'compute_budget.errors'),
    ('RecordResult', 'compute_budget.store.results'),
    ('RefusalReason', 'compute_budget.errors'),
    ('RepairNotAcknowledged', 'compute_budget.errors'),
    ('RowCheck', 'compute_budget.store.results'),
    ('SchemaBehindHead', 'compute_budget.errors'),
    ('SearchGateDecision', 'compute_budget.core.policy.gate'),
    ('SearchGateStatus', 'compute_budget.core.policy.gate'),
    ('SignerKey', 'compute_budget.core.log.note'),
    ('SkippedConflict', 'compute_budget.store.results'),
    ('SourceSpan', 'compute_budget.core.policy.gate'),
    ('StoreClosed', 'compute_budget.errors'),
    ('StoreDamaged', 'compute_budget.errors'),
    ('StoreError', 'compute_budget.errors'),
    ('StoreUnavailable', 'compute_budget.errors'),
    ('StoredDecision', 'compute_budget.core.row'),
    ('UnknownBudgetId', 'compute_budget.errors'),
    ('UnsignedAppendRefused', 'compute_budget.errors'),
    ('UnsupportedPolicyVersion', 'compute_budget.errors'),
    ('VerifierKey', 'compute_budget.core.log.note'),
    ('WitnessTimeout', 'compute_budget.errors'),
    ('WriterStateError', 'compute_budget.errors'),
    ('admit', 'compute_budget.core.policy.admission'),
    ('audit', 'compute_budget.auditor.scan'),
    ('budget_payload', 'compute_budget.core.policy.hashing'),
    ('canonical_json', 'compute_budget.core.canonical'),
    ('compute_budget_id', 'compute_budget.core.policy.hashing'),
    ('decide', 'compute_budget.core.policy.rules'),
    ('decide_json', 'compute_budget.core.policy.parse'),
    ('parse_gate_json', 'compute_budget.core.policy.parse'),
    ('policy_for', 'compute_budget.core.policy.rules'),
    ('prove', 'compute_budget.auditor.proving'),
    ('prove_consistency', 'compute_budget.auditor.proving'),
    ('verify_consistency', 'compute_budget.core.receipts'),
    ('verify_proof', 'compute_budget.core.receipts'),
]


def test_the_public_names_are_pinned_in_order() -> None:
    """`__all__` is exactly the pinned list, in the pinned order."""
    assert list(compute_budget.__all__) == [name for name, _ in PUBLIC_HOMES]


@pytest.mark.parametrize(("name", "home"), PUBLIC_HOMES)
def test_each_public_name_is_the_object_defined_in_its_room(name: str, home: str) -> None:
    """`compute_budget.X` is the very object its home module defines (a re-export, never a copy or a wrapper)."""
    module = importlib.import_module(home)
    assert getattr(compute_budget, name) is getattr(module, name)


def test_the_budget_table_keeps_its_old_name() -> None:
    """`BudgetPolicy` (the budget table's name before this release) is the very class `BudgetTable`, so callers that
    import, annotate or isinstance-check with it keep working (docs/upgrading.md)."""
    from compute_budget import BudgetPolicy, BudgetTable

    assert BudgetPolicy is BudgetTable
    assert isinstance(compute_budget.policy_for(compute_budget.COMPUTE_BUDGET_POLICY_VERSION), BudgetPolicy)
