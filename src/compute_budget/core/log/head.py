"""The head of a hash-chained log: how long it is and the hash of its last link.

The log knows a head only as a size, a link hash and the key of the last entry; what a link hashes (the stored
row's columns) is the business of `core.chain`, which sits above the log and the policy.
"""

from __future__ import annotations

from dataclasses import dataclass

GENESIS_CHAIN_HASH = "0" * 64


@dataclass(frozen=True, slots=True)
class ChainHead:
    """The last link of a chain: its `seq` (0 for an empty store), `chain_hash` and `budget_id`."""

    seq: int
    chain_hash: str
    budget_id: str | None


EMPTY_HEAD = ChainHead(0, GENESIS_CHAIN_HASH, None)
