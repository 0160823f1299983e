"""Publications for the publication reader's tests: `publish_store` runs the real `publish` (spec 10.1);
`write_publication` writes the tiles, bundles and checkpoint of any store with the core's tile functions alone,
for what `publish` rightly refuses (a store with findings) and for rewriting a publication as an attacker would
(`write_tiles`); `served_folder` serves a folder over loopback HTTP."""

from __future__ import annotations

import functools
import http.server
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from compute_budget.core.leaf import leaf_input
from compute_budget.core.log.cosignature import WitnessKey
from compute_budget.core.log.entry_bundle import encode_bundle
from compute_budget.core.log.merkle import MemoryTree
from compute_budget.core.log.note import VerifierKey
from compute_budget.core.log.tiles import tile_bytes, tiles_for_size
from compute_budget.publication_writer import PublishRequest, publish
from compute_budget.store import BudgetStore


def publish_store(
    target: str | os.PathLike[str], folder: Path, *keys: VerifierKey, witness_keys: tuple[WitnessKey, ...] = ()
) -> Path:
    """Publish the store at `target` into `folder` with `compute-budget publish` (its newest checkpoint signed by
    `keys`; with `witness_keys`, the newest all of them cosigned); `folder`."""
    outcome = publish(PublishRequest(str(folder), target, trusted_keys=keys, witness_keys=witness_keys, jobs=1))
    assert outcome.published, outcome.refusal or outcome.report
    return folder


def write_publication(target: str | os.PathLike[str], folder: Path, note: str | None = None) -> Path:
    """Publish every row of the store at `target` into `folder`, with `note` (default: its newest stored signed
    checkpoint, which must cover every row, with its stored cosignatures) as the checkpoint."""
    with BudgetStore.open(target, readonly=True) as store, store.snapshot() as snapshot:
        size = snapshot.max_seq()
        entries = [leaf_input(row[:17]) for batch in snapshot.rows_between(0, size) for row in batch]
        stored = snapshot.newest_covering(size, size)
        if note is None:
            assert stored is not None, "the store holds no signed checkpoint"
            assert stored.tree_size == size, "the store's newest signed checkpoint is not of its head"
            text = stored.note.split("\n\n", 1)[0] + "\n"
            note = stored.note + "".join(line for line in snapshot.cosignatures_of(text, size))
    write_tiles(folder, entries)
    (folder / "checkpoint").write_text(note)
    return folder


def write_tiles(folder: Path, entries: list[bytes]) -> None:
    """The hash tiles and entry bundles of the tree over `entries` (the core's tile functions)."""
    tree = MemoryTree.from_leaves(entries)
    for tile in tiles_for_size(len(entries)):
        _write(folder / tile.path, tile_bytes(tree, tile))
        if tile.level == 0:
            bundle = entries[tile.first_node : tile.first_node + tile.width]
            _write(folder / tile.bundle_path, encode_bundle(tile, bundle))


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


@contextmanager
def served_folder(folder: Path) -> Iterator[str]:
    """`folder` served by `http.server` on 127.0.0.1 (a static host, as the docs say); yields its URL."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    # a short poll: shutdown() waits for the loop to look (0.5 s by default, in every test's teardown)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return None
