"""Issue 28, the audit's witness rules (spec 9.9.1, 9.9.2, 9.9.4, 9.9.5): what the store says about witnesses is a
claim. Each test is set up as docs/operations.md's Witnessing recipe runs (a writer, a witness over real HTTP, a
nightly audit with `--since`), on both backends, and fails on 600e1f3."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from compute_budget.core.log.cosignature import valid_cosignatures
from compute_budget.core.log.note import SignerKey, format_checkpoint, parse_note, sign_note
from tests.backends import execute, query
from tests.conftest import SetUp, gate_lines
from tests.witnessing import (
    LOG,
    ORIGIN,
    WITNESS,
    WITNESS_KEY,
    WRITER_KEY,
    Served,
    WitnessFactory,
    free_port,
    late_clock,
    witness_process,
)

Run = Callable[..., tuple[int, str, str]]
AUDITOR = SignerKey.from_seed("auditor.example", bytes(range(2, 34)))


@pytest.fixture
def auditor(tmp_path: Path) -> Path:
    """The auditor's own note key file (never a --trusted-key)."""
    key = tmp_path / "auditor.key"
    key.write_text(AUDITOR.format() + "\n")
    key.chmod(0o600)
    return key


def _record(run_cli: Run, db: str, writer: Path, count: int, prefix: str, *witness: str) -> None:
    gates = writer.with_name(f"{prefix}.jsonl")
    gates.write_text("\n".join(gate_lines(count, prefix=prefix)) + "\n")
    extra = [item for url in witness for item in ("--witness", url)]
    status, _, err = run_cli("record", str(gates), "--db", db, "--signing-key", str(writer), "--origin", ORIGIN,
                             *extra)
    assert status == 0, err


def _url(port: int) -> str:
    return f"http://127.0.0.1:{port}={WITNESS_KEY}"


def _nightly(run_cli: Run, db: str, port: int, *extra: str) -> tuple[int, str, str]:
    """The Witnessing recipe's nightly witnessed audit (JSON on stdout)."""
    return run_cli("audit", "--db", db, "--trusted-key", WRITER_KEY, "--witness-key", WITNESS_KEY,
                   "--witness-url", _url(port), "--format", "json", *extra)


def _age(head: Path, seconds: int) -> None:
    """Make FILE.head's audit `seconds` older (the passing of nights, without waiting for them)."""
    body, _, _ = head.read_text().rstrip("\n").rpartition("\n")
    moment = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - seconds))
    head.write_text(f"{body}\naudit started {moment}\n")


def _plant_fresh_cosignature(served: Served, db: str) -> int:
    """The insider's move: the witness's `GET /latest` (a cosignature made on the spot, of the old size) filed in
    the store, so that the newest witnessed checkpoint looks fresh. Returns its size."""
    status, answer, _ = served.get(f"/latest?origin={urllib.parse.quote(ORIGIN, safe='')}")
    assert status == 200
    text, signatures = parse_note(answer)
    (cosigned,) = valid_cosignatures(answer, [WITNESS.verifier()], now=int(time.time()))
    line = next(item.line() for item in signatures if item.name == WITNESS.name)
    size = int(text.split("\n")[1])
    execute(db, (
        "INSERT INTO compute_budget_cosignatures (tree_size, witness_name, witness_key_id, timestamp, checkpoint, "
        "line, recorded_at) VALUES (:size, :name, :key_id, :timestamp, :text, :line, 'x')",
        {"size": size, "name": WITNESS.name, "key_id": f"{WITNESS.key_id:08x}", "timestamp": cosigned.timestamp,
         "text": text, "line": line},
    ))
    return size


# -- 9.9.2: the age of a witness's word -------------------------------------------------------------------------


def test_a_fresh_cosignature_of_an_old_size_does_not_hide_rows_the_last_audit_saw(
    served: Served, run_cli: Run, writer: Path, store_target: str, tmp_path: Path
) -> None:
    """Item c: rows 4..5 were in the store at last night's audit and no witness has cosigned them since; a fresh
    cosignature of size 3 filed in the store (from the witness's own GET /latest) made the audit CLEAN. Now FILE.head
    says they were there a day ago: unwitnessed_rows 4..5, whatever the timestamp says. Row 6, above FILE.head's
    size, is judged by the timestamp rule alone (fresh: not yet due)."""
    db = store_target
    night1, night2 = tmp_path / "night1.note", tmp_path / "night2.note"
    _record(run_cli, db, writer, 3, "seen", _url(served.port))
    status, out, err = _nightly(run_cli, db, served.port, "--save-checkpoint", str(night1))
    assert status == 0, out + err
    assert json.loads(out)["witness_age"] == "witness age from cosignature timestamps only"
    _record(run_cli, db, writer, 2, "unseen")  # the writer stops submitting: no witness sees rows 4..5
    status, out, err = _nightly(run_cli, db, served.port, "--since", str(night1), "--save-checkpoint", str(night2))
    assert status == 0, out + err  # last night's witness word is fresh: rows 4..5 are not yet due
    head = (tmp_path / "night2.note.head").read_text()
    assert head.split("\n")[1] == "5"  # the head this audit checked, signed by the writer
    assert head.splitlines()[-1].startswith("audit started ")
    _record(run_cli, db, writer, 1, "later")
    _age(tmp_path / "night2.note.head", 2 * 86400)
    assert _plant_fresh_cosignature(served, db) == 3
    status, out, err = _nightly(run_cli, db, served.port, "--since", str(night2))
    report = json.loads(out)
    assert status == 1, out + err
    assert [(item["kind"], item["seq"]) for item in report["findings"]] == [("unwitnessed_rows", 4)]
    assert "rows 4..5 (2 rows)" in report["findings"][0]["detail"]
    assert report["witnessed_size"] == 3
    assert report["witness_age"].startswith(f"witness age from {night2}.head")


def test_the_witnessing_recipe_without_since_says_its_age_comes_from_timestamps_only(
    served: Served, run_cli: Run, writer: Path, tmp_path: Path
) -> None:
    """Without --since the audit can only read cosignature timestamps, and says so (text and JSON)."""
    db = str(tmp_path / "store.db")
    _record(run_cli, db, writer, 2, "seen", _url(served.port))
    status, out, _ = run_cli("audit", "--db", db, "--trusted-key", WRITER_KEY, "--witness-key", WITNESS_KEY)
    assert status == 0
    assert "  freshness     witness age from cosignature timestamps only" in out.splitlines()
    status, out, _ = run_cli("audit", "--db", db, "--trusted-key", WRITER_KEY, "--format", "json")
    assert json.loads(out)["witness_age"] is None  # no witness keys: no witness age at all


def test_since_needs_its_head_note_which_must_be_the_writers_and_extended(
    served: Served, run_cli: Run, writer: Path, store_target: str, tmp_path: Path
) -> None:
    """--since FILE with witness keys: FILE.head missing is exit 2 naming it; one that no trusted writer signed
    (the insider's own key) or that the store no longer extends is checkpoint_mismatch, naming it."""
    db = store_target
    saved = tmp_path / "witnessed.note"
    head = tmp_path / "witnessed.note.head"
    _record(run_cli, db, writer, 4, "seen", _url(served.port))
    assert _nightly(run_cli, db, served.port, "--save-checkpoint", str(saved))[0] == 0
    honest = head.read_text()
    status, out, err = _nightly(run_cli, db, served.port, "--since", str(saved))
    assert status == 0, out + err

    head.unlink()
    status, out, err = _nightly(run_cli, db, served.port, "--since", str(saved))
    assert (status, out) == (2, "")
    assert f"{head} does not exist" in err
    assert err.count("\n") == 1

    note, _, started = honest.rstrip("\n").rpartition("\n")
    text = parse_note(note + "\n")[0]
    head.write_text(sign_note(text, AUDITOR) + started + "\n")  # a head note no trusted writer signed
    status, out, _ = _nightly(run_cli, db, served.port, "--since", str(saved))
    findings = json.loads(out)["findings"]
    assert status == 1
    assert [(item["kind"], item["seq"]) for item in findings] == [("checkpoint_mismatch", 4)]
    assert f"{head} (the head of size 4" in findings[0]["detail"]
    assert "no signature by a trusted key" in findings[0]["detail"]

    lines = text.split("\n")
    other = format_checkpoint(ORIGIN, 4, bytes(32), lines[3].split(" ")[1])  # another root: a rewritten history
    head.write_text(sign_note(other, LOG) + started + "\n")
    status, out, _ = _nightly(run_cli, db, served.port, "--since", str(saved))
    kinds = {(item["kind"], item["seq"]) for item in json.loads(out)["findings"]}
    assert status == 1
    assert ("checkpoint_mismatch", 4) in kinds


def test_save_checkpoint_with_witness_keys_keeps_its_head_under_the_same_guards(
    witness_servers: WitnessFactory, run_cli: Run, writer: Path, tmp_path: Path
) -> None:
    """FILE.head is never a symlink written through, never a report, and needs --trusted-key (the head as the
    writer signed it); an audit that is not clean replaces neither file. The witness's clock runs late: its word is
    fresh by the default maximum age, and already over 0 s old."""
    served = witness_servers(WITNESS, clock=late_clock)
    db = str(tmp_path / "store.db")
    saved = tmp_path / "kept.note"
    _record(run_cli, db, writer, 2, "seen", _url(served.port))
    status, _, err = run_cli("audit", "--db", db, "--witness-key", WITNESS_KEY, "--save-checkpoint", str(saved))
    assert status == 2
    assert "--trusted-key" in err
    (tmp_path / "elsewhere").write_text("keep me")
    (tmp_path / "kept.note.head").symlink_to(tmp_path / "elsewhere")
    status, _, err = _nightly(run_cli, db, served.port, "--save-checkpoint", str(saved))
    assert status == 2
    assert "symbolic link" in err
    assert (tmp_path / "elsewhere").read_text() == "keep me"
    (tmp_path / "kept.note.head").unlink()
    status, _, err = _nightly(run_cli, db, served.port, "--save-checkpoint", str(saved),
                              "--report", f"json:{saved}.head")
    assert status == 2
    assert not saved.exists()
    assert _nightly(run_cli, db, served.port, "--save-checkpoint", str(saved))[0] == 0
    kept = (saved.read_text(), (tmp_path / "kept.note.head").read_text())
    status, _, _ = run_cli("audit", "--db", db, "--format", "nope", "--save-checkpoint", str(saved),
                           "--report", f"json:{saved}.head")  # a command line that does not parse
    assert status == 2
    assert (saved.read_text(), (tmp_path / "kept.note.head").read_text()) == kept  # no error report replaced it
    _record(run_cli, db, writer, 1, "late")
    # the witness's word is over 0 s old (its clock runs late): the late row is unwitnessed
    status, _, err = _nightly(run_cli, db, served.port, "--since", str(saved), "--max-witness-age", "0",
                              "--save-checkpoint", str(tmp_path / "next.note"))
    assert status == 1, err
    assert not (tmp_path / "next.note").exists()
    assert not (tmp_path / "next.note.head").exists()
    assert (saved.read_text(), (tmp_path / "kept.note.head").read_text()) == kept


# -- 9.9.1: stored witness sizes are claims -----------------------------------------------------------------------


def test_a_planted_witness_size_is_named_in_the_report(
    served: Served, run_cli: Run, writer: Path, store_target: str
) -> None:
    """Item a: one row planted in compute_budget_witness_sizes (size 999999) left the audit CLEAN with no word.
    Now the report warns about it (stderr, JSON warnings), with and without the witness's key; sizes a stored
    cosignature backs are not named."""
    db = store_target
    _record(run_cli, db, writer, 3, "seen", _url(served.port))
    status, out, err = _nightly(run_cli, db, served.port)
    assert status == 0, out + err
    assert [item for item in json.loads(out)["warnings"] if "witness" in item] == []  # (PostgreSQL: a role warning)
    execute(db, (
        "INSERT INTO compute_budget_witness_sizes (witness_name, witness_key_id, tree_size, recorded_at) "
        "VALUES (:name, :key_id, 999999, 'x')",
        {"name": WITNESS.name, "key_id": f"{WITNESS.key_id:08x}"},
    ))
    assert [row[0] for row in query(db, "SELECT tree_size FROM compute_budget_witness_sizes ORDER BY id")][-1] == 999999
    for extra in (["--witness-key", WITNESS_KEY], []):
        status, out, err = run_cli("audit", "--db", db, "--trusted-key", WRITER_KEY, *extra, "--format", "json")
        warnings = [item for item in json.loads(out)["warnings"] if "witness" in item]
        assert status == 0, out + err  # a warning, not a finding: the rows themselves are sound
        assert len(warnings) == 1, warnings
        assert "cosigned size 999999, but no valid stored cosignature of that witness at exactly size 999999" in (
            warnings[0])
        assert f"warning: {warnings[0]}" in err


# -- 9.9.4: a witness's answer of another text at a cosigned size --------------------------------------------------


@contextmanager
def answering(answer: str) -> Iterator[int]:
    """A stand-in witness over real HTTP whose GET /latest serves `answer` (what an older witness, or one the insider
    fed a second text at its latest size, serves)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server calls it by this name
            payload = answer.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _other_text(db: str, size: int, how: str) -> str:
    """The store's checkpoint text at `size` with other extension lines: another chain line, or one more line."""
    stored = next(row[0] for row in query(db, f"SELECT note FROM compute_budget_checkpoints WHERE tree_size = {size}"))
    lines = parse_note(stored)[0].split("\n")
    if how == "chain":
        lines[3] = "chain " + "0" * 64
        return "\n".join(lines)
    return "\n".join([*lines[:4], "extra extension line", ""])


@pytest.mark.parametrize("how", ["chain", "extra"])
def test_a_witness_serving_another_text_at_a_cosigned_size(
    served: Served, run_cli: Run, writer: Path, store_target: str, how: str
) -> None:
    """Item k, the auditor's half: the witness serves size 3 with this store's root but another chain line (a false
    checkpoint_mismatch before) or one more extension line (exit 2, "expected 4 lines", before). Signed by the
    trusted writer, it is checkpoint_mismatch naming the --witness-url; signed by no trusted writer, exit 2."""
    db = store_target
    _record(run_cli, db, writer, 3, "seen", _url(served.port))
    text = _other_text(db, 3, how)
    now = int(time.time())
    for signer, expected in ((LOG, 1), (AUDITOR, 2)):
        answer = sign_note(text, signer) + WITNESS.cosign(text, now).line()
        with answering(answer) as port:
            status, out, err = _nightly(run_cli, db, port)
        if expected == 1:
            findings = json.loads(out)["findings"]
            assert status == 1, out + err
            assert [(item["kind"], item["seq"]) for item in findings] == [("checkpoint_mismatch", 3)]
            assert f"--witness-url (witness {WITNESS.name} at http://127.0.0.1:{port})" in findings[0]["detail"]
            assert "other extension lines" in findings[0]["detail"]
        else:
            assert (status, out) == (2, "")
            assert "no trusted writer signature on it verifies" in err
            assert err.count("\n") == 1


def test_a_witness_serving_the_stores_own_text_is_no_finding(
    served: Served, run_cli: Run, writer: Path, tmp_path: Path
) -> None:
    """The same stand-in serving the store's own checkpoint text at size 3: clean (the rule bites only on a
    difference)."""
    db = str(tmp_path / "store.db")
    _record(run_cli, db, writer, 3, "seen", _url(served.port))
    stored = next(row[0] for row in query(db, "SELECT note FROM compute_budget_checkpoints WHERE tree_size = 3"))
    text = parse_note(stored)[0]
    with answering(sign_note(text, LOG) + WITNESS.cosign(text, int(time.time())).line()) as port:
        status, out, err = _nightly(run_cli, db, port)
    assert status == 0, out + err


# -- 12: each source of a checkpoint_mismatch named once; verify-proof says its quorum ------------------------------


def test_a_mismatch_found_through_checkpoint_and_witness_url_is_named_once_per_source(
    served: Served, run_cli: Run, writer: Path, store_target: str, tmp_path: Path
) -> None:
    """The store truncated below both the kept checkpoint and the witness's: two findings (they were two identical
    unnamed ones), one naming --checkpoint, one naming the --witness-url."""
    db = store_target
    _record(run_cli, db, writer, 5, "first", _url(served.port))
    _record(run_cli, db, writer, 3, "second", _url(served.port))
    kept = tmp_path / "kept.note"
    assert _nightly(run_cli, db, served.port, "--save-checkpoint", str(kept))[0] == 0
    execute(db, "DELETE FROM compute_budget_decisions WHERE seq > 5", "DELETE FROM compute_budget_checkpoints "
            "WHERE tree_size > 5", "DELETE FROM compute_budget_cosignatures WHERE tree_size > 5",
            "DELETE FROM compute_budget_tree_nodes", lift_guard=True, lift_seal=True)
    status, out, err = _nightly(run_cli, db, served.port, "--checkpoint", str(kept))
    details = [item["detail"] for item in json.loads(out)["findings"] if item["seq"] == 8]
    assert status == 1, out + err
    assert len(details) == 2, details
    assert details[0].startswith("--checkpoint: ")
    assert details[1].startswith(f"--witness-url (witness {WITNESS.name} at http://127.0.0.1:{served.port}): ")


def test_verify_proof_with_witness_keys_says_the_quorum_it_checked(
    served: Served, run_cli: Run, writer: Path, tmp_path: Path
) -> None:
    """`valid: ...` gains `witnessed: 1 of 1 cosignatures` with --witness-key, and says nothing of witnesses
    without."""
    db = str(tmp_path / "store.db")
    _record(run_cli, db, writer, 2, "seen", _url(served.port))
    budget_id = str(query(db, "SELECT budget_id FROM compute_budget_decisions WHERE seq = 1")[0][0])
    status, receipt, err = run_cli("prove", budget_id, "--db", db, "--witness-key", WITNESS_KEY)
    assert status == 0, err
    (tmp_path / "receipt.json").write_text(receipt)
    status, out, _ = run_cli("verify-proof", str(tmp_path / "receipt.json"), "--trusted-key", WRITER_KEY,
                             "--witness-key", WITNESS_KEY)
    assert status == 0
    assert out.startswith("valid: ")
    assert "; witnessed: 1 of 1 cosignatures" in out
    status, out, _ = run_cli("verify-proof", str(tmp_path / "receipt.json"), "--trusted-key", WRITER_KEY)
    assert status == 0
    assert "witnessed" not in out


# -- 9.9.5: an auditor's signature is never a writer's ---------------------------------------------------------------


def test_cosign_needs_trusted_keys_and_is_never_one(
    run_cli: Run, writer: Path, auditor: Path, store_target: str, tmp_path: Path
) -> None:
    """Item e: `audit --cosign writer.key` without --trusted-key signed the head over a keyless forged row with the
    writer's key. Now --cosign without --trusted-key is exit 2, a --cosign key among the --trusted-keys is exit 2,
    and with the writer trusted the forged row is unattested_rows: nothing is signed."""
    db = store_target
    saved = tmp_path / "night.note"
    _record(run_cli, db, writer, 3, "honest")
    forged = tmp_path / "forged.jsonl"
    forged.write_text("\n".join(gate_lines(1, prefix="forged")) + "\n")
    assert run_cli("record", str(forged), "--db", db, "--unsigned")[0] == 0  # a keyless row, as an insider appends
    status, out, err = run_cli("audit", "--db", db, "--save-checkpoint", str(saved), "--cosign", str(writer))
    assert (status, out) == (2, "")
    assert "--trusted-key" in err
    status, out, err = run_cli("audit", "--db", db, "--trusted-key", WRITER_KEY, "--save-checkpoint", str(saved),
                               "--cosign", str(writer))
    assert (status, out) == (2, "")
    assert "is also a --trusted-key" in err
    status, out, err = run_cli("audit", "--db", db, "--trusted-key", WRITER_KEY, "--save-checkpoint", str(saved),
                               "--cosign", str(auditor), "--format", "json")
    assert status == 1
    assert [item["kind"] for item in json.loads(out)["findings"]] == ["unattested_rows"]
    assert not saved.exists()
    count = query(db, "SELECT count(*) FROM compute_budget_checkpoints")[0][0]
    assert count == 1  # the writer's own: the audit wrote nothing into the store either


def test_the_cosigned_note_is_accepted_on_its_writer_signature_and_checked_by_auditor_key(
    run_cli: Run, writer: Path, auditor: Path, store_target: str, tmp_path: Path
) -> None:
    """The keys recipe (docs/operations.md): tonight's cosigned note is tomorrow's --since, accepted on the writer's
    signature (the auditor's key is not trusted); `consistency --auditor-key` checks the auditor's line, and refuses
    (exit 1) a note without it."""
    db = store_target
    tonight, tomorrow = tmp_path / "auditor.note", tmp_path / "auditor.next"
    _record(run_cli, db, writer, 3, "night1")
    status, _, err = run_cli("audit", "--db", db, "--trusted-key", WRITER_KEY, "--save-checkpoint", str(tonight),
                             "--cosign", str(auditor))
    assert status == 0, err
    _record(run_cli, db, writer, 2, "night2")
    status, out, err = run_cli("audit", "--db", db, "--since", str(tonight), "--trusted-key", WRITER_KEY,
                               "--save-checkpoint", str(tomorrow), "--cosign", str(auditor), "--format", "json")
    assert status == 0, out + err
    assert json.loads(out)["mode"] == "incremental"
    auditor_key = AUDITOR.verifier().format()
    status, out, err = run_cli("consistency", str(tomorrow), "--db", db, "--trusted-key", WRITER_KEY,
                               "--auditor-key", auditor_key)
    assert status == 0, out + err
    status, text, _ = run_cli("checkpoint", "--db", db, "--signing-key", str(writer))
    (tmp_path / "writer-only.note").write_text(text)
    status, out, err = run_cli("consistency", str(tmp_path / "writer-only.note"), "--db", db,
                               "--trusted-key", WRITER_KEY, "--auditor-key", auditor_key)
    assert status == 1
    assert "the auditor's line" in err


# -- the Witnessing recipe (docs/operations.md), run as written ----------------------------------------------------


@pytest.mark.slow
def test_the_readmes_witnessing_recipe_runs_for_three_nights(tmp_path: Path, set_up: SetUp) -> None:
    """The Witnessing block as it stands (the witness's address and state file made local): a witness served by
    `witness serve`, records sent to it, the first night's full audit keeping witnessed.note and its .head, two
    nightly `--since` audits moving both, and the receipt verified with the witness's quorum said. Before the second
    night a second witness is added as the section says (the writer sends to both, the nightly gains its
    `--witness-key`, the default quorum then all of them): every night is clean, no new baseline (spec 11.5). The
    third night's rows 8..9 no witness is told of: once that night's .head is a day older, they are
    unwitnessed_rows. The block's commands run in a shell, every night; the writer's key, the second witness (in a
    thread), the receipt and the rows kept from the witnesses are made in this process."""
    import shlex
    import subprocess

    from compute_budget.core.log.cosignature import WitnessSigner
    from compute_budget.core.log.note import VerifierKey
    from tests.e2e.test_docs import OPERATIONS, commands, fenced, shell
    from tests.witnessing import witness_in_thread

    steps = commands(fenced("", "Witnessing", doc=OPERATIONS)[0])
    assert len(steps) == 7, steps
    keygen, serve, record, submit, first_night, nightly, verify = steps
    assert "--since witnessed.note" in nightly
    assert "mv witnessed.next.head witnessed.note.head" in nightly
    port = free_port()
    head = tmp_path / "witnessed.note.head"
    second = WitnessSigner.from_seed("witness.example/w2", bytes(range(3, 35)))
    second_key = second.verifier().format()

    def local(command: str) -> str:
        return (command.replace("witness.internal:7380", f"127.0.0.1:{port}")
                .replace("/var/lib/witness/witness.db", "witness.db")
                .replace("--host 10.0.0.2", f"--host 127.0.0.1 --port {port}"))

    def run(command: str) -> subprocess.CompletedProcess[str]:
        done = shell(local(command), tmp_path)
        assert done.returncode == 0, (command, done.stderr)
        return done

    def gates(name: str, count: int) -> None:
        (tmp_path / "gates.jsonl").write_text("\n".join(gate_lines(count, prefix=name)) + "\n")

    def size(path: Path) -> int:
        return int(path.read_text().split("\n")[1])

    set_up(tmp_path, "keygen", "writer/prod", stdout="writer.pub")
    run(keygen)
    logs = {"example.org/prod": [VerifierKey.parse((tmp_path / "writer.pub").read_text().strip())]}
    with witness_process(local(serve), tmp_path, port), \
            witness_in_thread(tmp_path / "w2.db", second, logs) as added:
        gates("day0", 4)
        run(record)
        run(submit)
        run(first_night)
        assert size(head) == 4
        # the second witness, added as the section says: the writer sends to it, the nightly names its key
        record = f"{record} --witness http://127.0.0.1:{added.port}={second_key}"
        nightly = nightly.replace(" --save-checkpoint", f" --witness-key {second_key} --save-checkpoint")
        gates("day1", 3)
        assert "cosigned by 2/2 witnesses" in run(record).stderr
        assert "CLEAN" in run(nightly).stdout
        assert (size(head), size(tmp_path / "witnessed.note")) == (7, 7)
        assert not list(tmp_path.glob("witnessed.next*"))
        assert f"\n\u2014 {second.name} " in (tmp_path / "witnessed.note").read_text()
        budget_id = str(query(str(tmp_path / "compute_budget.db"),
                              "SELECT budget_id FROM compute_budget_decisions WHERE seq = 2")[0][0])
        set_up(tmp_path, "prove", budget_id, "--witness-key", (tmp_path / "witness.pub").read_text().strip(),
               stdout="receipt.json")
        assert "; witnessed: 1 of 1 cosignatures" in run(verify).stdout
        gates("day2", 2)
        unwitnessed = shlex.split(record.split(" --witness ")[0])
        assert unwitnessed[0] == "compute-budget"
        set_up(tmp_path, *unwitnessed[1:])  # the witnesses are not told of rows 8..9
        run(nightly)  # the newest witnessed checkpoint (7) is fresh: rows 8..9 are not yet due
        assert (size(head), size(tmp_path / "witnessed.note")) == (9, 7)  # the head checked; the note witnessed
        _age(head, 86400 + 60)
        done = shell(local(nightly), tmp_path)
        assert done.returncode == 1, done.stderr
        assert "unwitnessed_rows" in done.stdout
        assert "rows 8..9 (2 rows) are unwitnessed" in done.stdout


def test_the_python_api_reads_the_head_beside_a_since_path_and_takes_one_given(
    served: Served, run_cli: Run, writer: Path, store_target: str, tmp_path: Path
) -> None:
    """`audit(since=PATH, witness_keys=...)` reads PATH.head (missing: `CheckpointError` naming it); `since_head=`
    takes a `HeadNote`'s text instead; a `since` object without one judges by timestamps only and says so."""
    from compute_budget import audit
    from compute_budget.auditor.scan import load_checkpoint
    from compute_budget.errors import CheckpointError

    db = store_target
    saved = tmp_path / "kept.note"
    _record(run_cli, db, writer, 3, "seen", _url(served.port))
    _record(run_cli, db, writer, 2, "unseen")
    assert _nightly(run_cli, db, served.port, "--save-checkpoint", str(saved))[0] == 0  # witnessed 3, head 5
    head_text = (tmp_path / "kept.note.head").read_text()
    report = audit(db, since=str(saved), trusted_keys=[WRITER_KEY], witness_keys=[WITNESS_KEY])
    assert report.clean, report.findings
    assert report.witness_age is not None
    assert report.witness_age.startswith(f"witness age from {saved}.head")
    _age(tmp_path / "kept.note.head", 2 * 86400)
    aged = (tmp_path / "kept.note.head").read_text()
    (tmp_path / "kept.note.head").unlink()
    with pytest.raises(CheckpointError, match=r"kept\.note\.head does not exist"):
        audit(db, since=str(saved), trusted_keys=[WRITER_KEY], witness_keys=[WITNESS_KEY])
    report = audit(db, since=load_checkpoint(str(saved)), trusted_keys=[WRITER_KEY], witness_keys=[WITNESS_KEY],
                   since_head=aged)
    assert [(item.kind.value, item.seq) for item in report.findings] == [("unwitnessed_rows", 4)]
    report = audit(db, since=load_checkpoint(str(saved)), trusted_keys=[WRITER_KEY], witness_keys=[WITNESS_KEY])
    assert report.clean  # no head: the cosignature of size 3 is fresh, so rows 4..5 are not yet due
    assert report.witness_age == "witness age from cosignature timestamps only"
    assert head_text != aged


def test_a_witness_key_added_on_a_later_night_takes_the_kept_head_as_the_since(
    served: Served, run_cli: Run, writer: Path, auditor: Path, store_target: str, tmp_path: Path
) -> None:
    """Spec 11.5 over a database: night 1 audits with --trusted-key and --cosign only, keeping FILE and (now) its
    FILE.head; night 2 adds --witness-key with --since FILE. FILE is its head's own checkpoint, kept by an audit
    with no witness keys: no cosignature is asked of it, and the night is clean. A FILE that is not its head's
    checkpoint still needs them."""
    db = store_target
    kept, fresh = tmp_path / "kept.note", tmp_path / "next.note"
    _record(run_cli, db, writer, 3, "night1")
    status, _, err = run_cli("audit", "--db", db, "--trusted-key", WRITER_KEY, "--cosign", str(auditor),
                             "--save-checkpoint", str(kept))
    assert status == 0, err
    assert (tmp_path / "kept.note.head").read_text().split("\n")[1] == "3"
    _record(run_cli, db, writer, 2, "night2", _url(served.port))
    status, out, err = _nightly(run_cli, db, served.port, "--since", str(kept), "--save-checkpoint", str(fresh))
    assert status == 0, out + err
    assert (json.loads(out)["rows_checked"], json.loads(out)["witnessed_size"]) == (2, 5)
    assert (tmp_path / "next.note.head").read_text().split("\n")[1] == "5"
    (tmp_path / "kept.note.head").write_text((tmp_path / "next.note.head").read_text())  # another size than FILE's
    status, out, _ = _nightly(run_cli, db, served.port, "--since", str(kept))
    assert status == 1
    assert ("bad_signature", 3) in [(item["kind"], item["seq"]) for item in json.loads(out)["findings"]]
