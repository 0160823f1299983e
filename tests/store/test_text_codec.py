"""PostgreSQL stores what SQLite stores: a gate whose ids hold NUL records, reads, audits and copies losslessly."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compute_budget import BudgetStore, audit, decide
from compute_budget.store.copy import copy_store
from compute_budget.store.text_codec import MARK, decode_row, decode_text, encode_rows, encode_text
from tests.conftest import make_gate

Run = Callable[..., tuple[int, str, str]]
NUL_GATES = [
    make_gate(decision_id="a\u0000b", input_digest="\u0000", evidence_spans=[
        {"text": "x\u0000y", "start": 0, "end": 1, "sentence_index": 0}]),
    make_gate(decision_id=MARK + "41", policy_version=MARK),  # looks encoded: must round-trip too
    make_gate(decision_id="plain"),
]


@given(st.text())
def test_encoding_round_trips_every_text(value: str) -> None:
    """decode(encode(x)) == x for any text; values without NUL or the marker are stored as they are."""
    assert decode_text(encode_text(value)) == value
    if "\x00" not in value and not value.startswith(MARK):
        assert encode_text(value) == value
    assert "\x00" not in encode_text(value)


def test_rows_without_nul_are_untouched() -> None:
    """The common row passes through encode_rows and decode_row as the very same values."""
    row = (0, 1, 2, "id", "v", "d", *range(12))
    assert encode_rows([row]) == [row]
    assert decode_row(row) == row


@pytest.mark.parametrize("store_target", ["postgresql"], indirect=True)
def test_gates_holding_nul_record_read_and_audit_on_postgresql(store_target: str) -> None:
    """Every gate SQLite accepts records on PostgreSQL, reads back as the same decision, and audits clean."""
    texts = [json.dumps(gate) for gate in NUL_GATES]
    with BudgetStore.open(store_target) as store:
        batch = store.record_many(texts)
        assert batch.new == 3
        for gate in NUL_GATES:
            decision = decide(gate)
            stored = store.get(decision.budget_id)
            assert stored is not None
            assert stored.decision == decision
        assert [row.decision.gate_decision_id for row in store.find_by_gate("a\u0000b")] == ["a\u0000b"]
        assert [row.seq for row in store.iter_decisions(gate_decision_id=MARK + "41")] == [2]
    assert audit(store_target).clean


@pytest.mark.parametrize("store_target", ["postgresql"], indirect=True)
def test_copy_from_sqlite_to_postgresql_is_lossless_with_nul(tmp_path: Path, store_target: str) -> None:
    """`copy` of a SQLite store holding NUL ids to PostgreSQL succeeds, and the source checkpoint verifies there."""
    source = tmp_path / "source.db"
    with BudgetStore.open(source) as store:
        store.record_many(json.dumps(gate) for gate in NUL_GATES)
        checkpoint = store.checkpoint()
        expected = [row.to_dict() for row in store]
    copy_store(source, store_target)
    with BudgetStore.open(store_target, readonly=True) as copied:
        assert [row.to_dict() for row in copied] == expected
    assert audit(store_target, checkpoint=checkpoint).clean
