"""The tiles of C2SP `tlog-tiles` (spec section 10): tile coordinates, their paths, and hash tiles.

Pure (no I/O). A tile at level L, index N, width W holds the W hashes of the tree nodes at height 8·L, indices
256·N .. 256·N+W-1, concatenated (32 bytes each): level 0 holds leaf hashes, a hash at level L+1 is the Merkle Tree
Hash of a *full* (256-wide) tile at level L. A partial tile (W < 256) is never hashed into the level above. The
tree is section 8's RFC 6962 tree, whose stored nodes are kept at this same height of 8.

Paths are relative to the log's prefix: ``tile/<L>/<N>[.p/<W>]`` for hash tiles, ``tile/entries/<N>[.p/<W>]`` for
the entry bundle that goes with the level-0 tile N (see `entry_bundle`). N is written in 3-digit groups, all but
the last prefixed with ``x`` (1234067 is ``x001/x234/067``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from compute_budget.core.log.merkle import HASH_SIZE, NodeReader, node_hash
from compute_budget.errors import ArgumentTypeError, BadTilePath, MalformedTile, TileError, TileMismatch

TILE_HEIGHT = 8
TILE_WIDTH = 1 << TILE_HEIGHT
MAX_TILE_LEVEL = 63
# C2SP checkpoints carry a uint64 tree size: no tile can start at or beyond it.
MAX_TREE_SIZE = (1 << 64) - 1

_TILE_PATH = re.compile(r"tile/(0|[1-9][0-9]?)/((?:x[0-9]{3}/)*[0-9]{3})(?:\.p/([1-9][0-9]{0,2}))?", re.ASCII)
_BUNDLE_PATH = re.compile(r"tile/entries/((?:x[0-9]{3}/)*[0-9]{3})(?:\.p/([1-9][0-9]{0,2}))?", re.ASCII)


def _is_count(value: object) -> bool:
    """True for a non-negative int (a bool is not a count)."""
    return type(value) is int and value >= 0


@dataclass(frozen=True, slots=True, order=True)
class Tile:
    """The tile at `level` (0..63) and `index` of that level, holding `width` (1..256) hashes; partial below 256."""

    level: int
    index: int
    width: int = TILE_WIDTH

    def __post_init__(self) -> None:
        """Refuse coordinates no C2SP log can have."""
        if not all(type(value) is int for value in (self.level, self.index, self.width)):
            raise ArgumentTypeError(f"tile: level, index and width must be integers, got {self!r}")
        if not 0 <= self.level <= MAX_TILE_LEVEL:
            raise TileError(f"tile: level {self.level} is not between 0 and {MAX_TILE_LEVEL}")
        if self.index < 0:
            raise TileError(f"tile: index {self.index} is negative")
        if not 1 <= self.width <= TILE_WIDTH:
            raise TileError(f"tile: width {self.width} is not between 1 and {TILE_WIDTH}")
        if self.start > MAX_TREE_SIZE:
            raise TileError(f"tile: level {self.level}, index {self.index} starts beyond a 64-bit tree size")

    @property
    def partial(self) -> bool:
        """True when the tile holds fewer than 256 hashes."""
        return self.width < TILE_WIDTH

    @property
    def node_level(self) -> int:
        """The height in the tree (8·level) of the nodes this tile holds."""
        return TILE_HEIGHT * self.level

    @property
    def first_node(self) -> int:
        """The index, at `node_level`, of the tile's first hash (256·index)."""
        return self.index * TILE_WIDTH

    @property
    def start(self) -> int:
        """The first leaf the tile spans: C2SP's start index, index·256**(level+1)."""
        return self.index << (TILE_HEIGHT * (self.level + 1))

    @property
    def path(self) -> str:
        """The C2SP path of this hash tile, ``tile/<L>/<N>[.p/<W>]``."""
        return f"tile/{self.level}/{_encode_index(self.index)}{self._suffix()}"

    @property
    def bundle_path(self) -> str:
        """The C2SP path of the entry bundle of this level-0 tile, ``tile/entries/<N>[.p/<W>]``."""
        if self.level != 0:
            raise TileError(f"{self.path}: only a level-0 tile has an entry bundle")
        return f"tile/entries/{_encode_index(self.index)}{self._suffix()}"

    def _suffix(self) -> str:
        """``.p/<W>`` for a partial tile, nothing for a full one."""
        return f".p/{self.width}" if self.partial else ""


def _encode_index(index: int) -> str:
    """N in 3-digit groups, all but the last prefixed with ``x`` (1234067 -> ``x001/x234/067``)."""
    groups = [f"{index % 1000:03d}"]
    index //= 1000
    while index:
        groups.append(f"x{index % 1000:03d}")
        index //= 1000
    return "/".join(reversed(groups))


def _decode_index(text: str) -> int:
    """The inverse of `_encode_index` for text the path patterns matched."""
    value = 0
    for group in text.split("/"):
        value = value * 1000 + int(group.removeprefix("x"))
    return value


def _canonical(path: str, parsed: Tile, rendered: str) -> Tile:
    """`parsed` if `path` is exactly its canonical form (no ``x000/`` lead group, no ``.p/256``)."""
    if rendered != path:
        raise BadTilePath(f"not the canonical form of {rendered}", path=path)
    return parsed


def _parse(pattern: re.Pattern[str], path: object, kind: str) -> re.Match[str]:
    """The match of a whole path, or `BadTilePath` (a non-string is refused the same way)."""
    if not isinstance(path, str):
        raise ArgumentTypeError(f"a {kind} path must be a string, got {type(path).__name__}")
    match = pattern.fullmatch(path)
    if match is None:
        shown = path if len(path) <= 80 else path[:77] + "..."
        raise BadTilePath(f"not a C2SP {kind} path", path=shown.replace("\n", " "))
    return match


def _tile_from(path: str, level: int, index_text: str, width_text: str | None) -> Tile:
    """The tile a matched path names, or `BadTilePath` for a level, width or index out of range."""
    width = int(width_text) if width_text is not None else TILE_WIDTH
    if level > MAX_TILE_LEVEL or (width_text is not None and width >= TILE_WIDTH):
        raise BadTilePath(f"level must be 0..{MAX_TILE_LEVEL} and a partial width 1..{TILE_WIDTH - 1}", path=path)
    try:
        return Tile(level, _decode_index(index_text), width)
    except TileError as error:
        raise BadTilePath(str(error), path=path) from None


def parse_tile_path(path: str) -> Tile:
    """The hash tile a C2SP path ``tile/<L>/<N>[.p/<W>]`` names; `BadTilePath` unless it is exactly canonical."""
    match = _parse(_TILE_PATH, path, "tile")
    tile = _tile_from(path, int(match[1]), match[2], match[3])
    return _canonical(path, tile, tile.path)


def parse_bundle_path(path: str) -> Tile:
    """The level-0 tile whose entry bundle ``tile/entries/<N>[.p/<W>]`` names; `BadTilePath` unless canonical."""
    match = _parse(_BUNDLE_PATH, path, "entry bundle")
    tile = _tile_from(path, 0, match[1], match[2])
    return _canonical(path, tile, tile.bundle_path)


HANDOVER_FOLDER = "handover"  # spec 11.1: beside `tile/`, one file per handover a publication carries
MAX_KEY_ID = (1 << 32) - 1


def handover_path(size: int, key_hash: int) -> str:
    """Where a publication keeps the handover of tree `size` by the retired key whose 4-byte key ID is `key_hash`
    (spec 11.1): ``handover/<size in decimal>/<key ID in 8 lowercase hex digits>``."""
    checked = _check_size(size, "handover size")
    if not _is_count(key_hash) or key_hash > MAX_KEY_ID:
        raise ArgumentTypeError(f"a key ID is a 32-bit non-negative integer, got {key_hash!r}")
    return f"{HANDOVER_FOLDER}/{checked}/{key_hash:08x}"


def _check_size(size: object, what: str) -> int:
    """`size` as a tree size (0 .. 2**64-1), or a typed error."""
    if not _is_count(size):
        raise ArgumentTypeError(f"{what} must be a non-negative integer, got {size!r}")
    assert isinstance(size, int)  # for mypy: _is_count checked it
    if size > MAX_TREE_SIZE:
        raise TileError(f"{what} {size} is beyond a 64-bit tree size")
    return size


def new_tiles(old_size: int, new_size: int) -> list[Tile]:
    """The tiles a tree of `new_size` has that one of `old_size` does not: at each level whose hash count grew,
    the full tiles completed since `old_size`, then the partial tile of `new_size` (if any); level 0 first.

    Go's `tlog.NewTiles` also lists every intermediate partial width; C2SP requires partial tiles only for sizes
    a checkpoint was made for, so only the one at `new_size` is listed.
    """
    old, new = _check_size(old_size, "old tree size"), _check_size(new_size, "new tree size")
    if old > new:
        raise TileError(f"no tiles from tree size {old} to the smaller size {new}")
    tiles: list[Tile] = []
    level = 0
    while new >> (TILE_HEIGHT * level):
        old_count, new_count = old >> (TILE_HEIGHT * level), new >> (TILE_HEIGHT * level)
        if new_count > old_count:
            first_full, end_full = old_count // TILE_WIDTH, new_count // TILE_WIDTH
            tiles.extend(Tile(level, index) for index in range(first_full, end_full))
            if new_count % TILE_WIDTH:
                tiles.append(Tile(level, end_full, new_count % TILE_WIDTH))
        level += 1
    return tiles


def tiles_for_size(size: int) -> list[Tile]:
    """Every tile of a tree of `size` leaves: all full tiles and the partial one of each level, level 0 first
    (a tree of 70,000 leaves: 273 full and one 112-wide tile at level 0, one full and a 17-wide at level 1, a
    1-wide at level 2). The level-0 ones are also the tree's entry bundles."""
    return new_tiles(0, size)


def tile_bytes(reader: NodeReader, tile: Tile) -> bytes:
    """The bytes of a hash tile: the `width` node hashes it holds, read from `reader`, concatenated."""
    level, first = tile.node_level, tile.first_node
    return b"".join(reader.node(level, first + offset) for offset in range(tile.width))


def check_tile(tile: Tile, data: bytes) -> bytes:
    """`data` if it can be the tile's bytes (exactly 32 per hash of its width); else `MalformedTile` naming it."""
    if not isinstance(data, bytes):
        raise ArgumentTypeError(f"{tile.path}: tile data must be bytes, got {type(data).__name__}")
    if len(data) != HASH_SIZE * tile.width:
        raise MalformedTile(
            f"is {len(data)} bytes, a tile of width {tile.width} is {HASH_SIZE * tile.width}", path=tile.path
        )
    return data


def _subtree_hash(hashes: list[bytes]) -> bytes:
    """The Merkle Tree Hash of a power-of-two count of node hashes, pairwise from the bottom."""
    while len(hashes) > 1:
        hashes = [node_hash(hashes[i], hashes[i + 1]) for i in range(0, len(hashes), 2)]
    return hashes[0]


def hash_in_tile(tile: Tile, data: bytes, level: int, index: int) -> bytes:
    """The tree node (`level`, `index`) computed from the tile's (checked) bytes: a node at height 8·L .. 8·L+8
    whose whole subtree lies within the tile's hashes (Go's `HashFromTile`); `TileError` if it does not."""
    check_tile(tile, data)
    depth = level - tile.node_level if _is_count(level) else -1
    if not (_is_count(index) and 0 <= depth <= TILE_HEIGHT):
        raise TileError(f"node ({level!r}, {index!r}) is not at a height {tile.path} holds", path=tile.path)
    begin = (index << depth) - tile.first_node
    end = begin + (1 << depth)
    if begin < 0 or end > tile.width:
        raise TileError(f"node ({level}, {index}) is not within the {tile.width} hashes it holds", path=tile.path)
    return _subtree_hash([data[i * HASH_SIZE : (i + 1) * HASH_SIZE] for i in range(begin, end)])


def tile_hash(tile: Tile, data: bytes) -> bytes:
    """The hash a full tile contributes to its parent: the Merkle Tree Hash of its 256 hashes (the node at
    height 8·(level+1), index `index`). A partial tile has none (C2SP: it is never hashed into the level above)."""
    if tile.partial:
        raise TileError("a partial tile is never hashed into the level above", path=tile.path)
    return hash_in_tile(tile, data, tile.node_level + TILE_HEIGHT, tile.index)


def parent_tile(tile: Tile, size: int) -> Tile:
    """The tile one level up that holds `tile`'s hash in the tree of `size` leaves (Go's `tileParent`)."""
    if tile.partial:
        raise TileError("a partial tile has no parent", path=tile.path)
    hashes_above = _check_size(size, "tree size") >> (TILE_HEIGHT * (tile.level + 1))
    if tile.index >= hashes_above:
        raise TileError(f"is not complete in a tree of size {size}", path=tile.path)
    parent_index = tile.index // TILE_WIDTH
    return Tile(tile.level + 1, parent_index, min(TILE_WIDTH, hashes_above - parent_index * TILE_WIDTH))


def check_against_parent(tile: Tile, data: bytes, parent: Tile, parent_data: bytes) -> bytes:
    """`data` if the full tile hashes to the entry `parent` holds for it; else `TileMismatch` naming the tile
    (`MalformedTile` if either is of the wrong length)."""
    if parent.level != tile.level + 1 or parent.index != tile.index // TILE_WIDTH:
        raise TileError(f"{parent.path} is not the parent of {tile.path}", path=tile.path)
    expected = hash_in_tile(parent, parent_data, parent.node_level, tile.index)
    if tile_hash(tile, data) != expected:
        raise TileMismatch(f"does not hash to its entry in {parent.path}", path=tile.path)
    return data
