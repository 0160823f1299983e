"""Benchmark: what the seal costs (issue 10) — the Merkle tree and signing on appends, proofs, the trusted audit.

In one run, on this machine:

1. ``record_many`` of N gates (batches of 100,000, each its own transaction) into a fresh store with the seal
   (leaf hashes, stored tree nodes, a signed checkpoint per transaction) against the same code with the seal
   switched off (the chain hash alone, no tree, no key: the store as it was before the seal). Goal: ratio >= 0.90.
2. The extra disk per million rows: the two stores' sizes, and the same for single ``record()`` calls (each its
   own transaction, so one signed checkpoint per row) appended to both.
3. ``prove`` (the function, opening the store each time) and ``verify_proof`` on the N-row store, over rows spread
   across it. Goals: under 50 ms and 20 ms.
4. ``audit`` with ``trusted_keys=[writer]`` against ``audit`` without keys, on the sealed store, alternating.
   Goal: ratio >= 0.90.
5. Spec 9.1 (issue 19): a signed single ``record()`` with the writer's rules and its state file (in the store's
   folder, not fsynced) against the signed append before those rules (checks and state switched off), taking
   turns call by call; and ``record_many`` of 100,000 signed gates the same way. Goals: at most 1 ms more per
   call (medians), and a ratio of at least 0.95.

Run: ``python benchmarks/bench_seal.py`` (1,000,000 rows, about 15 minutes here), ``--count 20000`` for a smoke
run, ``--keep`` to keep the stores.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench_record import db_bytes, gates

import compute_budget.core.leaf as leaf_module
import compute_budget.store.append as append_module
import compute_budget.store.plan as plan_module
import compute_budget.store.seal_tables as seal_module
from compute_budget import BudgetStore, audit, prove, verify_proof
from compute_budget.core.leaf import RowHasher
from compute_budget.core.log.merkle import CompactRange
from compute_budget.core.log.note import SignerKey, generate_signer
from compute_budget.keys.writer_state import WriterState
from compute_budget.store.authorship import Authorised

BATCH = 100_000
GOAL_APPEND_RATIO = 0.90
GOAL_AUDIT_RATIO = 0.90
GOAL_PROVE_MS = 50.0
GOAL_VERIFY_MS = 20.0
GOAL_AUTHORSHIP_EXTRA_MS = 1.0  # issue 19: a signed record() pays at most this for spec 9.1
GOAL_AUTHORSHIP_BATCH_RATIO = 0.95


class _NoLeaf:
    """A leaf hash state that hashes nothing: the floor keeps the chain hash alone."""

    __slots__ = ()

    def copy(self) -> _NoLeaf:
        return self

    def update(self, data: bytes) -> None:
        return None

    def digest(self) -> bytes:
        return _ZERO


def _chain_only(decision: Any, gate_input: str) -> RowHasher:
    """The row hashing of the store before the seal: the chain hash only (the leaf state hashes nothing; the
    serialisation is shared, and its one extra SHA-256 update of the row's head bytes stays in the floor)."""
    real = leaf_module.row_hasher(decision, gate_input)
    return RowHasher(real.spans, _NoLeaf(), real.chain_state)


_ZERO = bytes(32)


@contextlib.contextmanager
def seal_switched_off() -> Iterator[None]:
    """The store without its seal: rows chained as before (one serialisation, one SHA-256, in the appending
    thread), no leaf hash, no tree nodes, no tree read at the start of a transaction. Only for this benchmark's
    floor."""
    saved = (plan_module.row_hasher, CompactRange.extend, seal_module.tree_is_built, seal_module.frontier_at)

    def no_nodes(self: CompactRange, leaves: Any, *, min_level: int = 0) -> list[Any]:
        return []

    plan_module.row_hasher = _chain_only  # type: ignore[assignment]
    CompactRange.extend = no_nodes  # type: ignore[method-assign]
    seal_module.tree_is_built = lambda *args: True  # type: ignore[assignment]
    seal_module.frontier_at = lambda *args: CompactRange()  # type: ignore[assignment]
    try:
        yield
    finally:
        (
            plan_module.row_hasher,
            CompactRange.extend,
            seal_module.tree_is_built,
            seal_module.frontier_at,
        ) = saved  # type: ignore[assignment,method-assign]


@contextlib.contextmanager
def authorship_switched_off() -> Iterator[None]:
    """The signed append as it was before spec 9.1 (issue 19), for this benchmark's side-by-side figure: no rule 1
    or rule 2 checks, no writer state file read, locked or replaced. Only for the floor of part 5."""
    saved = (append_module.check_signed_head, append_module.check_state, WriterState.locked, WriterState.save,
             WriterState.prepare, append_module.own_committed)

    @contextlib.contextmanager
    def no_lock(self: WriterState) -> Iterator[WriterState]:
        yield self

    def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    def matched(*args: Any, **kwargs: Any) -> Authorised:
        return Authorised(0)

    append_module.check_signed_head = matched  # type: ignore[assignment]
    append_module.check_state = nothing  # type: ignore[assignment]
    WriterState.locked = no_lock  # type: ignore[assignment,method-assign]
    WriterState.save = nothing  # type: ignore[method-assign]
    WriterState.prepare = nothing  # type: ignore[method-assign]
    append_module.own_committed = nothing  # type: ignore[assignment]
    try:
        yield
    finally:
        (
            append_module.check_signed_head,
            append_module.check_state,
            WriterState.locked,
            WriterState.save,
            WriterState.prepare,
            append_module.own_committed,
        ) = saved  # type: ignore[assignment,method-assign]


def record_batches(path: Path, count: int, key: SignerKey | None) -> float:
    """Seconds to record `count` gates in batches of `BATCH` with one store object (gate generation excluded)."""
    batches = [gates(start, min(BATCH, count - start)) for start in range(0, count, BATCH)]
    state = path.with_name(path.name + ".writer-state") if key is not None else None
    started = time.perf_counter()
    with BudgetStore.open(path, signing_key=key, writer_state=state) as store:
        for batch in batches:
            store.record_many(batch)
    return time.perf_counter() - started


def record_singles(
    sealed: Path, plain: Path, start: int, calls: int, key: SignerKey
) -> tuple[list[float], list[float]]:
    """Latencies (s) of `calls` single record() calls into each store, each its own transaction, the two stores
    taking turns call by call (so load from elsewhere falls on both alike)."""
    lines = gates(start, calls)
    with_seal: list[float] = []
    without: list[float] = []
    state = sealed.with_name(sealed.name + ".writer-state")
    with BudgetStore.open(sealed, signing_key=key, writer_state=state) as first:
        with seal_switched_off():
            second = BudgetStore.open(plain)
        try:
            for line in lines:
                began = time.perf_counter()
                first.record(line)
                with_seal.append(time.perf_counter() - began)
                with seal_switched_off():
                    began = time.perf_counter()
                    second.record(line)
                    without.append(time.perf_counter() - began)
        finally:
            second.close()
    return with_seal, without


def record_signed_singles(folder: Path, calls: int, key: SignerKey) -> tuple[list[float], list[float]]:
    """Latencies (s) of `calls` signed single record() calls with spec 9.1 (state file in the store's folder, not
    fsynced) and without it (the signed append before issue 19), into two stores of a few hundred rows, taking
    turns call by call."""
    now, before = folder / "authorship.db", folder / "pre-authorship.db"
    for path in (now, before):
        with BudgetStore.open(path, signing_key=key, writer_state=folder / f"{path.stem}.state") as store:
            store.record_many(gates(0, 300))
    lines = gates(300, calls)
    with_rules: list[float] = []
    without: list[float] = []
    first = BudgetStore.open(now, signing_key=key, writer_state=folder / f"{now.stem}.state")
    second = BudgetStore.open(before, signing_key=key, writer_state=folder / f"{before.stem}.state")
    try:
        for line in lines:
            began = time.perf_counter()
            first.record(line)
            with_rules.append(time.perf_counter() - began)
            with authorship_switched_off():
                began = time.perf_counter()
                second.record(line)
                without.append(time.perf_counter() - began)
    finally:
        first.close()
        second.close()
    return with_rules, without


def timed(function: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    value = function(*args, **kwargs)
    return value, time.perf_counter() - started


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1_000_000, help="rows to record (default 1,000,000)")
    parser.add_argument("--calls", type=int, default=2_000, help="single record() calls (default 2,000)")
    parser.add_argument("--proofs", type=int, default=200, help="prove/verify_proof calls timed (default 200)")
    parser.add_argument("--repeat", type=int, default=1, help="record_many rounds, best kept (default 1)")
    parser.add_argument("--audits", type=int, default=2, help="audit rounds per side, best kept (default 2)")
    parser.add_argument("--keep", action="store_true", help="keep the stores (their paths are printed)")
    parser.add_argument("--dir", type=Path, default=None, help="folder for the stores (default: a temp folder)")
    args = parser.parse_args(argv)
    folder = args.dir or Path(tempfile.mkdtemp(prefix="compute-budget-bench-seal-"))
    folder.mkdir(parents=True, exist_ok=True)
    key = generate_signer("bench-writer")
    count = args.count
    sealed, plain = folder / "sealed.db", folder / "plain.db"
    print(f"bench_seal: {count:,} rows in batches of {BATCH:,}; {args.calls:,} single records; folder {folder}")

    # 1. record_many, with the seal and without, alternating rounds.
    best_sealed = best_plain = float("inf")
    for round_number in range(args.repeat):
        for path in (sealed, plain):
            for leftover in folder.glob(path.name + "*"):
                leftover.unlink()
        order = [("sealed", sealed), ("plain", plain)]
        if round_number % 2:
            order.reverse()
        for name, path in order:
            if name == "sealed":
                seconds = record_batches(path, count, key)
                best_sealed = min(best_sealed, seconds)
            else:
                with seal_switched_off():
                    seconds = record_batches(path, count, None)
                best_plain = min(best_plain, seconds)
            _say(f"  round {round_number + 1}: {name} record_many {count / seconds:,.0f} rows/s ({seconds:.1f} s)")
    ratio = best_plain / best_sealed
    print(
        f"record_many  project (tree + signing) {count / best_sealed:,.0f} rows/s ({best_sealed:.1f} s) | "
        f"floor (no seal) {count / best_plain:,.0f} rows/s ({best_plain:.1f} s) | ratio {ratio:.3f} "
        f"(goal >= {GOAL_APPEND_RATIO:.2f}: {'met' if ratio >= GOAL_APPEND_RATIO else 'MISSED'})"
    )
    sealed_bytes, plain_bytes = db_bytes(sealed), db_bytes(plain)
    per_million = 1_000_000 / count
    print(
        f"disk, batches  sealed {sealed_bytes / 2**20:,.1f} MiB, plain {plain_bytes / 2**20:,.1f} MiB: extra "
        f"{(sealed_bytes - plain_bytes) * per_million / 2**20:,.2f} MiB per million rows "
        f"({(sealed_bytes - plain_bytes) / count:.1f} bytes a row)"
    )

    # 2. single record() calls: latency and disk per row.
    before_sealed, before_plain = db_bytes(sealed), db_bytes(plain)  # closed stores: no WAL left beside them
    single_sealed, single_plain = record_singles(sealed, plain, count, args.calls, key)
    grown_sealed, grown_plain = db_bytes(sealed) - before_sealed, db_bytes(plain) - before_plain
    median_sealed, median_plain = statistics.median(single_sealed), statistics.median(single_plain)
    print(
        f"record()     project median {_ms(median_sealed)}, p99 "
        f"{_ms(sorted(single_sealed)[int(len(single_sealed) * 0.99)])} | floor median "
        f"{_ms(median_plain)} | ratio {median_plain / median_sealed:.3f}"
    )
    print(
        f"disk, single records  sealed +{grown_sealed / args.calls:,.0f} bytes a row, plain "
        f"+{grown_plain / args.calls:,.0f}: extra {(grown_sealed - grown_plain) / args.calls * 1_000_000 / 2**20:,.0f} "
        "MiB per million rows (one signed checkpoint per row)"
    )

    # 3. prove and verify_proof on the sealed store.
    total = count + args.calls
    with BudgetStore.open(sealed, readonly=True) as store:
        rng = random.Random(10)
        wanted = sorted(rng.sample(range(1, total + 1), min(args.proofs, total)))
        ids = {}
        with store.snapshot() as snapshot:
            for seq in wanted:
                link = snapshot.link_at(seq)
                assert link is not None
                ids[seq] = link[2]
    prove_times, verify_times = [], []
    verifier = key.verifier()
    for seq in wanted:
        bundle, seconds = timed(prove, ids[seq], sealed)
        prove_times.append(seconds)
        text = bundle.to_json()
        result, seconds = timed(verify_proof, text, [verifier])
        assert result.valid, result.message
        verify_times.append(seconds)
    prove_median, verify_median = statistics.median(prove_times), statistics.median(verify_times)
    print(
        f"prove        median {_ms(prove_median)}, max {_ms(max(prove_times))} over {len(wanted)} rows "
        f"(goal < {GOAL_PROVE_MS:.0f} ms: {'met' if prove_median * 1000 < GOAL_PROVE_MS else 'MISSED'})"
    )
    print(
        f"verify_proof median {_ms(verify_median)}, max {_ms(max(verify_times))} "
        f"(goal < {GOAL_VERIFY_MS:.0f} ms: {'met' if verify_median * 1000 < GOAL_VERIFY_MS else 'MISSED'})"
    )

    # 4. audit with a trusted key against without, alternating.
    plain_audit = trusted_audit = float("inf")
    for round_number in range(args.audits):
        sides = [("without", ()), ("trusted", (verifier,))]
        if round_number % 2:
            sides.reverse()
        for name, keys in sides:
            report, seconds = timed(audit, sealed, trusted_keys=keys)
            assert report.clean, report.findings[:3]
            if name == "trusted":
                assert report.attested_size == total
                trusted_audit = min(trusted_audit, seconds)
            else:
                plain_audit = min(plain_audit, seconds)
            _say(f"  audit round {round_number + 1}: {name} {total / seconds:,.0f} rows/s ({seconds:.1f} s)")
    audit_ratio = plain_audit / trusted_audit
    print(
        f"audit        project (--trusted-key) {total / trusted_audit:,.0f} rows/s ({trusted_audit:.1f} s) | "
        f"floor (no key) {total / plain_audit:,.0f} rows/s ({plain_audit:.1f} s) | ratio {audit_ratio:.3f} "
        f"(goal >= {GOAL_AUDIT_RATIO:.2f}: {'met' if audit_ratio >= GOAL_AUDIT_RATIO else 'MISSED'})"
    )
    # 5. spec 9.1 (issue 19): a signed record() with the writer rules and its state file against the signed
    # append before them, and record_many of BATCH gates the same way.
    rules, pre_rules = record_signed_singles(folder, args.calls, key)
    extra = statistics.median(rules) - statistics.median(pre_rules)
    print(
        f"signed record() with spec 9.1 median {_ms(statistics.median(rules))} | before 9.1 median "
        f"{_ms(statistics.median(pre_rules))} | extra {_ms(extra)} "
        f"(goal <= {GOAL_AUTHORSHIP_EXTRA_MS:.1f} ms: "
        f"{'met' if extra * 1000 <= GOAL_AUTHORSHIP_EXTRA_MS else 'MISSED'})"
    )
    batch = min(count, BATCH)
    best_rules = best_pre = float("inf")
    for round_number in range(2):
        sides = ["rules", "pre"] if round_number % 2 == 0 else ["pre", "rules"]
        for side in sides:
            path = folder / f"batch-{side}-{round_number}.db"
            if side == "rules":
                best_rules = min(best_rules, record_batches(path, batch, key))
            else:
                with authorship_switched_off():
                    best_pre = min(best_pre, record_batches(path, batch, key))
    batch_ratio = best_pre / best_rules
    print(
        f"record_many({batch:,}) signed, with spec 9.1 {batch / best_rules:,.0f} rows/s | before "
        f"{batch / best_pre:,.0f} rows/s | ratio {batch_ratio:.3f} "
        f"(goal >= {GOAL_AUTHORSHIP_BATCH_RATIO:.2f}: "
        f"{'met' if batch_ratio >= GOAL_AUTHORSHIP_BATCH_RATIO else 'MISSED'})"
    )
    if args.keep:
        print(f"kept: {sealed} {plain}")
    elif args.dir is None:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
