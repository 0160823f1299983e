"""Spec 9.1 (issue 19): a writer signs only what it wrote. Each laundering attack of the issue, on both backends;
adoption; the writer state file; writers sharing a key; and a property test over insider interleavings."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from compute_budget import BudgetStore, StoreDamaged, audit
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.note import VerifierKey, verify_note
from compute_budget.errors import InputError, UnsignedAppendRefused, WriterStateError
from tests.backends import execute, insert_sql, is_postgres, query, rows, tamper, tamper_all
from tests.conftest import REPO_ROOT, gate_lines
from tests.sealing import forged_row, rewrite_consistently, signer

Run = Callable[..., tuple[int, str, str]]


def checkpoints(target: str) -> list[tuple[int, str]]:
    """(tree_size, note) of every stored checkpoint, in insertion order."""
    found = query(target, "SELECT tree_size, note FROM compute_budget_checkpoints ORDER BY id")
    return [(row[0], row[1]) for row in found]


def kinds(report: object) -> list[str]:
    return [finding.kind.value for finding in report.findings]  # type: ignore[attr-defined]


def keygen(run_cli: Run, folder: Path, name: str = "writer") -> tuple[Path, str]:
    path = folder / f"{name}.key"
    status, out, err = run_cli("keygen", name, "--out", str(path))
    assert status == 0, err
    return path, out.strip()


def gates_file(folder: Path, count: int, prefix: str) -> str:
    path = folder / f"{prefix}.jsonl"
    path.write_text("\n".join(gate_lines(count, prefix=prefix)) + "\n")
    return str(path)


def record(run_cli: Run, target: str, folder: Path, key: Path, count: int, prefix: str, *extra: str) -> None:
    status, _, err = run_cli("record", gates_file(folder, count, prefix), "--db", target, "--signing-key", str(key),
                             *extra)
    assert status == 0, err


# -- the attacks of the issue -----------------------------------------------------------------------------------


def test_a_forged_row_inserted_after_the_last_checkpoint_is_never_signed(
    run_cli: Run, store_target: str, tmp_path: Path
) -> None:
    """Issue 19's first attack: one plain INSERT of a correctly chained row after the last checkpoint. The next
    signed record refuses (exit 2, the row named, nothing written); the trusted audit reports it unattested; no
    receipt for it can be made against a writer's signature."""
    key, verifier = keygen(run_cli, tmp_path)
    record(run_cli, store_target, tmp_path, key, 10, "honest")
    forged = forged_row(store_target)
    execute(store_target, insert_sql(forged))
    before = (rows(store_target), checkpoints(store_target))
    status, out, err = run_cli("record", gates_file(tmp_path, 3, "next"), "--db", store_target,
                               "--signing-key", str(key))
    assert (status, out) == (2, "")
    assert err.count("\n") == 1
    assert "rows 11..11 were appended by no trusted writer" in err
    assert "--adopt-unsigned 11" in err
    assert (rows(store_target), checkpoints(store_target)) == before
    status, out, err = run_cli("checkpoint", "--db", store_target, "--signing-key", str(key))
    assert (status, out) == (2, "")
    assert "rows 11..11" in err
    report = audit(store_target, trusted_keys=[verifier])
    assert kinds(report) == ["unattested_rows"]
    assert report.findings[0].seq == 11
    status, bundle, err = run_cli("prove", str(forged[1]), "--db", store_target)
    assert status == 0, err  # a bundle on the head's unsigned note: no writer signature covers the row
    (tmp_path / "bundle.json").write_text(bundle)
    status, out, _ = run_cli("verify-proof", str(tmp_path / "bundle.json"), "--trusted-key", verifier)
    assert status == 1
    assert out.startswith("invalid")


def test_a_rewrite_past_the_last_checkpoint_with_its_checkpoints_deleted_is_refused(
    run_cli: Run, store_target: str, tmp_path: Path
) -> None:
    """Rows rewritten after the last checkpoint and the checkpoints covering them deleted: the newest trusted
    checkpoint no longer names the head (rule 1) and the state file names the real one (rule 2)."""
    key, verifier = keygen(run_cli, tmp_path)
    record(run_cli, store_target, tmp_path, key, 10, "first")
    record(run_cli, store_target, tmp_path, key, 5, "second")
    rewrite_consistently(store_target, 13)
    tamper_all(store_target, "DELETE FROM compute_budget_checkpoints WHERE tree_size > 10")
    status, _, err = run_cli("record", gates_file(tmp_path, 1, "third"), "--db", store_target,
                             "--signing-key", str(key))
    assert status == 2
    assert "rows 11..15 were appended by no trusted writer" in err
    status, _, err = run_cli("record", gates_file(tmp_path, 1, "third"), "--db", store_target,
                             "--signing-key", str(key), "--adopt-unsigned", "15")
    assert status == 2  # the rows re-derive, but the state file remembers what this key signed at 15
    assert "size 15, root " in err
    assert "rewritten" in err
    assert kinds(audit(store_target, trusted_keys=[verifier])) == ["unattested_rows"]


def test_after_a_key_rotation_the_new_key_needs_a_peer_or_an_adoption(
    run_cli: Run, store_target: str, tmp_path: Path
) -> None:
    """The new key's first append would cover what the leaked key forged: refused without --peer-key (an old key
    that did not leak) or --adopt-unsigned SEQ, which says how many rows it adopted."""
    old, old_verifier = keygen(run_cli, tmp_path, "writer-2025")
    new, new_verifier = keygen(run_cli, tmp_path, "writer-2026")
    record(run_cli, store_target, tmp_path, old, 6, "old")
    status, _, err = run_cli("record", gates_file(tmp_path, 2, "new"), "--db", store_target, "--signing-key", str(new))
    assert status == 2
    assert "rows 1..6 were appended by no trusted writer" in err
    assert "--peer-key" in err
    assert "the newest stored one is signed by writer-2025" in err  # who did sign, so the operator can judge
    status, out, err = run_cli("record", gates_file(tmp_path, 2, "new"), "--db", store_target,
                               "--signing-key", str(new), "--peer-key", old_verifier)
    assert status == 0, err
    assert "2 new" in out
    assert audit(store_target, trusted_keys=[old_verifier, new_verifier]).clean
    execute(store_target, insert_sql(forged_row(store_target)))  # the old key leaked: a forged row on top
    status, out, err = run_cli("record", gates_file(tmp_path, 1, "later"), "--db", store_target,
                               "--signing-key", str(new), "--peer-key", old_verifier)
    assert status == 2
    assert "rows 9..9" in err


def test_adopting_rows_that_hold_signs_them_and_says_how_many(
    run_cli: Run, store_target: str, tmp_path: Path
) -> None:
    """A store recorded without a key (today's release) continues signed after `--adopt-unsigned SEQ`: the rows
    are re-derived, a signed checkpoint of the head is stored even with no new gate, and the audit is clean."""
    status, _, err = run_cli("record", gates_file(tmp_path, 7, "old"), "--db", store_target)
    assert status == 0, err
    key, verifier = keygen(run_cli, tmp_path)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    status, _, err = run_cli("record", str(empty), "--db", store_target, "--signing-key", str(key),
                             "--adopt-unsigned", "6")
    assert status == 2
    assert "the head is seq 7" in err
    status, _, err = run_cli("record", str(empty), "--db", store_target, "--signing-key", str(key),
                             "--adopt-unsigned", "7")
    assert status == 0, err
    assert "adopted 7 rows (seq 1..7)" in err
    assert [size for size, _ in checkpoints(store_target)] == [7]
    assert audit(store_target, trusted_keys=[verifier]).clean
    record(run_cli, store_target, tmp_path, key, 3, "signed")
    assert audit(store_target, trusted_keys=[verifier]).clean


def test_adoption_refuses_a_row_that_does_not_rederive(run_cli: Run, store_target: str, tmp_path: Path) -> None:
    """Re-derivation runs first: an edited row stops the adoption, naming it; nothing is written."""
    assert run_cli("record", gates_file(tmp_path, 7, "old"), "--db", store_target)[0] == 0
    tamper(store_target, "UPDATE compute_budget_decisions SET max_steps = 99 WHERE seq = 4")
    key, _ = keygen(run_cli, tmp_path)
    before = (rows(store_target), checkpoints(store_target))
    status, _, err = run_cli("record", gates_file(tmp_path, 1, "new"), "--db", store_target,
                             "--signing-key", str(key), "--adopt-unsigned", "7")
    assert status == 2
    assert "row 4 does not hold" in err
    assert (rows(store_target), checkpoints(store_target)) == before
    assert not Path(str(key) + ".state").exists() or "notes" in Path(str(key) + ".state").read_text()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("--unsigned", "--signing-key", "K"), "contradict"),
        (("--adopt-unsigned", "3"), "needs --signing-key"),
        (("--adopt-unsigned", "3", "--unsigned"), "needs --signing-key"),
        (("--writer-state", "x.state"), "give a signing key"),
    ],
)
def test_option_combinations_that_make_no_sense_are_exit_2(
    run_cli: Run, db_path: Path, tmp_path: Path, arguments: tuple[str, ...], message: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("COMPUTE_BUDGET_SIGNING_KEY", raising=False)
    key, _ = keygen(run_cli, tmp_path)
    arguments = tuple(str(key) if item == "K" else item for item in arguments)
    status, out, err = run_cli("record", gates_file(tmp_path, 1, "x"), "--db", str(db_path), *arguments)
    assert (status, out) == (2, "")
    assert message in err


def test_unsigned_ignores_the_environments_key(
    run_cli: Run, db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--unsigned appends without the key even when $COMPUTE_BUDGET_SIGNING_KEY names one."""
    key, _ = keygen(run_cli, tmp_path)
    record(run_cli, str(db_path), tmp_path, key, 3, "signed")
    monkeypatch.setenv("COMPUTE_BUDGET_SIGNING_KEY", str(key))
    status, _, err = run_cli("record", gates_file(tmp_path, 2, "plain"), "--db", str(db_path), "--unsigned")
    assert status == 0, err
    assert [size for size, _ in checkpoints(str(db_path))] == [3]


# -- the writer state file ------------------------------------------------------------------------------------


def test_the_state_file_holds_the_last_signed_note_per_origin(run_cli: Run, db_path: Path, tmp_path: Path) -> None:
    """Beside the key by default, mode 0600, one signed note per origin, equal to the newest stored one."""
    key, _ = keygen(run_cli, tmp_path)
    record(run_cli, str(db_path), tmp_path, key, 4, "a", "--origin", "example.org/one")
    state = Path(str(key) + ".state")
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    content = json.loads(state.read_text())
    assert list(content["notes"]) == ["example.org/one"]
    assert content["notes"]["example.org/one"] == checkpoints(str(db_path))[-1][1]
    other = tmp_path / "other.db"
    record(run_cli, str(other), tmp_path, key, 2, "b", "--origin", "example.org/two")
    content = json.loads(state.read_text())
    assert sorted(content["notes"]) == ["example.org/one", "example.org/two"]
    assert Path(str(state) + ".lock").exists()


def test_a_store_rolled_back_below_the_state_is_refused(run_cli: Run, db_path: Path, tmp_path: Path) -> None:
    """The database put back from an older backup (its own checkpoints consistent): rule 1 holds, rule 2 refuses,
    naming the state's size and root."""
    key, _ = keygen(run_cli, tmp_path)
    record(run_cli, str(db_path), tmp_path, key, 5, "a")
    backup = tmp_path / "backup.db"
    shutil.copy(db_path, backup)
    record(run_cli, str(db_path), tmp_path, key, 5, "b")
    note = checkpoints(str(db_path))[-1][1]
    root = Checkpoint.from_note(note).root
    assert root is not None
    shutil.copy(backup, db_path)
    status, _, err = run_cli("record", gates_file(tmp_path, 1, "c"), "--db", str(db_path), "--signing-key", str(key))
    assert status == 2
    import base64

    assert f"size 10, root {base64.b64encode(root).decode()}" in err
    assert "truncated" in err


@pytest.mark.parametrize("damage", ["missing", "empty", "garbage", "group-writable", "symlink"])
def test_an_unusable_state_file_is_refused_and_init_writer_state_remakes_it(
    run_cli: Run, db_path: Path, tmp_path: Path, damage: str
) -> None:
    """While the store holds a checkpoint signed by this key: a missing, empty, unparsable, group-writable or
    symlinked state is exit 2 naming the file; --init-writer-state makes it from the store and says so (never
    through a link)."""
    key, _ = keygen(run_cli, tmp_path)
    record(run_cli, str(db_path), tmp_path, key, 3, "a")
    state = Path(str(key) + ".state")
    if damage == "missing":
        state.unlink()
    elif damage == "empty":
        state.write_text("")
    elif damage == "garbage":
        state.write_text("not json")
    elif damage == "group-writable":
        state.chmod(0o620)
    else:
        target = tmp_path / "elsewhere.state"
        state.rename(target)
        state.symlink_to(target)
    status, out, err = run_cli("record", gates_file(tmp_path, 1, "b"), "--db", str(db_path), "--signing-key", str(key))
    assert (status, out) == (2, "")
    assert str(state) in err
    assert err.count("\n") == 1
    assert [size for size, _ in checkpoints(str(db_path))] == [3]
    status, out, err = run_cli("record", gates_file(tmp_path, 1, "b"), "--db", str(db_path), "--signing-key", str(key),
                               "--init-writer-state")
    if damage == "symlink":
        assert status == 2
        assert "symbolic link" in err
        return
    assert status == 0, err
    if damage in ("missing", "empty"):
        assert "created writer state" in err
    assert [size for size, _ in checkpoints(str(db_path))] == [3, 4]
    assert json.loads(state.read_text())["notes"]


def test_a_state_folder_that_cannot_be_written_names_it_and_the_option(
    run_cli: Run, db_path: Path, tmp_path: Path
) -> None:
    key, _ = keygen(run_cli, tmp_path)
    status, _, err = run_cli("record", gates_file(tmp_path, 1, "a"), "--db", str(db_path), "--signing-key", str(key),
                             "--writer-state", str(tmp_path / "no-such-folder" / "w.state"))
    assert status == 2
    assert "no-such-folder" in err
    assert "--writer-state" in err
    (tmp_path / "a-folder").mkdir()
    status, _, err = run_cli("record", gates_file(tmp_path, 1, "a"), "--db", str(db_path), "--signing-key", str(key),
                             "--writer-state", str(tmp_path / "a-folder"))
    assert status == 2
    assert "is a folder" in err
    assert not (tmp_path / "a-folder.lock").exists()  # refused before anything was made beside it


def test_a_signer_key_object_needs_a_writer_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SignerKey has no file to keep its state beside: an InputError that says what to give."""
    monkeypatch.delenv("COMPUTE_BUDGET_WRITER_STATE", raising=False)
    with pytest.raises(InputError, match="writer_state="):
        BudgetStore.open(tmp_path / "s.db", signing_key=signer())
    with BudgetStore.open(tmp_path / "s.db", signing_key=signer(), writer_state=tmp_path / "w.state") as store:
        assert store.record_many(gate_lines(2)).new == 2
    assert (tmp_path / "w.state").exists()


@pytest.mark.slow
def test_two_keys_that_would_share_one_state_file_are_refused_not_deadlocked(tmp_path: Path) -> None:
    """`checkpoint --signing-key A --signing-key B` with $COMPUTE_BUDGET_WRITER_STATE set: both keys' states were
    the one file, and the command waited on its own lock for ever. Now exit 2 naming the file (run in a process of
    its own, with a timeout, so that a regression fails instead of hanging the suite)."""
    db = tmp_path / "s.db"
    keys = []
    for name in ("alice", "bob"):
        key = tmp_path / f"{name}.key"
        key.write_text(signer(name).format() + "\n")
        key.chmod(0o600)
        keys.append(key)
    env = {**os.environ, "COMPUTE_BUDGET_WRITER_STATE": str(tmp_path / "shared.state")}
    env.pop("COMPUTE_BUDGET_SIGNING_KEY", None)
    cli = [sys.executable, "-m", "compute_budget"]
    gates = tmp_path / "gates.jsonl"
    gates.write_text("\n".join(gate_lines(2)) + "\n")
    subprocess.run([*cli, "record", str(gates), "--db", str(db), "--signing-key", str(keys[0])], env=env,
                   check=True, capture_output=True, timeout=60)
    done = subprocess.run(
        [*cli, "checkpoint", "--db", str(db), "--signing-key", str(keys[0]), "--signing-key", str(keys[1])],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "would share the writer state file" in done.stderr
    assert str(tmp_path / "shared.state") in done.stderr
    assert done.stderr.count("\n") == 1


def test_the_api_raises_typed_errors(tmp_path: Path) -> None:
    """UnsignedAppendRefused, StoreDamaged naming rows, WriterStateError naming the file."""
    target = tmp_path / "s.db"
    key = signer()
    with BudgetStore.open(target, signing_key=key, writer_state=tmp_path / "w.state") as store:
        store.record_many(gate_lines(3))
    with BudgetStore.open(target) as store, pytest.raises(UnsignedAppendRefused):
        store.record(gate_lines(1, prefix="x")[0])
    execute(str(target), insert_sql(forged_row(str(target))))
    state = tmp_path / "w.state"
    with BudgetStore.open(target, signing_key=key, writer_state=state) as store, pytest.raises(
        StoreDamaged, match=r"rows 4\.\.4"
    ):
        store.record(gate_lines(1, prefix="y")[0])
    state.write_text("{}")
    with BudgetStore.open(target, signing_key=key, writer_state=state) as store, pytest.raises(
        WriterStateError, match=r"w\.state"
    ):
        store.record_many([], adopt_unsigned_through=4)


CRASHING_WRITER = """
import os, sys
from compute_budget import BudgetStore
from compute_budget.keys import writer_state
from tests.conftest import gate_lines

def crash(self, origin, note, **options):
    os._exit(9)  # killed after the commit, before the state file is replaced

writer_state.WriterState.save = crash
with BudgetStore.open(sys.argv[1], signing_key=sys.argv[2]) as store:
    store.record_many(gate_lines(4, prefix="crash"))
"""


@pytest.mark.slow
def test_a_crash_between_commit_and_state_write_leaves_a_store_the_next_writer_continues(
    run_cli: Run, store_target: str, tmp_path: Path
) -> None:
    """The state's note is behind the store after such a crash, which is safe: the next writer continues, no
    refusal. Spec 12.3: the head the transaction was about to commit was written as `pending` before the COMMIT,
    beside the committed one; the next writer finds the store at it and takes it as committed."""
    key, verifier = keygen(run_cli, tmp_path)
    record(run_cli, store_target, tmp_path, key, 3, "before")
    state_before = json.loads(Path(str(key) + ".state").read_text())
    done = subprocess.run([sys.executable, "-c", CRASHING_WRITER, store_target, str(key)], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 9, done.stderr
    assert [size for size, _ in checkpoints(store_target)] == [3, 7]  # committed
    crashed = json.loads(Path(str(key) + ".state").read_text())
    assert crashed["notes"] == state_before["notes"]  # the note was not replaced
    (origin, heads), = crashed["heads"].items()
    assert (heads["committed"]["size"], heads["pending"]["size"]) == (3, 7)
    record(run_cli, store_target, tmp_path, key, 2, "after")
    assert audit(store_target, trusted_keys=[verifier]).clean
    state = json.loads(Path(str(key) + ".state").read_text())
    assert Checkpoint.from_note(state["notes"][origin]).seq == 9
    assert (state["heads"][origin]["committed"]["size"], state["heads"][origin]["pending"]) == (9, None)


# -- many writers, one key ------------------------------------------------------------------------------------


SHARED_KEY_WRITER = """
import sys
from compute_budget import BudgetStore
from tests.conftest import gate_lines
target, key, prefix, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with BudgetStore.open(target, signing_key=key) as store:
    for line in gate_lines(count, prefix=prefix):
        store.record(line)
"""

CHECKPOINT_LOOP = """
import sys
from compute_budget import BudgetStore
target, key, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
with BudgetStore.open(target, allow_unsigned=True) as store:
    for _ in range(rounds):
        store.signed_checkpoint([key])
"""


@pytest.mark.slow
def test_eight_writers_sharing_one_key_and_state_with_checkpoints_signed_beside_them(
    run_cli: Run, store_target: str, tmp_path: Path
) -> None:
    """8 processes append one gate at a time with one key and one state file while another signs checkpoints in a
    loop: every gate stored once, every stored checkpoint consistent with the final tree, no false refusal."""
    key, verifier = keygen(run_cli, tmp_path)
    record(run_cli, store_target, tmp_path, key, 5, "seed")
    writers = [
        subprocess.Popen([sys.executable, "-c", SHARED_KEY_WRITER, store_target, str(key), f"w{index}", "25"],
                         cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for index in range(8)
    ]
    signer_loop = subprocess.Popen([sys.executable, "-c", CHECKPOINT_LOOP, store_target, str(key), "40"],
                                   cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for process in [*writers, signer_loop]:
        _, err = process.communicate(timeout=600)
        assert process.returncode == 0, err
    stored = rows(store_target)
    assert [row[0] for row in stored] == list(range(1, 206))
    assert len({row[1] for row in stored}) == 205
    report = audit(store_target, trusted_keys=[verifier], all_signatures=True)
    assert report.clean, report.findings[:3]
    for _, note in checkpoints(store_target):
        assert verify_note(note, [VerifierKey.parse(verifier)]).ok


# -- the property ---------------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.sampled_from(["append", "append", "insert", "edit", "delete", "adopt"]), min_size=1,
                      max_size=8))
@example(steps=["append", "insert", "append"])  # the attack, always tried
@example(steps=["append", "edit", "append"])
@example(steps=["append", "append", "delete", "insert", "append"])
@example(steps=["append", "insert", "adopt", "edit", "append"])
def test_no_row_the_writer_did_not_append_is_ever_covered_by_its_signature_unless_adopted(
    tmp_path_factory: pytest.TempPathFactory, steps: list[str]
) -> None:
    """Honest signed appends interleaved with an insider's inserts, edits and deletes of the newest row: every
    checkpoint the writer signed covers only rows it appended (as they were when it appended them) or rows it
    adopted."""
    folder = tmp_path_factory.mktemp("interleave")
    target = str(folder / "s.db")
    key = signer()
    state = folder / "w.state"
    vouched: dict[int, tuple[object, ...]] = {}  # seq -> the row as the writer appended or adopted it
    for counter, step in enumerate(steps):
        try:
            with BudgetStore.open(target, signing_key=key, writer_state=state) as store:
                if step == "append":
                    batch = store.record_many(gate_lines(2, prefix=f"a{counter}"), results=True)
                    for result in batch.results:
                        vouched[result.seq] = next(tuple(row) for row in rows(target) if row[0] == result.seq)
                elif step == "adopt":
                    head = store.head().seq
                    batch = store.record_many([], adopt_unsigned_through=head)
                    for row in rows(target):
                        if batch.adopted_after < row[0] <= head:
                            vouched[row[0]] = tuple(row)
        except (StoreDamaged, WriterStateError):
            pass  # a refusal is always allowed: the property is about what was signed
        existing = rows(target) if Path(target).exists() else []
        if step == "insert" and existing:
            execute(target, insert_sql(forged_row(target)))
        elif step == "edit" and existing:
            last = existing[-1][0]
            tamper(target, f"UPDATE compute_budget_decisions SET max_steps = {90 + counter} WHERE seq = {last}")
        elif step == "delete" and existing:
            tamper(target, f"DELETE FROM compute_budget_decisions WHERE seq = {existing[-1][0]}")
    if not Path(target).exists():
        return
    final = {row[0]: tuple(row) for row in rows(target)}
    for size, note in checkpoints(target):
        if not verify_note(note, [key.verifier()]).ok:
            continue
        # Every row the signature covered was vouched for when it was signed: the signed root is the root of the
        # vouched rows (checked through the chain hash the note names).
        checkpoint = Checkpoint.from_note(note)
        assert all(seq in vouched for seq in range(1, size + 1)), (steps, size, sorted(vouched))
        if size in final and final[size] == vouched[size]:
            assert final[size][17] == checkpoint.chain_hash


@pytest.mark.postgres
def test_the_state_file_guards_a_postgresql_store_too(run_cli: Run, pg_url: str, tmp_path: Path) -> None:
    """The same refusals on PostgreSQL: a truncated store is not signed again (the state remembers)."""
    key, _ = keygen(run_cli, tmp_path)
    record(run_cli, pg_url, tmp_path, key, 4, "a")
    record(run_cli, pg_url, tmp_path, key, 4, "b")
    tamper_all(pg_url, "DELETE FROM compute_budget_decisions WHERE seq > 4",
               "DELETE FROM compute_budget_checkpoints WHERE tree_size > 4")
    assert is_postgres(pg_url)
    status, _, err = run_cli("record", gates_file(tmp_path, 1, "c"), "--db", pg_url, "--signing-key", str(key))
    assert status == 2
    assert "size 8" in err
    assert os.path.exists(str(key) + ".state")
