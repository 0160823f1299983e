"""Spec 12.3 on both backends: every appending transaction checks the head against the newest trusted checkpoint
and the head the writer state recorded as committed; a pending head is placed after a crash; `sign` signs the
tail a writer left, and nothing an insider inserted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from compute_budget import BudgetStore, StoreDamaged, audit
from compute_budget.core.log.note import SignerKey
from compute_budget.errors import StoreUnavailable
from compute_budget.keys import writer_state
from compute_budget.store import append, authorship
from tests.backends import execute, insert_sql, query, rows
from tests.conftest import gate_lines
from tests.sealing import forged_row, signer


class Died(BaseException):
    """The writer process dying at a chosen point (a BaseException, as SIGKILL stops everything)."""


def checkpoint_sizes(target: str) -> list[int]:
    return [row[0] for row in query(target, "SELECT tree_size FROM compute_budget_checkpoints ORDER BY id")]


def heads(state: Path) -> dict[str, object]:
    found = json.loads(state.read_text())["heads"]
    assert len(found) == 1
    return dict(next(iter(found.values())))


@pytest.fixture
def key() -> SignerKey:
    return signer()


@pytest.fixture
def unsigned_commits(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Appends commit their rows without storing a checkpoint, as a writer signing once per interval does
    between its signatures: the head is then the writer's committed one, and no trusted checkpoint names it."""
    with monkeypatch.context() as patched:
        patched.setattr(append.sealing, "insert_checkpoint", lambda *args, **kwargs: None)
        yield


def test_a_row_an_insider_inserts_between_two_appends_is_never_signed(
    store_target: str, key: SignerKey, tmp_path: Path
) -> None:
    """Append with the key, insert a correctly chained row with a raw client (the guard allows INSERT), append
    again with the key in the same open store: `StoreDamaged` naming the row, nothing written, nothing signed;
    `sign` refuses it too."""
    state = tmp_path / "w.state"
    with BudgetStore.open(store_target, signing_key=key, writer_state=state) as store:
        store.record_many(gate_lines(4, prefix="honest"))
        execute(store_target, insert_sql(forged_row(store_target)))
        before = (rows(store_target), checkpoint_sizes(store_target), state.read_text())
        with pytest.raises(StoreDamaged, match=r"rows 5\.\.5 were appended by no trusted writer"):
            store.record(gate_lines(1, prefix="next")[0])
        with pytest.raises(StoreDamaged, match=r"rows 5\.\.5"):
            store.sign()
        assert (rows(store_target), checkpoint_sizes(store_target), state.read_text()) == before
    report = audit(store_target, trusted_keys=[key.verifier()])
    assert [(finding.kind.value, finding.seq) for finding in report.findings] == [("unattested_rows", 5)]


@pytest.mark.usefixtures("unsigned_commits")
def test_the_committed_head_is_appended_to_and_signed_but_not_a_row_after_it(
    store_target: str, key: SignerKey, tmp_path: Path
) -> None:
    """Rows this writer committed without a checkpoint are its own: the next append (another process: a new
    open) goes on from them, and `sign` stores the checkpoint that covers them; a row inserted after them is
    refused, named."""
    state = tmp_path / "w.state"
    with BudgetStore.open(store_target, signing_key=key, writer_state=state) as store:
        store.record_many(gate_lines(3, prefix="a"))
    assert heads(state) == {"committed": heads(state)["committed"], "pending": None}
    assert checkpoint_sizes(store_target) == []
    with BudgetStore.open(store_target, signing_key=key, writer_state=state) as store:
        assert store.record(gate_lines(1, prefix="b")[0]).seq == 4
    execute(store_target, insert_sql(forged_row(store_target)))
    with BudgetStore.open(store_target, signing_key=key, writer_state=state) as store, pytest.raises(
        StoreDamaged, match=r"rows 1\.\.5 were appended by no trusted writer"
    ):
        store.sign()
    assert checkpoint_sizes(store_target) == []


def test_sign_stores_the_checkpoint_of_a_committed_tail_once(
    store_target: str, key: SignerKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "w.state"
    with BudgetStore.open(store_target, signing_key=key, writer_state=state) as store:
        with pytest.raises(StoreUnavailable, match="no row yet"):
            store.sign()
        store.record_many(gate_lines(2, prefix="signed"))
        with monkeypatch.context() as patched:
            patched.setattr(append.sealing, "insert_checkpoint", lambda *args, **kwargs: None)
            store.record_many(gate_lines(3, prefix="tail"))
        assert not audit(store_target, trusted_keys=[key.verifier()]).clean  # rows 3..5 are unsigned
        signed = store.sign()
        assert (signed.size, signed.stored) == (5, True)
        again = store.sign()
        assert (again.size, again.stored, again.note) == (5, False, signed.note)
    assert checkpoint_sizes(store_target) == [2, 5]
    assert audit(store_target, trusted_keys=[key.verifier()]).clean
    assert json.loads(state.read_text())["notes"][signed.origin] == signed.note


@pytest.mark.usefixtures("unsigned_commits")
def test_a_pending_head_the_store_holds_after_a_crash_becomes_committed(
    store_target: str, key: SignerKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer dies after the COMMIT, before the state's write: the state's pending head is the store's head,
    which the next writer takes as committed (no checkpoint names it), signs, and appends to."""
    state = tmp_path / "w.state"
    with BudgetStore.open(store_target, signing_key=key, writer_state=state) as store:
        store.record_many(gate_lines(2, prefix="a"))
    with monkeypatch.context() as patched:
        patched.setattr(writer_state.WriterState, "save", lambda *args, **kwargs: (_ for _ in ()).throw(Died()))
        with BudgetStore.open(store_target, signing_key=key, writer_state=state) as store, pytest.raises(Died):
            store.record_many(gate_lines(3, prefix="b"))
    left = heads(state)
    assert (left["committed"]["size"], left["pending"]["size"]) == (2, 5)  # type: ignore[index]
    with BudgetStore.open(store_target, signing_key=key, writer_state=state) as store:
        assert store.sign().size == 5
        assert store.record(gate_lines(1, prefix="c")[0]).seq == 6
    assert heads(state)["committed"]["size"] == 6  # type: ignore[index]


@pytest.mark.usefixtures("unsigned_commits")
def test_a_pending_head_never_committed_is_dropped_and_any_other_head_refused(
    store_target: str, key: SignerKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer dies after writing pending, before the COMMIT: the store is at the committed head, so pending
    is dropped and the next writer goes on. A head that is neither (a row inserted after a crash) is refused."""
    state = tmp_path / "w.state"
    with BudgetStore.open(store_target, signing_key=key, writer_state=state) as store:
        store.record_many(gate_lines(2, prefix="a"))
    prepare = writer_state.WriterState.prepare

    def prepare_then_die(*args: object, **kwargs: object) -> None:
        prepare(*args, **kwargs)  # type: ignore[arg-type]
        raise Died()

    with monkeypatch.context() as patched:
        patched.setattr(writer_state.WriterState, "prepare", prepare_then_die)
        with BudgetStore.open(store_target, signing_key=key, writer_state=state) as store, pytest.raises(Died):
            store.record_many(gate_lines(3, prefix="b"))
    assert len(rows(store_target)) == 2
    assert heads(state)["pending"]["size"] == 5  # type: ignore[index]
    with BudgetStore.open(store_target, signing_key=key, writer_state=state) as store:
        assert store.record(gate_lines(1, prefix="c")[0]).seq == 3
    assert (heads(state)["committed"]["size"], heads(state)["pending"]) == (3, None)  # type: ignore[index]
    with monkeypatch.context() as patched:
        patched.setattr(writer_state.WriterState, "prepare", prepare_then_die)
        with BudgetStore.open(store_target, signing_key=key, writer_state=state) as store, pytest.raises(Died):
            store.record(gate_lines(1, prefix="d")[0])
    execute(store_target, insert_sql(forged_row(store_target)))
    with BudgetStore.open(store_target, signing_key=key, writer_state=state) as store, pytest.raises(
        StoreDamaged, match=r"rows 1\.\.4 were appended by no trusted writer"
    ):
        store.record(gate_lines(1, prefix="e")[0])
    assert len(rows(store_target)) == 4


def test_an_append_at_the_committed_head_proves_no_consistency_again(
    store_target: str, key: SignerKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows this writer committed after its last signature are not proven consistent with that note again in
    every append (its transactions checked each step): the proof read and hashed every row since the note."""
    with BudgetStore.open(store_target, signing_key=key, writer_state=tmp_path / "w.state",
                          checkpoint_interval=60) as store:
        store.record(gate_lines(1, prefix="a")[0])
        store.flush()
        store.record(gate_lines(1, prefix="b")[0])  # the head is now the committed one, past the note

        def proven(*args: object, **kwargs: object) -> object:
            raise AssertionError("a consistency proof at the writer's own committed head")

        monkeypatch.setattr(authorship, "extends", proven)
        assert store.record(gate_lines(1, prefix="c")[0]).seq == 3


def test_rule_1_is_not_reread_between_signatures_until_a_checkpoint_is_stored(
    store_target: str, key: SignerKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between two signatures, an append at the writer's committed head does not reread and re-verify the trusted
    checkpoints while the newest stored one is the one rule 1 last passed with; a row an insider inserts is still
    refused (the head is then not the committed one)."""
    store = BudgetStore.open(store_target, signing_key=key, writer_state=tmp_path / "w.state", checkpoint_interval=60)
    store.record(gate_lines(1, prefix="a")[0])
    store.flush()
    store.record(gate_lines(1, prefix="b")[0])
    store.record(gate_lines(1, prefix="c")[0])  # rule 1 in full: the head is past the note
    checked = append.check_signed_head
    monkeypatch.setattr(append, "check_signed_head", lambda *args, **kwargs: pytest.fail("rule 1 reread"))
    assert store.record(gate_lines(1, prefix="d")[0]).seq == 4
    monkeypatch.setattr(append, "check_signed_head", checked)
    execute(store_target, insert_sql(forged_row(store_target)))
    with pytest.raises(StoreDamaged, match=r"rows 2\.\.5 were appended by no trusted writer"):
        store.record(gate_lines(1, prefix="e")[0])
    with pytest.raises(StoreDamaged, match=r"rows 2\.\.5"):  # nor is it signed at close()
        store.close()
