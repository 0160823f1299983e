"""Checkpoints: a small JSON document naming the head of a chain, kept outside the database.

An audit given a checkpoint proves the stored chain still passes through it, that is, history was only
appended to since the checkpoint was taken.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from compute_budget.core.chain import ChainHead
from compute_budget.errors import CheckpointError

CHECKPOINT_FORMAT = "compute_budget.checkpoint.v1"
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The chain head at some moment: `seq` rows, the last with `chain_hash` and `budget_id`."""

    seq: int
    chain_hash: str
    budget_id: str | None

    @classmethod
    def from_head(cls, head: ChainHead) -> Checkpoint:
        """The checkpoint of a chain head."""
        return cls(head.seq, head.chain_hash, head.budget_id)

    def to_dict(self) -> dict[str, Any]:
        """The checkpoint document."""
        return {
            "format": CHECKPOINT_FORMAT,
            "seq": self.seq,
            "chain_hash": self.chain_hash,
            "budget_id": self.budget_id,
        }

    def to_json(self) -> str:
        """The checkpoint document as one line of JSON."""
        return json.dumps(self.to_dict(), separators=(", ", ": "))

    @classmethod
    def from_json(cls, text: str | bytes, *, source: str = "checkpoint") -> Checkpoint:
        """Read a checkpoint document; raises `CheckpointError` saying what is wrong with it."""
        try:
            value = json.loads(text)
        except (ValueError, UnicodeDecodeError) as error:
            raise CheckpointError(f"{source} is not JSON ({error})") from None
        if not isinstance(value, dict) or value.get("format") != CHECKPOINT_FORMAT:
            raise CheckpointError(f"{source} is not a compute-budget checkpoint (format {CHECKPOINT_FORMAT!r})")
        seq, chain_hash, budget_id = value.get("seq"), value.get("chain_hash"), value.get("budget_id")
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 2**63:
            raise CheckpointError(f"{source}: seq must be an integer from 0 to 2**63-1")
        if not isinstance(chain_hash, str) or not _HEX64.fullmatch(chain_hash):
            raise CheckpointError(f"{source}: chain_hash must be 64 lowercase hex digits")
        if budget_id is not None and not isinstance(budget_id, str):
            raise CheckpointError(f"{source}: budget_id must be a string or null")
        return cls(seq, chain_hash, budget_id)
