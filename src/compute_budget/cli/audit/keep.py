"""What `compute-budget audit --save-checkpoint` keeps after a clean audit: the head as JSON, the writer-signed note the
auditor cosigns (`--cosign`), the published note (`--tiles`), or with witness keys the newest checkpoint the
witnesses cosigned; and whenever a trusted key is given, `FILE.head` (spec 11.5: witness keys added on a later night
then need no new baseline)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from compute_budget.cli.io import write_atomically
from compute_budget.cli.program import say

if TYPE_CHECKING:
    from compute_budget.auditor.report import AuditReport
    from compute_budget.auditor.source import AuditSource
    from compute_budget.cli.trust import TrustOptions
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


def with_head(
    kept: tuple[str, int, str | None] | None, source: AuditSource | None, report: AuditReport, save_path: str
) -> tuple[str, int, str | None] | None:
    """What --save-checkpoint keeps, with the text of FILE.head whenever a trusted writer key was given (spec 11.5):
    the head this audit checked, as the writer signed it (a store's stored checkpoint, or the published one)."""
    if kept is None or kept[2] is not None or not report.trusted_keys:
        return kept
    from compute_budget.auditor.head_note import format_head_note, head_path, writer_signed_head
    from compute_budget.core.log.note import VerifierKey
    from compute_budget.errors import StoreDamaged

    assert source is not None  # a store whose history is gone is never clean
    writers = [VerifierKey.parse(text) for text in report.trusted_keys]
    with source.snapshot() as snapshot:  # the source the audit read, opened once by the command line
        head = writer_signed_head(snapshot, report.head_checkpoint().note_text(), report.head.seq, writers)
    if head is None:
        raise StoreDamaged(
            f"{save_path} was not written: no checkpoint of the head (seq {report.head.seq}) carries a writer "
            f"signature that verifies under --trusted-key, so there is no {head_path(save_path)} to keep"
        )
    return kept[0], kept[1], format_head_note(head, report.started_at)


class _AuditLine(Protocol):
    """What a missing FILE.head's fix is made of: the audit's command line."""

    @property
    def db(self) -> str | None: ...
    @property
    def tiles(self) -> str | None: ...
    @property
    def expected_origin(self) -> str | None: ...
    @property
    def trust(self) -> TrustOptions: ...


def rebaseline_command(line: _AuditLine, since_path: str) -> str:
    """The audit that keeps `since_path` and its FILE.head afresh (this command line without --since): what a
    missing FILE.head names. A URL's user:password@ is shown as ``***@``."""
    import shlex

    from compute_budget.publication_reader.fetch import shown

    where = ["--tiles", shown(line.tiles)] if line.tiles is not None else ["--db", line.db] if line.db else []
    where += ["--origin", line.expected_origin] if line.expected_origin else []
    trust = line.trust
    options = [
        *(("--trusted-key", key) for key in trust.trusted_keys),
        *(("--witness-key", key) for key in trust.witness_keys),
        *((("--witness-quorum", str(trust.witness_quorum)),) if trust.witness_quorum is not None else ()),
        *((("--policy", trust.policy_path),) if trust.policy_path else ()),
        *(("--retired", item) for item in trust.retired), *(("--revoked", item) for item in trust.revoked),
    ]
    flat = [item for pair in options for item in pair]
    return shlex.join(["compute-budget", "audit", *where, *flat, "--save-checkpoint", since_path])


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
    also = f" (and the head, seq {report.head.seq}, to {head_path(save_path)})" if head is not None else ""
    say(f"saved checkpoint seq {size} to {save_path}{also}")
    if keys and cosigner is None and note.startswith("{"):  # spec 8: a given checkpoint must carry a trusted signature
        say(
            f"warning: {save_path} is an unsigned JSON checkpoint: given to --since or --checkpoint with "
            "--trusted-key it is bad_signature; add --cosign AUDITOR_KEY to keep the writer-signed note instead"
        )
