"""`compute-budget witness serve|show` as an operator runs them: a real process, SIGTERM, a port in use, the state."""

from __future__ import annotations

import base64
import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from compute_budget.core.log.cosignature import WitnessSigner
from compute_budget.core.log.merkle import MemoryTree, leaf_hash, root_from_reader
from compute_budget.core.log.note import format_checkpoint, sign_note
from compute_budget.witness import state as state_module
from tests.witnessing import FORK, LOG, ORIGIN, TREE, WITNESS, Served, body, note

Run = Callable[..., tuple[int, str, str]]
LOG_ARG = f"{ORIGIN}={LOG.verifier().format()}"


def _witness_key(run_cli: Run, tmp_path: Path) -> Path:
    status, _, err = run_cli("keygen", "witness.example/w1", "--witness", "--out", str(tmp_path / "w.key"))
    assert status == 0, err
    return tmp_path / "w.key"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.slow
def test_serve_cosigns_then_stops_cleanly_on_sigterm_and_show_prints_the_state(run_cli: Run, tmp_path: Path) -> None:
    """A served witness cosigns over HTTP; SIGTERM stops it with exit 0; `witness show` prints the size and root."""
    key = _witness_key(run_cli, tmp_path)
    port = _free_port()
    state = tmp_path / "witness.db"
    process = subprocess.Popen(
        [sys.executable, "-m", "compute_budget", "witness", "serve", "--key", str(key), "--log",
         LOG_ARG, "--state", str(state), "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 20
        answer = None
        while answer is None and time.monotonic() < deadline:
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                connection.request("POST", "/add-checkpoint", body=body(0, note(7)))
                answer = connection.getresponse()
            except OSError:
                connection.close()
                time.sleep(0.1)
        assert answer is not None
        line = answer.read().decode()
        connection.close()
        assert answer.status == 200
        signer = WitnessSigner.parse(key.read_text().strip())
        assert line.startswith(f"— {signer.name} ")
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=20)
    assert process.returncode == 0, err
    assert "Traceback" not in err
    assert "witness stopped" in err
    status, out, err = run_cli("witness", "show", "--state", str(state))
    assert status == 0, err
    assert out.splitlines()[0].split("\t") == [ORIGIN, "size 7", "root " + body(0, note(7)).decode().split("\n")[4]]


def test_a_port_in_use_and_a_bad_log_are_one_line_each(run_cli: Run, tmp_path: Path) -> None:
    """Exit 2 and one line: the port is taken; a --log without '='; a writer key where a witness key belongs; a
    witness key where the log's key belongs, named as the --log key it is."""
    key = _witness_key(run_cli, tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        status, out, err = run_cli("witness", "serve", "--key", str(key), "--log", LOG_ARG,
                                   "--state", str(tmp_path / "w.db"), "--port", str(port))
    assert (status, out) == (2, "")
    assert err.count("\n") == 1
    assert "already in use" in err
    assert not (tmp_path / "w.db").exists()  # the port is taken first: no state file left behind
    status, _, err = run_cli("witness", "serve", "--key", str(key), "--log", "no-equals-sign")
    assert status == 2
    assert "ORIGIN=VERIFIER_KEY" in err
    writer_key = tmp_path / "writer.key"
    writer_key.write_text(LOG.format() + "\n")
    os.chmod(writer_key, 0o600)
    status, _, err = run_cli("witness", "serve", "--key", str(writer_key), "--log", LOG_ARG)
    assert status == 2
    assert "note key (type 0x01)" in err
    assert LOG.format() not in err
    assert base64.b64encode(LOG.seed).decode() not in err
    witness_as_log = f"example.org/log={WITNESS.verifier().format()}"  # the witness's own key given as the log's
    status, _, err = run_cli("witness", "serve", "--key", str(key), "--log", witness_as_log)
    assert status == 2
    assert "log key of origin 'example.org/log' (--log)" in err
    assert "trusted key" not in err


def test_a_non_loopback_bind_needs_allow_host_and_show_needs_a_state(run_cli: Run, tmp_path: Path) -> None:
    """Spec 9.4: a non-loopback --host without --allow-host is exit 2; `show` of a missing state is exit 2."""
    key = _witness_key(run_cli, tmp_path)
    status, _, err = run_cli("witness", "serve", "--key", str(key), "--log", LOG_ARG,
                             "--host", "0.0.0.0")
    assert status == 2
    assert "--allow-host" in err
    status, _, err = run_cli("witness", "show", "--state", str(tmp_path / "missing.db"))
    assert status == 2
    assert "no witness state" in err


def test_show_prints_conclusive_evidence_and_pending_notes_apart(
    run_cli: Run, served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28 d, k: `witness show` prints the conclusive evidence with its label (`fork`, `extension_mismatch`)
    and, apart, the pending notes (refused at the proof check), each with the count past its cap."""
    monkeypatch.setattr(state_module, "MAX_EVIDENCE_PER_ORIGIN", 2)
    monkeypatch.setattr(state_module, "MAX_PENDING_PER_ORIGIN", 1)
    root8 = body(0, note(8)).decode().split("\n")[4]
    assert served.post(body(0, note(8)))[0] == 200
    other_text = sign_note(format_checkpoint(ORIGIN, 8, root_from_reader(TREE, 8), "cd" * 32), LOG)
    assert served.post(body(8, other_text))[0] == 409
    assert served.post(body(8, note(8, tree=FORK)))[0] == 409
    third = note(8, tree=MemoryTree(leaf_hash(b"third %d" % index) for index in range(8)))
    assert served.post(body(8, third))[0] == 409
    for size in (12, 13):
        assert served.post(body(8, note(size), proof=[leaf_hash(b"junk")]))[0] == 422
    status, out, err = run_cli("witness", "show", "--state", str(served.state.path))
    assert status == 0, err
    fork_root = body(0, note(8, tree=FORK)).decode().split("\n")[4]
    root12 = body(0, note(12)).decode().split("\n")[4]
    assert out.splitlines() == [
        f"{ORIGIN}\tsize 8\troot {root8}",
        f"{ORIGIN}\tfork evidence: 2 conclusive note(s) (and 1 more not kept)",
        f"  extension_mismatch: size 8 root {root8}",
        f"  fork: size 8 root {fork_root}",
        f"{ORIGIN}\tpending: 1 note(s) whose proof did not verify, not evidence until the witness cosigns their "
        "size (and 1 more not kept)",
        f"  pending: size 12 root {root12}",
    ]
