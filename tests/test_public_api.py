"""The public surface: what `compute_budget.__all__` names is importable, and a client's type checker sees it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

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


def _mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    client = tmp_path / "client.py"
    client.write_text(source, encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
         str(client)],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )


@pytest.mark.slow
def test_a_client_program_type_checks_against_the_real_types(tmp_path: Path) -> None:
    """mypy --strict accepts a client using the store, the audit and the results with their real types."""
    done = _mypy(tmp_path, CLIENT.format(record="record"))
    assert done.returncode == 0, done.stdout


@pytest.mark.slow
def test_a_typo_in_a_client_program_fails_type_checking(tmp_path: Path) -> None:
    """`store.recrod(...)` is an error for mypy: the lazily loaded BudgetStore is not `Any`."""
    done = _mypy(tmp_path, CLIENT.format(record="recrod"))
    assert done.returncode == 1
    assert '"BudgetStore" has no attribute "recrod"' in done.stdout


def test_every_public_name_resolves() -> None:
    """Every name in `__all__` is an attribute of the package (lazy ones load on first use)."""
    for name in compute_budget.__all__:
        assert getattr(compute_budget, name) is not None, name


def test_audit_is_the_function_even_after_the_auditor_is_imported() -> None:
    """`from compute_budget import audit` is the function, never a module, whatever was imported before."""
    import compute_budget.auditor.scan  # noqa: F401  (loads the auditor package first)
    from compute_budget import audit

    assert callable(audit)
    assert audit.__module__ == "compute_budget.auditor.scan"
    assert type(audit).__name__ == "function"
