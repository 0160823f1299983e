"""A published entry as the audit reads it (spec 10): the row its leaf input gives, its chain hash after the row
before it, and the `published_mismatch` of an entry or a bundle that its hash tiles do not hold."""

from __future__ import annotations

import hashlib
import operator
from typing import Any

import orjson

from compute_budget.core.leaf import LEAF_KEYS, leaf_and_chain
from compute_budget.core.log.tiles import Tile
from compute_budget.core.verify import Finding, FindingKind

_BUDGET_ID = LEAF_KEYS.index("budget_id")
_KEYS = frozenset(LEAF_KEYS)
_VALUES = operator.itemgetter(*LEAF_KEYS)  # a row's 17 values from its entry, in `LEAF_KEYS` order


def entry_row(entry: bytes, seq: int) -> tuple[Any, ...]:
    """A row's 17 values from its entry (its leaf input), or the seq and 16 Nones when it is not such an object
    (the audit's `malformed_row`)."""
    try:
        value = orjson.loads(entry)
    except orjson.JSONDecodeError:
        value = None
    if not isinstance(value, dict) or value.keys() != _KEYS:
        return (seq, *([None] * (len(LEAF_KEYS) - 1)))
    return _VALUES(value)  # type: ignore[no-any-return]


# In a canonical (key-sorted) leaf input, "prev_chain_hash" sorts right before "reason_code", which occurs once as a
# key (a quote inside a string is escaped): the chain's payload is the entry with the link spliced in there.
_SPLICE_AT = b',"reason_code":'


def chained(prev_chain: str, values: tuple[Any, ...], entry: bytes) -> str | None:
    """The chain hash of a row after `prev_chain`, from its entry with the link spliced in, as
    `core.leaf.leaf_and_chain` does with the canonical bytes (None when it cannot be computed). An entry that is not
    canonical gives another chain hash than its values do, so the audit's `chain_break` names its row."""
    cut = entry.rfind(_SPLICE_AT)
    if cut > 0:
        return hashlib.sha256(entry[:cut] + b',"prev_chain_hash":"' + prev_chain.encode("ascii") + b'"'
                              + entry[cut:]).hexdigest()
    try:
        return leaf_and_chain(prev_chain, values)[1]
    except (TypeError, ValueError, orjson.JSONEncodeError):
        return None


def bundle_mismatch(tile: Tile, first: int) -> Finding:
    """A bundle whose entries do not give the value the parent of its edited level-0 tile holds."""
    return Finding(
        FindingKind.PUBLISHED_MISMATCH, None, first,
        f"{tile.bundle_path} (rows {first}..{first + tile.width - 1}) does not hash to the value its edited level-0 "
        "tile's parent holds: the entry bundle was edited too",
    )


def published_mismatch(entry: bytes, seq: int) -> Finding:
    """An entry whose leaf hash its level-0 tile (itself proven) does not hold."""
    values = entry_row(entry, seq)
    budget_id = values[_BUDGET_ID] if isinstance(values[_BUDGET_ID], str) else None
    digest = hashlib.sha256(b"\x00" + entry).hexdigest()
    return Finding(
        FindingKind.PUBLISHED_MISMATCH,
        budget_id,
        seq,
        f"entry {seq} hashes to {digest}, its level-0 tile says otherwise: the "
        "entry bundle was edited after publishing",
    )
