"""Issue 29 item 6, named data: a stored row is a `core.row.StoredRow`, a NamedTuple read by column name, that
is still the tuple the SQL drivers give; the pure check reads a plain tuple and a named one alike. A signed note is
parsed once into a `ParsedNote` that travels through the consistency checks."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from compute_budget import decide
from compute_budget.auditor.proving import prove_consistency
from compute_budget.auditor.scan import load_checkpoint
from compute_budget.core.chain import CHAINED_COLUMNS
from compute_budget.core.log import note as note_module
from compute_budget.core.log.cosignature import generate_witness
from compute_budget.core.log.head import GENESIS_CHAIN_HASH, ChainHead
from compute_budget.core.log.note import ParsedNote, add_signature, generate_signer
from compute_budget.core.policy.prepare import PreparedGate
from compute_budget.core.row import ROW_COLUMNS, StoredRow, chained_row, named
from compute_budget.core.verify import RangeResult, check_row
from compute_budget.errors import NotConsistent
from compute_budget.store import BudgetStore
from compute_budget.store.plan import plan_chunk
from compute_budget.store.table import COLUMNS
from tests.backends import query, rows
from tests.conftest import gate_lines, make_gate

_RECORDED_AT = "2026-12-04T00:00:00.000000Z"


def test_a_stored_row_names_every_column_in_table_order() -> None:
    """The row type's fields are the stored columns, in table order, and `chained` is what the chain hashes."""
    assert StoredRow._fields == ROW_COLUMNS == COLUMNS
    gate = make_gate()
    values = chained_row(1, decide(gate), json.dumps(gate), _RECORDED_AT)
    row = StoredRow._make((*values, "ab" * 32))
    assert isinstance(row, tuple)
    assert row == (*values, "ab" * 32)
    assert row.chained == values
    assert len(row.chained) == len(CHAINED_COLUMNS)
    assert (row.seq, row.gate_input, row.chain_hash) == (1, json.dumps(gate), "ab" * 32)
    assert named(row) is row
    plain = named(tuple(row))
    assert type(plain) is StoredRow
    assert plain == row


def test_the_writer_plans_named_rows() -> None:
    """`plan_chunk` gives rows by name, equal to the tuples the chain and the tree hash."""
    gate = make_gate()
    decision = decide(gate)
    plan = plan_chunk(
        [PreparedGate(decision, json.dumps(gate), None)], {}, ChainHead(0, GENESIS_CHAIN_HASH, None), _RECORDED_AT
    )
    (row,) = plan.rows
    assert type(row) is StoredRow
    assert row.budget_id == decision.budget_id
    assert row.chain_hash == plan.head.chain_hash
    assert row.chained == chained_row(1, decision, json.dumps(gate), _RECORDED_AT)


def _check(raw: tuple[Any, ...], prev_chain: str) -> tuple[tuple[int, str], list[dict[str, Any]], list[bytes]]:
    result = RangeResult()
    left = check_row(raw, 0, prev_chain, result)
    return left, [finding.to_dict() for finding in result.findings], result.leaves


def test_a_plain_and_a_named_row_check_alike(store_target: str) -> None:
    """The check reads a database tuple and a `StoredRow` the same, clean or tampered (on both backends)."""
    with BudgetStore.open(store_target) as store:
        store.record_many([make_gate(), make_gate(decision_id="other")])
    first = rows(store_target)[0]
    assert type(first) is tuple
    clean = _check(first, GENESIS_CHAIN_HASH)
    assert clean == _check(StoredRow._make(first), GENESIS_CHAIN_HASH)
    assert clean[0] == (1, first[-1])
    assert clean[1] == []
    edited = StoredRow._make(first)._replace(max_steps=first[10] + 1)
    changed = _check(tuple(edited), GENESIS_CHAIN_HASH)
    assert changed == _check(edited, GENESIS_CHAIN_HASH)
    assert [item["kind"] for item in changed[1]] == ["chain_break", "rederive_mismatch", "budget_id_mismatch"]
    assert changed[1][1]["detail"] == f"max_steps stored {first[10] + 1}, policy gives {first[10]}"
    tampered = StoredRow._make(first)._replace(status="denied", max_depth="7")
    found = _check(tuple(tampered), GENESIS_CHAIN_HASH)
    assert found == _check(tampered, GENESIS_CHAIN_HASH)
    assert [item["kind"] for item in found[1]] == ["malformed_row"]
    assert "max_depth is str" in found[1][0]["detail"]


@pytest.mark.usefixtures("writer_state_env")
def test_consistency_parses_the_old_note_once(
    store_target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One `consistency` call (writer key, auditor key and witness key, as the CLI passes them) parses the old
    signed note once, when it is read; the trusted, auditor and witness checks get the parsed value."""
    writer, auditor = generate_signer("writer"), generate_signer("auditor")
    with BudgetStore.open(store_target, signing_key=writer, origin="example.org/rows") as store:
        store.record_many(gate_lines(3))
    (stored,) = query(store_target, "SELECT note FROM compute_budget_checkpoints")
    old = tmp_path / "old.note"
    old.write_text(add_signature(str(stored[0]), auditor))
    seen: list[object] = []
    original = note_module.parse_note

    def counting(signed: str | bytes) -> ParsedNote:
        seen.append(signed)
        return original(signed)

    for module in list(sys.modules.values()):
        if module.__name__.startswith("compute_budget") and getattr(module, "parse_note", None) is original:
            monkeypatch.setattr(module, "parse_note", counting)
    with pytest.raises(NotConsistent, match="0 of 1 cosignatures") as refused:
        prove_consistency(
            load_checkpoint(str(old)),
            store_target,
            trusted_keys=[writer.verifier()],
            witness_keys=[generate_witness("witness.example/w").verifier()],
            auditor_key=auditor.verifier(),
        )
    assert refused.value.reason == "untrusted"
    assert seen.count(old.read_text()) == 1
