"""The C2SP tlog-proof format (core/log/tlog_proof.py): the golden vectors, the RFC 6962 vectors, round trips,
and one typed line for every malformed proof."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute_budget.core.chain import CHAINED_COLUMNS
from compute_budget.core.leaf import leaf_input
from compute_budget.core.log.merkle import MemoryTree, inclusion_proof, leaf_hash, verify_inclusion
from compute_budget.core.log.note import VerifierKey, format_checkpoint, sign_note, verify_note
from compute_budget.core.log.tlog_proof import MAX_PROOF_HASHES, TLOG_PROOF_HEADER, TlogProof, is_tlog_proof
from compute_budget.core.receipts import verify_proof
from compute_budget.errors import MalformedProof, MalformedTlogProof
from tests.vectors import tlog_proof_vectors as made

VECTORS: dict[str, Any] = json.loads(made.TLOG_PROOF_FILE.read_text(encoding="utf-8"))
RFC6962: dict[str, Any] = json.loads((made.HERE / "rfc6962.json").read_text(encoding="utf-8"))
KEY = VerifierKey.parse(VECTORS["verifier_key"])
NOTE = VECTORS["rfc6962"][0]["proof"].partition("\n\n")[2]  # a signed C2SP checkpoint of the vector key


def test_the_golden_file_is_what_the_generator_makes_from_the_fixed_key() -> None:
    """tests/vectors/generate.py reproduces tlog-proof.json byte for byte (Ed25519 is deterministic)."""
    assert made.render(made.build()) == made.TLOG_PROOF_FILE.read_text(encoding="utf-8")
    assert VECTORS["c2sp"].startswith("C2SP/C2SP tlog-proof.md at commit 0065ea5")


@pytest.mark.parametrize("vector", VECTORS["rfc6962"], ids=lambda v: f"size{v['tree_size']}-index{v['index']}")
def test_a_proof_of_each_rfc6962_leaf_verifies(vector: dict[str, Any]) -> None:
    """Every proof built for the RFC 6962 vectors' leaves reads back to the same text, its extra is the vector
    leaf, its checkpoint's root is the vector root, its note's signature verifies, and the extra hashed as the leaf
    at index reaches that root by the proof's hashes (equal to the vector's path where rfc6962.json lists one)."""
    proof = TlogProof.parse(vector["proof"])
    size, index = vector["tree_size"], vector["index"]
    assert proof.encode() == vector["proof"]
    assert proof.index == index
    assert proof.extra == bytes.fromhex(RFC6962["leaves_hex"][index])
    assert proof.tree.size == size
    assert proof.tree.root.hex() == RFC6962["roots_hex"][size]
    assert verify_note(proof.checkpoint, [KEY]).ok
    assert verify_inclusion(leaf_hash(proof.extra), index, size, proof.hashes, proof.tree.root)
    assert not verify_inclusion(leaf_hash(proof.extra + b"x"), index, size, proof.hashes, proof.tree.root)
    listed = [item["path"] for item in RFC6962["inclusion"] if (item["leaf_index"], item["tree_size"]) == (index, size)]
    for path in listed:
        assert [item.hex() for item in proof.hashes] == path


def test_the_rfc6962_vectors_cover_every_index_of_every_size() -> None:
    """36 proofs: sizes 1..8, every index below each; the empty leaf of the vectors is the line `extra ` (empty
    data is still extra data, unlike no extra line at all)."""
    assert sorted((v["tree_size"], v["index"]) for v in VECTORS["rfc6962"]) == [
        (size, index) for size in range(1, 9) for index in range(size)
    ]
    assert VECTORS["rfc6962"][0]["proof"].split("\n")[1] == "extra "
    assert TlogProof.parse(VECTORS["rfc6962"][0]["proof"]).extra == b""


@pytest.mark.parametrize("vector", VECTORS["receipts"], ids=lambda v: f"seq{v['seq']}")
def test_each_receipt_vector_verifies_with_its_line(vector: dict[str, Any]) -> None:
    """A receipt of the three-row vector log: valid under the vector key and origin, with the golden line (which
    always says `chain_hash not covered`); under another key it is `invalid (signature)`."""
    outcome = verify_proof(vector["proof"], [KEY], origin=VECTORS["receipt_origin"])
    assert (outcome.valid, outcome.message) == (True, vector["verified"])
    assert (outcome.seq, outcome.budget_id) == (vector["seq"], vector["budget_id"])
    assert outcome.message.endswith("; chain_hash not covered")
    assert verify_proof(TlogProof.parse(vector["proof"]), [KEY]).valid
    other = VerifierKey.parse("PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW")
    assert verify_proof(vector["proof"], [other]).check == "signature"


@pytest.mark.parametrize("vector", VECTORS["malformed"], ids=lambda v: v["name"])
def test_each_malformed_vector_is_one_typed_line(vector: dict[str, Any]) -> None:
    """Wrong header, bad base64, stray bits, a bad index, too many hashes, a missing or unsigned checkpoint,
    trailing junk ...: `MalformedTlogProof` with the golden message, one line; verify_proof raises the same."""
    with pytest.raises(MalformedTlogProof) as raised:
        TlogProof.parse(vector["proof"])
    assert str(raised.value) == vector["error"]
    assert "\n" not in vector["error"]
    assert vector["error"].startswith("malformed tlog-proof: ")
    with pytest.raises(MalformedTlogProof):
        verify_proof(vector["proof"], [KEY])


def test_the_malformed_vectors_name_each_kind_of_fault() -> None:
    """The golden list keeps the faults the brief names (it could silently lose one on regeneration)."""
    names = {vector["name"] for vector in VECTORS["malformed"]}
    assert {"wrong-header", "extra-not-base64", "too-many-hashes", "missing-checkpoint", "trailing-junk-line",
            "hash-31-bytes", "index-leading-zero", "checkpoint-unsigned"} <= names


hashes = st.lists(st.binary(min_size=32, max_size=32), max_size=MAX_PROOF_HASHES).map(tuple)
origins = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E).filter(lambda c: c != "+"), min_size=1,
                  max_size=30)
extensions = st.lists(st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=20),
                      max_size=3)


@st.composite
def checkpoints(draw: st.DrawFn) -> str:
    """A signed C2SP checkpoint note: random origin, size, root and extension lines."""
    from tests.vectors.tlog_proof_vectors import SIGNER

    size = draw(st.integers(0, 2**64 - 1))
    root = base64.b64encode(draw(st.binary(min_size=32, max_size=32))).decode("ascii")
    lines = [draw(origins), str(size), root, *draw(extensions)]
    return sign_note("\n".join(lines) + "\n", SIGNER)


proofs = st.builds(
    TlogProof, st.integers(0, 2**64 - 2), hashes, checkpoints(), st.one_of(st.none(), st.binary(max_size=300))
)


@settings(max_examples=300, deadline=None)
@given(proof=proofs)
def test_encode_then_parse_gives_the_same_proof_and_the_same_text(proof: TlogProof) -> None:
    """Round trip: parse(encode(p)) == p and encode(parse(text)) == text; the layout is C2SP's (header, the extra
    line only when there is extra data, index, one hash per line, an empty line, the checkpoint verbatim)."""
    text = proof.encode()
    again = TlogProof.parse(text)
    assert again == proof
    assert again.encode() == text
    assert TlogProof.parse(text.encode("utf-8")) == proof
    lines = text.split("\n")
    assert lines[0] == TLOG_PROOF_HEADER
    assert lines[1].startswith("extra ") == (proof.extra is not None)
    at = 2 if proof.extra is not None else 1
    assert lines[at] == f"index {proof.index}"
    assert lines[at + 1 + len(proof.hashes)] == ""
    assert text.endswith(proof.checkpoint)
    assert is_tlog_proof(text)


@settings(max_examples=300, deadline=None)
@given(proof=proofs, data=st.data())
def test_a_proof_with_one_line_changed_is_read_or_refused_in_one_line(proof: TlogProof, data: st.DataObject) -> None:
    """Any one line replaced, dropped or doubled: parse gives a proof or `MalformedTlogProof`, never another
    error, and never a message over one line."""
    lines = proof.encode().split("\n")
    at = data.draw(st.integers(0, len(lines) - 1))
    action = data.draw(st.sampled_from(["replace", "drop", "double"]))
    if action == "replace":
        lines[at] = data.draw(st.text(max_size=60))
    elif action == "drop":
        del lines[at]
    else:
        lines.insert(at, lines[at])
    assert "\n" not in _refusal("\n".join(lines))


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=200), st.binary(max_size=200).map(lambda raw: TLOG_PROOF_HEADER.encode() + raw)))
def test_any_text_is_a_proof_or_one_typed_line(text: str | bytes) -> None:
    """Arbitrary text, and the header followed by arbitrary bytes (not UTF-8 among them): never another error."""
    assert "\n" not in _refusal(text)


def _refusal(text: str | bytes) -> str:
    """The one line `parse` refuses `text` with, or "" when it reads it (any other error fails the test)."""
    try:
        TlogProof.parse(text)
    except MalformedTlogProof as error:
        return str(error)
    return ""


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"index": -1}, "index -1 is not an integer"),
        ({"index": 2**64 - 1}, "is not an integer from 0 to 2**64-2"),
        ({"index": True}, "index True"),
        ({"hashes": (bytes(31),)}, "32 bytes"),
        ({"hashes": (bytes(32),) * 65}, "at most 64 hashes"),
        ({"extra": "text"}, "extra must be bytes"),
        ({"checkpoint": "origin\n1\n" + "A" * 43 + "=\n"}, "carries no signature"),
    ],
)
def test_a_proof_that_could_not_be_encoded_is_not_built(fields: dict[str, Any], message: str) -> None:
    """The constructor checks what `encode` relies on: a value `parse` could not read back is refused."""
    arguments: dict[str, Any] = {"index": 0, "hashes": (), "checkpoint": NOTE, "extra": None, **fields}
    with pytest.raises(MalformedTlogProof, match=re.escape(message)):
        TlogProof(**arguments)


def test_text_that_is_not_utf8_is_refused() -> None:
    """Bytes that are not UTF-8 are one line, not a UnicodeDecodeError."""
    with pytest.raises(MalformedTlogProof, match="not UTF-8"):
        TlogProof.parse(TLOG_PROOF_HEADER.encode() + b"\nindex 0\n\n\xff\n")


def test_the_first_line_tells_the_formats_apart() -> None:
    """A tlog-proof of any version is read as one (so v2 is `wrong header`), a JSON bundle is not."""
    assert is_tlog_proof(b"c2sp.org/tlog-proof@v1\n")
    assert is_tlog_proof("c2sp.org/tlog-proof@v2\n")
    assert not is_tlog_proof('{"format": "compute_budget.proof.v1"}')
    assert not is_tlog_proof(b"")


# -- receipts: extra is a row's leaf input, authenticated by the inclusion proof ------------------------------


def _log_of(leaf_inputs: list[bytes]) -> tuple[MemoryTree, str]:
    _, chain = made.receipt_log()
    tree = MemoryTree.from_leaves(leaf_inputs)
    return tree, sign_note(format_checkpoint(made.RECEIPT_ORIGIN, tree.size, tree.root(), chain), made.SIGNER)


def test_an_extra_that_is_not_the_leaf_at_index_fails_inclusion() -> None:
    """Another row's leaf input put in the extra line, or the index moved: `invalid (inclusion)`."""
    first, second = VECTORS["receipts"][0]["proof"], VECTORS["receipts"][1]["proof"]
    swapped = first.split("\n")
    swapped[1] = second.split("\n")[1]
    outcome = verify_proof("\n".join(swapped), [KEY])
    assert outcome.check == "inclusion"
    assert "index 0 is not the entry's seq 2 minus 1" in outcome.message
    edited = TlogProof.parse(second)
    row = json.loads(edited.extra or b"")
    row["max_steps"] += 1
    forged = TlogProof(edited.index, edited.hashes, edited.checkpoint, leaf_input([row[k] for k in CHAINED_COLUMNS]))
    outcome = verify_proof(forged.encode(), [KEY])
    assert (outcome.check, outcome.message) == (
        "inclusion", "the inclusion proof from the entry's leaf does not lead to the checkpoint's root"
    )


def test_an_entry_the_log_holds_but_that_is_not_canonical_fails_rederive() -> None:
    """A leaf input with a space RFC 8785 would not write, included and signed (a leaked key): the bytes verify,
    but they are not the row's leaf input, so `invalid (rederive)`."""
    rows, _ = made.receipt_log()
    loose = json.dumps(dict(zip(CHAINED_COLUMNS, rows[0], strict=True)), sort_keys=True).encode("utf-8")
    inputs = [loose, *(leaf_input(values) for values in rows[1:])]
    tree, note = _log_of(inputs)
    proof = TlogProof(0, tuple(inclusion_proof(tree, 0, tree.size)), note, loose)
    outcome = verify_proof(proof.encode(), [KEY])
    assert (outcome.check, outcome.message) == ("rederive", "the entry is not its row's leaf input as RFC 8785 "
                                                "writes it (spec 8)")


def test_a_signed_entry_whose_gate_decides_otherwise_fails_rederive() -> None:
    """The row's stored status changed before it was logged (and signed): re-derivation from the gate input, the
    same check as a bundle's, names the field."""
    rows, _ = made.receipt_log()
    row = dict(zip(CHAINED_COLUMNS, rows[0], strict=True))
    row["max_candidates"] = 999
    changed = leaf_input([row[name] for name in CHAINED_COLUMNS])
    tree, note = _log_of([changed, *(leaf_input(values) for values in rows[1:])])
    proof = TlogProof(0, tuple(inclusion_proof(tree, 0, tree.size)), note, changed)
    outcome = verify_proof(proof.encode(), [KEY])
    assert outcome.check == "rederive"
    assert "max_candidates" in outcome.message


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (None, "no entry: the tlog-proof carries no extra data"),
        (b"not json", "the tlog-proof's entry (its extra data) is not JSON"),
        (b"[1]", "is not a JSON object"),
        (b'{"seq": 1}', "is not a row's leaf input (the 17 leaf keys): missing budget_id"),
        (b'{"seq": 1, "seq": 2}', "names the key \"seq\" twice"),
    ],
)
def test_a_tlog_proof_without_a_row_is_malformed(extra: bytes | None, message: str) -> None:
    """No extra line is `no entry`; an extra that is not a leaf input is malformed: exit 2 at the command line."""
    good = TlogProof.parse(VECTORS["receipts"][0]["proof"])
    with pytest.raises(MalformedProof, match=re.escape(message)):
        verify_proof(TlogProof(good.index, good.hashes, good.checkpoint, extra), [KEY])
