"""Benchmark: the nightly `audit --tiles --since` of a publication with no new rows, against the full `audit
--tiles` of it, in one run (spec 11.3, issue 36 item 3).

Every `audit --tiles` reads every hash tile of every level and holds each against the level above and the root
(32 bytes a row); only the full audit also reads and re-derives every entry. Goal: the `--since` audit, reading
every tile, takes at most 10% of the full audit's time. A signed store of N rows (``--rows``, default 1,000,000) is
built and published into a folder, then each audit runs alone in a fresh interpreter (jobs=1), counting the bytes
it reads of the hash tiles and of the entry bundles.

Run: ``python benchmarks/bench_audit_tiles_since.py --rows 1000000`` (``--rows 100000`` for a quick run);
``--keep DIR`` keeps the store and publication (a second run with the same DIR and rows reuses them).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_audit_tiles import ORIGIN, build

from compute_budget.core.log.tiles import tiles_for_size

GOAL_RATIO = 0.10

# Runs in a fresh interpreter: one audit alone, counting what it reads of the publication's files.
_CHILD = """
import json, sys, time
from compute_budget.auditor.request import AuditRequest
from compute_budget.auditor.scan import run_audit
from compute_budget.publication_reader import fetch
from compute_budget.publication_reader.snapshot import PublicationTarget

read = {"tiles": 0, "tile_bytes": 0, "bundles": 0, "bundle_bytes": 0}
plain_get = fetch.FolderTransport.get

def counted(self, path, limit):
    data = plain_get(self, path, limit)
    kind = "bundle" if path.startswith("tile/entries/") else "tile" if path.startswith("tile/") else None
    if kind is not None and data is not None:
        read[kind + "s"] += 1
        read[kind + "_bytes"] += len(data)
    return data

fetch.FolderTransport.get = counted
location, key, origin, since = sys.argv[1:5]
began = time.perf_counter()
report = run_audit(AuditRequest(PublicationTarget(location), trusted_keys=(key,), expected_origin=origin, jobs=1,
                                since=open(since).read() if since != "-" else None))
print(json.dumps({"rows": report.rows_checked, "clean": report.clean, "seconds": time.perf_counter() - began,
                  **read}))
"""


def measure(location: Path, key: str, since: Path | None) -> dict[str, float]:
    """One audit in a child interpreter: rows, clean, seconds, and the tiles and bundles it read (count, bytes)."""
    done = subprocess.run([sys.executable, "-c", _CHILD, str(location), key, ORIGIN, str(since or "-")],
                          capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout))


def _line(name: str, result: dict[str, float]) -> str:
    return (f"{name:<22} {result['seconds']:8.2f} s  {int(result['rows']):>9,} rows re-derived  "
            f"{int(result['tiles']):>6,} tiles ({result['tile_bytes'] / 1e6:7.1f} MB)  "
            f"{int(result['bundles']):>6,} bundles ({result['bundle_bytes'] / 1e6:7.1f} MB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keep", type=Path, help="build in (and keep, and reuse) this folder")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-audit-tiles-since-"))
    folder.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    key_file = folder / "verifier.key"
    if not (folder / "published" / "checkpoint").exists() or not key_file.exists():
        key_file.write_text(build(folder, args.rows))
    key = key_file.read_text()
    print(f"built and published {args.rows:,} rows in {time.perf_counter() - began:.1f} s ({folder})")
    since = folder / "since.checkpoint"  # last night's kept checkpoint: the publication has no new row since
    since.write_text((folder / "published" / "checkpoint").read_text())
    full = measure(folder / "published", key, None)
    nightly = measure(folder / "published", key, since)
    assert full["clean"]
    assert nightly["clean"]
    assert full["rows"] == args.rows
    assert nightly["rows"] == 0  # no new row: nothing above --since to re-derive
    every_tile = len(tiles_for_size(args.rows))
    assert nightly["tiles"] >= every_tile, (nightly["tiles"], every_tile)  # the whole tree, every night
    ratio = nightly["seconds"] / full["seconds"]
    print(_line("audit --tiles (full)", full))
    print(_line("audit --tiles --since", nightly))
    print(f"ratio since/full {ratio:.3f} ({'ok' if ratio <= GOAL_RATIO else 'MISSED'}: goal <= {GOAL_RATIO}); "
          f"every one of the {every_tile:,} tiles read by both")


if __name__ == "__main__":
    main()
