"""Benchmark: the witness's `add-checkpoint` (spec 9.4) on a large log, against its bare floor.

In one run, over one synthetic tree of N leaf hashes (default 10,000,000, built in memory first; no store):

- **project**: `Witness.add_checkpoint(body)` for R submissions, each extending the last cosigned size by 1-64
  leaves with its consistency proof: body parsing, the log signature, the state's ``BEGIN IMMEDIATE``
  transaction at ``synchronous=FULL`` (committed before the answer), the proof, the cosignature;
- **floor**: the same work in its rawest form, per submission: one Ed25519 verification of the note, the
  consistency proof through `verify_consistency`, one Ed25519 signature, and one stdlib ``BEGIN IMMEDIATE`` /
  ``UPDATE`` / ``COMMIT`` at ``synchronous=FULL`` in a file of the same folder.

Prints median and p99 of each and the p99 ratio. Goal (issue 21): project p99 under 20 ms on the 2-core machine.

Part 2 (`--record N`): what a reachable witness adds to one `store.record(gate)` of a signing writer: N calls
without witnesses, then N with one witness served on 127.0.0.1 (uvicorn in a thread of this process), each into a
store of its own in the same folder; prints both medians and the difference. Goal: under 25 ms added (median).

Run from the `benchmarks` folder: ``python bench_witness.py`` (10M leaves, a minute to build and about 2 GB, then
200 records each way), ``--leaves 100000 --rounds 50 --record 50`` for a smoke run.
"""

from __future__ import annotations

import argparse
import base64
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from compute_budget.core.log.cosignature import WitnessSigner
from compute_budget.core.log.merkle import MemoryTree, consistency_proof, root_from_reader, verify_consistency
from compute_budget.core.log.note import SignerKey, format_checkpoint, parse_note, sign_note, verify_note
from compute_budget.witness.protocol import Witness
from compute_budget.witness.state import WitnessState

ORIGIN = "bench.example/log"
GOAL_P99_MS = 20.0
GOAL_ADDED_MS = 25.0


def build_tree(leaves: int) -> MemoryTree:
    """A tree of `leaves` synthetic leaf hashes (SHA-256 of the index)."""
    import hashlib

    return MemoryTree(hashlib.sha256(index.to_bytes(8, "big")).digest() for index in range(leaves))


def submissions(tree: MemoryTree, start: int, rounds: int, log: SignerKey) -> list[tuple[int, int, bytes, str]]:
    """(old, new, body, note) for `rounds` extensions from `start`, each by 1-64 leaves."""
    chooser = random.Random(7)
    found = []
    old = start
    for _ in range(rounds):
        new = old + chooser.randint(1, 64)
        note = sign_note(format_checkpoint(ORIGIN, new, root_from_reader(tree, new), "ab" * 32), log)
        proof = consistency_proof(tree, old, new)
        lines = "".join(base64.b64encode(item).decode() + "\n" for item in proof)
        found.append((old, new, f"old {old}\n{lines}\n{note}".encode(), note))
        old = new
    return found


def run_project(tree: MemoryTree, work: list[tuple[int, int, bytes, str]], folder: Path, log: SignerKey) -> list[float]:
    state = WitnessState(folder / "witness.db")
    witness = Witness(WitnessSigner.from_seed("w", bytes(32)), {ORIGIN: [log.verifier()]}, state, clock=lambda: 1)
    first_old = work[0][0]
    seed = sign_note(format_checkpoint(ORIGIN, first_old, root_from_reader(tree, first_old), "ab" * 32), log)
    assert witness.add_checkpoint(f"old 0\n\n{seed}".encode()).status == 200
    times = []
    for _, _, body, _ in work:
        began = time.perf_counter()
        answer = witness.add_checkpoint(body)
        times.append(time.perf_counter() - began)
        assert answer.status == 200, answer
    state.close()
    return times


def run_floor(tree: MemoryTree, work: list[tuple[int, int, bytes, str]], folder: Path, log: SignerKey) -> list[float]:
    connection = sqlite3.connect(folder / "floor.db", isolation_level=None)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = FULL")
    connection.execute("CREATE TABLE latest (origin TEXT PRIMARY KEY, size INTEGER, root BLOB)")
    connection.execute("INSERT INTO latest VALUES (?, ?, ?)", (ORIGIN, work[0][0], root_from_reader(tree, work[0][0])))
    signer = WitnessSigner.from_seed("w", bytes(32))
    keys = [log.verifier()]
    times = []
    for old, new, body, note in work:
        proof = [base64.b64decode(line) for line in body.decode().split("\n\n", 1)[0].split("\n")[1:]]
        text = parse_note(note)[0]
        new_root = root_from_reader(tree, new)
        began = time.perf_counter()
        assert verify_note(note, keys).verified
        connection.execute("BEGIN IMMEDIATE")
        old_root = connection.execute("SELECT root FROM latest WHERE origin = ?", (ORIGIN,)).fetchone()[0]
        assert verify_consistency(old, new, old_root, new_root, proof)
        signer.cosign(text, 1)
        connection.execute("UPDATE latest SET size = ?, root = ? WHERE origin = ?", (new, new_root, ORIGIN))
        connection.execute("COMMIT")
        times.append(time.perf_counter() - began)
    connection.close()
    return times


def run_record(folder: Path, count: int, witness_url: str | None, log: SignerKey) -> list[float]:
    """Seconds of each of `count` single `record()` calls of a signing writer (with one witness when given)."""
    from bench_record import gates

    from compute_budget import BudgetStore

    name = "with" if witness_url else "without"
    batch = gates(0, count + 20, "mapping")
    witnesses = [witness_url] if witness_url else []
    times = []
    with BudgetStore.open(str(folder / f"{name}.db"), origin=ORIGIN, signing_key=log,
                          writer_state=str(folder / f"{name}.state"), witnesses=witnesses) as store:
        for index, gate in enumerate(batch):
            began = time.perf_counter()
            result = store.record(gate)
            if index >= 20:  # after a warm-up
                times.append(time.perf_counter() - began)
            assert not result.witness_warnings, result.witness_warnings
    return times


def serve_witness_in_thread(folder: Path, log: SignerKey) -> tuple[str, object]:
    """A witness of ORIGIN on a free port of 127.0.0.1, in a thread; returns its URL=KEY and the server."""
    import threading

    import uvicorn

    from compute_budget.serving import bind
    from compute_budget.witness.app import allowed_hosts, create_witness_app

    signer = WitnessSigner.from_seed("bench.example/w1", bytes(32))
    state = WitnessState(folder / "served-witness.db")
    witness = Witness(signer, {ORIGIN: [log.verifier()]}, state, clock=lambda: int(time.time()))
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_witness_app(witness, allowed_hosts("127.0.0.1", ())),
                                           log_level="warning", access_log=False, lifespan="off"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    return f"http://127.0.0.1:{sock.getsockname()[1]}={signer.verifier().format()}", server


def _summary(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered) * 1000, ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--leaves", type=int, default=10_000_000, help="leaf hashes in the tree (default 10M)")
    parser.add_argument("--rounds", type=int, default=500, help="submissions measured (default 500)")
    parser.add_argument("--record", type=int, default=200, help="single records measured each way (default 200)")
    arguments = parser.parse_args()
    began = time.perf_counter()
    tree = build_tree(arguments.leaves)
    print(f"built a tree of {arguments.leaves:,} leaves in {time.perf_counter() - began:.1f} s")
    log = SignerKey.from_seed(ORIGIN, bytes(range(32)))
    start = arguments.leaves - 64 * arguments.rounds - 1
    work = submissions(tree, start, arguments.rounds, log)
    folder = Path(tempfile.mkdtemp(prefix="bench-witness-"))
    try:
        project = _summary(run_project(tree, work, folder, log))
        floor = _summary(run_floor(tree, work, folder, log))
    finally:
        shutil.rmtree(folder)  # the folder this run made, nothing else
    print(f"project add-checkpoint: median {project[0]:.2f} ms, p99 {project[1]:.2f} ms")
    print(f"floor                 : median {floor[0]:.2f} ms, p99 {floor[1]:.2f} ms")
    print(f"p99 ratio project/floor: {project[1] / floor[1]:.2f}; goal p99 < {GOAL_P99_MS:.0f} ms: "
          f"{'met' if project[1] < GOAL_P99_MS else 'NOT met'}")
    del tree
    folder = Path(tempfile.mkdtemp(prefix="bench-witness-record-"))
    try:
        url, server = serve_witness_in_thread(folder, log)
        without = _summary(run_record(folder, arguments.record, None, log))
        with_one = _summary(run_record(folder, arguments.record, url, log))
        server.should_exit = True  # type: ignore[attr-defined]
    finally:
        shutil.rmtree(folder)  # the folder this run made, nothing else
    added = with_one[0] - without[0]
    print(f"record() without witnesses: median {without[0]:.2f} ms, p99 {without[1]:.2f} ms")
    print(f"record() with one witness : median {with_one[0]:.2f} ms, p99 {with_one[1]:.2f} ms")
    print(f"added by the witness (median): {added:.2f} ms; goal < {GOAL_ADDED_MS:.0f} ms: "
          f"{'met' if added < GOAL_ADDED_MS else 'NOT met'}")


if __name__ == "__main__":
    main()
