"""Planning an append: gates decided in chunks (the next one ahead, in a helper thread), numbered, chained and
hashed into Merkle leaves after the head. Pure planning (`plan_chunk`) is kept apart from the SQL the write
transaction (`store.append`) runs, so the chain and the leaves are computed in one place for every backend.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import queue
import threading
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from compute_budget.core.leaf import MAX_LEAF_INPUT_BYTES, RowHasher, RowTails, row_hasher
from compute_budget.core.log.head import ChainHead
from compute_budget.core.policy.prepare import PreparedGate, differing_keys, prepare_gate, same_gate
from compute_budget.core.policy.rules import V1, BudgetTable
from compute_budget.core.row import StoredRow
from compute_budget.errors import ArgumentTypeError, GateConflict, GateTooLarge

CHUNK_SIZE = 500  # gates decided, looked up and inserted per round trip


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for a bulk append (about 10% faster in the benchmarks).

    A batch allocates millions of short-lived, acyclic objects that reference counting frees at once; the
    collector would only keep re-walking every long-lived object of the process (the caller's own data too).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class PreparedChunk(list[PreparedGate]):
    """A chunk of decided gates, with each one's row hashes worked out as far as they go before its seq."""

    __slots__ = ("hashers",)

    def __init__(self, gates: Iterable[PreparedGate], hashers: list[RowHasher] | None = None) -> None:
        super().__init__(gates)
        self.hashers = hashers if hashers is not None else [row_hasher(item.decision, item.gate_input) for item in self]


class DecidedGates:
    """Gates already decided under the policy, with their row hashers (`decided`): `prepared_chunks` chunks them as
    they are. Group commit decides each caller's gates in the caller's own thread, then appends them together."""

    __slots__ = ("gates", "hashers")

    def __init__(self, gates: list[PreparedGate], hashers: list[RowHasher]) -> None:
        self.gates = gates
        self.hashers = hashers

    def __iter__(self) -> Iterator[PreparedGate]:
        return iter(self.gates)

    def chunks(self) -> Iterator[PreparedChunk]:
        """The gates in chunks of `CHUNK_SIZE`, hashers kept."""
        for start in range(0, len(self.gates), CHUNK_SIZE):
            end = start + CHUNK_SIZE
            yield PreparedChunk(self.gates[start:end], self.hashers[start:end])


def decided(gates: Iterable[object], policy: BudgetTable) -> DecidedGates:
    """Decide every gate under `policy` and hash what each row can before its seq is known."""
    prepared = [prepare_gate(gate, policy) for gate in gates]
    return DecidedGates(prepared, [row_hasher(item.decision, item.gate_input) for item in prepared])


def prepared_chunks(
    gates: Iterable[object], *, ahead: bool, policy: BudgetTable = V1
) -> Generator[list[PreparedGate], None, None]:
    """The gates in chunks decided under `policy`. With `ahead`, a helper thread reads and decides the next chunk
    (and hashes the bulk of its rows) while the caller inserts this one: SQLite and psycopg release the GIL while
    the database works, so the two overlap. Whatever the helper raises (a bad line, a gate JSON cannot hold) is
    raised here, in the caller. `DecidedGates` are chunked as they are.
    """
    if isinstance(gates, DecidedGates):
        yield from gates.chunks()
        return
    try:
        source = iter(gates)
    except TypeError:
        raise ArgumentTypeError(f"record_many takes an iterable of gates, not {type(gates).__name__}") from None
    if not ahead:
        while chunk := list(itertools.islice(source, CHUNK_SIZE)):
            yield PreparedChunk(prepare_gate(gate, policy) for gate in chunk)
        return
    handoff: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=2)
    stop = threading.Event()

    def offer(item: tuple[str, Any]) -> None:
        while not stop.is_set():
            try:
                handoff.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def work() -> None:
        try:
            while not stop.is_set() and (chunk := list(itertools.islice(source, CHUNK_SIZE))):
                offer(("chunk", PreparedChunk(prepare_gate(gate, policy) for gate in chunk)))
            offer(("end", None))
        except BaseException as error:  # handed to the caller, who decides what it means
            offer(("error", error))

    helper = threading.Thread(target=work, name="compute-budget-decide", daemon=True)
    helper.start()
    try:
        while True:
            kind, payload = handoff.get()
            if kind == "end":
                return
            if kind == "error":
                raise payload
            yield payload
    finally:
        stop.set()
        if threading.current_thread() is not helper:
            helper.join()


@dataclass(frozen=True, slots=True)
class ChunkPlan:
    """What appending one chunk does: the rows to insert and their Merkle leaf hashes, the head after them,
    each gate's outcome (when asked for) and the conflicting gates left out (when skipping conflicts)."""

    rows: list[tuple[Any, ...]]
    head: ChainHead
    results: list[tuple[int, PreparedGate, bool, int]]  # (position in the chunk, gate, new, seq)
    conflicts: list[tuple[int, GateConflict]]  # (position in the chunk, the conflict)
    leaves: list[bytes]


def plan_chunk(
    prepared: list[PreparedGate],
    stored: dict[str, tuple[int, str]],
    head: ChainHead,
    recorded_at: str,
    *,
    results: bool = False,
    skip_conflicts: bool = False,
    offset: int = 0,
) -> ChunkPlan:
    """Number and chain the new gates of a chunk after `head`.

    `stored` maps the budget_ids already in the database to their (seq, gate_input); gates repeated within
    the chunk are matched against their first occurrence. A changed gate raises `GateConflict`, or with
    `skip_conflicts` is left out and listed in the plan's `conflicts`. Per-gate `results` are collected only
    when asked for (the bulk path does not pay for them). A new row whose leaf input would exceed 65,535 bytes
    raises `GateTooLarge` (spec 9.9.8), naming its place in the batch: the chunk's `offset` plus its position.
    """
    seq, prev, last_id = head.seq, head.chain_hash, head.budget_id
    seen = dict(stored)
    rows: list[tuple[Any, ...]] = []
    outcomes: list[tuple[int, PreparedGate, bool, int]] = []
    conflicts: list[tuple[int, GateConflict]] = []
    leaves: list[bytes] = []
    hashers: list[RowHasher] = (
        prepared.hashers
        if isinstance(prepared, PreparedChunk)
        else [row_hasher(item.decision, item.gate_input) for item in prepared]
    )
    tails = RowTails(recorded_at)
    for position, (item, hasher) in enumerate(zip(prepared, hashers, strict=True)):
        decision = item.decision
        budget_id = decision.budget_id
        existing = seen.get(budget_id)
        if existing is not None:
            if not same_gate(existing[1], item):
                conflict = GateConflict(
                    budget_id, existing[1], item.gate_input, differing_keys(existing[1], item), item.line
                )
                if not skip_conflicts:
                    raise conflict
                conflicts.append((position, conflict))
                continue
            if results:
                outcomes.append((position, item, False, existing[0]))
            continue
        seq += 1
        status = decision.status.value
        size = tails.leaf_size(hasher, seq, decision.reason_code, status)
        if size > MAX_LEAF_INPUT_BYTES:  # spec 9.9.8: a row no entry bundle could carry is never written
            raise GateTooLarge(budget_id, size, MAX_LEAF_INPUT_BYTES, index=offset + position, line=item.line)
        leaf, prev = tails.finish(hasher, prev, seq, decision.reason_code, status)
        rows.append(_new_row(item, hasher, seq, status, recorded_at, prev))
        leaves.append(leaf)
        seen[budget_id] = (seq, item.gate_input)
        last_id = budget_id
        if results:
            outcomes.append((position, item, True, seq))
    return ChunkPlan(rows, ChainHead(seq, prev, last_id), outcomes, conflicts, leaves)


def _new_row(item: PreparedGate, hasher: RowHasher, seq: int, status: str, recorded_at: str, chain: str) -> StoredRow:
    """The stored row of a new gate at `seq`, chained to `chain`. In `StoredRow` field order (a test holds it to
    `chained_row`): `_make` of a tuple costs a third of a call by keyword, on the path every recorded row takes."""
    decision = item.decision
    return StoredRow._make(
        (
            seq,
            decision.budget_id,
            decision.policy_version,
            decision.gate_decision_id,
            decision.gate_policy_version,
            decision.gate_input_digest,
            status,
            decision.reason_code,
            decision.max_candidates,
            decision.max_depth,
            decision.max_steps,
            decision.max_wallclock_ms,
            decision.max_parallelism,
            hasher.spans,
            decision.explanation,
            item.gate_input,
            recorded_at,
            chain,
        )
    )
