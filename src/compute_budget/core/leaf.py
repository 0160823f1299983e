"""The leaves of the Merkle tree over the stored rows (spec section 8).

Leaf input = the RFC 8785 bytes of the 17-key object of a row's logical values (`LEAF_KEYS`: every chained
column, without ``prev_chain_hash``); leaf hash = SHA-256(0x00 || leaf input); leaf index = seq - 1. The chain
hashes the same object plus ``prev_chain_hash``, so `leaf_and_chain` serialises a row once and derives both.
Pure: values in, hashes out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from compute_budget.core.canonical import canonical_json
from compute_budget.core.chain import CHAINED_COLUMNS
from compute_budget.core.log.merkle import leaf_hash
from compute_budget.core.policy.hashing import spans_json
from compute_budget.core.policy.types import ComputeBudgetDecision

# The 17 keys of a leaf, in table order (the chain's payload without prev_chain_hash).
LEAF_KEYS: tuple[str, ...] = CHAINED_COLUMNS

# Spec 9.9.8: the most bytes a row's leaf input may have. A C2SP entry bundle prefixes each entry with a 16-bit
# length, so a longer row could never be published (section 10); the writer refuses the gate instead.
MAX_LEAF_INPUT_BYTES = 65_535

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


@dataclass(frozen=True, slots=True)
class RowHasher:
    """A new row's leaf and chain hashes, worked out as far as they go before its seq, recording time and
    predecessor are known: the SHA-256 states over its canonical bytes up to ``policy_version``.

    Every key the row still lacks (``prev_chain_hash``, ``reason_code``, ``recorded_at``, ``seq``, ``status``)
    sorts after ``policy_version``, so `finish` only appends the short tail; the bulk of the hashing (the gate
    input, the explanation) can run ahead, in the thread that decides the gates.
    """

    spans: str  # the evidence_spans column, serialised once
    leaf_state: Any  # SHA-256 of 0x00 and the canonical bytes up to policy_version (no closing brace)
    chain_state: Any  # SHA-256 of the same bytes without the 0x00
    size: int = 0  # how many canonical bytes those are: the leaf input's size without its tail

    def finish(
        self, prev_chain_hash: str, seq: int, recorded_at: str, reason_code: str, status: str
    ) -> tuple[bytes, str]:
        """The row's leaf hash and chain hash, equal to `leaf_and_chain` of its full values."""
        return RowTails(recorded_at).finish(self, prev_chain_hash, seq, reason_code, status)


class RowTails:
    """`RowHasher.finish` for the rows of one chunk, which share a recording time and mostly a few status and
    reason codes: their encoded tails are built once (the appending thread, which a long append waits on, runs
    this for every row)."""

    __slots__ = ("_reasons", "_recorded", "_sizes", "_statuses")

    def __init__(self, recorded_at: str) -> None:
        self._recorded = b',"recorded_at":' + orjson.dumps(recorded_at) + b',"seq":'
        self._reasons: dict[str, bytes] = {}
        self._statuses: dict[str, bytes] = {}
        self._sizes: dict[tuple[str, str], int] = {}  # the tail's size but for the seq, per reason and status

    def finish(
        self, hasher: RowHasher, prev_chain_hash: str, seq: int, reason_code: str, status: str
    ) -> tuple[bytes, str]:
        """The row's leaf hash and chain hash, equal to `leaf_and_chain` of its full values (the one place the
        tail after ``policy_version`` is written)."""
        reason = self._reasons.get(reason_code)
        if reason is None:
            reason = self._reasons[reason_code] = b',"reason_code":' + orjson.dumps(reason_code) + self._recorded
        ending = self._statuses.get(status)
        if ending is None:
            ending = self._statuses[status] = b',"status":' + orjson.dumps(status) + b"}"
        tail = reason + str(seq).encode("ascii") + ending
        leaf = hasher.leaf_state.copy()
        leaf.update(tail)
        chain = hasher.chain_state.copy()
        chain.update(b',"prev_chain_hash":' + orjson.dumps(prev_chain_hash) + tail)
        return leaf.digest(), chain.hexdigest()

    def leaf_size(self, hasher: RowHasher, seq: int, reason_code: str, status: str) -> int:
        """The size in bytes of the row's whole leaf input (spec 9.9.8 bounds it), without hashing anything."""
        fixed = self._sizes.get((reason_code, status))
        if fixed is None:
            fixed = len(orjson.dumps(reason_code)) + len(orjson.dumps(status)) + len(self._recorded) + _TAIL_KEYS
            self._sizes[(reason_code, status)] = fixed
        return hasher.size + fixed + len(str(seq))


# What a tail holds besides its values and the recording time's part: `,"reason_code":`, `,"status":` and `}`.
_TAIL_KEYS = len(b',"reason_code":') + len(b',"status":') + len(b"}")


def row_hasher(decision: ComputeBudgetDecision, gate_input: str) -> RowHasher:
    """The `RowHasher` of a decision about to be stored with `gate_input`."""
    spans = spans_json(decision.evidence_spans)
    head = canonical_json(
        {
            "budget_id": decision.budget_id,
            "evidence_spans": spans,
            "explanation": decision.explanation,
            "gate_decision_id": decision.gate_decision_id,
            "gate_input": gate_input,
            "gate_input_digest": decision.gate_input_digest,
            "gate_policy_version": decision.gate_policy_version,
            "max_candidates": decision.max_candidates,
            "max_depth": decision.max_depth,
            "max_parallelism": decision.max_parallelism,
            "max_steps": decision.max_steps,
            "max_wallclock_ms": decision.max_wallclock_ms,
            "policy_version": decision.policy_version,
        }
    )[:-1]
    leaf_state = _SHA256(b"\x00")
    leaf_state.update(head)
    return RowHasher(spans, leaf_state, _SHA256(head), len(head))


def unreadable_leaf_hash(values: Sequence[Any]) -> bytes:
    """The leaf hash the audit gives a row whose values cannot be serialised (a tampered row, found anyway):
    its leaf input when it has one, else the hash of its Python representation."""
    try:
        return row_leaf_hash(values)
    except (TypeError, ValueError, orjson.JSONEncodeError):
        return leaf_hash(repr(tuple(values)).encode("utf-8", "backslashreplace"))
