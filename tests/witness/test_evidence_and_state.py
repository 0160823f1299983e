"""The witness's evidence and bounds of spec revision 4 over real HTTP: conclusive evidence that no flood of honestly
signed notes keeps out (9.9.3), pending notes promoted or dropped, one text per cosigned size (9.9.4), sizes of
2^63 or more (9.9.6), and a state file of the previous release migrated in place."""

from __future__ import annotations

import base64
import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn

from compute_budget.core.log.merkle import MemoryTree, leaf_hash, root_from_reader
from compute_budget.core.log.note import Signature, format_checkpoint, parse_note, sign_note, verify_note
from compute_budget.errors import InputError
from compute_budget.witness import state as state_module
from compute_budget.witness.app import allowed_hosts, create_witness_app
from compute_budget.witness.protocol import Witness
from compute_budget.witness.state import WitnessState
from tests.backends import query
from tests.conftest import gate_lines
from tests.witnessing import FORK, LOG, ORIGIN, TREE, WITNESS, Served, body, note, serving_in_thread

BIG = MemoryTree(leaf_hash(b"row %d" % index) for index in range(1100))  # TREE's history, longer
JUNK_PROOF = [leaf_hash(b"junk")]


def _junk(signed: str, tag: int) -> str:
    """`signed` with two junk signature lines a keyless sender can add: an unknown key's, and a bad one under the
    log key's own name and hash."""
    unknown = Signature("junk.example/k", tag, bytes(64)).line()
    bad = Signature(LOG.name, LOG.key_hash, tag.to_bytes(64, "big")).line()
    return signed + unknown + bad


def _text(size: int, chain: str = "ab" * 32, *, extra: str = "", tree: MemoryTree = TREE) -> str:
    return format_checkpoint(ORIGIN, size, root_from_reader(tree, size), chain) + extra


def test_a_flood_of_honest_notes_with_junk_cannot_keep_out_a_real_fork(served: Served) -> None:
    """Issue 28 d: 1,001 notes the log signed honestly, each with junk signature lines and a junk proof, sent with no
    key, filled the evidence and a real fork afterwards was only counted. Now they are pending (one per size, at
    most 1,000) and the fork is kept as conclusive evidence."""
    assert served.post(body(0, note(10)))[0] == 200
    for size in range(11, 11 + 1001):
        assert served.post(body(10, _junk(note(size, tree=BIG), size), proof=JUNK_PROOF))[0] == 422
    for tag in range(50):  # one size, many junk lines: still one pending note
        assert served.post(body(10, _junk(note(11, tree=BIG), 5000 + tag), proof=JUNK_PROOF))[0] == 422
    assert served.post(body(10, note(10, tree=FORK)))[:2] == (409, "10\n")  # the real fork
    kept, dropped = served.state.evidence(ORIGIN)
    assert [(item.label, item.size, item.note) for item in kept] == [("fork", 10, note(10, tree=FORK))]
    assert dropped == 0
    pending, more = served.state.pending(ORIGIN)
    assert (len(pending), more) == (1000, 1)
    assert pending[0].note == note(11, tree=BIG)  # the junk lines are not kept: only the line that verifies


def test_a_pending_note_is_promoted_when_its_size_is_cosigned_with_another_root(served: Served) -> None:
    """A fork sent with a proof that does not verify waits as pending; once the witness cosigns that size from the
    honest log, it becomes conclusive (`fork`); the honest note of another size, cosigned the same, is dropped."""
    assert served.post(body(0, note(8)))[0] == 200
    forked = _junk(note(16, tree=FORK), 1)
    assert served.post(body(8, forked, tree=FORK))[0] == 422
    assert served.post(body(8, note(24), proof=JUNK_PROOF))[0] == 422
    assert served.state.evidence(ORIGIN) == ([], 0)
    assert [item.size for item in served.state.pending(ORIGIN)[0]] == [16, 24]
    assert served.post(body(8, note(16)))[0] == 200
    kept, _ = served.state.evidence(ORIGIN)
    assert [(item.label, item.size, item.note) for item in kept] == [("fork", 16, note(16, tree=FORK))]
    assert verify_note(kept[0].note, [LOG.verifier()]).ok  # the kept note is checkable as it is
    assert [item.size for item in served.state.pending(ORIGIN)[0]] == [24]
    assert served.post(body(16, note(24)))[0] == 200
    assert served.state.pending(ORIGIN) == ([], 0)  # the same text cosigned: not evidence of anything
    assert len(served.state.evidence(ORIGIN)[0]) == 1


def test_an_honest_note_sent_first_with_a_junk_proof_cannot_keep_out_a_fork_of_its_size(served: Served) -> None:
    """Red team on issue 28 d: the pending slot is one per size (the first note). A note the log signed honestly,
    sent by anyone with a junk proof, took size 16's slot; the real fork of size 16 arriving next was not kept, and
    once the witness cosigned 16 from the honest log the fork was gone. Two signed texts of one size are a fork
    whatever the witness later cosigns: both are conclusive at once, and stay so."""
    assert served.post(body(0, note(8)))[0] == 200
    assert served.post(body(8, note(16), proof=JUNK_PROOF))[0] == 422  # the honest note takes the slot
    forked = note(16, tree=FORK)
    assert served.post(body(8, forked, tree=FORK))[0] == 422
    assert served.post(body(8, note(16)))[0] == 200
    kept, dropped = served.state.evidence(ORIGIN)
    assert sorted((item.label, item.size, item.note) for item in kept) == sorted(
        [("fork", 16, note(16)), ("fork", 16, forked)]
    )
    assert dropped == 0
    assert served.state.pending(ORIGIN) == ([], 0)


def test_a_note_refused_at_the_proof_check_at_the_cosigned_size_is_judged_at_once(served: Served) -> None:
    """At the size the witness already cosigned, a note with a proof (422) is conclusive when its text differs and
    nothing when it is the text cosigned; it never waits as pending."""
    assert served.post(body(0, note(8)))[0] == 200
    assert served.post(body(8, _junk(note(8), 1), proof=JUNK_PROOF))[0] == 422
    assert served.post(body(8, note(8, tree=FORK), proof=JUNK_PROOF))[0] == 422
    other = sign_note(_text(8, "cd" * 32), LOG)
    assert served.post(body(8, other, proof=JUNK_PROOF))[0] == 422
    kept = served.state.evidence(ORIGIN)[0]
    assert [(item.label, item.size) for item in kept] == [("fork", 8), ("extension_mismatch", 8)]
    assert served.state.pending(ORIGIN) == ([], 0)


def test_a_pending_note_of_another_text_with_the_same_root_is_promoted_as_extension_mismatch(served: Served) -> None:
    """Where 9.9.3 (same root: dropped) meets 9.9.4 (one text per size): a pending note whose root the witness
    later cosigns with another text is `extension_mismatch` evidence, as it would be if it came after."""
    assert served.post(body(0, note(8)))[0] == 200
    other = sign_note(_text(16, "cd" * 32), LOG)
    assert served.post(body(8, other, proof=JUNK_PROOF))[0] == 422
    assert served.post(body(8, note(16)))[0] == 200
    kept, _ = served.state.evidence(ORIGIN)
    assert [(item.label, item.size, item.note) for item in kept] == [("extension_mismatch", 16, other)]
    assert served.state.pending(ORIGIN) == ([], 0)


@pytest.mark.parametrize(
    "other",
    [_text(10, "cd" * 32), _text(10, extra="another extension line\n")],
    ids=["another chain line", "an extra extension line"],
)
def test_one_text_per_cosigned_size(served: Served, other: str) -> None:
    """Issue 28 k / spec 9.9.4: another text of the cosigned size (same root, other extension lines) is 409 as at
    check 7 and kept as `extension_mismatch`; `GET /latest` still serves the text first cosigned (it served the
    second, and the witness cosigned it)."""
    first = sign_note(_text(10), LOG)
    assert served.post(body(0, first))[0] == 200
    second = sign_note(other, LOG)
    assert served.post(body(10, second)) == (409, "10\n", "text/x.tlog.size")
    assert served.post(body(10, _junk(second, 2)))[:2] == (409, "10\n")  # again, with junk: kept once
    kept, _ = served.state.evidence(ORIGIN)
    assert [(item.label, item.size, item.note) for item in kept] == [("extension_mismatch", 10, second)]
    status, latest, _ = served.get("/latest?origin=example.org%2Flog")
    assert status == 200
    assert parse_note(latest)[0] == _text(10)
    assert served.post(body(10, first))[0] == 200  # the text it cosigned is cosigned again (a retry)
    assert served.post(body(10, note(20), tree=TREE))[0] == 200


@pytest.mark.parametrize(
    ("old", "size"), [(0, 2**63), (0, 2**64 - 1), (2**63, 2**64 - 1), (2**64 - 1, 2**64 - 1)]
)
def test_a_size_of_2_to_the_63_or_more_is_400(served: Served, old: int, size: int) -> None:
    """Issue 28 l / spec 9.9.6: a checkpoint size or `old` of 2^63 or more is 400, before any other check (it was a
    500 with an OverflowError traceback, or a 409); nothing is kept."""
    signed = sign_note(format_checkpoint(ORIGIN, size, bytes(32), "ab" * 32), LOG)
    status, answer, _ = served.post(f"old {old}\n\n{signed}".encode())
    assert status == 400
    assert "2^63 or more" in answer
    assert served.state.latest(ORIGIN) is None
    assert served.state.evidence(ORIGIN) == ([], 0)
    assert served.state.pending(ORIGIN) == ([], 0)


def test_sizes_just_below_2_to_the_63_are_witnessed(served: Served) -> None:
    """The bound is exact: 2^63 - 1 is a size like any other."""
    signed = sign_note(format_checkpoint(ORIGIN, 2**63 - 1, bytes(32), "ab" * 32), LOG)
    assert served.post(f"old 0\n\n{signed}".encode())[0] == 200
    assert served.state.latest(ORIGIN).size == 2**63 - 1  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "host", ["[::1].attacker.example", "[::1]x", "[::1]:80:90", "localhost:80:90", "127.0.0.1@evil.example",
             "localhost:", "[::1]:port", "localhost/x", "localhost :80"],
)
def test_a_host_header_is_one_exact_name_or_ip_literal(served: Served, host: str) -> None:
    """Issue 28 m / spec 9.9.6: `[::1].attacker.example` passed as `[::1]`; a Host header that is not exactly a name
    or an IP literal with at most `:port` after it is refused (421), and nothing changes."""
    assert served.post(body(0, note(4)), host=host)[0] == 421
    assert served.state.latest(ORIGIN) is None


@pytest.mark.parametrize("host", ["[::1]", "[::1]:7380", "LOCALHOST:7380", "127.0.0.1"])
def test_exact_loopback_names_are_answered(served: Served, host: str) -> None:
    """The allowed names still pass, port or not, in any case."""
    assert served.post(body(0, note(4)), host=host)[0] == 200


@contextmanager
def _witness_at(path: Path) -> Iterator[Served]:
    """A witness of `ORIGIN` over real HTTP whose state is the file at `path`."""
    state = WitnessState(path)
    witness = Witness(WITNESS, {ORIGIN: [LOG.verifier()]}, state, clock=lambda: int(time.time()))
    config = uvicorn.Config(create_witness_app(witness, allowed_hosts("127.0.0.1", ())), log_level="warning",
                            access_log=False, lifespan="off")
    try:
        with serving_in_thread(config, "127.0.0.1") as port:
            yield Served(port, state)
    finally:
        state.close()


V0_SCHEMA = (  # the previous release's witness.db, as it made it
    "CREATE TABLE witness_latest (origin TEXT PRIMARY KEY, size INTEGER NOT NULL, root TEXT NOT NULL, "
    "checkpoint TEXT NOT NULL, log_signatures TEXT NOT NULL, cosigned_at INTEGER NOT NULL)",
    "CREATE TABLE witness_evidence (origin TEXT NOT NULL, note TEXT NOT NULL, reason TEXT NOT NULL, "
    "seen_at INTEGER NOT NULL, PRIMARY KEY (origin, note))",
    "CREATE TABLE witness_evidence_dropped (origin TEXT PRIMARY KEY, dropped INTEGER NOT NULL)",
)


def test_a_state_file_of_the_previous_release_is_migrated_in_place(tmp_path: Path) -> None:
    """An old witness.db keeps working: its latest checkpoint stays; a note refused at check 7 becomes conclusive
    (`fork`), notes refused at check 6 become pending (the one at the cosigned size, the same text, is dropped),
    the old count is carried to the pending count; the witness then serves from it and settles what it cosigns."""
    path = tmp_path / "witness.db"
    old = sqlite3.connect(path)
    for statement in V0_SCHEMA:
        old.execute(statement)
    honest8 = note(8)
    old.execute("INSERT INTO witness_latest VALUES (?, 8, ?, ?, ?, 1)", (
        ORIGIN, base64.b64encode(root_from_reader(TREE, 8)).decode(), parse_note(honest8)[0],
        honest8[honest8.index("\n\n") + 2:],
    ))
    old.executemany("INSERT INTO witness_evidence VALUES (?, ?, ?, ?)", [
        (ORIGIN, note(8, tree=FORK), "409 same size", 1),
        (ORIGIN, _junk(note(16), 1), "422 proof", 2),
        (ORIGIN, note(12, tree=FORK), "422 proof", 3),
        (ORIGIN, _junk(note(8), 2), "422 proof", 4),
    ])
    old.execute("INSERT INTO witness_evidence_dropped VALUES (?, 5)", (ORIGIN,))
    old.commit()
    old.close()
    with _witness_at(path) as served:
        kept, dropped = served.state.evidence(ORIGIN)
        assert ([(item.label, item.size) for item in kept], dropped) == ([("fork", 8)], 0)
        pending, more = served.state.pending(ORIGIN)
        assert ([item.size for item in pending], more) == ([12, 16], 5)
        assert served.post(body(8, note(16)))[0] == 200
        assert [item.size for item in served.state.pending(ORIGIN)[0]] == [12]
    with sqlite3.connect(path) as reopened:
        tables = {row[0] for row in reopened.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert reopened.execute("PRAGMA user_version").fetchone()[0] == 1
    assert not tables & {"witness_evidence", "witness_evidence_dropped"}
    again = WitnessState(path)  # opening the migrated file again changes nothing
    try:
        assert again.latest(ORIGIN).size == 16  # type: ignore[union-attr]
        assert [item.size for item in again.pending(ORIGIN)[0]] == [12]
    finally:
        again.close()


def test_a_state_file_of_a_newer_release_is_refused(tmp_path: Path) -> None:
    """A schema this release does not know is one clear error, not a guess."""
    path = tmp_path / "witness.db"
    WitnessState(path).close()
    with sqlite3.connect(path) as newer:
        newer.execute("PRAGMA user_version = 7")
    with pytest.raises(InputError, match="newer release"):
        WitnessState(path)


def test_the_caps_hold_for_both_kinds_of_evidence(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past its cap each kind only counts: pending notes of new sizes, conclusive notes each time they come."""
    monkeypatch.setattr(state_module, "MAX_PENDING_PER_ORIGIN", 2)
    monkeypatch.setattr(state_module, "MAX_EVIDENCE_PER_ORIGIN", 1)
    assert served.post(body(0, note(6)))[0] == 200
    for size in (7, 8, 9, 9):
        assert served.post(body(6, note(size), proof=JUNK_PROOF))[0] == 422
    assert ([item.size for item in served.state.pending(ORIGIN)[0]], served.state.pending(ORIGIN)[1]) == ([7, 8], 2)
    forks = [note(6, tree=MemoryTree(leaf_hash(b"fork %d %d" % (n, i)) for i in range(6))) for n in range(2)]
    for forked in [*forks, *forks]:
        assert served.post(body(6, forked))[0] == 409
    kept, dropped = served.state.evidence(ORIGIN)
    assert ([item.note for item in kept], dropped) == ([forks[0]], 2)


def test_pending_notes_the_log_grew_past_make_room_for_a_later_fork(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Red team on issue 28 d: a pending note settles only when the witness cosigns exactly its size. Honest notes
    sent with junk proofs at sizes the log then grew past held every pending slot for good, so a later fork of a
    new size was only counted. Now the oldest note below the cosigned size gives way (and is counted)."""
    monkeypatch.setattr(state_module, "MAX_PENDING_PER_ORIGIN", 2)
    assert served.post(body(0, note(6)))[0] == 200
    for size in (7, 8):  # honest notes with junk proofs fill both slots
        assert served.post(body(6, note(size), proof=JUNK_PROOF))[0] == 422
    assert served.post(body(6, note(10)))[0] == 200  # the log grows past 7 and 8: neither can settle now
    forked = note(12, tree=FORK)
    assert served.post(body(10, forked, tree=FORK))[0] == 422  # a fork's note of a new size, pending
    pending, dropped = served.state.pending(ORIGIN)
    assert ([item.size for item in pending], dropped) == ([8, 12], 1)
    assert served.post(body(10, note(12)))[0] == 200  # the witness cosigns 12 from the honest log
    kept, _ = served.state.evidence(ORIGIN)
    assert [(item.label, item.size, item.note) for item in kept] == [("fork", 12, forked)]


# -- red team on issue 28 k: the first text a witness cosigns at a size may carry other extension lines ----------


def test_a_witness_answer_with_an_extra_extension_line_is_a_finding_not_an_audit_that_cannot_run(
    served: Served, run_cli: Callable[..., tuple[int, str, str]], store_target: str, tmp_path: Path
) -> None:
    """The witness keeps one text per size, but the first one it cosigns is whatever a log key signed: a writer
    key's holder who sends the store's head with one more extension line first makes `/latest` serve it. Every
    `audit --witness-url` then stopped with exit 2 ("expected 4 lines"), where spec 9.9.4 says extension lines
    that differ from the store's are `checkpoint_mismatch` when a trusted writer signature on the answer verifies
    (else exit 2, as for any answer the audit cannot use)."""
    key = tmp_path / "writer.key"
    key.write_text(LOG.format() + "\n")
    key.chmod(0o600)
    gates = tmp_path / "gates.jsonl"
    gates.write_text("\n".join(gate_lines(6)) + "\n")
    assert run_cli("record", str(gates), "--db", store_target, "--signing-key", str(key), "--origin", ORIGIN)[0] == 0
    stored = query(store_target, "SELECT note FROM compute_budget_checkpoints")[0][0]
    longer = sign_note(parse_note(stored)[0] + "another extension line\n", LOG)
    assert served.post(body(0, longer))[0] == 200
    url = f"http://127.0.0.1:{served.port}={WITNESS.verifier().format()}"
    status, out, err = run_cli("audit", "--db", store_target, "--trusted-key", LOG.verifier().format(),
                               "--witness-url", url, "--format", "json")
    assert status == 1, out + err
    findings = json.loads(out)["findings"]
    assert [item["kind"] for item in findings] == ["checkpoint_mismatch"]
    assert "extension lines" in findings[0]["detail"]
    status, _, err = run_cli("audit", "--db", store_target, "--witness-url", url)  # no trusted writer key: exit 2
    assert status == 2
    assert "--trusted-key" in err
    assert "Traceback" not in err
