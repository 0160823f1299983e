"""The audit with a witness (`--witness-key`, `--witness-url`, spec 9.3's roles) against a writer whose key was
stolen: substitution, rollback, truncation, a fork, planted or misfiled cosignatures. Each is set up as in the
deployment of docs/operations.md's Witnessing recipe (a writer, a witness on its own state, a nightly audit
requiring the witness), and each test shows what catches it."""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import gate_lines
from tests.witnessing import ORIGIN, WITNESS, WITNESS_KEY, WRITER_KEY, Served, WitnessFactory, late_clock

Run = Callable[..., tuple[int, str, str]]


def _record(run_cli: Run, db: Path, writer: Path, count: int, prefix: str, *witness: str) -> None:
    gates = db.with_name(f"{prefix}.jsonl")
    gates.write_text("\n".join(gate_lines(count, prefix=prefix)) + "\n")
    extra = [item for url in witness for item in ("--witness", url)]
    status, _, err = run_cli("record", str(gates), "--db", str(db), "--signing-key", str(writer), "--origin", ORIGIN,
                             *extra)
    assert status == 0, err


def _backup(db: Path, to: Path) -> None:
    with sqlite3.connect(db) as source, sqlite3.connect(to) as target:
        source.backup(target)


def _url(served: Served) -> str:
    return f"http://127.0.0.1:{served.port}={WITNESS_KEY}"


def test_a_fresh_witnessed_store_audits_clean_and_reports_its_witnessed_size(
    served: Served, run_cli: Run, writer: Path, tmp_path: Path
) -> None:
    """With the witness reachable: the audit with --witness-key and --witness-url is clean; JSON and text name the
    witnessed size."""
    db = tmp_path / "store.db"
    _record(run_cli, db, writer, 6, "night1", _url(served))
    status, out, err = run_cli("audit", "--db", str(db), "--trusted-key", WRITER_KEY, "--witness-key", WITNESS_KEY,
                               "--witness-url", _url(served), "--format", "json")
    assert status == 0, out + err
    report = json.loads(out)
    assert report["witnessed_size"] == 6
    assert report["witness_keys"] == [WITNESS_KEY]
    status, out, _ = run_cli("audit", "--db", str(db), "--witness-key", WITNESS_KEY)
    assert status == 0
    assert f"  witnessed     through seq 6 by witness keys ({WITNESS_KEY.rsplit('+', 1)[0]})" in out.splitlines()


def test_rows_after_the_witnessed_checkpoint_are_unwitnessed_once_it_is_too_old(
    witness_servers: WitnessFactory, run_cli: Run, writer: Path, tmp_path: Path
) -> None:
    """Rows recorded with no witness: `unwitnessed_rows`, one finding naming the first row, the range in detail. The
    witness's clock runs late: its word is fresh by the default maximum age, and already over 0 s old."""
    served = witness_servers(WITNESS, clock=late_clock)
    db = tmp_path / "store.db"
    _record(run_cli, db, writer, 3, "seen", _url(served))
    _record(run_cli, db, writer, 2, "unseen")
    status, out, _ = run_cli("audit", "--db", str(db), "--witness-key", WITNESS_KEY, "--format", "json")
    assert status == 0, out  # the witnessed checkpoint is fresh: rows after it are not yet due
    status, out, _ = run_cli("audit", "--db", str(db), "--witness-key", WITNESS_KEY, "--max-witness-age", "0",
                             "--format", "json")
    report = json.loads(out)
    assert status == 1
    assert [(item["kind"], item["seq"]) for item in report["findings"]] == [("unwitnessed_rows", 4)]
    assert "rows 4..5 (2 rows)" in report["findings"][0]["detail"]
    assert report["witnessed_size"] == 3


def test_substitution_a_writer_only_note_is_no_witness(
    served: Served, run_cli: Run, writer: Path, tmp_path: Path
) -> None:
    """A --since note signed only by the writer, of a checkpoint no witness cosigned, does not stand in for a
    witness: bad_signature, 0 of 1 (before, one --trusted-key list took it for both roles). The night's FILE.head
    (spec 9.9.2) stays in place; removed too, the audit cannot run (exit 2, naming it)."""
    db = tmp_path / "store.db"
    _record(run_cli, db, writer, 4, "night1", _url(served))
    note = tmp_path / "writer-only.note"
    status, _, err = run_cli("audit", "--db", str(db), "--trusted-key", WRITER_KEY, "--witness-key", WITNESS_KEY,
                             "--save-checkpoint", str(note))
    assert status == 0, err
    _record(run_cli, db, writer, 1, "unwitnessed")
    status, text, err = run_cli("checkpoint", "--db", str(db), "--signing-key", str(writer))
    assert status == 0, err
    note.write_text(text)  # the substitution: the witnessed note replaced by a writer-only one
    status, _, _ = run_cli("audit", "--db", str(db), "--since", str(note), "--trusted-key", WRITER_KEY)
    assert status == 0  # as a writer's note, it is fine
    status, out, _ = run_cli("audit", "--db", str(db), "--since", str(note), "--trusted-key", WRITER_KEY,
                             "--witness-key", WITNESS_KEY, "--format", "json")
    findings = json.loads(out)["findings"]
    assert status == 1
    assert [item["kind"] for item in findings] == ["bad_signature"]
    assert "0 of 1 cosignatures" in findings[0]["detail"]
    (tmp_path / "writer-only.note.head").unlink()
    status, out, err = run_cli("audit", "--db", str(db), "--since", str(note), "--trusted-key", WRITER_KEY,
                               "--witness-key", WITNESS_KEY)
    assert (status, out) == (2, "")
    assert f"{note}.head does not exist" in err


def test_rollback_the_database_and_the_since_file_put_back_is_caught_by_the_witness(
    served: Served, run_cli: Run, writer: Path, tmp_path: Path
) -> None:
    """The store restored from an older backup (and the auditor's --since replaced by an older valid one): the
    witness's latest checkpoint is larger than the store, so `--witness-url` reports checkpoint_mismatch."""
    db = tmp_path / "store.db"
    _record(run_cli, db, writer, 5, "night1", _url(served))
    _backup(db, tmp_path / "backup.db")
    _record(run_cli, db, writer, 5, "night2", _url(served))
    _backup(tmp_path / "backup.db", db)  # restored through SQLite, as an operator restores a backup
    status, out, err = run_cli("audit", "--db", str(db), "--format", "json")
    assert status == 0, err  # without the witness, the rolled-back store looks fine
    status, out, _ = run_cli("audit", "--db", str(db), "--witness-url", _url(served), "--format", "json")
    findings = json.loads(out)["findings"]
    assert status == 1
    assert {item["kind"] for item in findings} == {"checkpoint_mismatch"}


def test_truncation_after_the_last_witness_with_the_head_re_signed_is_caught(
    served: Served, run_cli: Run, writer: Path, tmp_path: Path
) -> None:
    """Rows 8..10 cut and two other rows appended and signed with the stolen key, never shown to the witness:
    `--witness-url` finds the witness's size-10 checkpoint is not extended."""
    db = tmp_path / "store.db"
    _record(run_cli, db, writer, 7, "night1", _url(served))
    _backup(db, tmp_path / "at7.db")
    (tmp_path / "writer.key.state").rename(tmp_path / "state-at7")
    shutil.copy(tmp_path / "state-at7", tmp_path / "writer.key.state")
    _record(run_cli, db, writer, 3, "night2", _url(served))
    _backup(tmp_path / "at7.db", db)
    shutil.copy(tmp_path / "state-at7", tmp_path / "writer.key.state")  # the thief's state file matches the store
    _record(run_cli, db, writer, 2, "forged")
    status, out, _ = run_cli("audit", "--db", str(db), "--trusted-key", WRITER_KEY, "--format", "json")
    assert status == 0  # nightly and weekly alike pass without a witness
    status, out, _ = run_cli("audit", "--db", str(db), "--trusted-key", WRITER_KEY, "--witness-url", _url(served),
                             "--format", "json")
    assert status == 1
    assert "checkpoint_mismatch" in {item["kind"] for item in json.loads(out)["findings"]}


def test_a_fork_is_refused_by_the_witness_and_its_receipts_by_verify_proof(
    served: Served, run_cli: Run, writer: Path, tmp_path: Path
) -> None:
    """Two size-20 histories signed by the writer: the witness cosigns the first, refuses the second (409) and
    keeps it as evidence; a receipt from the fork fails `verify-proof --witness-key`."""
    honest, fork = tmp_path / "honest.db", tmp_path / "fork.db"
    _record(run_cli, honest, writer, 10, "shared", _url(served))
    _backup(honest, fork)
    shutil.copy(tmp_path / "writer.key.state", tmp_path / "fork.state")
    _record(run_cli, honest, writer, 10, "honest", _url(served))
    gates = tmp_path / "forged.jsonl"
    gates.write_text("\n".join(gate_lines(10, prefix="forged")) + "\n")
    status, _, err = run_cli("record", str(gates), "--db", str(fork), "--signing-key", str(writer),
                             "--writer-state", str(tmp_path / "fork.state"), "--witness", _url(served))
    assert status == 0, err
    assert "409" in err  # the witness refused the fork
    kept, _ = served.state.evidence(ORIGIN)
    assert len(kept) == 1
    assert kept[0].note.split("\n")[1] == "20"
    forged_id = str(sqlite3.connect(fork).execute("SELECT budget_id FROM compute_budget_decisions WHERE seq = 15")
                    .fetchone()[0])
    status, receipt, err = run_cli("prove", forged_id, "--db", str(fork))
    assert status == 0, err
    (tmp_path / "forged.json").write_text(receipt)
    status, out, _ = run_cli("verify-proof", str(tmp_path / "forged.json"), "--trusted-key", WRITER_KEY)
    assert status == 0  # the writer's signature alone vouches for the fork
    status, out, _ = run_cli("verify-proof", str(tmp_path / "forged.json"), "--trusted-key", WRITER_KEY,
                             "--witness-key", WITNESS_KEY)
    assert (status, out) == (1, "invalid (witness): 0 of 1 cosignatures\n")
    status, out, _ = run_cli("audit", "--db", str(fork), "--witness-url", _url(served), "--format", "json")
    assert status == 1
    assert "checkpoint_mismatch" in {item["kind"] for item in json.loads(out)["findings"]}


def test_witness_url_that_cannot_answer_is_exit_2(run_cli: Run, writer: Path, tmp_path: Path) -> None:
    """An unreachable witness: the audit cannot run (exit 2), one line naming it."""
    import socket

    db = tmp_path / "store.db"
    _record(run_cli, db, writer, 2, "night1")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    status, out, err = run_cli("audit", "--db", str(db), "--witness-url", f"http://127.0.0.1:{port}={WITNESS_KEY}")
    assert (status, out) == (2, "")
    assert "cannot be reached" in err
    assert err.count("\n") == 1


def test_prove_carries_stored_cosignatures_and_with_witness_keys_picks_a_witnessed_checkpoint(
    served: Served, run_cli: Run, writer: Path, tmp_path: Path
) -> None:
    """A receipt's note carries the stored cosignatures, so it verifies with --witness-key; `prove --witness-key`
    proves against the newest checkpoint the witnesses cosigned, and refuses (exit 2) a row after it."""
    db = tmp_path / "store.db"
    _record(run_cli, db, writer, 4, "witnessed", _url(served))
    _record(run_cli, db, writer, 2, "later")
    ids = [row[0] for row in sqlite3.connect(db).execute("SELECT budget_id FROM compute_budget_decisions ORDER BY seq")]
    status, receipt, err = run_cli("prove", ids[1], "--db", str(db), "--witness-key", WITNESS_KEY)
    assert status == 0, err
    assert json.loads(receipt)["tree_size"] == 4
    (tmp_path / "r.json").write_text(receipt)
    status, out, _ = run_cli("verify-proof", str(tmp_path / "r.json"), "--trusted-key", WRITER_KEY,
                             "--witness-key", WITNESS_KEY)
    assert status == 0, out
    status, _, err = run_cli("prove", ids[5], "--db", str(db), "--witness-key", WITNESS_KEY)
    assert status == 2
    assert "carries 1 cosignature" in err
    status, receipt, _ = run_cli("prove", ids[1], "--db", str(db))
    assert json.loads(receipt)["tree_size"] == 6  # without witness keys: the newest covering checkpoint, unwitnessed


def test_consistency_and_save_checkpoint_with_witness_keys(
    served: Served, run_cli: Run, writer: Path, tmp_path: Path
) -> None:
    """`audit --save-checkpoint --witness-key` keeps the newest witnessed checkpoint with its cosignature;
    `consistency --witness-key` accepts that note and refuses (exit 1) a writer-only one."""
    db = tmp_path / "store.db"
    _record(run_cli, db, writer, 3, "night1", _url(served))
    saved = tmp_path / "witnessed.note"
    status, _, err = run_cli("audit", "--db", str(db), "--trusted-key", WRITER_KEY, "--witness-key", WITNESS_KEY,
                             "--save-checkpoint", str(saved))
    assert status == 0, err
    assert f"saved checkpoint seq 3 to {saved}" in err
    assert "— witness.example/w1 " in saved.read_text()
    _record(run_cli, db, writer, 2, "night2")
    status, out, err = run_cli("consistency", str(saved), "--db", str(db), "--witness-key", WITNESS_KEY)
    assert status == 0, out + err
    status, text, _ = run_cli("checkpoint", "--db", str(db), "--signing-key", str(writer))
    (tmp_path / "writer-only.note").write_text(text)
    status, out, err = run_cli("consistency", str(tmp_path / "writer-only.note"), "--db", str(db),
                               "--witness-key", WITNESS_KEY)
    assert status == 1
    assert "0 of 1 cosignatures" in out + err
    empty = tmp_path / "none.note"
    db2 = tmp_path / "unwitnessed.db"
    (tmp_path / "alone.jsonl").write_text("\n".join(gate_lines(2, prefix="alone")) + "\n")
    status, _, err = run_cli("record", str(tmp_path / "alone.jsonl"), "--db", str(db2), "--signing-key", str(writer),
                             "--writer-state", str(tmp_path / "alone.state"), "--origin", ORIGIN)
    assert status == 0, err
    status, _, err = run_cli("audit", "--db", str(db2), "--trusted-key", WRITER_KEY, "--witness-key", WITNESS_KEY,
                             "--max-witness-age", "999999", "--save-checkpoint", str(empty))
    assert status == 1  # unwitnessed rows
    assert not empty.exists()


def test_a_planted_cosignature_claiming_the_witness_is_bad_signature(
    served: Served, run_cli: Run, writer: Path, tmp_path: Path
) -> None:
    """An insider inserts a cosignature row filed as the trusted witness's whose signature does not verify: it
    never counts (the witnessed size stays 3), and the audit reports it as bad_signature instead of passing over it."""
    import base64

    db = tmp_path / "store.db"
    _record(run_cli, db, writer, 3, "seen", _url(served))
    with sqlite3.connect(db) as connection:
        row = connection.execute(
            "SELECT tree_size, witness_name, witness_key_id, timestamp, checkpoint, line, recorded_at "
            "FROM compute_budget_cosignatures ORDER BY id DESC LIMIT 1"
        ).fetchone()
        prefix, encoded = row[5].rstrip("\n").rsplit(" ", 1)
        raw = bytearray(base64.b64decode(encoded))
        raw[-1] ^= 0x01  # the key ID and timestamp still claim the witness; the signature no longer holds
        forged = f"{prefix} {base64.b64encode(bytes(raw)).decode()}\n"
        connection.execute(
            "INSERT INTO compute_budget_cosignatures (tree_size, witness_name, witness_key_id, timestamp, checkpoint, "
            "line, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?)", (*row[:5], forged, row[6]),
        )
    status, out, err = run_cli("audit", "--db", str(db), "--trusted-key", WRITER_KEY, "--witness-key", WITNESS_KEY,
                               "--format", "json")
    report = json.loads(out)
    assert status == 1, out + err
    assert [(item["kind"], item["seq"]) for item in report["findings"]] == [("bad_signature", 3)]
    assert "filed as witness" in report["findings"][0]["detail"]
    assert report["witnessed_size"] == 3
    status, out, _ = run_cli("audit", "--db", str(db), "--trusted-key", WRITER_KEY, "--format", "json")
    assert status == 0, out  # without witness keys nobody claims to check cosignatures


def test_a_cosignature_filed_under_another_size_counts_for_its_own_and_is_no_rewrite(
    served: Served, run_cli: Run, writer: Path, tmp_path: Path
) -> None:
    """A genuine cosignature of size 3 copied into the store as size 7's: it verifies, for size 3. It does not count
    for 7 (7 stays unwitnessed), it is no rewrite of history (an earlier version called it one, seq 7..7), and as a
    real cosignature of this store it is no bad signature either."""
    db = tmp_path / "store.db"
    _record(run_cli, db, writer, 3, "seen", _url(served))
    _record(run_cli, db, writer, 4, "unseen")
    with sqlite3.connect(db) as connection:
        connection.execute(
            "INSERT INTO compute_budget_cosignatures (tree_size, witness_name, witness_key_id, timestamp, checkpoint, "
            "line, recorded_at) SELECT 7, witness_name, witness_key_id, timestamp, checkpoint, line, recorded_at "
            "FROM compute_budget_cosignatures WHERE tree_size = 3"
        )
    status, out, err = run_cli("audit", "--db", str(db), "--trusted-key", WRITER_KEY, "--witness-key", WITNESS_KEY,
                               "--all-signatures", "--format", "json")
    report = json.loads(out)
    assert status == 0, out + err
    assert report["rewritten_between"] is None
    assert report["witnessed_size"] == 3


def test_another_logs_cosignature_and_a_fork_filed_in_the_store_are_reported(
    served: Served, run_cli: Run, writer: Path, tmp_path: Path
) -> None:
    """Valid cosignatures the insider files in the store below the newest witnessed checkpoint, found with
    --all-signatures: one of another log's checkpoint is bad_signature (it cosigns nothing here); one of this log at
    size 3 with another root is checkpoint_mismatch at 3, wherever it is filed (it used to become a 'planted row'
    when filed under another size)."""
    from compute_budget.core.log.note import format_checkpoint

    db = tmp_path / "store.db"
    _record(run_cli, db, writer, 5, "seen", _url(served))
    with sqlite3.connect(db) as connection:
        chain = connection.execute("SELECT chain_hash FROM compute_budget_decisions WHERE seq = 3").fetchone()[0]
        planted = [
            (2, format_checkpoint("other.example/log", 2, bytes(32), chain), "bad_signature", 2),
            (4, format_checkpoint(ORIGIN, 3, b"\x01" * 32, chain), "checkpoint_mismatch", 3),
        ]
        for filed, text, _, _ in planted:
            line = WITNESS.cosign(text, int(time.time()) - 10).line()
            connection.execute(
                "INSERT INTO compute_budget_cosignatures (tree_size, witness_name, witness_key_id, timestamp, "
                "checkpoint, line, recorded_at) VALUES (?, ?, ?, 0, ?, ?, 'x')",
                (filed, WITNESS.name, f"{WITNESS.key_id:08x}", text, line),
            )
    status, out, err = run_cli("audit", "--db", str(db), "--trusted-key", WRITER_KEY, "--witness-key", WITNESS_KEY,
                               "--format", "json")
    assert status == 0, out + err  # by default the scan stops at the newest witnessed checkpoint (size 5)
    status, out, err = run_cli("audit", "--db", str(db), "--trusted-key", WRITER_KEY, "--witness-key", WITNESS_KEY,
                               "--all-signatures", "--format", "json")
    report = json.loads(out)
    assert status == 1, out + err
    found = sorted((item["kind"], item["seq"]) for item in report["findings"])
    assert found == sorted((kind, seq) for _, _, kind, seq in planted)
    assert report["witnessed_size"] == 5


def test_the_stored_cosignature_scan_is_linear_in_its_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no size ever reaching the quorum (two witness keys required, one witness cosigning every size), the
    K-th timestamp (the policy's tally) is worked out for one size per check, not by re-ranking every size seen so
    far at each size change (quadratic: minutes at 100,000 sizes). Counted in calls, not timed."""
    from compute_budget.auditor import witness_rules as module
    from compute_budget.core.log.cosignature import generate_witness
    from compute_budget.core.log.note import format_checkpoint

    sizes = 2000
    now = int(time.time())
    texts = {size: format_checkpoint(ORIGIN, size, bytes(32), "0" * 64) for size in range(1, sizes + 1)}
    rows = [(size, texts[size], WITNESS.cosign(texts[size], now - 5).line()) for size in range(sizes, 0, -1)]

    class Rows:
        def cosignatures_newest_first(self, at_most: int) -> list[tuple[int, str, str]]:
            return rows

        def link_at(self, seq: int) -> None:
            return None

    from compute_budget.core.log.witness_policy import QuorumTally, TlogPolicy

    calls = {"tally": 0}
    real_tally = TlogPolicy.tally

    def counted(self: TlogPolicy, newest: dict[object, int]) -> QuorumTally:
        calls["tally"] += 1
        return real_tally(self, newest)  # type: ignore[arg-type]

    monkeypatch.setattr(TlogPolicy, "tally", counted)
    monkeypatch.setattr(module, "_placement", lambda snapshot, origin, filed, text, max_seq: (filed, None))
    keys = (WITNESS.verifier(), generate_witness("w2").verifier())
    policy = module.WitnessRequirement(TlogPolicy.from_witness_keys(keys, 2), 86400, now)
    size, findings = module.witnessed(Rows(), policy, ORIGIN, (), sizes)  # type: ignore[arg-type]
    assert size == 0
    assert [finding.kind.value for finding in findings] == ["unwitnessed_rows"]
    assert calls["tally"] <= 2 * sizes
