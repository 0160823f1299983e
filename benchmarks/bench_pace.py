"""Benchmark: the practice loop's pace, one `store.record(gate)` at a time, against its bare floor (issue 23).

In one run, SQLite, a store of a few hundred rows, after a warm-up:

- **project**: `store.record(gate)` of N gates, one call each (unsigned; then signed, with the writer state file in
  the same folder), p50 and p99;
- **floor**: the same stored rows written the bare way through stdlib `sqlite3`, one transaction each:
  ``BEGIN IMMEDIATE``, read the head, ``INSERT`` the row into the same table with the same triggers (a store made
  by this release, so the guard is there), ``COMMIT``; same folder, the writer's own PRAGMAs (WAL, in-memory
  temporary store, the writer's cache size).

Prints both, and the ratios of the medians and of the p99s. Goals (on the medians): one `record()` within 6x of
the floor, a signed one within 10x. With ``--pg URL`` the same, unsigned and signed, against a PostgreSQL database
(its floor: the same one-row transaction through psycopg; this release's tables there are dropped).

Part 2: the command line's start. `compute-budget --version`, `--help` and `decide` of one gate, each run as a
fresh process `--starts` times, against a bare interpreter (`python -c pass`): medians and ratios. Goal: within
8x of the bare interpreter. Both run as installed programs do, with their bytecode cached (in a temporary
PYTHONPYCACHEPREFIX, filled by one untimed run of each): without a cache, as under PYTHONDONTWRITEBYTECODE in
a source checkout, every start compiles the project's modules again.

Run: ``python benchmarks/bench_pace.py`` (500 records each way), ``--count 100`` for a smoke run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from compute_budget import BudgetStore
from compute_budget.core.log.note import SignerKey
from compute_budget.core.row import ROW_COLUMNS
from compute_budget.store.engine import WRITER_CACHE_KIB

GOAL_UNSIGNED = 6.0
GOAL_SIGNED = 10.0
WARM_UP = 100


def gate(index: int) -> dict[str, Any]:
    """A well-formed, eligible search gate (its `decision_id` unique)."""
    return {
        "decision_id": f"pace-{index:08d}",
        "status": "eligible",
        "policy_version": "search_gate.v1",
        "reason_code": "eligible_missing_role",
        "evidence_spans": [{"text": "a sentence", "start": 0, "end": 10, "sentence_index": 0}],
    }


def signing_options(folder: Path, name: str, *, signed: bool) -> dict[str, Any]:
    """`BudgetStore.open` options of a signed run (a key, its writer state file in `folder`), or none."""
    if not signed:
        return {}
    return {"signing_key": SignerKey.from_seed("pace", bytes(32)), "writer_state": str(folder / f"{name}.state")}


def run_project(folder: Path, count: int, *, signed: bool) -> tuple[list[float], list[tuple[Any, ...]]]:
    """Seconds per `record()` after a warm-up, and the rows it stored (for the floor to write again)."""
    name = "signed" if signed else "unsigned"
    return timed_records(str(folder / f"{name}.db"), count, signing_options(folder, name, signed=signed))


def timed_records(target: str, count: int, options: dict[str, Any]) -> tuple[list[float], list[tuple[Any, ...]]]:
    """Seconds of each single `record()` into the store at `target` after `WARM_UP` ones, and its stored rows."""
    times = []
    with BudgetStore.open(target, **options) as store:
        for index in range(WARM_UP + count):
            began = time.perf_counter()
            store.record(gate(index))
            if index >= WARM_UP:
                times.append(time.perf_counter() - began)
        rows = list(store.iter_raw_rows())
    return times, rows


def run_floor(folder: Path, rows: list[tuple[Any, ...]]) -> list[float]:
    """Seconds per bare one-row transaction writing `rows` (after the warm-up rows) into a fresh store's table."""
    path = folder / "floor.db"
    with BudgetStore.open(str(path)):
        pass  # the schema and the guard, as this release creates them
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA temp_store = MEMORY")
    connection.execute(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}")
    insert = (f"INSERT INTO compute_budget_decisions ({', '.join(ROW_COLUMNS)}) "
              f"VALUES ({', '.join('?' for _ in ROW_COLUMNS)})")
    head = "SELECT seq, chain_hash, budget_id FROM compute_budget_decisions ORDER BY seq DESC LIMIT 1"
    times = []
    for index, row in enumerate(rows):
        began = time.perf_counter()
        connection.execute("BEGIN IMMEDIATE")
        connection.execute(head).fetchone()
        connection.execute(insert, row)
        connection.execute("COMMIT")
        if index >= WARM_UP:
            times.append(time.perf_counter() - began)
    connection.close()
    return times


def start_times(argv: list[str], stdin: bytes, starts: int, env: dict[str, str]) -> list[float]:
    """Seconds for each of `starts` fresh processes of `argv` to run to their exit (after one untimed run, which
    fills the bytecode cache)."""
    times = []
    for number in range(starts + 1):
        began = time.perf_counter()
        subprocess.run(argv, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
        if number:
            times.append(time.perf_counter() - began)
    return times


def installed_env(cache: Path) -> dict[str, str]:
    """The environment of an installed program: bytecode cached, as `pip install` leaves a package. The cache is
    kept under `cache` (PYTHONPYCACHEPREFIX), for the bare interpreter and the project alike, so the run writes
    nothing into the source tree, and a PYTHONDONTWRITEBYTECODE of the caller (which would make every start compile
    every module of the project again) does not apply."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


GOAL_START = 8.0


def run_project_pg(url: str, count: int, folder: Path, *, signed: bool) -> tuple[list[float], list[tuple[Any, ...]]]:
    """`record()` one gate at a time into the PostgreSQL database at `url` (emptied of this release's tables
    first), and the rows stored; signed with the writer state file in `folder`."""
    _drop_tables(url)
    return timed_records(url, count, signing_options(folder, "pg-signed", signed=signed))


def run_floor_pg(url: str, rows: list[tuple[Any, ...]]) -> list[float]:
    """The same rows through psycopg, one transaction each (the append lock, the head, the INSERT, COMMIT), into
    the same table with the same triggers (a fresh store of this release)."""
    import psycopg
    from sqlalchemy.engine import make_url

    from compute_budget.store.backends.postgresql import APPEND_LOCK_KEY

    _drop_tables(url)
    with BudgetStore.open(url):
        pass  # the schema and the guard, as this release creates them
    parts = make_url(url)
    dsn = f"host={parts.host} port={parts.port} user={parts.username} password={parts.password} dbname={parts.database}"
    insert = (f"INSERT INTO compute_budget_decisions ({', '.join(ROW_COLUMNS)}) "
              f"VALUES ({', '.join('%s' for _ in ROW_COLUMNS)})")
    head = "SELECT seq, chain_hash, budget_id FROM compute_budget_decisions ORDER BY seq DESC LIMIT 1"
    times = []
    with psycopg.connect(dsn) as connection:
        for index, row in enumerate(rows):
            began = time.perf_counter()
            with connection.transaction():
                connection.execute(f"SELECT pg_advisory_xact_lock({APPEND_LOCK_KEY})")
                connection.execute(head).fetchone()
                connection.execute(insert, row)
            if index >= WARM_UP:
                times.append(time.perf_counter() - began)
    _drop_tables(url)
    return times


def _drop_tables(url: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.begin() as connection:
        for table in ("compute_budget_cosignatures", "compute_budget_witness_sizes", "compute_budget_provenance",
                      "compute_budget_checkpoints", "compute_budget_tree_nodes", "compute_budget_origin",
                      "compute_budget_decisions", "alembic_version"):
            connection.execute(text(f"DROP TABLE IF EXISTS {table} CASCADE"))
    engine.dispose()


def print_appends(floor_label: str, floor: list[float], unsigned: list[float], signed: list[float], *,
                  goals: bool) -> None:
    """Median and p99 of the floor and of both kinds of `record()`, each as a ratio to the floor's."""
    floor_median, floor_p99 = summary(floor)
    print(f"{'':28} {'median ms':>10} {'p99 ms':>10} {'x median':>9} {'x p99':>7}")
    print(f"{floor_label:28} {floor_median:10.3f} {floor_p99:10.3f}")
    for label, times, goal in (("record(), unsigned", unsigned, GOAL_UNSIGNED),
                               ("record(), signed", signed, GOAL_SIGNED)):
        median, p99 = summary(times)
        ratio = median / floor_median
        verdict = f"  goal <= {goal:.0f}x: {'met' if ratio <= goal else 'NOT met'}" if goals else ""
        print(f"{label:28} {median:10.3f} {p99:10.3f} {ratio:9.1f} {p99 / floor_p99:7.1f}{verdict}")


def summary(times: list[float]) -> tuple[float, float]:
    """(median, p99) in milliseconds."""
    ordered = sorted(times)
    return statistics.median(ordered) * 1000, ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=500, help="records measured each way (default 500)")
    parser.add_argument("--starts", type=int, default=30, help="process starts per command (default 30)")
    parser.add_argument("--pg", metavar="URL", help="also measure a PostgreSQL database (its tables are dropped!)")
    arguments = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-pace-"))
    try:
        unsigned, rows = run_project(folder, arguments.count, signed=False)
        signed, _ = run_project(folder, arguments.count, signed=True)
        floor = run_floor(folder, rows)
        print(f"SQLite, {arguments.count} single appends each, after {WARM_UP} to warm up")
        print_appends("floor (stdlib sqlite3)", floor, unsigned, signed, goals=True)
        if arguments.pg:
            pg_unsigned, pg_rows = run_project_pg(arguments.pg, arguments.count, folder, signed=False)
            pg_signed, _ = run_project_pg(arguments.pg, arguments.count, folder, signed=True)
            pg_floor = run_floor_pg(arguments.pg, pg_rows)
            print(f"\nPostgreSQL, {arguments.count} single appends each, after {WARM_UP} to warm up")
            print_appends("floor (psycopg)", pg_floor, pg_unsigned, pg_signed, goals=False)
    finally:
        shutil.rmtree(folder)  # the folder this run made, nothing else
    one_gate = b'{"decision_id": "a", "status": "eligible"}\n'
    cache = Path(tempfile.mkdtemp(prefix="bench-pace-pycache-"))
    try:
        env = installed_env(cache)
        bare = statistics.median(start_times([sys.executable, "-c", "pass"], b"", arguments.starts, env)) * 1000
        print(f"\ncommand line start, {arguments.starts} fresh processes each (medians; bytecode cached for both)")
        print(f"{'python -c pass':28} {bare:10.1f} ms")
        for label, extra, stdin in (("compute-budget --version", ["--version"], b""),
                                    ("compute-budget --help", ["--help"], b""),
                                    ("compute-budget decide (1)", ["decide"], one_gate)):
            argv = [sys.executable, "-m", "compute_budget", *extra]
            median = statistics.median(start_times(argv, stdin, arguments.starts, env)) * 1000
            ratio = median / bare
            print(f"{label:28} {median:10.1f} ms {ratio:6.1f}x  goal <= {GOAL_START:.0f}x: "
                  f"{'met' if ratio <= GOAL_START else 'NOT met'}")
    finally:
        shutil.rmtree(cache)  # the cache folder this run made, nothing else


if __name__ == "__main__":
    main()
