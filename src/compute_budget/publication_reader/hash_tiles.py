"""The published tree as the audit reads it: a `NodeReader` whose every node comes from the tile that holds it
(the core's `tile_at` and `hash_in_tile`), NOT authenticated on the way up as `core.log.tile_reader.TileNodeReader`
does for a proof. The audit recomputes every node from the entries and holds each tile hash against it, so a tile
that does not hash to its parent is a finding naming its rows, and a publication rewritten to match edited entries
still reaches the check of the checkpoint's root (`checkpoint_mismatch`), where an authenticating reader would
stop at the first tile. A few tiles are kept per level, so memory stays flat in the log's size."""

from __future__ import annotations

from collections.abc import Callable

from compute_budget.core.log.tile_reader import tile_at
from compute_budget.core.log.tiles import Tile, hash_in_tile
from compute_budget.errors import MerkleError

_KEPT_PER_LEVEL = 4

TileSource = Callable[[Tile], bytes]
"""Tile -> its bytes, checked to be 32 per hash of its width."""


class PublishedTree:
    """The nodes of the first `size` leaves of a publication of `published` leaves, read from its tiles."""

    __slots__ = ("_published", "_read_tile", "_tiles", "size")

    def __init__(self, size: int, published: int, read_tile: TileSource) -> None:
        """A reader of the first `size` leaves (size <= published): a node lies in the tile of the published tree."""
        if not 0 <= size <= published:
            raise MerkleError(f"no tree of size {size} in a publication of {published} entries")
        self.size = size
        self._published = published
        self._read_tile = read_tile
        self._tiles: dict[Tile, bytes] = {}

    def node(self, level: int, index: int) -> bytes:
        """The hash of perfect node (`level`, `index`); `MerkleError` when it lies outside the tree."""
        if not (type(level) is int and type(index) is int and level >= 0 and index >= 0
                and (index + 1) << level <= self.size):
            raise MerkleError(f"no node at level {level!r}, index {index!r} in a tree of size {self.size}")
        tile = tile_at(self._published, level, index)
        data = self._tiles.get(tile)
        if data is None:
            if sum(1 for kept in self._tiles if kept.level == tile.level) >= _KEPT_PER_LEVEL:
                self._tiles = {kept: value for kept, value in self._tiles.items() if kept.level != tile.level}
            data = self._tiles[tile] = self._read_tile(tile)
        return hash_in_tile(tile, data, level, index)
