"""Where a publication keeps what (C2SP tlog-tiles): tile and entry bundle paths, and which tiles a tree of a
given size has. Pure arithmetic on sizes and indexes."""

from __future__ import annotations

from compute_budget.errors import PublicationUnavailable

TILE_HEIGHT = 8
TILE_WIDTH = 1 << TILE_HEIGHT
HASH_SIZE = 32


def encode_index(number: int) -> str:
    """`<N>` of a tile path: zero-padded 3-digit elements, all but the last prefixed with ``x``."""
    groups = [f"{number % 1000:03d}"]
    number //= 1000
    while number:
        groups.append(f"x{number % 1000:03d}")
        number //= 1000
    return "/".join(reversed(groups))


def tile_path(level: int | str, number: int, width: int) -> str:
    """The path of tile `number` at `level` (``"entries"`` for an entry bundle), partial when `width` < 256."""
    suffix = "" if width == TILE_WIDTH else f".p/{width}"
    return f"tile/{level}/{encode_index(number)}{suffix}"


def tile_width(size: int, level: int, number: int) -> int:
    """How many hashes tile `number` at `level` holds in the tree of `size` leaves (0: the tree has no such tile)."""
    shift = TILE_HEIGHT * (level + 1)
    if (number + 1) << shift <= size:
        return TILE_WIDTH
    if number << shift >= size:
        return 0
    return (size >> (TILE_HEIGHT * level)) % TILE_WIDTH


def split_hashes(data: bytes, width: int, where: str) -> list[bytes]:
    """A tile's hashes; `PublicationUnavailable` unless it is exactly 32 bytes times its width."""
    if len(data) != HASH_SIZE * width:
        raise PublicationUnavailable(
            f"{where} holds {len(data)} bytes, not {HASH_SIZE} x {width} = {HASH_SIZE * width}: a damaged tile"
        )
    return [data[start : start + HASH_SIZE] for start in range(0, len(data), HASH_SIZE)]


def split_bundle(data: bytes, count: int, where: str) -> list[bytes]:
    """The `count` entries of an entry bundle (big-endian uint16 length prefixes); `PublicationUnavailable` when its
    prefixes run past its end, or it holds more or fewer entries."""
    entries: list[bytes] = []
    offset, size = 0, len(data)
    while offset < size:
        if offset + 2 > size:
            raise PublicationUnavailable(f"{where}: a length prefix is cut off at byte {offset}: a damaged bundle")
        length = int.from_bytes(data[offset : offset + 2], "big")
        offset += 2
        if offset + length > size:
            raise PublicationUnavailable(
                f"{where}: entry {len(entries) + 1} says {length} bytes, only {size - offset} remain: a wrong length "
                "prefix"
            )
        entries.append(data[offset : offset + length])
        offset += length
    if len(entries) != count:
        raise PublicationUnavailable(f"{where} holds {len(entries)} entries, not {count}: a damaged bundle")
    return entries
