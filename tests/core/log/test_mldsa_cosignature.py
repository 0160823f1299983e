"""ML-DSA-44 cosignatures (C2SP tlog-cosignature, type 0x06, subtree/v1): the vectors made here from a fixed seed
(C2SP publishes none), flipped bytes, wrong key types, and key ID collisions with the Ed25519 type."""

from __future__ import annotations

import base64
import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute_budget.core.log.cosignature import (
    WitnessKey,
    WitnessSigner,
    generate_witness,
    is_fresh,
    is_witness_key_text,
    valid_cosignatures,
)
from compute_budget.core.log.mldsa_cosignature import (
    ALGORITHM_MLDSA44_COSIGNATURE,
    checkpoint_message,
    subtree_message,
)
from compute_budget.core.log.note import Signature, SignerKey, VerifierKey, parse_note
from compute_budget.errors import NoteError
from tests.vectors import mldsa_cosignature_vectors as made

VECTOR = json.loads(made.MLDSA_FILE.read_text(encoding="utf-8"))
SIGNER = WitnessSigner.from_seed(VECTOR["name"], bytes.fromhex(VECTOR["seed_hex"]), ALGORITHM_MLDSA44_COSIGNATURE)
KEY = SIGNER.verifier()
NOW = made.TIMESTAMP + 10
FIRST = VECTOR["cosignatures"][0]


def _counted(text: str, line: str, key: WitnessKey = KEY) -> list[int]:
    """The timestamps of `line`'s valid cosignatures of `text` by `key`."""
    return [found.timestamp for found in valid_cosignatures(text + "\n" + line, [key], now=NOW)]


def _by_hand(cosigner: str, timestamp: int, origin: str, start: int, end: int, root: bytes) -> bytes:
    """C2SP's cosigned_message written out with struct, apart from the code under test."""
    name, log = cosigner.encode(), origin.encode()
    return (b"subtree/v1\n\x00" + bytes([len(name)]) + name + struct.pack(">Q", timestamp) + bytes([len(log)]) + log
            + struct.pack(">QQ", start, end) + root)


def test_the_generator_reproduces_the_committed_file() -> None:
    """generate.py keeps the committed hedged lines while they verify, and every other field is reproduced."""
    assert made.render(made.build(made.committed())) == made.MLDSA_FILE.read_text(encoding="utf-8")


def test_the_key_id_public_key_and_key_texts_are_the_vectors() -> None:
    """Key ID = SHA-256(name || 0x0A || 0x06 || public key)[:4]; both key texts byte for byte, and parsed back."""
    assert KEY.public_key.hex() == VECTOR["public_key_hex"]
    assert len(KEY.public_key) == 1312
    assert f"{SIGNER.key_id:08x}" == VECTOR["key_id_hex"]
    assert KEY.format() == VECTOR["verifier_key"]
    assert SIGNER.format() == VECTOR["signer_key"]
    assert WitnessKey.parse(VECTOR["verifier_key"]) == KEY
    assert WitnessSigner.parse(VECTOR["signer_key"]) == SIGNER
    assert KEY.algorithm == ALGORITHM_MLDSA44_COSIGNATURE
    assert KEY.type_name == "ML-DSA-44"
    assert is_witness_key_text(VECTOR["verifier_key"])
    assert is_witness_key_text(VECTOR["signer_key"])


@pytest.mark.parametrize("index", range(len(VECTOR["subtree_messages"])))
def test_subtree_messages_are_the_vectors_and_c2sp_layout(index: int) -> None:
    """Each cosigned_message is the vector's bytes and the structure written out by hand."""
    item = VECTOR["subtree_messages"][index]
    fields = (item["cosigner"], item["timestamp"], item["origin"], item["start"], item["end"],
              bytes.fromhex(item["hash_hex"]))
    assert subtree_message(*fields).hex() == item["message_hex"]
    assert _by_hand(*fields).hex() == item["message_hex"]


@pytest.mark.parametrize("index", range(len(VECTOR["cosignatures"])))
def test_each_vector_line_verifies_with_its_timestamp_and_ignores_extension_lines(index: int) -> None:
    """The line verifies on its checkpoint and on the same checkpoint with other extension lines (subtree/v1
    covers origin, size and root only); the message is the checkpoint's subtree [0, size)."""
    item = VECTOR["cosignatures"][index]
    origin, size, root = item["checkpoint_text"].split("\n")[:3]
    assert checkpoint_message(VECTOR["name"], item["checkpoint_text"], item["timestamp"]).hex() == item["message_hex"]
    assert _by_hand(VECTOR["name"], item["timestamp"], origin, 0, int(size), base64.b64decode(root)).hex() == (
        item["message_hex"])
    for text in [item["checkpoint_text"], *item["also_verifies_on"]]:
        assert _counted(text, item["cosignature_line"]) == [item["timestamp"]]


@pytest.mark.parametrize("name", sorted(VECTOR["must_not_verify"]))
def test_the_must_not_verify_lines_never_count(name: str) -> None:
    """Flipped key ID, timestamp or signature bytes, an Ed25519-sized line, a truncated one, another root."""
    case = VECTOR["must_not_verify"][name]
    text, line = (case["checkpoint_text"], case["cosignature_line"]) if isinstance(case, dict) else (
        FIRST["checkpoint_text"], case)
    assert _counted(text, line) == []


@pytest.mark.parametrize("name", sorted(VECTOR["bad_verifier_keys"]))
def test_the_bad_verifier_keys_are_refused(name: str) -> None:
    """A type byte that is not 0x06 on a 1312-byte key, a truncated key, a key ID of another name or type."""
    with pytest.raises(NoteError):
        WitnessKey.parse(VECTOR["bad_verifier_keys"][name])


def test_an_ml_dsa_key_is_never_a_note_key_and_a_note_key_never_a_witness_key() -> None:
    """The writer's parsers refuse type 0x06 (verifier and signer); the witness parser refuses type 0x01."""
    with pytest.raises(NoteError, match="33 bytes"):
        VerifierKey.parse(VECTOR["verifier_key"])
    with pytest.raises(NoteError, match="0x06"):
        SignerKey.parse(VECTOR["signer_key"])
    note_key = SignerKey.from_seed("witness.example/pq1", bytes(32))
    with pytest.raises(NoteError, match="type 0x01"):
        WitnessKey.parse(note_key.verifier().format())
    with pytest.raises(NoteError, match="type 0x01"):
        WitnessSigner.parse(note_key.format())
    assert not is_witness_key_text(note_key.verifier().format())


def test_signing_is_hedged_and_every_signature_verifies() -> None:
    """Two cosignatures of one checkpoint differ (cryptography's ML-DSA is randomized) and both count: why the
    vectors are checked by verification."""
    first, second = (SIGNER.cosign(FIRST["checkpoint_text"], made.TIMESTAMP) for _ in range(2))
    assert first != second
    assert _counted(FIRST["checkpoint_text"], first.line()) == _counted(FIRST["checkpoint_text"], second.line()) == [
        made.TIMESTAMP]


LINE_BYTES = base64.b64decode(FIRST["cosignature_line"].rstrip("\n").split(" ")[2])


@settings(max_examples=150, deadline=None)
@given(st.integers(0, len(LINE_BYTES) - 1), st.integers(0, 7))
def test_any_flipped_bit_of_a_line_is_refused(index: int, bit: int) -> None:
    """Flip one bit anywhere in key ID || timestamp || signature: the line no longer counts."""
    spoiled = bytearray(LINE_BYTES)
    spoiled[index] ^= 1 << bit
    line = f"\u2014 {VECTOR['name']} {base64.b64encode(bytes(spoiled)).decode()}\n"
    assert _counted(FIRST["checkpoint_text"], line) == []


@settings(max_examples=25, deadline=None)
@given(st.binary(min_size=32, max_size=32), st.integers(1, NOW))
def test_a_key_id_collision_never_confuses_the_two_types(seed: bytes, timestamp: int) -> None:
    """An Ed25519 and an ML-DSA-44 witness key under one name, each line relabelled with the other key's ID: the
    other key refuses it (another size, another message), its own key still takes the original."""
    ed25519 = WitnessSigner.from_seed(VECTOR["name"], seed)
    mldsa = WitnessSigner.from_seed(VECTOR["name"], seed, ALGORITHM_MLDSA44_COSIGNATURE)
    text = FIRST["checkpoint_text"]
    for signer, other in ((ed25519, mldsa), (mldsa, ed25519)):
        line = signer.cosign(text, timestamp)
        assert _counted(text, line.line(), signer.verifier()) == [timestamp]
        collided = Signature(other.name, other.key_id, line.signature)
        assert _counted(text, collided.line(), other.verifier()) == []
    assert ed25519.verifier() != mldsa.verifier()
    assert ed25519.key_id != mldsa.key_id


def test_a_writer_signature_never_counts_as_an_ml_dsa_cosignature() -> None:
    """A note signature by a writer key of the same name, even relabelled with the witness's key ID."""
    writer = SignerKey.from_seed(VECTOR["name"], bytes(range(32)))
    raw = writer.sign(FIRST["checkpoint_text"].encode())
    assert _counted(FIRST["checkpoint_text"], Signature(KEY.name, KEY.key_id, raw).line()) == []
    _, lines = parse_note(FIRST["checkpoint_text"] + "\n" + FIRST["cosignature_line"])
    assert not VerifierKey(writer.name, writer.verifier().key_hash, writer.public_key).verify(
        FIRST["checkpoint_text"].encode(), lines[0].signature)


def test_timestamp_zero_is_a_valid_cosignature_that_is_never_fresh() -> None:
    """subtree/v1: 0 makes no claim of being the largest tree seen. The cosignature counts (consistency), but no
    maximum age makes it fresh."""
    zero = next(item for item in VECTOR["cosignatures"] if item["timestamp"] == 0)
    assert _counted(zero["checkpoint_text"], zero["cosignature_line"]) == [0]
    assert not is_fresh(0, now=100, max_age=10**18)
    assert is_fresh(1, now=100, max_age=99)
    assert not is_fresh(1, now=100, max_age=98)


def test_subtree_rules_and_field_limits() -> None:
    """C2SP: a subtree not starting at 0 has timestamp 0; names and origins are 1-255 bytes."""
    with pytest.raises(NoteError, match="timestamp 0"):
        subtree_message("w", 5, "o", 1, 2, bytes(32))
    with pytest.raises(NoteError, match="255"):
        WitnessSigner.from_seed("w" * 256, bytes(32), ALGORITHM_MLDSA44_COSIGNATURE)
    long_origin = "o" * 256 + "\n1\n" + base64.b64encode(bytes(32)).decode() + "\n"
    with pytest.raises(NoteError, match="255"):
        SIGNER.cosign(long_origin, made.TIMESTAMP)
    assert SIGNER.origin_problem("o" * 256) is not None
    assert SIGNER.origin_problem("o" * 255) is None
    assert WitnessSigner.from_seed("w", bytes(32)).origin_problem("o" * 256) is None  # Ed25519 signs any text


def test_generated_ml_dsa_witness_keys_round_trip() -> None:
    """generate_witness(ml_dsa=True): a new type 0x06 key whose texts parse back and whose cosignatures count."""
    signer = generate_witness("witness.example/new", ml_dsa=True)
    assert signer.algorithm == ALGORITHM_MLDSA44_COSIGNATURE
    assert WitnessSigner.parse(signer.format()) == signer
    assert WitnessKey.parse(signer.verifier().format()) == signer.verifier()
    line = signer.cosign(FIRST["checkpoint_text"], made.TIMESTAMP).line()
    assert _counted(FIRST["checkpoint_text"], line, signer.verifier()) == [made.TIMESTAMP]
    assert "seed" not in repr(signer)
    assert signer.format() not in repr(signer)


def test_a_cryptography_build_without_ml_dsa_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cryptography built against an OpenSSL without ML-DSA: a `NoteError` naming what is needed, never a
    traceback, and never a cosignature silently judged invalid."""
    from cryptography.exceptions import UnsupportedAlgorithm

    from compute_budget.core.log import mldsa_cosignature

    class Unsupported:
        @staticmethod
        def from_public_bytes(data: bytes) -> None:
            raise UnsupportedAlgorithm("ML-DSA")

        @staticmethod
        def generate() -> None:
            raise UnsupportedAlgorithm("ML-DSA")

    monkeypatch.setattr(mldsa_cosignature, "MLDSA44PublicKey", Unsupported)
    monkeypatch.setattr(mldsa_cosignature, "MLDSA44PrivateKey", Unsupported)
    with pytest.raises(NoteError, match="cryptography 48"):
        valid_cosignatures(FIRST["checkpoint_text"] + "\n" + FIRST["cosignature_line"], [KEY], now=NOW)
    with pytest.raises(NoteError, match=r"OpenSSL 3\.5"):
        generate_witness("witness.example/new", ml_dsa=True)
