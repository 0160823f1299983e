"""The files of a published tree (publication_writer/layout.py) against the core's tiles of a MemoryTree over the same
leaves, on trees large enough for level-1 and level-2 tiles (an in-memory stand-in for the store's snapshot)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest

from compute_budget.core.leaf import leaf_input
from compute_budget.core.log.merkle import MemoryTree
from compute_budget.core.log.tiles import new_tiles
from compute_budget.errors import EntryTooLong, StoreDamaged
from compute_budget.publication_writer.layout import TreeBuilder, superseded
from tests.publishing_helpers import expected_files


def _row(seq: int) -> tuple[Any, ...]:
    """A row of 17 values and a chain hash: the layout reads only its seq and its leaf input."""
    return (seq, f"budget-{seq}", *(f"v{seq}-{column}" for column in range(15)), "0" * 64)


@functools.cache
def _tree(size: int) -> tuple[tuple[tuple[Any, ...], ...], tuple[bytes, ...], MemoryTree]:
    """Rows 1..`size`, their leaf inputs and their tree (made once per size: the larger trees take seconds)."""
    rows = tuple(_row(seq) for seq in range(1, size + 1))
    entries = tuple(leaf_input(row[:17]) for row in rows)
    return rows, entries, MemoryTree.from_leaves(entries)


class _Rows:
    """What `TreeBuilder` reads of a snapshot, over rows in memory: rows by seq range, stored nodes (heights 8, 16,
    ...) from a MemoryTree. `stored_nodes` False: none are stored (the tree is recomputed from the rows)."""

    def __init__(self, size: int, *, stored_nodes: bool = True) -> None:
        rows, entries, self.tree = _tree(size)
        self.rows, self.entries = list(rows), list(entries)
        self.stored_nodes = stored_nodes
        self.rows_read = 0
        self.nodes_read = 0

    def rows_between(self, low: int, high: int, *, batch_rows: int = 2000) -> Iterator[list[tuple[Any, ...]]]:
        while low < high:
            batch = self.rows[low : min(low + batch_rows, high)]
            self.rows_read += len(batch)
            yield batch
            low += batch_rows

    def nodes_at(self, level: int, first: int, last: int) -> Iterator[tuple[int, str]]:
        if not self.stored_nodes:
            return
        for index in range(first, last + 1):
            if (index + 1) << level <= self.tree.size:
                self.nodes_read += 1
                yield index, self.tree.node(level, index).hex()


def _build(rows: _Rows, old: int, new: int) -> tuple[dict[str, bytes], TreeBuilder]:
    builder = TreeBuilder(rows, old, new)  # type: ignore[arg-type]
    return {item.path: item.data for item in builder.files()}, builder


@pytest.mark.parametrize("size", [0, 1, 255, 256, 257, 600, 65_536, 70_000])
def test_a_first_publish_is_every_tile_of_the_tree(size: int) -> None:
    """From size 0, the files are exactly C2SP's tiles and bundles of the tree (the core's, from a MemoryTree), and
    the partial tiles give the RFC 6962 root."""
    rows = _Rows(size)
    files, builder = _build(rows, 0, size)
    assert files == expected_files(rows.entries, size)
    assert builder.root() == rows.tree.root()


@pytest.mark.parametrize(
    ("old", "new"),
    [(1, 2), (255, 256), (256, 257), (300, 600), (600, 600), (65_535, 65_536), (65_536, 70_000), (69_999, 70_000),
     (65_000, 70_000), (256, 70_000)],
)
def test_an_incremental_publish_is_the_new_tiles_only(old: int, new: int) -> None:
    """From a published size, the files are the core's `new_tiles(old, new)` (full tiles completed since, the partial
    ones of the new size) with their bundles, byte for byte the tree's, and still its root."""
    rows = _Rows(new)
    files, builder = _build(rows, old, new)
    everything = expected_files(rows.entries, new)
    wanted = {tile.path for tile in new_tiles(old, new)}
    wanted |= {tile.bundle_path for tile in new_tiles(old, new) if tile.level == 0}
    # A partial tile of the new size whose width did not change since `old` is given again (the caller finds it
    # already in DIR and leaves it); nothing else is.
    assert set(files) - wanted <= {path for path in everything if ".p/" in path}
    assert wanted <= set(files)
    assert all(files[path] == everything[path] for path in files)
    assert builder.root() == rows.tree.root()


def test_an_incremental_publish_reads_only_the_rows_since_and_one_partial_tile_per_level() -> None:
    """Rule 5: from 69,000 to 70,000 rows the builder reads the 1,000 new rows, the <= 255 rows of the level-0 tile
    they share with the published ones, and fewer than 256 stored nodes per level: not the 69,000 others."""
    rows = _Rows(70_000)
    _build(rows, 69_000, 70_000)
    assert rows.rows_read == 70_000 - (69_000 // 256) * 256
    assert rows.nodes_read < 2 * 256


def test_without_stored_nodes_the_tree_is_recomputed_from_the_rows() -> None:
    """A store whose tree is not built there: the nodes a level's open tile needs come from the rows, same bytes."""
    rows = _Rows(70_000, stored_nodes=False)
    files, builder = _build(rows, 65_900, 70_000)
    everything = expected_files(rows.entries, 70_000)
    assert all(files[path] == everything[path] for path in files)
    assert builder.root() == rows.tree.root()


def test_a_wrong_stored_node_does_not_give_the_root() -> None:
    """A stored node that is not its rows' (damage below the published size, which an incremental audit does not
    re-hash) makes the partial tiles miss the tree's root: the caller refuses to publish them."""
    rows = _Rows(1_000)
    original = rows.nodes_at

    def tampered(level: int, first: int, last: int) -> Iterator[tuple[int, str]]:
        for index, value in original(level, first, last):
            yield index, ("00" * 32 if index == 1 else value)

    rows.nodes_at = tampered  # type: ignore[method-assign]
    _, builder = _build(rows, 600, 1_000)
    assert builder.root() != rows.tree.root()


def test_a_missing_row_is_store_damage() -> None:
    rows = _Rows(600)
    del rows.rows[300]
    with pytest.raises(StoreDamaged, match="row 301"):
        _build(rows, 0, 600)


def test_an_entry_over_65535_bytes_names_its_seq_and_the_salvage() -> None:
    """Rule 4: the first row whose leaf input is over 65,535 bytes stops the build, naming `copy --through SEQ-1`."""
    rows = _Rows(300)
    rows.rows[260] = (261, "huge", "x" * 70_000, *rows.rows[260][3:])
    with pytest.raises(EntryTooLong, match=r"row 261's leaf input .* copy SRC DST --through 260") as raised:
        _build(rows, 0, 300)
    assert raised.value.seq == 261


def test_the_partial_tiles_a_full_tile_replaces() -> None:
    """From 300 to 600 rows level-0 tile 1 became full: its `.p` folders (tile and bundle) are superseded, and no
    other (level 1's partial tile stays partial)."""
    assert superseded(300, 600) == ["tile/0/001.p", "tile/entries/001.p"]
    assert superseded(600, 600) == []
    assert "tile/1/000.p" in superseded(65_000, 65_536)
