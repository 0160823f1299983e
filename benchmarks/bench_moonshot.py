"""Benchmark: the 10-million-row night (issue 12's moonshot), run once and written into benchmarks/README.md.

In one run, on this machine, through the installed `compute-budget` command where an operator would use it:

1. record N gates (default 10,000,000; `bench_record`'s generator, JSON text) with `record_many` in batches of
   100,000 (each its own transaction, signed by a writer key made for the run), and time it;
2. the store's size on disk, per million rows;
3. `compute-budget audit --trusted-key WRITER --save-checkpoint cp.json --cosign auditor.key` with the default
   `--jobs auto` (all cores once the store is big enough), timed as a whole process; it must exit 0. The saved
   checkpoint is then a note signed by the auditor, as `--since` with trusted keys requires (spec section 8);
4. record 10,000 more gates, then the nightly incremental audit `compute-budget audit --trusted-key WRITER
   --trusted-key AUDITOR --since cp.json`, timed as a whole process (interpreter start included); it must exit 0;
5. with `--pg` (a throwaway PostgreSQL cluster from `tests/pg_cluster.py`, or `--pg-url`): `compute-budget copy`
   of the whole store into PostgreSQL, timed.

Goals: the full audit under 2 minutes on 2 cores, the incremental audit under 1 second.
Run from the repository root: ``python benchmarks/bench_moonshot.py --dir /big/disk --pg`` (about 40 minutes and
25 GB with the copy); ``--count 200000`` for a rehearsal.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
if str(REPO_ROOT) not in sys.path:  # `tests.pg_cluster` lives in the repository root
    sys.path.append(str(REPO_ROOT))

from bench_record import db_bytes, gates  # noqa: E402

from compute_budget.store import BudgetStore  # noqa: E402

BATCH = 100_000
NIGHTLY = 10_000


def _say(message: str) -> None:
    print(message, flush=True)


def _command() -> list[str]:
    executable = shutil.which("compute-budget", path=str(Path(sys.executable).parent)) or shutil.which("compute-budget")
    return [executable] if executable else [sys.executable, "-m", "compute_budget"]


def _timed(argv: list[str], *, what: str) -> float:
    started = time.perf_counter()
    finished = subprocess.run(argv, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if finished.returncode != 0:
        raise SystemExit(f"{what} exited {finished.returncode}:\n{finished.stdout[-2000:]}\n{finished.stderr[-2000:]}")
    return seconds


def _keygen(tool: list[str], name: str, path: Path) -> str:
    """Make a signer key file; returns its verifier key (the last line `keygen` prints)."""
    made = subprocess.run([*tool, "keygen", name, "--out", str(path)], capture_output=True, text=True, check=True)
    return made.stdout.strip().splitlines()[-1]


def _record(path: Path, key: Path, start: int, count: int) -> float:
    started = time.perf_counter()
    with BudgetStore.open(path, signing_key=key) as store:
        for low in range(start, start + count, BATCH):
            store.record_many(gates(low, min(BATCH, start + count - low)))
            done = low + min(BATCH, start + count - low) - start
            if done % 1_000_000 == 0:
                _say(f"  recorded {done:,} rows ({done / (time.perf_counter() - started):,.0f} rows/s)")
    return time.perf_counter() - started


def main() -> None:
    """Run the night and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000_000, help="rows to record (default 10,000,000)")
    parser.add_argument("--dir", type=Path, default=None, help="folder for the store (default: a temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the store and key")
    parser.add_argument("--pg", action="store_true", help="also time `compute-budget copy` into PostgreSQL")
    parser.add_argument("--pg-url", default=None, help="an existing, empty PostgreSQL database for the copy")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="moonshot-", dir=args.dir))
    path, key, checkpoint = folder / "night.db", folder / "writer.key", folder / "cp.json"
    tool = _command()
    verifier = _keygen(tool, "moonshot-writer", key)
    witness_key = folder / "auditor.key"
    witness = _keygen(tool, "moonshot-auditor", witness_key)
    figures: list[tuple[str, str]] = []
    try:
        _say(f"recording {args.count:,} gates in batches of {BATCH:,} into {path} ...")
        seconds = _record(path, key, 0, args.count)
        figures.append(("record_many, batches of 100,000", f"{args.count / seconds:,.0f} rows/s ({seconds:,.1f} s)"))
        size = db_bytes(path)
        figures.append(
            ("store size", f"{size / 2**30:,.2f} GiB = {size / 2**20 / (args.count / 1e6):,.1f} MiB per million rows")
        )

        _say("full audit (compute-budget audit, --jobs auto) ...")
        audit = [*tool, "audit", "--db", str(path), "--trusted-key", verifier]
        cosigned = ["--save-checkpoint", str(checkpoint), "--cosign", str(witness_key)]
        seconds = _timed([*audit, *cosigned], what="the full audit")
        figures.append(
            ("full audit, --jobs auto", f"{seconds:,.1f} s = {args.count / seconds:,.0f} rows/s (goal < 120 s)")
        )

        _say(f"recording {NIGHTLY:,} more gates, then the incremental audit ...")
        _record(path, key, args.count, NIGHTLY)
        seconds = _timed([*audit, "--trusted-key", witness, "--since", str(checkpoint)], what="the incremental audit")
        figures.append((f"incremental audit of {NIGHTLY:,} new rows", f"{seconds:,.2f} s, whole process (goal < 1 s)"))

        if args.pg or args.pg_url:
            figures.append(("copy to PostgreSQL", _copy(tool, path, args.count + NIGHTLY, args.pg_url, folder)))
    finally:
        _say("")
        _say(f"bench_moonshot: {args.count:,} rows, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
        for name, value in figures:
            _say(f"  {name:42} {value}")
        if args.keep:
            _say(f"kept: {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


def _copy(tool: list[str], path: Path, rows: int, pg_url: str | None, folder: Path) -> str:
    if pg_url is not None:
        seconds = _timed([*tool, "copy", str(path), pg_url], what="the copy")
        return f"{seconds:,.1f} s = {rows / seconds:,.0f} rows/s"
    from tests import pg_cluster

    cluster = folder / "pg"
    folder.chmod(0o755)  # the server runs as its own user and must reach its folder inside this one
    admin_url = pg_cluster.start(cluster)
    try:
        from sqlalchemy import create_engine, text
        from sqlalchemy.engine import make_url

        engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with engine.connect() as connection:
            connection.execute(text("CREATE DATABASE moonshot"))
        engine.dispose()
        target = make_url(admin_url).set(database="moonshot").render_as_string(hide_password=False)
        _say("copying into PostgreSQL (compute-budget copy) ...")
        seconds = _timed([*tool, "copy", str(path), target], what="the copy")
        return f"{seconds:,.1f} s = {rows / seconds:,.0f} rows/s (throwaway cluster, its test settings: fsync off)"
    finally:
        pg_cluster.stop(cluster)


if __name__ == "__main__":
    main()
