"""The writer state file, format 2 (spec 12.3): committed and pending heads beside the notes, format 1 read and
rewritten, what a crash left placed against the store's head, and other processes' writes seen."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compute_budget.core.log.head import ChainHead
from compute_budget.errors import WriterStateError
from compute_budget.keys.writer_state import OriginState, StateHead, WriterState, resolve
from compute_budget.store import seal_tables as sealing
from tests.sealing import signer

C = StateHead(3, b"\x03" * 32, "c" * 64)
P = StateHead(5, b"\x05" * 32, "e" * 64)
OTHER = StateHead(5, b"\x06" * 32, "f" * 64)


def note_of(head: StateHead, origin: str = "example.org/log") -> str:
    return sealing.signed_note(origin, ChainHead(head.size, head.chain_hash, None), head.root, [signer()])


def test_a_format_1_state_is_read_and_rewritten_as_format_2(tmp_path: Path) -> None:
    path = tmp_path / "w.state"
    notes = {"example.org/log": note_of(C), "example.org/other": note_of(P, "example.org/other")}
    path.write_text(json.dumps({"compute_budget_writer_state": 1, "notes": notes}))
    path.chmod(0o600)
    state = WriterState(path)
    with state.locked():
        held = state.origin_state("example.org/log")
        assert (held.note, held.committed, held.pending) == (notes["example.org/log"], None, None)
        assert held.committed_head() == C  # a format 1 state: the head its note names
        state.prepare("example.org/log", C, P)
    written = json.loads(path.read_text())
    assert written["compute_budget_writer_state"] == 2
    assert written["notes"] == notes  # every origin's note kept
    assert written["heads"] == {"example.org/log": {"committed": C.to_json(), "pending": P.to_json()}}
    with state.locked():
        state.save("example.org/log", note_of(P))
    heads = json.loads(path.read_text())["heads"]["example.org/log"]
    assert heads == {"committed": P.to_json(), "pending": None}


@pytest.mark.parametrize(
    ("head", "committed", "pending"),
    [(P, P, None), (C, C, None), (OTHER, C, P)],
    ids=["the-store-holds-pending", "the-store-is-at-committed", "any-other-head"],
)
def test_what_a_crash_left_is_placed_against_the_store_head(
    head: StateHead, committed: StateHead, pending: StateHead | None
) -> None:
    """Pending becomes committed when the store holds it, is dropped when the store is at committed, and any other
    head leaves the state as it was (the writer's check refuses it unless a trusted checkpoint names it)."""
    resolved = resolve(OriginState("note", C, P), head)
    assert (resolved.committed, resolved.pending) == (committed, pending)
    assert resolved.note == "note"


def test_a_write_by_another_process_is_read_again(tmp_path: Path) -> None:
    """Each writer keeps what it read in memory, but never past another writer's replacement of the file."""
    path = tmp_path / "w.state"
    first, second = WriterState(path), WriterState(path)
    with first.locked():
        first.save("example.org/log", note_of(C))
        assert first.origin_state("example.org/log").committed == C
    with second.locked():
        second.prepare("example.org/log", C, P)
    with first.locked():
        assert first.origin_state("example.org/log").pending == P


@pytest.mark.parametrize(
    "heads",
    [None, [], {"o": {"committed": None}}, {"o": {"committed": {"size": -1, "root": "", "chain_hash": ""},
                                                  "pending": None}},
     {"o": {"committed": {"size": 1, "root": "AAAA", "chain_hash": "c" * 64}, "pending": None}}],
)
def test_a_format_2_state_with_unreadable_heads_is_refused(tmp_path: Path, heads: object) -> None:
    path = tmp_path / "w.state"
    document: dict[str, object] = {"compute_budget_writer_state": 2, "notes": {}}
    if heads is not None:
        document["heads"] = heads
    path.write_text(json.dumps(document))
    path.chmod(0o600)
    with WriterState(path).locked() as state, pytest.raises(WriterStateError, match="cannot be read"):
        state.origin_state("o")


def test_heads_are_written_in_place_and_a_new_note_by_a_rename(tmp_path: Path) -> None:
    """A write that changes heads alone (twice per append) overwrites the file in place, padded with spaces when
    shorter, and reads back whole in another process; a new note replaces the file (spec 9.1 rule 2)."""
    path, origin = tmp_path / "w.state", "example.org/log"
    state, first = WriterState(path), note_of(C)
    with state.locked():
        state.save(origin, first)
    inode = path.stat().st_ino
    with state.locked():
        state.prepare(origin, C, StateHead(123_456_789_012, b"\x07" * 32, "d" * 64))
    length = path.stat().st_size
    with state.locked():
        state.save(origin, None, committed=P)
    assert (path.stat().st_ino, path.stat().st_size) == (inode, length)
    written = path.read_bytes()
    assert written.endswith(b" ")
    assert written.rstrip(b" ").endswith(b"}\n")
    fresh = WriterState(path)
    with fresh.locked():
        held = fresh.origin_state(origin)
    assert (held.note, held.committed, held.pending) == (first, P, None)
    with state.locked():
        state.save(origin, note_of(P))
    assert path.stat().st_ino != inode
