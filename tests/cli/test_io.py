"""Output guards: a report or checkpoint never lands on what the command reads, or on a device."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

Run = Callable[..., tuple[int, str, str]]
EXAMPLES = str(REPO_ROOT / "examples" / "gates.jsonl")


@pytest.fixture
def recorded(run_cli: Run, db_path: Path) -> Path:
    """A store holding the example gates."""
    assert run_cli("record", EXAMPLES, "--db", str(db_path))[0] == 0
    return db_path


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm", "-journal"])
@pytest.mark.parametrize("option", ["--output", "--save-checkpoint"])
def test_outputs_never_replace_the_database_or_its_journals(
    run_cli: Run, recorded: Path, suffix: str, option: str
) -> None:
    """The audited database and its -wal, -shm and -journal files are refused as outputs (exit 2)."""
    target = recorded.with_name(recorded.name + suffix)
    status, _, err = run_cli("audit", "--db", str(recorded), option, str(target))
    assert status == 2
    assert "database being audited" in err
    assert not target.exists() or suffix in ("", "-wal", "-shm")
    assert run_cli("audit", "--db", str(recorded))[0] == 0  # and the next audit still runs


@pytest.mark.parametrize("reading", ["--checkpoint", "--since"])
@pytest.mark.parametrize("writing", ["--output", "--save-checkpoint"])
def test_outputs_never_replace_the_checkpoint_being_read(
    run_cli: Run, recorded: Path, tmp_path: Path, reading: str, writing: str
) -> None:
    """The checkpoint given to --checkpoint or --since cannot also be the report or the new checkpoint."""
    checkpoint = tmp_path / "checkpoint.json"
    _, text, _ = run_cli("checkpoint", "--db", str(recorded))
    checkpoint.write_text(text, encoding="utf-8")
    status, _, err = run_cli("audit", "--db", str(recorded), reading, str(checkpoint), writing, str(checkpoint))
    assert status == 2
    assert f"also given to {reading}" in err
    assert checkpoint.read_text(encoding="utf-8") == text


@pytest.mark.parametrize("device", ["/dev/null", "fifo", "link-to-null"])
def test_outputs_refuse_devices_fifos_and_links_to_them(
    run_cli: Run, recorded: Path, tmp_path: Path, device: str
) -> None:
    """Writing atomically would replace a device name with a regular file: refused instead, device intact."""
    if device == "fifo":
        target = tmp_path / "fifo"
        os.mkfifo(target)
    elif device == "link-to-null":
        target = tmp_path / "null"
        target.symlink_to("/dev/null")
    else:
        target = Path(device)
    status, _, err = run_cli("audit", "--db", str(recorded), "--output", str(target))
    assert status == 2
    assert "not a regular file" in err
    assert Path("/dev/null").is_char_device()


@pytest.mark.slow
def test_dev_stdout_is_refused_when_it_is_a_pipe(recorded: Path) -> None:
    """`--output /dev/stdout` on a pipe (as in cron) is refused, not replaced by a file named /dev/stdout."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "compute_budget", "audit", "--db", str(recorded), "--output", "/dev/stdout"],
        capture_output=True, text=True, check=False,
    )
    assert done.returncode == 2
    assert "not a regular file" in done.stderr
    assert Path("/dev/stdout").is_symlink()


def test_a_failed_write_leaves_no_temporary_file(recorded: Path, tmp_path: Path) -> None:
    """A write that fails midway (the text cannot be encoded) leaves no .compute-budget-*.tmp behind."""
    from compute_budget.cli.io import write_atomically
    from compute_budget.errors import OutputUnwritable

    target = tmp_path / "report.txt"
    with pytest.raises((OutputUnwritable, UnicodeEncodeError)):
        write_atomically(str(target), "lone surrogate \ud800")
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".compute-budget-")] == []
    assert not target.exists()


def test_a_fifo_checkpoint_is_refused_without_hanging(run_cli: Run, recorded: Path, tmp_path: Path) -> None:
    """--checkpoint and --since on a FIFO: one line, exit 2, no hang."""
    fifo = tmp_path / "checkpoint.fifo"
    os.mkfifo(fifo)
    for option in ("--checkpoint", "--since"):
        status, _, err = run_cli("audit", "--db", str(recorded), option, str(fifo))
        assert status == 2
        assert "not a regular file" in err


def test_a_checkpoint_written_by_the_first_release_still_reads(run_cli: Run, recorded: Path, tmp_path: Path) -> None:
    """The checkpoint document's format name is a contract: `compute_budget.checkpoint.v1`, as released."""
    _, text, _ = run_cli("checkpoint", "--db", str(recorded))
    assert '"format": "compute_budget.checkpoint.v1"' in text
    checkpoint = tmp_path / "old.json"
    checkpoint.write_text(text, encoding="utf-8")
    assert run_cli("audit", "--db", str(recorded), "--checkpoint", str(checkpoint))[0] == 0


@pytest.mark.slow
def test_a_slow_producer_on_stdin_does_not_hold_the_append_lock(tmp_path: Path) -> None:
    """`record` reads a piped INPUT to its end before it takes the append lock: another writer records while
    the producer is still writing, instead of waiting behind it."""
    import json
    import subprocess
    import sys
    import threading
    import time

    from compute_budget import BudgetStore
    from tests.conftest import gate_lines

    db = tmp_path / "store.db"
    with BudgetStore.open(db) as store:
        store.record(gate_lines(1, prefix="first")[0])
    slow = subprocess.Popen(
        [sys.executable, "-m", "compute_budget", "record", "-", "--db", str(db)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert slow.stdin is not None
    # More than a whole chunk (500 gates), so a writer that did not spool would already hold the lock.
    slow.stdin.write("".join(line + "\n" for line in gate_lines(700, prefix="slow")).encode())
    slow.stdin.flush()
    # Give a writer that did not spool the time to insert its first chunk (its WAL grows) and so hold the lock.
    wal = db.with_name(db.name + "-wal")
    size = wal.stat().st_size if wal.exists() else 0
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline and (wal.stat().st_size if wal.exists() else 0) <= size:
        time.sleep(0.05)
    finished = threading.Event()

    def other_writer() -> None:
        with BudgetStore.open(db) as store:
            store.record(json.loads(gate_lines(1, prefix="other")[0]))
        finished.set()

    writer = threading.Thread(target=other_writer, daemon=True)
    writer.start()
    writer.join(timeout=30)  # a deadlock guard, not a timing: with the lock held it would wait for stdin's end
    done_while_producing, still_writing = finished.is_set(), slow.poll() is None
    _, err = slow.communicate((gate_lines(1, prefix="slow-late")[0] + "\n").encode(), timeout=120)
    assert slow.returncode == 0, err
    assert done_while_producing
    assert still_writing
    with BudgetStore.open(db, readonly=True) as store:
        assert store.count() == 703


@pytest.mark.parametrize("command", ["decide", "record"])
def test_a_line_longer_than_any_gate_stops_the_input_with_one_line(
    run_cli: Run, db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """INPUT is read a line at a time up to `MAX_LINE_BYTES`: `/dev/zero` (one endless line) or a file that is no
    JSON Lines is refused once that much is read, instead of filling the memory; record writes nothing."""
    import compute_budget.cli.io as cli_io

    monkeypatch.setattr(cli_io, "MAX_LINE_BYTES", 1 << 20)
    long_line = tmp_path / "long.jsonl"
    long_line.write_bytes(Path(EXAMPLES).read_bytes() + b'{"decision_id": "' + b"x" * (1 << 20) + b'"}\n')
    for source in (str(long_line), "/dev/zero"):
        argv = [command, source] + (["--db", str(db_path)] if command == "record" else [])
        status, _, err = run_cli(*argv)
        assert status == 2
        assert err.count("\n") == 1
        assert "is longer than 1 MiB, which no gate is (is INPUT a device, or not JSON Lines?)" in err
    assert not db_path.exists() or run_cli("list", "--db", str(db_path), "--format", "jsonl")[1] == ""


@pytest.mark.parametrize(
    "option",
    [("--output",), ("--report", "junit:"), ("--report", "json:"), ("--save-checkpoint",)],
)
def test_no_output_is_written_through_a_symbolic_link(
    run_cli: Callable[..., tuple[int, str, str]], recorded: Path, tmp_path: Path, option: tuple[str, ...]
) -> None:
    """Issue 19: a link planted where an output goes (aimed at a key file, in the trial) is refused, naming it;
    the file it points to is untouched."""
    victim = tmp_path / "writer.key"
    victim.write_text("PRIVATE+KEY+the-victim\n")
    link = tmp_path / "out.file"
    link.symlink_to(victim)
    value = option[-1] + str(link) if option[-1].endswith(":") else str(link)
    status, _, err = run_cli("audit", "--db", str(recorded), option[0], value)
    assert status == 2
    assert f"{link} is a symbolic link" in err
    assert victim.read_text() == "PRIVATE+KEY+the-victim\n"
    assert link.is_symlink()


def test_keygen_never_writes_through_a_symbolic_link(
    run_cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    """Even a dangling link: keygen --out refuses it by name and creates nothing where it points."""
    target = tmp_path / "somewhere.key"
    link = tmp_path / "new.key"
    link.symlink_to(target)
    status, out, err = run_cli("keygen", "writer", "--out", str(link))
    assert (status, out) == (2, "")
    assert f"{link} is a symbolic link" in err
    assert not target.exists()


def test_a_link_planted_after_the_checks_is_still_not_written_through(tmp_path: Path) -> None:
    """write_atomically checks again when it writes (a link may appear between the option check and the end of a
    long audit)."""
    from compute_budget.cli.io import write_atomically
    from compute_budget.errors import OutputUnwritable

    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "report").symlink_to(victim)
    with pytest.raises(OutputUnwritable, match="symbolic link"):
        write_atomically(str(tmp_path / "report"), "new")
    assert victim.read_text() == "keep"


@pytest.mark.parametrize("command", ["decide", "record"])
def test_a_json_array_on_one_line_longer_than_any_gate_is_read_in_blocks(
    run_cli: Run, db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """`json.dump` writes an array of any length on one line: --input-format json-array reads INPUT in blocks
    (`BLOCK_BYTES`; 7 bytes here, so strings and escapes are cut everywhere), never a line at a time, so the
    line bound of JSON Lines (1 KiB here) does not apply."""
    import json

    import compute_budget.cli.io as cli_io
    from tests.conftest import gate_lines

    monkeypatch.setattr(cli_io, "MAX_LINE_BYTES", 1 << 10)
    monkeypatch.setattr(cli_io, "BLOCK_BYTES", 7)
    gates = [json.loads(line) for line in gate_lines(40)]
    gates[3]["candidate_organ"] = 'a "quoted" \\ , ] } [ { value'
    source = tmp_path / "gates.json"
    source.write_text(json.dumps(gates))
    assert source.stat().st_size > 1 << 10
    argv = [command, "--input-format", "json-array", str(source)] + (
        ["--db", str(db_path)] if command == "record" else []
    )
    status, out, err = run_cli(*argv)
    assert (status, err) == (0, "")
    if command == "decide":
        assert len(out.splitlines()) == 40
    else:
        assert "40 new" in out
        from compute_budget import BudgetStore

        with BudgetStore.open(db_path, readonly=True) as store:
            assert [json.loads(row.gate_input) for row in store] == gates
