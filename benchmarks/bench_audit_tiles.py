"""Benchmark: `audit --tiles` of a publication in a folder, as a ratio to `audit --db` of the store it was published
from (spec 10.2, issue 30), with the peak RSS of each.

In one run, on this machine: a signed store of N rows is built (``--count``, default 100,000), published into a
folder by `publish` (spec 10.1), then each audit runs alone in a fresh interpreter with jobs=1, which reports its
time and its peak resident set (VmHWM). Goals: the tiles audit within 2x of the database audit (it re-derives the
same rows and also reads every tile and recomputes the chain), and its peak memory flat in the log's size (compare
two ``--count``s).

Run: ``python benchmarks/bench_audit_tiles.py --count 100000``; ``--keep DIR`` keeps the store and publication.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_record import gates

from compute_budget import BudgetStore
from compute_budget.core.log.note import generate_signer
from compute_budget.publication_writer import PublishRequest, publish

ORIGIN = "bench.example/budget-log"
GOAL_RATIO = 2.0

# Runs in a fresh interpreter: one audit alone, then its own peak resident set.
_CHILD = """
import json, sys, time
from compute_budget.auditor.request import AuditRequest
from compute_budget.auditor.scan import run_audit
from compute_budget.publication_reader.snapshot import PublicationTarget

def vmhwm_kb():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0

kind, location, key = sys.argv[1:4]
target = PublicationTarget(location) if kind == "tiles" else location
began = time.perf_counter()
report = run_audit(AuditRequest(target, trusted_keys=(key,), expected_origin=sys.argv[4], jobs=1))
print(json.dumps({"rows": report.rows_checked, "clean": report.clean, "seconds": time.perf_counter() - began,
                  "peak_kb": vmhwm_kb()}))
"""


def build(folder: Path, count: int) -> str:
    """A signed store of `count` rows in `folder`, and its publication; returns the writer's verifier key."""
    os.environ["COMPUTE_BUDGET_WRITER_STATE"] = str(folder / "writer.state")
    signer = generate_signer("bench-writer")
    with BudgetStore.open(folder / "store.db", origin=ORIGIN, signing_key=signer) as store:
        for start in range(0, count, 100_000):
            store.record_many(gates(start, min(100_000, count - start)))
    outcome = publish(PublishRequest(str(folder / "published"), folder / "store.db",
                                     trusted_keys=(signer.verifier(),)))
    assert outcome.published, outcome.refusal or outcome.report
    return signer.verifier().format()


def measure(kind: str, location: Path, key: str) -> dict[str, float]:
    """One audit in a child interpreter: rows, clean, seconds, peak_kb."""
    done = subprocess.run([sys.executable, "-c", _CHILD, kind, str(location), key, ORIGIN],
                          capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--keep", type=Path, help="build in (and keep) this folder")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-audit-tiles-"))
    folder.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    key = build(folder, args.count)
    print(f"built and published {args.count:,} rows in {time.perf_counter() - began:.1f} s ({folder})")
    database = measure("db", folder / "store.db", key)
    tiles = measure("tiles", folder / "published", key)
    assert database["clean"]
    assert tiles["clean"]
    assert database["rows"] == tiles["rows"] == args.count
    ratio = tiles["seconds"] / database["seconds"]
    verdict = "ok" if ratio <= GOAL_RATIO else "MISSED"
    print(f"audit --db     {database['seconds']:7.2f} s  {args.count / database['seconds']:9,.0f} rows/s  "
          f"peak RSS {database['peak_kb'] / 1024:6.1f} MB")
    print(f"audit --tiles  {tiles['seconds']:7.2f} s  {args.count / tiles['seconds']:9,.0f} rows/s  "
          f"peak RSS {tiles['peak_kb'] / 1024:6.1f} MB")
    print(f"ratio tiles/db {ratio:.2f}x ({verdict}: goal <= {GOAL_RATIO}x)")


if __name__ == "__main__":
    main()
