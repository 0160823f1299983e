"""Spec 12.3's kill test, many runs: a writer recording gates with its key is SIGKILLed at a random (seeded) point,
then the next writer with the same key and state appends; every run must lose no acknowledged gate, and the
trusted audit must find every row signed. With ``--interval S`` the writer signs at most once per S seconds
(``checkpoint_interval``) and is killed mid-interval: no row it acknowledged over S (plus the signer's slack) before
the kill may be unsigned, and the next writer signs the tail by recording, ``flush()`` or ``compute-budget sign`` in
turn. The suite runs a few of each (tests/store/test_writer_processes.py).

Run: ``python benchmarks/kill_runs.py --runs 50 --backend sqlite [--interval 0.3]`` and ``--backend postgresql
--pg-url URL`` (a database this run may fill; default ``$COMPUTE_BUDGET_TEST_PG_URL``, whose database gets a fresh
one per run).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tests.killing

from tests.killing import kill_run


def _postgres_database(url: str) -> tuple[str, str]:
    """A fresh database on the server `url` names: (its URL, its name)."""
    import psycopg
    from sqlalchemy.engine import make_url

    name = f"kill_runs_{uuid.uuid4().hex[:12]}"
    admin = make_url(url).set(drivername="postgresql")
    with psycopg.connect(admin.render_as_string(hide_password=False), autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    return make_url(url).set(database=name).render_as_string(hide_password=False), name


def _drop_database(url: str, name: str) -> None:
    import psycopg
    from sqlalchemy.engine import make_url

    admin = make_url(url).set(drivername="postgresql")
    with psycopg.connect(admin.render_as_string(hide_password=False), autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> int:
    """Run the kill test `--runs` times on one store; exit 0 when every run held."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--pg-url", default=os.environ.get("COMPUTE_BUDGET_TEST_PG_URL"))
    parser.add_argument("--seed", type=int, default=0, help="the first run's seed (run i uses seed + i)")
    parser.add_argument("--most", type=int, default=30, help="at most this many acknowledged gates before a kill")
    parser.add_argument("--interval", type=float, default=0, help="the writer's checkpoint_interval in seconds")
    arguments = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="kill_runs_"))
    dropped: tuple[str, str] | None = None
    if arguments.backend == "sqlite":
        target = str(folder / "store.db")
    else:
        if not arguments.pg_url:
            parser.error("--backend postgresql needs --pg-url (or $COMPUTE_BUDGET_TEST_PG_URL)")
        target, name = _postgres_database(arguments.pg_url)
        dropped = (arguments.pg_url, name)
    started = time.monotonic()
    acknowledged = bounded = 0
    try:
        for index in range(arguments.runs):
            run = kill_run(target, folder, arguments.seed + index, most=arguments.most, interval=arguments.interval)
            acknowledged += run.acknowledged
            bounded += run.bounded
            print(f"run {index + 1}/{arguments.runs}: {run.acknowledged} acknowledged, {run.rows} rows, "
                  f"{run.left_unsigned} left unsigned, signed by {run.next_writer}; "
                  "audit clean", flush=True)
    finally:
        if dropped is not None:
            _drop_database(*dropped)
    within = f", interval {arguments.interval} s: {bounded} rows acknowledged over it before a kill, all signed" \
        if arguments.interval else ""
    print(f"{arguments.runs} runs on {arguments.backend}{within}: {acknowledged} acknowledged gates, none lost; "
          f"every row signed ({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
