"""A `NodeReader` over a published tree: every node of level 8k + r is hashed from the level-k tile that holds it
(r = 0: the tile's hash itself), as C2SP tlog-tiles defines tiles. Tiles are fetched when first needed and a few
are kept, so memory stays flat in the log's size."""

from __future__ import annotations

from collections.abc import Callable

from compute_budget.core.log.merkle import MemoryTree
from compute_budget.errors import MerkleError
from compute_budget.publication.layout import TILE_HEIGHT, tile_width

_KEPT_PER_LEVEL = 4

TileSource = Callable[[int, int, int], list[bytes]]
"""(level, tile number, width) -> the tile's hashes, checked to be `width` of them."""


class PublishedTree:
    """The nodes of the published tree of `size` leaves, read from its tiles (the partial ones of `size`)."""

    __slots__ = ("_published", "_read_tile", "_tiles", "size")

    def __init__(self, size: int, published: int, read_tile: TileSource) -> None:
        """A reader of the first `size` leaves of a publication of `published` leaves (size <= published)."""
        if not 0 <= size <= published:
            raise MerkleError(f"no tree of size {size} in a publication of {published} entries")
        self.size = size
        self._published = published
        self._read_tile = read_tile
        self._tiles: dict[tuple[int, int], MemoryTree] = {}

    def node(self, level: int, index: int) -> bytes:
        """The hash of perfect node (`level`, `index`); `MerkleError` when it lies outside the tree."""
        if not (type(level) is int and type(index) is int and level >= 0 and index >= 0
                and (index + 1) << level <= self.size):
            raise MerkleError(f"no node at level {level!r}, index {index!r} in a tree of size {self.size}")
        tile_level, height = divmod(level, TILE_HEIGHT)
        first = index << height  # the node's first hash in its tile level
        number = first >> TILE_HEIGHT
        tree = self._tile(tile_level, number)
        return tree.node(height, index - (number << (TILE_HEIGHT - height)))

    def _tile(self, level: int, number: int) -> MemoryTree:
        key = (level, number)
        tree = self._tiles.get(key)
        if tree is None:
            width = tile_width(self._published, level, number)
            if len([item for item in self._tiles if item[0] == level]) >= _KEPT_PER_LEVEL:
                self._tiles = {item: kept for item, kept in self._tiles.items() if item[0] != level}
            tree = self._tiles[key] = MemoryTree(self._read_tile(level, number, width))
        return tree
