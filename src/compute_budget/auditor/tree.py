"""The audit's tree check: the trusted frontier each range starts from, the stored entries no range meets, and the
parent's proof that the ranges' claimed frontiers chain (a claim that fails is recomputed here)."""

from __future__ import annotations

from dataclasses import dataclass, field

from compute_budget.auditor.checkpoints import (
    b64,
    bad_stored,
    key_label,
)
from compute_budget.auditor.ranges import (
    BATCH_ROWS,
    AuditPlan,
)
from compute_budget.auditor.source import AuditSource, LogView
from compute_budget.core.leaf import unreadable_leaf_hash
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.merkle import CompactRange, root_from_reader
from compute_budget.core.log.note import VerifierKey
from compute_budget.core.row import CHAINED_COUNT
from compute_budget.core.seal_checks import StoredCheckpoint, TreeCheck, TreeOutcome, trusted_signers
from compute_budget.core.verify import Finding, FindingKind
from compute_budget.errors import (
    MerkleError,
    NoteError,
    StoreDamaged,
)

# -- the seal ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SealTask:
    """What a range needs to check the tree: where it starts (a claimed frontier, or None to skip), the store's
    origin, given checkpoints to hold against the tree, whether to compare stored nodes, and keys for
    ``--all-signatures``."""

    start: tuple[int, list[str]] | None
    origin: str | None
    given: tuple[Checkpoint, ...]
    nodes: bool
    keys: tuple[str, ...]
    all_signatures: bool

    def frontier(self) -> CompactRange | None:
        """The claimed starting frontier, or None when the range skips the tree."""
        return None if self.start is None else CompactRange.from_hex(*self.start)


@dataclass(slots=True)
class Seal:
    """The seal's part of the audit plan: each range's task, and findings made while planning."""

    tasks: list[SealTask] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    first: CompactRange = field(default_factory=CompactRange)  # the trusted frontier the first range starts from

    def task(self, index: int) -> SealTask:
        """Range `index`'s task."""
        return self.tasks[index]


def plan_seal(
    snapshot: LogView,
    plan: AuditPlan,
    since: Checkpoint | None,
    held: list[Checkpoint],
    origin: str | None,
    keys: list[VerifierKey],
    all_signatures: bool,
) -> Seal:
    """Plan the tree's checks: the trusted starting frontier, each range's claimed one, and the stored entries no
    range will meet (checkpoints beyond the rows, misplaced nodes)."""
    seal = Seal()
    nodes = snapshot.has_tree_nodes()
    start = plan.start_seq
    if since is not None:
        seal.first, problem = _since_frontier(snapshot, since, plan.max_seq)
        if problem is not None and since.origin in (None, origin):  # another log's root: its origin is the finding
            seal.findings.append(problem)
    given = tuple(item for item in held if item.root is not None and item.seq > start)
    for item in held:
        if item.root is not None and 0 < item.seq <= start:  # before an incremental audit's first row
            seal.findings += _claimed_root_check(snapshot, item, plan.max_seq)
    key_texts = tuple(key.format() for key in keys)
    for index, (low, _) in enumerate(plan.ranges):
        claimed = (seal.first.size, seal.first.to_hex()) if index == 0 else _claimed_start(snapshot, low)
        seal.tasks.append(SealTask(claimed, origin, given, nodes, key_texts, all_signatures))
    seal.findings += _unmet_entries(snapshot, plan.max_seq, nodes)
    return seal


def _claimed_start(snapshot: LogView, low: int) -> tuple[int, list[str]] | None:
    """The frontier the stored tree claims at a range's first row (proven later), or None when it cannot say."""
    try:
        frontier = snapshot.frontier(low)
    except StoreDamaged:
        return None
    return frontier.size, frontier.to_hex()


def _unmet_entries(snapshot: LogView, max_seq: int, nodes: bool) -> list[Finding]:
    """The stored tree entries no range will meet: unreadable checkpoints, checkpoints beyond the rows, misplaced
    nodes."""
    findings: list[Finding] = []
    for ident, columns in snapshot.unreadable_checkpoints():
        findings.append(
            Finding(
                FindingKind.CHECKPOINT_MISMATCH,
                None,
                None,
                f"stored checkpoint #{ident!r} cannot be read ({columns.replace(' ', ', ')} not of the column's "
                "type): no writer stores such an entry",
            )
        )
    for stored in snapshot.checkpoints_beyond(max_seq):
        findings.append(
            Finding(
                FindingKind.CHECKPOINT_MISMATCH,
                None,
                stored.tree_size,
                f"stored checkpoint #{stored.id} (signed by {stored.key_label()}) names {stored.tree_size} rows, "
                f"but the store ends at seq {max_seq}: history was truncated",
            )
        )
    health = snapshot.health()  # only a database can hold a node outside its place
    if nodes and health is not None:
        for level, index in health.misplaced_nodes(max_seq):
            findings.append(
                Finding(
                    FindingKind.CHECKPOINT_MISMATCH,
                    None,
                    None,
                    f"stored tree node (level {level!r}, index {index!r}) lies outside the tree of {max_seq} rows",
                )
            )
    return findings


def _since_frontier(
    snapshot: LogView, since: Checkpoint, max_seq: int
) -> tuple[CompactRange, Finding | None]:
    """The tree's frontier at an incremental audit's checkpoint: from the stored tree, proven by the checkpoint's
    root when it has one; recomputed from the rows when the stored tree cannot give it or does not prove out."""
    if since.seq > max_seq:
        return CompactRange(), None  # truncated: reported already
    try:
        frontier = snapshot.frontier(since.seq)
    except StoreDamaged:
        frontier = None
    if frontier is not None and (since.root is None or frontier.root() == since.root):
        return frontier, None
    recomputed = prefix_frontier(snapshot, since.seq)
    if since.root is not None and recomputed.root() != since.root:
        return recomputed, Finding(
            FindingKind.CHECKPOINT_MISMATCH,
            since.budget_id,
            since.seq,
            f"the rows up to seq {since.seq} give tree root {b64(recomputed.root())}, the checkpoint says "
            f"{b64(since.root)}: history before it was rewritten",
        )
    return recomputed, None


def prefix_frontier(snapshot: LogView, size: int) -> CompactRange:
    """The frontier of the first `size` rows, recomputed from them (a stored tree that cannot be used)."""
    frontier = CompactRange()
    for batch in snapshot.rows_between(0, size):
        # Sliced, not named: a per-row path (see `core.row.CHAINED_COUNT`).
        frontier.extend([unreadable_leaf_hash(row[:CHAINED_COUNT]) for row in batch])
    return frontier


def _claimed_root_check(snapshot: LogView, proof: Checkpoint, max_seq: int) -> list[Finding]:
    """A given checkpoint before an incremental audit's rows: its root against the stored tree's."""
    try:
        root = root_from_reader(snapshot.tree(max_seq), proof.seq)
    except MerkleError:
        return []  # the stored tree cannot say; the chain check stands
    if root == proof.root:
        return []
    return [
        Finding(
            FindingKind.CHECKPOINT_MISMATCH,
            proof.budget_id,
            proof.seq,
            f"the stored tree's root at size {proof.seq} is {b64(root)}, the checkpoint says {b64(proof.root)}",
        )
    ]


def tree_check(snapshot: LogView, low: int, high: int, task: SealTask, frontier: CompactRange) -> TreeCheck:
    """The core's tree check over rows low < seq <= high, from `frontier`, with what `task` asks of it."""
    keys = [VerifierKey.parse(text) for text in task.keys]

    def signatures(stored: StoredCheckpoint) -> list[Finding]:
        try:
            _, failed = trusted_signers(stored.note, keys)
        except NoteError as error:
            return [bad_stored(stored, f"its note cannot be read ({error})")]
        return [bad_stored(stored, f"its signature by {key_label(key)} does not verify") for key in failed]

    return TreeCheck(
        frontier,
        end=high,
        origin=task.origin,
        checkpoints=snapshot.checkpoints_between(low, high),
        given=task.given,
        nodes=snapshot.nodes_at if task.nodes else None,
        signatures=signatures if task.all_signatures and keys else None,
    )


def prove_tree(
    store: AuditSource, plan: AuditPlan, seal: Seal, outcomes: list[TreeOutcome | None]
) -> tuple[list[Finding], CompactRange | None]:
    """Chain the ranges' tree outcomes from the trusted start; recompute any range whose claimed start fails."""
    findings: list[Finding] = []
    expected = seal.first
    for index, ((low, high), outcome) in enumerate(zip(plan.ranges, outcomes, strict=True)):
        task = seal.tasks[index]
        if outcome is None or task.frontier() != expected:
            outcome = _tree_range(store, low, high, task, expected)
        findings += outcome.findings
        expected = outcome.compact_range()
    return findings, expected


def _tree_range(store: AuditSource, low: int, high: int, task: SealTask, frontier: CompactRange) -> TreeOutcome:
    """The tree's checks alone over rows low < seq <= high, from a proven frontier."""
    with store.snapshot() as snapshot:
        tree = tree_check(snapshot, low, high, task, frontier.copy())
        for batch in store.scan(low, high, batch_rows=BATCH_ROWS):
            # Sliced, not named: a per-row path (see `core.row.CHAINED_COUNT`).
            tree.add([unreadable_leaf_hash(row[:CHAINED_COUNT]) for row in batch], batch)
        return tree.finish()
