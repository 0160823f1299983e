"""The leaves of the Merkle tree over the stored rows (spec section 8).

Leaf input = the RFC 8785 bytes of the 17-key object of a row's logical values (`LEAF_KEYS`: every chained
column, without ``prev_chain_hash``); leaf hash = SHA-256(0x00 || leaf input); leaf index = seq - 1. The chain
hashes the same object plus ``prev_chain_hash``, so `leaf_and_chain` serialises a row once and derives both.
Pure: values in, hashes out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import orjson

from compute_budget.core.canonical import canonical_json
from compute_budget.core.chain import CHAINED_COLUMNS
from compute_budget.core.merkle import leaf_hash

# The 17 keys of a leaf, in table order (the chain's payload without prev_chain_hash).
LEAF_KEYS: tuple[str, ...] = CHAINED_COLUMNS

# In the canonical (key-sorted) payload, "prev_chain_hash" sorts right before "reason_code". A quote inside a
# JSON string is always escaped, so `,"reason_code":` occurs exactly once, at the key itself.
_SPLICE_AT = b',"reason_code":'
_SHA256 = hashlib.sha256


def leaf_input(values: Sequence[Any]) -> bytes:
    """The leaf input of a row given as its 17 values in `LEAF_KEYS` order."""
    return canonical_json(dict(zip(LEAF_KEYS, values, strict=True)))


def row_leaf_hash(values: Sequence[Any]) -> bytes:
    """The leaf hash of a row given as its 17 values in `LEAF_KEYS` order."""
    return leaf_hash(leaf_input(values))


def leaf_and_chain(prev_chain_hash: str, values: Sequence[Any]) -> tuple[bytes, str]:
    """The leaf hash and the chain hash (as `chain.chain_hash` gives it) of one row, from one serialisation."""
    data = canonical_json(dict(zip(LEAF_KEYS, values, strict=True)))
    cut = data.rindex(_SPLICE_AT)
    chained = data[:cut] + b',"prev_chain_hash":' + orjson.dumps(prev_chain_hash) + data[cut:]
    return _SHA256(b"\x00" + data).digest(), _SHA256(chained).hexdigest()


def unreadable_leaf_hash(values: Sequence[Any]) -> bytes:
    """The leaf hash the audit gives a row whose values cannot be serialised (a tampered row, found anyway):
    its leaf input when it has one, else the hash of its Python representation."""
    try:
        return row_leaf_hash(values)
    except (TypeError, ValueError, orjson.JSONEncodeError):
        return leaf_hash(repr(tuple(values)).encode("utf-8", "backslashreplace"))
