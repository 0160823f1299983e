"""`publication.snapshot`: a row from its entry, and its chain hash from the entry's bytes."""

from __future__ import annotations

import json

from compute_budget import decide
from compute_budget.core.leaf import leaf_and_chain, leaf_input
from compute_budget.core.log.head import GENESIS_CHAIN_HASH
from compute_budget.core.row import chained_row
from compute_budget.publication_reader.entries import chained, entry_row
from tests.conftest import make_gate


def _values(seq: int = 7) -> tuple[object, ...]:
    gate = make_gate(decision_id="snapshot-row")
    return chained_row(seq, decide(gate), json.dumps(gate), "2026-12-04T00:00:00.000000Z")


def test_a_canonical_entry_gives_the_rows_values_and_its_chain_hash() -> None:
    values = _values()
    entry = leaf_input(values)
    assert entry_row(entry, 7) == values
    assert chained(GENESIS_CHAIN_HASH, values, entry) == leaf_and_chain(GENESIS_CHAIN_HASH, values)[1]


def test_an_entry_that_is_not_the_leaf_input_is_malformed_or_breaks_the_chain() -> None:
    values = _values()
    assert entry_row(b"not json", 7) == (7, *([None] * 16))
    assert entry_row(b'{"seq": 7}', 7) == (7, *([None] * 16))
    canonical_chain = leaf_and_chain(GENESIS_CHAIN_HASH, values)[1]
    spaced = leaf_input(values).replace(b'{"budget_id":', b'{"budget_id": ', 1)  # same values, not RFC 8785
    assert entry_row(spaced, 7) == values
    assert chained(GENESIS_CHAIN_HASH, values, spaced) != canonical_chain  # so the audit's chain_break names it
    indented = json.dumps(json.loads(leaf_input(values)), indent=1, sort_keys=True).encode()
    assert chained(GENESIS_CHAIN_HASH, values, indented) == canonical_chain  # no splice point: from its values
