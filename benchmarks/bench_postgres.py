"""Benchmark: the store on PostgreSQL beside the same store on SQLite, in one run (issue 5).

On this machine, in one run, against a throwaway PostgreSQL cluster started for the run (`tests/pg_cluster.py`)
and a temporary SQLite file:

1. `record_many` of N distinct gates (JSON lines, generated lazily) into a fresh store, one process: rows/s;
2. `audit` of both stores with jobs=1 and jobs=2: rows/s (and both must come out clean);
3. the on-disk size of both stores;
4. the audit's footprint as the table grows: the peak memory of a nightly `compute-budget audit` process (its
   workers included) and, on PostgreSQL, the temporary file bytes the server wrote for it (`pg_stat_database`),
   at a tenth of N rows and at N rows. Both must stay flat: the audit reads each range in index order, one
   chunk at a time, so neither grows with the table;
5. concurrent writer processes (1, 2, 4, 8), each opening its own `BudgetStore` and appending its own distinct
   gates with `record_many` in batches (default 500), and the same with single `record()` calls: total rows/s,
   per-call latency, and on PostgreSQL how many writers were seen waiting on a lock. After every sweep point the
   store must hold seq 1..M with no gap and no duplicate, and `audit` must be clean.

Run from the repository root:

    python benchmarks/bench_postgres.py                  # 1,000,000 rows; writer sweep of 200,000 rows per point
    python benchmarks/bench_postgres.py --count 10000    # smoke run (the sweep shrinks with it)
    python benchmarks/bench_postgres.py --pg-url postgresql+psycopg://user:pw@host:5432/postgres   # a real server

The seal is part of every figure: every store builds its Merkle tree, and (unless ``--unsigned``) signs a
checkpoint of its head in every append transaction with a writer key made for the run, so a single `record()`
signs one per call; every audit trusts that key and must find every row attested.

The throwaway cluster is created with fsync=off, synchronous_commit=off and full_page_writes=off (test settings);
by default this script restarts it with the server defaults (all three on), so both backends make every commit
durable, as SQLite in WAL mode does by default. ``--pg-fast`` keeps the unsafe test settings.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # `tests.pg_cluster` and `tests.conftest` live in the repository root
    sys.path.insert(0, str(REPO_ROOT))

from sqlalchemy import create_engine  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from compute_budget.auditor.scan import audit  # noqa: E402
from compute_budget.core.log.note import VerifierKey, generate_signer  # noqa: E402
from compute_budget.keys.key_files import write_new_signer_key  # noqa: E402
from compute_budget.store import BudgetStore  # noqa: E402

TRUSTED: list[VerifierKey] = []  # the run's writer key, when it signs (the default)

TABLE = "compute_budget_decisions"
WRITER_COUNTS = (1, 2, 4, 8)
BARRIER_TIMEOUT = 300.0

# The exact text `tests.conftest.gate_lines` produces (json.dumps of make_gate(...), ensure_ascii=False), built
# with one %-format per gate so a million gates stream without a million dicts; checked against gate_lines at start.
_REASONS = (
    "eligible_missing_role",
    "eligible_missing_relation",
    "eligible_missing_proposal",
    "eligible_target_unbound",
    "eligible_unknown",
)
_STATUSES = ("eligible", "eligible", "eligible", "ineligible", "blocked", "unassessable")
_TEMPLATE = (
    '{"decision_id": "%s-%07d", "policy_version": "search_gate.v1", '
    '"input_digest": "sha256:5d41402abc4b2a76b9719d911017c592", "status": "%s", "reason_code": "%s", '
    '"residual_ids": ["residual-17"], "candidate_organ": "frame_builder", '
    '"evidence_spans": [{"text": "span %d \u00e9", "start": %d, "end": %d, "sentence_index": %d}]}'
)


def gate_stream(count: int, prefix: str) -> Iterator[str]:
    """`count` distinct gate JSON lines, lazily: the same lines as `tests.conftest.gate_lines(count, prefix=...)`."""
    for index in range(count):
        yield _TEMPLATE % (
            prefix,
            index,
            _STATUSES[index % 6],
            _REASONS[index % 5],
            index,
            index,
            index + 7,
            index % 5,
        )


def code_version() -> str:
    """Which compute_budget is measured: its folder, and its git commit (flagging uncommitted changes)."""
    import subprocess

    import compute_budget

    where = Path(compute_budget.__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(where), "status", "--porcelain", "--", "."], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"compute_budget from {where} (not a git checkout)"
    return f"compute_budget from {where}, commit {commit}{' + uncommitted changes' if dirty else ''}"


def _check_generator() -> None:
    from tests.conftest import gate_lines

    for prefix in ("gate", "w8-3"):
        if list(gate_stream(60, prefix)) != gate_lines(60, prefix=prefix):
            raise SystemExit("gate_stream no longer matches tests.conftest.gate_lines: update _TEMPLATE")


# -- output --------------------------------------------------------------------------------------------------

_T0 = time.perf_counter()


def say(message: str) -> None:
    """Progress on stderr, with the seconds since start."""
    print(f"[{time.perf_counter() - _T0:8.1f}s] {message}", file=sys.stderr, flush=True)


def rate(rows: int, seconds: float) -> str:
    return f"{rows / seconds:,.0f}" if seconds > 0 else "-"


# -- backends ------------------------------------------------------------------------------------------------


class Postgres:
    """A PostgreSQL server: its admin URL, and fresh databases on it (dropped when done)."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self._admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
        self._made: list[str] = []

    def run(self, sql: str) -> Any:
        with self._admin.connect() as connection:
            result = connection.exec_driver_sql(sql)
            return result.all() if result.returns_rows else None

    def settings(self) -> str:
        rows = self.run(
            "SELECT name, setting FROM pg_settings WHERE name IN "
            "('fsync', 'synchronous_commit', 'full_page_writes', 'shared_buffers', 'server_version') ORDER BY name"
        )
        return ", ".join(f"{name}={value}" for name, value in rows)

    def new_database(self, label: str) -> str:
        name = f"cb_bench_{label}_{uuid.uuid4().hex[:8]}"
        self.run(f'CREATE DATABASE "{name}"')
        self._made.append(name)
        return make_url(self.admin_url).set(database=name).render_as_string(hide_password=False)

    def drop(self, url: str) -> None:
        name = make_url(url).database
        self.run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if name in self._made:
            self._made.remove(name)

    def size_bytes(self, url: str) -> int:
        engine = create_engine(url)
        try:
            with engine.connect() as connection:
                return int(connection.exec_driver_sql(f"SELECT pg_total_relation_size('{TABLE}')").scalar_one())
        finally:
            engine.dispose()

    def close(self) -> None:
        for name in list(self._made):
            self.run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._admin.dispose()


def restart_durable(cluster: Path) -> None:
    """Restart the throwaway cluster without its fsync=off test options (command-line options beat ALTER SYSTEM)."""
    import subprocess

    from tests import pg_cluster

    pg_ctl = pg_cluster.find_bin("pg_ctl")
    assert pg_ctl is not None
    port = (cluster / "port").read_text().strip()
    options = f"-p {port} -k {cluster / 'sockets'} -c listen_addresses=127.0.0.1 -c max_connections=100"
    command = [pg_ctl, "-D", str(cluster / "data"), "-o", options, "-l", str(cluster / "server.log"), "-w", "restart"]
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True)


def sqlite_bytes(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def check_sequence(target: str, expected: int) -> str:
    """'ok' when the store holds exactly seq 1..expected (no gap, no duplicate); else what is wrong."""
    url = target if "://" in target else f"sqlite:///{target}"
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows, distinct, low, high = connection.exec_driver_sql(
                f"SELECT count(*), count(DISTINCT seq), min(seq), max(seq) FROM {TABLE}"
            ).one()
    finally:
        engine.dispose()
    if (rows, distinct, low, high) == (expected, expected, 1, expected):
        return "ok"
    return f"BAD: {rows} rows, {distinct} distinct seq, min {low}, max {high}, expected 1..{expected}"


# -- 1 and 2: one writer, then the auditor -------------------------------------------------------------------


@dataclass(frozen=True)
class Footprint:
    """One `compute-budget audit` process: its rows, peak memory and the server's temporary file bytes for it."""

    rows: int
    jobs: int
    peak_rss_bytes: int
    temp_bytes: int | None  # None on SQLite: no server


@dataclass
class Single:
    record_seconds: float = 0.0
    audit_seconds: dict[int, float] = field(default_factory=dict)
    size_bytes: int = 0
    footprints: list[Footprint] = field(default_factory=list)


def temp_bytes_written(pg: Postgres | None, target: str) -> int | None:
    """The server's running total of temporary file bytes for this database (None on SQLite)."""
    if pg is None:
        return None
    name = make_url(target).database
    rows = pg.run(f"SELECT temp_bytes FROM pg_stat_database WHERE datname = '{name}'")
    return int(rows[0][0])


# A child's peak RSS counts the memory of the process it was forked from (Linux carries the old address space's
# high-water mark across exec), and this script holds a million-row generator and two stores' worth of state by
# then. So audits are started by a launcher forked while this script is still small: it starts each command,
# waits for it with wait4 and prints the exit code and peak RSS (the largest of the command and its workers).
_LAUNCHER_CODE = """
import json, os, subprocess, sys
for line in sys.stdin:
    request = json.loads(line)
    with open(request["stderr"], "wb") as error_file:
        process = subprocess.Popen(request["command"], stdout=subprocess.DEVNULL, stderr=error_file)
        _, status, usage = os.wait4(process.pid, 0)
    print(json.dumps([os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024]), flush=True)
"""


class Launcher:
    """A small process that starts commands and reports each one's exit code and peak RSS."""

    def __init__(self) -> None:
        import subprocess

        self._process = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER_CODE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def run(self, command: list[str], stderr: Path) -> tuple[int, int]:
        import json

        assert self._process.stdin is not None
        assert self._process.stdout is not None
        self._process.stdin.write(json.dumps({"command": command, "stderr": str(stderr)}) + "\n")
        self._process.stdin.flush()
        returncode, peak = json.loads(self._process.stdout.readline())
        return int(returncode), int(peak)

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait()


LAUNCHER: list[Launcher] = []  # started first thing in main()


def audit_footprint(target: str, rows: int, jobs: int, label: str, pg: Postgres | None, scratch: Path) -> Footprint:
    """Run the nightly job's command in its own process: its peak RSS, and the server's temporary file bytes."""
    command = [sys.executable, "-m", "compute_budget", "audit", "--db", target, "--jobs", str(jobs), "--format", "json"]
    for number, key in enumerate(TRUSTED):
        key_file = scratch / f"trusted-{number}.pub"
        key_file.write_text(key.format() + "\n", encoding="utf-8")
        command += ["--trusted-key", str(key_file)]
    before = temp_bytes_written(pg, target)
    errors = scratch / "audit-stderr.txt"
    returncode, peak = LAUNCHER[0].run(command, errors)
    if returncode != 0:
        error = errors.read_text(errors="replace").strip()
        raise SystemExit(f"{label}: audit --jobs {jobs} at {rows:,} rows exited {returncode}: {error}")
    # A backend reports its temporary files when it ends; the audit's connections are closed by now, but the
    # statistics are flushed about once a second, so wait for them to settle.
    temp = None
    if pg is not None:
        time.sleep(1.5)
        after = temp_bytes_written(pg, target)
        assert before is not None
        assert after is not None
        temp = after - before
    footprint = Footprint(rows=rows, jobs=jobs, peak_rss_bytes=peak, temp_bytes=temp)
    shown = "" if temp is None else f", server temporary files {temp:,} bytes"
    say(f"{label}: audit --jobs {jobs} at {rows:,} rows: peak RSS {footprint.peak_rss_bytes / 2**20:.1f} MiB{shown}")
    return footprint


def record_and_audit(target: str, count: int, label: str, pg: Postgres | None, scratch: Path) -> Single:
    result = Single()
    with BudgetStore.open(target):  # creating the schema is not timed
        pass
    say(f"{label}: record_many of {count:,} gates (a tenth first, to measure the audit's footprint there)")
    tenth = max(1, count // 10)
    gates = gate_stream(count, "gate")
    new = 0
    with BudgetStore.open(target) as store:
        started = time.perf_counter()
        batch = store.record_many(itertools.islice(gates, tenth))
        result.record_seconds = time.perf_counter() - started
        new += batch.new
    for jobs in (1, 2):
        result.footprints.append(audit_footprint(target, tenth, jobs, label, pg, scratch))
    with BudgetStore.open(target) as store:
        started = time.perf_counter()
        batch = store.record_many(gates)
        result.record_seconds += time.perf_counter() - started
        new += batch.new
    if new != count or batch.head.seq != count:
        raise SystemExit(f"{label}: record_many stored {new} new rows, head {batch.head.seq}; expected {count}")
    say(f"{label}: recorded in {result.record_seconds:.1f} s ({rate(count, result.record_seconds)} rows/s)")
    for jobs in (1, 2):
        started = time.perf_counter()
        report = audit(target, jobs=jobs, trusted_keys=TRUSTED)
        wall = time.perf_counter() - started
        if not report.clean or report.rows_checked != count:
            raise SystemExit(f"{label}: audit jobs={jobs} not clean: {report.rows_checked} rows, {report.findings[:3]}")
        result.audit_seconds[jobs] = wall
        say(f"{label}: audit jobs={jobs} {wall:.1f} s ({rate(count, wall)} rows/s), clean")
    for jobs in (1, 2):
        result.footprints.append(audit_footprint(target, count, jobs, label, pg, scratch))
    return result


# -- 4: concurrent writer processes ---------------------------------------------------------------------------


def _writer(target: str, prefix: str, count: int, batch: int, mode: str, barrier: Any, results: Any) -> None:
    """One writer process: open its own store, wait for the others, append `count` gates, report timings."""
    try:
        with BudgetStore.open(target) as store:
            barrier.wait(BARRIER_TIMEOUT)
            latencies: list[float] = []
            gates = gate_stream(count, prefix)
            started = time.perf_counter()
            if mode == "batch":
                while chunk := list(itertools.islice(gates, batch)):
                    call = time.perf_counter()
                    store.record_many(chunk)
                    latencies.append(time.perf_counter() - call)
            else:
                for gate in gates:
                    call = time.perf_counter()
                    store.record(gate)
                    latencies.append(time.perf_counter() - call)
            finished = time.perf_counter()
        results.put((prefix, started, finished, latencies, None))
    except BaseException as error:  # reported to the parent, which fails the run
        results.put((prefix, 0.0, 0.0, [], f"{type(error).__name__}: {error}"))


class LockSampler(threading.Thread):
    """Samples pg_stat_activity: how many backends of one database wait on a lock (the advisory append lock)."""

    def __init__(self, admin_url: str, database: str) -> None:
        super().__init__(daemon=True)
        self._engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
        self._database = database
        self._halt = threading.Event()
        self.samples: list[int] = []
        self.waits: set[str] = set()

    def run(self) -> None:
        with self._engine.connect() as connection:
            while not self._halt.wait(0.1):
                rows = connection.exec_driver_sql(
                    "SELECT wait_event_type, wait_event FROM pg_stat_activity "
                    "WHERE datname = %s AND wait_event_type = 'Lock'",
                    (self._database,),
                ).all()
                self.samples.append(len(rows))
                self.waits.update(f"{kind}:{event}" for kind, event in rows)

    def finish(self) -> float:
        self._halt.set()
        self.join()
        self._engine.dispose()
        return statistics.fmean(self.samples) if self.samples else 0.0


@dataclass
class SweepPoint:
    backend: str
    mode: str
    writers: int
    rows: int
    seconds: float
    latencies: list[float]
    waiting: float | None
    sequence: str
    clean: bool


def sweep_point(
    backend: str, target: str, writers: int, rows: int, batch: int, mode: str, pg: Postgres | None
) -> SweepPoint:
    with BudgetStore.open(target):  # the schema exists before the writers start
        pass
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(writers + 1)
    results = context.Queue()
    shares = [rows // writers + (1 if index < rows % writers else 0) for index in range(writers)]
    processes = [
        context.Process(
            target=_writer, args=(target, f"w{writers}{mode[0]}-{index}", share, batch, mode, barrier, results)
        )
        for index, share in enumerate(shares)
    ]
    for process in processes:
        process.start()
    sampler = None
    if pg is not None:
        sampler = LockSampler(pg.admin_url, str(make_url(target).database))
    barrier.wait(BARRIER_TIMEOUT)
    started = time.perf_counter()
    if sampler is not None:
        sampler.start()
    reports = [results.get(timeout=3600) for _ in processes]
    seconds = time.perf_counter() - started
    waiting = sampler.finish() if sampler is not None else None
    for process in processes:
        process.join()
    errors = [f"{prefix}: {error}" for prefix, _, _, _, error in reports if error]
    if errors:
        raise SystemExit(f"{backend} {writers} writers ({mode}) failed: " + "; ".join(errors))
    latencies = [value for report in reports for value in report[3]]
    sequence = check_sequence(target, rows)
    report = audit(target, jobs=1, trusted_keys=TRUSTED)
    point = SweepPoint(
        backend,
        mode,
        writers,
        rows,
        seconds,
        latencies,
        waiting,
        sequence,
        clean=report.clean and report.rows_checked == rows,
    )
    if sampler is not None and sampler.waits:
        say(f"  {backend} lock waits seen: {', '.join(sorted(sampler.waits))}")
    say(
        f"{backend} {mode} x{writers}: {rows:,} rows in {seconds:.1f} s ({rate(rows, seconds)} rows/s), "
        f"seq {sequence}, audit {'clean' if point.clean else 'NOT CLEAN'}"
    )
    return point


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


# -- the run ---------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000, help="rows for record_many and audit (1,000,000)")
    parser.add_argument(
        "--writer-rows", type=int, default=None, help="rows per writer-sweep point (default: min(count, 200,000))"
    )
    parser.add_argument(
        "--single-rows", type=int, default=None, help="rows per record() sweep point (default: min(count, 8,000))"
    )
    parser.add_argument("--batch", type=int, default=500, help="gates per record_many call in the sweep (500)")
    parser.add_argument("--writers", default="1,2,4,8", help="writer process counts (1,2,4,8)")
    parser.add_argument("--no-single", action="store_true", help="skip the single record() sweep")
    parser.add_argument("--pg-url", default=None, help="admin URL of an existing server (default: a throwaway one)")
    parser.add_argument("--pg-fast", action="store_true", help="keep the throwaway cluster's fsync=off settings")
    parser.add_argument(
        "--unsigned", action="store_true", help="no writer key: appends build the tree but sign no checkpoint"
    )
    args = parser.parse_args(argv)
    count = args.count
    writer_rows = args.writer_rows if args.writer_rows is not None else min(count, 200_000)
    single_rows = args.single_rows if args.single_rows is not None else min(count, 8_000)
    writer_counts = [int(item) for item in args.writers.split(",")]

    LAUNCHER.append(Launcher())
    _check_generator()
    version = code_version()
    say(version)
    started = time.perf_counter()
    generated = sum(1 for _ in gate_stream(count, "gate"))
    generation = time.perf_counter() - started
    say(f"generating {generated:,} gate lines alone: {generation:.2f} s (included in record_many times)")

    scratch = Path(tempfile.mkdtemp(prefix="cb-bench-pg-"))
    if not args.unsigned:
        # Every store of the run signs a checkpoint per append transaction (the seal's whole cost), through the
        # environment so the spawned writers sign too; every audit must find every row attested by the key.
        signer = generate_signer("bench-writer")
        os.environ["COMPUTE_BUDGET_SIGNING_KEY"] = str(write_new_signer_key(scratch / "writer.key", signer))
        TRUSTED.append(signer.verifier())
        say("signing: every append transaction signs a checkpoint; audits trust the writer's key")
    cluster = None
    pg = None
    try:
        if args.pg_url:
            admin_url = args.pg_url
        else:
            from tests import pg_cluster

            cluster = Path(tempfile.mkdtemp(prefix="cb-bench-pg-cluster-"))  # its own folder: the server's user
            say("starting a throwaway PostgreSQL cluster")
            admin_url = pg_cluster.start(cluster)
        if cluster is not None and not args.pg_fast:
            say("restarting it with fsync, synchronous_commit and full_page_writes on (durable commits)")
            restart_durable(cluster)
        pg = Postgres(admin_url)
        pg_settings = pg.settings()
        say(f"PostgreSQL: {pg_settings}")

        # 1-3: one writer, the auditor, the size.
        sqlite_path = scratch / "bench.db"
        sqlite_single = record_and_audit(str(sqlite_path), count, "SQLite", None, scratch)
        sqlite_single.size_bytes = sqlite_bytes(sqlite_path)
        sqlite_path.unlink()
        for suffix in ("-wal", "-shm"):
            Path(f"{sqlite_path}{suffix}").unlink(missing_ok=True)
        pg_url = pg.new_database("single")
        pg_single = record_and_audit(pg_url, count, "PostgreSQL", pg, scratch)
        pg_single.size_bytes = pg.size_bytes(pg_url)
        pg.drop(pg_url)

        # 4: concurrent writers.
        points: list[SweepPoint] = []
        modes = [("batch", writer_rows)] + ([] if args.no_single else [("single", single_rows)])
        for mode, rows in modes:
            for writers in writer_counts:
                path = scratch / f"sweep-{mode}-{writers}.db"
                points.append(sweep_point("SQLite", str(path), writers, rows, args.batch, mode, None))
                shutil.rmtree(path, ignore_errors=True)
                path.unlink(missing_ok=True)
                for suffix in ("-wal", "-shm"):
                    Path(f"{path}{suffix}").unlink(missing_ok=True)
                url = pg.new_database(f"{mode}{writers}")
                points.append(sweep_point("PostgreSQL", url, writers, rows, args.batch, mode, pg))
                pg.drop(url)

        print_tables(count, generation, sqlite_single, pg_single, points, args.batch, pg_settings, version)
        if code_version() != version:
            print(f"\nWARNING: the code changed during the run (now {code_version()}); run it again")
        bad = [point for point in points if point.sequence != "ok" or not point.clean]
        return 1 if bad else 0
    finally:
        LAUNCHER.pop().close()
        if pg is not None:
            pg.close()
        if cluster is not None:
            from tests import pg_cluster

            say("stopping the throwaway PostgreSQL cluster")
            pg_cluster.stop(cluster)
        shutil.rmtree(scratch, ignore_errors=True)


def print_footprints(sqlite_single: Single, pg_single: Single) -> None:
    """The audit's footprint at a tenth of the rows and at all of them: flat means the last column stays near 1."""
    print(
        "\n| `compute-budget audit` | rows | SQLite peak RSS (MiB) | PostgreSQL peak RSS (MiB) "
        "| PostgreSQL server temporary files (bytes) |"
    )
    print("|---|---:|---:|---:|---:|")
    for lite, post in zip(sqlite_single.footprints, pg_single.footprints, strict=True):
        print(
            f"| --jobs {lite.jobs} | {lite.rows:,} | {lite.peak_rss_bytes / 2**20:.1f} "
            f"| {post.peak_rss_bytes / 2**20:.1f} | {post.temp_bytes:,} |"
        )
    for jobs in (1, 2):
        lites = [item for item in sqlite_single.footprints if item.jobs == jobs]
        posts = [item for item in pg_single.footprints if item.jobs == jobs]
        print(
            f"| --jobs {jobs}: all rows / a tenth | x{lites[-1].rows / lites[0].rows:.0f} "
            f"| {lites[-1].peak_rss_bytes / lites[0].peak_rss_bytes:.2f} "
            f"| {posts[-1].peak_rss_bytes / posts[0].peak_rss_bytes:.2f} | {posts[-1].temp_bytes:,} |"
        )


def print_tables(
    count: int,
    generation: float,
    sqlite_single: Single,
    pg_single: Single,
    points: list[SweepPoint],
    batch: int,
    pg_settings: str,
    version: str,
) -> None:
    print(f"\n{version}")
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs; PostgreSQL {pg_settings}")
    print(f"gate generation alone: {rate(count, generation)} gates/s (inside the record_many times below)\n")
    print(f"| {count:,} rows, one process | SQLite | PostgreSQL | PostgreSQL / SQLite |")
    print("|---|---:|---:|---:|")
    lines = [
        ("`record_many` (rows/s)", sqlite_single.record_seconds, pg_single.record_seconds),
        ("`audit` jobs=1 (rows/s)", sqlite_single.audit_seconds[1], pg_single.audit_seconds[1]),
        ("`audit` jobs=2 (rows/s)", sqlite_single.audit_seconds[2], pg_single.audit_seconds[2]),
    ]
    for name, sqlite_seconds, pg_seconds in lines:
        print(
            f"| {name} | {rate(count, sqlite_seconds)} | {rate(count, pg_seconds)} "
            f"| {sqlite_seconds / pg_seconds:.2f} |"
        )
    sqlite_mb = sqlite_single.size_bytes / count * 1_000_000 / 2**20
    pg_mb = pg_single.size_bytes / count * 1_000_000 / 2**20
    print(f"| store size (MiB per 1,000,000 rows) | {sqlite_mb:,.0f} | {pg_mb:,.0f} | {pg_mb / sqlite_mb:.2f} |")
    print_footprints(sqlite_single, pg_single)

    print(
        "\n| writers | calls | rows | SQLite rows/s | SQLite call p50 / p99 / max (ms) "
        "| PostgreSQL rows/s | PostgreSQL call p50 / p99 / max (ms) | PG writers waiting on the lock (avg) "
        "| seq 1..N, audit clean |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---|")
    by_key = {(point.backend, point.mode, point.writers): point for point in points}
    for mode, writers in sorted({(point.mode, point.writers) for point in points}):
        lite, post = by_key[("SQLite", mode, writers)], by_key[("PostgreSQL", mode, writers)]
        calls = f"`record_many` x{batch}" if mode == "batch" else "`record()`"
        verdict = all(point.sequence == "ok" and point.clean for point in (lite, post))

        def latency(point: SweepPoint) -> str:
            values = point.latencies
            return " / ".join(
                f"{1000 * value:,.1f}" for value in (percentile(values, 0.5), percentile(values, 0.99), max(values))
            )

        print(
            f"| {writers} | {calls} | {lite.rows:,} | {rate(lite.rows, lite.seconds)} | {latency(lite)} "
            f"| {rate(post.rows, post.seconds)} | {latency(post)} | {post.waiting:.2f} "
            f"| {'yes' if verdict else 'NO: ' + lite.sequence + ' / ' + post.sequence} |"
        )


if __name__ == "__main__":
    raise SystemExit(main())
