"""The Merkle tree of spec section 8: RFC 6962 vectors, a naive oracle, proof probes, and purity."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute_budget.core.log.merkle import (
    EMPTY_ROOT,
    CompactRange,
    MemoryTree,
    MerkleError,
    Node,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root_from_leaf_hashes,
    root_from_reader,
    verify_consistency,
    verify_inclusion,
)
from tests.conftest import REPO_ROOT

VECTORS: dict[str, Any] = json.loads((REPO_ROOT / "tests" / "vectors" / "rfc6962.json").read_text())
LEAVES = [bytes.fromhex(item) for item in VECTORS["leaves_hex"]]
ROOTS = [bytes.fromhex(item) for item in VECTORS["roots_hex"]]

MAX_SIZE = 300
BIG_HASHES = [hashlib.sha256(b"leaf %d" % number).digest() for number in range(MAX_SIZE)]
BIG_TREE = MemoryTree(BIG_HASHES)


def naive_root(hashes: Sequence[bytes]) -> bytes:
    """RFC 6962 section 2.1's recursive MTH, written from the definition."""
    if not hashes:
        return hashlib.sha256(b"").digest()
    if len(hashes) == 1:
        return hashes[0]
    split = 1
    while split * 2 < len(hashes):
        split *= 2
    return node_hash(naive_root(hashes[:split]), naive_root(hashes[split:]))


def naive_path(index: int, hashes: Sequence[bytes]) -> list[bytes]:
    """RFC 6962 section 2.1.1's recursive PATH(m, D[n])."""
    if len(hashes) <= 1:
        return []
    split = 1
    while split * 2 < len(hashes):
        split *= 2
    if index < split:
        return [*naive_path(index, hashes[:split]), naive_root(hashes[split:])]
    return [*naive_path(index - split, hashes[split:]), naive_root(hashes[:split])]


def naive_subproof(old: int, hashes: Sequence[bytes], whole: bool) -> list[bytes]:
    """RFC 6962 section 2.1.2's recursive SUBPROOF(m, D[n], b)."""
    if old == len(hashes):
        return [] if whole else [naive_root(hashes)]
    split = 1
    while split * 2 < len(hashes):
        split *= 2
    if old <= split:
        return [*naive_subproof(old, hashes[:split], whole), naive_root(hashes[split:])]
    return [*naive_subproof(old - split, hashes[split:], False), naive_root(hashes[:split])]


def flipped(value: bytes) -> bytes:
    """`value` with bit 3 of its first byte flipped."""
    return bytes([value[0] ^ 8]) + value[1:]


class RecordingReader:
    """A NodeReader over a MemoryTree that records every node asked for."""

    def __init__(self, tree: MemoryTree) -> None:
        """Wrap `tree`."""
        self.tree = tree
        self.asked: list[tuple[int, int]] = []

    def node(self, level: int, index: int) -> bytes:
        """Record the request, then answer it from the tree."""
        self.asked.append((level, index))
        return self.tree.node(level, index)


# --- the RFC 6962 vectors ---------------------------------------------------------------------------------------


def test_empty_root_is_sha256_of_nothing() -> None:
    """The empty tree's root is SHA-256 of no bytes, as the spec and RFC 9162 say."""
    assert hashlib.sha256(b"").hexdigest() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert ROOTS[0] == EMPTY_ROOT
    assert CompactRange().root() == EMPTY_ROOT
    assert MemoryTree().root() == EMPTY_ROOT


def test_leaf_and_node_hash_prefixes() -> None:
    """Leaf hash = SHA-256(0x00 || x), node hash = SHA-256(0x01 || l || r)."""
    assert leaf_hash(b"") == hashlib.sha256(b"\x00").digest()
    assert node_hash(b"a" * 32, b"b" * 32) == hashlib.sha256(b"\x01" + b"a" * 32 + b"b" * 32).digest()
    assert leaf_hash(b"") == ROOTS[1]


@pytest.mark.parametrize("size", range(len(ROOTS)))
def test_vector_roots(size: int) -> None:
    """Every root of the vectors, by the batch function, the compact range and the stored tree."""
    hashes = [leaf_hash(leaf) for leaf in LEAVES[:size]]
    assert root_from_leaf_hashes(hashes) == ROOTS[size]
    assert naive_root(hashes) == ROOTS[size]
    assert MemoryTree.from_leaves(LEAVES).root(size) == ROOTS[size]
    assert root_from_reader(MemoryTree.from_leaves(LEAVES), size) == ROOTS[size]


@pytest.mark.parametrize("vector", VECTORS["inclusion"], ids=lambda v: f"{v['leaf_index']}-of-{v['tree_size']}")
def test_vector_inclusion_paths(vector: dict[str, Any]) -> None:
    """Every inclusion path of the vectors is produced exactly and verifies against its root."""
    index, size = vector["leaf_index"], vector["tree_size"]
    proof = inclusion_proof(MemoryTree.from_leaves(LEAVES), index, size)
    assert [item.hex() for item in proof] == vector["path"]
    assert verify_inclusion(leaf_hash(LEAVES[index]), index, size, proof, ROOTS[size])


@pytest.mark.parametrize("vector", VECTORS["consistency"], ids=lambda v: f"{v['size1']}-to-{v['size2']}")
def test_vector_consistency_paths(vector: dict[str, Any]) -> None:
    """Every consistency path of the vectors is produced exactly and verifies between its roots."""
    old, new = vector["size1"], vector["size2"]
    proof = consistency_proof(MemoryTree.from_leaves(LEAVES), old, new)
    assert [item.hex() for item in proof] == vector["path"]
    assert verify_consistency(old, new, ROOTS[old], ROOTS[new], proof)


# --- compact range ----------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=MAX_SIZE))
def test_compact_range_root_equals_naive_mth(size: int) -> None:
    """Appending leaf by leaf gives the recursive MTH at every size, with one frontier hash per set bit."""
    frontier = CompactRange()
    for number in range(size):
        frontier.append(BIG_HASHES[number])
    assert frontier.size == size
    assert len(frontier.hashes) == size.bit_count()
    assert frontier.root() == naive_root(BIG_HASHES[:size])
    assert BIG_TREE.root(size) == frontier.root()
    assert CompactRange.from_reader(BIG_TREE, size) == frontier


def test_compact_range_reports_completed_nodes() -> None:
    """`append` returns the leaf and every perfect node it completes, lowest first, with their coordinates."""
    frontier = CompactRange()
    for number in range(3):
        frontier.append(BIG_HASHES[number])
    completed = frontier.append(BIG_HASHES[3])
    assert [(node.level, node.index) for node in completed] == [(0, 3), (1, 1), (2, 0)]
    assert completed[-1] == Node(2, 0, naive_root(BIG_HASHES[:4]))
    assert completed[1].hash == node_hash(BIG_HASHES[2], BIG_HASHES[3])


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=0, max_value=MAX_SIZE), st.integers(min_value=0, max_value=20))
def test_compact_range_survives_serialisation(size: int, more: int) -> None:
    """A range saved as size + hex and restored goes on appending to the same roots as the original."""
    original = CompactRange()
    for number in range(size):
        original.append(BIG_HASHES[number])
    saved = json.loads(json.dumps({"size": original.size, "hashes": original.to_hex()}))
    restored = CompactRange.from_hex(saved["size"], saved["hashes"])
    assert restored == original
    for number in range(size, min(size + more, MAX_SIZE)):
        original.append(BIG_HASHES[number])
        restored.append(BIG_HASHES[number])
        assert restored.root() == original.root()


@pytest.mark.parametrize(
    ("size", "hashes", "message"),
    [
        pytest.param(3, ["00" * 32], "has 2 frontier hashes", id="too-few"),
        pytest.param(1, ["00" * 32, "11" * 32], "has 1 frontier hashes", id="too-many"),
        pytest.param(1, ["AB" * 32], "64 lowercase hex", id="upper-case"),
        pytest.param(1, ["zz" * 32], "64 lowercase hex", id="not-hex"),
        pytest.param(1, ["00" * 31], "64 lowercase hex", id="short"),
        pytest.param(-1, [], "non-negative", id="negative-size"),
        pytest.param(1, "00" * 32, "frontier hashes", id="a-string-not-a-list"),
    ],
)
def test_compact_range_rejects_bad_state(size: int, hashes: Any, message: str) -> None:
    """A saved state whose parts do not fit is refused with one line saying why."""
    with pytest.raises(MerkleError, match=message) as caught:
        CompactRange.from_hex(size, hashes)
    assert "\n" not in str(caught.value)


def test_compact_range_rejects_a_leaf_hash_of_the_wrong_size() -> None:
    """Only 32-byte leaf hashes are appended; the range is unchanged after a refusal."""
    frontier = CompactRange()
    with pytest.raises(MerkleError, match="32 bytes"):
        frontier.append(b"short")
    assert frontier.size == 0


def test_memory_tree_refuses_missing_nodes() -> None:
    """A node of an incomplete subtree is not invented: asking for it is an error."""
    tree = MemoryTree(BIG_HASHES[:3])
    assert tree.node(1, 0) == node_hash(BIG_HASHES[0], BIG_HASHES[1])
    with pytest.raises(MerkleError, match="no node at level 1, index 1"):
        tree.node(1, 1)
    with pytest.raises(MerkleError):
        tree.node(2, 0)
    with pytest.raises(MerkleError):
        tree.root(4)


# --- proofs: built from perfect nodes, equal to the RFC, verified -------------------------------------------------


def test_every_proof_up_to_64_leaves_equals_the_rfc_and_verifies() -> None:
    """Exhaustively for sizes 1-64: every inclusion and consistency proof is RFC 6962's and verifies."""
    for size in range(1, 65):
        root = BIG_TREE.root(size)
        for index in range(size):
            proof = inclusion_proof(BIG_TREE, index, size)
            assert proof == naive_path(index, BIG_HASHES[:size])
            assert verify_inclusion(BIG_HASHES[index], index, size, proof, root)
        for old in range(1, size + 1):
            proof = consistency_proof(BIG_TREE, old, size)
            assert proof == naive_subproof(old, BIG_HASHES[:size], True)
            assert verify_consistency(old, size, BIG_TREE.root(old), root, proof)


sizes = st.integers(min_value=1, max_value=MAX_SIZE)


@st.composite
def index_in_size(draw: st.DrawFn) -> tuple[int, int]:
    """A tree size up to MAX_SIZE and a leaf index inside it."""
    size = draw(sizes)
    return draw(st.integers(min_value=0, max_value=size - 1)), size


@st.composite
def old_and_new(draw: st.DrawFn) -> tuple[int, int]:
    """Two tree sizes 1 <= old <= new <= MAX_SIZE."""
    new = draw(sizes)
    return draw(st.integers(min_value=1, max_value=new)), new


@settings(max_examples=150, deadline=None)
@given(index_in_size())
def test_inclusion_proof_reads_only_perfect_nodes_and_verifies(case: tuple[int, int]) -> None:
    """A proof asks only for complete subtrees inside the size, O(log n) of them, equals PATH and verifies."""
    index, size = case
    reader = RecordingReader(BIG_TREE)
    proof = inclusion_proof(reader, index, size)
    assert all((node_index + 1) << level <= size for level, node_index in reader.asked)
    assert len(reader.asked) <= 2 * size.bit_length()
    assert proof == naive_path(index, BIG_HASHES[:size])
    assert verify_inclusion(BIG_HASHES[index], index, size, proof, BIG_TREE.root(size))


@settings(max_examples=150, deadline=None)
@given(old_and_new())
def test_consistency_proof_reads_only_perfect_nodes_and_verifies(case: tuple[int, int]) -> None:
    """A proof asks only for complete subtrees inside the new size, equals PROOF and verifies."""
    old, new = case
    reader = RecordingReader(BIG_TREE)
    proof = consistency_proof(reader, old, new)
    assert all((node_index + 1) << level <= new for level, node_index in reader.asked)
    assert len(reader.asked) <= 3 * new.bit_length()
    assert proof == naive_subproof(old, BIG_HASHES[:new], True)
    assert verify_consistency(old, new, BIG_TREE.root(old), BIG_TREE.root(new), proof)


def inclusion_probes(
    leaf: bytes, index: int, size: int, proof: list[bytes], root: bytes
) -> list[tuple[str, tuple[Any, ...]]]:
    """transparency-dev/merkle's corruptInclusionProof: wrong index, size, leaf, root, proof (never ±1 on size,
    which RFC 6962 proofs do not bind: leaf 0 of 3 and of 4 share a proof shape)."""
    probes: list[tuple[str, tuple[Any, ...]]] = [
        ("index - 1", (leaf, index - 1, size, proof, root)),
        ("index + 1", (leaf, index + 1, size, proof, root)),
        ("index ^ 2", (leaf, index ^ 2, size, proof, root)),
        ("size * 2", (leaf, index, size * 2, proof, root)),
        ("size // 2", (leaf, index, size // 2, proof, root)),
        ("wrong leaf", (flipped(leaf), index, size, proof, root)),
        ("empty root", (leaf, index, size, proof, EMPTY_ROOT)),
        ("wrong root", (leaf, index, size, proof, flipped(root))),
        ("trailing root", (leaf, index, size, [*proof, root], root)),
        ("preceding root", (leaf, index, size, [root, *proof], root)),
        ("trailing garbage", (leaf, index, size, [*proof, b""], root)),
    ]
    if proof:
        probes.append(("dropped last", (leaf, index, size, proof[:-1], root)))
    for position in range(len(proof)):
        changed = list(proof)
        changed[position] = flipped(changed[position])
        probes.append((f"flipped proof[{position}]", (leaf, index, size, changed, root)))
    return probes


def consistency_probes(
    old: int, new: int, old_root: bytes, new_root: bytes, proof: list[bytes]
) -> list[tuple[str, tuple[Any, ...]]]:
    """transparency-dev/merkle's corruptConsistencyProof (for old < new): wrong sizes, roots and proofs."""
    probes: list[tuple[str, tuple[Any, ...]]] = [
        ("old - 1", (old - 1, new, old_root, new_root, proof)),
        ("old + 1", (old + 1, new, old_root, new_root, proof)),
        ("old ^ 2", (old ^ 2, new, old_root, new_root, proof)),
        ("new * 2", (old, new * 2, old_root, new_root, proof)),
        ("new // 2", (old, new // 2, old_root, new_root, proof)),
        ("wrong old root", (old, new, flipped(old_root), new_root, proof)),
        ("wrong new root", (old, new, old_root, flipped(new_root), proof)),
        ("swapped roots", (old, new, new_root, old_root, proof)),
        ("empty proof", (old, new, old_root, new_root, [])),
        ("trailing old root", (old, new, old_root, new_root, [*proof, old_root])),
        ("trailing new root", (old, new, old_root, new_root, [*proof, new_root])),
        ("preceding old root", (old, new, old_root, new_root, [old_root, *proof])),
        ("preceding new root", (old, new, old_root, new_root, [new_root, *proof])),
        ("preceding proof[0]", (old, new, old_root, new_root, [proof[0], *proof])),
        ("dropped last", (old, new, old_root, new_root, proof[:-1])),
    ]
    for position in range(len(proof)):
        changed = list(proof)
        changed[position] = flipped(changed[position])
        probes.append((f"flipped proof[{position}]", (old, new, old_root, new_root, changed)))
    return probes


def assert_all_fail(verify: Callable[..., bool], probes: list[tuple[str, tuple[Any, ...]]]) -> None:
    """Every probe is rejected; the message names those that were not."""
    accepted = [name for name, arguments in probes if verify(*arguments)]
    assert accepted == []


@settings(max_examples=150, deadline=None)
@given(index_in_size())
def test_corrupted_inclusion_proofs_fail(case: tuple[int, int]) -> None:
    """Changing one proof element, the index, the size, the leaf or the root makes inclusion fail."""
    index, size = case
    proof = inclusion_proof(BIG_TREE, index, size)
    root = BIG_TREE.root(size)
    assert verify_inclusion(BIG_HASHES[index], index, size, proof, root)
    assert_all_fail(verify_inclusion, inclusion_probes(BIG_HASHES[index], index, size, proof, root))


@settings(max_examples=150, deadline=None)
@given(old_and_new().filter(lambda case: case[0] < case[1]))
def test_corrupted_consistency_proofs_fail(case: tuple[int, int]) -> None:
    """Changing one proof element, a size or a root makes consistency fail."""
    old, new = case
    proof = consistency_proof(BIG_TREE, old, new)
    old_root, new_root = BIG_TREE.root(old), BIG_TREE.root(new)
    assert verify_consistency(old, new, old_root, new_root, proof)
    assert_all_fail(verify_consistency, consistency_probes(old, new, old_root, new_root, proof))


def test_consistency_edge_cases() -> None:
    """Equal sizes need an empty proof and equal roots; nothing proves a size-0 tree grew; sizes must not shrink."""
    root4, root8 = BIG_TREE.root(4), BIG_TREE.root(8)
    assert consistency_proof(BIG_TREE, 5, 5) == []
    assert verify_consistency(5, 5, BIG_TREE.root(5), BIG_TREE.root(5), [])
    assert not verify_consistency(5, 5, BIG_TREE.root(5), BIG_TREE.root(5), [root4])
    assert not verify_consistency(4, 4, root4, root8, [])
    assert verify_consistency(0, 0, EMPTY_ROOT, EMPTY_ROOT, [])
    assert not verify_consistency(0, 8, EMPTY_ROOT, root8, [root8])
    assert not verify_consistency(8, 4, root8, root4, consistency_proof(BIG_TREE, 4, 8))
    with pytest.raises(MerkleError, match="empty tree"):
        consistency_proof(BIG_TREE, 0, 4)
    with pytest.raises(MerkleError, match="from tree size 8 to 4"):
        consistency_proof(BIG_TREE, 8, 4)
    with pytest.raises(MerkleError, match="leaf 4 in a tree of size 4"):
        inclusion_proof(BIG_TREE, 4, 4)


garbage = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.binary(max_size=40),
    st.text(max_size=5),
    st.lists(st.binary(max_size=40), max_size=4),
    st.lists(st.integers(), max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(garbage, garbage, garbage, garbage, garbage)
def test_verifiers_never_raise_on_garbage(a: Any, b: Any, c: Any, d: Any, e: Any) -> None:
    """Any input of any type is simply not verified (no exception, a plain False)."""
    assert verify_inclusion(a, b, c, d, e) is False
    assert verify_consistency(a, b, c, d, e) is False


def test_verifiers_reject_wrong_types_around_a_valid_proof() -> None:
    """A valid proof stops verifying when a value has the right meaning but the wrong type or length."""
    proof = inclusion_proof(BIG_TREE, 2, 5)
    root = BIG_TREE.root(5)
    assert verify_inclusion(BIG_HASHES[2], 2, 5, proof, root)
    assert not verify_inclusion(BIG_HASHES[2], 2, 5, tuple(item.hex() for item in proof), root)  # type: ignore[arg-type]
    assert not verify_inclusion(BIG_HASHES[2], 2, True, proof, root)  # a bool is not a size
    assert not verify_inclusion(BIG_HASHES[2], -1, 5, proof, root)
    assert not verify_inclusion(BIG_HASHES[2] + b"\x00", 2, 5, proof, root)
    # Leaf 2 is hashed as (leaf || proof[0]): moving its last byte into proof[0] keeps the 64 bytes the same, so
    # only the 32-byte length checks refuse it.
    shifted = [BIG_HASHES[2][-1:] + proof[0], *proof[1:]]
    assert node_hash(BIG_HASHES[2][:-1], shifted[0]) == node_hash(BIG_HASHES[2], proof[0])
    assert not verify_inclusion(BIG_HASHES[2][:-1], 2, 5, shifted, root)


# --- purity -----------------------------------------------------------------------------------------------------
