"""Proofs and roots from published tiles (Go's TileHashReader): equal to the tree's, and no unchecked hash used."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute_budget.core.log.merkle import (
    EMPTY_ROOT,
    MemoryTree,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from compute_budget.core.log.tile_reader import TileNodeReader, partial_tiles, tile_at
from compute_budget.core.log.tiles import Tile, tile_bytes, tiles_for_size
from compute_budget.errors import MalformedTile, MerkleError, TileMismatch, TileMissing

SIZE = 70_000
TREE = MemoryTree.from_leaves(b"leaf %d" % index for index in range(SIZE))


class Publication:
    """The tiles of the first `size` leaves of TREE, made on demand; `KeyError` for any tile not published."""

    def __init__(self, size: int) -> None:
        self.tiles = set(tiles_for_size(size))
        self.changed: dict[Tile, bytes] = {}

    def __getitem__(self, tile: Tile) -> bytes:
        if tile not in self.tiles:
            raise KeyError(tile)
        return self.changed.get(tile) or tile_bytes(TREE, tile)

    def flip(self, tile: Tile, offset: int = 0) -> None:
        data = bytearray(self[tile])
        data[offset] ^= 0x80
        self.changed[tile] = bytes(data)


def reader(size: int, publication: Publication | None = None) -> TileNodeReader:
    return TileNodeReader(size, TREE.root(size), publication or Publication(size))


SIZES = [1, 2, 7, 255, 256, 257, 511, 512, 513, 1000, 65535, 65536, 65537, SIZE]


@pytest.mark.parametrize("size", SIZES)
def test_roots_and_proofs_from_tiles_are_the_trees(size: int) -> None:
    tiles = reader(size)
    assert tiles.root() == TREE.root(size)
    for index in {0, 1, size // 2, size - 256, size - 2, size - 1} - {-1, -2, -256}:
        if 0 <= index < size:
            assert inclusion_proof(tiles, index, size) == inclusion_proof(TREE, index, size)
    for old in {1, 255, 256, size // 3, size - 1}:
        if 1 <= old <= size:
            assert consistency_proof(tiles, old, size) == consistency_proof(TREE, old, size)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, SIZE), st.data())
def test_any_proof_from_tiles_verifies_against_the_checkpoint_root(size: int, data: st.DataObject) -> None:
    index = data.draw(st.integers(0, size - 1))
    old = data.draw(st.integers(1, size))
    tiles = reader(size)
    proof = inclusion_proof(tiles, index, size)
    assert proof == inclusion_proof(TREE, index, size)
    assert verify_inclusion(leaf_hash(b"leaf %d" % index), index, size, proof, TREE.root(size))
    consistency = consistency_proof(tiles, old, size)
    assert verify_consistency(old, size, TREE.root(old), TREE.root(size), consistency)


def test_a_proof_reads_only_the_tiles_it_needs() -> None:
    """Leaf 0 in 70,000: its level-0 and level-1 tiles, and the three partial tiles that authenticate them."""
    tiles = reader(SIZE)
    inclusion_proof(tiles, 0, SIZE)
    assert set(tiles.tiles_read) == {Tile(0, 0), Tile(1, 0), Tile(2, 0, 1), Tile(1, 1, 17), Tile(0, 273, 112)}
    assert len(tiles.tiles_read) == 5


def test_reading_every_leaf_reads_every_tile_once() -> None:
    tiles = reader(SIZE)
    assert [tiles.node(0, index) for index in range(SIZE)] == [TREE.node(0, index) for index in range(SIZE)]
    assert sorted(tiles.tiles_read) == sorted(tiles_for_size(SIZE))


@pytest.mark.parametrize(("tile", "offset"), [(Tile(0, 0), 0), (Tile(0, 0), 8191), (Tile(1, 0), 100)])
def test_a_full_tile_with_a_flipped_byte_is_named(tile: Tile, offset: int) -> None:
    publication = Publication(SIZE)
    publication.flip(tile, offset)
    with pytest.raises(TileMismatch) as caught:
        inclusion_proof(reader(SIZE, publication), 0, SIZE)
    assert caught.value.path == tile.path


def test_a_partial_tile_with_a_flipped_byte_fails_the_root() -> None:
    """The partial tiles are checked together against the root: the error names them all, the flipped one too."""
    publication = Publication(SIZE)
    publication.flip(Tile(1, 1, 17), 32 * 16)
    with pytest.raises(TileMismatch) as caught:
        reader(SIZE, publication).node(0, 5)
    assert caught.value.path == "tile/2/000.p/1, tile/1/001.p/17, tile/0/273.p/112"
    assert "checkpoint's root" in str(caught.value)


def test_a_tile_rewritten_with_its_parents_still_fails_at_the_root() -> None:
    """An edited leaf tile whose parent tiles were rewritten to match: caught where the chain meets the root."""
    edited = MemoryTree([b"\x01" * 32] + [TREE.node(0, i) for i in range(1, SIZE)])
    publication = Publication(SIZE)
    for tile in (Tile(0, 0), Tile(1, 0)):
        publication.changed[tile] = tile_bytes(edited, tile)
    with pytest.raises(TileMismatch) as caught:
        reader(SIZE, publication).node(0, 0)
    assert caught.value.path == "tile/1/000"
    publication.changed[Tile(2, 0, 1)] = tile_bytes(edited, Tile(2, 0, 1))
    with pytest.raises(TileMismatch, match="checkpoint's root"):
        reader(SIZE, publication).node(0, 0)


def test_a_checkpoint_root_the_tiles_do_not_reach_is_a_mismatch() -> None:
    with pytest.raises(TileMismatch):
        TileNodeReader(SIZE, TREE.root(SIZE - 1), Publication(SIZE)).root()


def test_a_missing_tile_is_named() -> None:
    publication = Publication(SIZE)
    publication.tiles.discard(Tile(0, 100))
    tiles = reader(SIZE, publication)
    assert tiles.node(0, 0) == TREE.node(0, 0)
    with pytest.raises(TileMissing) as caught:
        tiles.node(3, 100 * 32)
    assert caught.value.path == "tile/0/100"


def test_a_tile_of_the_wrong_length_is_named() -> None:
    publication = Publication(SIZE)
    publication.changed[Tile(0, 7)] = tile_bytes(TREE, Tile(0, 7))[:-1]
    with pytest.raises(MalformedTile) as caught:
        reader(SIZE, publication).node(0, 7 * 256)
    assert caught.value.path == "tile/0/007"


def test_nodes_outside_the_tree_are_refused() -> None:
    tiles = reader(1000)
    for level, index in ((0, 1000), (10, 0), (3, 125), (-1, 0)):
        with pytest.raises(MerkleError):
            tiles.node(level, index)
    with pytest.raises(MerkleError):
        tiles.tile_data(Tile(0, 3))  # in a tree of 1000 it is 232 wide


def test_the_empty_tree_reads_nothing() -> None:
    tiles = TileNodeReader(0, EMPTY_ROOT, Publication(0))
    assert tiles.root() == EMPTY_ROOT
    assert tiles.tiles_read == ()


def test_tile_at_and_partial_tiles() -> None:
    assert tile_at(SIZE, 0, 69_999) == Tile(0, 273, 112)
    assert tile_at(SIZE, 12, 16) == Tile(1, 1, 17)
    assert tile_at(SIZE, 16, 0) == Tile(2, 0, 1)
    assert partial_tiles(SIZE) == [Tile(0, 273, 112), Tile(1, 1, 17), Tile(2, 0, 1)]
    assert partial_tiles(65_536) == [Tile(2, 0, 1)]
