"""Benchmark: recording decisions with `BudgetStore.record_many` against the bare SQLite floor (issue 3).

In one run, on this machine:

1. the project: `record_many` of N deterministic, varied gates (JSON text, as the CLI reads them; or Python
   mappings with ``--form mapping``) into a fresh store; and the same with per-gate results
   (``record_many(..., results=True)``) into another, so the cost of asking for them shows beside the bulk path;
2. the floor: the identical rows, read back from that store with ``SELECT *``, inserted with the stdlib
   `sqlite3` ``executemany`` in one transaction into a second fresh store created the same way (through
   `BudgetStore.open`, so it has the same schema, indexes and WAL mode), whose append-only guard triggers are
   then dropped: the guard's price counts against the project (issue 12). Only the inserts and the commit are
   timed, not the reads;
3. the latency of single `record()` calls, each its own transaction and commit (and, for scale, of single
   raw ``INSERT`` + ``COMMIT`` of the same rows);
4. the database file size per million rows.

Run: ``python benchmarks/bench_record.py`` (1,000,000 rows, several minutes), ``--count 10000`` for a smoke
run, ``--keep`` to keep the databases (e.g. for ``bench_audit.py --db``), ``--profile`` to profile the
project side under cProfile instead of benchmarking. Goal: project/floor ratio >= 0.5.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import pstats
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compute_budget.store import BudgetStore
from compute_budget.store.triggers import SQLITE_UNGUARD

TABLE = "compute_budget_decisions"
FLOOR_CHUNK = 50_000  # rows read per SELECT batch for the floor (reads are not timed)
GOAL_RATIO = 0.5

_KNOWN_REASONS = (
    "eligible_missing_role",
    "eligible_missing_relation",
    "eligible_missing_proposal",
    "eligible_target_unbound",
)
_OTHER_REASONS = {
    "ineligible": ("no_residual", "residual_resolved", "below_threshold"),
    "blocked": ("contract_violation", "upstream_timeout", "quota_exhausted"),
    "unassessable": ("parse_failed", "missing_context"),
}
_ORGANS = (None, "frame_builder", "binder", "proposal_organ", "coref_resolver")
_WORDS = (
    "the courier left before noon",
    "Zoë gave it to him",
    "after the meeting",
    "it",
    "naïve reading of the clause",
    "東京で会った",
    "the report was filed twice",
    "she signed the lease on Monday",
    "which of them",
)


def make_gate(index: int, seed: int = 20261202) -> dict[str, Any]:
    """Gate number `index`: deterministic for (index, seed), varied in status, reason, residuals and spans.

    About 62% eligible with a reason the v1 policy knows (allowed), 8% eligible with an unknown reason
    (unassessable), 22% ineligible, blocked or unassessable upstream (blocked), and 8% malformed in one of
    several ways (unassessable, fail-closed). Every gate has its own decision_id, so its own budget_id.
    """
    rng = random.Random(index * 1_000_003 + seed)
    roll = rng.random()
    if roll < 0.62:
        status, reason = "eligible", rng.choice(_KNOWN_REASONS)
    elif roll < 0.70:
        status, reason = "eligible", f"eligible_unknown_{rng.randrange(20)}"
    else:
        status = rng.choice(("ineligible", "ineligible", "blocked", "unassessable"))
        reason = rng.choice(_OTHER_REASONS[status])
    spans = []
    offset = 0
    for _ in range(rng.choice((0, 1, 1, 1, 2, 2, 3))):
        text = rng.choice(_WORDS)
        start = offset + rng.randrange(0, 5)
        spans.append({"text": text, "start": start, "end": start + len(text), "sentence_index": rng.randrange(4)})
        offset = start + len(text)
    return {
        "decision_id": f"gate-{index:09d}",
        "policy_version": "search_gate.v1",
        "input_digest": "sha256:" + hashlib.md5(f"{seed}:{index}".encode()).hexdigest(),
        "status": status,
        "reason_code": reason,
        "residual_ids": [f"residual-{rng.randrange(100_000)}" for _ in range(rng.choice((0, 1, 1, 2, 3)))],
        "candidate_organ": rng.choice(_ORGANS),
        "evidence_spans": spans,
    }


def gate_text(index: int, seed: int = 20261202) -> str:
    """Gate `index` as one line of JSON text; about 8% are malformed (the policy decides them fail-closed).

    A third each is written compact, spaced, and with Python's default ASCII escapes (``\\u00eb``), as JSON
    Lines from different producers would be.
    """
    gate = make_gate(index, seed)
    kind = index % 100
    if kind == 7:
        gate["status"] = "ELIGIBLE"  # not a known status
    elif kind == 23 and gate["evidence_spans"]:
        span = gate["evidence_spans"][0]
        span["start"], span["end"] = span["end"], span["start"]  # end before start
    elif kind == 41:
        gate["residual_ids"] = "residual-1"  # not an array
    elif kind == 59:
        gate["confidence"] = 0.9  # an unexpected key
    elif kind in (71, 89, 97):
        gate["candidate_organ"] = 17  # not a string
    elif kind in (13, 31):
        text = json.dumps(gate, ensure_ascii=False)
        return text[:-1] + ', "status": "blocked"}'  # a duplicate key (rule 3.1.7)
    if index % 3 == 0:  # compact, UTF-8 text as is
        return json.dumps(gate, ensure_ascii=False, separators=(",", ":"))
    if index % 3 == 1:  # spaced, UTF-8 text as is
        return json.dumps(gate, ensure_ascii=False)
    return json.dumps(gate)  # Python's default: non-ASCII text as \u escapes


def gates(start: int, count: int, form: str = "text") -> list[Any]:
    """`count` gates from number `start`, as JSON text or as Python mappings (`form`)."""
    if form == "mapping":
        return [json.loads(gate_text(index)) for index in range(start, start + count)]
    return [gate_text(index) for index in range(start, start + count)]


def build_store(path: Path, count: int, *, batch: int = 100_000, say: Callable[[str], None] | None = None) -> None:
    """Record `count` gates into the store at `path` with `record_many`, in batches of `batch`."""
    with BudgetStore.open(path) as store:
        for start in range(0, count, batch):
            result = store.record_many(gates(start, min(batch, count - start)))
            if say is not None:
                say(f"  built {result.head.seq:,} rows")


def db_bytes(path: Path) -> int:
    """The store's size on disk: the database file plus any WAL left beside it."""
    wal = Path(f"{path}-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _new_store(path: Path) -> None:
    """A fresh, empty store at the schema head, created the way the project creates one."""
    with BudgetStore.open(path):
        pass


def _new_unguarded_store(path: Path) -> None:
    """A fresh store like `_new_store`, then without the guard's triggers on the decisions table: the floor
    pays for the same table and indexes, not for the guard."""
    _new_store(path)
    raw = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in SQLITE_UNGUARD:
            raw.execute(statement)
        left = raw.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?", (TABLE,)
        ).fetchall()
    finally:
        raw.close()
    if left:
        raise SystemExit(f"the floor store still has triggers on {TABLE}: {left}")


def _floor_insert(source: Path, target: Path) -> tuple[int, float]:
    """Copy every row of `source` into `target` with stdlib executemany, one transaction; time inserts only."""
    reader = sqlite3.connect(source)
    writer = sqlite3.connect(target, isolation_level=None)
    try:
        cursor = reader.execute(f"SELECT * FROM {TABLE} ORDER BY seq")
        columns = [item[0] for item in cursor.description]
        insert = f"INSERT INTO {TABLE} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
        rows = 0
        elapsed = 0.0
        started = time.perf_counter()
        writer.execute("BEGIN IMMEDIATE")
        elapsed += time.perf_counter() - started
        while batch := cursor.fetchmany(FLOOR_CHUNK):
            started = time.perf_counter()
            writer.executemany(insert, batch)
            elapsed += time.perf_counter() - started
            rows += len(batch)
        started = time.perf_counter()
        writer.execute("COMMIT")
        elapsed += time.perf_counter() - started
    finally:
        reader.close()
        writer.close()
    return rows, elapsed


def _single_record_latency(path: Path, start: int, calls: int, form: str) -> list[float]:
    """Seconds per `record()` call, each one transaction with its own commit, on the store at `path`."""
    batch = gates(start, calls, form)
    latencies = []
    with BudgetStore.open(path) as store:
        for gate in batch:
            began = time.perf_counter()
            result = store.record(gate)
            latencies.append(time.perf_counter() - began)
            if not result.new:
                raise SystemExit(f"record() found {result.decision.budget_id} already stored: the gates are not new")
    return latencies


def _single_insert_latency(source: Path, target: Path, first_seq: int) -> list[float]:
    """Seconds per raw INSERT + COMMIT of the rows with seq >= first_seq of `source`, appended to `target`."""
    reader = sqlite3.connect(source)
    writer = sqlite3.connect(target, isolation_level=None)
    latencies = []
    try:
        cursor = reader.execute(f"SELECT * FROM {TABLE} WHERE seq >= ? ORDER BY seq", (first_seq,))
        columns = [item[0] for item in cursor.description]
        insert = f"INSERT INTO {TABLE} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
        for row in cursor.fetchall():
            began = time.perf_counter()
            writer.execute("BEGIN IMMEDIATE")
            writer.execute(insert, row)
            writer.execute("COMMIT")
            latencies.append(time.perf_counter() - began)
    finally:
        reader.close()
        writer.close()
    return latencies


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _latency_line(name: str, latencies: list[float]) -> str:
    ms = [value * 1000 for value in latencies]
    return (
        f"{name:<34} median {statistics.median(ms):7.3f} ms   p99 {_percentile(ms, 0.99):7.3f} ms   "
        f"max {max(ms):7.3f} ms   ({len(ms):,} calls)"
    )


def profile(count: int, form: str, top: int) -> None:
    """Profile `record_many` of `count` gates under cProfile: the hot spots in microseconds per row.

    Every thread is profiled on its own (`record_many` may decide gates in a helper thread while the calling
    thread inserts), and each thread's profile is printed separately.
    """
    folder = Path(tempfile.mkdtemp(prefix="bench_record_profile_"))
    helpers: list[cProfile.Profile] = []

    def profile_new_thread(*_: object) -> None:
        helper = cProfile.Profile()
        helpers.append(helper)
        helper.enable()  # replaces this hook with the profiler, for this thread only

    try:
        batch = gates(0, count, form)
        with BudgetStore.open(folder / "profile.db") as store:
            profiler = cProfile.Profile()
            threading.setprofile(profile_new_thread)
            profiler.enable()
            try:
                store.record_many(batch)
            finally:
                profiler.disable()
                threading.setprofile(None)  # type: ignore[arg-type]
        print("== the calling thread ==")
        print_profile(profiler, count, top)
        for number, helper in enumerate(helpers, start=1):
            print(f"\n== helper thread {number} ==")
            print_profile(helper, count, top)
    finally:
        shutil.rmtree(folder)


def print_profile(profiler: cProfile.Profile, rows: int, top: int) -> None:
    """The `top` functions by own time, then by cumulative time, as microseconds per row."""
    stats = pstats.Stats(profiler)
    entries: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in entries.values())
    print(f"profiled {rows:,} rows: {total:.2f} s of own time in all, {total / rows * 1e6:.1f} us/row")
    for title, key in (("own time", 2), ("cumulative time", 3)):
        print(f"\ntop {top} by {title} (us/row own, us/row cumulative, calls/row, function)")
        ranked = sorted(entries.items(), key=lambda item: item[1][key], reverse=True)[:top]
        for (filename, line, function), (_, calls, own, cumulative, _) in ranked:
            where = f"{Path(filename).name}:{line}" if line else filename
            print(
                f"  {own / rows * 1e6:9.2f} {cumulative / rows * 1e6:9.2f} {calls / rows:7.2f}  {function}  ({where})"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=1_000_000, help="rows to record (default 1,000,000)")
    parser.add_argument("--calls", type=int, default=2_000, help="single record() calls to time (default 2,000)")
    parser.add_argument("--form", choices=("text", "mapping"), default="text", help="gates as JSON text or mappings")
    parser.add_argument("--repeat", type=int, default=2, help="rounds; the best of each is reported (default 2)")
    parser.add_argument("--no-results", action="store_true", help="skip the record_many(results=True) rounds")
    parser.add_argument("--keep", action="store_true", help="keep the databases (their paths are printed)")
    parser.add_argument("--dir", type=Path, default=None, help="folder for the databases (default: a temp folder)")
    parser.add_argument("--profile", action="store_true", help="profile record_many under cProfile instead")
    parser.add_argument("--top", type=int, default=25, help="functions shown by --profile (default 25)")
    args = parser.parse_args(argv)
    if args.count < 1 or args.calls < 1 or args.repeat < 1:
        parser.error("--count, --calls and --repeat must be positive")
    if args.profile:
        profile(args.count, args.form, args.top)
        return 0

    folder = Path(tempfile.mkdtemp(prefix="bench_record_", dir=args.dir))
    try:
        _say(f"generating {args.count:,} gates ({args.form}) ...")
        batch = gates(0, args.count, args.form)
        timings: dict[str, list[float]] = {"project": [], "results": [], "floor": []}
        for round_number in range(1, args.repeat + 1):
            project_db, floor_db = folder / f"project{round_number}.db", folder / f"floor{round_number}.db"
            _say(
                f"round {round_number}/{args.repeat}: project record_many, with per-gate results, then floor "
                "executemany of the same rows"
            )
            with BudgetStore.open(project_db) as store:
                began = time.perf_counter()
                result = store.record_many(batch)
                timings["project"].append(time.perf_counter() - began)
            if result.new != args.count or result.present or result.results:
                raise SystemExit(f"expected {args.count} new rows, got {result.new} new and {result.present} present")
            if not args.no_results:
                with BudgetStore.open(folder / f"results{round_number}.db") as store:
                    began = time.perf_counter()
                    with_results = store.record_many(batch, results=True)
                    timings["results"].append(time.perf_counter() - began)
                if len(with_results.results) != args.count:
                    raise SystemExit(f"expected {args.count} per-gate results, got {len(with_results.results)}")
                del with_results
            _new_unguarded_store(floor_db)
            floor_rows, floor_seconds = _floor_insert(project_db, floor_db)
            if floor_rows != args.count:
                raise SystemExit(f"the floor copied {floor_rows} rows, expected {args.count}")
            timings["floor"].append(floor_seconds)
            _say(
                "  "
                + "  ".join(
                    f"{name} {args.count / values[-1]:,.0f} rows/s" for name, values in timings.items() if values
                )
            )
            if round_number < args.repeat:
                for stale in folder.iterdir():
                    stale.unlink()
        del batch
        project_seconds, floor_seconds = min(timings["project"]), min(timings["floor"])
        project_size, floor_size = db_bytes(project_db), db_bytes(floor_db)

        _say(f"latency: {args.calls:,} single record() calls, then as many raw INSERT + COMMIT ...")
        record_latency = _single_record_latency(project_db, args.count, args.calls, args.form)
        insert_latency = _single_insert_latency(project_db, floor_db, args.count + 1)

        project_rate = args.count / project_seconds
        floor_rate = args.count / floor_seconds
        ratio = project_rate / floor_rate
        mb_per_million = project_size / args.count * 1e6 / 2**20
        print(f"bench_record: {args.count:,} varied gates ({args.form}), SQLite {sqlite3.sqlite_version}, ", end="")
        print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, best of {args.repeat} round(s)")
        print(f"project  record_many            {project_rate:12,.0f} rows/s  ({project_seconds:8.2f} s)")
        if timings["results"]:
            results_seconds = min(timings["results"])
            results_rate = args.count / results_seconds
            print(
                f"results  record_many(results=True){results_rate:12,.0f} rows/s  ({results_seconds:8.2f} s; "
                f"{project_seconds / results_seconds:.3f} of the bulk path)"
            )
        print(f"floor    executemany, no guard  {floor_rate:12,.0f} rows/s  ({floor_seconds:8.2f} s)")
        verdict = "meets" if ratio >= GOAL_RATIO else "MISSES"
        print(f"ratio    project / floor        {ratio:12.3f}         ({verdict} the goal >= {GOAL_RATIO})")
        print(_latency_line("latency  record() + commit", record_latency))
        print(_latency_line("latency  raw INSERT + COMMIT", insert_latency))
        print(
            f"size     {project_size / 2**20:,.1f} MB for {args.count:,} rows = {mb_per_million:,.1f} MB per million "
            f"rows (floor copy: {floor_size / 2**20:,.1f} MB)"
        )
        if args.keep:
            print(f"kept     {project_db} and {floor_db}")
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
