"""`--revoked KEY@SIZE:ROOT` (issue 31, item 2), on both backends: a leaked writer key is caught on a fork at or
below its size and on anything above it, in the audit (by the store's tree) and in `verify-proof` (offline: only
the exact checkpoint, or one the witness quorum cosigned, counts)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compute_budget import BudgetStore, audit
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.cosignature import generate_witness, with_cosignatures
from compute_budget.core.log.note import format_checkpoint, sign_note
from compute_budget.keys.key_files import load_signer_key
from tests.backends import execute, tamper_all
from tests.conftest import gate_lines

Run = Callable[..., tuple[int, str, str]]


class Leak:
    """A store whose writer key leaked after size 3 (the last witnessed size): rows 1..2, then 3, signed honestly;
    rows 4..5 then signed with the stolen key."""

    def __init__(self, run_cli: Run, target: str, folder: Path) -> None:
        self.run, self.target, self.folder = run_cli, target, folder
        self.key_path = folder / "writer.key"
        status, out, err = run_cli("keygen", "writer", "--out", str(self.key_path))
        assert status == 0, err
        self.key = out.strip()
        self.signer = load_signer_key(self.key_path)
        for count, prefix in ((2, "a"), (1, "b")):
            self.record(count, prefix)
        self.root3 = self.head().root
        self.record(2, "stolen")

    def record(self, count: int, prefix: str) -> None:
        gates = self.folder / f"{prefix}.jsonl"
        gates.write_text("\n".join(gate_lines(count, prefix=prefix)) + "\n")
        status, _, err = self.run("record", str(gates), "--db", self.target, "--signing-key", str(self.key_path))
        assert status == 0, err

    def head(self) -> Any:
        with BudgetStore.open(self.target, readonly=True) as store:
            return store.checkpoint()

    @property
    def revoked(self) -> str:
        return f"{self.key}@3:{base64.b64encode(self.root3).decode('ascii')}"

    def note_at(self, size: int) -> str:
        with BudgetStore.open(self.target, readonly=True) as store:
            return next(row[3] for row in store.iter_checkpoint_rows() if row[0] == size)

    def forge_fork(self, size: int) -> None:
        """File a note of `size` with another root, signed by the stolen key: a fork."""
        head = self.head()
        note = sign_note(format_checkpoint(head.origin, size, bytes(32), head.chain_hash), self.signer)
        execute(self.target, (
            "INSERT INTO compute_budget_checkpoints (tree_size, key_name, key_hash, note, recorded_at) "
            "VALUES (:size, :name, :hash, :note, '2026-01-01T00:00:00Z')",
            {"size": size, "name": self.signer.name, "hash": f"{self.signer.key_hash:08x}", "note": note},
        ))

    def receipt(self, note: str, name: str = "receipt.json") -> Path:
        checkpoint = self.folder / f"{name}.note"
        checkpoint.write_text(note)
        with BudgetStore.open(self.target, readonly=True) as store:
            budget_id = min(store, key=lambda row: row.seq).decision.budget_id
        status, bundle, err = self.run("prove", budget_id, "--db", self.target, "--checkpoint", str(checkpoint))
        assert status == 0, err
        path = self.folder / name
        path.write_text(bundle)
        return path


@pytest.fixture
def leak(run_cli: Run, store_target: str, tmp_path: Path) -> Leak:
    return Leak(run_cli, store_target, tmp_path)


def findings(report: Any) -> list[tuple[str, int | None, str]]:
    return [(finding.kind.value, finding.seq, finding.detail) for finding in report.findings]


@pytest.mark.postgres_smoke
def test_signatures_above_the_revocation_do_not_count_and_their_rows_are_unattested(leak: Leak) -> None:
    assert audit(leak.target, trusted_keys=[leak.key]).clean  # without the revocation, nothing shows
    report = audit(leak.target, trusted_keys=[leak.key], revoked=[leak.revoked])
    found = findings(report)
    assert ("bad_signature", 5) in [(kind, seq) for kind, seq, _ in found]
    assert any(kind == "bad_signature" and "revoked at 3" in detail for kind, _, detail in found)
    unattested = [(seq, detail) for kind, seq, detail in found if kind == "unattested_rows"]
    assert unattested
    assert unattested[0][0] == 4
    assert "rows 4..5" in unattested[0][1]
    assert report.attested_size == 3


@pytest.mark.postgres_smoke
@pytest.mark.parametrize("revoked", [False, True], ids=["trusted", "revoked"])
def test_unattested_rows_never_start_below_the_size_the_since_note_vouches_for(leak: Leak, revoked: bool) -> None:
    # Spec 11.6: the kept --since note (size 3, signed by the key) vouches for rows 1..3 whatever the store's
    # checkpoints table now holds; here it was emptied (with the revocation: of the notes the key signed honestly).
    since = leak.folder / "since.note"
    since.write_text(leak.note_at(3))
    tamper_all(leak.target, "DELETE FROM compute_budget_checkpoints" + (" WHERE tree_size <= 3" if revoked else ""))
    report = audit(leak.target, trusted_keys=[leak.key], revoked=[leak.revoked] if revoked else [],
                   since=str(since))
    unattested = [(seq, detail) for kind, seq, detail in findings(report) if kind == "unattested_rows"]
    assert len(unattested) == 1, findings(report)
    assert unattested[0][0] == 4
    assert "rows 4..5" in unattested[0][1]
    assert "--since" in unattested[0][1]


def test_a_since_note_whose_signature_does_not_count_vouches_for_nothing(leak: Leak) -> None:
    # The key revoked at 2: its note at 3 is above the revocation, so the --since note vouches for no row.
    since = leak.folder / "since.note"
    since.write_text(leak.note_at(3))
    root2 = Checkpoint.from_note(leak.note_at(2)).root
    assert root2 is not None
    tamper_all(leak.target, "DELETE FROM compute_budget_checkpoints")
    report = audit(leak.target, trusted_keys=[leak.key], since=str(since),
                   revoked=[f"{leak.key}@2:{base64.b64encode(root2).decode('ascii')}"])
    unattested = [(seq, detail) for kind, seq, detail in findings(report) if kind == "unattested_rows"]
    assert [seq for seq, _ in unattested] == [1], findings(report)
    assert "none is stored" in unattested[0][1]


@pytest.mark.parametrize("size", [2, 3])
def test_a_fork_at_or_below_the_revocation_is_caught_in_the_audit(leak: Leak, size: int) -> None:
    leak.forge_fork(size)
    found = findings(audit(leak.target, trusted_keys=[leak.key], revoked=[leak.revoked]))
    assert any(kind == "bad_signature" and seq == size and "revoked at 3" in detail for kind, seq, detail in found)


def test_a_revocation_whose_root_is_not_the_stores_is_checkpoint_mismatch(leak: Leak) -> None:
    wrong = f"{leak.key}@3:{base64.b64encode(bytes(32)).decode('ascii')}"
    found = findings(audit(leak.target, trusted_keys=[leak.key], revoked=[wrong]))
    assert any(kind == "checkpoint_mismatch" and seq == 3 and "--revoked" in detail for kind, seq, detail in found)
    assert any(kind == "bad_signature" and seq == 2 for kind, seq, _ in found)  # then nothing of the key counts


def test_verify_proof_counts_a_revoked_key_only_on_its_exact_checkpoint_offline(leak: Leak) -> None:
    def verify(receipt: Path, *extra: str) -> tuple[int, str]:
        status, out, _ = leak.run("verify-proof", str(receipt), "--trusted-key", leak.key, "--revoked", leak.revoked,
                                  *extra)
        return status, out

    status, out = verify(leak.receipt(leak.note_at(5), "above.json"))
    assert status == 1
    assert out.startswith("invalid (signature)")
    assert "revoked at 3" in out
    status, out = verify(leak.receipt(leak.note_at(3), "exact.json"))
    assert status == 0, out
    assert out.startswith("valid:")
    below = leak.note_at(2)
    status, out = verify(leak.receipt(below, "below.json"))
    assert status == 1
    assert "revoked at 3" in out
    witness = generate_witness("witness")
    text = below[: below.rindex("\n\n") + 1]
    cosigned = with_cosignatures(below, [witness.cosign(text, int(time.time()))])
    status, out = verify(leak.receipt(cosigned, "witnessed.json"), "--witness-key", witness.verifier().format())
    assert status == 0, out
    assert out.startswith("valid:")


def test_verify_proof_catches_a_fork_at_the_revoked_size(leak: Leak) -> None:
    # `prove` refuses a checkpoint the store does not extend, so the forger's receipt is the honest one with the
    # forged note (size 3, another root) put in: judged offline, the revoked key's signature there does not count.
    leak.forge_fork(3)
    with BudgetStore.open(leak.target, readonly=True) as store:
        forged = next(row[3] for row in store.iter_checkpoint_rows() if row[0] == 3 and row[3] != leak.note_at(3))
    honest = json.loads(leak.receipt(leak.note_at(3), "honest.json").read_text())
    receipt = leak.folder / "fork.json"
    receipt.write_text(json.dumps({**honest, "checkpoint": forged}))
    status, out, _ = leak.run("verify-proof", str(receipt), "--trusted-key", leak.key, "--revoked", leak.revoked)
    assert status == 1
    assert out.startswith("invalid (signature)")
    assert "revoked at 3" in out


def test_prove_passes_over_a_note_the_revocation_does_not_count_and_refuses_one_given(leak: Leak) -> None:
    with BudgetStore.open(leak.target, readonly=True) as store:
        budget_id = min(store, key=lambda row: row.seq).decision.budget_id
    status, out, err = leak.run("prove", budget_id, "--db", leak.target, "--trusted-key", leak.key)
    assert status == 0, err
    assert json.loads(out)["tree_size"] == 5
    status, out, err = leak.run("prove", budget_id, "--db", leak.target, "--trusted-key", leak.key,
                                "--revoked", leak.revoked)
    assert status == 0, err
    assert json.loads(out)["tree_size"] == 3
    above = leak.folder / "above.note"
    above.write_text(leak.note_at(5))
    status, _, err = leak.run("prove", budget_id, "--db", leak.target, "--checkpoint", str(above),
                              "--revoked", leak.revoked)
    assert status == 2
    assert "revoked at 3" in err


def test_consistency_calls_an_old_note_the_revocation_does_not_count_untrusted(leak: Leak) -> None:
    def consistency(size: int) -> tuple[int, str]:
        old = leak.folder / f"old{size}.note"
        old.write_text(leak.note_at(size))
        status, _, err = leak.run("consistency", str(old), "--db", leak.target, "--trusted-key", leak.key,
                                  "--revoked", leak.revoked)
        return status, err

    assert consistency(3)[0] == 0
    assert consistency(2)[0] == 0  # in the audit's place the store's tree proves it
    status, err = consistency(5)
    assert status == 1
    assert "untrusted" in err
    assert "revoked at 3" in err


def test_publish_passes_over_a_note_the_revocation_does_not_count(leak: Leak) -> None:
    status, out, err = leak.run("publish", str(leak.folder / "pub"), "--db", leak.target, "--trusted-key", leak.key,
                                "--revoked", leak.revoked)
    assert status == 0, (out, err)
    assert (leak.folder / "pub" / "checkpoint").read_text().split("\n")[1] == "3"
    status, out, err = leak.run("publish", str(leak.folder / "all"), "--db", leak.target, "--trusted-key", leak.key)
    assert status == 0, (out, err)
    assert (leak.folder / "all" / "checkpoint").read_text().split("\n")[1] == "5"


def test_a_revoked_keys_note_vouches_for_its_size_and_root_not_its_chain_line(leak: Leak) -> None:
    # The thief signs the exact revoked (SIZE, ROOT) with a made-up chain line, and a receipt of the last row
    # carrying that chain hash: offline the note counts for its size and root only (spec 11.7.4).
    made_up = "ab" * 32
    head = Checkpoint.from_note(leak.note_at(3))
    assert head.root is not None
    forged = sign_note(format_checkpoint(head.origin or "", 3, head.root, made_up), leak.signer)
    given = leak.folder / "at3.note"
    given.write_text(leak.note_at(3))
    with BudgetStore.open(leak.target, readonly=True) as store:
        third = next(row for row in store if row.seq == 3).decision.budget_id
    status, bundle, err = leak.run("prove", third, "--db", leak.target, "--checkpoint", str(given))
    assert status == 0, err
    honest = json.loads(bundle)
    assert honest["row"]["seq"] == 3
    receipt = leak.folder / "made-up-chain.json"
    receipt.write_text(json.dumps({**honest, "checkpoint": forged, "row": {**honest["row"], "chain_hash": made_up}}))
    status, out, _ = leak.run("verify-proof", str(receipt), "--trusted-key", leak.key, "--revoked", leak.revoked)
    assert status == 0, out
    assert "chain_hash not covered" in out
    assert "revoked keys only" in out
    # The honest note's chain line, by a key that does not stand revoked, is covered.
    receipt.write_text(bundle)
    status, out, _ = leak.run("verify-proof", str(receipt), "--trusted-key", leak.key)
    assert status == 0, out
    assert "not covered" not in out
