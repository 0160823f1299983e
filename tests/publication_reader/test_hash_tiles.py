"""`hash_tiles.check_tree` (spec 11.3): every tile of every level read once and held against the level above and
the root, each judged on its own, over tiles made with the core's tile functions."""

from __future__ import annotations

import hashlib

from compute_budget.core.log.merkle import MemoryTree
from compute_budget.core.log.tiles import Tile, tile_bytes, tile_hash, tiles_for_size
from compute_budget.core.verify import FindingKind
from compute_budget.publication_reader.hash_tiles import TreeVerdict, check_tree


def _tiles(size: int, salt: bytes = b"") -> tuple[dict[Tile, bytes], bytes]:
    tree = MemoryTree.from_leaves(salt + str(index).encode() for index in range(size))
    return {tile: tile_bytes(tree, tile) for tile in tiles_for_size(size)}, tree.root()


def _flip(data: bytes, at: int = 5) -> bytes:
    return data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :]


def _check(tiles: dict[Tile, bytes], size: int, root: bytes, leaves: bytes | None = None) -> TreeVerdict:
    return check_tree(size, root, tiles.__getitem__, lambda tile: leaves)


def test_a_whole_tree_is_read_once_and_is_clean() -> None:
    tiles, root = _tiles(600)
    read: list[Tile] = []
    progress: list[tuple[int, int]] = []

    def source(tile: Tile) -> bytes:
        read.append(tile)
        return tiles[tile]

    verdict = check_tree(600, root, source, lambda tile: None, lambda done, total: progress.append((done, total)))
    assert verdict.findings == []
    assert sorted(read) == sorted(tiles)  # every tile of every level, each once
    assert (verdict.tiles, verdict.bytes) == (len(tiles), sum(len(data) for data in tiles.values()))
    assert progress == [(256, 600), (512, 600), (600, 600)]


def test_an_edited_level_0_tile_is_named_and_its_entries_get_its_parents_value() -> None:
    tiles, root = _tiles(600)
    honest = tiles[Tile(0, 1)]
    tiles[Tile(0, 1)] = _flip(honest)
    verdict = _check(tiles, 600, root)
    assert [(item.kind, item.seq) for item in verdict.findings] == [(FindingKind.PUBLISHED_MISMATCH, 257)]
    assert verdict.findings[0].detail.startswith("tile/0/001 was edited: it does not hash to its value in "
                                                 "tile/1/000.p/2 (rows 257..512)")
    assert verdict.leaf_roots == {1: tile_hash(Tile(0, 1), honest)}


def test_an_edited_partial_level_0_tile_is_named_when_its_entries_give_the_root() -> None:
    tiles, root = _tiles(600)
    partial = Tile(0, 2, 88)
    honest = tiles[partial]
    tiles[partial] = _flip(honest, 100)
    leaves = b"".join(hashlib.sha256(b"\x00" + str(index).encode()).digest() for index in range(512, 600))
    verdict = _check(tiles, 600, root, leaves)
    assert [item.detail.split(":")[0] for item in verdict.findings] == ["tile/0/002.p/88 was edited"]
    assert verdict.repaired == {partial: honest}


def test_an_edited_full_tile_above_level_0_is_named_and_what_it_should_hold_is_proven_below() -> None:
    size = 256 * 256 + 300  # a full level-1 tile under a partial level-2 one
    tiles, root = _tiles(size)
    honest = tiles[Tile(1, 0)]
    tiles[Tile(1, 0)] = _flip(honest, 64)
    verdict = _check(tiles, size, root)
    assert [item.seq for item in verdict.findings] == [1]
    assert verdict.findings[0].detail.startswith("tile/1/000 was edited: it does not hash to its value in "
                                                 "tile/2/000.p/1 (rows 1..65536); the tiles below it do;")
    assert verdict.repaired == {Tile(1, 0): honest}
    assert verdict.leaf_roots == {}  # no level-0 tile blamed for its parent's edit


def test_a_tree_rewritten_whole_is_a_checkpoint_mismatch_not_a_tile() -> None:
    tiles, _ = _tiles(600, salt=b"other")
    _, root = _tiles(600)
    verdict = _check(tiles, 600, root)
    assert [(item.kind, item.seq) for item in verdict.findings] == [(FindingKind.CHECKPOINT_MISMATCH, 600)]
