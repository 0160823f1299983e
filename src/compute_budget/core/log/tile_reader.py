"""A `NodeReader` over published tiles (C2SP tlog-tiles), as Go's `tlog.TileHashReader`: proofs and roots from a
publication, with no database.

Pure: the tiles come from a `TileSource` (a dict of `Tile` -> bytes, or anything that fetches on `[tile]`). No hash
is used before its tile is authenticated: the partial tiles of the tree (those holding its frontier) must hash to
the checkpoint's root, and a full tile must hash to its entry in its parent tile, itself authenticated first. Only
the tiles a request needs are read, each at most once (level-0 tiles are kept only a few at a time, so reading
every leaf keeps memory at 1/256 of the log's hashes).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol

from compute_budget.core.log.merkle import EMPTY_ROOT, HASH_SIZE, root_from_reader
from compute_budget.core.log.tiles import (
    MAX_TILE_LEVEL,
    MAX_TREE_SIZE,
    TILE_HEIGHT,
    TILE_WIDTH,
    Tile,
    check_against_parent,
    check_tile,
    hash_in_tile,
    parent_tile,
)
from compute_budget.errors import ArgumentTypeError, MerkleError, TileMismatch, TileMissing

# Level-0 tiles are read once each by a full audit: keeping a few covers the proofs that share one.
_LEAF_TILES_KEPT = 8


class TileSource(Protocol):
    """Where tile bytes come from: ``source[tile]`` is the tile's bytes, `KeyError` if the publication lacks it."""

    def __getitem__(self, tile: Tile, /) -> bytes:
        """The bytes published for `tile` (not yet checked)."""
        ...


def tile_at(size: int, level: int, index: int) -> Tile:
    """The tile holding tree node (`level`, `index`) in the tree of `size` leaves, with the width it has there;
    `MerkleError` if that tree has no such tile."""
    tile_level = level // TILE_HEIGHT
    tile_index = (index << (level - TILE_HEIGHT * tile_level)) >> TILE_HEIGHT
    hashes = size >> (TILE_HEIGHT * tile_level)
    if tile_index * TILE_WIDTH >= hashes or tile_level > MAX_TILE_LEVEL:
        raise MerkleError(f"no tile holds node ({level}, {index}) in a tree of size {size}")
    return Tile(tile_level, tile_index, min(TILE_WIDTH, hashes - tile_index * TILE_WIDTH))


def partial_tiles(size: int) -> list[Tile]:
    """The partial tiles of the tree of `size` leaves, level 0 first: those holding its frontier nodes."""
    tiles, level = [], 0
    while size >> (TILE_HEIGHT * level):
        count = size >> (TILE_HEIGHT * level)
        if count % TILE_WIDTH:
            tiles.append(Tile(level, count // TILE_WIDTH, count % TILE_WIDTH))
        level += 1
    return tiles


class _UncheckedFrontier:
    """Reads frontier nodes from the (not yet authenticated) partial tiles, only to recompute the root."""

    def __init__(self, size: int, tiles: dict[Tile, bytes]) -> None:
        self._size, self._tiles = size, tiles

    def node(self, level: int, index: int) -> bytes:
        """The node's hash from its partial tile, unchecked."""
        tile = tile_at(self._size, level, index)
        return hash_in_tile(tile, self._tiles[tile], level, index)


class TileNodeReader:
    """The perfect nodes of the tree of `size` leaves and `root` (a verified checkpoint's), read from `source`.

    `node` raises `TileMissing` for a tile the source lacks, `MalformedTile` for one of the wrong length and
    `TileMismatch` for one that does not hash to its parent (or, for the partial tiles, to the root), each naming
    the tile's path; `MerkleError` for a node the tree does not have.
    """

    def __init__(self, size: int, root: bytes, source: TileSource) -> None:
        """A reader of the tree (`size`, `root`); nothing is read until a node is asked for."""
        if type(size) is not int or not 0 <= size <= MAX_TREE_SIZE:
            raise ArgumentTypeError(f"tile reader: tree size must be an integer 0 .. 2**64-1, got {size!r}")
        if not (isinstance(root, bytes) and len(root) == HASH_SIZE):
            raise ArgumentTypeError("tile reader: the root must be 32 bytes")
        self._size, self._root, self._source = size, root, source
        self._checked: dict[Tile, bytes] = {}
        self._leaf_tiles: OrderedDict[Tile, bytes] = OrderedDict()
        self._read: list[Tile] = []

    @property
    def size(self) -> int:
        """The tree size the reader serves."""
        return self._size

    @property
    def tiles_read(self) -> tuple[Tile, ...]:
        """Every tile fetched from the source so far, in the order fetched (each at most once unless evicted)."""
        return tuple(self._read)

    def node(self, level: int, index: int) -> bytes:
        """The hash of the perfect subtree of ``2**level`` leaves from leaf ``index * 2**level``, authenticated."""
        if not (type(level) is int and type(index) is int and level >= 0 and index >= 0):
            raise MerkleError(f"no node at level {level!r}, index {index!r}")
        if (index + 1) << level > self._size:
            raise MerkleError(f"no node at level {level}, index {index} in a tree of size {self._size}")
        tile = tile_at(self._size, level, index)
        return hash_in_tile(tile, self.tile_data(tile), level, index)

    def root(self) -> bytes:
        """The tree's root, recomputed from the (authenticated) tiles: the checkpoint's root, or an error."""
        return EMPTY_ROOT if self._size == 0 else root_from_reader(self, self._size)

    def tile_data(self, tile: Tile) -> bytes:
        """The authenticated bytes of `tile`, a tile of this tree at its width here (an entry bundle's level-0
        tile, to check the bundle's leaf hashes against)."""
        if tile != tile_at(self._size, tile.node_level, tile.first_node):
            raise MerkleError(f"{tile.path} is not a tile of the tree of size {self._size}")
        known = self._checked.get(tile) or self._leaf_tiles.get(tile)
        if known is not None:
            return known
        if tile.partial:
            self._check_frontier()
            return self._checked[tile]
        parent = parent_tile(tile, self._size)
        data = check_against_parent(tile, self._fetch(tile), parent, self.tile_data(parent))
        self._keep(tile, data)
        return data

    def _fetch(self, tile: Tile) -> bytes:
        """The source's bytes for `tile`, of the right length; `TileMissing` / `MalformedTile` naming it."""
        self._read.append(tile)
        try:
            data = self._source[tile]
        except KeyError:
            raise TileMissing("is not in the publication", path=tile.path) from None
        return check_tile(tile, data)

    def _keep(self, tile: Tile, data: bytes) -> None:
        """Cache an authenticated tile: every tile above level 0, the last few of level 0."""
        if tile.level:
            self._checked[tile] = data
            return
        self._leaf_tiles[tile] = data
        if len(self._leaf_tiles) > _LEAF_TILES_KEPT:
            self._leaf_tiles.popitem(last=False)

    def _check_frontier(self) -> None:
        """Authenticate the tree's partial tiles together: their frontier nodes must hash to the root."""
        partial = {tile: self._fetch(tile) for tile in partial_tiles(self._size)}
        if root_from_reader(_UncheckedFrontier(self._size, partial), self._size) != self._root:
            paths = ", ".join(tile.path for tile in sorted(partial, reverse=True))
            raise TileMismatch("do not hash to the checkpoint's root (one of them is wrong)", path=paths)
        self._checked.update(partial)
