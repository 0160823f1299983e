"""Witness keys and cosignatures of spec 9.2 (C2SP tlog-cosignature): the vector byte for byte, and non-counts."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compute_budget.core.log.cosignature import (
    MAX_FUTURE_SECONDS,
    WitnessKey,
    WitnessSigner,
    cosigned_message,
    generate_witness,
    valid_cosignatures,
    with_cosignatures,
)
from compute_budget.core.log.note import SignerKey, VerifierKey, add_signature, parse_note, sign_note, verify_note
from compute_budget.errors import NoteError
from tests.conftest import REPO_ROOT

VECTOR = json.loads((REPO_ROOT / "tests" / "vectors" / "cosignature.json").read_text(encoding="utf-8"))
SIGNER = WitnessSigner.from_seed(VECTOR["name"], bytes.fromhex(VECTOR["seed_hex"]))
NOW = VECTOR["timestamp"] + 10


def _writer_note() -> str:
    """The vector's checkpoint text signed by a writer's note key (the line a witness cosigns beside)."""
    writer = SignerKey.from_seed("example.com/behind-the-sofa", bytes(range(32)))
    return sign_note(VECTOR["checkpoint_text"], writer)


def test_the_key_id_and_both_key_texts_are_the_vectors() -> None:
    """Key ID, verifier key and signer key text, byte for byte."""
    assert f"{SIGNER.key_id:08x}" == VECTOR["key_id_hex"]
    assert SIGNER.verifier().public_key.hex() == VECTOR["public_key_hex"]
    assert SIGNER.verifier().format() == VECTOR["verifier_key"]
    assert SIGNER.format() == VECTOR["signer_key"]
    assert WitnessKey.parse(VECTOR["verifier_key"]) == SIGNER.verifier()
    assert WitnessSigner.parse(VECTOR["signer_key"]) == SIGNER


def test_the_signed_message_and_the_line_are_the_vectors() -> None:
    """The message is ``cosignature/v1``, the time, then the whole checkpoint text; the line matches exactly."""
    message = cosigned_message(VECTOR["checkpoint_text"], VECTOR["timestamp"])
    assert message.decode() == VECTOR["signed_message"]
    assert SIGNER.cosign(VECTOR["checkpoint_text"], VECTOR["timestamp"]).line() == VECTOR["cosignature_line"]


def test_the_cosigned_note_verifies_and_names_its_timestamp() -> None:
    """The vector's cosigned note carries one valid cosignature at the vector's time."""
    found = valid_cosignatures(VECTOR["cosigned_note"], [SIGNER.verifier()], now=NOW)
    assert [(item.key, item.timestamp) for item in found] == [(SIGNER.verifier(), VECTOR["timestamp"])]


@pytest.mark.parametrize("name", sorted(VECTOR["must_not_verify"]))
def test_the_must_not_verify_lines_never_count(name: str) -> None:
    """A changed timestamp and a plain note signature by the same key are not cosignatures."""
    note = VECTOR["checkpoint_text"] + "\n" + VECTOR["must_not_verify"][name]
    assert valid_cosignatures(note, [SIGNER.verifier()], now=NOW) == []


def test_a_writer_signature_never_counts_as_a_cosignature_and_a_cosignature_never_as_a_writer_signature() -> None:
    """Roles do not mix: the key IDs and the messages differ (0x01 against 0x04)."""
    writer = SignerKey.from_seed(VECTOR["name"], bytes.fromhex(VECTOR["seed_hex"]))  # same name, same seed
    note = sign_note(VECTOR["checkpoint_text"], writer)
    assert valid_cosignatures(note, [SIGNER.verifier()], now=NOW) == []
    cosigned = with_cosignatures(note, [SIGNER.cosign(VECTOR["checkpoint_text"], VECTOR["timestamp"])])
    checked = verify_note(cosigned, [writer.verifier()])
    assert checked.ok
    assert len(checked.unknown) == 1  # the cosignature is another key's line to a note verifier


def test_a_timestamp_too_far_ahead_or_above_the_signed_range_is_invalid() -> None:
    """More than 600 s ahead of the verifier's clock: invalid; exactly 600 s: valid."""
    line = SIGNER.cosign(VECTOR["checkpoint_text"], VECTOR["timestamp"])
    note = VECTOR["checkpoint_text"] + "\n" + line.line()
    assert valid_cosignatures(note, [SIGNER.verifier()], now=VECTOR["timestamp"] - MAX_FUTURE_SECONDS)
    assert valid_cosignatures(note, [SIGNER.verifier()], now=VECTOR["timestamp"] - MAX_FUTURE_SECONDS - 1) == []
    with pytest.raises(NoteError, match="outside"):
        SIGNER.cosign(VECTOR["checkpoint_text"], 2**63)


def test_a_cosignature_of_another_checkpoint_does_not_verify() -> None:
    """The signature covers the whole text: the chain line included."""
    line = SIGNER.cosign(VECTOR["checkpoint_text"], VECTOR["timestamp"])
    other = VECTOR["checkpoint_text"].replace("chain abab", "chain cdcd")
    assert valid_cosignatures(other + "\n" + line.line(), [SIGNER.verifier()], now=NOW) == []


def test_key_types_do_not_mix_when_parsed() -> None:
    """A note key is not a witness key and a witness key is not a note key; each error says which it is."""
    writer = SignerKey.from_seed("w", bytes(32))
    with pytest.raises(NoteError, match=r"note key \(type 0x01\)"):
        WitnessKey.parse(writer.verifier().format())
    with pytest.raises(NoteError, match=r"witness key \(type 0x04\)"):
        VerifierKey.parse(VECTOR["verifier_key"])
    with pytest.raises(NoteError) as raised:
        WitnessSigner.parse(writer.format())
    assert writer.format() not in str(raised.value)


def test_with_cosignatures_adds_each_line_once() -> None:
    """Adding a cosignature the note already carries leaves it unchanged."""
    line = SIGNER.cosign(VECTOR["checkpoint_text"], VECTOR["timestamp"])
    once = with_cosignatures(_writer_note(), [line])
    assert with_cosignatures(once, [line, line]) == once
    assert len(parse_note(once)[1]) == 2


@given(st.binary(min_size=32, max_size=32), st.integers(min_value=0, max_value=2**63 - 1))
def test_every_cosignature_verifies_under_its_own_key_only(seed: bytes, timestamp: int) -> None:
    """A cosignature made at any valid time verifies under its key, and not under another witness's."""
    signer = WitnessSigner.from_seed("w", seed)
    note = add_signature(_writer_note(), SignerKey.from_seed("x", seed))
    cosigned = with_cosignatures(note, [signer.cosign(parse_note(note)[0], timestamp)])
    assert [item.timestamp for item in valid_cosignatures(cosigned, [signer.verifier()], now=timestamp)] == [timestamp]
    other = generate_witness("w")
    assert valid_cosignatures(cosigned, [other.verifier()], now=timestamp) == []
