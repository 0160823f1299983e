"""A witness with an ML-DSA-44 key (C2SP tlog-cosignature type 0x06) over real HTTP: its add-checkpoint answer and
its GET /latest carry subtree/v1 cosignatures that verify under its verifier key only."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from compute_budget.core.log.cosignature import WitnessSigner, valid_cosignatures
from compute_budget.core.log.mldsa_cosignature import ALGORITHM_MLDSA44_COSIGNATURE
from compute_budget.core.log.note import parse_note
from compute_budget.errors import InputError
from compute_budget.witness.server import serve_witness
from tests.witnessing import LOG, ORIGIN, WITNESS, WitnessFactory, body, note

MLDSA = WitnessSigner.from_seed("witness.example/pq", bytes(range(32)), ALGORITHM_MLDSA44_COSIGNATURE)
NOW = 1_700_000_000


def test_an_ml_dsa_witness_cosigns_and_its_line_verifies_under_its_key_only(witness_servers: WitnessFactory) -> None:
    """200 with one line of key ID || timestamp || 2420-byte ML-DSA-44 signature, valid for the same checkpoint with
    other extension lines (subtree/v1 covers none), never under the Ed25519 witness key of the same seed."""
    served = witness_servers(MLDSA, clock=lambda: NOW)
    signed = note(5)
    status, answer, _ = served.post(body(0, signed))
    assert status == 200, answer
    text, lines = parse_note(signed + answer)
    assert len(lines[-1].signature) == 8 + 2420
    found = valid_cosignatures(signed + answer, [MLDSA.verifier(), WITNESS.verifier()], now=NOW)
    assert [(item.key, item.timestamp) for item in found] == [(MLDSA.verifier(), NOW)]
    other_extension = text.replace("chain " + "ab" * 32, "chain " + "cd" * 32)
    assert other_extension != text
    assert valid_cosignatures(other_extension + "\n" + answer, [MLDSA.verifier()], now=NOW)


def test_its_latest_answer_carries_a_fresh_ml_dsa_cosignature(witness_servers: WitnessFactory) -> None:
    """GET /latest: the checkpoint, the log's signature, and a cosignature made at the witness's time."""
    times = iter([NOW, NOW + 30])
    served = witness_servers(MLDSA, clock=lambda: next(times))
    assert served.post(body(0, note(7)))[0] == 200
    status, answer, _ = served.get(f"/latest?origin={ORIGIN}")
    assert status == 200, answer
    found = valid_cosignatures(answer, [MLDSA.verifier()], now=NOW + 30)
    assert [item.timestamp for item in found] == [NOW + 30]
    assert answer.startswith(note(7).split("\n\n")[0])


def test_a_witness_whose_clock_says_0_makes_no_freshness_claim_yet_its_cosignature_verifies(
    witness_servers: WitnessFactory,
) -> None:
    """subtree/v1 allows timestamp 0 (no claim of being the largest tree seen): the line is valid, timestamp 0."""
    served = witness_servers(MLDSA, clock=lambda: 0)
    status, answer, _ = served.post(body(0, note(3)))
    assert status == 200
    raw = base64.b64decode(answer.rstrip("\n").rsplit(" ", 1)[1])
    assert raw[4:12] == bytes(8)
    assert [item.timestamp for item in valid_cosignatures(note(3) + answer, [MLDSA.verifier()], now=NOW)] == [0]


def test_an_ml_dsa_witness_refuses_to_serve_an_origin_its_message_cannot_hold(tmp_path: Path) -> None:
    """An origin over 255 bytes cannot be a subtree/v1 log_origin: refused before the port or state is taken."""
    with pytest.raises(InputError, match="255 bytes"):
        serve_witness(MLDSA, {"o" * 256: [LOG.verifier()]}, str(tmp_path / "w.db"), host="127.0.0.1", port=0)
    assert not (tmp_path / "w.db").exists()
