"""C2SP entry bundles (spec 10.1): uint16-length-prefixed entries, encoded and decoded strictly."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute_budget.core.log.entry_bundle import MAX_ENTRY_SIZE, bundle_leaf_hashes, decode_bundle, encode_bundle
from compute_budget.core.log.merkle import MemoryTree
from compute_budget.core.log.tiles import Tile, tile_bytes
from compute_budget.errors import ArgumentTypeError, EntryTooLarge, MalformedEntryBundle


def test_a_bundle_is_each_entry_after_its_big_endian_length() -> None:
    assert encode_bundle(Tile(0, 0, 3), [b"", b"a", b"\x00" * 258]) == b"\x00\x00" + b"\x00\x01a" + b"\x01\x02" + (
        b"\x00" * 258
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=256), st.integers(0, 1000))
def test_a_bundle_decodes_to_its_entries(entries: list[bytes], index: int) -> None:
    tile = Tile(0, index, len(entries))
    assert decode_bundle(tile, encode_bundle(tile, entries)) == entries


def test_an_entry_of_65535_bytes_fits_and_one_more_does_not() -> None:
    """The error names the entry by its leaf index (and seq) in the whole log, not its place in the bundle."""
    tile = Tile(0, 2, 3)
    assert len(encode_bundle(tile, [b"", bytes(MAX_ENTRY_SIZE), b""])) == 2 * 3 + MAX_ENTRY_SIZE
    with pytest.raises(EntryTooLarge) as caught:
        encode_bundle(tile, [b"", b"", bytes(MAX_ENTRY_SIZE + 1)])
    assert caught.value.index == 514
    assert caught.value.path == "tile/entries/002.p/3"
    assert "entry 514 (seq 515) is 65536 bytes" in str(caught.value)


def test_a_bundle_needs_exactly_its_width_of_entries() -> None:
    with pytest.raises(ArgumentTypeError):
        encode_bundle(Tile(0, 0, 2), [b"a"])
    with pytest.raises(ArgumentTypeError):
        encode_bundle(Tile(0, 0, 1), [b"a", b"b"])


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"", "holds 0 entries, a bundle of width 2 has 2"),
        (b"\x00\x01a", "holds 1 entries, a bundle of width 2 has 2"),
        (b"\x00\x01a\x00", "entry 257: a length prefix cut short at byte 3"),
        (b"\x00\x05abc", "entry 256: length prefix 5 runs past the end (3 bytes left)"),
        (b"\x00\x01a\x00\x01b\x00", "1 bytes after its 2 entries"),
        (b"\x00\x01a\x00\x01b\x00\x00", "2 bytes after its 2 entries"),
    ],
)
def test_a_malformed_bundle_is_one_line_naming_it(data: bytes, says: str) -> None:
    """A length prefix running past the end, too few entries or trailing bytes: typed, one line, path named."""
    with pytest.raises(MalformedEntryBundle) as caught:
        decode_bundle(Tile(0, 1, 2), data)
    assert str(caught.value) == f"tile/entries/001.p/2: {says}"


def test_a_bundles_leaf_hashes_are_its_level_0_tile() -> None:
    entries = [b"entry %d" % index for index in range(256)]
    tile = Tile(0, 0)
    assert bundle_leaf_hashes(decode_bundle(tile, encode_bundle(tile, entries))) == tile_bytes(
        MemoryTree.from_leaves(entries), tile
    )


def test_bundle_data_must_be_bytes() -> None:
    with pytest.raises(ArgumentTypeError):
        decode_bundle(Tile(0, 0, 1), "\x00\x00")  # type: ignore[arg-type]
