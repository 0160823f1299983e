"""The key rotation recipe (docs/operations.md, "Rotating a writer key") and the leaked-key runbook
(docs/incident.md, "A writer key leaked") run as they stand (issue 31, items 1 and 2): each documented block
through the shell, the set-up before it and the checks after it in this process."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import SetUp, gate_lines
from tests.e2e.test_docs import OPERATIONS, commands, fenced, shell, with_examples
from tests.witnessing import free_port, witness_process


def run(command: str, folder: Path) -> str:
    done = shell(command, folder)
    assert done.returncode == 0, (command, done.stderr)
    return done.stdout + done.stderr


@pytest.mark.slow
def test_the_rotation_recipe_runs(tmp_path: Path, set_up: SetUp,
                                  run_cli: Callable[..., tuple[int, str, str]]) -> None:
    """The old key records the examples, hands the log over, the new key records more; the audit with
    `--retired` is clean and a receipt proven after the rotation verifies with both keys."""
    (block,) = fenced("sh", "Rotating a writer key", doc=OPERATIONS)
    folder = with_examples(tmp_path)
    (folder / "more.jsonl").write_text("\n".join(gate_lines(2, prefix="more")) + "\n")
    set_up(folder, "keygen", "writer", stdout="writer.pub")
    set_up(folder, "record", "examples/gates.jsonl", "--db", "store.db", "--signing-key", "writer.key")
    out = run(block, folder)
    assert "CLEAN" in out
    assert "valid: budget_id 1640737b" in out
    assert "handed" in out
    # The old key's writer now refuses: the handover retired it.
    status, _, refused = run_cli("record", "more.jsonl", "--db", "store.db", "--signing-key", "writer.key")
    assert status == 2
    assert "handover" in refused


@pytest.mark.slow
def test_the_leaked_key_runbook_runs_as_written(tmp_path: Path, set_up: SetUp) -> None:
    """Rows 1..3 witnessed, then two rows signed with the stolen key: the revoked audit names them, they are
    reviewed, rows 1..3 are salvaged into a new origin, the reviewed gates re-recorded with the new key, and the
    new log audits clean."""
    *blocks, rewitness = fenced("sh", "A writer key leaked", doc="docs/incident.md")
    assert len(blocks) == 2
    (tmp_path / "gates.jsonl").write_text("\n".join(gate_lines(3)) + "\n")
    (tmp_path / "stolen.jsonl").write_text("\n".join(gate_lines(2, prefix="stolen")) + "\n")
    writer = set_up(tmp_path, "keygen", "writer", stdout="writer.pub").strip()
    set_up(tmp_path, "keygen", "auditor", stdout="auditor.pub")
    set_up(tmp_path, "record", "gates.jsonl", "--db", "store.db", "--signing-key", "writer.key")
    set_up(tmp_path, "audit", "--db", "store.db", "--trusted-key", writer, "--save-checkpoint", "witnessed.note",
           "--cosign", "auditor.key")
    set_up(tmp_path, "record", "stolen.jsonl", "--db", "store.db", "--signing-key", "writer.key")
    assert (tmp_path / "witnessed.note").read_text().split("\n")[1] == "3"
    out = run("\n".join(blocks), tmp_path)
    report = (tmp_path / "leak-audit.txt").read_text()
    assert "unattested_rows" in report
    assert "revoked at 3" in report
    assert len((tmp_path / "after-leak.jsonl").read_text().splitlines()) == 2
    assert "adopted 3 rows (seq 1..3)" in out
    assert "CLEAN" in out
    # Step 4, re-witness: a witness of the new origin under the new key cosigns the salvaged head.
    serve, submit = commands(rewitness)
    port = free_port()
    witness = set_up(tmp_path, "keygen", "witness.example/w1", "--witness", stdout="witness.pub").strip()
    with witness_process(serve.replace("/var/lib/witness/", "").replace(
            "--host 10.0.0.2 --allow-host witness.internal", f"--host 127.0.0.1 --port {port}"), tmp_path, port):
        out = run(submit.replace("witness.internal:7380", f"127.0.0.1:{port}"), tmp_path)
    assert f"cosigned by witness witness.example/w1 at http://127.0.0.1:{port}" in out
    assert "witnessed     through seq 5 by witness keys" in set_up(
        tmp_path, "audit", "--db", "salvaged.db", "--trusted-key", (tmp_path / "writer-2.pub").read_text().strip(),
        "--witness-key", witness,
    )
