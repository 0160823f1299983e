"""Benchmark: the replay auditor against the bare SQLite scan floor (issue 4).

In one run, on this machine, over the same store of N rows:

1. the project: `audit(path)` with jobs=1 (re-derive every decision, re-link the chain, check seq);
2. the floor: a raw stdlib `sqlite3` scan of the same rows in the same order (every column, ``ORDER BY seq``)
   doing one `json.loads` of ``gate_input`` and one `hashlib.sha256` per row (chained: the previous digest
   and the row's ``gate_input``);
3. the project with ``jobs=2``: the speed-up over jobs=1;
4. the audit's peak memory (VmHWM, read inside a child process that runs only the audit) at N rows and at
   10,000 rows;
5. the nightly cost of the look-back (spec 9.9.7): `audit(since=..., look_back=7)` over the last
   ``--nightly-new`` rows (default 10,000) against the same `--since` audit without it and against the full
   audit (jobs=1 each). ``--nightly-only`` measures only this (and the full audit it compares with).

Run: ``python benchmarks/bench_audit.py`` (builds a 1,000,000-row store with `record_many` first: several
minutes), ``--count 10000`` for a smoke run, ``--db PATH`` to reuse (or build and keep) a store, e.g. one kept
by ``bench_record.py --keep``; ``--profile`` profiles the jobs=1 audit under cProfile instead.
Goals: ratio >= 0.5, jobs=2 speed-up >= 1.6x, peak memory < 200 MB at 1,000,000 rows and <= 1.5x the
10,000-row figure; the look-back costs about 1/N of a full audit on top of the `--since` audit.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench_record import build_store, db_bytes, print_profile

from compute_budget import BudgetStore
from compute_budget.auditor.scan import audit
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.head import ChainHead

TABLE = "compute_budget_decisions"
COLUMNS = (
    "seq, budget_id, policy_version, gate_decision_id, gate_policy_version, gate_input_digest, status, "
    "reason_code, max_candidates, max_depth, max_steps, max_wallclock_ms, max_parallelism, evidence_spans, "
    "explanation, gate_input, recorded_at, chain_hash"
)
GOAL_RATIO = 0.5
GOAL_SPEEDUP = 1.6
GOAL_PEAK_MB = 200.0
GOAL_GROWTH = 1.5
SMALL = 10_000

# Runs in a fresh interpreter: the audit alone, then its own peak resident set (and its workers', if any).
_CHILD = """
import json, resource, sys, time
from compute_budget.auditor.scan import audit

def vmhwm_kb():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

before = vmhwm_kb()
began = time.perf_counter()
report = audit(sys.argv[1], jobs=sys.argv[2] if sys.argv[2] == "auto" else int(sys.argv[2]))
print(json.dumps({
    "rows": report.rows_checked,
    "jobs": report.jobs,
    "clean": report.clean,
    "seconds": time.perf_counter() - began,
    "startup_kb": before,
    "peak_kb": vmhwm_kb(),
    "workers_peak_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
}))
"""


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _warm(path: Path) -> None:
    """Read the database file once so that every measurement starts from the same warm page cache."""
    with open(path, "rb") as handle:
        while handle.read(1 << 24):
            pass


def floor_range(path: str, low: int, high: int) -> int:
    """The bare floor over low < seq <= high: every column in seq order, json.loads of gate_input and one
    chained SHA-256 (previous digest + gate_input) per row. Returns the rows scanned."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = 0
        digest = "0" * 64
        query = f"SELECT {COLUMNS} FROM {TABLE} WHERE seq > ? AND seq <= ? ORDER BY seq"
        for row in connection.execute(query, (low, high)):
            json.loads(row[15])
            digest = hashlib.sha256(f"{digest}{row[15]}".encode()).hexdigest()
            rows += 1
    finally:
        connection.close()
    return rows


def floor_scan(path: Path, rows: int, jobs: int = 1) -> tuple[int, float]:
    """Rows and seconds for the floor over the whole store, in one process or split across `jobs` processes
    by seq range (the second is the machine's own 2-process scaling, the reference for the audit's)."""
    began = time.perf_counter()
    if jobs == 1:
        scanned = floor_range(str(path), 0, rows)
    else:
        bounds = [rows * index // jobs for index in range(jobs + 1)]
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            scanned = sum(pool.map(floor_range, [str(path)] * jobs, bounds[:-1], bounds[1:]))
    return scanned, time.perf_counter() - began


def timed_audit(path: Path, jobs: int) -> tuple[int, float]:
    """Rows checked and seconds for one audit of `path`; a finding means the benchmark store is broken."""
    began = time.perf_counter()
    report = audit(path, jobs=jobs)
    seconds = time.perf_counter() - began
    if not report.clean:
        raise SystemExit(f"the benchmark store does not audit clean: {report.findings[:3]}")
    return report.rows_checked, seconds


def peak_memory(path: Path, jobs: int | str = 1) -> dict[str, float]:
    """Run the audit alone in a child interpreter; its peak RSS (VmHWM) and its workers', in KB."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(jobs)], check=True, capture_output=True, text=True
    )
    result: dict[str, float] = json.loads(done.stdout)
    return result


def profile(path: Path, rows: int, top: int) -> None:
    """Profile one jobs=1 audit of the store under cProfile: hot spots in microseconds per row."""
    profiler = cProfile.Profile()
    profiler.enable()
    report = audit(path)
    profiler.disable()
    if report.rows_checked != rows:
        raise SystemExit(f"audited {report.rows_checked} rows, expected {rows}")
    print_profile(profiler, rows, top)


def checkpoint_at(path: Path, size: int) -> Checkpoint:
    """The checkpoint of the store's first `size` rows (chain head and stored tree's root), as last night kept it."""
    with BudgetStore.open(path, readonly=True) as store, store.snapshot() as snapshot:
        link = snapshot.link_at(size)
        if link is None:
            raise SystemExit(f"the store has no row {size}")
        return Checkpoint.from_head(
            ChainHead(size, link[1], link[2]), origin=snapshot.origin(), root=snapshot.frontier(size).root()
        )


def nightly(path: Path, rows: int, new: int, look_back: int, repeat: int) -> dict[str, float]:
    """Best-of-`repeat` seconds of the --since audit of the last `new` rows, of the same with the look-back, and of
    the full audit (jobs=1 each), with the rows the look-back re-checked."""
    since = checkpoint_at(path, rows - new)
    best = {"since": float("inf"), "look_back": float("inf"), "full": float("inf"), "look_back_rows": 0.0}
    for round_number in range(1, repeat + 1):
        _say(f"nightly round {round_number}/{repeat}: --since of {new:,} new rows, with --look-back {look_back}, full")
        for name, options in (("since", {}), ("look_back", {"look_back": look_back}), ("full", None)):
            began = time.perf_counter()
            report = audit(path) if options is None else audit(path, since=since, **options)
            best[name] = min(best[name], time.perf_counter() - began)
            if not report.clean:
                raise SystemExit(f"the benchmark store does not audit clean: {report.findings[:3]}")
            if report.look_back is not None:
                best["look_back_rows"] = report.look_back.rows
    return best


def print_nightly(rows: int, new: int, look_back: int, best: dict[str, float]) -> None:
    """The look-back's nightly cost as ratios to the --since audit alone and to a full audit."""
    print(f"nightly  --since, {new:,} new rows   {best['since']:8.2f} s")
    print(
        f"nightly  + --look-back {look_back:<2}         {best['look_back']:8.2f} s  (re-checked "
        f"{best['look_back_rows']:,.0f} rows below the checkpoint, {best['look_back_rows'] / rows:.1%} of {rows:,})"
    )
    print(f"full     audit jobs=1             {best['full']:8.2f} s")
    print(
        f"ratio    nightly with look-back / --since alone {best['look_back'] / best['since']:6.2f}x; "
        f"/ full audit {best['look_back'] / best['full']:6.3f} (1/{look_back} = {1 / look_back:.3f}, plus the new rows)"
    )


def _count(path: Path) -> int:
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(connection.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0])
    finally:
        connection.close()


def _mb(kilobytes: float) -> float:
    return kilobytes / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=1_000_000, help="rows in the store (default 1,000,000)")
    parser.add_argument("--db", type=Path, default=None, help="use this store; built with --count rows if missing")
    parser.add_argument("--keep", action="store_true", help="keep the stores built in the temp folder")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the best of each is reported (default 3)")
    parser.add_argument("--profile", action="store_true", help="profile the jobs=1 audit under cProfile instead")
    parser.add_argument("--top", type=int, default=25, help="functions shown by --profile (default 25)")
    parser.add_argument("--nightly-new", type=int, default=10_000, help="new rows of the nightly audit (10,000)")
    parser.add_argument("--look-back", type=int, default=7, help="the nightly audit's --look-back N (default 7)")
    parser.add_argument("--nightly-only", action="store_true", help="measure only the nightly look-back's cost")
    args = parser.parse_args(argv)
    if args.count < 1 or args.repeat < 1 or args.look_back < 1:
        parser.error("--count, --repeat and --look-back must be positive")
    if not 0 < args.nightly_new < args.count:
        parser.error("--nightly-new must be between 1 and --count")

    folder = Path(tempfile.mkdtemp(prefix="bench_audit_"))
    try:
        path = args.db if args.db is not None else folder / "audit.db"
        if not path.exists():
            _say(f"building a store of {args.count:,} rows at {path} ...")
            build_store(path, args.count, say=_say)
        rows = _count(path)
        if args.profile:
            profile(path, rows, args.top)
            return 0
        if args.nightly_only:
            _warm(path)
            best = nightly(path, rows, args.nightly_new, args.look_back, args.repeat)
            print(f"bench_audit --nightly-only: {rows:,} rows, {os.cpu_count()} CPUs, best of {args.repeat} round(s)")
            print_nightly(rows, args.nightly_new, args.look_back, best)
            return 0
        small = folder / "small.db"
        _say(f"building a store of {SMALL:,} rows for the memory baseline ...")
        build_store(small, SMALL)
        _warm(path)

        timings: dict[str, list[float]] = {"audit1": [], "floor1": [], "audit2": [], "floor2": []}
        for round_number in range(1, args.repeat + 1):
            _say(f"round {round_number}/{args.repeat} over {rows:,} rows: audit jobs=1, floor, audit jobs=2, floor x2")
            for name, run in (
                ("audit1", lambda: timed_audit(path, 1)),
                ("floor1", lambda: floor_scan(path, rows)),
                ("audit2", lambda: timed_audit(path, 2)),
                ("floor2", lambda: floor_scan(path, rows, jobs=2)),
            ):
                done, seconds = run()
                if done != rows:
                    raise SystemExit(f"{name} went through {done:,} rows, the store holds {rows:,}")
                timings[name].append(seconds)
            _say("  " + "  ".join(f"{name} {rows / values[-1]:,.0f} rows/s" for name, values in timings.items()))
        project_seconds, floor_seconds, parallel_seconds, floor2_seconds = (min(v) for v in timings.values())
        _say("memory: the audit alone in a child process, at full size and at 10,000 rows ...")
        big = peak_memory(path)
        little = peak_memory(small)
        big_parallel = peak_memory(path, jobs=2)
        big_auto = peak_memory(path, jobs="auto")
        best_nightly = nightly(path, rows, args.nightly_new, args.look_back, args.repeat)

        project_rate = rows / project_seconds
        floor_rate = rows / floor_seconds
        parallel_rate = rows / parallel_seconds
        ratio = project_rate / floor_rate
        speedup = parallel_rate / project_rate
        floor_speedup = floor_seconds / floor2_seconds
        peak, peak_small = _mb(big["peak_kb"]), _mb(little["peak_kb"])
        growth = peak / peak_small

        def verdict(ok: bool) -> str:
            return "meets" if ok else "MISSES"

        size = db_bytes(path) / 2**20
        print(f"bench_audit: {rows:,} rows ({size:,.0f} MB), SQLite {sqlite3.sqlite_version}, ", end="")
        print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, best of {args.repeat} round(s)")
        print(f"project  audit jobs=1             {project_rate:12,.0f} rows/s  ({project_seconds:8.2f} s)")
        print(f"floor    sqlite3 scan+json+sha256 {floor_rate:12,.0f} rows/s  ({floor_seconds:8.2f} s)")
        print(
            f"ratio    project / floor          {ratio:12.3f}         "
            f"({verdict(ratio >= GOAL_RATIO)} the goal >= {GOAL_RATIO})"
        )
        print(f"project  audit jobs=2             {parallel_rate:12,.0f} rows/s  ({parallel_seconds:8.2f} s)")
        print(
            f"speed-up jobs=2 / jobs=1          {speedup:12.2f}x        ({verdict(speedup >= GOAL_SPEEDUP)} "
            f">= {GOAL_SPEEDUP}x)"
        )
        print(
            f"machine  floor in 2 processes     {rows / floor2_seconds:12,.0f} rows/s  ({floor2_seconds:8.2f} s): "
            f"the floor's own speed-up {floor_speedup:.2f}x"
        )
        print(
            f"memory   audit peak RSS at {rows:,} rows {peak:7.1f} MB  ({verdict(peak < GOAL_PEAK_MB)} "
            f"< {GOAL_PEAK_MB:.0f} MB; interpreter after imports {_mb(big['startup_kb']):.1f} MB)"
        )
        print(
            f"memory   audit peak RSS at {SMALL:,} rows {peak_small:7.1f} MB  -> growth {growth:.2f}x "
            f"({verdict(growth <= GOAL_GROWTH)} <= {GOAL_GROWTH}x)"
        )
        print(
            f"memory   jobs=2 at {rows:,} rows: parent {_mb(big_parallel['peak_kb']):.1f} MB, "
            f"largest worker {_mb(big_parallel['workers_peak_kb']):.1f} MB"
        )
        auto_peak = _mb(max(big_auto["peak_kb"], big_auto["workers_peak_kb"]))
        print(
            f"memory   jobs=auto (the CLI default) at {rows:,} rows: {big_auto['jobs']:.0f} job(s), "
            f"{rows / big_auto['seconds']:,.0f} rows/s, parent {_mb(big_auto['peak_kb']):.1f} MB, largest worker "
            f"{_mb(big_auto['workers_peak_kb']):.1f} MB ({verdict(auto_peak < GOAL_PEAK_MB)} "
            f"< {GOAL_PEAK_MB:.0f} MB)"
        )
        print_nightly(rows, args.nightly_new, args.look_back, best_nightly)
        if args.keep and args.db is None:
            print(f"kept     {path} and {small}")
    finally:
        if not (args.keep and args.db is None):
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
