"""`compute-budget sign` (spec 12.1, 12.3): signs and stores the head's checkpoint under 9.1 and 12.3, one line,
exit 0; refused (rows named) or cannot run, one line, exit 2."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from compute_budget.store import append
from tests.backends import execute, insert_sql, query
from tests.conftest import gate_lines
from tests.sealing import forged_row
from tests.witnessing import WRITER_KEY

Run = Callable[..., tuple[int, str, str]]


def recorded(run_cli: Run, folder: Path, db: Path, count: int, prefix: str) -> Path:
    key = folder / "writer.key"
    if not key.exists():
        assert run_cli("keygen", "writer", "--out", str(key))[0] == 0
    gates = folder / f"{prefix}.jsonl"
    gates.write_text("\n".join(gate_lines(count, prefix=prefix)) + "\n")
    status, _, err = run_cli("record", str(gates), "--db", str(db), "--signing-key", str(key))
    assert status == 0, err
    return key


def test_sign_prints_one_line_and_stores_nothing_twice(
    run_cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tail the writer committed unsigned (as between an interval's signatures) is signed and stored once."""
    db = tmp_path / "s.db"
    key = recorded(run_cli, tmp_path, db, 3, "a")
    with monkeypatch.context() as patched:
        patched.setattr(append.sealing, "insert_checkpoint", lambda *args, **kwargs: None)
        recorded(run_cli, tmp_path, db, 2, "b")
    status, out, err = run_cli("sign", "--db", str(db), "--signing-key", str(key))
    assert (status, err) == (0, "")
    assert out.startswith("signed the checkpoint of size 5 of ")
    assert out.count("\n") == 1
    status, out, err = run_cli("sign", "--db", str(db), "--signing-key", str(key))
    assert (status, err) == (0, "")
    assert out.startswith("the checkpoint of size 5 of ")
    assert out.endswith("; nothing stored\n")
    assert [row[0] for row in query(str(db), "SELECT tree_size FROM compute_budget_checkpoints ORDER BY id")] == [3, 5]


def test_sign_refuses_a_row_no_writer_appended(run_cli: Run, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    key = recorded(run_cli, tmp_path, db, 3, "a")
    execute(str(db), insert_sql(forged_row(str(db))))
    status, out, err = run_cli("sign", "--db", str(db), "--signing-key", str(key))
    assert (status, out) == (2, "")
    assert err.count("\n") == 1
    assert "rows 4..4 were appended by no trusted writer" in err
    assert len(query(str(db), "SELECT id FROM compute_budget_checkpoints")) == 1


@pytest.mark.parametrize("case", ["no-key", "no-store"])
def test_sign_that_cannot_run_says_so_in_one_line(
    run_cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    monkeypatch.delenv("COMPUTE_BUDGET_SIGNING_KEY", raising=False)
    db = tmp_path / "missing.db"
    argv = ["sign", "--db", str(db)]
    if case == "no-store":
        assert run_cli("keygen", "writer", "--out", str(tmp_path / "w.key"))[0] == 0
        argv += ["--signing-key", str(tmp_path / "w.key")]
    status, out, err = run_cli(*argv)
    assert (status, out) == (2, "")
    assert err.count("\n") == 1
    assert ("--signing-key" if case == "no-key" else "missing.db") in err
    assert not db.exists()


def test_record_with_a_checkpoint_interval_signs_one_batch_once_at_the_end(run_cli: Run, tmp_path: Path) -> None:
    """`record --checkpoint-interval 30`: the batch is committed unsigned and signed once, at the end (close), so
    the store holds one checkpoint of the whole batch; a second run adds one more."""
    db = tmp_path / "s.db"
    key = tmp_path / "writer.key"
    assert run_cli("keygen", "writer", "--out", str(key))[0] == 0
    for prefix, count in (("a", 4), ("b", 2)):
        gates = tmp_path / f"{prefix}.jsonl"
        gates.write_text("\n".join(gate_lines(count, prefix=prefix)) + "\n")
        status, _, err = run_cli("record", str(gates), "--db", str(db), "--signing-key", str(key),
                                 "--checkpoint-interval", "30")
        assert status == 0, err
    assert [row[0] for row in query(str(db), "SELECT tree_size FROM compute_budget_checkpoints ORDER BY id")] == [4, 6]
    status, _, err = run_cli("record", str(tmp_path / "b.jsonl"), "--db", str(db), "--signing-key", str(key),
                             "--checkpoint-interval", "1", "--peer-key", WRITER_KEY)
    assert status == 2
    assert "must use 0" in err
    assert err.count("\n") == 1


def test_a_checkpoint_interval_without_a_key_is_refused_not_ignored(
    run_cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interval is how often the writer signs: with no key (or with --unsigned) it would do nothing, silently."""
    monkeypatch.delenv("COMPUTE_BUDGET_SIGNING_KEY", raising=False)
    gates = tmp_path / "g.jsonl"
    gates.write_text("\n".join(gate_lines(2, prefix="g")) + "\n")
    db = tmp_path / "s.db"
    for extra in ((), ("--unsigned",)):
        status, _, err = run_cli("record", str(gates), "--db", str(db), "--checkpoint-interval", "2", *extra)
        assert status == 2
        assert "--checkpoint-interval is how often the writer signs: it needs --signing-key" in err
        assert err.count("\n") == 1
    assert not db.exists()  # refused before anything was opened
