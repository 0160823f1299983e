"""The published tree as the audit reads it.

`check_tree` reads every hash tile of every level once (spec 11.3), each parent after its children, holds each
against the level above and the partial tiles against the verified checkpoint's root, and judges each tile on its
own: one that does not hash to its parent's proven value was edited (`published_mismatch` naming it), and where the
tiles below it give that value they prove what it should hold (`TreeVerdict.repaired`). Memory: a tile a level.

`PublishedTree` is a `NodeReader` whose every node comes from the tile that holds it (the core's `tile_at` and
`hash_in_tile`), NOT authenticated on the way up as `core.log.tile_reader.TileNodeReader` does for a proof: the
audit recomputes the tree from the entries it reads, so a publication rewritten to match edited entries still
reaches the check of the checkpoint's root (`checkpoint_mismatch`). A few tiles are kept per level."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from compute_budget.core.log.merkle import HASH_SIZE, root_from_reader
from compute_budget.core.log.tile_reader import partial_tiles, tile_at
from compute_budget.core.log.tiles import TILE_HEIGHT, Tile, hash_in_tile, tile_hash
from compute_budget.core.verify import Finding, FindingKind
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


# -- the whole tree, every tile (spec 11.3) ---------------------------------------------------------------------

Progress = Callable[[int, int], None]
LeafHashes = Callable[[Tile], bytes | None]
"""A level-0 tile -> the leaf hashes of its entry bundle (None when the bundle cannot be read)."""


@dataclass(slots=True)
class TreeVerdict:
    """What reading every hash tile of a publication found: `findings` (each edited tile, named); `repaired`, the
    content each edited tile should have where the tiles or entries below it prove it; `leaf_roots`, for each
    edited level-0 tile whose content nothing read proves, the hash its entries must give (its parent's value);
    the tiles and bytes read."""

    findings: list[Finding] = field(default_factory=list)
    repaired: dict[Tile, bytes] = field(default_factory=dict)
    leaf_roots: dict[int, bytes] = field(default_factory=dict)
    tiles: int = 0
    bytes: int = 0


class _Frontier:
    """The frontier nodes of a tree of `size` from its partial tiles (whatever they hold), to recompute a root."""

    def __init__(self, size: int, tiles: dict[Tile, bytes]) -> None:
        self._size, self._tiles = size, tiles

    def node(self, level: int, index: int) -> bytes:
        tile = tile_at(self._size, level, index)
        return hash_in_tile(tile, self._tiles[tile], level, index)


def _root(size: int, tiles: dict[Tile, bytes]) -> bytes:
    return root_from_reader(_Frontier(size, tiles), size)


class _Walk:
    """Every tile of the tree read once, each parent after its children (memory: one tile a level): a parent's hash
    that differs from its child's is kept, with the parent's content, for the judgement."""

    def __init__(self, size: int, read_tile: TileSource, on_progress: Progress | None) -> None:
        self.size, self._read, self._progress = size, read_tile, on_progress
        self.partial: dict[Tile, bytes] = {}
        self.mismatched: dict[Tile, tuple[bytes, bytearray]] = {}  # tile -> (published, with its children's hashes)
        self.verdict = TreeVerdict()

    def visit(self, tile: Tile) -> bytes:
        data = self._read(tile)
        self.verdict.tiles += 1
        self.verdict.bytes += len(data)
        if tile.level == 0 and self._progress is not None:
            self._progress(min(self.size, tile.start + tile.width), self.size)
        for offset in range(tile.width if tile.level else 0):
            child = Tile(tile.level - 1, tile.first_node + offset)
            got = tile_hash(child, self.visit(child))
            if got != data[HASH_SIZE * offset : HASH_SIZE * (offset + 1)]:
                derived = self.mismatched.setdefault(tile, (data, bytearray(data)))[1]
                derived[HASH_SIZE * offset : HASH_SIZE * (offset + 1)] = got
        if tile.partial:
            self.partial[tile] = data
        return data


def check_tree(size: int, root: bytes, read_tile: TileSource, leaf_hashes: LeafHashes,
               on_progress: Progress | None = None) -> TreeVerdict:
    """Read every tile of the published tree of `size` leaves and hold each against the level above it and the
    partial tiles against `root` (the verified checkpoint's), each tile judged on its own: one that does not hash to
    its parent's value (itself proven) was edited, whatever the tiles or entries below it say."""
    walk = _Walk(size, read_tile, on_progress)
    for tile in reversed(partial_tiles(size)):  # the roots of the tiles' forest, leftmost leaves first
        walk.visit(tile)
    if size and (walk.mismatched or _root(size, walk.partial) != root):
        _judge(walk, root, leaf_hashes)
    return walk.verdict


def _judge(walk: _Walk, root: bytes, leaf_hashes: LeafHashes) -> None:
    """Name the edited tiles, from the root down: the partial tiles first (together, against the root)."""
    verdict, size = walk.verdict, walk.size
    proven = dict(walk.partial)
    if _root(size, proven) != root:
        proven = {tile: bytes(walk.mismatched.get(tile, (data, data))[1]) for tile, data in walk.partial.items()}
        leaf = next((tile for tile in proven if tile.level == 0), None)
        if _root(size, proven) != root and leaf is not None:
            proven[leaf] = leaf_hashes(leaf) or proven[leaf]
        if _root(size, proven) != root:
            # Tiles rewritten together (to match edited entries): no tile stands out, the history changed.
            paths = ", ".join(tile.path for tile in sorted(walk.partial, reverse=True))
            verdict.findings.append(Finding(
                FindingKind.CHECKPOINT_MISMATCH, None, size,
                f"the published tiles give another tree root at size {size} than the checkpoint's ({paths} and the "
                "tiles and entries below them agree with each other): history was rewritten",
            ))
            return
        for tile, data in proven.items():
            if data != walk.partial[tile]:
                verdict.findings.append(_edited(tile, "the checkpoint's root", "below it do"))
                verdict.repaired[tile] = data
    for tile, data in sorted(proven.items(), reverse=True):
        _judge_children(walk, tile, data)


def _judge_children(walk: _Walk, tile: Tile, proven: bytes) -> None:
    """Below `tile`, whose content `proven` is proven: each child that does not hash to its value was edited."""
    entry = walk.mismatched.get(tile)
    if entry is None:
        return
    derived = entry[1]
    for offset in range(tile.width):
        cut = slice(HASH_SIZE * offset, HASH_SIZE * (offset + 1))
        if derived[cut] == proven[cut]:
            continue  # the child hashes to its proven value (`tile` itself was edited there)
        child, expected = Tile(tile.level - 1, tile.first_node + offset), proven[cut]
        below = walk.mismatched.get(child)
        if child.level == 0:
            walk.verdict.findings.append(_edited(child, tile.path, None))
            walk.verdict.leaf_roots[child.index] = expected
        elif below is not None and tile_hash(child, bytes(below[1])) == expected:
            walk.verdict.findings.append(_edited(child, tile.path, "below it do"))
            walk.verdict.repaired[child] = bytes(below[1])
            _judge_children(walk, child, bytes(below[1]))
        else:
            walk.verdict.findings.append(_edited(child, tile.path, "below it do not either"))


def _edited(tile: Tile, where: str, below: str | None) -> Finding:
    """The `published_mismatch` of a tile that does not hash to its proven value in `where`."""
    first, last = tile.start + 1, tile.start + (tile.width << (TILE_HEIGHT * tile.level))
    said = f"; the tiles {below}" if below is not None and tile.level else ""
    return Finding(
        FindingKind.PUBLISHED_MISMATCH, None, first,
        f"{tile.path} was edited: it does not hash to its value in {where} (rows {first}..{last}){said}; a "
        "proof through it fails until the publisher restores it",
    )
