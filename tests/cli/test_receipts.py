"""Receipts at the command line (spec 8 and 10.3): `prove --format tlog-proof` and `verify-proof` of either
format, on both backends."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compute_budget.core.chain import CHAINED_COLUMNS
from compute_budget.core.leaf import leaf_input
from compute_budget.core.log.cosignature import WitnessSigner, with_cosignatures
from compute_budget.core.log.note import SignerKey, format_checkpoint, sign_note
from compute_budget.core.log.tlog_proof import TlogProof
from tests.backends import rows, tamper
from tests.conftest import REPO_ROOT, gate_lines
from tests.vectors.tlog_proof_vectors import TLOG_PROOF_FILE

Run = Callable[..., tuple[int, str, str]]
ORIGIN = "example.org/receipts-cli"


@pytest.fixture
def writer(run_cli: Run, tmp_path: Path) -> tuple[Path, str]:
    """The writer's key file and verifier key."""
    path = tmp_path / "writer.key"
    status, out, err = run_cli("keygen", "writer", "--out", str(path))
    assert status == 0, err
    return path, out.strip()


@pytest.fixture
def signed(run_cli: Run, store_target: str, writer: tuple[Path, str], tmp_path: Path) -> str:
    """A store of the example gates and 20 more (28 rows), every row signed by the writer."""
    more = tmp_path / "more.jsonl"
    more.write_text("\n".join(gate_lines(20)) + "\n")
    for source in (str(REPO_ROOT / "examples" / "gates.jsonl"), str(more)):
        status, _, err = run_cli("record", source, "--db", store_target, "--signing-key", str(writer[0]),
                                 "--origin", ORIGIN)
        assert status == 0, err
    return store_target


def _prove(run_cli: Run, target: str, seq: int, *options: str) -> str:
    status, out, err = run_cli("prove", str(rows(target)[seq - 1][1]), "--db", target, "--format", "tlog-proof",
                               *options)
    assert status == 0, err
    return out


def _verify(run_cli: Run, text: str | bytes, tmp_path: Path, *options: str) -> tuple[int, str, str]:
    path = tmp_path / "receipt.tlog-proof"
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return run_cli("verify-proof", str(path), *options)


@pytest.mark.postgres_smoke
@pytest.mark.parametrize("seq", [1, 12, 28])
def test_prove_prints_a_tlog_proof_of_the_row_that_verify_proof_accepts(
    run_cli: Run, signed: str, writer: tuple[Path, str], tmp_path: Path, seq: int
) -> None:
    """Spec 10.3: the row's leaf input as extra, index = seq - 1, the signed checkpoint; verify-proof reads it
    (told from a bundle by its first line) and prints one line that always says `chain_hash not covered`, for
    the last row too."""
    text = _prove(run_cli, signed, seq, "--trusted-key", writer[1])
    proof = TlogProof.parse(text)
    stored = rows(signed)[seq - 1]
    assert proof.extra == leaf_input(stored[:17])
    assert proof.index == seq - 1
    assert proof.tree.size == 28
    assert text.startswith("c2sp.org/tlog-proof@v1\nextra ")
    status, out, err = _verify(run_cli, text, tmp_path, "--trusted-key", writer[1], "--origin", ORIGIN)
    assert (status, err) == (0, "")
    assert out == (f"valid: budget_id {stored[1]}, seq {seq}, in {ORIGIN} (tree size 28), signed by "
                   f"{writer[1].split('+')[0]}+{writer[1].split('+')[1]}; chain_hash not covered\n")


def test_the_default_format_stays_the_json_bundle(run_cli: Run, signed: str) -> None:
    """Without --format, and with --format compute_budget.proof.v1, prove prints the same JSON bundle."""
    budget_id = str(rows(signed)[4][1])
    status, plain, _ = run_cli("prove", budget_id, "--db", signed)
    assert status == 0
    assert json.loads(plain)["format"] == "compute_budget.proof.v1"
    assert run_cli("prove", budget_id, "--db", signed, "--format", "compute_budget.proof.v1")[1] == plain
    status, _, err = run_cli("prove", budget_id, "--db", signed, "--format", "tlog")
    assert status == 2
    assert err.count("\n") == 1


def test_a_tlog_proof_of_an_unsigned_checkpoint_is_refused(run_cli: Run, store_target: str) -> None:
    """A C2SP checkpoint is a signed note: with no signed checkpoint covering the row, exit 2 and nothing printed
    (the JSON bundle still prints, with its warning)."""
    status, _, err = run_cli("record", str(REPO_ROOT / "examples" / "gates.jsonl"), "--db", store_target)
    assert status == 0, err
    budget_id = str(rows(store_target)[2][1])
    status, out, err = run_cli("prove", budget_id, "--db", store_target, "--format", "tlog-proof")
    assert (status, out) == (2, "")
    assert err.count("\n") == 1
    assert "no signed checkpoint covers row 3, and a tlog-proof carries a signed checkpoint" in err
    status, out, err = run_cli("prove", budget_id, "--db", store_target)
    assert status == 0
    assert "warning: no signed checkpoint covers row 3" in err


def test_a_changed_or_untrusted_tlog_proof_is_invalid_naming_the_check(
    run_cli: Run, signed: str, writer: tuple[Path, str], tmp_path: Path
) -> None:
    """Exit 1, one line: an extra edited (inclusion), another row's index (inclusion), an untrusted key
    (signature), another origin (origin)."""
    proof = TlogProof.parse(_prove(run_cli, signed, 12))
    row = json.loads(proof.extra or b"")
    row["max_steps"] = 1000
    edited = TlogProof(proof.index, proof.hashes, proof.checkpoint, leaf_input([row[name] for name in CHAINED_COLUMNS]))
    trusted = ("--trusted-key", writer[1])
    status, out, _ = _verify(run_cli, edited.encode(), tmp_path, *trusted)
    assert (status, out) == (1, "invalid (inclusion): the inclusion proof from the entry's leaf does not lead to the "
                                "checkpoint's root\n")
    moved = TlogProof(proof.index + 1, proof.hashes, proof.checkpoint, proof.extra)
    assert _verify(run_cli, moved.encode(), tmp_path, *trusted)[1].startswith("invalid (inclusion): index 12 is not")
    other = SignerKey.from_seed("other", bytes(32)).verifier().format()
    assert _verify(run_cli, proof.encode(), tmp_path, "--trusted-key", other)[1].startswith("invalid (signature)")
    status, out, _ = _verify(run_cli, proof.encode(), tmp_path, *trusted, "--origin", "example.org/else")
    assert (status, out) == (1, f"invalid (origin): the checkpoint is of log {ORIGIN}, not example.org/else\n")


def test_a_tlog_proof_needs_its_witnesses_cosignatures(
    run_cli: Run, signed: str, writer: tuple[Path, str], tmp_path: Path
) -> None:
    """--witness-key works as for a bundle: no cosignature is `invalid (witness): 0 of 1`, a cosigned note
    verifies and the line says the quorum checked."""
    witness = WitnessSigner.from_seed("witness.example/w1", bytes(range(32)))
    proof = TlogProof.parse(_prove(run_cli, signed, 3))
    options = ("--trusted-key", writer[1], "--witness-key", witness.verifier().format())
    assert _verify(run_cli, proof.encode(), tmp_path, *options)[:2] == (1, "invalid (witness): 0 of 1 cosignatures\n")
    text = proof.checkpoint.partition("\n\n")[0] + "\n"
    note = with_cosignatures(proof.checkpoint, [witness.cosign(text, int(time.time()) - 60)])
    cosigned = TlogProof(proof.index, proof.hashes, note, proof.extra)
    status, out, _ = _verify(run_cli, cosigned.encode(), tmp_path, *options)
    assert status == 0
    assert out.endswith("; witnessed: 1 of 1 cosignatures; chain_hash not covered\n")


def test_a_tlog_proof_whose_row_does_not_rederive_is_invalid(
    run_cli: Run, signed: str, writer: tuple[Path, str], tmp_path: Path
) -> None:
    """The re-derivation is the bundle's: a row stored with a wall-clock limit v1 never sets, signed with a
    stolen writer key, is `invalid (rederive)` naming the field."""
    from compute_budget import BudgetStore

    tamper(signed, "UPDATE compute_budget_decisions SET max_wallclock_ms = 86400000 WHERE seq = 28")
    with BudgetStore.open(signed, readonly=True) as store:
        head = store.checkpoint()
    assert head.origin is not None
    assert head.root is not None
    note = tmp_path / "stolen.note"
    stolen = SignerKey.parse(writer[0].read_text().strip())
    note.write_text(sign_note(format_checkpoint(head.origin, head.seq, head.root, head.chain_hash), stolen))
    text = _prove(run_cli, signed, 28, "--checkpoint", str(note))
    status, out, _ = _verify(run_cli, text, tmp_path, "--trusted-key", writer[1])
    assert status == 1
    assert out.startswith("invalid (rederive)")
    assert "max_wallclock_ms stored 86400000" in out


def test_a_tlog_proof_without_extra_is_no_entry(
    run_cli: Run, signed: str, writer: tuple[Path, str], tmp_path: Path
) -> None:
    """Spec 10.3: no extra data, no row to check: exit 2, one line, `no entry`."""
    proof = TlogProof.parse(_prove(run_cli, signed, 5))
    bare = TlogProof(proof.index, proof.hashes, proof.checkpoint)
    status, out, err = _verify(run_cli, bare.encode(), tmp_path, "--trusted-key", writer[1])
    assert (status, out) == (2, "")
    assert err == "compute-budget: error: no entry: the tlog-proof carries no extra data, so there is no row to check\n"


MALFORMED: list[dict[str, Any]] = json.loads(TLOG_PROOF_FILE.read_text(encoding="utf-8"))["malformed"]


@pytest.mark.parametrize("vector", MALFORMED, ids=lambda vector: vector["name"])
def test_every_malformed_tlog_proof_is_one_line_and_exit_2(
    run_cli: Run, tmp_path: Path, vector: dict[str, Any]
) -> None:
    """Each malformed vector file: exit 2, nothing on stdout, its golden error on one stderr line, no traceback."""
    key = SignerKey.from_seed("writer", bytes(32)).verifier().format()
    status, out, err = _verify(run_cli, vector["proof"], tmp_path, "--trusted-key", key)
    assert (status, out) == (2, "")
    assert err == f"compute-budget: error: {vector['error']}\n"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"c2sp.org/tlog-proof@v1\nindex 0\n\n\xff\xfe\n", "the proof is not UTF-8 text"),
        (b"c2sp.org/tlog-proof@v1\n", "line 2: expected 'index N'"),
        (b"c2sp.org/tlog-proof@v1\nextra e30=\nindex 0\n\nlog\n0\n" + b"A" * 43 + b"=\n\n\xe2\x80\x94 k AAAA\n",
         "not canonical base64 of a key hash and a signature"),
    ],
)
def test_other_unreadable_tlog_proofs_are_one_line(run_cli: Run, tmp_path: Path, raw: bytes, message: str) -> None:
    """Bytes that are not UTF-8, a header alone (its index is missing), a signature line too short to be one:
    exit 2, one line."""
    key = SignerKey.from_seed("writer", bytes(32)).verifier().format()
    status, out, err = _verify(run_cli, raw, tmp_path, "--trusted-key", key)
    assert (status, out) == (2, "")
    assert err.count("\n") == 1
    assert message in err


def test_verify_proof_reads_a_tlog_proof_from_stdin(
    run_cli: Run, signed: str, writer: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """FILE '-' is stdin, for either format."""
    import io
    import sys

    text = _prove(run_cli, signed, 7)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8"))))
    status, out, _ = run_cli("verify-proof", "-", "--trusted-key", writer[1])
    assert status == 0
    assert out.startswith("valid: budget_id ")
