"""The files of a published tree (C2SP `tlog-tiles`, spec 10.1): what is new between the published size and the
size being published, built from the store with the core's tile formats (`core.log.tiles`, `core.log.entry_bundle`).

Only the rows after the published size are read, from the start of the level-0 tile that holds the first of them
(at most 255 rows published before: the partial tile they shared), and at each level above, the hashes of that
level's open tile before the published size: at most 255 stored tree nodes per level (section 8 keeps every node
at heights 8, 16, ...; one missing is recomputed from its rows). Every other hash is computed here from the rows, so
the level-0 tiles and entry bundles are the rows' own leaf inputs and leaf hashes, and each full tile's hash goes
into its parent. The partial tiles at the new size then reproduce its root (`TreeBuilder.root`), which the caller
holds against the checkpoint: no stored node, and no row re-read from before the published size, reaches DIR
unchecked.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from compute_budget.core.leaf import MAX_LEAF_INPUT_BYTES, leaf_input, unreadable_leaf_hash
from compute_budget.core.log.entry_bundle import bundle_leaf_hashes, encode_bundle
from compute_budget.core.log.merkle import CompactRange
from compute_budget.core.log.tiles import TILE_HEIGHT, TILE_WIDTH, Tile, new_tiles, tile_hash
from compute_budget.core.row import CHAINED_COUNT
from compute_budget.errors import EntryTooLong, StoreDamaged
from compute_budget.store.snapshot import Snapshot

HASH_SIZE = 32
ROW_BATCH = 8 * TILE_WIDTH  # rows read per query: a multiple of a tile, so batches split into whole bundles


@dataclass(frozen=True, slots=True)
class TreeFile:
    """One file of the publication: its path under DIR and its bytes."""

    path: str
    data: bytes


def superseded(old: int, new: int) -> list[str]:
    """The `.p` folders of the partial tiles and bundles that the full ones completed between sizes `old` and
    `new` replace (C2SP: a partial tile may go once the full tile at its position is served)."""
    folders: list[str] = []
    for tile in new_tiles(old, new):
        if not tile.partial:
            folders.append(f"{tile.path}.p")
            if tile.level == 0:
                folders.append(f"{tile.bundle_path}.p")
    return folders


def tidied_folders(size: int) -> list[str]:
    """Where a publish that left DIR at `size` rows may have left files no checkpoint needs (killed before it
    removed them): DIR itself (a temporary checkpoint), and at each level the folders of its last two tiles and
    entry bundles (the partial-tile folders the last full tiles replaced, and temporary files beside them)."""
    folders = [""]
    level = 0
    while size >> (TILE_HEIGHT * level):
        count = size >> (TILE_HEIGHT * level)
        last = (count - 1) >> TILE_HEIGHT
        width = count - (last << TILE_HEIGHT)
        tiles = [Tile(level, index) for index in range(max(last - 1, 0), last + 1)]
        if width < TILE_WIDTH:
            tiles.append(Tile(level, last, width))
        for tile in tiles:
            folders.append(tile.path.rsplit("/", 1)[0])
            if level == 0:
                folders.append(tile.bundle_path.rsplit("/", 1)[0])
        level += 1
    return list(dict.fromkeys(folders))


class TreeBuilder:
    """The files a tree of `new` leaves has that one of `old` leaves has not, read from `snapshot` (see the module
    docstring). `files()` yields them level 0 first, in the order a reader could need them; then `root()` is the
    root the partial tiles give."""

    def __init__(self, snapshot: Snapshot, old: int, new: int) -> None:
        """A builder of the files from size `old` (published) to `new` (old <= new)."""
        self._snapshot, self._old, self._new = snapshot, old, new
        self._open: dict[int, list[bytes]] = {}  # level >= 1 -> the hashes of its open tile
        self._index: dict[int, int] = {}  # level >= 1 -> the index of its open tile
        self._partials: list[tuple[Tile, bytes]] = []
        self._start = (old >> TILE_HEIGHT) << TILE_HEIGHT  # the first row read: its level-0 tile's first
        self._read = self._start

    def rows_done(self) -> tuple[int, int]:
        """(rows built into files so far, rows to build): the publish's progress."""
        return self._read - self._start, self._new - self._start

    def files(self) -> Iterator[TreeFile]:
        """Every new file: entry bundles and tiles, full ones before the partial ones of the new size."""
        self._seed()
        for first, rows in self._row_groups(self._start):
            yield from self._level_zero(first, rows)
            self._read = first + len(rows)
        yield from self._close()

    def root(self) -> bytes:
        """The tree's root from the partial tiles of the new size: the tree's frontier is theirs, top level first."""
        hashes: list[str] = []
        for _, data in sorted(self._partials, key=lambda item: -item[0].level):
            frontier = CompactRange()
            frontier.extend(_split(data))
            hashes += [item.hex() for item in frontier.hashes]
        return CompactRange.from_hex(self._new, hashes).root()

    def _levels(self) -> range:
        """The levels above 0 that hold a hash in a tree of the new size."""
        top = 0
        while self._new >> (TILE_HEIGHT * (top + 1)):
            top += 1
        return range(1, top + 1)

    def _seed(self) -> None:
        """Each level's open tile starts with the hashes it held at the published size (stored nodes)."""
        for level in self._levels():
            count = self._old >> (TILE_HEIGHT * level)
            index = count >> TILE_HEIGHT
            self._index[level] = index
            self._open[level] = _nodes(self._snapshot, TILE_HEIGHT * level, index * TILE_WIDTH, count)

    def _row_groups(self, start: int) -> Iterator[tuple[int, list[tuple[Any, ...]]]]:
        """(first leaf index, rows) of each level-0 tile from leaf `start` to the new size, rows in seq order."""
        expected = start + 1
        for batch in self._snapshot.rows_between(start, self._new, batch_rows=ROW_BATCH):
            for row in batch:
                if row[0] != expected:
                    raise StoreDamaged(
                        f"row {expected} cannot be read in seq order (found {row[0]!r}): run `compute-budget audit`; "
                        "nothing was published"
                    )
                expected += 1
            for offset in range(0, len(batch), TILE_WIDTH):
                group = batch[offset : offset + TILE_WIDTH]
                yield group[0][0] - 1, group
        if expected != self._new + 1:
            raise StoreDamaged(f"rows {expected}..{self._new} are missing: run `compute-budget audit`")

    def _level_zero(self, first: int, rows: Sequence[tuple[Any, ...]]) -> Iterator[TreeFile]:
        """The entry bundle and the level-0 tile of one group of rows, and what their tile's hash completes."""
        entries = [_entry(row) for row in rows]
        tile = Tile(0, first >> TILE_HEIGHT, len(entries))
        hashes = bundle_leaf_hashes(entries)
        yield TreeFile(tile.bundle_path, encode_bundle(tile, entries))
        yield TreeFile(tile.path, hashes)
        if tile.partial:
            self._partials.append((tile, hashes))
        else:
            yield from self._push(1, tile_hash(tile, hashes))

    def _push(self, level: int, value: bytes) -> Iterator[TreeFile]:
        """Add a full tile's hash to the open tile of `level`; a tile that fills is written and pushed up."""
        hashes = self._open[level]
        hashes.append(value)
        if len(hashes) < TILE_WIDTH:
            return
        tile = Tile(level, self._index[level])
        data = b"".join(hashes)
        yield TreeFile(tile.path, data)
        self._open[level], self._index[level] = [], self._index[level] + 1
        if level + 1 in self._open:
            yield from self._push(level + 1, tile_hash(tile, data))

    def _close(self) -> Iterator[TreeFile]:
        """The partial tile of each level above 0 at the new size."""
        for level in self._levels():
            hashes = self._open[level]
            width = (self._new >> (TILE_HEIGHT * level)) % TILE_WIDTH
            if len(hashes) != width:  # a builder bug, not a store's fault: never publish it
                raise StoreDamaged(f"level {level} holds {len(hashes)} hashes where size {self._new} has {width}")
            if hashes:
                tile = Tile(level, self._index[level], width)
                data = b"".join(hashes)
                self._partials.append((tile, data))
                yield TreeFile(tile.path, data)


def _entry(row: Sequence[Any]) -> bytes:
    """A row's entry: its leaf input (section 8); a row over 65,535 bytes cannot be one (spec 10.1, rule 4)."""
    seq = row[0]
    try:
        entry = leaf_input(row[:CHAINED_COUNT])
    except (TypeError, ValueError, orjson.JSONEncodeError):
        raise StoreDamaged(f"row {seq} cannot be serialised: run `compute-budget audit`; nothing was written") from None
    if len(entry) > MAX_LEAF_INPUT_BYTES:
        raise EntryTooLong(
            f"row {seq}'s leaf input is {len(entry):,} bytes, over the {MAX_LEAF_INPUT_BYTES:,} a C2SP entry bundle "
            f"holds (it was recorded before spec 9.9.8), so rows from {seq} on cannot be published; salvage the rows "
            f"before it into a new store with `compute-budget copy SRC DST --through {seq - 1}` and publish that "
            "(docs/incident.md, Salvage); nothing was written",
            seq=seq,
        )
    return entry


def _nodes(snapshot: Snapshot, height: int, first: int, end: int) -> list[bytes]:
    """The stored nodes at `height` with first <= index < end; one missing or unreadable is recomputed from its
    rows (a store whose tree is not built there yet)."""
    stored = dict(snapshot.nodes_at(height, first, end - 1)) if end > first else {}
    found: list[bytes] = []
    for index in range(first, end):
        text = stored.get(index)
        try:
            found.append(bytes.fromhex(text) if text is not None and len(text) == 2 * HASH_SIZE else b"")
        except ValueError:
            found.append(b"")
        if not found[-1]:
            found[-1] = _recomputed(snapshot, height, index)
    return found


def _recomputed(snapshot: Snapshot, height: int, index: int) -> bytes:
    """The node at `height`, `index` computed from its 2**height rows."""
    frontier = CompactRange()
    for batch in snapshot.rows_between(index << height, (index + 1) << height, batch_rows=ROW_BATCH):
        # Sliced, not named: a per-row path (see `core.row.CHAINED_COUNT`).
        frontier.extend(unreadable_leaf_hash(tuple(row)[:CHAINED_COUNT]) for row in batch)
    if frontier.size != 1 << height:
        raise StoreDamaged(f"rows under tree node ({height}, {index}) are missing: run `compute-budget audit`")
    return frontier.root()


def _split(data: bytes) -> list[bytes]:
    return [data[offset : offset + HASH_SIZE] for offset in range(0, len(data), HASH_SIZE)]
