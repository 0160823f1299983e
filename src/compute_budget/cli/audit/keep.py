"""What `compute-budget audit --save-checkpoint` keeps after a clean audit: the head as JSON, the writer-signed note the
auditor cosigns (`--cosign`), or with witness keys the newest checkpoint the witnesses cosigned and `FILE.head`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from compute_budget.cli.io import write_atomically
from compute_budget.cli.program import say

if TYPE_CHECKING:
    from compute_budget.auditor.report import AuditReport
    from compute_budget.auditor.source import AuditSource
    from compute_budget.core.log.checkpoint import Checkpoint
    from compute_budget.core.log.note import SignerKey, VerifierKey
    from compute_budget.core.log.witness_policy import TlogPolicy


def witnessed_to_keep(
    source: AuditSource,
    report: AuditReport,
    save_path: str,
    cosigner: SignerKey | None,
    given: list[Checkpoint],
    rule: TlogPolicy,
) -> tuple[str, int, str] | None:
    """--save-checkpoint with witness keys: the newest checkpoint K witnesses cosigned, with its signatures, its
    size and the text of FILE.head (the head this audit checked, spec 9.9.2), or None when none is."""
    import time

    from compute_budget.auditor.head_note import format_head_note, head_path, writer_signed_head
    from compute_budget.auditor.witness_rules import WitnessRequirement, witnessed_note
    from compute_budget.core.log.note import VerifierKey, add_signature
    from compute_budget.errors import StoreDamaged

    policy = WitnessRequirement(rule, 0, int(time.time()))
    note = head = None
    writers = [VerifierKey.parse(text) for text in report.trusted_keys]
    if report.witnessed_size:
        with source.snapshot() as snapshot:  # the source the audit read, opened once by the command line
            note = witnessed_note(snapshot, policy, report.witnessed_size, given, writers)
            head = writer_signed_head(snapshot, report.head_checkpoint().note_text(), report.head.seq, writers)
    if note is None or not report.witnessed_size:
        say(f"no checkpoint carries {policy.quorum} cosignature(s) by the witness keys: {save_path} was not written")
        return None
    if head is None:
        raise StoreDamaged(
            f"{save_path} was not written: no stored checkpoint of the head (seq {report.head.seq}) carries a writer "
            f"signature that verifies under --trusted-key, so there is no {head_path(save_path)} to keep (record with "
            "the writer's key, or run `compute-budget checkpoint --signing-key`, and audit again)"
        )
    if cosigner is not None:
        note = add_signature(note, attested(report, report.witnessed_size, cosigner))
    return note, report.witnessed_size, format_head_note(head, report.started_at)


def attested(report: AuditReport, size: int, cosigner: SignerKey) -> SignerKey:
    """`cosigner`, once every row through `size` is covered by a trusted writer's stored checkpoint (spec 9.9.5)."""
    from compute_budget.errors import AuditError

    if report.attested_size is None or report.attested_size < size:
        raise AuditError(
            f"refusing to cosign size {size} with {cosigner.name}: a trusted writer's stored checkpoint covers only "
            f"{report.attested_size or 0} rows"
        )
    return cosigner


def write_kept(
    save_path: str, kept: tuple[str, int, str | None], report: AuditReport, keys: list[VerifierKey],
    cosigner: SignerKey | None,
) -> None:
    """Write what --save-checkpoint keeps: FILE.head first (a failure between the two leaves the older FILE with a
    newer head, which judges no row more leniently than the pair it replaces), then FILE."""
    from compute_budget.auditor.head_note import head_path

    note, size, head = kept
    if head is not None:
        write_atomically(head_path(save_path), head)
        write_atomically(save_path, note)
        say(f"saved checkpoint seq {size} to {save_path} (and the head, seq {report.head.seq}, to "
            f"{head_path(save_path)})")
        return
    write_atomically(save_path, note)
    say(f"saved checkpoint seq {size} to {save_path}")
    if keys and cosigner is None:  # spec 8: with --trusted-key a given checkpoint must carry a trusted signature
        say(
            f"warning: {save_path} is an unsigned JSON checkpoint: given to --since or --checkpoint with "
            "--trusted-key it is bad_signature; add --cosign AUDITOR_KEY to keep the writer-signed note instead"
        )
