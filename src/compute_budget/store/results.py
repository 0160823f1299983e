"""How a batch is recorded, and what recording and checking return: plain frozen values, no connection behind them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from compute_budget.core.log.cosignature import WitnessKey
from compute_budget.core.log.head import ChainHead
from compute_budget.core.policy.types import ComputeBudgetDecision
from compute_budget.core.verify import Finding
from compute_budget.errors import GateConflict


@dataclass(frozen=True, slots=True)
class RecordOptions:
    """How one append records its gates: `BudgetStore.record_many`'s keyword arguments (see its docstring), made
    once where they come in and handed down whole. `ahead` decides the next chunk while one is written (a batch;
    not one gate). `check_skipped` is group commit's (`store.group_commit`)."""

    on_progress: Callable[[int], None] | None = None
    results: bool = False
    on_conflict: Literal["raise", "skip"] = "raise"
    adopt_unsigned_through: int | None = None
    after_repair: int | None = None
    ahead: bool = True
    # Group commit: called inside the transaction with the conflicts left out (index, conflict), after the gates are
    # inserted and before anything is signed or committed; what it raises rolls the transaction back.
    check_skipped: Callable[[list[tuple[int, GateConflict]]], None] | None = None

    def __post_init__(self) -> None:
        if self.on_conflict not in ("raise", "skip"):
            raise ValueError(f"on_conflict must be 'raise' or 'skip', not {self.on_conflict!r}")

    @property
    def skip_conflicts(self) -> bool:
        """True when a conflicting gate is left out (`on_conflict="skip"`) instead of stopping the batch."""
        return self.on_conflict == "skip"

    @property
    def signs_anyway(self) -> bool:
        """True when a signing writer signs the head even if no gate is new (adopting rows, acknowledging a
        repair)."""
        return self.adopt_unsigned_through is not None or self.after_repair is not None


@dataclass(frozen=True, slots=True)
class RecordResult:
    """The outcome of recording one gate: its decision, whether it was new, and its row's `seq`."""

    decision: ComputeBudgetDecision
    new: bool
    seq: int
    witness_warnings: tuple[str, ...] = ()  # one line per witness that did not cosign (spec 9.5)
    witnessed: tuple[int, int] | None = None  # (cosigned, asked): how many witnesses cosigned the new checkpoint
    cosigned_by: tuple[WitnessKey, ...] = ()  # which witnesses cosigned it (a policy's verdict is made of them)
    receipt: str | None = None  # with `wait=` (spec 12.4): the row's C2SP tlog-proof, as `prove` prints it


@dataclass(frozen=True, slots=True)
class GateResult:
    """One gate of a `record_many` batch: where it was in the input, its `budget_id`, its row's `seq`, and
    whether this batch stored it (`new`) or found it already stored. `line` is the input line the gate started
    on when it came from a stream of lines (the CLI's INPUT), else None."""

    index: int
    budget_id: str
    seq: int
    new: bool
    line: int | None = None
    receipt: str | None = None  # with `wait=` (spec 12.4): the row's C2SP tlog-proof, as `prove` prints it


@dataclass(frozen=True, slots=True)
class SkippedConflict:
    """A gate `record_many(..., on_conflict="skip")` left out: its `budget_id` is already recorded (in the store
    or earlier in the batch) with a different gate; `differing` names the top-level keys that differ."""

    index: int
    budget_id: str
    line: int | None
    differing: tuple[str, ...]
    gate_input: str = ""  # the skipped gate as it was given (what `record --rejects FILE` writes)


@dataclass(frozen=True, slots=True)
class BatchResult:
    """The outcome of `record_many`: how many decisions were new, how many already present, the new head.

    `results` holds one `GateResult` per recorded gate, in input order, when `record_many(..., results=True)`
    asked for them (else it is empty); `conflicts` the gates skipped with `on_conflict="skip"`.
    """

    new: int
    present: int
    head: ChainHead
    results: tuple[GateResult, ...] = ()
    conflicts: tuple[SkippedConflict, ...] = ()
    adopted: int = 0  # rows signed over by `adopt_unsigned_through` (seq adopted_after+1 .. adopted_after+adopted)
    adopted_after: int = 0
    writer_state_created: bool = False  # `init_writer_state` made the state from the store's own checkpoint
    witness_warnings: tuple[str, ...] = ()  # one line per witness that did not cosign (spec 9.5)
    witnessed: tuple[int, int] | None = None  # (cosigned, asked): how many witnesses cosigned the new checkpoint
    acknowledged_repair: int | None = None  # the repair `after_repair` acknowledged (spec 9.9.10), else None
    cosigned_by: tuple[WitnessKey, ...] = ()  # which witnesses cosigned the new checkpoint


@dataclass(frozen=True, slots=True)
class Signed:
    """The outcome of `BudgetStore.sign`: the checkpoint `note` of the head (`size` rows of `origin`) this key
    signed, and whether this call stored it (`stored`; False when the newest stored checkpoint already was this
    key's note of the head)."""

    origin: str
    size: int
    note: str
    stored: bool
    state_created: bool = False  # `init_writer_state` made the state from the store's own checkpoint


@dataclass(frozen=True, slots=True)
class Deferred:
    """A signer's turn not come yet (spec 12.1): the newest trusted checkpoint was signed less than the interval
    ago by a writer sharing this writer state; sign again at `due` (Unix seconds)."""

    due: float


@dataclass(frozen=True, slots=True)
class WitnessStatus:
    """One witness of a store with a checkpoint interval (`BudgetStore.witness_status`): the largest tree size it
    cosigned for this process (0 before any), and the last error, None once a request succeeds."""

    witness: str
    cosigned_size: int
    last_error: str | None


@dataclass(frozen=True, slots=True)
class RowCheck:
    """A stored row re-derived, re-hashed and re-linked to the row before it (`BudgetStore.check`): the audit's
    check of one row. It `holds` when there are no findings."""

    budget_id: str
    seq: int | None
    findings: tuple[Finding, ...]

    @property
    def holds(self) -> bool:
        """True when the row re-derives, hashes to its budget_id and links to the row stored before it."""
        return not self.findings
