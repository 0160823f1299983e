"""The RFC 6962 / RFC 9162 Merkle tree of spec section 8: hashes, compact ranges, proofs and their verification.

Pure (stdlib `hashlib` only, no I/O). Leaf hash = SHA-256(0x00 || leaf input), node hash = SHA-256(0x01 || left ||
right), the empty tree's root = SHA-256 of nothing (RFC 9162 section 2.1.1).

A node is named by ``(level, index)``: the root of the *perfect* subtree of ``2**level`` leaves that starts at leaf
``index * 2**level``. Those are the only nodes a store keeps, and the only ones the proof builders ask a
`NodeReader` for; the one non-perfect ("ephemeral") node a proof may need, the hash of an incomplete right edge, is
combined from perfect ones. Proofs are lists of 32-byte hashes in RFC 9162 order (from the leaf end up).

The verifiers follow RFC 9162 sections 2.1.3.2 and 2.1.4.2 step by step (the algorithm of transparency-dev/merkle's
``proof`` package) and never raise: any malformed or inconsistent input is simply "not verified".
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from compute_budget.errors import MerkleError

HASH_SIZE = 32
EMPTY_ROOT: bytes = hashlib.sha256(b"").digest()


def leaf_hash(leaf_input: bytes) -> bytes:
    """SHA-256(0x00 || leaf_input), the hash of one leaf (RFC 9162 section 2.1.1)."""
    return hashlib.sha256(b"\x00" + leaf_input).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 || left || right), the hash of an interior node (RFC 9162 section 2.1.1)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


@dataclass(frozen=True, slots=True)
class Node:
    """A perfect-subtree node: its `level`, `index` on that level and `hash`."""

    level: int
    index: int
    hash: bytes


class NodeReader(Protocol):
    """A source of perfect-subtree hashes, such as a store's node table or a `MemoryTree`."""

    def node(self, level: int, index: int) -> bytes:
        """The hash of the perfect subtree of ``2**level`` leaves starting at leaf ``index * 2**level``."""
        ...


def _is_count(value: object) -> bool:
    """True for a non-negative int (a bool is not a count)."""
    return type(value) is int and value >= 0


def _is_hash(value: object) -> bool:
    """True for exactly 32 bytes."""
    return isinstance(value, bytes) and len(value) == HASH_SIZE


def _is_path(value: object) -> bool:
    """True for a list or tuple of 32-byte hashes."""
    return isinstance(value, list | tuple) and all(_is_hash(item) for item in value)


def _largest_power_of_two_below(count: int) -> int:
    """The largest power of two strictly less than `count` (`count` >= 2): RFC 9162's split point k."""
    return 1 << ((count - 1).bit_length() - 1)


class CompactRange:
    """The frontier of a tree: the roots of the perfect subtrees covering its leaves, largest (leftmost) first.

    There is one root per set bit of `size`, so the state is O(log n) and `append` is O(log n). `to_hex` and
    `from_hex` turn it into and back from plain strings a store can persist.
    """

    __slots__ = ("_hashes", "_size")

    def __init__(self) -> None:
        """An empty range (tree size 0)."""
        self._size = 0
        self._hashes: list[bytes] = []

    @classmethod
    def from_hex(cls, size: int, hashes: Sequence[str]) -> CompactRange:
        """Restore a range saved with `size` and `to_hex`; `MerkleError` if the two do not fit together."""
        if not _is_count(size):
            raise MerkleError(f"compact range: size must be a non-negative integer, got {size!r}")
        if isinstance(hashes, str) or len(hashes) != size.bit_count():
            raise MerkleError(f"compact range: a tree of size {size} has {size.bit_count()} frontier hashes")
        restored = cls()
        for item in hashes:
            if not (isinstance(item, str) and len(item) == 2 * HASH_SIZE and item == item.lower()):
                raise MerkleError(f"compact range: {item!r} is not 64 lowercase hex digits")
            try:
                restored._hashes.append(bytes.fromhex(item))
            except ValueError:
                raise MerkleError(f"compact range: {item!r} is not 64 lowercase hex digits") from None
        restored._size = size
        return restored

    @classmethod
    def from_reader(cls, reader: NodeReader, size: int) -> CompactRange:
        """The range of the first `size` leaves, read from the perfect nodes of a (possibly larger) tree."""
        if not _is_count(size):
            raise MerkleError(f"compact range: size must be a non-negative integer, got {size!r}")
        restored = cls()
        restored._hashes = [reader.node(level, index) for level, index in _frontier_nodes(0, size)]
        restored._size = size
        return restored

    @property
    def size(self) -> int:
        """The number of leaves appended so far."""
        return self._size

    @property
    def hashes(self) -> tuple[bytes, ...]:
        """The frontier hashes, largest subtree first."""
        return tuple(self._hashes)

    def to_hex(self) -> list[str]:
        """The frontier hashes as lowercase hex, largest subtree first (persist together with `size`)."""
        return [item.hex() for item in self._hashes]

    def copy(self) -> CompactRange:
        """An independent copy of this range."""
        twin = CompactRange()
        twin._size = self._size
        twin._hashes = list(self._hashes)
        return twin

    def append(self, leaf_hash: bytes) -> list[Node]:
        """Add one leaf hash; returns the perfect nodes it completes, the leaf itself first, the highest last."""
        if not _is_hash(leaf_hash):
            raise MerkleError("compact range: a leaf hash must be 32 bytes")
        index = self._size
        completed = [Node(0, index, leaf_hash)]
        self._hashes.append(leaf_hash)
        level, merges = 0, self._size
        while merges & 1:
            right = self._hashes.pop()
            left = self._hashes.pop()
            level, index, merges = level + 1, index >> 1, merges >> 1
            merged = node_hash(left, right)
            self._hashes.append(merged)
            completed.append(Node(level, index, merged))
        self._size += 1
        return completed

    def extend(self, leaf_hashes: Iterable[bytes], *, min_level: int = 0) -> list[Node]:
        """Append many leaf hashes; returns the perfect nodes they complete at `min_level` and above, in the
        order they complete (as repeated `append` would, without building the nodes below `min_level`)."""
        hashes, size, completed = self._hashes, self._size, []
        sha256 = hashlib.sha256
        try:
            for leaf in leaf_hashes:
                if not _is_hash(leaf):
                    raise MerkleError("compact range: a leaf hash must be 32 bytes")
                hashes.append(leaf)
                if min_level <= 0:
                    completed.append(Node(0, size, leaf))
                level, index, merges = 0, size, size
                while merges & 1:
                    right = hashes.pop()
                    merged = sha256(b"\x01" + hashes.pop() + right).digest()
                    hashes.append(merged)
                    level, index, merges = level + 1, index >> 1, merges >> 1
                    if level >= min_level:
                        completed.append(Node(level, index, merged))
                size += 1
        finally:
            self._size = size
        return completed

    def root(self) -> bytes:
        """The Merkle Tree Hash of the leaves appended so far (`EMPTY_ROOT` for none)."""
        if not self._hashes:
            return EMPTY_ROOT
        result = self._hashes[-1]
        for left in reversed(self._hashes[:-1]):
            result = node_hash(left, result)
        return result

    def __eq__(self, other: object) -> bool:
        """Two ranges are equal when they have the same size and frontier."""
        if not isinstance(other, CompactRange):
            return NotImplemented
        return self._size == other._size and self._hashes == other._hashes

    __hash__ = None  # type: ignore[assignment]  # mutable: not hashable

    def __repr__(self) -> str:
        """The size and frontier in hex."""
        return f"CompactRange(size={self._size}, hashes={self.to_hex()!r})"


def root_from_leaf_hashes(hashes: Iterable[bytes]) -> bytes:
    """The Merkle Tree Hash of a sequence of leaf hashes, computed iteratively in O(n) time and O(log n) space."""
    frontier = CompactRange()
    for item in hashes:
        frontier.append(item)
    return frontier.root()


def _frontier_nodes(begin: int, count: int) -> list[tuple[int, int]]:
    """(level, index) of the perfect subtrees covering `count` leaves from `begin`, largest first.

    `begin` must be a multiple of the smallest power of two >= `count` (true of every range a proof needs).
    """
    nodes = []
    position = begin
    for level in reversed(range(count.bit_length())):
        if count >> level & 1:
            nodes.append((level, position >> level))
            position += 1 << level
    return nodes


def _range_hash(reader: NodeReader, begin: int, count: int) -> bytes:
    """The Merkle Tree Hash of `count` >= 1 leaves from `begin`, combined from perfect nodes only."""
    hashes = [reader.node(level, index) for level, index in _frontier_nodes(begin, count)]
    result = hashes.pop()
    while hashes:
        result = node_hash(hashes.pop(), result)
    return result


def root_from_reader(reader: NodeReader, size: int) -> bytes:
    """The root of the tree of the first `size` leaves, from at most log2(size) + 1 perfect nodes."""
    if not _is_count(size):
        raise MerkleError(f"tree size must be a non-negative integer, got {size!r}")
    return EMPTY_ROOT if size == 0 else _range_hash(reader, 0, size)


def inclusion_proof(reader: NodeReader, index: int, size: int) -> list[bytes]:
    """The RFC 9162 inclusion proof (section 2.1.3.1) of leaf `index` in the tree of the first `size` leaves."""
    if not (_is_count(index) and _is_count(size) and index < size):
        raise MerkleError(f"no inclusion proof for leaf {index!r} in a tree of size {size!r}")
    top_down: list[bytes] = []
    begin, count = 0, size
    while count > 1:
        split = _largest_power_of_two_below(count)
        if index - begin < split:
            top_down.append(_range_hash(reader, begin + split, count - split))
            count = split
        else:
            top_down.append(reader.node(split.bit_length() - 1, begin // split))
            begin, count = begin + split, count - split
    top_down.reverse()
    return top_down


def consistency_proof(reader: NodeReader, old_size: int, new_size: int) -> list[bytes]:
    """The RFC 9162 consistency proof (section 2.1.4.1) from the tree of `old_size` leaves to `new_size` leaves.

    Empty when the sizes are equal; a proof from the empty tree to a larger one does not exist (`MerkleError`).
    """
    if not (_is_count(old_size) and _is_count(new_size) and old_size <= new_size):
        raise MerkleError(f"no consistency proof from tree size {old_size!r} to {new_size!r}")
    if old_size == new_size:
        return []
    if old_size == 0:
        raise MerkleError("no consistency proof from the empty tree: every tree extends it")
    top_down: list[bytes] = []
    begin, old, new, whole_old_tree = 0, old_size, new_size, True
    while old != new:
        split = _largest_power_of_two_below(new)
        if old <= split:
            top_down.append(_range_hash(reader, begin + split, new - split))
            new = split
        else:
            top_down.append(reader.node(split.bit_length() - 1, begin // split))
            begin, old, new, whole_old_tree = begin + split, old - split, new - split, False
    if not whole_old_tree:
        top_down.append(_range_hash(reader, begin, old))
    top_down.reverse()
    return top_down


def verify_inclusion(leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> bool:
    """True iff `proof` shows leaf `index` is `leaf_hash` in the tree of `size` leaves and `root` (RFC 9162 2.1.3.2)."""
    if not (_is_hash(leaf_hash) and _is_count(index) and _is_count(size) and _is_path(proof) and _is_hash(root)):
        return False
    if index >= size:
        return False
    fn, sn, result = index, size - 1, leaf_hash
    for sibling in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            result = node_hash(sibling, result)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            result = node_hash(result, sibling)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and result == root


def verify_consistency(old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> bool:
    """True iff `proof` shows the tree (`new_size`, `new_root`) extends (`old_size`, `old_root`) (RFC 9162 2.1.4.2).

    Equal sizes need an empty proof and equal roots; a proof from size 0 to a larger size is never valid.
    """
    if not (_is_count(old_size) and _is_count(new_size) and _is_hash(old_root) and _is_hash(new_root)):
        return False
    if not _is_path(proof) or old_size > new_size:
        return False
    if old_size == new_size:
        return len(proof) == 0 and old_root == new_root
    if old_size == 0 or len(proof) == 0:
        return False
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    old_result = new_result = path[0]
    for sibling in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            old_result = node_hash(sibling, old_result)
            new_result = node_hash(sibling, new_result)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            new_result = node_hash(new_result, sibling)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and old_result == old_root and new_result == new_root


class MemoryTree:
    """Every perfect-subtree node of a tree, held in memory level by level; a `NodeReader` for tests and tools.

    ``levels[0]`` are the leaf hashes, ``levels[L][i]`` the node ``(L, i)``. It answers for any size up to its own,
    since the perfect nodes of a prefix are perfect nodes of the whole.
    """

    __slots__ = ("_frontier", "_levels")

    def __init__(self, leaf_hashes: Iterable[bytes] = ()) -> None:
        """A tree of the given leaf hashes (none by default)."""
        self._levels: list[list[bytes]] = [[]]
        self._frontier = CompactRange()
        for item in leaf_hashes:
            self.append(item)

    @classmethod
    def from_leaves(cls, leaf_inputs: Iterable[bytes]) -> MemoryTree:
        """A tree of the given leaf inputs (hashed with `leaf_hash`)."""
        return cls(leaf_hash(item) for item in leaf_inputs)

    @property
    def size(self) -> int:
        """The number of leaves."""
        return self._frontier.size

    def append(self, leaf_hash: bytes) -> list[Node]:
        """Add one leaf hash; returns the perfect nodes it completes (as `CompactRange.append`)."""
        completed = self._frontier.append(leaf_hash)
        for node in completed:
            if node.level == len(self._levels):
                self._levels.append([])
            self._levels[node.level].append(node.hash)
        return completed

    def node(self, level: int, index: int) -> bytes:
        """The hash of node (`level`, `index`); `MerkleError` if that perfect subtree is not complete yet."""
        if _is_count(level) and _is_count(index) and level < len(self._levels) and index < len(self._levels[level]):
            return self._levels[level][index]
        raise MerkleError(f"no node at level {level!r}, index {index!r} in a tree of size {self.size}")

    def root(self, size: int | None = None) -> bytes:
        """The root of the first `size` leaves (all of them by default)."""
        if size is None:
            return self._frontier.root()
        if not (_is_count(size) and size <= self.size):
            raise MerkleError(f"no root for size {size!r} in a tree of size {self.size}")
        return root_from_reader(self, size)

    def compact_range(self) -> CompactRange:
        """A copy of the tree's current frontier."""
        return self._frontier.copy()
