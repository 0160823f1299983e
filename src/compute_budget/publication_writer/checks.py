"""What a publish checks before it writes (spec 10.1): the published checkpoint verifies under a trusted key
(rule 1), the rows not yet published pass the audit `audit --since` runs (rule 1, by the auditor itself), and a file
already in DIR has exactly the bytes the store gives it (rule 2). Each result that needs a person is a `Refusal`
(exit 1); rule 4's over-long entry is `errors.EntryTooLong` (exit 2), raised while the files are built."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from compute_budget.auditor.key_states import handover_by, label, note_problem
from compute_budget.auditor.report import AuditReport
from compute_budget.auditor.request import AuditRequest
from compute_budget.auditor.scan import run_audit
from compute_budget.auditor.witness_rules import WitnessRequirement, given_note_findings
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.key_states import KeyStates, is_key
from compute_budget.core.log.note import Signature, VerifierKey
from compute_budget.core.seal_checks import trusted_signers
from compute_budget.core.verify import Finding, FindingKind
from compute_budget.errors import CheckpointError, NoteError, clip
from compute_budget.publication_writer.write import CHECKPOINT_NAME, PublicationFolder
from compute_budget.store.snapshot import Snapshot

PUBLISHED_MISMATCH = "published_mismatch"  # spec 10.1 rule 2 and 10.2: a published file the store does not give
MAX_CHECKPOINT_BYTES = 64 * 1024  # spec 10.2's limit for a checkpoint


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why nothing was written, for a person to look at (exit 1): a finding `kind` and what it is about."""

    kind: str
    detail: str

    def line(self) -> str:
        """The one line the command prints."""
        return f"{self.kind}: {self.detail}; nothing was written"


def published_checkpoint(folder: PublicationFolder, keys: Sequence[VerifierKey]) -> Checkpoint | Refusal | None:
    """`DIR/checkpoint` when it verifies under one of `keys` (a signature by one that verifies, none that fails);
    None when DIR holds none yet; a `bad_signature` refusal otherwise (rule 1)."""
    data = folder.read(CHECKPOINT_NAME, MAX_CHECKPOINT_BYTES)
    if data is None:
        return None
    where = f"{folder.path.rstrip('/')}/{CHECKPOINT_NAME}"
    if len(data) > MAX_CHECKPOINT_BYTES:
        return Refusal(FindingKind.BAD_SIGNATURE.value, f"{where} is over {MAX_CHECKPOINT_BYTES} bytes: no checkpoint")
    try:
        checkpoint = Checkpoint.from_note(data, source=where)
        verified, failed = trusted_signers(checkpoint.note or "", keys)
    except (CheckpointError, NoteError) as error:
        return Refusal(
            FindingKind.BAD_SIGNATURE.value, f"{where} is no signed checkpoint note: {clip(str(error), 200)}"
        )
    if failed:
        names = ", ".join(f"{key.name}+{key.key_hash:08x}" for key in failed)
        return Refusal(FindingKind.BAD_SIGNATURE.value, f"{where}: its signature by {names} does not verify (forged?)")
    if not verified:
        return Refusal(
            FindingKind.BAD_SIGNATURE.value, f"{where} carries no signature by a --trusted-key: it was not published "
            "with these keys (or was replaced)",
        )
    return checkpoint


def rolled_back(published: Checkpoint, size: int, where: str) -> Refusal | None:
    """A published checkpoint larger than the one to publish: publishing would roll DIR back (a `checkpoint_mismatch`:
    the store lost rows or checkpoints, or DIR was published from another store signed by the same key)."""
    if published.seq <= size:
        return None
    return Refusal(
        FindingKind.CHECKPOINT_MISMATCH.value,
        f"{where} publishes {published.seq} rows, more than the newest trusted checkpoint of the store ({size}): "
        "the store was rolled back or DIR is another store's publication, and DIR is never rolled back",
    )


def uncounted(snapshot: Snapshot, published: Checkpoint, states: KeyStates, where: str) -> Refusal | None:
    """A `DIR/checkpoint` signed by a `--retired` or `--revoked` key where that signature does not count (above
    the handover, or off the revoked key's tree) is `bad_signature`: it was not the log's to publish."""
    problem = note_problem(snapshot, published.note or "", states, snapshot.max_seq())
    if problem is None:
        return None
    return Refusal(FindingKind.BAD_SIGNATURE.value, f"{where}: {problem}")


def waived_findings(
    snapshot: Snapshot, published: Checkpoint | None, policy: WitnessRequirement | None
) -> list[Finding]:
    """What the audit of the new rows says of DIR's checkpoint's cosignatures, which a publish does not ask of it
    (spec 11.5: witnesses added later; DIR's checkpoint needs a trusted writer's signature only)."""
    if published is None or policy is None:
        return []
    return given_note_findings(published, snapshot, policy)


def audit_new_rows(request: AuditRequest, size: int, waived: Sequence[Finding] = ()) -> AuditReport | None:
    """Rule 1: the audit of the rows after `request.since` through `size`, by the auditor itself; its report when a
    finding is about rows 1..`size` or about the store as a whole (no seq), else None (findings only about rows
    after `size`, which this publish does not publish, do not stop it). The `waived` findings are left out."""
    report = run_audit(request)
    if waived:
        report = dataclasses.replace(
            report, findings=tuple(finding for finding in report.findings if finding not in waived)
        )
    return report if blocking(report.findings, size) else None


def blocking(findings: Sequence[Finding], size: int) -> list[Finding]:
    """The findings that stop a publish of `size` rows: those about a row at or below it, or about no one row."""
    return [finding for finding in findings if finding.seq is None or finding.seq <= size]


def same_as_published(folder: PublicationFolder, path: str, data: bytes) -> bool | Refusal:
    """Rule 2: True when DIR already holds `path` with exactly `data` (it is left alone); False when it holds no
    such file; a `published_mismatch` refusal naming it when its bytes differ (a rewrite, or another history)."""
    existing = folder.read(path, len(data))
    if existing is None:
        return False
    if existing == data:
        return True
    return Refusal(
        PUBLISHED_MISMATCH,
        f"{folder.path.rstrip('/')}/{path} is already published with other bytes than the store gives it "
        f"({len(existing)}{'+' if len(existing) > len(data) else ''} bytes, the store's {len(data)}): a published "
        "file is never rewritten; DIR was edited, or was published from another history",
    )


@dataclass(frozen=True, slots=True)
class UntoldRotation:
    """A stored handover (`rotate`) from a trusted key, `giver`, at `size` to `takers`, keys the publish was not
    given: what an unchanged publish line meets the night after a rotation. `ids`: the stored checkpoints holding
    it (`rotate` files it under each key)."""

    giver: VerifierKey
    takers: tuple[Signature, ...]
    size: int
    ids: frozenset[int]

    def explains(self, finding: Finding) -> bool:
        """True for what the audit says of this handover itself (`bad_signature` at its stored checkpoint) and of
        the rows the new key signed after it (`unattested_rows`)."""
        if finding.kind is FindingKind.UNATTESTED_ROWS:
            return finding.seq is not None and finding.seq > self.size
        return finding.kind is FindingKind.BAD_SIGNATURE and finding.seq == self.size and any(
            finding.detail.startswith(f"stored checkpoint #{stored_id} ") for stored_id in self.ids
        )


def untold_rotations(
    snapshot: Snapshot, findings: Sequence[Finding], keys: Sequence[VerifierKey]
) -> list[UntoldRotation]:
    """The stored handovers from a key of `keys` to keys not among them, at the sizes of the audit's
    `bad_signature` findings (where the audit reports such a handover), the giver's signature verifying."""
    origin, found = snapshot.origin(), list[UntoldRotation]()
    sizes = sorted({item.seq for item in findings if item.kind is FindingKind.BAD_SIGNATURE and item.seq is not None})
    for size in sizes:
        held: dict[tuple[VerifierKey, tuple[Signature, ...]], set[int]] = {}
        for stored in snapshot.checkpoints_at(size):
            for key in keys:
                takers = handover_by(stored.note, key, origin, size)
                if takers and not any(is_key(taker, item) for taker in takers for item in keys):
                    held.setdefault((key, takers), set()).add(stored.id)
        found += [UntoldRotation(giver, takers, size, frozenset(ids)) for (giver, takers), ids in held.items()]
    return found


def rotation_refusal(rotations: Sequence[UntoldRotation]) -> Refusal:
    """What publish says of a handover to a key it was not given (spec 11.6's advice, for the operator who ran
    `rotate`, not for an auditor outside): give it the arguments `rotate` printed."""
    said = []
    for item in rotations:
        names = ", ".join(label(taker) for taker in item.takers)
        said.append(
            f"the store holds a handover (`rotate`) from {label(item.giver)} to {names} at size {item.size}, a key "
            f"publish was not given, so no trusted key vouches for the rows after {item.size}: if you rotated, give "
            f"publish the arguments `rotate` printed, --trusted-key <the new verifier key, {names}> --retired "
            f"{item.giver.format()}@{item.size} (docs/operations.md, \"Rotating a writer key\"); if you did not, "
            "the old key may have leaked (docs/incident.md, \"A writer key leaked\")"
        )
    return Refusal(FindingKind.BAD_SIGNATURE.value, "; ".join(said))
