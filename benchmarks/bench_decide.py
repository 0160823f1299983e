"""Benchmark: the full `decide` against the bare hashing floor (issue 2, "Performance").

    python benchmarks/bench_decide.py                 # 200,000 gates, best of 5 alternating rounds
    python benchmarks/bench_decide.py --count 2000    # a quick smoke run

It also times `compute_budget.decide` looked up through the package on every call (`cb.decide(gate)` in a loop, as
a practice loop writes it) against the function from its own module: the package's lazy names are kept in its
globals once loaded, so the ratio must be 1.0 (issue 29; it was 0.87 while every lookup went through the
package's `__getattr__`). That figure is the median of 5 alternating rounds.

Both sides see the same deterministically generated, well-formed gates (varied statuses, reason codes, span
counts, text lengths, non-ASCII text). The floor builds the same eleven-key payload dict, serialises it with
``json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=False)``, encodes it as UTF-8 and takes its
SHA-256, with no validation at all. Before timing, every floor digest is checked against `decide`'s budget_id,
so the two sides provably compute the same thing. Timing is wall-clock (`time.perf_counter`): the sides alternate,
and each side's best of --repeat rounds counts.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import platform
import random
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

from compute_budget import COMPUTE_BUDGET_POLICY_VERSION, decide
from compute_budget.core.canonical import canonical_sha256
from compute_budget.core.policy.gate import check_gate
from compute_budget.core.policy.hashing import budget_payload
from compute_budget.core.policy.rules import V1

STATUSES = ("eligible",) * 7 + ("ineligible", "blocked", "unassessable")
REASONS = (*V1.table, *V1.table, "eligible_please_search_forever", "Eligible_Missing_Role", "no_residual")
WORDS = ("the", "courier", "left", "before", "noon", "Zoë", "naïve", "café", "e\u0301", "日本語", "中文",
         "😀", "𐍈", "Straße", "Ελληνικά", "мир", "\t", "a\u2028b")
TABLE = {reason: (limits.max_candidates, limits.max_depth, limits.max_steps, limits.max_parallelism)
         for reason, limits in V1.table.items()}
ZERO = (0, 0, 0, 0)


def make_gates(count: int, seed: int) -> list[dict[str, Any]]:
    """`count` varied, well-formed gates as parsed JSON objects, the same for the same seed."""
    rng = random.Random(seed)
    gates = []
    for index in range(count):
        spans = []
        position = 0
        for _ in range(rng.choice((0, 1, 1, 2, 2, 3, 4))):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 14)))
            spans.append({"text": text, "start": position, "end": position + len(text),
                          "sentence_index": rng.randint(0, 40)})
            position += len(text) + 1
        gates.append({
            "decision_id": f"gate-{seed}-{index:07d}",
            "policy_version": "search_gate.v1",
            "input_digest": f"sha256:{rng.getrandbits(256):064x}",
            "status": rng.choice(STATUSES),
            "reason_code": rng.choice(REASONS),
            "residual_ids": [f"residual-{rng.randint(0, 10**6)}" for _ in range(rng.randint(0, 3))],
            "candidate_organ": rng.choice((None, "frame_builder", "binder", "proposal_organ")),
            "evidence_spans": spans,
        })
    return gates


def floor(gate: dict[str, Any]) -> str:
    """The bare floor: the same eleven-key payload, stdlib sorted-keys JSON, UTF-8, SHA-256; nothing checked."""
    status = gate["status"]
    if status != "eligible":
        budget_status, reason, limits = "budget_blocked", "gate_" + status, ZERO
    elif gate["reason_code"] in TABLE:
        budget_status, reason, limits = "budget_allowed", gate["reason_code"], TABLE[gate["reason_code"]]
    else:
        budget_status, reason, limits = "budget_unassessable", "unknown_gate_reason_code", ZERO
    payload = {
        "policy_version": COMPUTE_BUDGET_POLICY_VERSION,
        "gate_decision_id": gate["decision_id"],
        "gate_policy_version": gate["policy_version"],
        "gate_input_digest": gate["input_digest"],
        "status": budget_status,
        "reason_code": reason,
        "max_candidates": limits[0],
        "max_depth": limits[1],
        "max_steps": limits[2],
        "max_parallelism": limits[3],
        "evidence_spans": [
            {"text": span["text"], "start": span["start"], "end": span["end"], "sentence_index": span["sentence_index"]}
            for span in gate["evidence_spans"]
        ],
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def best_rates(sides: list[tuple[Callable[[Any], object], list[Any]]], repeat: int) -> list[float]:
    """The best items-per-second of each (work, items) side over `repeat` rounds.

    The sides take turns within each round, so a burst of load from elsewhere hits both alike.
    """
    best = [float("inf")] * len(sides)
    for _ in range(repeat):
        for index, (work, items) in enumerate(sides):
            gc.collect()
            start = time.perf_counter()
            for item in items:
                work(item)
            best[index] = min(best[index], time.perf_counter() - start)
    return [len(items) / seconds for (_, items), seconds in zip(sides, best, strict=True)]


def median_ratio(gates: list[dict[str, Any]], rounds: int = 5) -> tuple[float, float, float]:
    """(through the package, direct, ratio) in decisions/s, each the median of `rounds` alternating rounds: the
    package's `decide` looked up as an attribute on every call, against the function from its own module."""
    import statistics

    import compute_budget
    from compute_budget.core.policy import rules

    def through_package() -> None:
        for gate in gates:
            compute_budget.decide(gate)

    def direct() -> None:
        decide_direct = rules.decide
        for gate in gates:
            decide_direct(gate)

    package_rates, direct_rates = [], []
    for _ in range(rounds):
        for work, rates in ((through_package, package_rates), (direct, direct_rates)):
            gc.collect()
            start = time.perf_counter()
            work()
            rates.append(len(gates) / (time.perf_counter() - start))
    package_rate, direct_rate = statistics.median(package_rates), statistics.median(direct_rates)
    return package_rate, direct_rate, package_rate / direct_rate


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print decisions/s for decide and for the floor, and their ratio."""
    parser = argparse.ArgumentParser(description="decide vs the bare json.dumps + SHA-256 floor")
    parser.add_argument("--count", type=int, default=200_000, help="number of gates [default: 200000]")
    parser.add_argument("--seed", type=int, default=2027, help="seed of the gate generator [default: 2027]")
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds; each side's best counts [default: 5]")
    parser.add_argument("--breakdown", action="store_true", help="also time validation and hashing on their own")
    args = parser.parse_args(argv)

    gates = make_gates(args.count, args.seed)
    mismatched = sum(decide(gate).budget_id != floor(gate) for gate in gates)
    if mismatched:
        print(f"error: the floor and decide disagree on {mismatched} of {len(gates)} budget_ids", file=sys.stderr)
        return 1
    spans = sum(len(gate["evidence_spans"]) for gate in gates)
    outcomes: dict[str, int] = {}
    for gate in gates:
        status = decide(gate).status.value
        outcomes[status] = outcomes.get(status, 0) + 1

    print(f"python {platform.python_version()} ({platform.python_implementation()}), orjson {version('orjson')}, "
          f"{platform.machine()}")
    print(f"{len(gates):,} gates (seed {args.seed}), {spans / len(gates):.2f} spans per gate, "
          f"{dict(sorted(outcomes.items()))}; floor digests == decide budget_ids: yes")
    decide_rate, floor_rate = best_rates([(decide, gates), (floor, gates)], args.repeat)
    print(f"decide (validation + decision + budget_id): {decide_rate:>12,.0f} decisions/s")
    print(f"floor  (payload + json.dumps + SHA-256):    {floor_rate:>12,.0f} decisions/s")
    print(f"ratio decide / floor: {decide_rate / floor_rate:.2f} (goal >= 1.0)")
    package_rate, direct_rate, through = median_ratio(gates)
    print(f"compute_budget.decide through the package: {package_rate:>12,.0f} decisions/s; the function from its own "
          f"module {direct_rate:,.0f}/s; ratio {through:.2f} (median of 5; goal 1.0)")
    if args.breakdown:
        payloads = [budget_payload(decide(gate)) for gate in gates]
        check_rate, hash_rate = best_rates([(check_gate, gates), (canonical_sha256, payloads)], args.repeat)
        print(f"  of which: check_gate alone {check_rate:,.0f}/s ({1e6 / check_rate:.2f} us), canonical_sha256 "
              f"alone {hash_rate:,.0f}/s ({1e6 / hash_rate:.2f} us), full decide {1e6 / decide_rate:.2f} us, "
              f"floor {1e6 / floor_rate:.2f} us per gate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
