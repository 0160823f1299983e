"""C2SP tlog-tiles in the core (spec section 10): tile paths, hash tiles and their parents, against tests/vectors."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute_budget.core.log.entry_bundle import decode_bundle, encode_bundle
from compute_budget.core.log.merkle import MemoryTree, leaf_hash, root_from_leaf_hashes
from compute_budget.core.log.tiles import (
    MAX_TREE_SIZE,
    TILE_HEIGHT,
    TILE_WIDTH,
    Tile,
    check_against_parent,
    check_tile,
    handover_path,
    hash_in_tile,
    new_tiles,
    parent_tile,
    parse_bundle_path,
    parse_tile_path,
    tile_bytes,
    tile_hash,
    tiles_for_size,
)
from compute_budget.errors import ArgumentTypeError, BadTilePath, MalformedTile, TileError, TileMismatch

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[2] / "vectors" / "tiles.json").read_text(encoding="utf-8")
)
LARGE = VECTORS["large_tree"]


@pytest.fixture(scope="module")
def large_tree() -> MemoryTree:
    """The 70,000-leaf tree of the vectors (leaf i = ``leaf i``): level-0, level-1 and level-2 tiles."""
    return MemoryTree.from_leaves(b"leaf %d" % index for index in range(LARGE["size"]))


def _hashes(data: bytes) -> list[bytes]:
    return [data[offset : offset + 32] for offset in range(0, len(data), 32)]


# Paths.


@pytest.mark.parametrize("case", VECTORS["paths"], ids=lambda case: case["path"])
def test_tile_paths_are_the_c2sp_ones(case: dict[str, Any]) -> None:
    """A tile renders to its C2SP path (N in x-prefixed 3-digit groups, `.p/W` when partial) and parses back."""
    tile = Tile(case["level"], case["index"], case["width"])
    assert tile.path == case["path"]
    assert parse_tile_path(case["path"]) == tile
    if case["bundle_path"] is not None:
        assert tile.bundle_path == case["bundle_path"]
        assert parse_bundle_path(case["bundle_path"]) == tile


def test_the_examples_of_the_c2sp_document_and_go() -> None:
    """Index 1234067 is x001/x234/067 (C2SP); Go's Tile{L: 4, N: 1234067, W: 1} is .../067.p/1 without the H."""
    assert Tile(0, 1234067).path == "tile/0/x001/x234/067"
    assert Tile(4, 1234067, 1).path == "tile/4/x001/x234/067.p/1"
    assert Tile(0, 123456789).bundle_path == "tile/entries/x123/x456/789"


@pytest.mark.parametrize("path", VECTORS["bad_tile_paths"])
def test_a_tile_path_not_in_canonical_form_is_refused(path: str) -> None:
    """Leading zeros, `.p/256`, `.p/0`, levels above 63, Go's `tile/H/...` form, non-ASCII digits ...: refused."""
    with pytest.raises(BadTilePath) as caught:
        parse_tile_path(path)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("path", VECTORS["bad_bundle_paths"])
def test_a_bundle_path_not_in_canonical_form_is_refused(path: str) -> None:
    """`tile/entries/...` paths are held to the same canonical form, and a hash tile path is not a bundle's."""
    with pytest.raises(BadTilePath):
        parse_bundle_path(path)


def test_a_refused_path_is_named_in_one_line() -> None:
    """The message names the path so a reader of an audit knows which file is wrong."""
    with pytest.raises(BadTilePath) as caught:
        parse_tile_path("tile/0/x000/001")
    assert caught.value.path == "tile/0/x000/001"
    assert str(caught.value).startswith("tile/0/x000/001: ")


def test_a_path_that_is_not_text_is_a_type_error() -> None:
    with pytest.raises(ArgumentTypeError):
        parse_tile_path(b"tile/0/000")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("level", "index", "width"),
    [(0, 0, 0), (0, 0, 257), (64, 0, 1), (0, -1, 1), (7, 1, 256), (63, 1, 1), (0, (1 << 64) // 256, 256)],
)
def test_tiles_no_log_can_have_are_refused(level: int, index: int, width: int) -> None:
    """Width 1..256, level 0..63, and a start inside a 64-bit tree size."""
    with pytest.raises(TileError):
        Tile(level, index, width)


def test_a_bool_is_not_a_tile_coordinate() -> None:
    with pytest.raises(ArgumentTypeError):
        Tile(True, 0)  # type: ignore[arg-type]


def test_only_a_level_0_tile_has_a_bundle() -> None:
    with pytest.raises(TileError):
        _ = Tile(1, 0).bundle_path


tile_coordinates = st.integers(0, 63).flatmap(
    lambda level: st.tuples(
        st.just(level), st.integers(0, (MAX_TREE_SIZE >> (TILE_HEIGHT * (level + 1)))), st.integers(1, TILE_WIDTH)
    )
)


@settings(max_examples=300, deadline=None)
@given(tile_coordinates)
def test_every_tile_path_parses_back_to_its_tile(coordinates: tuple[int, int, int]) -> None:
    tile = Tile(*coordinates)
    assert parse_tile_path(tile.path) == tile
    if tile.level == 0:
        assert parse_bundle_path(tile.bundle_path) == tile


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="tile/entris0123456789x.p", max_size=30))
def test_a_path_that_parses_is_canonical(path: str) -> None:
    """Whatever text is accepted renders back to exactly itself (so two paths never name one tile)."""
    for parse, render in ((parse_tile_path, "path"), (parse_bundle_path, "bundle_path")):
        try:
            tile = parse(path)
        except BadTilePath:
            continue
        assert getattr(tile, render) == path


# The tiles of a tree and of an update.


def test_the_c2sp_example_of_a_tree_of_70000() -> None:
    """C2SP: 273 full level-0 tiles, one of width 112, one full level-1 tile, one of width 17, one level-2 of 1."""
    tiles = tiles_for_size(70_000)
    assert [tile for tile in tiles if tile.partial] == [Tile(0, 273, 112), Tile(1, 1, 17), Tile(2, 0, 1)]
    assert [tile for tile in tiles if not tile.partial] == [Tile(0, index) for index in range(273)] + [Tile(1, 0)]


def test_a_tree_of_256_is_a_full_tile_and_a_level_1_tile_of_width_1() -> None:
    """The second example of C2SP."""
    assert tiles_for_size(256) == [Tile(0, 0), Tile(1, 0, 1)]
    assert tiles_for_size(0) == []


@pytest.mark.parametrize("case", LARGE["sizes"] + VECTORS["rfc6962_trees"], ids=lambda case: str(case["size"]))
def test_the_tiles_of_a_size_are_the_vectors(case: dict[str, Any]) -> None:
    assert [tile.path for tile in tiles_for_size(case["size"])] == case["tiles"]


@pytest.mark.parametrize("case", VECTORS["new_tiles"], ids=lambda case: f"{case['old_size']}-{case['new_size']}")
def test_the_new_tiles_between_two_sizes_are_the_vectors(case: dict[str, Any]) -> None:
    assert [tile.path for tile in new_tiles(case["old_size"], case["new_size"])] == case["tiles"]


def test_no_tiles_from_a_larger_size_to_a_smaller_one() -> None:
    with pytest.raises(TileError):
        new_tiles(10, 9)
    with pytest.raises(ArgumentTypeError):
        new_tiles(0, -1)


sizes = st.integers(0, 1 << 22)  # up to 64 level-1 tiles: listing 2**64 leaves' tiles takes forever


@settings(max_examples=100, deadline=None)
@given(sizes)
def test_a_tree_has_the_tiles_c2sp_defines(size: int) -> None:
    """Level l has floor(s / 256**(l+1)) full tiles and a partial of floor(s / 256**l) mod 256 hashes, if any."""
    tiles = tiles_for_size(size)
    level = 0
    while size >> (TILE_HEIGHT * level):
        count = size >> (TILE_HEIGHT * level)
        at_level = [tile for tile in tiles if tile.level == level]
        assert [tile for tile in at_level if not tile.partial] == [Tile(level, i) for i in range(count // 256)]
        assert [tile.width for tile in at_level if tile.partial] == ([count % 256] if count % 256 else [])
        level += 1
    assert all(tile.level < level for tile in tiles)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 1 << 20), st.integers(0, 1 << 20))
def test_an_update_adds_exactly_the_missing_full_tiles_and_the_new_partials(a: int, b: int) -> None:
    """Full tiles at `old` plus the full ones `new_tiles` lists are the full tiles at `new`, with no repeat; the
    partial ones listed are the partial tiles at `new` (those on a level that changed)."""
    old, new = min(a, b), max(a, b)
    added = new_tiles(old, new)
    full_old = {tile for tile in tiles_for_size(old) if not tile.partial}
    full_added = [tile for tile in added if not tile.partial]
    assert len(set(full_added)) == len(full_added)
    assert not full_old & set(full_added)
    assert full_old | set(full_added) == {tile for tile in tiles_for_size(new) if not tile.partial}
    assert {tile for tile in added if tile.partial} <= set(tiles_for_size(new)) - set(tiles_for_size(old))


# Hash tiles.


@pytest.mark.parametrize("case", VECTORS["rfc6962_trees"], ids=lambda case: str(case["size"]))
def test_the_tiles_of_the_rfc6962_trees(case: dict[str, Any]) -> None:
    """The leaf hashes of the RFC 6962 leaves, in one partial tile whose Merkle Tree Hash is the RFC root."""
    leaves = [bytes.fromhex(item) for item in json.loads(
        (Path(__file__).resolve().parents[2] / "vectors" / "rfc6962.json").read_text(encoding="utf-8")
    )["leaves_hex"]]
    tree = MemoryTree.from_leaves(leaves[: case["size"]])
    for tile in tiles_for_size(case["size"]):
        data = tile_bytes(tree, tile)
        assert data.hex() == case["tile_bytes"][tile.path]
        assert data == b"".join(leaf_hash(leaf) for leaf in leaves[: case["size"]])
        assert root_from_leaf_hashes(_hashes(data)).hex() == case["root"]


def test_full_tiles_hash_as_the_vectors_say(large_tree: MemoryTree) -> None:
    """Every full tile of the 70,000-leaf tree has the recorded SHA-256 and tile hash (its node one level up)."""
    for tile in tiles_for_size(LARGE["size"]):
        if tile.partial:
            continue
        data = tile_bytes(large_tree, tile)
        assert hashlib.sha256(data).hexdigest() == LARGE["full_tiles"][tile.path]["sha256"], tile.path
        assert tile_hash(tile, data).hex() == LARGE["full_tiles"][tile.path]["hash"], tile.path
        assert tile_hash(tile, data) == large_tree.node(tile.node_level + TILE_HEIGHT, tile.index)
    assert len(LARGE["full_tiles"]) == 274


@pytest.mark.parametrize("case", LARGE["sizes"], ids=lambda case: str(case["size"]))
def test_partial_tiles_and_roots_are_the_vectors(large_tree: MemoryTree, case: dict[str, Any]) -> None:
    assert large_tree.root(case["size"]).hex() == case["root"]
    for path, digest in case["tile_bytes"].items():
        assert hashlib.sha256(tile_bytes(large_tree, parse_tile_path(path))).hexdigest() == digest, path


def test_tile_hashes_are_subtree_roots_computed_from_the_leaves() -> None:
    """Independently of the tree's nodes: level-1 hash i is the root of leaves 256·i .. 256·i+255, and a level-2
    hash the root of 65,536 leaves."""
    size = 65_536 + 300
    hashes = [leaf_hash(b"leaf %d" % index) for index in range(size)]
    tree = MemoryTree(hashes)
    level1 = _hashes(tile_bytes(tree, Tile(1, 0)))
    assert level1 == [root_from_leaf_hashes(hashes[256 * i : 256 * (i + 1)]) for i in range(256)]
    assert tile_bytes(tree, Tile(2, 0, 1)) == root_from_leaf_hashes(hashes[:65_536])
    assert tile_bytes(tree, Tile(1, 1, 1)) == root_from_leaf_hashes(hashes[65_536 : 65_536 + 256])


def test_a_tile_of_the_wrong_length_is_refused_naming_it() -> None:
    tile = Tile(0, 3, 5)
    assert check_tile(tile, bytes(160)) == bytes(160)
    for length in (0, 159, 161, 8192):
        with pytest.raises(MalformedTile) as caught:
            check_tile(tile, bytes(length))
        assert caught.value.path == "tile/0/003.p/5"
        assert f"is {length} bytes" in str(caught.value)


def test_the_parents_of_tiles_in_a_tree_of_70000() -> None:
    """Go's tileParent: the parent's width is what the tree of that size has at the level above."""
    assert parent_tile(Tile(0, 0), 70_000) == Tile(1, 0)
    assert parent_tile(Tile(0, 256), 70_000) == Tile(1, 1, 17)
    assert parent_tile(Tile(1, 0), 70_000) == Tile(2, 0, 1)
    assert parent_tile(Tile(0, 272), 70_000) == Tile(1, 1, 17)
    for orphan, size in ((Tile(0, 273, 112), 70_000), (Tile(0, 273), 70_000), (Tile(0, 0), 255)):
        with pytest.raises(TileError):
            parent_tile(orphan, size)


def test_every_full_tile_hashes_to_its_entry_in_its_parent(large_tree: MemoryTree) -> None:
    size = LARGE["size"]
    for tile in tiles_for_size(size):
        if not tile.partial:
            parent = parent_tile(tile, size)
            data = tile_bytes(large_tree, tile)
            assert check_against_parent(tile, data, parent, tile_bytes(large_tree, parent)) == data


@pytest.mark.parametrize("flipped", [0, 4095, 8191])
def test_a_flipped_byte_in_a_tile_breaks_its_parent_link(large_tree: MemoryTree, flipped: int) -> None:
    """One changed byte anywhere in a full tile: `TileMismatch` naming that tile's path."""
    tile, parent = Tile(0, 260), Tile(1, 1, 17)
    data = bytearray(tile_bytes(large_tree, tile))
    data[flipped] ^= 1
    with pytest.raises(TileMismatch) as caught:
        check_against_parent(tile, bytes(data), parent, tile_bytes(large_tree, parent))
    assert caught.value.path == "tile/0/260"
    assert "tile/1/001.p/17" in str(caught.value)


def test_a_tile_is_checked_only_against_its_own_parent(large_tree: MemoryTree) -> None:
    with pytest.raises(TileError):
        check_against_parent(Tile(0, 0), tile_bytes(large_tree, Tile(0, 0)), Tile(1, 1, 17), bytes(17 * 32))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 8), st.data())
def test_a_node_within_a_tile_is_the_trees_node(depth: int, data: st.DataObject) -> None:
    """Go's HashFromTile: any aligned 2**k run of a tile's hashes hashes to the tree's node k levels up."""
    tree = _TREE_1000
    tile = Tile(0, 1, 256) if depth == 8 else Tile(0, 3, 1000 - 768)
    index = data.draw(st.integers(0, (tile.width >> depth) - 1)) + (tile.first_node >> depth)
    assert hash_in_tile(tile, tile_bytes(tree, tile), depth, index) == tree.node(depth, index)


_TREE_1000 = MemoryTree.from_leaves(b"%d" % index for index in range(1000))


def test_a_node_outside_a_tile_is_refused() -> None:
    tile = Tile(0, 3, 232)
    data = tile_bytes(_TREE_1000, tile)
    for level, index in ((0, 767), (0, 1000), (8, 3), (9, 1), (3, 125), (1, 500)):
        with pytest.raises(TileError):
            hash_in_tile(tile, data, level, index)


def test_a_partial_tile_contributes_no_hash_to_a_parent() -> None:
    with pytest.raises(TileError):
        tile_hash(Tile(0, 0, 255), bytes(255 * 32))


# Entry bundles against the tiles (the bundle format itself: test_tiles_entry_bundle.py).


def test_the_bundles_of_the_vectors(large_tree: MemoryTree) -> None:
    """Each recorded bundle decodes to the tree's leaves, whose hashes are its level-0 tile."""
    leaves = [b"leaf %d" % index for index in range(LARGE["size"])]
    for path, digest in LARGE["full_bundles"].items():
        tile = parse_bundle_path(path)
        data = encode_bundle(tile, leaves[tile.first_node : tile.first_node + tile.width])
        assert hashlib.sha256(data).hexdigest() == digest, path
    for case in VECTORS["rfc6962_trees"]:
        for path, hex_bytes in case["bundle_bytes"].items():
            entries = decode_bundle(parse_bundle_path(path), bytes.fromhex(hex_bytes))
            assert b"".join(leaf_hash(entry) for entry in entries).hex() == case["tile_bytes"][
                path.replace("tile/entries/", "tile/0/")
            ]


def test_handover_paths_are_the_size_in_decimal_and_the_key_id_in_hex() -> None:
    assert handover_path(3, 0xABC) == "handover/3/00000abc"
    assert handover_path(1234567, 0xFFFFFFFF) == "handover/1234567/ffffffff"
    for size, key_hash in ((-1, 1), (1, -1), (1, 1 << 32), (True, 1)):
        with pytest.raises(ArgumentTypeError):
            handover_path(size, key_hash)
