"""How a store keeps its Merkle tree: perfect-subtree nodes of `TILE_LEVEL` and above are stored, those below are
recomputed from the rows of their tile. Pure: the store hands in functions that read its nodes and leaves.

A tile is the perfect subtree of ``2**TILE_LEVEL`` (256) leaves; storing only the nodes above tiles keeps the
tree's cost on appends and disk near nothing (one node per 128 rows), and any node below a tile is at most 255
hashes away from its tile's leaves, which are one indexed range of at most 256 rows. So a proof reads at most
two tiles of rows and O(log n) stored nodes, never the table.
"""

from __future__ import annotations

from collections.abc import Callable

from compute_budget.core.log.merkle import CompactRange, MemoryTree
from compute_budget.errors import MerkleError

TILE_LEVEL = 8
TILE_SIZE = 1 << TILE_LEVEL

NodeFetcher = Callable[[int, int], bytes | None]
"""(level, index) -> the stored hash of that perfect node, or None when it is not stored."""
LeafFetcher = Callable[[int, int], list[bytes]]
"""(first leaf index, count) -> the leaf hashes of those rows, in order (fewer when rows are missing)."""


def _is_count(value: object) -> bool:
    return type(value) is int and value >= 0


class TiledTree:
    """A `merkle.NodeReader` over the first `size` leaves of a store's tree (see the module docstring)."""

    __slots__ = ("_fetch_leaves", "_fetch_node", "_nodes", "_tile_level", "_tiles", "size")

    def __init__(
        self, size: int, fetch_node: NodeFetcher, fetch_leaves: LeafFetcher, *, tile_level: int = TILE_LEVEL
    ) -> None:
        """A reader of the tree of `size` leaves; `tile_level` is fixed by the store (a parameter for tests)."""
        if not _is_count(size):
            raise MerkleError(f"tree size must be a non-negative integer, got {size!r}")
        self.size = size
        self._fetch_node = fetch_node
        self._fetch_leaves = fetch_leaves
        self._tile_level = tile_level
        self._nodes: dict[tuple[int, int], bytes] = {}
        self._tiles: dict[int, MemoryTree] = {}

    def node(self, level: int, index: int) -> bytes:
        """The hash of perfect node (`level`, `index`); `MerkleError` when it lies outside the tree or is missing."""
        if not (_is_count(level) and _is_count(index) and (index + 1) << level <= self.size):
            raise MerkleError(f"no node at level {level!r}, index {index!r} in a tree of size {self.size}")
        if level >= self._tile_level:
            key = (level, index)
            found = self._nodes.get(key)
            if found is None:
                found = self._fetch_node(level, index)
                if found is None:
                    raise MerkleError(f"stored tree node (level {level}, index {index}) is missing")
                self._nodes[key] = found
            return found
        shift = self._tile_level - level
        tile = self._tile(index >> shift)
        return tile.node(level, index - ((index >> shift) << shift))

    def _tile(self, number: int) -> MemoryTree:
        """The tree of one tile's leaves (the last tile may be partial), read once."""
        tile = self._tiles.get(number)
        if tile is None:
            first = number << self._tile_level
            count = min(1 << self._tile_level, self.size - first)
            leaves = self._fetch_leaves(first, count)
            if len(leaves) != count:
                raise MerkleError(
                    f"rows {first + 1}..{first + count} should give {count} leaves, got {len(leaves)}: rows are missing"
                )
            if len(self._tiles) >= 4:
                self._tiles.clear()
            tile = self._tiles[number] = MemoryTree(leaves)
        return tile


def due_tiles(size: int, n: int, day: int) -> range:
    """The full tiles of a tree of `size` leaves that a look-back of `n` (spec 9.9.7) re-checks on day number
    `day`: every tile t with t mod n == day mod n. Over n consecutive days every full tile is due once."""
    if not (_is_count(size) and type(n) is int and n >= 1 and type(day) is int):
        raise MerkleError(f"no look-back slice for size {size!r}, n {n!r}, day {day!r}")
    return range(day % n, size >> TILE_LEVEL, n)


def root_of_tiles(tiles: CompactRange, partial: CompactRange) -> bytes:
    """The root of the tree whose full tiles' hashes were appended to `tiles` (each as if a leaf), followed by the
    leaf hashes of its last, partial tile in `partial`: a tile is a perfect, aligned subtree, so the tree's frontier
    is the tiles' frontier followed by the partial tile's."""
    if partial.size >= TILE_SIZE:
        raise MerkleError(f"a partial tile holds fewer than {TILE_SIZE} leaves, not {partial.size}")
    size = (tiles.size << TILE_LEVEL) + partial.size
    return CompactRange.from_hex(size, [item.hex() for item in (*tiles.hashes, *partial.hashes)]).root()
