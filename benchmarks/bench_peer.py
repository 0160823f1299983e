"""Benchmark: compute-budget `record_many` against a peer a user might pick, `eventsourcing`'s SQLite recorder.

In one run, on the same N gates (JSON text, `bench_record.py`'s generator), alternating which side goes first:

- **project**: `BudgetStore.record_many(gates)` into a fresh store: decide, chain, seal (Merkle leaves and tree
  nodes), guard and insert, one transaction;
- **peer**: `eventsourcing.sqlite.SQLiteApplicationRecorder` into a fresh SQLite file (WAL, the library's
  defaults): each gate decided with `compute_budget.decide_json`, the decision serialised with `orjson`, stored
  as one `StoredEvent` (its own aggregate id, version 1), `insert_events` of every event in one transaction. The
  peer neither chains, nor guards, nor can verify what it stored.

`eventsourcing` is not a dependency of compute-budget; install it into your virtual environment only:
``pip install eventsourcing`` (measured with 9.5.6). Run from the `benchmarks` folder:
``python bench_peer.py`` (100,000 gates), ``--count 5000`` for a smoke run. Goal: project / peer >= 1.0.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from bench_record import gates

from compute_budget import decide_json
from compute_budget.store import BudgetStore

GOAL_RATIO = 1.0
TOPIC = "compute_budget:Decided"


def run_project(batch: list[Any], path: Path) -> float:
    """Seconds for `record_many` of `batch` into a fresh store at `path`."""
    with BudgetStore.open(path) as store:
        began = time.perf_counter()
        result = store.record_many(batch)
        elapsed = time.perf_counter() - began
    if result.new != len(batch):
        raise SystemExit(f"project: expected {len(batch)} new rows, got {result.new}")
    return elapsed


def run_peer(batch: list[Any], path: Path) -> float:
    """Seconds to decide `batch` and insert every decision as an event through eventsourcing's SQLite
    application recorder (recorder set up before the clock starts)."""
    from eventsourcing.persistence import StoredEvent
    from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

    datastore = SQLiteDatastore(str(path))
    recorder = SQLiteApplicationRecorder(datastore)
    recorder.create_table()
    began = time.perf_counter()
    events = []
    for text in batch:
        decision = decide_json(text)
        state = orjson.dumps(decision.to_dict())
        originator = uuid.uuid5(uuid.NAMESPACE_URL, decision.budget_id)
        events.append(StoredEvent(originator_id=originator, originator_version=1, topic=TOPIC, state=state))
    recorder.insert_events(events)
    elapsed = time.perf_counter() - began
    datastore.close()
    with sqlite3.connect(path) as check:
        stored = check.execute("SELECT count(*) FROM stored_events").fetchone()[0]
    if stored != len(batch):
        raise SystemExit(f"peer: expected {len(batch)} events, found {stored}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=100_000, help="gates (default 100,000)")
    parser.add_argument("--repeat", type=int, default=2, help="rounds; the best of each side counts (default 2)")
    args = parser.parse_args(argv)
    if args.count < 1 or args.repeat < 1:
        parser.error("--count and --repeat must be positive")
    try:
        import eventsourcing  # noqa: F401
    except ImportError:
        raise SystemExit("bench_peer needs the eventsourcing library: pip install eventsourcing") from None
    from importlib.metadata import version

    folder = Path(tempfile.mkdtemp(prefix="bench_peer_"))
    try:
        batch = gates(0, args.count, "text")
        times: dict[str, list[float]] = {"project": [], "peer": []}
        for round_number in range(args.repeat):
            order = ("project", "peer") if round_number % 2 == 0 else ("peer", "project")
            for side in order:
                path = folder / f"{side}{round_number}.db"
                run = run_project if side == "project" else run_peer
                times[side].append(run(batch, path))
            print(
                f"round {round_number + 1}: "
                + "  ".join(f"{side} {args.count / values[-1]:,.0f}/s" for side, values in times.items()),
                file=sys.stderr,
            )
        project_rate = args.count / min(times["project"])
        peer_rate = args.count / min(times["peer"])
        ratio = project_rate / peer_rate
        print(
            f"bench_peer: {args.count:,} gates, SQLite {sqlite3.sqlite_version}, eventsourcing "
            f"{version('eventsourcing')}, best of {args.repeat}"
        )
        print(f"project  compute-budget record_many       {project_rate:10,.0f} decisions/s")
        print(f"peer     eventsourcing SQLite recorder    {peer_rate:10,.0f} decisions/s")
        verdict = "meets" if ratio >= GOAL_RATIO else "MISSES"
        print(f"ratio    project / peer                   {ratio:10.3f}   ({verdict} the goal >= {GOAL_RATIO})")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
