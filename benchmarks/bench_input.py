"""Benchmark: reading and deciding pathological input grows linearly (spec revision 2, rules 3.1.8 and section 7).

    python benchmarks/bench_input.py                      # 0.6, 1.2, 2.4 and 4.8 MB, best of 3 rounds
    python benchmarks/bench_input.py --sizes 0.1 0.2      # a quick smoke run
    python benchmarks/bench_input.py --cases open-lines   # 20,000 to 160,000 lines of "{" (slower: a bad line each)

Cases (each input is checked to read as expected before timing):

- unclosed: one value that never closes, every line of it ending in a bracket (the old reader parsed it again at
  every line: 7, 30 and 122 s for 0.6, 1.2 and 2.4 MB);
- deep: one line nested size/2 levels deep, "[[[...]]]" (a malformed gate under rule 3.1.8), and a 100,000-level
  text of its own;
- open-lines: lines of "{", each a cut-off record (the old reader read all the lines after each one again).

project: `read_gates` over the bytes, deciding every gate it yields (`decide_parsed`). floor: what any reader of
that input must do at least: split and decode the lines, plus one `json.loads` of a flat JSON array of the same
size. Timing is wall-clock (`time.perf_counter`), the sides alternate and each one's best of --repeat counts; the
figure to read is the ratio per size, which stays flat when the reader is linear.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import platform
import sys
import time
from collections.abc import Callable

from compute_budget.core.policy.lines import BadLine, GateLine, read_gates
from compute_budget.core.policy.parse import decide_parsed

CASES = ("unclosed", "deep", "open-lines")


def make_input(case: str, megabytes: float) -> bytes:
    """The input of `case`, about `megabytes` MB (open-lines: 20,000 lines per 0.6 MB asked for)."""
    size = int(megabytes * 1_000_000)
    if case == "unclosed":
        line = b"  , [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]\n"  # 70 bytes: 4.8 MB stays
        return b'{"a": [[0]\n' + line * (size // len(line))  # under the reader's bound of 100,000 lines
    if case == "deep":
        return b"[" * (size // 2) + b"]" * (size // 2) + b"\n"
    if case == "open-lines":
        return b"{\n" * int(20_000 * megabytes / 0.6)
    raise ValueError(case)


def project(data: bytes) -> int:
    """Read and decide every gate of `data`; the number of items read."""
    count = 0
    for item in read_gates(io.BytesIO(data)):
        if isinstance(item, GateLine):
            decide_parsed(item.parsed)
        count += 1
    return count


def floor_for(data: bytes) -> Callable[[], object]:
    """The floor for `data`: split and decode its lines, then parse a flat JSON array of the same size once."""
    flat = "[" + ",".join(["0"] * (len(data) // 2)) + "]"

    def floor() -> object:
        for line in io.BytesIO(data):
            line.decode("utf-8")
        return json.loads(flat)

    return floor


def check(case: str, data: bytes) -> None:
    """The input reads as the case says, or the benchmark would time the wrong thing."""
    items = list(read_gates(io.BytesIO(data)))
    if case == "unclosed":
        ok = len(items) == 1 and isinstance(items[0], BadLine) and "never closed" in items[0].message
    elif case == "deep":
        ok = len(items) == 1 and isinstance(items[0], GateLine) and items[0].parsed.too_deep
    else:
        ok = len(items) == data.count(b"\n") and all(isinstance(item, BadLine) for item in items)
    if not ok:
        raise SystemExit(f"error: the {case} input of {len(data):,} bytes did not read as expected")


def best_times(sides: list[Callable[[], object]], repeat: int) -> list[float]:
    """Each side's best wall-clock time over `repeat` rounds, the sides taking turns within a round."""
    best = [float("inf")] * len(sides)
    for _ in range(repeat):
        for index, side in enumerate(sides):
            start = time.perf_counter()
            side()
            best[index] = min(best[index], time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    """Time every case at every size; print project vs floor, their ratio, and the growth of each."""
    parser = argparse.ArgumentParser(description="read_gates + decide on pathological input vs a floor")
    parser.add_argument("--sizes", type=float, nargs="+", default=[0.6, 1.2, 2.4, 4.8], help="input sizes in MB")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=["unclosed", "deep"], help="which inputs")
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds; each side's best counts [default: 3]")
    args = parser.parse_args(argv)

    print(f"python {platform.python_version()} ({platform.python_implementation()}), {platform.machine()}")
    print(f"{'case':<11} {'input':>12} {'project s':>10} {'floor s':>9} {'ratio':>6} {'project s/MB':>13}")
    inputs = [(case, make_input(case, size)) for case in args.cases for size in args.sizes]
    if "deep" in args.cases:
        inputs.append(("deep", make_input("deep", 0.2)))  # the 100,000-level text
    growth: dict[str, list[tuple[int, float]]] = {}
    for case, data in inputs:
        check(case, data)
        project_time, floor_time = best_times([functools.partial(project, data), floor_for(data)], args.repeat)
        megabytes = len(data) / 1_000_000
        label = f"{len(data):,} B" if case != "deep" else f"{len(data) // 2:,} lvl"
        print(f"{case:<11} {label:>12} {project_time:>10.3f} {floor_time:>9.3f} {project_time / floor_time:>6.2f} "
              f"{project_time / megabytes:>13.3f}")
        growth.setdefault(case, []).append((len(data), project_time))
    for case, points in growth.items():
        points.sort()
        (small, small_time), (large, large_time) = points[0], points[-1]
        print(f"{case}: input x{large / small:.1f}, project time x{large_time / small_time:.1f} "
              "(linear: about the same factor)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
