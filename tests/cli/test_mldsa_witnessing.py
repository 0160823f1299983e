"""An ML-DSA-44 witness (C2SP tlog-cosignature type 0x06) from the command line, over real HTTP, on both backends:
keygen --witness --ml-dsa, witness serve with that key, record --witness and witness submit to it, and every
verifier (audit's witness rules and --witness-url, prove, verify-proof, consistency). A timestamp of 0 makes no
freshness claim: it counts as infinitely old."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from compute_budget import decide
from compute_budget.core.log.cosignature import WitnessKey, WitnessSigner
from compute_budget.core.log.mldsa_cosignature import ALGORITHM_MLDSA44_COSIGNATURE
from tests.conftest import gate_lines
from tests.witnessing import ORIGIN, WITNESS, WRITER_KEY, Served, WitnessFactory

Run = Callable[..., tuple[int, str, str]]
MLDSA = WitnessSigner.from_seed("witness.example/pq", bytes(range(32)), ALGORITHM_MLDSA44_COSIGNATURE)
MLDSA_KEY = MLDSA.verifier().format()
ED25519_KEY = WITNESS.verifier().format()


def _url(served: Served, key: str = MLDSA_KEY) -> str:
    return f"http://127.0.0.1:{served.port}={key}"


def _record(run_cli: Run, target: str, writer: Path, count: int, prefix: str, *witnesses: str) -> list[str]:
    """Record `count` gates (sending to `witnesses`); their budget_ids."""
    lines = gate_lines(count, prefix=prefix)
    gates = writer.with_name(f"{prefix}.jsonl")
    gates.write_text("\n".join(lines) + "\n")
    extra = [item for url in witnesses for item in ("--witness", url)]
    status, _, err = run_cli("record", str(gates), "--db", target, "--signing-key", str(writer), "--origin", ORIGIN,
                             *extra)
    assert status == 0, err
    assert "warning" not in err
    return [decide(json.loads(line)).budget_id for line in lines]


def _audit(run_cli: Run, target: str, *options: str) -> tuple[int, dict[str, object], str]:
    status, out, err = run_cli("audit", "--db", target, "--trusted-key", WRITER_KEY, *options, "--format", "json")
    return status, json.loads(out) if out else {}, err


def test_keygen_witness_ml_dsa_makes_a_type_6_key_that_only_the_witness_roles_take(
    run_cli: Run, tmp_path: Path
) -> None:
    """keygen --witness --ml-dsa: a private file, a type 0x06 verifier key printed (and again by verifier-key);
    --ml-dsa alone is exit 2 (writers are Ed25519); the key is refused as a writer's --trusted-key (exit 2)."""
    path = tmp_path / "pq.key"
    status, out, err = run_cli("keygen", "witness.example/pq", "--witness", "--ml-dsa", "--out", str(path))
    assert status == 0, err
    key = WitnessKey.parse(out.strip())
    assert key.algorithm == ALGORITHM_MLDSA44_COSIGNATURE
    assert len(key.public_key) == 1312
    assert "wrote ML-DSA-44 witness key" in err
    assert path.stat().st_mode & 0o777 == 0o600
    assert WitnessSigner.parse(path.read_text().strip()).verifier() == key
    assert run_cli("verifier-key", str(path))[1] == out
    status, _, err = run_cli("keygen", "w", "--ml-dsa", "--out", str(tmp_path / "w.key"))
    assert status == 2
    assert "--witness" in err
    assert not (tmp_path / "w.key").exists()
    status, _, err = run_cli("audit", "--db", str(tmp_path / "none.db"), "--trusted-key", out.strip())
    assert status == 2
    assert err.count("\n") == 1


@pytest.mark.parametrize("store_target", ["sqlite", "postgresql"], indirect=True)
def test_record_submit_and_audit_with_an_ml_dsa_witness(
    witness_servers: WitnessFactory, run_cli: Run, writer: Path, store_target: str
) -> None:
    """record --witness and witness submit store its cosignatures; the audit counts them (--witness-key) and takes
    its /latest (--witness-url); an Ed25519 key of another witness does not stand in for it."""
    served = witness_servers(MLDSA)
    _record(run_cli, store_target, writer, 4, "night1", _url(served))
    status, report, err = _audit(run_cli, store_target, "--witness-key", MLDSA_KEY, "--witness-url", _url(served))
    assert status == 0, (report, err)
    assert report["witnessed_size"] == 4
    _record(run_cli, store_target, writer, 2, "night2")
    status, _, err = run_cli("witness", "submit", "--db", store_target, "--witness", _url(served),
                             "--trusted-key", WRITER_KEY)
    assert status == 0, err
    status, report, err = _audit(run_cli, store_target, "--witness-key", MLDSA_KEY, "--max-witness-age", "600")
    assert status == 0, (report, err)
    assert report["witnessed_size"] == 6
    status, report, _ = _audit(run_cli, store_target, "--witness-key", ED25519_KEY)
    assert status == 1
    assert [item["kind"] for item in report["findings"]] == ["unwitnessed_rows"]  # type: ignore[index]


@pytest.mark.parametrize("store_target", ["sqlite", "postgresql"], indirect=True)
def test_receipts_and_consistency_count_ml_dsa_cosignatures_beside_ed25519_ones(
    witness_servers: WitnessFactory, run_cli: Run, writer: Path, store_target: str, tmp_path: Path
) -> None:
    """An ML-DSA-44 and an Ed25519 witness, quorum 2: prove, verify-proof and consistency count both types; with
    the ML-DSA witness's key replaced by another's, 1 of 2."""
    pq, classic = witness_servers(MLDSA), witness_servers(WITNESS)
    ids = _record(run_cli, store_target, writer, 3, "both", _url(pq), _url(classic, ED25519_KEY))
    both = ("--witness-key", MLDSA_KEY, "--witness-key", ED25519_KEY, "--witness-quorum", "2")
    status, receipt, err = run_cli("prove", ids[1], "--db", store_target, *both)
    assert status == 0, err
    (tmp_path / "r.json").write_text(receipt)
    status, out, _ = run_cli("verify-proof", str(tmp_path / "r.json"), "--trusted-key", WRITER_KEY, *both)
    assert status == 0, out
    other = WitnessSigner.from_seed("witness.example/pq", bytes(32), ALGORITHM_MLDSA44_COSIGNATURE).verifier()
    status, out, _ = run_cli("verify-proof", str(tmp_path / "r.json"), "--trusted-key", WRITER_KEY,
                             "--witness-key", other.format(), "--witness-key", ED25519_KEY, "--witness-quorum", "2")
    assert status == 1
    assert "invalid (witness): 1 of 2 cosignatures" in out
    saved = tmp_path / "witnessed.note"
    status, _, err = run_cli("audit", "--db", store_target, "--trusted-key", WRITER_KEY, *both,
                             "--save-checkpoint", str(saved))
    assert status == 0, err
    _record(run_cli, store_target, writer, 2, "later")
    status, out, err = run_cli("consistency", str(saved), "--db", store_target, *both)
    assert status == 0, out + err


@pytest.mark.parametrize("store_target", ["sqlite", "postgresql"], indirect=True)
def test_a_timestamp_of_0_counts_for_the_quorum_but_as_infinitely_old(
    witness_servers: WitnessFactory, run_cli: Run, writer: Path, store_target: str, tmp_path: Path
) -> None:
    """A witness cosigning with timestamp 0 (no freshness claim): its cosignature counts (witnessed_size, receipts),
    but no --max-witness-age makes it fresh (spec 9.3, 9.9.2), and --witness-url refuses its answer (exit 2)."""
    served = witness_servers(MLDSA, clock=lambda: 0)
    ids = _record(run_cli, store_target, writer, 3, "zero", _url(served))
    _record(run_cli, store_target, writer, 2, "after")
    status, report, err = _audit(run_cli, store_target, "--witness-key", MLDSA_KEY,
                                 "--max-witness-age", str(10**12))
    assert status == 1, err
    assert report["witnessed_size"] == 3
    findings = report["findings"]
    assert [(item["kind"], item["seq"]) for item in findings] == [("unwitnessed_rows", 4)]  # type: ignore[union-attr]
    assert "no freshness claim" in findings[0]["detail"]  # type: ignore[index]
    status, receipt, err = run_cli("prove", ids[0], "--db", store_target, "--witness-key", MLDSA_KEY)
    assert status == 0, err
    (tmp_path / "r.json").write_text(receipt)
    assert run_cli("verify-proof", str(tmp_path / "r.json"), "--trusted-key", WRITER_KEY,
                   "--witness-key", MLDSA_KEY)[0] == 0
    status, out, err = run_cli("audit", "--db", store_target, "--witness-url", _url(served))
    assert (status, out) == (2, "")
    assert "old" in err


@pytest.mark.parametrize("store_target", ["sqlite", "postgresql"], indirect=True)
def test_a_timestamp_of_0_is_infinitely_old_for_the_rows_above_since_head_too(
    witness_servers: WitnessFactory, run_cli: Run, writer: Path, store_target: str, tmp_path: Path
) -> None:
    """Spec 9.9.2: with --since, the timestamp rule judges the rows above FILE.head's size; a K-th newest
    cosignature of timestamp 0 leaves them `unwitnessed_rows` whatever --max-witness-age says."""
    served = witness_servers(MLDSA, clock=lambda: 0)
    _record(run_cli, store_target, writer, 3, "night1", _url(served))
    saved = tmp_path / "witnessed.note"
    status, _, err = run_cli("audit", "--db", store_target, "--trusted-key", WRITER_KEY, "--witness-key", MLDSA_KEY,
                             "--save-checkpoint", str(saved))
    assert status == 0, err
    assert saved.with_name("witnessed.note.head").exists()
    _record(run_cli, store_target, writer, 2, "night2")
    status, report, err = _audit(run_cli, store_target, "--since", str(saved), "--witness-key", MLDSA_KEY,
                                 "--max-witness-age", str(10**12))
    assert status == 1, err
    findings = report["findings"]
    assert [(item["kind"], item["seq"]) for item in findings] == [("unwitnessed_rows", 4)]  # type: ignore[union-attr]


def test_witness_serve_refuses_an_origin_an_ml_dsa_message_cannot_hold(run_cli: Run, tmp_path: Path) -> None:
    """`witness serve` with an ML-DSA-44 key and a --log origin over 255 bytes: exit 2, one line, no state file."""
    key = tmp_path / "pq.key"
    key.write_text(MLDSA.format() + "\n")
    key.chmod(0o600)
    status, _, err = run_cli("witness", "serve", "--key", str(key), "--log", f"{'o' * 256}={WRITER_KEY}",
                             "--state", str(tmp_path / "w.db"), "--port", "0")
    assert status == 2
    assert "255 bytes" in err
    assert err.count("\n") == 1
    assert not (tmp_path / "w.db").exists()


@pytest.mark.slow
@pytest.mark.parametrize("store_target", ["sqlite", "postgresql"], indirect=True)
def test_witness_serve_with_an_ml_dsa_key_made_by_keygen(
    run_cli: Run, writer: Path, store_target: str, tmp_path: Path
) -> None:
    """The deployment as documented: keygen --witness --ml-dsa, `witness serve` (a process of its own) with it,
    record sending to it, and an audit that asks it for /latest."""
    key_path = tmp_path / "pq.key"
    status, verifier, err = run_cli("keygen", "witness.example/pq", "--witness", "--ml-dsa", "--out", str(key_path))
    assert status == 0, err
    command = [sys.executable, "-m", "compute_budget", "witness", "serve", "--key", str(key_path), "--log",
               f"{ORIGIN}={WRITER_KEY}", "--state", str(tmp_path / "witness.db"), "--port", "0"]
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert server.stderr is not None
        line = server.stderr.readline()
        assert "(ML-DSA-44) serving 1 log(s)" in line, line
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert found is not None
        url = f"http://127.0.0.1:{found.group(1)}={verifier.strip()}"
        _record(run_cli, store_target, writer, 3, "served", url)
        status, report, err = _audit(run_cli, store_target, "--witness-key", verifier.strip(), "--witness-url", url)
        assert status == 0, (report, err)
        assert report["witnessed_size"] == 3
    finally:
        server.terminate()
        server.wait(10)
        if server.stderr is not None:
            server.stderr.close()
