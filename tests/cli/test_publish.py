"""`compute-budget publish DIR` (spec 10.1): its exit statuses and the lines it prints, the witness quorum over a real
witness on loopback, and the docs' publishing recipe run as it stands."""

from __future__ import annotations

import fcntl
import io
import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from compute_budget.auditor.report import AuditReport
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.head import EMPTY_HEAD
from compute_budget.core.log.note import parse_note
from compute_budget.core.verify import Finding, FindingKind
from compute_budget.publication_writer.checks import Refusal
from compute_budget.publication_writer.run import PublishOutcome
from tests.backends import insert_sql, tamper
from tests.conftest import REPO_ROOT, gate_lines
from tests.publishing_helpers import assert_valid_publication, leaf_inputs, published_files
from tests.sealing import forged_row, signer
from tests.witnessing import LOG, ORIGIN, WITNESS, WITNESS_KEY, WRITER_KEY, Served

Run = Callable[..., tuple[int, str, str]]


def _record(run_cli: Run, db: str, writer: Path, count: int, prefix: str, *witness: str) -> None:
    gates = Path(writer).with_name(f"{prefix}.jsonl")
    gates.write_text("\n".join(gate_lines(count, prefix=prefix)) + "\n")
    extra = [item for url in witness for item in ("--witness", url)]
    status, _, err = run_cli("record", str(gates), "--db", db, "--signing-key", str(writer), "--origin", ORIGIN, *extra)
    assert status == 0, err


@pytest.mark.postgres_smoke
def test_publish_prints_what_it_wrote_then_that_dir_is_current(
    run_cli: Run, store_target: str, writer: Path, tmp_path: Path
) -> None:
    _record(run_cli, store_target, writer, 300, "first")
    folder = str(tmp_path / "log")
    status, out, err = run_cli("publish", folder, "--db", store_target, "--trusted-key", WRITER_KEY)
    assert (status, err) == (0, "")
    assert out == f"published 300 rows to {folder} (before: 0): 6 file(s) written, 0 already there\n"
    _record(run_cli, store_target, writer, 300, "second")
    status, out, _ = run_cli("publish", folder, "--db", store_target, "--trusted-key", WRITER_KEY)
    assert status == 0
    assert out.startswith(f"published 600 rows to {folder} (before: 300): 6 file(s) written")
    assert "2 partial tile(s) replaced by full ones removed" in out
    status, out, _ = run_cli("publish", folder, "--db", store_target, "--trusted-key", WRITER_KEY)
    assert (status, out) == (0, f"{folder} already publishes the newest trusted checkpoint (600 rows)\n")
    assert_valid_publication(folder, leaf_inputs(store_target, 600), [LOG.verifier()], size=600)


def test_findings_in_the_new_rows_print_the_audit_report_and_exit_1(
    run_cli: Run, store_target: str, writer: Path, tmp_path: Path
) -> None:
    _record(run_cli, store_target, writer, 20, "first")
    tamper(store_target, "UPDATE compute_budget_decisions SET max_steps = max_steps + 1 WHERE seq = 4")
    folder = tmp_path / "log"
    status, out, err = run_cli("publish", str(folder), "--db", store_target, "--trusted-key", WRITER_KEY)
    assert status == 1
    assert "rederive_mismatch" in out
    assert "seq 4" in out
    assert f"nothing was written to {folder}" in err
    assert published_files(folder) == {}


def test_a_refusal_beside_an_audit_report_prints_both_refusal_first(capsys: pytest.CaptureFixture[str]) -> None:
    """A handover to a key not given, and a finding it does not explain: the advice line, then the report."""
    from compute_budget.cli.publish import _refused

    finding = Finding(FindingKind.BAD_SIGNATURE, None, 3, "stored checkpoint #9: forged")
    report = AuditReport("store.db", 0, (finding,), EMPTY_HEAD, {}, {}, 0.0)
    _refused(PublishOutcome("log", 3, 3, refusal=Refusal("bad_signature", "the store holds a handover"),
                            report=report), text=True)
    out, err = capsys.readouterr()
    assert out.startswith("bad_signature: the store holds a handover; nothing was written\n")
    assert "stored checkpoint #9: forged" in out
    assert "nothing was written to log" in err


def test_a_forged_dir_checkpoint_is_bad_signature_exit_1(
    run_cli: Run, store_target: str, writer: Path, tmp_path: Path
) -> None:
    _record(run_cli, store_target, writer, 5, "first")
    folder = tmp_path / "log"
    run_cli("publish", str(folder), "--db", store_target, "--trusted-key", WRITER_KEY)
    note = (folder / "checkpoint").read_text()
    (folder / "checkpoint").write_text(note.replace("\n5\n", "\n4\n", 1))  # the size changed: the signature fails
    status, out, _ = run_cli("publish", str(folder), "--db", store_target, "--trusted-key", WRITER_KEY)
    assert status == 1
    assert re.fullmatch(r"bad_signature: \S+/checkpoint: its signature by example\.org/log\+\w{8} does not verify "
                        r"\(forged\?\); nothing was written\n", out), out


def test_an_edited_full_tile_is_published_mismatch_exit_1(
    run_cli: Run, store_target: str, writer: Path, tmp_path: Path
) -> None:
    _record(run_cli, store_target, writer, 300, "first")
    folder = tmp_path / "log"
    run_cli("publish", str(folder), "--db", store_target, "--trusted-key", WRITER_KEY)
    _record(run_cli, store_target, writer, 300, "second")
    (folder / "tile/entries/001").write_bytes(b"\x00\x01x")  # a full bundle an earlier publish left, edited
    status, out, _ = run_cli("publish", str(folder), "--db", store_target, "--trusted-key", WRITER_KEY)
    assert status == 1
    assert out.startswith(f"published_mismatch: {folder}/tile/entries/001 is already published with other bytes")
    assert out.endswith("; nothing was written\n")


def test_what_stops_a_publish_from_running_is_one_line_exit_2(
    run_cli: Run, store_target: str, writer: Path, tmp_path: Path
) -> None:
    """No trusted checkpoint; no --trusted-key; a quorum without witness keys; DIR locked: one line each, exit 2."""
    folder = str(tmp_path / "log")
    with_rows = ["--db", store_target, "--trusted-key", WRITER_KEY]
    _record(run_cli, store_target, writer, 3, "first")
    other = signer("someone-else").verifier().format()
    status, _, err = run_cli("publish", folder, "--db", store_target, "--trusted-key", other)
    assert status == 2
    assert err.count("\n") == 1
    assert "no checkpoint signed by a --trusted-key" in err
    assert "record with --signing-key" in err
    status, _, err = run_cli("publish", folder, "--db", store_target)
    assert status == 2
    assert "--trusted-key" in err
    status, _, err = run_cli("publish", folder, *with_rows, "--witness-quorum", "1")
    assert status == 2
    assert "a witness quorum needs --witness-key" in err
    Path(folder).mkdir(exist_ok=True)
    with open(Path(folder) / ".publish.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        status, _, err = run_cli("publish", folder, *with_rows)
    assert status == 2
    assert "another publish holds" in err
    assert err.count("\n") == 1


def test_a_row_too_long_for_an_entry_is_exit_2_naming_the_salvage(
    run_cli: Run, store_target: str, writer: Path, tmp_path: Path
) -> None:
    _record(run_cli, store_target, writer, 10, "first")
    huge = forged_row(store_target, evidence_spans=[{"text": "x" * 70_000, "start": 0, "end": 1, "sentence_index": 0}])
    tamper(store_target, insert_sql(huge))
    gates = tmp_path / "after.jsonl"
    gates.write_text(gate_lines(1, prefix="after")[0] + "\n")
    status, _, err = run_cli("record", str(gates), "--db", store_target, "--signing-key", str(writer),
                             "--adopt-unsigned", "11")
    assert status == 0, err
    status, _, err = run_cli("publish", str(tmp_path / "log"), "--db", store_target, "--trusted-key", WRITER_KEY)
    assert status == 2
    assert "row 11's leaf input is" in err
    assert "`compute-budget copy SRC DST --through 10`" in err
    assert published_files(tmp_path / "log") == {}


def test_with_witness_keys_the_newest_witnessed_checkpoint_is_published_with_its_cosignature(
    served: Served, run_cli: Run, writer: Path, tmp_path: Path
) -> None:
    """Over a real witness on loopback: 6 rows cosigned, 2 more not. With --witness-key the publish is of size 6 and
    its checkpoint carries the writer's signature and the witness's cosignature; without, of size 8 with the writer's
    signature only (a cosignature the publisher was given no key to verify is left out)."""
    db = str(tmp_path / "store.db")
    url = f"http://127.0.0.1:{served.port}={WITNESS_KEY}"
    _record(run_cli, db, writer, 6, "seen", url)
    _record(run_cli, db, writer, 2, "unseen")
    witnessed, plain = tmp_path / "witnessed", tmp_path / "plain"
    waiting = ("rows 7..8 wait for the witness quorum (the newest checkpoint that meets it is at 6): once the "
               f"witnesses answer, `compute-budget witness submit --db {db} --witness URL=KEY`, then publish again\n")
    status, out, err = run_cli("publish", str(witnessed), "--db", db, "--trusted-key", WRITER_KEY,
                               "--witness-key", WITNESS_KEY)
    assert status == 0, out + err
    assert out.startswith(f"published 6 rows to {witnessed} (before: 0)")
    assert out.endswith(f"; {waiting}")
    note = (witnessed / "checkpoint").read_text()
    assert Checkpoint.from_note(note).seq == 6
    assert [line.name for line in parse_note(note)[1]] == [LOG.name, WITNESS.name]
    # Run again with the witness still behind: current, and never "the newest trusted checkpoint" with 8 rows stored
    status, out, err = run_cli("publish", str(witnessed), "--db", db, "--trusted-key", WRITER_KEY,
                               "--witness-key", WITNESS_KEY)
    assert (status, out) == (0, f"{witnessed} already publishes the newest checkpoint the witness quorum cosigned "
                                f"(6 rows); {waiting}")
    policy = tmp_path / "policy.txt"
    policy.write_text(f"log {WRITER_KEY}\nwitness w1 {WITNESS_KEY} http://127.0.0.1:{served.port}\nquorum w1\n")
    status, out, err = run_cli("publish", str(witnessed), "--db", db, "--policy", str(policy))
    assert status == 0, out + err
    assert out.endswith(f"`compute-budget witness submit --db {db} --policy {policy}`, then publish again\n")
    status, out, _ = run_cli("publish", str(witnessed), "--db", db, "--policy", str(policy), "--format", "json")
    assert (status, json.loads(out)["size"], json.loads(out)["unwitnessed_size"]) == (0, 6, 8)
    status, out, err = run_cli("publish", str(plain), "--db", db, "--trusted-key", WRITER_KEY)
    assert status == 0, out + err
    assert "wait for the witness quorum" not in out
    note = (plain / "checkpoint").read_text()
    assert Checkpoint.from_note(note).seq == 8
    assert [line.name for line in parse_note(note)[1]] == [LOG.name]
    status, _, err = run_cli("publish", str(tmp_path / "none"), "--db", db, "--trusted-key", WRITER_KEY,
                             "--witness-key", WITNESS_KEY, "--witness-key", WRITER_KEY.replace("example.org", "w2"))
    assert status == 2


def _operations_section() -> str:
    text = (REPO_ROOT / "docs/operations.md").read_text(encoding="utf-8")
    start = text.index("\n## Publishing the log\n")
    end = text.find("\n## ", start + 1)
    return text[start:end]


@pytest.mark.slow
def test_the_publishing_recipe_runs_as_documented(tmp_path: Path) -> None:
    """docs/operations.md's recipe as it stands (keygen, record, publish twice: the second, as the cron line's runs,
    finds nothing new), then DIR served with the `python -m http.server` command the docs give: the checkpoint and a
    full tile come back over HTTP, and the cron line is the command the recipe ran."""
    from tests.e2e.test_docs import commands, fenced, shell

    block = fenced("sh", "Publishing the log", doc="docs/operations.md")[0]
    (tmp_path / "gates.jsonl").write_text("\n".join(gate_lines(300)) + "\n")
    done = shell("\n".join(commands(block)), tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-2].startswith("published 300 rows to public")
    assert done.stdout.splitlines()[-1] == "public already publishes the newest trusted checkpoint (300 rows)"
    serve = re.search(r"`(python3 -m http\.server 8000 --directory public --bind 127\.0\.0\.1)`", _operations_section())
    assert serve is not None
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [sys.executable, *serve.group(1).split()[1:]]
    argv[argv.index("8000")] = str(port)
    server = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        checkpoint = _fetch(f"http://127.0.0.1:{port}/checkpoint")
        tile = _fetch(f"http://127.0.0.1:{port}/tile/0/000")
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert checkpoint == (tmp_path / "public/checkpoint").read_bytes()
    assert Checkpoint.from_note(checkpoint).seq == 300
    assert len(tile) == 8192
    cron = fenced("cron", "Publishing the log", doc="docs/operations.md")[0]
    assert "compute-budget publish /srv/www/compute-budget --db compute_budget.db --trusted-key writer.pub" in cron


def _fetch(url: str) -> bytes:
    """GET `url`, retrying while the server starts."""
    for _ in range(100):
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return bytes(answer.read())
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url} never answered")


def test_witnesses_added_later_publish_over_an_unwitnessed_publication(
    served: Served, run_cli: Run, writer: Path, tmp_path: Path
) -> None:
    """Spec 11.5: DIR published without witnesses (6 rows); rows then cosigned by a witness; `publish --witness-key`
    takes DIR's checkpoint on the writer's signature alone and writes one that carries the cosignature."""
    db = str(tmp_path / "store.db")
    folder = tmp_path / "log"
    _record(run_cli, db, writer, 6, "unwitnessed")
    status, out, err = run_cli("publish", str(folder), "--db", db, "--trusted-key", WRITER_KEY)
    assert status == 0, out + err
    _record(run_cli, db, writer, 2, "witnessed", f"http://127.0.0.1:{served.port}={WITNESS_KEY}")
    status, out, err = run_cli("publish", str(folder), "--db", db, "--trusted-key", WRITER_KEY,
                               "--witness-key", WITNESS_KEY)
    assert status == 0, out + err
    assert out.startswith(f"published 8 rows to {folder} (before: 6)")
    note = (folder / "checkpoint").read_text()
    assert [line.name for line in parse_note(note)[1]] == [LOG.name, WITNESS.name]


def test_format_json_is_a_summary_of_what_was_written_or_why_not(
    run_cli: Run, store_target: str, writer: Path, tmp_path: Path
) -> None:
    """`--format json`: one JSON object on stdout with the fields docs/cli.md lists; with a refusal (exit 1) its
    kind and detail, with the audit's findings (exit 1) the audit's own JSON report."""
    _record(run_cli, store_target, writer, 300, "first")
    folder = tmp_path / "log"
    status, out, err = run_cli("publish", str(folder), "--db", store_target, "--trusted-key", WRITER_KEY,
                               "--format", "json")
    assert (status, err) == (0, "")
    summary = json.loads(out)
    assert summary == {
        "folder": str(folder), "published": True, "previous_size": 0, "size": 300,
        "written": ["tile/entries/000", "tile/0/000", "tile/entries/001.p/44", "tile/0/001.p/44", "tile/1/000.p/1",
                    "checkpoint"],
        "handovers_written": [], "unchanged": 0, "removed": [], "tidied": [], "refusal": None, "audit": None,
        "unwitnessed_size": None,
    }
    (folder / "tile/0/001").write_bytes(b"\x00" * 8192)  # a full tile a crashed run left, edited
    _record(run_cli, store_target, writer, 300, "second")
    status, out, _ = run_cli("publish", str(folder), "--db", store_target, "--trusted-key", WRITER_KEY,
                             "--format", "json")
    summary = json.loads(out)
    assert (status, summary["published"], summary["size"], summary["written"]) == (1, False, 300, [])
    assert summary["refusal"]["kind"] == "published_mismatch"
    assert "tile/0/001" in summary["refusal"]["detail"]
    tamper(store_target, "UPDATE compute_budget_decisions SET max_steps = max_steps + 1 WHERE seq = 4")
    status, out, _ = run_cli("publish", str(tmp_path / "other"), "--db", store_target, "--trusted-key", WRITER_KEY,
                             "--format", "json")
    summary = json.loads(out)
    assert (status, summary["published"], summary["refusal"]) == (1, False, None)
    assert any(finding["seq"] == 4 for finding in summary["audit"]["findings"])


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_publish_shows_its_progress_and_off_one_nothing(
    run_cli: Run, store_target: str, writer: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stderr a terminal: the bar names the phases (auditing, publishing); stdout's line is unchanged. Every other
    test here shows that off a terminal stderr stays empty."""
    from compute_budget.cli import run

    _record(run_cli, store_target, writer, 600, "first")
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setenv("TERM", "xterm")
    status = run(["publish", str(tmp_path / "log"), "--db", store_target, "--trusted-key", WRITER_KEY])
    monkeypatch.undo()
    assert status == 0
    drawn = terminal.getvalue()
    assert "publishing" in drawn
    assert "Traceback" not in drawn
