"""Benchmark: the checkpoint interval (spec 12.6), each figure against its floor in the same run.

Prints C, the median durable commit latency of a one-row transaction on the store's disk (stdlib `sqlite3`, WAL,
``synchronous=FULL``, in the store's folder, measured in this run), the file system type, and then:

1. **one thread**, S = 1: signed `record()` p50 against unsigned (goal: at most 1.15x);
2. **64 threads**, S = 1, signed `record()` on SQLite for `--seconds` (default 30), with a local witness (in a
   thread, counting its own `add-checkpoint` requests; `witness_interval` the default 10 s): rows/s against
   min(5,000, 0.5 x 64 / C) and against 1.5x the floor (64 threads sharing one `sqlite3` connection under one lock,
   each inserting one row of the same shape into the same table per ``BEGIN IMMEDIATE ... COMMIT``,
   ``synchronous=FULL``, for the same time); the mean rows per transaction; stored checkpoints (at most one per
   interval plus one for `close()`); stored note and cosignature text per million rows (at most 1 MiB); witness
   requests (at most ceil(run time / witness_interval) + 1);
3. with ``--pg-url URL`` (this release's tables there are dropped: give a database of its own), the 64-thread run
   on PostgreSQL against min(2,000, 0.4 x 64 / C_pg), C_pg measured the same way through psycopg, the server's
   `fsync` and `synchronous_commit` printed (the test cluster runs ``fsync=off``: its C_pg is not a disk's);
4. **`wait="witnessed"`** from 8 threads, `witness_interval` = S = 1, a local witness: p99 from call to return
   (goal: at most S + 0.5 s) over at least `--witnessed-calls` calls (default 2,000) and at least
   `--witnessed-seconds` (default 60). Each call waits for the next signature and its cosignature, so a thread
   makes about one call per interval: 2,000 calls from 8 threads take about 250 s, not 60.

Run: ``python benchmarks/bench_cadence.py`` (about 7 minutes); a smoke run:
``--seconds 5 --one-thread 200 --witnessed-calls 200 --witnessed-seconds 10``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn

from compute_budget import BudgetStore
from compute_budget.core.log.cosignature import WitnessSigner
from compute_budget.core.log.note import SignerKey
from compute_budget.core.row import ROW_COLUMNS
from compute_budget.serving import bind, header_timeout_protocol
from compute_budget.witness.app import allowed_hosts, create_witness_app
from compute_budget.witness.protocol import Witness
from compute_budget.witness.state import WitnessState

ORIGIN = "bench.example/cadence"
LOG_KEY = SignerKey.from_seed(ORIGIN, bytes(range(32)))
WITNESS_SIGNER = WitnessSigner.from_seed("witness.example/bench", bytes(32))
THREADS = 64
WAITING_THREADS = 8
INTERVAL = 1.0
DEFAULT_WITNESS_INTERVAL = 10.0
GOAL_ONE_THREAD = 1.15
GOAL_FLOOR = 1.5
MIB_PER_MILLION = 1.0


def gate(prefix: str, index: int) -> dict[str, Any]:
    """A well-formed, eligible search gate (its `decision_id` unique per prefix and index)."""
    return {
        "decision_id": f"{prefix}-{index:09d}",
        "status": "eligible",
        "policy_version": "search_gate.v1",
        "reason_code": "eligible_missing_role",
        "evidence_spans": [{"text": "a sentence", "start": 0, "end": 10, "sentence_index": 0}],
    }


def file_system_type(folder: Path) -> str:
    """The type of the file system `folder` is on (the longest mount point of /proc/mounts holding it)."""
    best, kind = "", "unknown"
    real = os.path.realpath(folder)
    with contextlib.suppress(OSError), open("/proc/mounts", encoding="utf-8") as mounts:
        for line in mounts:
            fields = line.split()
            point = fields[1].replace("\\040", " ")
            inside = real == point or real.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best):
                best, kind = point, fields[2]
    return f"{kind} ({best})"


def commit_latency(folder: Path, count: int = 200) -> float:
    """C: the median seconds of a durable one-row transaction (WAL, ``synchronous=FULL``) in `folder`."""
    path = folder / "c.db"
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = FULL")
    connection.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    times = []
    for index in range(count + 20):
        began = time.perf_counter()
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("INSERT INTO t (v) VALUES (?)", (f"row {index}",))
        connection.execute("COMMIT")
        if index >= 20:
            times.append(time.perf_counter() - began)
    connection.close()
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")
    return statistics.median(times)


class CountingWitness:
    """A witness of this benchmark's log served over HTTP on 127.0.0.1 in a thread, counting the `add-checkpoint`
    requests it is sent."""

    def __init__(self, state_path: Path) -> None:
        self.requests = 0
        self._state = WitnessState(state_path)
        witness = Witness(WITNESS_SIGNER, {ORIGIN: [LOG_KEY.verifier()]}, self._state,
                          clock=lambda: int(time.time()))
        self._inner = create_witness_app(witness, allowed_hosts("127.0.0.1", ()))
        self.port = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http" and str(scope.get("path", "")).endswith("/add-checkpoint"):
            self.requests += 1
        await self._inner(scope, receive, send)

    @property
    def target(self) -> str:
        """The witness as `BudgetStore.open(witnesses=...)` takes it."""
        return f"http://127.0.0.1:{self.port}={WITNESS_SIGNER.verifier().format()}"

    @contextlib.contextmanager
    def serving(self) -> Iterator[CountingWitness]:
        """Serve it for the block."""
        config = uvicorn.Config(self, log_level="warning", access_log=False, lifespan="off",
                                http=header_timeout_protocol(5.0), timeout_keep_alive=5)
        sock = bind("127.0.0.1", 0)
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.01)
        self.port = int(sock.getsockname()[1])
        try:
            yield self
        finally:
            server.should_exit = True
            thread.join(10)
            sock.close()
            self._state.close()


def signed_options(folder: Path, name: str, **more: Any) -> dict[str, Any]:
    """`BudgetStore.open` options of a signed writer with the interval S = 1 and its own writer state."""
    return {"signing_key": LOG_KEY, "writer_state": str(folder / f"{name}.state"), "origin": ORIGIN,
            "checkpoint_interval": INTERVAL, **more}


def one_thread(folder: Path, count: int) -> tuple[float, float]:
    """p50 seconds of `record()` unsigned and signed (S = 1), one thread, `count` calls each after a warm-up;
    interleaved in rounds so a change of load falls on both alike."""
    times: dict[bool, list[float]] = {False: [], True: []}
    with BudgetStore.open(str(folder / "one-unsigned.db"), origin=ORIGIN) as unsigned, \
            BudgetStore.open(str(folder / "one-signed.db"), **signed_options(folder, "one")) as signed:
        stores = {False: unsigned, True: signed}
        rounds, per_round = 10, max(count // 10, 1)
        for warm in range(100):
            for store in stores.values():
                store.record(gate("warm", warm))
        for number in range(rounds):
            for is_signed, store in stores.items():
                for index in range(per_round):
                    began = time.perf_counter()
                    store.record(gate("one", number * per_round + index))
                    times[is_signed].append(time.perf_counter() - began)
    return statistics.median(times[False]), statistics.median(times[True])


def run_threads(count: int, seconds: float, work: Callable[[int, int], None]) -> tuple[int, float, list[float]]:
    """Run `work(thread, index)` in `count` threads until `seconds` pass: (calls, elapsed, seconds per call)."""
    deadline = time.monotonic() + seconds
    latencies: list[list[float]] = [[] for _ in range(count)]
    failures: list[BaseException] = []

    def loop(number: int) -> None:
        index = 0
        try:
            while time.monotonic() < deadline:
                began = time.perf_counter()
                work(number, index)
                latencies[number].append(time.perf_counter() - began)
                index += 1
        except BaseException as error:  # reported below: a failed call is not a measured one
            failures.append(error)

    began = time.perf_counter()
    threads = [threading.Thread(target=loop, args=(number,)) for number in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if failures:
        raise RuntimeError(f"{len(failures)} threads failed, the first: {failures[0]!r}")
    merged = [value for values in latencies for value in values]
    return len(merged), elapsed, merged


def counted_transactions(store: BudgetStore) -> list[int]:
    """Count the append transactions of `store`'s group commit (rows per transaction), by wrapping its append."""
    group = store._writing._group  # a benchmark's probe, not an interface
    inner = group._append
    sizes: list[int] = []

    def counting(gates: Any, options: Any) -> Any:
        appended = inner(gates, options)
        sizes.append(appended.new)
        return appended

    group._append = counting
    return sizes


def stored_text(store: BudgetStore) -> tuple[int, int]:
    """(stored checkpoints, bytes of stored note and cosignature text) of `store`."""
    engine = store._writing._session.engine
    from sqlalchemy import text

    with engine.connect() as connection:
        checkpoints, notes = connection.execute(
            text("SELECT COUNT(*), COALESCE(SUM(LENGTH(note)), 0) FROM compute_budget_checkpoints")).one()
        cosigned = connection.execute(text(
            "SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(line)), 0) FROM compute_budget_cosignatures")).scalar()
    return int(checkpoints), int(notes) + int(cosigned or 0)


def many_threads(target: str, folder: Path, seconds: float, witness: CountingWitness) -> dict[str, Any]:
    """64 threads of signed `record()` (S = 1) into the store at `target` for `seconds`, a witness asked every
    `DEFAULT_WITNESS_INTERVAL`: rows/s, rows per transaction, checkpoints and text stored, witness requests."""
    name = "pg" if "://" in target else "many"
    asked = witness.requests
    with BudgetStore.open(target, **signed_options(folder, name, witnesses=[witness.target])) as store:
        store.record(gate(name, 0))  # the store's first append, outside the measure
        before, _ = stored_text(store)
        sizes = counted_transactions(store)
        began = time.monotonic()
        calls, elapsed, _ = run_threads(
            THREADS, seconds, lambda number, index: store.record(gate(f"{name}{number}", index + 1)))
    run_time = time.monotonic() - began  # with close(): its signature and its wait for the witness
    with BudgetStore.open(target, readonly=True) as reader:
        checkpoints, text_bytes = stored_text(reader)
        template = next(iter(reader.iter_raw_rows()))
    return {"rows": calls, "elapsed": elapsed, "rate": calls / elapsed, "run_time": run_time,
            "per_transaction": statistics.fmean(sizes) if sizes else 0.0, "transactions": len(sizes),
            "checkpoints": checkpoints - before, "text_bytes": text_bytes, "requests": witness.requests - asked,
            "template": template}


def floor_threads(folder: Path, seconds: float, template: tuple[Any, ...]) -> float:
    """Rows/s of the floor: `THREADS` threads sharing one `sqlite3` connection under one lock, each inserting one
    row shaped as `template` into a fresh store's table per ``BEGIN IMMEDIATE ... COMMIT``, ``synchronous=FULL``."""
    path = folder / "floor.db"
    with BudgetStore.open(str(path)):
        pass  # the table and its guard, as this release creates them
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = FULL")
    lock = threading.Lock()
    seq_at, id_at = ROW_COLUMNS.index("seq"), ROW_COLUMNS.index("budget_id")
    insert = (f"INSERT INTO compute_budget_decisions ({', '.join(ROW_COLUMNS)}) "
              f"VALUES ({', '.join('?' for _ in ROW_COLUMNS)})")
    next_seq = "SELECT COALESCE(MAX(seq), 0) + 1 FROM compute_budget_decisions"

    def one(number: int, index: int) -> None:
        row = list(template)
        row[id_at] = f"{number:04d}{index:060d}"
        with lock:
            connection.execute("BEGIN IMMEDIATE")
            row[seq_at] = connection.execute(next_seq).fetchone()[0]
            connection.execute(insert, row)
            connection.execute("COMMIT")

    calls, elapsed, _ = run_threads(THREADS, seconds, one)
    connection.close()
    return calls / elapsed


def witnessed(folder: Path, calls: int, seconds: float, witness: CountingWitness) -> dict[str, Any]:
    """`record(wait="witnessed")` from 8 threads, `witness_interval` = S = 1, until both `calls` calls and
    `seconds` are done: the calls, the time, p50 and p99 from call to return."""
    options = signed_options(folder, "waited", witnesses=[witness.target], witness_interval=INTERVAL)
    latencies: list[float] = []
    began = time.monotonic()
    with BudgetStore.open(str(folder / "waited.db"), **options) as store:
        store.record(gate("waited-first", 0), wait="witnessed")
        for round_number in itertools.count():
            if len(latencies) >= calls and time.monotonic() - began >= seconds:
                break
            prefix = f"waited{round_number}-"
            _, _, measured = run_threads(
                WAITING_THREADS, max(seconds / 4, 5.0),
                lambda number, index, prefix=prefix: store.record(gate(f"{prefix}{number}", index), wait="witnessed"))
            latencies.extend(measured)
    elapsed = time.monotonic() - began
    ordered = sorted(latencies)
    return {"calls": len(ordered), "elapsed": elapsed, "p50": statistics.median(ordered),
            "p99": ordered[min(len(ordered) - 1, math.ceil(len(ordered) * 0.99) - 1)], "max": ordered[-1]}


def pg_settings(url: str, count: int = 200) -> tuple[float, str]:
    """C_pg, the median seconds of a one-row transaction through psycopg into the database at `url`, and the
    server's durability settings."""
    import psycopg
    from sqlalchemy.engine import make_url

    parts = make_url(url)
    dsn = f"host={parts.host} port={parts.port} user={parts.username} password={parts.password} dbname={parts.database}"
    times = []
    with psycopg.connect(dsn, autocommit=True) as connection:
        settings = ", ".join(f"{name}={connection.execute(f'SHOW {name}').fetchone()[0]}"  # type: ignore[index]
                             for name in ("fsync", "synchronous_commit", "full_page_writes"))
        connection.execute("CREATE TABLE IF NOT EXISTS bench_cadence_c (id BIGSERIAL PRIMARY KEY, v TEXT)")
        for index in range(count + 20):
            began = time.perf_counter()
            with connection.transaction():
                connection.execute("INSERT INTO bench_cadence_c (v) VALUES (%s)", (f"row {index}",))
            if index >= 20:
                times.append(time.perf_counter() - began)
        connection.execute("DROP TABLE bench_cadence_c")
    return statistics.median(times), settings


def drop_tables(url: str) -> None:
    """Drop this release's tables from the PostgreSQL database at `url`."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.begin() as connection:
        tables = connection.execute(text(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
            "AND (tablename LIKE 'compute\\_budget\\_%' OR tablename = 'alembic_version')")).scalars().all()
        for table in tables:
            connection.execute(text(f'DROP TABLE IF EXISTS "{table}" CASCADE'))
    engine.dispose()


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def print_many(label: str, found: dict[str, Any], goal: float) -> None:
    """The 64-thread figures and their goals."""
    allowed_checkpoints = math.floor(found["run_time"] / INTERVAL) + 1
    allowed_requests = math.ceil(found["run_time"] / DEFAULT_WITNESS_INTERVAL) + 1
    per_million = found["text_bytes"] / max(found["rows"], 1) * 1_000_000 / (1 << 20)
    print(f"{label}: {found['rows']} rows in {found['elapsed']:.1f} s = {found['rate']:,.0f} rows/s; "
          f"goal >= {goal:,.0f}: {verdict(found['rate'] >= goal)}")
    print(f"  {found['transactions']} transactions, {found['per_transaction']:.1f} rows per transaction (mean)")
    print(f"  {found['checkpoints']} checkpoints stored in {found['run_time']:.1f} s (close included); "
          f"goal <= {allowed_checkpoints}: {verdict(found['checkpoints'] <= allowed_checkpoints)}")
    print(f"  note and cosignature text {found['text_bytes']:,} bytes = {per_million:.3f} MiB per million rows; "
          f"goal <= {MIB_PER_MILLION}: {verdict(per_million <= MIB_PER_MILLION)}")
    print(f"  witness requests counted by the witness: {found['requests']}; goal <= {allowed_requests} "
          f"(witness_interval {DEFAULT_WITNESS_INTERVAL:.0f} s): {verdict(found['requests'] <= allowed_requests)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=30.0, help="the 64-thread runs' length (default 30)")
    parser.add_argument("--one-thread", type=int, default=2000, help="one-thread calls each way (default 2000)")
    parser.add_argument("--witnessed-calls", type=int, default=2000, help="wait='witnessed' calls (default 2000)")
    parser.add_argument("--witnessed-seconds", type=float, default=60.0, help="and at least this long (default 60)")
    parser.add_argument("--pg-url", metavar="URL", help="also the 64-thread run on PostgreSQL (its tables dropped!)")
    parser.add_argument("--skip", action="append", default=[], choices=("one", "many", "floor", "witnessed"),
                        help="leave a part out (a profiling run)")
    arguments = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-cadence-", dir=os.environ.get("BENCH_DIR")))
    try:
        run(arguments, folder)
    finally:
        shutil.rmtree(folder)  # the folder this run made, nothing else


def run(arguments: argparse.Namespace, folder: Path) -> None:
    c = commit_latency(folder)
    print(f"store folder {folder} on {file_system_type(folder)}; C = {c * 1000:.3f} ms "
          f"(median durable one-row commit, WAL, synchronous=FULL)")
    if "one" not in arguments.skip:
        unsigned, signed = one_thread(folder, arguments.one_thread)
        ratio = signed / unsigned
        print(f"one thread, S = 1: record() p50 unsigned {unsigned * 1000:.3f} ms, signed {signed * 1000:.3f} ms = "
              f"{ratio:.3f}x; goal <= {GOAL_ONE_THREAD}: {verdict(ratio <= GOAL_ONE_THREAD)}")
    # a fresh witness for each store: they share an origin, and a witness takes a second tree for a fork
    with CountingWitness(folder / "witness-many.db").serving() as witness, \
            CountingWitness(folder / "witness-pg.db").serving() as pg_witness, \
            CountingWitness(folder / "witness-waited.db").serving() as waited_witness:
        if "many" not in arguments.skip:
            found = many_threads(str(folder / "many.db"), folder, arguments.seconds, witness)
            print_many(f"SQLite, {THREADS} threads, S = 1", found, min(5000.0, 0.5 * THREADS / c))
            if "floor" not in arguments.skip:
                floor = floor_threads(folder, arguments.seconds, found["template"])
                ratio = found["rate"] / floor
                print(f"  floor ({THREADS} threads, one sqlite3 connection, one lock): {floor:,.0f} rows/s; "
                      f"project/floor {ratio:.2f}; goal >= {GOAL_FLOOR}: {verdict(ratio >= GOAL_FLOOR)}")
        if arguments.pg_url:
            c_pg, settings = pg_settings(arguments.pg_url)
            print(f"PostgreSQL: C_pg = {c_pg * 1000:.3f} ms ({settings}; the test cluster runs fsync=off, "
                  "so C_pg is not a disk's)")
            drop_tables(arguments.pg_url)
            try:
                found = many_threads(arguments.pg_url, folder, arguments.seconds, pg_witness)
            finally:
                drop_tables(arguments.pg_url)
            print_many(f"PostgreSQL, {THREADS} threads, S = 1", found, min(2000.0, 0.4 * THREADS / c_pg))
        if "witnessed" not in arguments.skip:
            waited = witnessed(folder, arguments.witnessed_calls, arguments.witnessed_seconds, waited_witness)
            goal = INTERVAL + 0.5
            print(f"wait='witnessed', {WAITING_THREADS} threads, witness_interval = S = 1: {waited['calls']} calls in "
                  f"{waited['elapsed']:.0f} s; p50 {waited['p50']:.3f} s, p99 {waited['p99']:.3f} s, max "
                  f"{waited['max']:.3f} s; goal p99 <= {goal} s: {verdict(waited['p99'] <= goal)}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
