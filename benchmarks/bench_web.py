"""Benchmark: the workbench's pages against the bare SQL they run (issue 13).

On one store of N rows (built with `record_many` from `bench_record`'s gates; 1,000,000 by default), in one
process through Starlette's TestClient (the request's whole path through the application, plus the test
client's own cost, measured on a static file and printed beside), `--requests` requests per case:

- the decisions page (HTML and JSON) at random page numbers (keyset: a random `before_seq`), with no filter and
  with each single filter (status, reason, gate, policy_version), each at random page numbers;
- the detail page of random decisions, with its live re-derivation (HTML and JSON);
- as the floor of each, the bare SQL the page needs, through stdlib `sqlite3` on the same file: the page
  query (LIMIT 51), or for a detail the row by budget_id and its two neighbours.

Medians and p99 in milliseconds, and the ratio project / floor of the medians. Goals at p99: every decisions case
under 50 ms (each listed row is checked live, issue 22) and every detail case under 50 ms. The counts behind the
chart are computed once per head (the first request after start pays for them: printed as "cold first page").

Run: ``python benchmarks/bench_web.py`` (builds 1,000,000 rows first: a minute or two), ``--rows 20000`` for a
quick run, ``--db PATH`` to reuse or keep a store (e.g. one kept by ``bench_record.py --keep``).
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_record import build_store

from compute_budget.store.backends import browse_statements_for
from compute_budget.store.browse import DecisionFilter
from compute_budget.web.app import create_app

TABLE = "compute_budget_decisions"
PAGE_ROWS = 50
GOAL_PAGE_MS = 50.0  # issue 22: with every listed row checked live
GOAL_DETAIL_MS = 50.0


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _client(db: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Starlette < 1 / httpx deprecation chatter is not the benchmark's
        from starlette.testclient import TestClient
    return TestClient(create_app(str(db)))


def _stats(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99, ordered[-1]


class Case:
    """One measured case: a name, how to make the i-th request's path, and the i-th floor query."""

    def __init__(
        self,
        name: str,
        path: Callable[[int], str],
        floor: Callable[[sqlite3.Connection, int], None],
        goal_ms: float,
    ) -> None:
        self.name = name
        self.path = path
        self.floor = floor
        self.goal_ms = goal_ms


def _page_floor(where: Callable[[int], DecisionFilter]) -> Callable[[sqlite3.Connection, int], None]:
    sql = browse_statements_for("sqlite")

    def run(connection: sqlite3.Connection, index: int) -> None:
        given = where(index)
        connection.execute(sql.page(given.present(), PAGE_ROWS + 1), given.values()).fetchall()

    return run


def _detail_floor(ids: list[str]) -> Callable[[sqlite3.Connection, int], None]:
    sql = browse_statements_for("sqlite")

    def run(connection: sqlite3.Connection, index: int) -> None:
        row = connection.execute(sql.by_budget_id, (ids[index],)).fetchone()
        connection.execute(sql.link_before, (row[0],)).fetchone()
        connection.execute(sql.link_after, (row[0],)).fetchone()

    return run


def _query(**params: object) -> str:
    import urllib.parse

    return urllib.parse.urlencode({name: value for name, value in params.items() if value is not None})


def cases(connection: sqlite3.Connection, rows: int, requests: int, seed: int) -> list[Case]:
    """The measured cases, each with `requests` requests at random page numbers or random rows."""
    rng = random.Random(seed)
    pages = max(1, rows // PAGE_ROWS)
    # Page k (1-based) of the unfiltered list starts below seq rows + 1 - 50 (k - 1): any page number.
    befores = [rows + 1 - PAGE_ROWS * rng.randrange(pages) for _ in range(requests)]
    seqs = [rng.randint(1, rows) for _ in range(requests)]
    ids = [
        connection.execute(f"SELECT budget_id FROM {TABLE} WHERE seq = ?", (seq,)).fetchone()[0] for seq in seqs
    ]
    gates = [
        connection.execute(f"SELECT gate_decision_id FROM {TABLE} WHERE seq = ?", (seq,)).fetchone()[0]
        for seq in seqs
    ]
    listed: list[Case] = []

    def page_case(name: str, make: Callable[[int], DecisionFilter], api: bool = False) -> None:
        def path(index: int) -> str:
            where = make(index)
            query = _query(
                status=where.status, reason=where.reason_code, gate=where.gate_decision_id,
                policy_version=where.policy_version, before_seq=where.before_seq,
            )
            return ("/api/decisions" if api else "/") + ("?" + query if query else "")

        listed.append(Case(name, path, _page_floor(make), GOAL_PAGE_MS))

    page_case("decisions, page 1", lambda index: DecisionFilter())
    page_case("decisions, any page", lambda index: DecisionFilter(before_seq=befores[index]))
    page_case("/api/decisions, any page", lambda index: DecisionFilter(before_seq=befores[index]), api=True)
    for status in ("budget_allowed", "budget_blocked", "budget_unassessable"):
        page_case(
            f"status={status}, any page",
            lambda index, status=status: DecisionFilter(status=status, before_seq=befores[index]),
        )
    for reason in ("eligible_missing_role", "gate_blocked", "malformed_gate_decision"):
        page_case(
            f"reason={reason}, any page",
            lambda index, reason=reason: DecisionFilter(reason_code=reason, before_seq=befores[index]),
        )
    page_case("gate=<a stored gate id>", lambda index: DecisionFilter(gate_decision_id=gates[index]))
    page_case(
        "policy_version=compute_budget.v1, any page",
        lambda index: DecisionFilter(policy_version="compute_budget.v1", before_seq=befores[index]),
    )
    listed.append(
        Case("detail + re-derivation", lambda index: f"/decisions/{ids[index]}", _detail_floor(ids), GOAL_DETAIL_MS)
    )
    listed.append(
        Case(
            "/api/decisions/{id} + re-derivation",
            lambda index: f"/api/decisions/{ids[index]}",
            _detail_floor(ids),
            GOAL_DETAIL_MS,
        )
    )
    return listed


def measure(client: Any, connection: sqlite3.Connection, case: Case, requests: int) -> dict[str, Any]:
    project: list[float] = []
    floor: list[float] = []
    for index in range(requests):
        path = case.path(index)
        began = time.perf_counter()
        response = client.get(path)
        project.append((time.perf_counter() - began) * 1000)
        if response.status_code != 200:
            raise SystemExit(f"{path}: HTTP {response.status_code}")
        began = time.perf_counter()
        case.floor(connection, index)
        floor.append((time.perf_counter() - began) * 1000)
    median, p99, worst = _stats(project)
    floor_median, floor_p99, _ = _stats(floor)
    return {
        "case": case.name,
        "median": median,
        "p99": p99,
        "max": worst,
        "floor_median": floor_median,
        "floor_p99": floor_p99,
        "ratio": median / floor_median if floor_median else float("inf"),
        "goal": case.goal_ms,
        "met": p99 < case.goal_ms,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows in the store (default 1,000,000)")
    parser.add_argument("--db", type=Path, default=None, help="use this store; built with --rows rows if missing")
    parser.add_argument("--requests", type=int, default=200, help="requests per case (default 200)")
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-web-") as folder:
        db = args.db or Path(folder) / "store.db"
        if not db.exists():
            _say(f"building a {args.rows:,}-row store at {db} with record_many ...")
            build_store(db, args.rows, say=_say)
        connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        rows = connection.execute(f"SELECT max(seq) FROM {TABLE}").fetchone()[0]
        _say(f"warming the page cache: reading {db} once ...")
        with open(db, "rb") as handle:
            while handle.read(1 << 24):
                pass
        with _client(db) as client:
            began = time.perf_counter()
            client.get("/")
            cold = (time.perf_counter() - began) * 1000
            static = []
            for _ in range(args.requests):
                began = time.perf_counter()
                client.get("/static/favicon.svg")
                static.append((time.perf_counter() - began) * 1000)
            results = [
                measure(client, connection, case, args.requests)
                for case in cases(connection, rows, args.requests, args.seed)
            ]
        connection.close()

    static_median, static_p99, _ = _stats(static)
    print(f"store: {rows:,} rows; {args.requests} requests per case, in-process (Starlette TestClient)")
    print(f"cold first page (counts by status and reason computed for the chart, then cached per head): {cold:,.0f} ms")
    print(f"test client's own cost (a static file): median {static_median:.2f} ms, p99 {static_p99:.2f} ms")
    print()
    header = f"{'case':<44} {'median':>8} {'p99':>8} {'max':>8} {'floor med':>10} {'floor p99':>10} {'ratio':>7}  goal"
    print(header)
    print("-" * len(header))
    for result in results:
        print(
            f"{result['case']:<44} {result['median']:>8.2f} {result['p99']:>8.2f} {result['max']:>8.2f} "
            f"{result['floor_median']:>10.3f} {result['floor_p99']:>10.3f} {result['ratio']:>7.1f}  "
            f"p99 < {result['goal']:.0f} ms: {'met' if result['met'] else 'MISSED'}"
        )
    print("(milliseconds; floor = the bare SQL the page runs, stdlib sqlite3; ratio = median / floor median)")
    return 0 if all(result["met"] for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
