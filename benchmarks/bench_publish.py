"""Benchmark: `compute-budget publish DIR` (spec 10.1) against the audit and a bare floor (issue 30).

In one run, on this machine, over signed SQLite stores of SMALL and N rows (each measurement in a fresh child
interpreter, which also reports its peak resident set, VmHWM):

1. the first publish of the N-row store into an empty folder, as a ratio to a full audit of the same store
   (`audit --trusted-key`, jobs=1; the publish runs that same audit first, so the ratio is above 1 by what
   building and writing the tiles cost);
2. the bare floor of a first publish: a raw stdlib `sqlite3` scan in seq order, `json.dumps(sort_keys=True)` of the
   17 leaf columns and one SHA-256 per row, and the level-0 tile and entry bundle of every 256 rows written to
   files (no audit, no upper tiles, no staging or renames): what writing a publication costs at the least;
3. an incremental publish of NEW (default 1,000) rows recorded after the first publish, on the SMALL and on the
   N-row store (best of five rounds, each NEW more rows): rule 5 says its cost follows the new rows, not the
   store, so the two should be about equal;
4. `audit --tiles` of the first publication (the N-row store's folder) as a ratio to the full audit of item 1, which
   is `audit --db` of the same store with the same key (`bench_audit_tiles.py` measures the same alone, at any N).

Run: ``python benchmarks/bench_publish.py`` (builds 100,000- and 1,000,000-row signed stores first: many minutes),
``--count 200000 --small 20000`` for a shorter run, ``--keep DIR`` to keep (and reuse) the stores there.
Goals: first publish <= 1.5x a full audit; incremental publish on N rows <= 1.5x the same on SMALL rows (flat);
peak memory flat (the N-row figure <= 1.5x the SMALL-row one).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_record import gates

from compute_budget import BudgetStore
from compute_budget.core.log.note import SignerKey

TABLE = "compute_budget_decisions"
LEAF_COLUMNS = (
    "seq", "budget_id", "policy_version", "gate_decision_id", "gate_policy_version", "gate_input_digest", "status",
    "reason_code", "max_candidates", "max_depth", "max_steps", "max_wallclock_ms", "max_parallelism",
    "evidence_spans", "explanation", "gate_input", "recorded_at",
)
KEY = SignerKey.from_seed("bench.example/writer", bytes(range(32)))
GOAL_FIRST = 1.5
GOAL_FLAT = 1.5
INCREMENTAL_ROUNDS = 5

# Runs in a fresh interpreter: one audit or one publish alone, then its own peak resident set.
_CHILD = """
import json, sys, time
from pathlib import Path
from compute_budget.auditor.request import AuditRequest
from compute_budget.auditor.scan import audit, run_audit
from compute_budget.publication_reader.snapshot import PublicationTarget
from compute_budget.publication_writer import PublishRequest, publish

def vmhwm_kb():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0

what, db, key, folder = sys.argv[1:5]
began = time.perf_counter()
if what == "audit":
    report = audit(db, trusted_keys=[key], jobs=1)
    ok, detail = report.clean, report.rows_checked
elif what == "tiles":
    origin = Path(folder, "checkpoint").read_text(encoding="utf-8").split("\\n", 1)[0]
    report = run_audit(AuditRequest(PublicationTarget(folder), trusted_keys=(key,), expected_origin=origin, jobs=1))
    ok, detail = report.clean, report.rows_checked
else:
    outcome = publish(PublishRequest(folder, db, trusted_keys=(key,), jobs=1))
    ok, detail = outcome.published, len(outcome.written)
print(json.dumps({"seconds": time.perf_counter() - began, "ok": ok, "detail": detail, "peak_kb": vmhwm_kb()}))
"""


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_signed(path: Path, start: int, count: int, *, batch: int = 100_000) -> None:
    """Record gates `start`..`start + count` into the store at `path`, signed by the benchmark's writer key."""
    with BudgetStore.open(path, signing_key=KEY, init_writer_state=True) as store:
        for first in range(start, start + count, batch):
            result = store.record_many(gates(first, min(batch, start + count - first)))
            _say(f"  {path.name}: {result.head.seq:,} rows")


def child(what: str, db: Path, folder: Path) -> dict[str, float]:
    """Run one audit or publish alone in a child interpreter: seconds, whether it passed, its peak RSS in KB."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, what, str(db), KEY.verifier().format(), str(folder)],
        check=True, capture_output=True, text=True,
    )
    result: dict[str, float] = json.loads(done.stdout)
    if not result["ok"]:
        raise SystemExit(f"{what} of {db} did not pass: {result}")
    return result


def floor_publish(db: Path, folder: Path) -> float:
    """Seconds for the bare floor of a first publish (see the module docstring)."""
    began = time.perf_counter()
    (folder / "tile/0").mkdir(parents=True)
    (folder / "tile/entries").mkdir(parents=True)
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        entries: list[bytes] = []
        query = f"SELECT {', '.join(LEAF_COLUMNS)} FROM {TABLE} ORDER BY seq"
        for row in connection.execute(query):
            entries.append(json.dumps(dict(zip(LEAF_COLUMNS, row, strict=True)), sort_keys=True,
                                      separators=(",", ":"), ensure_ascii=False).encode())
            if len(entries) == 256:
                _floor_tile(folder, (row[0] - 1) // 256, entries)
                entries = []
        if entries:
            _floor_tile(folder, -1, entries)
    finally:
        connection.close()
    return time.perf_counter() - began


def _floor_tile(folder: Path, index: int, entries: list[bytes]) -> None:
    name = f"{index:09d}" if index >= 0 else "partial"
    hashes = b"".join(hashlib.sha256(b"\x00" + entry).digest() for entry in entries)
    (folder / "tile/0" / name).write_bytes(hashes)
    (folder / "tile/entries" / name).write_bytes(b"".join(len(entry).to_bytes(2, "big") + entry for entry in entries))


def measure(db: Path, rows: int, new: int, work: Path) -> dict[str, dict[str, float]]:
    """The full audit, the first publish, the floor, then `new` more rows and the incremental publish."""
    folder = work / f"published-{rows}"
    shutil.rmtree(folder, ignore_errors=True)
    results = {"audit": child("audit", db, folder), "first": child("publish", db, folder)}
    results["tiles"] = child("tiles", db, folder)
    floor_folder = work / f"floor-{rows}"
    shutil.rmtree(floor_folder, ignore_errors=True)
    results["floor"] = {"seconds": floor_publish(db, floor_folder)}
    shutil.rmtree(floor_folder)
    rounds = []
    for round_number in range(INCREMENTAL_ROUNDS):  # best of a few: one 0.1-second run is at the mercy of load
        build_signed(db, rows + round_number * new, new)
        rounds.append(child("publish", db, folder))
    results["incremental"] = min(rounds, key=lambda item: item["seconds"])
    shutil.rmtree(folder)
    return results


Results = dict[str, dict[str, float]]


def report(count: int, small: int, new: int, big: Results, little: Results) -> None:
    """The figures, their ratios, and the goals."""
    first, audit, floor = big["first"]["seconds"], big["audit"]["seconds"], big["floor"]["seconds"]
    print(f"full audit, {count:,} rows, jobs=1          {audit:8.2f} s   peak {big['audit']['peak_kb'] / 1024:6.1f} MB")
    print(f"first publish, {count:,} rows, jobs=1       {first:8.2f} s   peak {big['first']['peak_kb'] / 1024:6.1f} MB")
    print(f"bare floor of a first publish               {floor:8.2f} s")
    print(f"ratio    first publish / full audit  {first / audit:6.2f}  (goal <= {GOAL_FIRST})")
    print(f"ratio    first publish / bare floor  {first / floor:6.2f}")
    for rows, results in ((small, little), (count, big)):
        item = results["incremental"]
        print(f"incremental publish, {new:,} new rows on {rows:,}   {item['seconds']:8.3f} s   "
              f"peak {item['peak_kb'] / 1024:6.1f} MB")
    flat = big["incremental"]["seconds"] / little["incremental"]["seconds"]
    memory = big["incremental"]["peak_kb"] / little["incremental"]["peak_kb"]
    print(f"ratio    incremental on {count:,} / on {small:,} rows  {flat:6.2f} time, {memory:6.2f} peak memory  "
          f"(goal <= {GOAL_FLAT}: flat in the store's size)")
    tiles = big["tiles"]
    print(f"audit --tiles of the first publication  {tiles['seconds']:8.2f} s   peak {tiles['peak_kb'] / 1024:6.1f} MB")
    print(f"ratio    audit --tiles / audit --db  {tiles['seconds'] / audit:6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1_000_000, help="rows of the large store (N)")
    parser.add_argument("--small", type=int, default=100_000, help="rows of the small store (SMALL)")
    parser.add_argument("--new", type=int, default=1_000, help="rows recorded before the incremental publish")
    parser.add_argument("--keep", type=Path, help="a folder to build the stores in and keep (reused when there)")
    arguments = parser.parse_args()
    work = arguments.keep or Path(tempfile.mkdtemp(prefix="bench-publish-"))
    work.mkdir(parents=True, exist_ok=True)
    # A writer state of this run only: a kept store is restored to its first size each run, and the writer's state
    # of an earlier run (which signed more rows) would rightly refuse it as truncated.
    state = work / f"writer-{os.getpid()}.state"
    os.environ["COMPUTE_BUDGET_WRITER_STATE"] = str(state)
    try:
        results = {}
        for rows in (arguments.small, arguments.count):
            db = work / f"store-{rows}.db"
            if arguments.keep is not None and (work / f"store-{rows}.copy.db").exists():
                shutil.copy(work / f"store-{rows}.copy.db", db)
            else:
                db.unlink(missing_ok=True)
                _say(f"building a signed store of {rows:,} rows")
                build_signed(db, 0, rows)
                if arguments.keep is not None:
                    shutil.copy(db, work / f"store-{rows}.copy.db")
            _say(f"measuring on {rows:,} rows")
            results[rows] = measure(db, rows, arguments.new, work)
        report(arguments.count, arguments.small, arguments.new, results[arguments.count], results[arguments.small])
    finally:
        state.unlink(missing_ok=True)
        if arguments.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
