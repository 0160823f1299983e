"""The witness of spec 9.4 over real HTTP on 127.0.0.1: each answer in the order the spec gives, cosignatures that
verify, fork evidence under its cap, the Host allow-list, timeouts, and concurrent submissions that never fork."""

from __future__ import annotations

import base64
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from compute_budget.core.log.cosignature import valid_cosignatures
from compute_budget.core.log.merkle import MemoryTree, consistency_proof, leaf_hash, root_from_reader
from compute_budget.core.log.note import format_checkpoint, parse_note, sign_note
from compute_budget.witness import state as state_module
from tests.witnessing import FORK, ORIGIN, OTHER, TREE, WITNESS, Served, body, note


def _cosigned(signed: str, line: str) -> list[int]:
    return [item.timestamp for item in valid_cosignatures(signed + line, [WITNESS.verifier()], now=int(time.time()))]


def test_a_first_checkpoint_and_its_extension_are_cosigned(served: Served) -> None:
    """200 with a cosignature line that verifies under the witness key; the state moves to the new size."""
    first = note(10)
    status, line, kind = served.post(body(0, first))
    assert (status, kind.split(";")[0]) == (200, "text/plain")
    assert len(_cosigned(first, line)) == 1
    second = note(20)
    status, line, _ = served.post(body(10, second))
    assert status == 200
    assert len(_cosigned(second, line)) == 1
    latest = served.state.latest(ORIGIN)
    assert latest is not None
    assert (latest.size, latest.root) == (20, base64.b64encode(root_from_reader(TREE, 20)).decode())


def test_a_stale_old_size_is_409_with_the_size_it_knows(served: Served) -> None:
    """409, body ``<size>\\n``, Content-Type text/x.tlog.size."""
    assert served.post(body(0, note(12)))[0] == 200
    assert served.post(body(0, note(30))) == (409, "12\n", "text/x.tlog.size")
    assert served.post(body(5, note(30)))[:2] == (409, "12\n")


@pytest.mark.parametrize(
    ("payload", "status"),
    [
        (b"old 0\n", 400),  # no empty line, no note
        (b"old 00\n\n" + note(3).encode(), 400),  # leading zeros
        (b"old x\n\n" + note(3).encode(), 400),
        ("old 1\n" + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n" * 64 + "\n" + note(3), 400),  # 64 proof lines
        (b"old 0\nnot base64\n\n" + note(3).encode(), 400),
        (b"old 0\n\n" + b"just text\n", 400),
        (b"old 0\n\n" + b"\xff\xfe\n", 400),
    ],
)
def test_malformed_bodies_are_400(served: Served, payload: bytes | str, status: int) -> None:
    """Check 1: anything not the C2SP body (a proof over 63 lines, a size with leading zeros) is 400."""
    data = payload.encode() if isinstance(payload, str) else payload
    assert served.post(data)[0] == status


def test_the_checks_come_in_the_spec_order(served: Served) -> None:
    """413 before parsing, 404 before signatures, 403 before sizes, 400 (old above size) before 409, 422, 409."""
    assert served.post(b"old 0\n\n" + b"x" * (64 * 1024 + 1))[0] == 413
    unknown = sign_note(format_checkpoint("nobody.example/log", 3, root_from_reader(TREE, 3), "ab" * 32), OTHER)
    assert served.post(body(0, unknown))[0] == 404
    assert served.post(body(99, note(3, signer=OTHER)))[0] == 403  # another log's key, even with a wrong old
    assert served.post(body(9, note(3)))[0] == 400  # old above the size, though the witness knows 0
    assert served.post(body(0, note(8), proof=[leaf_hash(b"x")]))[0] == 422  # old 0 with a proof
    assert served.post(body(0, note(8)))[0] == 200
    assert served.post(body(8, note(16), proof=consistency_proof(FORK, 8, 16)))[0] == 422  # proof does not verify
    assert served.post(body(8, note(8, tree=FORK)))[:2] == (409, "8\n")  # same size, another root
    assert served.post(body(8, note(16, tree=FORK), tree=FORK))[0] == 422
    kept, dropped = served.state.evidence(ORIGIN)
    # Check 7's refusal is conclusive; so are two log-signed notes of size 16 with two roots, refused at 6 (a fork
    # whatever the witness later cosigns: red team on issue 28 d).
    assert sorted((item.label, item.size) for item in kept) == [("fork", 8), ("fork", 16), ("fork", 16)]
    assert dropped == 0
    pending, _ = served.state.pending(ORIGIN)
    assert [item.size for item in pending] == [16]  # the first note refused at 6 for size 16; size 8 was settled
    assert served.state.latest(ORIGIN).size == 8  # type: ignore[union-attr]


def test_replayed_refusals_do_not_grow_the_evidence_past_its_cap(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each refused note is kept once; past the cap only a count grows."""
    monkeypatch.setattr(state_module, "MAX_EVIDENCE_PER_ORIGIN", 3)
    assert served.post(body(0, note(6)))[0] == 200
    forks = [note(6, tree=MemoryTree(leaf_hash(b"fork %d %d" % (n, i)) for i in range(6))) for n in range(5)]
    for _ in range(3):
        for forked in forks:
            assert served.post(body(6, forked))[0] == 409
    kept, dropped = served.state.evidence(ORIGIN)
    assert [item.note for item in kept] == forks[:3]
    assert dropped == 6  # the two notes past the cap, counted each of the three times they came


def test_latest_is_404_then_the_checkpoint_with_a_fresh_cosignature(served: Served) -> None:
    """GET /latest: the checkpoint text, the verified log signature, and a cosignature made now."""
    assert served.get("/latest?origin=example.org%2Flog")[0] == 404
    signed = note(9)
    assert served.post(body(0, signed))[0] == 200
    status, text, kind = served.get("/latest?origin=example.org%2Flog")
    assert (status, kind) == (200, "text/plain; charset=utf-8")
    checkpoint_text, signatures = parse_note(text)
    assert checkpoint_text == parse_note(signed)[0]
    assert signatures[0] == parse_note(signed)[1][0]
    assert len(valid_cosignatures(text, [WITNESS.verifier()], now=int(time.time()))) == 1


def test_a_host_the_witness_does_not_serve_is_refused(served: Served) -> None:
    """DNS rebinding reaches nothing: a foreign Host header gets 421 and changes no state."""
    status, _, _ = served.post(body(0, note(4)), host="evil.example")
    assert status == 421
    assert served.state.latest(ORIGIN) is None
    assert served.post(body(0, note(4)), host="localhost:7380")[0] == 200


def test_silent_connections_are_closed_after_the_header_timeout(served: Served) -> None:
    """Sockets that never send a request head are closed by the server (1 s here), not held forever."""
    idle = [socket.create_connection(("127.0.0.1", served.port)) for _ in range(5)]
    slow = socket.create_connection(("127.0.0.1", served.port))
    slow.sendall(b"POST /add-checkpoint HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finishes its head
    try:
        for sock in [*idle, slow]:
            sock.settimeout(5)
            assert sock.recv(1024) == b""  # closed by the witness
    finally:
        for sock in [*idle, slow]:
            sock.close()
    assert served.post(body(0, note(2)))[0] == 200


def test_concurrent_submissions_of_two_forks_never_cosign_both(served: Served) -> None:
    """20 submissions from two clients, one per fork, interleaved: the state never moves backwards, and every
    cosigned checkpoint past the common prefix comes from one fork only."""
    assert served.post(body(0, note(5)))[0] == 200
    cosigned: list[tuple[str, int]] = []
    seen_sizes: list[int] = []
    lock = threading.Lock()

    def client(name: str, tree: MemoryTree) -> None:
        known = 5
        for size in range(6, 16):
            signed = note(size, tree=tree)
            status, answer, _ = served.post(body(known, signed, tree=tree))
            if status == 409 and answer.strip().isdigit():
                known = int(answer)
                if known < size:
                    status, answer, _ = served.post(body(known, signed, tree=tree))
            if status == 200:
                known = size
                with lock:
                    cosigned.append((name, size))
            latest = served.state.latest(ORIGIN)
            with lock:
                seen_sizes.append(latest.size if latest else 0)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda args: client(*args), [("honest", TREE), ("fork", FORK)]))
    assert cosigned
    assert len({name for name, _ in cosigned}) == 1
    latest = served.state.latest(ORIGIN)
    assert latest is not None
    assert latest.size == max(size for _, size in cosigned)
    assert min(seen_sizes) >= 5


def test_a_submitter_that_leaves_mid_body_is_no_traceback_and_changes_nothing(served: Served) -> None:
    """A POST /add-checkpoint whose client disconnects before its body arrives was an 'Exception in ASGI
    application' traceback on the witness's stderr. Now nothing is logged and the witness's state is unchanged."""
    import logging

    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger("uvicorn.error").addHandler(handler)
    try:
        with socket.create_connection(("127.0.0.1", served.port)) as sock:
            sock.sendall(b"POST /add-checkpoint HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 500\r\n\r\nold 0\n")
        time.sleep(0.3)
        assert served.post(body(0, note(1)))[0] == 200  # the witness still answers
    finally:
        logging.getLogger("uvicorn.error").removeHandler(handler)
    assert [record.getMessage() for record in records] == []
    assert served.state.latest(ORIGIN).size == 1  # type: ignore[union-attr]
