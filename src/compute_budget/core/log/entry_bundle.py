"""C2SP `tlog-tiles` entry bundles: the entries of one level-0 tile, each a big-endian uint16 length then its bytes.

Pure (no I/O). An entry here is a row's leaf input (spec 10.1), so its leaf hash is the tile's hash at the same
position; a bundle is checked against its tile by the caller (see `bundle_leaf_hashes`).
"""

from __future__ import annotations

from collections.abc import Sequence

from compute_budget.core.log.merkle import leaf_hash
from compute_budget.core.log.tiles import Tile
from compute_budget.errors import ArgumentTypeError, EntryTooLarge, MalformedEntryBundle

MAX_ENTRY_SIZE = 0xFFFF
_PREFIX = 2


def encode_bundle(tile: Tile, entries: Sequence[bytes]) -> bytes:
    """The entry bundle of level-0 `tile`: its `width` entries, each prefixed with its length (big-endian uint16).

    `EntryTooLarge` names the first entry over 65,535 bytes by its leaf index (seq - 1).
    """
    path = tile.bundle_path
    if isinstance(entries, bytes | str) or len(entries) != tile.width:
        count = len(entries) if isinstance(entries, Sequence) else "?"
        raise ArgumentTypeError(f"{path}: a bundle of width {tile.width} needs {tile.width} entries, got {count}")
    parts: list[bytes] = []
    for offset, entry in enumerate(entries):
        if not isinstance(entry, bytes):
            raise ArgumentTypeError(f"{path}: entry {tile.first_node + offset} must be bytes")
        if len(entry) > MAX_ENTRY_SIZE:
            index = tile.first_node + offset
            raise EntryTooLarge(
                f"entry {index} (seq {index + 1}) is {len(entry)} bytes, over the {MAX_ENTRY_SIZE} a bundle holds",
                index=index,
                path=path,
            )
        parts.append(len(entry).to_bytes(_PREFIX, "big"))
        parts.append(entry)
    return b"".join(parts)


def decode_bundle(tile: Tile, data: bytes) -> list[bytes]:
    """The `width` entries of level-0 `tile`'s bundle, read strictly: `MalformedEntryBundle` (naming the bundle
    and the entry) for a length prefix that runs past the end, too few entries, or bytes after the last one."""
    path = tile.bundle_path
    if not isinstance(data, bytes):
        raise ArgumentTypeError(f"{path}: bundle data must be bytes, got {type(data).__name__}")
    entries: list[bytes] = []
    position = 0
    for offset in range(tile.width):
        index = tile.first_node + offset
        if position == len(data):
            raise MalformedEntryBundle(f"holds {offset} entries, a bundle of width {tile.width} has {tile.width}",
                                       path=path)
        if position + _PREFIX > len(data):
            raise MalformedEntryBundle(f"entry {index}: a length prefix cut short at byte {position}", path=path)
        length = int.from_bytes(data[position : position + _PREFIX], "big")
        position += _PREFIX
        if position + length > len(data):
            raise MalformedEntryBundle(
                f"entry {index}: length prefix {length} runs past the end ({len(data) - position} bytes left)",
                path=path,
            )
        entries.append(data[position : position + length])
        position += length
    if position != len(data):
        raise MalformedEntryBundle(f"{len(data) - position} bytes after its {tile.width} entries", path=path)
    return entries


def bundle_leaf_hashes(entries: Sequence[bytes]) -> bytes:
    """The leaf hashes of `entries`, concatenated: the bytes the level-0 tile of a bundle must equal."""
    return b"".join(leaf_hash(entry) for entry in entries)
