"""Proofs (spec section 8): leaves, the tiled tree, inclusion bundles checked offline, consistency proofs."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compute_budget import (
    BudgetStore,
    ConsistencyProof,
    MalformedProof,
    NotConsistent,
    ProofBundle,
    ProofError,
    StoreDamaged,
    UnknownBudgetId,
    decide,
    prove,
    prove_consistency,
    verify_consistency,
    verify_proof,
)
from compute_budget.core.chain import CHAINED_COLUMNS, chain_hash
from compute_budget.core.leaf import leaf_and_chain, leaf_input, row_leaf_hash
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.merkle import (
    MemoryTree,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    verify_inclusion,
)
from compute_budget.core.log.merkle import (
    verify_consistency as merkle_verify_consistency,
)
from compute_budget.core.log.tree import TiledTree
from compute_budget.core.row import chained_row
from tests.backends import rows, tamper
from tests.conftest import gate_lines, make_gate
from tests.sealing import rewrite_consistently, signer
from tests.strategies import decisions

pytestmark = pytest.mark.usefixtures("writer_state_env")  # SignerKey objects keep their state there

# -- leaves -----------------------------------------------------------------------------------------------------

texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
row_values = st.tuples(
    st.integers(1, 2**53 - 1),
    *[texts] * 7,
    *[st.integers(0, 2**53 - 1)] * 3,
    st.one_of(st.none(), st.integers(0, 2**53 - 1)),
    st.integers(0, 2**53 - 1),
    *[texts] * 4,
)


@settings(max_examples=200, deadline=None)
@given(values=row_values, prev=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64))
def test_a_leaf_is_the_rfc8785_object_of_the_17_columns(values: tuple[Any, ...], prev: str) -> None:
    """Leaf input = RFC 8785 of the 17 keys (checked against an independent implementation); the chain hash
    derived from the same bytes equals the chain's own."""
    obj = dict(zip(CHAINED_COLUMNS, values, strict=True))
    assert len(obj) == 17
    assert leaf_input(values) == rfc8785.dumps(obj)
    leaf, chained = leaf_and_chain(prev, values)
    assert leaf == leaf_hash(rfc8785.dumps(obj))
    assert chained == chain_hash(prev, values)


@settings(max_examples=200, deadline=None)
@given(
    decision=decisions,
    gate_input=texts,
    seq=st.integers(1, 2**53 - 1),
    recorded_at=texts,
    prev=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
)
def test_hashing_a_row_ahead_gives_the_same_leaf_and_chain(
    decision: Any, gate_input: str, seq: int, recorded_at: str, prev: str
) -> None:
    """The writer hashes the bulk of a row before its seq is known (`RowHasher`); the result is the leaf and
    chain hash of the complete row, and the row it stores is the one `chained_row` describes."""
    from compute_budget.core.leaf import RowTails, row_hasher
    from compute_budget.core.log.head import ChainHead
    from compute_budget.core.policy.prepare import PreparedGate
    from compute_budget.store.plan import plan_chunk

    values = chained_row(seq, decision, gate_input, recorded_at)
    expected = leaf_and_chain(prev, values)
    hasher = row_hasher(decision, gate_input)
    assert hasher.finish(prev, seq, recorded_at, decision.reason_code, decision.status.value) == expected
    # Spec 9.9.8 bounds the leaf input's size: the writer's count, made without hashing, is exact.
    size = RowTails(recorded_at).leaf_size(hasher, seq, decision.reason_code, decision.status.value)
    assert size == len(leaf_input(values))
    plan = plan_chunk([PreparedGate(decision, gate_input, None)], {}, ChainHead(seq - 1, prev, None), recorded_at)
    assert plan.rows == [(*values, expected[1])]
    assert plan.leaves == [expected[0]]


@settings(max_examples=100, deadline=None)
@given(
    chunk=st.lists(st.tuples(decisions, texts), min_size=2, max_size=6, unique_by=lambda pair: pair[0].budget_id),
    recorded_at=texts,
    prev=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
)
def test_a_chunk_of_rows_chains_as_row_by_row(chunk: list[tuple[Any, str]], recorded_at: str, prev: str) -> None:
    """A chunk's rows (whose tails `RowTails` encodes once per status, reason and recording time) get the leaf
    and chain hash of each complete row, each row linked to the one before."""
    from compute_budget.core.log.head import ChainHead
    from compute_budget.core.policy.prepare import PreparedGate
    from compute_budget.store.plan import plan_chunk

    plan = plan_chunk(
        [PreparedGate(decision, gate_input, None) for decision, gate_input in chunk],
        {},
        ChainHead(6, prev, None),
        recorded_at,
    )
    link = prev
    for offset, (decision, gate_input) in enumerate(chunk):
        values = chained_row(7 + offset, decision, gate_input, recorded_at)
        leaf, link = leaf_and_chain(link, values)
        assert plan.rows[offset] == (*values, link)
        assert plan.leaves[offset] == leaf


def test_a_stored_row_leaf_is_fixed() -> None:
    """A known row's leaf hash, so a reimplementation can check itself (docs/hashing.md)."""
    gate = make_gate()
    values = chained_row(1, decide(gate), json.dumps(gate, separators=(",", ":")), "2026-12-02T00:00:00.000000Z")
    import hashlib

    expected_start = b'{"budget_id":"1640737b718e0f32ba23c42f036fb6ba1ae9cc9b46e2d566e32c98482189f4d3"'
    assert leaf_input(values).startswith(expected_start)
    independent = hashlib.sha256(b"\x00" + rfc8785.dumps(dict(zip(CHAINED_COLUMNS, values, strict=True)))).hexdigest()
    assert row_leaf_hash(values).hex() == independent == (
        "86c34a16304e1ca3a7a800061b1bb3efca53b0ae4e61d432b8c12e79825ff322"
    )


# -- the tiled tree ---------------------------------------------------------------------------------------------


def naive_root(leaves: list[bytes]) -> bytes:
    """RFC 6962's Merkle Tree Hash, recursively, straight from its definition."""
    import hashlib

    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    split = 1 << ((len(leaves) - 1).bit_length() - 1)
    return node_hash(naive_root(leaves[:split]), naive_root(leaves[split:]))


def tiled(leaves: list[bytes], size: int, tile_level: int) -> tuple[TiledTree, list[tuple[int, int]]]:
    """A `TiledTree` over the first `size` leaves storing only the nodes of `tile_level` and up; also returns
    the stored nodes it was asked for."""
    full = MemoryTree(leaves)
    asked: list[tuple[int, int]] = []

    def fetch_node(level: int, index: int) -> bytes | None:
        asked.append((level, index))
        assert level >= tile_level
        return full.node(level, index)

    def fetch_leaves(first: int, count: int) -> list[bytes]:
        assert count <= 1 << tile_level
        return leaves[first : first + count]

    return TiledTree(size, fetch_node, fetch_leaves, tile_level=tile_level), asked


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(size=st.integers(0, 300), tile_level=st.sampled_from([0, 1, 2, 3, 8]), data=st.data())
def test_the_tiled_tree_root_and_proofs_equal_the_naive_tree(size: int, tile_level: int, data: st.DataObject) -> None:
    """For any size up to 300, the root read from stored nodes and tiles equals the naive Merkle Tree Hash, and
    every inclusion and consistency proof built from it verifies; a corrupted one does not."""
    leaves = [leaf_hash(index.to_bytes(4, "big")) for index in range(size)]
    tree, _ = tiled(leaves, size, tile_level)
    from compute_budget.core.log.merkle import CompactRange, root_from_reader

    root = naive_root(leaves)
    assert root_from_reader(tree, size) == root
    assert CompactRange.from_reader(tree, size).root() == root
    if size == 0:
        return
    index = data.draw(st.integers(0, size - 1))
    path = inclusion_proof(tree, index, size)
    assert verify_inclusion(leaves[index], index, size, path, root)
    if path:
        spoiled = list(path)
        at = data.draw(st.integers(0, len(path) - 1))
        spoiled[at] = bytes(32) if spoiled[at] != bytes(32) else b"\x01" * 32
        assert not verify_inclusion(leaves[index], index, size, spoiled, root)
    assert not verify_inclusion(leaf_hash(b"another"), index, size, path, root)
    old = data.draw(st.integers(1, size))
    proof = consistency_proof(tree, old, size)
    assert merkle_verify_consistency(old, size, naive_root(leaves[:old]), root, proof)
    if old < size:
        assert not merkle_verify_consistency(old, size, naive_root([*leaves[: old - 1], bytes(32)]), root, proof)


@settings(max_examples=100, deadline=None)
@given(chunks=st.lists(st.integers(0, 70), max_size=8), min_level=st.integers(0, 5))
def test_the_writers_tree_is_the_naive_tree_whatever_the_chunking(chunks: list[int], min_level: int) -> None:
    """Appending leaves chunk by chunk (as append transactions do) keeps the naive root, and the nodes it reports
    are exactly the perfect nodes of `min_level` and up, each once, in completion order."""
    from compute_budget.core.log.merkle import CompactRange

    frontier, one_by_one = CompactRange(), MemoryTree()
    leaves: list[bytes] = []
    reported = []
    for size in chunks:
        batch = [leaf_hash(f"{len(leaves) + index}".encode()) for index in range(size)]
        leaves += batch
        reported += frontier.extend(batch, min_level=min_level)
        expected = [node for item in batch for node in one_by_one.append(item) if node.level >= min_level]
        assert reported[len(reported) - len(expected) :] == expected
        assert frontier.root() == naive_root(leaves)
    assert frontier == one_by_one.compact_range()


# -- proof bundles ----------------------------------------------------------------------------------------------


@pytest.fixture
def sealed(store_target: str) -> tuple[str, Any]:
    """A store of 300 rows over three signed transactions, and its writer's key."""
    key = signer()
    with BudgetStore.open(store_target, signing_key=key, origin="example.org/proofs") as store:
        store.record_many(gate_lines(250))
        store.record_many(gate_lines(40, prefix="second"))
        for line in gate_lines(10, prefix="single"):
            store.record(line)
    return store_target, key


def budget_id_at(target: str, seq: int) -> str:
    return str(rows(target)[seq - 1][1])


@pytest.mark.postgres_smoke
def test_a_bundle_verifies_offline(sealed: tuple[str, Any]) -> None:
    """prove -> JSON -> verify_proof with nothing but the writer's verifier key."""
    target, key = sealed
    for seq in (1, 256, 257, 290, 300):
        bundle = prove(budget_id_at(target, seq), target)
        assert bundle.leaf_index == seq - 1
        assert bundle.tree_size == 300  # the newest stored checkpoint covering the row
        # Spec 9.6: the note names only the last leaf's chain hash, so only that row carries one.
        assert set(bundle.row) == ({*CHAINED_COLUMNS, "chain_hash"} if seq == 300 else set(CHAINED_COLUMNS))
        result = verify_proof(bundle.to_json(), [key.verifier()])
        assert result.valid, result.message
        assert "chain_hash not covered" not in result.message
        assert (result.seq, result.origin, result.tree_size) == (seq, "example.org/proofs", 300)
        assert result.signers == (f"writer+{key.key_hash:08x}",)
        assert result.budget_id in result.message


def test_a_bundle_against_a_given_checkpoint(sealed: tuple[str, Any]) -> None:
    """--checkpoint: the bundle carries the given note; one that does not cover the row is refused."""
    target, key = sealed
    stored = Checkpoint.from_note(
        next(note for size, note in _stored(target) if size == 250)
    )
    bundle = prove(budget_id_at(target, 100), target, checkpoint=stored)
    assert bundle.tree_size == 250
    assert bundle.checkpoint == stored.note
    assert verify_proof(bundle, [key.verifier()]).valid
    with pytest.raises(ProofError, match="not among them"):
        prove(budget_id_at(target, 260), target, checkpoint=stored)
    with pytest.raises(UnknownBudgetId):
        prove("0" * 64, target)


def _stored(target: str) -> list[tuple[int, str]]:
    from tests.backends import query

    return [(row[0], row[1]) for row in query(target, "SELECT tree_size, note FROM compute_budget_checkpoints")]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_steps", 1000),
        ("status", "budget_allowed"),
        ("explanation", "Allowed, trust me."),
        ("gate_input", '{"tampered": true}'),
        ("seq", 7),
    ],
)
def test_an_edited_row_in_a_bundle_fails(sealed: tuple[str, Any], field: str, value: Any) -> None:
    """Any edit of the row breaks the path from its leaf to the signed root (or its leaf index)."""
    target, key = sealed
    document = prove(budget_id_at(target, 42), target).to_dict()
    document["row"][field] = value
    result = verify_proof(document, [key.verifier()])
    assert not result.valid
    assert result.check == "inclusion"


def test_a_bundle_signed_by_an_untrusted_key_fails(sealed: tuple[str, Any]) -> None:
    """The signature check comes first: another key, or a re-signed note, is not the trusted writer."""
    target, key = sealed
    bundle = prove(budget_id_at(target, 5), target)
    result = verify_proof(bundle, [signer("writer").verifier()])
    assert (result.valid, result.check) == (False, "signature")
    text = bundle.checkpoint[: bundle.checkpoint.index("\n\n") + 1]
    from compute_budget.core.log.note import sign_note

    impostor = sign_note(text, signer("writer"))
    forged = ProofBundle(bundle.row, bundle.leaf_index, bundle.tree_size, bundle.inclusion, impostor)
    assert verify_proof(forged, [key.verifier()]).check == "signature"
    unsigned = ProofBundle(bundle.row, bundle.leaf_index, bundle.tree_size, bundle.inclusion, text)
    assert "unsigned" in verify_proof(unsigned, [key.verifier()]).message
    assert verify_proof(bundle, [key.verifier()], origin="example.org/other").check == "origin"


def test_prove_with_trusted_keys_uses_the_newest_note_that_verifies(sealed: tuple[str, Any]) -> None:
    """Issue 28 r: a newer note filed by an insider (another key's, covering every row) is what `prove` attaches
    without keys, and the receipt fails; `prove(..., trusted_keys=...)` passes over it to the newest stored note
    the writer's key verifies, and the receipt holds."""
    from compute_budget.core.log.note import sign_note
    from tests.backends import execute

    target, key = sealed
    head = Checkpoint.from_note(next(note for size, note in _stored(target) if size == 300))
    stranger = signer("writer")  # the writer's name, another key
    execute(target, (
        "INSERT INTO compute_budget_checkpoints (tree_size, key_name, key_hash, note, recorded_at) "
        "VALUES (300, :name, :hash, :note, 'x')",
        {"name": key.name, "hash": f"{key.key_hash:08x}", "note": sign_note(head.note_text(), stranger)},
    ))
    budget_id = budget_id_at(target, 42)
    assert verify_proof(prove(budget_id, target), [key.verifier()]).check == "signature"
    for keys in ([key.verifier()], [key.verifier().format()], [signer("other").verifier(), key.verifier()]):
        bundle = prove(budget_id, target, trusted_keys=keys)
        assert bundle.tree_size == 300
        assert verify_proof(bundle, [key.verifier()]).valid
    with pytest.raises(ProofError, match="no stored checkpoint covering row 42 carries a valid signature"):
        prove(budget_id, target, trusted_keys=[signer("auditor").verifier()])


def test_a_bundle_without_a_stored_signature_carries_the_unsigned_head(tmp_path: Path) -> None:
    """A store that never signed proves against its head's bare note, which no trusted key vouches for."""
    with BudgetStore.open(tmp_path / "unsigned.db") as store:
        store.record_many(gate_lines(5))
    bundle = prove(budget_id_at(str(tmp_path / "unsigned.db"), 2), tmp_path / "unsigned.db")
    assert "\n\n" not in bundle.checkpoint
    assert Checkpoint.from_note(bundle.checkpoint).seq == 5
    assert verify_proof(bundle, [signer().verifier()]).check == "signature"


def test_a_signed_row_that_does_not_rederive_fails_the_rederive_check(tmp_path: Path) -> None:
    """A row edited before a signature was made over it (by a leaked key: an honest writer refuses to sign rows it
    did not write, spec 9.1) is included and signed, but its gate gives another decision: verify-proof re-derives
    it as the audit does."""
    from compute_budget.core.log.note import format_checkpoint, sign_note

    target = str(tmp_path / "store.db")
    with BudgetStore.open(target) as store:
        store.record_many(gate_lines(6))
    tamper(target, "UPDATE compute_budget_decisions SET max_steps = 99 WHERE seq = 1")
    key = signer()
    with BudgetStore.open(target, signing_key=key) as store, pytest.raises(StoreDamaged, match=r"rows 1\.\.6"):
        store.record_many(gate_lines(1, prefix="later"))
    with BudgetStore.open(target, readonly=True) as store:
        head = store.checkpoint()
    assert head.origin is not None
    assert head.root is not None
    leaked = sign_note(format_checkpoint(head.origin, head.seq, head.root, head.chain_hash), key)
    bundle = prove(budget_id_at(target, 1), target, checkpoint=Checkpoint.from_note(leaked))
    result = verify_proof(bundle, [key.verifier()])
    assert (result.valid, result.check) == (False, "rederive")
    assert "max_steps stored 99, policy gives" in result.message


@pytest.mark.parametrize(
    "spoil",
    [
        lambda d: d.pop("inclusion"),
        lambda d: d["row"].pop("recorded_at"),
        lambda d: d["row"].update(extra=1),
        lambda d: d.update(format="other"),
        lambda d: d.update(leaf_index=-1),
        lambda d: d.update(inclusion=["zz"]),
        lambda d: d["row"].update(max_steps="10"),
        lambda d: d.update(checkpoint="not a note"),
    ],
)
def test_an_incomplete_bundle_is_malformed(sealed: tuple[str, Any], spoil: Any) -> None:
    """A bundle missing a part or of the wrong types cannot be checked at all: `MalformedProof` (exit 2)."""
    target, key = sealed
    document = prove(budget_id_at(target, 3), target).to_dict()
    spoil(document)
    with pytest.raises(MalformedProof):
        verify_proof(json.dumps(document), [key.verifier()])


def test_a_corrupted_path_fails_inclusion(sealed: tuple[str, Any]) -> None:
    """One flipped proof hash, or a wrong leaf index, and the root is not reached."""
    target, key = sealed
    bundle = prove(budget_id_at(target, 77), target)
    for at in range(len(bundle.inclusion)):
        spoiled = list(bundle.inclusion)
        spoiled[at] = bytes(byte ^ 1 for byte in spoiled[at])
        broken = ProofBundle(bundle.row, bundle.leaf_index, bundle.tree_size, tuple(spoiled), bundle.checkpoint)
        assert verify_proof(broken, [key.verifier()]).check == "inclusion"
    document = copy.deepcopy(bundle.to_dict())
    document["leaf_index"] = 77
    assert verify_proof(document, [key.verifier()]).check == "inclusion"


# -- consistency ------------------------------------------------------------------------------------------------


def test_the_store_extends_its_older_checkpoints(sealed: tuple[str, Any]) -> None:
    """Every stored checkpoint is extended by the head, with a proof that verifies offline."""
    target, key = sealed
    for size, note in _stored(target):
        proof = prove_consistency(note, target, trusted_keys=[key.verifier()])
        assert (proof.old_size, proof.new_size) == (size, 300)
        assert verify_consistency(proof.to_json(), old=Checkpoint.from_note(note))
        assert len(proof.proof) <= 2 * 9
    document = prove_consistency(_stored(target)[0][1], target).to_dict()
    document["proof"][0] = "00" * 32
    assert not verify_consistency(document)
    assert not ConsistencyProof.parse(document).verify()


@pytest.mark.postgres_smoke
def test_consistency_fails_for_a_rewritten_other_or_untrusted_checkpoint(sealed: tuple[str, Any]) -> None:
    """Another log, an untrusted signer, a rewritten or a truncated history: `NotConsistent` with its reason."""
    target, _ = sealed
    old = _stored(target)[0][1]
    with pytest.raises(NotConsistent) as untrusted:
        prove_consistency(old, target, trusted_keys=[signer("auditor").verifier()])
    assert untrusted.value.reason == "untrusted"
    other = Checkpoint.from_note(old)
    foreign = Checkpoint(other.seq, other.chain_hash, None, "example.org/elsewhere", other.root)
    with pytest.raises(NotConsistent) as elsewhere:
        prove_consistency(foreign, target)
    assert elsewhere.value.reason == "origin"
    rewrite_consistently(target, 10)
    with pytest.raises(NotConsistent) as rewritten:
        prove_consistency(old, target)
    assert rewritten.value.reason == "rewritten"


def test_consistency_reports_a_truncated_store(tmp_path: Path) -> None:
    """A checkpoint naming more rows than the store holds: `truncated`."""
    target = str(tmp_path / "store.db")
    with BudgetStore.open(target) as store:
        store.record_many(gate_lines(8))
        future = store.checkpoint()
    from tests.backends import tamper_all

    tamper_all(target, "DELETE FROM compute_budget_decisions WHERE seq > 5")
    with pytest.raises(NotConsistent) as truncated:
        prove_consistency(future, target)
    assert truncated.value.reason == "truncated"


@pytest.mark.parametrize(
    ("column", "value", "said"),
    [
        ("seq", "3", "seq as text: it must be an integer"),
        ("budget_id", 7, "budget_id as an integer: it must be text"),
        ("max_steps", 2**63, "max_steps as an integer out of range"),
        ("max_wallclock_ms", "1", "max_wallclock_ms as text: it must be an integer or null"),
        ("status", None, "status of type NoneType: it must be text"),
    ],
)
def test_a_row_value_of_the_wrong_kind_is_named_as_such(
    sealed: tuple[str, Any], column: str, value: Any, said: str
) -> None:
    """`"seq": "3"` was reported as 'text that is not valid Unicode' (and text in an integer column alike): the
    message says what the value is and what it must be."""
    target, key = sealed
    document = prove(budget_id_at(target, 3), target).to_dict()
    document["row"][column] = value
    with pytest.raises(MalformedProof, match=re.escape(said)):
        verify_proof(json.dumps(document), [key.verifier()])
