"""`publish`: one publication of a store's log into DIR (spec 10.1), in the order the rules need.

1. Lock DIR; read `DIR/checkpoint`, which must verify under a trusted key (rule 1; a `--retired` key counts up to
   its handover), without the witness quorum (spec 11.5: witnesses may be added after it was published).
2. Choose the checkpoint to publish (`choose`); a smaller one than DIR's is refused (DIR is never rolled back).
3. Audit the rows after DIR's checkpoint through the chosen one, with DIR's as `--since` (rule 1: the auditor's own
   `run_audit`, so a publish checks new rows exactly as `audit --since` does).
4. Build the new files from the store (`layout`), comparing each with DIR (rule 2), staging the new ones; the
   partial tiles must give the chosen checkpoint's root.
5. Stage the handovers of the `--retired` keys (`handovers`, spec 11.1; also when DIR is already current).
6. Rename the staged files into place, then `DIR/checkpoint` (rule 3), then remove the partial tiles the new full
   ones replace, and what a publish killed before it could remove left (`layout.tidied_folders`). A crash before
   the checkpoint's rename leaves DIR the publication it was.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from compute_budget.auditor.checkpoints import policy_log_keys, unique_keys, witness_policy
from compute_budget.auditor.report import AuditReport
from compute_budget.auditor.request import AuditRequest
from compute_budget.auditor.witness_rules import DEFAULT_MAX_WITNESS_AGE, WitnessRequirement
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.cosignature import WitnessKey
from compute_budget.core.log.key_states import KeyStates
from compute_budget.core.log.note import VerifierKey
from compute_budget.core.log.witness_policy import TlogPolicy
from compute_budget.core.verify import Finding
from compute_budget.errors import ArgumentTypeError, StoreDamaged
from compute_budget.keys.key_files import verifier_key
from compute_budget.publication_writer.checks import (
    Refusal,
    audit_new_rows,
    published_checkpoint,
    rolled_back,
    rotation_refusal,
    same_as_published,
    uncounted,
    untold_rotations,
    waived_findings,
)
from compute_budget.publication_writer.choose import Chosen, choose, newest_signed
from compute_budget.publication_writer.handovers import handover_files, retired_keys
from compute_budget.publication_writer.layout import TreeBuilder, TreeFile, superseded, tidied_folders
from compute_budget.publication_writer.write import CHECKPOINT_NAME, PublicationFolder
from compute_budget.store import BudgetStore


@dataclass(frozen=True, slots=True)
class PublishRequest:
    """What to publish where: DIR (`folder`), the store (`db`: a path or URL; None is the default store), the writer
    keys whose signature makes a checkpoint publishable, and with `witness_keys` how many witnesses must have
    cosigned it (`witness_quorum`, default all). `jobs`: the audit's processes, as `audit --jobs`."""

    folder: str
    db: str | os.PathLike[str] | None = None
    trusted_keys: tuple[VerifierKey | str | os.PathLike[str], ...] = ()
    witness_keys: tuple[WitnessKey | str | os.PathLike[str], ...] = ()
    witness_quorum: int | None = None
    jobs: int | Literal["auto"] = "auto"
    key_states: KeyStates = field(default_factory=KeyStates)  # --retired / --revoked: which signatures count
    witness_policy: TlogPolicy | None = None  # a C2SP tlog-policy instead of witness_keys/witness_quorum
    # Told (phase, done, total) as it goes: "auditing" the new rows, then "publishing" them (rows each time).
    on_progress: Callable[[str, int, int], None] | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class PublishOutcome:
    """What a publish did: the size DIR publishes now (`size`) and before (`previous`), the files it wrote (the
    checkpoint last) and left as they were, the superseded partial-tile folders it removed; or, with nothing
    written, the `refusal` or the audit `report` that stopped it (or both: a handover to a key not given, and
    findings it does not explain)."""

    folder: str
    previous: int
    size: int
    written: tuple[str, ...] = ()
    unchanged: int = 0
    removed: tuple[str, ...] = ()
    refusal: Refusal | None = None
    report: AuditReport | None = field(default=None, repr=False)
    tidied: tuple[str, ...] = ()  # what an earlier, killed publish left that no checkpoint needs, removed
    # With witnesses required: the newest checkpoint a trusted key signed, when it is above `size` (its rows wait
    # for the witness quorum); else None.
    unwitnessed: int | None = None

    @property
    def published(self) -> bool:
        """True when DIR now publishes `size` (nothing stopped the publish)."""
        return self.refusal is None and self.report is None


def publish(request: PublishRequest) -> PublishOutcome:
    """Publish the store's newest trusted checkpoint and its tree into `request.folder` (see the module docstring).

    Raises a `PublishError` (nothing to publish, an over-long entry, a busy or unusable DIR) or a store error when
    the publish cannot run; findings come back in the outcome with nothing written.
    """
    rule = request.witness_policy
    # The policy's log keys all carry the store's origin or the store refuses them below, once its origin is read.
    log_keys = () if rule is None else tuple(log.key for log in rule.logs)
    keys = unique_keys([*(verifier_key(item) for item in request.trusted_keys), *log_keys])
    if not keys:
        raise ArgumentTypeError("publish needs the writer's verifier key (--trusted-key): only a checkpoint signed "
                                "by a trusted key is published")
    # A retired key signs for the log up to its handover (its signatures above it do not count: `key_states`).
    keys = unique_keys([*keys, *retired_keys(request.key_states)])
    policy = witness_policy(request.witness_keys, request.witness_quorum, DEFAULT_MAX_WITNESS_AGE, rule)
    with PublicationFolder.locked(request.folder) as folder:
        published = published_checkpoint(folder, keys)
        if isinstance(published, Refusal):
            return PublishOutcome(request.folder, 0, 0, refusal=published)
        old = published.seq if published is not None else 0
        with BudgetStore.open(request.db, readonly=True) as store, store.snapshot() as snapshot:
            policy_log_keys(keys, rule, snapshot.origin())  # a log line not named by the origin is refused
            chosen = choose(snapshot, keys, policy, request.key_states)
            signed = newest_signed(snapshot, keys, request.key_states) if policy is not None else None
            refusal = None if published is None else uncounted(
                snapshot, published, request.key_states, f"{folder.path.rstrip('/')}/{CHECKPOINT_NAME}"
            )
            waived = waived_findings(snapshot, published, policy)
        if refusal is not None:
            return PublishOutcome(request.folder, old, old, refusal=refusal)
        stopped = _checked(request, folder, published, chosen, keys, waived)
        if stopped is not None:
            return stopped
        outcome = _written(request, folder, published, chosen, _Trust(keys, policy))
        waiting = signed is not None and signed > chosen.size and outcome.published
        return dataclasses.replace(outcome, unwitnessed=signed) if waiting else outcome


@dataclass(frozen=True, slots=True)
class _Trust:
    keys: list[VerifierKey]
    policy: WitnessRequirement | None


def _written(
    request: PublishRequest, folder: PublicationFolder, published: Checkpoint | None, chosen: Chosen, trust: _Trust
) -> PublishOutcome:
    """Stage the new tiles and bundles (none when DIR's checkpoint is the chosen one) and the handovers, rename
    them into place, then `DIR/checkpoint`; then remove what no checkpoint needs."""
    old = published.seq if published is not None else 0
    current = published is not None and published.note == chosen.note
    with BudgetStore.open(request.db, readonly=True) as store, store.snapshot() as snapshot:
        builder = TreeBuilder(snapshot, old, chosen.size)
        refusal, unchanged = (None, 0) if current else _stage(folder, builder, chosen, _phase(request, "publishing"))
        if refusal is None:
            handovers = handover_files(snapshot, chosen.size, request.key_states, trust.keys, trust.policy)
            refusal, more = _stage_files(folder, handovers)
            unchanged += more
    if refusal is not None:
        return PublishOutcome(request.folder, old, old, refusal=refusal)
    folder.commit()
    if not current:
        folder.stage(CHECKPOINT_NAME, chosen.note.encode("utf-8"))
        folder.commit()
    removed = tuple(path for path in superseded(old, chosen.size) if folder.remove_folder(path))
    tidied = tuple(folder.tidy(tidied_folders(chosen.size)))
    return PublishOutcome(request.folder, old, chosen.size, tuple(folder.written), unchanged, removed, tidied=tidied)


def _checked(
    request: PublishRequest, folder: PublicationFolder, published: Checkpoint | None, chosen: Chosen,
    keys: list[VerifierKey], waived: list[Finding],
) -> PublishOutcome | None:
    """Rules 1 and 2 before anything is built: no roll-back, and the audit of the new rows; None when they hold."""
    old = published.seq if published is not None else 0
    if published is not None:
        refusal = rolled_back(published, chosen.size, f"{folder.path.rstrip('/')}/{CHECKPOINT_NAME}")
        if refusal is not None:
            return PublishOutcome(request.folder, old, old, refusal=refusal)
    report = audit_new_rows(AuditRequest(
        request.db, since=published, through=chosen.size, trusted_keys=tuple(keys), jobs=request.jobs,
        witness_keys=request.witness_keys, witness_quorum=request.witness_quorum, key_states=request.key_states,
        witness_policy=request.witness_policy, on_progress=_phase(request, "auditing"),
    ), chosen.size, waived)
    return _told(request, old, report, keys) if report is not None else None


def _told(request: PublishRequest, old: int, report: AuditReport, keys: list[VerifierKey]) -> PublishOutcome:
    """The outcome of an audit that stopped the publish. What a handover to a key not given explains (the night
    after a `rotate`, publish's line unchanged) is said to the operator who rotated, as one refusal, and left out
    of the report (whose actions would have them adopt the rows)."""
    with BudgetStore.open(request.db, readonly=True) as store, store.snapshot() as snapshot:
        rotations = untold_rotations(snapshot, report.findings, keys)
    if not rotations:
        return PublishOutcome(request.folder, old, old, report=report)
    rest = tuple(item for item in report.findings if not any(rotation.explains(item) for rotation in rotations))
    return PublishOutcome(request.folder, old, old, refusal=rotation_refusal(rotations),
                          report=dataclasses.replace(report, findings=rest) if rest else None)


def _stage(
    folder: PublicationFolder, builder: TreeBuilder, chosen: Chosen, on_progress: Callable[[int, int], None] | None
) -> tuple[Refusal | None, int]:
    """Stage every new file (rule 2: one DIR already holds must be byte for byte the same, and is left alone);
    the refusal of the first that differs, and how many were already there."""
    refusal, unchanged = _stage_files(folder, builder.files(), builder.rows_done, on_progress)
    if refusal is not None:
        return refusal, unchanged
    if builder.root() != chosen.checkpoint.root:
        raise StoreDamaged(
            f"the tiles built from the store do not give the root of the checkpoint being published (size "
            f"{chosen.size}): its stored tree nodes or rows changed; run `compute-budget audit`; nothing was written"
        )
    return None, unchanged


def _stage_files(
    folder: PublicationFolder, files: Iterable[TreeFile], done: Callable[[], tuple[int, int]] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> tuple[Refusal | None, int]:
    """Stage each of `files` DIR does not hold yet (one it holds with other bytes: the `published_mismatch`
    refusal, at once); the refusal, and how many DIR already held. `on_progress` is told `done()` after each."""
    unchanged = 0
    for item in files:
        if on_progress is not None and done is not None:
            on_progress(*done())
        same = same_as_published(folder, item.path, item.data)
        if isinstance(same, Refusal):
            return same, unchanged
        if same:
            unchanged += 1
        else:
            folder.stage(item.path, item.data)
    return None, unchanged


def _phase(request: PublishRequest, phase: str) -> Callable[[int, int], None] | None:
    """The request's progress callback for one phase, as the auditor and `_stage_files` call it."""
    report = request.on_progress
    if report is None:
        return None
    return lambda done, total: report(phase, done, total)
