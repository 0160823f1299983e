"""The seal's pure checks (spec section 8): recompute the Merkle tree over streamed rows and hold the stored tree
nodes and every checkpoint against it; verify a checkpoint's signature by a key; decide whether a store still
extends a checkpoint (the rule every signer obeys before it signs).

No I/O: the store and the auditor hand in iterators over what they read.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.head import GENESIS_CHAIN_HASH
from compute_budget.core.log.merkle import (
    EMPTY_ROOT,
    CompactRange,
    Node,
    NodeReader,
    consistency_proof,
    verify_consistency,
)
from compute_budget.core.log.note import CheckpointBody, ParsedNote, VerifierKey, format_checkpoint, verify_note
from compute_budget.core.log.tree import TILE_LEVEL
from compute_budget.core.row import named
from compute_budget.core.verify import Finding, FindingKind
from compute_budget.errors import CheckpointError, MerkleError, NoteError

T = TypeVar("T")
MAX_NODE_FINDINGS = 20  # stored-node findings reported one by one per range; the rest are counted


@dataclass(frozen=True, slots=True)
class StoredCheckpoint:
    """One row of the store's table of signed checkpoints: its `id` (insertion order), `tree_size`, the signer's
    `key_name` and `key_hash` (8 hex digits) as the writer recorded them, and the whole signed `note`."""

    id: int
    tree_size: int
    key_name: str
    key_hash: str
    note: str

    def key_label(self) -> str:
        """The signer as people read it: ``name+hash``."""
        return f"{self.key_name}+{self.key_hash}"


def signature_problem(note: str | ParsedNote, key: VerifierKey) -> str | None:
    """None when `note` carries a valid signature by `key` and no failing one; else why not, in words."""
    try:
        outcome = verify_note(note, [key])
    except NoteError as error:
        return f"the note cannot be read ({error})"
    if outcome.failed:
        return f"its signature by {key.name}+{key.key_hash:08x} does not verify"
    if not outcome.verified:
        return f"it carries no signature by {key.name}+{key.key_hash:08x}"
    return None


def trusted_signers(
    note: str | ParsedNote, keys: Iterable[VerifierKey]
) -> tuple[list[VerifierKey], list[VerifierKey]]:
    """(keys whose signature on `note` verifies, keys whose signature fails); `NoteError` if malformed."""
    outcome = verify_note(note, list(keys))
    return list(outcome.verified), list(outcome.failed)


@dataclass(frozen=True, slots=True)
class Extension:
    """Whether a store extends a checkpoint: `ok`, else `reason` (``truncated`` or ``rewritten``) and `message`."""

    ok: bool
    reason: str | None = None
    message: str = ""


def extends(
    old: CheckpointBody,
    *,
    size: int,
    root: bytes,
    chain_at: Callable[[int], str | None],
    reader: NodeReader,
) -> Extension:
    """Whether the tree of `size` leaves with `root` (read through `reader`) extends `old`, with the row at
    `old.size` still carrying `old.chain_hash` (`chain_at(seq)` gives a stored row's chain hash, or None)."""
    if old.size > size:
        return Extension(False, "truncated", f"it names {old.size} rows, the store holds {size}: history was truncated")
    chain = GENESIS_CHAIN_HASH if old.size == 0 else chain_at(old.size)
    if chain != old.chain_hash:
        return Extension(
            False,
            "rewritten",
            f"row {old.size} now has chain_hash {chain}, the checkpoint says {old.chain_hash}: history was rewritten",
        )
    if old.size == 0:
        consistent = old.root == EMPTY_ROOT
    elif old.size == size:
        consistent = old.root == root
    else:
        try:
            consistent = verify_consistency(old.size, size, old.root, root, consistency_proof(reader, old.size, size))
        except MerkleError:
            consistent = False
    if not consistent:
        return Extension(
            False,
            "rewritten",
            f"the tree of {size} rows does not extend its root at size {old.size}: history was rewritten",
        )
    return Extension(True)


@dataclass(slots=True)
class TreeOutcome:
    """What a `TreeCheck` leaves: its findings and the frontier it reached (`size`, hex hashes)."""

    findings: list[Finding] = field(default_factory=list)
    size: int = 0
    frontier: list[str] = field(default_factory=list)
    root: bytes = EMPTY_ROOT

    def compact_range(self) -> CompactRange:
        """The frontier as a compact range."""
        return CompactRange.from_hex(self.size, self.frontier)


NodeStream = Callable[[int, int, int], Iterator[tuple[int, str]]]
"""(level, first index, last index) -> the stored (index, hex hash) of that level in that index range, in order."""


class TreeCheck:
    """Recompute the tree from the rows as they stream by, in seq order, from a starting frontier; on the way hold
    against it every stored tree node, every stored checkpoint and any given checkpoint whose size it passes.

    `end` is the last tree size this check covers; `checkpoints` yields the stored checkpoints with sizes in
    (start, end], ordered by size; `nodes` (None: do not check stored nodes) reads the stored nodes. `signatures`
    is called on every stored checkpoint (for ``--all-signatures``) and returns its findings.
    """

    def __init__(
        self,
        frontier: CompactRange,
        *,
        end: int,
        origin: str | None,
        checkpoints: Iterable[StoredCheckpoint] = (),
        given: Iterable[Checkpoint] = (),
        nodes: NodeStream | None = None,
        signatures: Callable[[StoredCheckpoint], list[Finding]] | None = None,
    ) -> None:
        self._frontier = frontier
        self._start = frontier.size
        self._end = end
        self._origin = origin
        self._stored = _Peekable(iter(checkpoints))
        self._given = sorted(
            (item for item in given if self._start < item.seq <= end and item.root is not None), key=lambda c: c.seq
        )
        self._nodes = nodes
        self._streams: dict[int, _Peekable[tuple[int, str]]] = {}
        self._signatures = signatures
        self._node_findings = 0
        self.findings: list[Finding] = []

    @property
    def size(self) -> int:
        """The number of leaves taken so far, the starting frontier's included."""
        return self._frontier.size

    def add(self, leaves: list[bytes], rows: list[tuple[Any, ...]]) -> None:
        """Take the next rows (raw, in `row.ROW_COLUMNS` order) and their leaf hashes, in seq order."""
        done, count = 0, len(leaves)
        while done < count:
            target = self._next_size()
            take = count - done if target is None or target - self.size > count - done else target - self.size
            if take > 0:
                self._compare_nodes(self._frontier.extend(leaves[done : done + take], min_level=TILE_LEVEL))
                done += take
            if target is not None and target == self.size:
                self._check_checkpoints_at(rows[done - 1] if done else None)
            elif take <= 0:  # a checkpoint at a size already passed: cannot happen with sorted input; drop it
                self._drop_stale()

    def finish(self) -> TreeOutcome:
        """Report what is left over: checkpoints beyond the rows seen, stored nodes nothing recomputed."""
        for checkpoint in self._stored:
            self._finding(
                checkpoint.tree_size,
                None,
                f"stored checkpoint #{checkpoint.id} (signed by {checkpoint.key_label()}) names {checkpoint.tree_size} "
                f"rows, but the rows up to seq {self._end} give only {self.size}: rows were removed",
            )
        for given in self._given:
            self._finding(given.seq, None, f"the given checkpoint names {given.seq} rows; rows were removed")
        self._given = []
        if self._nodes is not None and self._end > self._start:
            for level in range(TILE_LEVEL, self._end.bit_length()):
                for index, _ in self._stream(level):
                    self._node_finding(level, index, "is stored, but the rows give no such node: rows were removed")
        if self._node_findings > MAX_NODE_FINDINGS:
            self._finding(
                None,
                None,
                f"... and {self._node_findings - MAX_NODE_FINDINGS} more stored tree node(s) that differ from the rows",
            )
        return TreeOutcome(self.findings, self.size, self._frontier.to_hex(), self._frontier.root())

    # -- internals -------------------------------------------------------------------------------------------

    def _next_size(self) -> int | None:
        sizes = [item.tree_size for item in self._stored.peek()] + [item.seq for item in self._given[:1]]
        return min(sizes) if sizes else None

    def _drop_stale(self) -> None:
        size = self.size
        while (head := self._stored.peek()) and head[0].tree_size < size:
            next(self._stored)
        while self._given and self._given[0].seq < size:
            self._given.pop(0)

    def _check_checkpoints_at(self, raw: tuple[Any, ...] | None) -> None:
        size = self.size
        root = self._frontier.root()
        row = named(raw) if raw is not None else None  # once per checkpoint, not per row: naming it costs nothing
        chain = row.chain_hash if row is not None else GENESIS_CHAIN_HASH
        budget_id = row.budget_id if row is not None and isinstance(row.budget_id, str) else None
        expected = (
            format_checkpoint(self._origin, size, root, chain)
            if self._origin is not None and isinstance(chain, str) and len(chain) == 64
            else None
        )
        while (head := self._stored.peek()) and head[0].tree_size == size:
            stored = next(self._stored)
            note = stored.note
            if expected is None or not (
                note.startswith(expected) and (len(note) == len(expected) or note[len(expected)] == "\n")
            ):
                self._finding(size, budget_id, _stored_mismatch(stored, self._origin, root, chain))
            if self._signatures is not None:
                self.findings.extend(self._signatures(stored))
        while self._given and self._given[0].seq == size:
            given = self._given.pop(0)
            if given.root != root:
                self._finding(
                    size,
                    budget_id,
                    f"the given checkpoint's root at size {size} is {_b64(given.root)}, the rows give {_b64(root)}: "
                    "history was rewritten",
                )

    def _compare_nodes(self, nodes: list[Node]) -> None:
        if self._nodes is None:
            return
        for node in nodes:
            stream = self._stream(node.level)
            while (head := stream.peek()) and head[0][0] < node.index:
                self._node_finding(node.level, next(stream)[0], "is stored, but the rows give no such node")
            head = stream.peek()
            if not head or head[0][0] != node.index:
                self._node_finding(node.level, node.index, "is missing from the store")
                continue
            stored = next(stream)[1]
            if stored != node.hash.hex():
                self._node_finding(
                    node.level, node.index, f"is stored as {stored}, the rows give {node.hash.hex()}"
                )

    def _stream(self, level: int) -> _Peekable[tuple[int, str]]:
        stream = self._streams.get(level)
        if stream is None:
            assert self._nodes is not None
            first, last = self._start >> level, (self._end >> level) - 1
            stream = self._streams[level] = _Peekable(self._nodes(level, first, last) if last >= first else iter(()))
        return stream

    def _node_finding(self, level: int, index: int, what: str) -> None:
        self._node_findings += 1
        if self._node_findings <= MAX_NODE_FINDINGS:
            end = (index + 1) << level
            self._finding(
                end,
                None,
                f"stored tree node (level {level}, index {index}, over rows {end - (1 << level) + 1}..{end}) {what}; "
                "the stored tree is derived data: proofs from it fail until it is restored",
            )

    def _finding(self, seq: int | None, budget_id: str | None, detail: str) -> None:
        self.findings.append(Finding(FindingKind.CHECKPOINT_MISMATCH, budget_id, seq, detail))


def _stored_mismatch(stored: StoredCheckpoint, origin: str | None, root: bytes, chain: object) -> str:
    """Why a stored checkpoint's note does not match the recomputed tree and chain at its size."""
    where = f"stored checkpoint #{stored.id} (size {stored.tree_size}, signed by {stored.key_label()})"
    try:
        found = Checkpoint.from_note(stored.note)
    except CheckpointError as error:
        return f"{where} cannot be read: {error}"
    if origin is None:
        return f"{where} names origin {found.origin}, but the store has no origin"
    if found.origin != origin:
        return f"{where} names origin {found.origin}, this store is {origin}"
    if found.seq != stored.tree_size:
        return f"{where} is a note for size {found.seq}: the table's tree_size was changed"
    return (
        f"{where} says root {_b64(found.root)} and chain {found.chain_hash}; the rows now give root {_b64(root)} "
        f"and chain {chain}: history was rewritten after it was signed"
    )


def _b64(value: bytes | None) -> str:
    return "none" if value is None else base64.b64encode(value).decode("ascii")


class _Peekable(Generic[T]):
    """An iterator that can show its next item (as a one-item list, empty at the end) without taking it."""

    __slots__ = ("_buffer", "_source")

    def __init__(self, source: Iterator[T]) -> None:
        self._source = source
        self._buffer: list[T] = []

    def peek(self) -> list[T]:
        if not self._buffer:
            try:
                self._buffer.append(next(self._source))
            except StopIteration:
                return []
        return self._buffer

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        if self._buffer:
            return self._buffer.pop()
        return next(self._source)
