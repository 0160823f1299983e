"""`compute-budget rotate` and `--retired KEY@SIZE` (issue 31, item 1), on both backends: old receipts still
verify after a rotation, a signature of the old key above the handover is `bad_signature`, a writer with the old
key refuses, a stolen old key's forged handover is caught, and the stored handover is held against `--retired`."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compute_budget import BudgetStore, audit
from compute_budget.core.log.note import SignerKey, add_signature, format_checkpoint, sign_note
from compute_budget.keys.key_files import load_signer_key
from tests.backends import execute
from tests.conftest import gate_lines

Run = Callable[..., tuple[int, str, str]]


class Log:
    """A store recorded with OLD (3 rows), handed over to NEW, then recorded with NEW (2 more rows)."""

    def __init__(self, run_cli: Run, target: str, folder: Path) -> None:
        self.run, self.target, self.folder = run_cli, target, folder
        self.old_path, self.old = self.keygen("old")
        self.new_path, self.new = self.keygen("new")
        self.said = ""  # what `rotate` said on stderr

    def keygen(self, name: str) -> tuple[Path, str]:
        path = self.folder / f"{name}.key"
        status, out, err = self.run("keygen", name, "--out", str(path))
        assert status == 0, err
        return path, out.strip()

    def record(self, key: Path, count: int, prefix: str, *extra: str) -> tuple[int, str, str]:
        gates = self.folder / f"{prefix}.jsonl"
        gates.write_text("\n".join(gate_lines(count, prefix=prefix)) + "\n")
        return self.run("record", str(gates), "--db", self.target, "--signing-key", str(key), *extra)

    def rotate(self, old: Path, new: Path, *extra: str) -> tuple[int, str, str]:
        return self.run("rotate", "--db", self.target, "--signing-key", str(old), "--new-key", str(new), *extra)

    def signer(self, path: Path) -> SignerKey:
        return load_signer_key(path)

    def forge(self, signers: list[SignerKey], filed_as: SignerKey) -> None:
        """File a checkpoint of the head signed by `signers`, as anyone holding those keys can."""
        with BudgetStore.open(self.target, readonly=True) as store:
            head = store.checkpoint()
        assert head.origin is not None
        assert head.root is not None
        note = sign_note(format_checkpoint(head.origin, head.seq, head.root, head.chain_hash), signers[0])
        for signer in signers[1:]:
            note = add_signature(note, signer)
        execute(self.target, (
            "INSERT INTO compute_budget_checkpoints (tree_size, key_name, key_hash, note, recorded_at) "
            "VALUES (:size, :name, :hash, :note, '2026-01-01T00:00:00Z')",
            {"size": head.seq, "name": filed_as.name, "hash": f"{filed_as.key_hash:08x}", "note": note},
        ))


@pytest.fixture
def log(run_cli: Run, store_target: str, tmp_path: Path) -> Log:
    made = Log(run_cli, store_target, tmp_path)
    assert made.record(made.old_path, 3, "before")[0] == 0
    status, out, err = made.rotate(made.old_path, made.new_path)
    assert status == 0, err
    made.said = err
    assert "handed" in err
    assert "at size 3" in err
    assert out.count("\n\u2014 ") == 2  # the handover note: OLD's signature, then NEW's
    assert made.record(made.new_path, 2, "after")[0] == 0
    return made


def findings(report: Any) -> list[tuple[str, str]]:
    return [(finding.kind.value, finding.detail) for finding in report.findings]


def printed_arguments(said: str, command: str) -> list[str]:
    """The arguments `rotate` printed for `command` (its line `  compute-budget COMMAND ARGS`)."""
    words = [shlex.split(line) for line in said.splitlines() if line.startswith("  compute-budget ")]
    named = [line for line in words if line[1:].index(next(word for word in line[1:] if word != "--tiles"
                                                            and word.startswith("--"))) == len(command.split())
             and line[1:1 + len(command.split())] == command.split()]
    assert len(named) == 1, said
    return named[0][1 + len(command.split()):]


@pytest.mark.postgres_smoke
def test_rotate_prints_both_keys_and_the_exact_arguments_of_every_checking_command(log: Log) -> None:
    assert "NEW_VERIFIER_KEY" not in log.said
    assert "OLD_VERIFIER_KEY" not in log.said
    assert f"new verifier key: {log.new}" in log.said
    assert f"old verifier key: {log.old}" in log.said
    for command in ("audit", "publish", "prove", "verify-proof", "consistency", "serve"):
        assert printed_arguments(log.said, command) == ["--trusted-key", log.new, "--retired", f"{log.old}@3"]
    with BudgetStore.open(log.target, readonly=True) as store:
        origin = store.checkpoint().origin
    assert printed_arguments(log.said, "audit --tiles") == [
        "--origin", origin, "--trusted-key", log.new, "--retired", f"{log.old}@3"]
    # The audit with exactly those arguments is clean, and a receipt OLD signed below the handover verifies.
    status, out, err = log.run("audit", "--db", log.target, *printed_arguments(log.said, "audit"))
    assert status == 0, (out, err)
    with BudgetStore.open(log.target, readonly=True) as store:
        note = next(row[3] for row in store.iter_checkpoint_rows() if row[3].count("\n\u2014 ") == 1)
    given = log.folder / "old.note"
    given.write_text(note)
    status, bundle, err = log.run("prove", first_budget_id(log.target), "--db", log.target, "--checkpoint",
                                  str(given), *printed_arguments(log.said, "prove"))
    assert status == 0, err
    receipt = log.folder / "old-receipt.json"
    receipt.write_text(bundle)
    status, out, err = log.run("verify-proof", str(receipt), *printed_arguments(log.said, "verify-proof"))
    assert status == 0, (out, err)
    assert "signed by old+" in out


def test_rotate_names_both_keys_by_key_id_when_they_share_the_log_s_name(
    run_cli: Run, store_target: str, tmp_path: Path
) -> None:
    """`keygen ORIGIN`, as the docs advise, gives both keys one name: only the key IDs tell them apart."""
    paths = [tmp_path / "writer.key", tmp_path / "writer-2.key"]
    verifiers = [run_cli("keygen", "example.org/practice", "--out", str(path))[1].strip() for path in paths]
    gates = tmp_path / "gates.jsonl"
    gates.write_text("\n".join(gate_lines(3, prefix="named")) + "\n")
    assert run_cli("record", str(gates), "--db", store_target, "--signing-key", str(paths[0]))[0] == 0
    status, _, err = run_cli("rotate", "--db", store_target, "--signing-key", str(paths[0]), "--new-key",
                             str(paths[1]))
    assert status == 0, err
    old, new = ("+".join(verifier.split("+")[:2]) for verifier in verifiers)
    assert old != new
    assert f"from {old} to {new}" in err


@pytest.mark.postgres_smoke
def test_the_audit_of_a_rotated_log_is_clean_with_the_retirement(log: Log) -> None:
    report = audit(log.target, trusted_keys=[log.old, log.new], retired=[f"{log.old}@3"])
    assert report.clean, findings(report)
    assert report.attested_size == 5


def test_a_stored_handover_without_retired_is_a_warning(log: Log) -> None:
    report = audit(log.target, trusted_keys=[log.old, log.new])
    assert report.clean
    assert any("hands the log over from old+" in warning and "--retired" in warning for warning in report.warnings)


def first_budget_id(target: str) -> str:
    with BudgetStore.open(target, readonly=True) as store:
        return min(store, key=lambda row: row.seq).decision.budget_id


def test_old_receipts_still_verify_after_the_rotation(run_cli: Run, store_target: str, tmp_path: Path) -> None:
    made = Log(run_cli, store_target, tmp_path)
    assert made.record(made.old_path, 3, "before")[0] == 0
    status, bundle, err = made.run("prove", first_budget_id(made.target), "--db", made.target)
    assert status == 0, err
    receipt = tmp_path / "receipt.json"
    receipt.write_text(bundle)
    assert made.rotate(made.old_path, made.new_path)[0] == 0
    assert made.record(made.new_path, 2, "after")[0] == 0
    status, out, err = made.run("verify-proof", str(receipt), "--trusted-key", made.old, "--trusted-key", made.new,
                                "--retired", f"{made.old}@3")
    assert status == 0, (out, err)
    assert out.startswith("valid:")
    assert "signed by old+" in out
    # And one proven after the rotation, against the handover itself, verifies under either key.
    status, bundle, err = made.run("prove", first_budget_id(made.target), "--db", made.target)
    assert status == 0, err
    receipt.write_text(bundle)
    status, out, err = made.run("verify-proof", str(receipt), "--trusted-key", made.new, "--retired",
                                f"{made.old}@3")
    assert status == 0, (out, err)


def test_a_signature_of_the_old_key_above_the_handover_is_bad_signature(log: Log) -> None:
    log.forge([log.signer(log.old_path)], filed_as=log.signer(log.old_path))
    report = audit(log.target, trusted_keys=[log.old, log.new], retired=[f"{log.old}@3"])
    bad = [detail for kind, detail in findings(report) if kind == "bad_signature"]
    assert len(bad) == 1
    assert "retired at 3" in bad[0]
    # Without the retirement the same signature counts: the finding comes from --retired.
    assert audit(log.target, trusted_keys=[log.old, log.new]).clean


def test_verify_proof_refuses_a_receipt_signed_by_the_old_key_above_the_handover(log: Log) -> None:
    log.forge([log.signer(log.old_path)], filed_as=log.signer(log.old_path))
    budget_id = first_budget_id(log.target)
    with BudgetStore.open(log.target, readonly=True) as store:
        notes = [row[3] for row in store.iter_checkpoint_rows() if row[0] == 5 and row[1] == "old"]
    forged = log.folder / "forged.note"
    forged.write_text(notes[0])
    status, bundle, err = log.run("prove", budget_id, "--db", log.target, "--checkpoint", str(forged))
    assert status == 0, err
    receipt = log.folder / "receipt.json"
    receipt.write_text(bundle)
    status, out, _ = log.run("verify-proof", str(receipt), "--trusted-key", log.old, "--retired", f"{log.old}@3")
    assert status == 1
    assert out.startswith("invalid (signature)")
    assert "retired at 3" in out
    status, out, _ = log.run("verify-proof", str(receipt), "--trusted-key", log.old)
    assert status == 0, out


def test_a_writer_with_the_old_key_refuses_to_sign(log: Log) -> None:
    status, _, err = log.record(log.old_path, 1, "late")
    assert status == 2
    assert "handover" in err
    assert "retired" in err
    assert "nothing was written" in err
    # On another host (a state file of its own, made from the store) it refuses too. The store's handover says so
    # when that host knows the new key (--peer-key): a handover read from the store counts only when both its
    # signatures verify (spec 11.7.3); without it, the rows the new key signed are what it refuses to launder.
    other = ("--writer-state", str(log.folder / "other.state"), "--init-writer-state")
    status, _, err = log.record(log.old_path, 1, "late2", *other)
    assert status == 2
    assert "rows 4..5" in err
    status, _, err = log.record(log.old_path, 1, "late2", *other, "--peer-key", log.new)
    assert status == 2
    assert "handover" in err
    assert "retired" in err
    # `checkpoint --signing-key` signs inside the append lock under the same rules: it refuses too.
    status, _, err = log.run("checkpoint", "--db", log.target, "--signing-key", str(log.old_path))
    assert status == 2
    assert "handover" in err
    with BudgetStore.open(log.target, readonly=True) as store:
        assert store.head().seq == 5


def test_rotate_refuses_an_old_key_already_retired_or_revoked(log: Log) -> None:
    third, _ = log.keygen("third")
    status, _, err = log.rotate(log.old_path, third)
    assert status == 2
    assert "handover" in err
    status, _, err = log.rotate(log.new_path, third, "--retired", f"{log.new}@5")
    assert status == 2
    assert "retired at 5" in err
    root = "A" * 43 + "="
    status, _, err = log.rotate(log.new_path, third, "--revoked", f"{log.new}@5:{root}")
    assert status == 2
    assert "revoked at 5" in err


def test_a_stolen_old_key_with_a_forged_handover_is_caught(log: Log) -> None:
    thief, _ = log.keygen("thief")
    # After the real rotation: the thief's handover above the handover size is the old key signing above it.
    log.forge([log.signer(log.old_path), log.signer(thief)], filed_as=log.signer(thief))
    report = audit(log.target, trusted_keys=[log.old, log.new], retired=[f"{log.old}@3"])
    details = [detail for kind, detail in findings(report) if kind == "bad_signature"]
    assert any("retired at 3" in detail for detail in details)
    assert any("thief+" in detail and "not trusted" in detail for detail in details)


def test_a_stolen_key_rotated_by_the_thief_before_anyone_knew_is_caught(
    run_cli: Run, store_target: str, tmp_path: Path
) -> None:
    made = Log(run_cli, store_target, tmp_path)
    assert made.record(made.old_path, 3, "before")[0] == 0
    thief, _ = made.keygen("thief")
    status, _, err = made.rotate(made.old_path, thief, "--writer-state", str(tmp_path / "stolen.state"),
                                 "--init-writer-state")
    assert status == 0, err
    assert made.record(thief, 2, "forged")[0] == 0
    report = audit(made.target, trusted_keys=[made.old])
    kinds = [kind for kind, _ in findings(report)]
    assert "bad_signature" in kinds
    assert "unattested_rows" in kinds
    assert any("thief+" in detail and "not trusted" in detail for kind, detail in findings(report))


def test_a_retirement_without_its_stored_handover_is_handover_missing(log: Log) -> None:
    report = audit(log.target, trusted_keys=[log.old, log.new], retired=[f"{log.old}@2"])
    missing = [detail for kind, detail in findings(report) if kind == "checkpoint_mismatch"]
    assert len(missing) == 1
    assert missing[0].startswith("handover missing")
    # A handover to a key that is not trusted is no handover for this audit either.
    report = audit(log.target, trusted_keys=[log.old], retired=[f"{log.old}@3"])
    assert any(detail.startswith("handover missing") for _, detail in findings(report))


def test_the_audit_command_takes_retired_and_reports_in_json(log: Log) -> None:
    log.forge([log.signer(log.old_path)], filed_as=log.signer(log.old_path))
    status, out, err = log.run("audit", "--db", log.target, "--trusted-key", log.old, "--trusted-key", log.new,
                               "--retired", f"{log.old}@3", "--format", "json")
    assert status == 1, err
    report = json.loads(out)
    assert [finding["kind"] for finding in report["findings"]] == ["bad_signature"]
    status, _, err = log.run("audit", "--db", log.target, "--retired", "garbage")
    assert status == 2
    assert "--retired 'garbage'" in err
    assert "Traceback" not in err


@pytest.mark.postgres_smoke
def test_a_forged_handover_blocks_no_writer_and_no_rotate(run_cli: Run, store_target: str, tmp_path: Path) -> None:
    # A keyless insider copies the note OLD signed at the head and appends a signature of a key of their own: it
    # looks like OLD's handover, but its second signature verifies under no key the writer knows (spec 11.7.3).
    made = Log(run_cli, store_target, tmp_path)
    assert made.record(made.old_path, 3, "before")[0] == 0
    insider = tmp_path / "insider.key"  # named like the real next key, but the insider's own
    assert made.run("keygen", "new", "--out", str(insider))[0] == 0
    with BudgetStore.open(made.target, readonly=True) as store:
        honest = next(row[3] for row in store.iter_checkpoint_rows() if row[0] == 3)
    old = made.signer(made.old_path)
    execute(made.target, (
        "INSERT INTO compute_budget_checkpoints (tree_size, key_name, key_hash, note, recorded_at) "
        "VALUES (3, :name, :hash, :note, '2026-01-01T00:00:00Z')",
        {"name": old.name, "hash": f"{old.key_hash:08x}", "note": add_signature(honest, made.signer(insider))},
    ))
    status, _, err = made.record(made.old_path, 1, "after-plant")
    assert status == 0, err
    status, _, err = made.record(made.old_path, 1, "other-host", "--writer-state", str(tmp_path / "other.state"),
                                 "--init-writer-state", "--peer-key", made.new)
    assert status == 0, err
    status, _, err = made.rotate(made.old_path, made.new_path)
    assert status == 0, err
    assert "at size 5" in err
    report = audit(made.target, trusted_keys=[made.old, made.new], retired=[f"{made.old}@5"])
    bad = [detail for kind, detail in findings(report) if kind == "bad_signature"]
    assert len(bad) == 1
    assert "size 3" in bad[0]
    assert "not trusted" in bad[0]
    assert not [detail for kind, detail in findings(report) if kind == "checkpoint_mismatch"]


def test_an_audit_not_told_of_the_rotation_names_the_handover_and_what_to_obtain(log: Log) -> None:
    # The auditor trusts only OLD: NEW's checkpoint is named as the note shows it, the handover from OLD at 3 gives
    # the out-of-band advice, and NEW's verifier key (never given) is printed nowhere (spec 11.6).
    with BudgetStore.open(log.target, readonly=True) as store:
        newest = next(row[3] for row in store.iter_checkpoint_rows() if row[0] == 5)
    given = log.folder / "newest.note"
    given.write_text(newest)
    status, out, err = log.run("audit", "--db", log.target, "--trusted-key", log.old, "--checkpoint", str(given),
                               "--format", "json")
    assert status == 1, err
    details = [item["detail"] for item in json.loads(out)["findings"] if item["kind"] == "bad_signature"]
    new_label = log.new.split("+")[0] + "+" + log.new.split("+")[1]
    assert any(f"signed by {new_label}, unverified" in detail for detail in details), details
    advice = ("obtain the new verifier key from the log's operator out of band, then add --trusted-key <that key> "
              f"--retired {log.old}@3")
    assert any(advice in detail and "at size 3" in detail for detail in details), details
    assert log.new not in out + err
