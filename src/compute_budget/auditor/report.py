"""The audit report: what an audit found, with its counts, the head it reached, when it ran and by which release."""

from __future__ import annotations

import base64
import datetime as dt
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from compute_budget.auditor.causes import (
    KIND_ORDER,
    affected_rows,
    break_at_edited_entry,
    causes_first,
    is_row_finding,
)
from compute_budget.auditor.causes import ROW_KINDS as ROW_KINDS  # where it was first defined, still importable
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.head import ChainHead
from compute_budget.core.verify import Finding, FindingKind

TOOL_NAME = "compute-budget"


def tool_version() -> str:
    """The installed compute-budget's version (what a report says produced it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(TOOL_NAME)
    except PackageNotFoundError:  # pragma: no cover  (run from a source tree that was never installed)
        return "unknown"


def utc_now() -> str:
    """Now, UTC, to the second, as ISO 8601 with a Z (report times)."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


MAX_LISTED_ROWS = 1000
MAX_SUMMARY_ROWS = 100

# What to do about each kind of finding, in one line (text, JSON `action`, JUnit message); docs/incident.md is the
# runbook behind them.
ACTIONS: dict[FindingKind, str] = {
    FindingKind.BUDGET_ID_MISMATCH: "a hashed field of this row was edited: keep the evidence, then salvage the rows "
    "before it into a new log (copy --through; docs/incident.md)",
    FindingKind.REDERIVE_MISMATCH: "the stored decision or its gate was edited: keep the evidence, then salvage the "
    "rows before it into a new log (copy --through; docs/incident.md)",
    FindingKind.CHAIN_BREAK: "a row here was edited, inserted, deleted or reordered: keep the evidence, then salvage "
    "the rows before it (copy --through; docs/incident.md)",
    FindingKind.UNSUPPORTED_POLICY_VERSION: "a row of a policy this release does not know: audit with the release "
    "that wrote it, or treat it as forged (docs/incident.md)",
    FindingKind.MALFORMED_ROW: "the row cannot be read (a raw edit): inspect it with sqlite3 or psql, then salvage "
    "the rows before it (docs/incident.md)",
    FindingKind.CHECKPOINT_MISMATCH: "history changed under this checkpoint: look at the affected rows first; keep "
    "the checkpoint as evidence (docs/incident.md)",
    FindingKind.BAD_SIGNATURE: "a checkpoint's signature does not verify or is missing: check the key and the file; "
    "never trust this entry (docs/incident.md)",
    FindingKind.UNATTESTED_ROWS: "rows no trusted writer signed: review them (list --after-seq), then adopt them "
    "(record --adopt-unsigned) or salvage before them",
    FindingKind.SCHEMA_TAMPERED: "the guard was changed: run compute-budget migrate to restore it, then audit in full "
    "against your last kept checkpoint; a repair waits for record --after-repair ID (docs/incident.md)",
    FindingKind.UNWITNESSED_ROWS: "rows no witness cosigned in time: compute-budget witness submit, and find out why "
    "the witnesses were not reached",
    FindingKind.PUBLISHED_MISMATCH: "the publication differs from what was published (an edited entry or a rewritten "
    "file): publish again from the store, and audit the store itself (docs/operations.md)",
    FindingKind.UNPUBLISHED_ROWS: "the witnesses saw rows the publication does not hold: the mirror is stale or "
    "frozen; ask its operator, and audit another copy (docs/operations.md)",
}

# The same, for the reader of a publication (`audit --tiles`, spec 11.4), who has its files and no database: keep
# them as evidence, tell the publisher, audit again after they republish; never a command that needs the database.
_KEEP = "keep a copy of the publication's files (checkpoint, tile/) and this report as evidence"
_AGAIN = "audit again after they republish (docs/incident.md, \"Auditing a publication\")"
PUBLICATION_ACTIONS: dict[FindingKind, str] = {
    FindingKind.BUDGET_ID_MISMATCH: f"an entry's hashed fields do not give its budget_id (an edited entry): {_KEEP}; "
    f"tell the publisher which entry; {_AGAIN}",
    FindingKind.REDERIVE_MISMATCH: f"an entry's decision does not follow from its gate (an edited entry, or a fault "
    f"of the writer's): {_KEEP}; tell the publisher which entry; {_AGAIN}",
    FindingKind.CHAIN_BREAK: "the entries' chain does not reach the checkpoint's chain line: an entry here or before "
    f"it was edited, inserted, deleted or reordered; {_KEEP}; tell the publisher; {_AGAIN}",
    FindingKind.UNSUPPORTED_POLICY_VERSION: "an entry of a policy this release does not know: audit again with a "
    f"release that knows it; if none does, treat the entry as forged: {_KEEP}; tell the publisher which entry; "
    f"{_AGAIN}",
    FindingKind.MALFORMED_ROW: f"an entry cannot be read: {_KEEP}; tell the publisher which entry; {_AGAIN}",
    FindingKind.CHECKPOINT_MISMATCH: "the published tree is not the history its checkpoint, your kept checkpoint or "
    f"a witness vouches for (a rewrite or a fork): {_KEEP}, beside the checkpoint you kept; tell the publisher; "
    f"{_AGAIN}",
    FindingKind.BAD_SIGNATURE: "the published checkpoint carries no valid signature by a key you trust: trust "
    f"nothing it vouches for; check the key you were given (a new writer key?), then {_KEEP}; tell the publisher; "
    f"{_AGAIN}",
    FindingKind.UNATTESTED_ROWS: "entries no trusted writer key signed: rely on none of them; ask the publisher, "
    f"out of band, whether the writer key changed (and for its new verifier key); {_KEEP}; tell the publisher if "
    f"the key did not change; {_AGAIN}",
    FindingKind.SCHEMA_TAMPERED: f"the publisher's database was changed outside the log: {_KEEP}; tell the "
    f"publisher; {_AGAIN}",
    FindingKind.UNWITNESSED_ROWS: f"entries no quorum of witnesses cosigned in time: {_KEEP}; tell the publisher "
    f"their witnesses are not reached; {_AGAIN}",
    FindingKind.PUBLISHED_MISMATCH: "a published file differs from what the checkpoint vouches for (an entry bundle "
    f"or a tile edited after publishing): {_KEEP}; tell the publisher which file; {_AGAIN}",
    FindingKind.UNPUBLISHED_ROWS: "the witnesses cosigned rows this publication does not hold (a stale or frozen "
    f"mirror, or rows held back): {_KEEP}; tell the publisher; audit another mirror if there is one; {_AGAIN}",
}


@dataclass(frozen=True, slots=True)
class LookBack:
    """What an `--since` audit's look-back (spec 9.9.7) re-checked below its checkpoint: slice `slice` of `n`
    (the audit's UTC day number mod n), `tiles` tiles (the partial last one included) holding `rows` rows, in
    `seconds`; `findings` of the report's findings are its own."""

    n: int
    slice: int
    tiles: int
    rows: int
    seconds: float
    findings: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The report's JSON `look_back`."""
        return {"n": self.n, "slice": self.slice, "tiles": self.tiles, "rows": self.rows,
                "seconds": round(self.seconds, 3), "findings": self.findings}


@dataclass(frozen=True, slots=True)
class AttestWait:
    """What a database audit did about rows above the newest trusted checkpoint (spec 12.5): it waited `waited` of
    `limit` seconds, and extended the audit to a covering checkpoint's size `extended_to` (None: it did not, for
    `reason`)."""

    limit: float
    waited: float
    extended_to: int | None = None
    reason: str = ""

    def said(self) -> str:
        """The report's line: ``waited W s; extended the audit to M``, or why it was not."""
        if self.limit == 0:
            return f"did not wait (attest wait 0 s): {self.reason}"
        if self.extended_to is not None:
            return f"waited {self.waited:.1f} s; extended the audit to {self.extended_to}"
        return f"waited {self.waited:.1f} s; {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        """The report's JSON `attest_wait`."""
        return {"limit_seconds": self.limit, "waited_seconds": round(self.waited, 3),
                "extended_to": self.extended_to, "said": self.said()}


@dataclass(frozen=True, slots=True)
class AuditReport:
    """What an audit found: `clean` iff no findings."""

    database: str
    rows_checked: int
    findings: tuple[Finding, ...]
    head: ChainHead
    status_counts: dict[str, int]
    reason_counts: dict[str, int]
    elapsed_seconds: float
    checkpoint: Checkpoint | None = None
    since: Checkpoint | None = None
    jobs: int = 1
    warnings: tuple[str, ...] = ()
    policy_counts: dict[str, int] = field(default_factory=dict)
    started_at: str = ""  # UTC, ISO 8601 with a Z
    finished_at: str = ""
    tool_version: str = field(default_factory=lambda: tool_version())
    origin: str | None = None  # the store's log name (spec section 8), None while it has none
    root: bytes | None = None  # the Merkle root the audit recomputed for the head
    trusted_keys: tuple[str, ...] = ()  # the verifier keys given
    attested_size: int | None = None  # rows covered by the newest checkpoint a trusted key signed (keys given)
    provenance: dict[str, Any] | None = None  # a salvaged store's origin of record (spec 9.8), else None
    witnessed_size: int | None = None  # rows covered by the newest checkpoint K witnesses cosigned (witness keys given)
    witness_keys: tuple[str, ...] = ()  # the witness verifier keys given
    witness_age: str | None = None  # how the witnesses' age was judged (spec 9.9.2), with witness keys
    # The witness policy checked (C2SP tlog-policy): {"sha256": of its file (of its rendering for the --witness-key
    # shorthand), "quorum": in words, "optional": the witnesses asked but never counted}; None without witnesses.
    witness_policy: dict[str, Any] | None = None
    escalated: bool = False  # the --since checkpoint did not hold, so every row was checked
    # With no row to name, the seqs (first, last) a consistent rewrite lies in, bounded by stored checkpoints.
    rewritten_between: tuple[int, int] | None = None
    look_back: LookBack | None = None  # what `--look-back N` re-checked below the --since checkpoint (None: off)
    # The note `--cosign` made (what `--save-checkpoint` writes, the auditor's line last), None without one: the
    # Workbench trusts a clean report only with it (`serve --auditor-key`).
    checkpoint_note: str | None = None
    # The source is a publication read with no database (`audit --tiles`): the actions address its reader, and a
    # chain break is said at the edited entry it follows from (`causes.break_at_edited_entry`).
    publication: bool = False
    # A publication's audit: whether witnesses' answers (--witness-url) dated it (spec 10.2); None for a database.
    freshness_checked: bool | None = None
    # False when a publication's audit stopped at its checkpoint (spec 11.2: it did not verify, so no tile or entry
    # was read): `head` is then no head that was reached, and no checkpoint may be said to hold.
    head_read: bool = True
    # A database audit with rows above its newest trusted checkpoint: what it waited for (spec 12.5); else None.
    attest_wait: AttestWait | None = None
    # Derived from `findings` once (every rendering reads it, and per finding for `cause_seq`): see `affected_rows`.
    _affected: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        findings = self.findings
        if self.publication:
            findings = break_at_edited_entry(findings, self.head.seq)
        object.__setattr__(self, "findings", causes_first(findings))  # every rendering lists causes first
        object.__setattr__(self, "_affected", affected_rows(self.findings, self.publication))

    @property
    def affected_rows(self) -> tuple[int, ...]:
        """The seqs of the rows whose entry or hashes are wrong (re-derivation, budget_id, chain, policy, malformed,
        a publication's edited entry): the causes; checkpoint, tree, signature and schema findings follow from them
        or stand alone."""
        return self._affected

    def action(self, kind: FindingKind) -> str:
        """What to do about a finding of this kind, said to whoever holds the source: a database's owner, or a
        publication's reader."""
        return (PUBLICATION_ACTIONS if self.publication else ACTIONS)[kind]

    def is_row_finding(self, finding: Finding) -> bool:
        """True when the finding is about its row itself (its seq is then among `affected_rows`, but for a
        publication's chain break no edited entry explains)."""
        return is_row_finding(finding, self.publication)

    @property
    def clean(self) -> bool:
        """True when the audit found nothing."""
        return not self.findings

    @property
    def rows_per_second(self) -> float:
        """Audit throughput."""
        return self.rows_checked / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0

    def findings_by_kind(self) -> dict[str, int]:
        """How many findings of each kind, causes first (`published_mismatch`, `bad_signature`), then in the spec's
        order of kinds."""
        counts = Counter(finding.kind for finding in self.findings)
        return {kind.value: counts[kind] for kind in KIND_ORDER if counts[kind]}

    def head_checkpoint(self) -> Checkpoint:
        """The checkpoint of the head this audit reached, with the store's origin and the recomputed root."""
        return Checkpoint.from_head(self.head, origin=self.origin, root=self.root)

    def cause_seq(self, finding: Finding) -> int | None:
        """The affected row a finding follows from: a row finding's own seq; for a checkpoint finding, the first
        affected row its tree covers; None when it follows from no row."""
        rows = self.affected_rows
        if self.is_row_finding(finding) and finding.seq in rows:
            return finding.seq
        if finding.kind in (FindingKind.CHECKPOINT_MISMATCH, FindingKind.CHAIN_BREAK) and finding.seq is not None:
            return next((seq for seq in rows if seq <= finding.seq), None)
        return None

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON (spec section 7: `clean`, `rows_checked`, `findings`, and more)."""
        rows = self.affected_rows
        return {
            "clean": self.clean,
            "rows_checked": self.rows_checked,
            "summary": {"rows_affected": list(rows[:MAX_SUMMARY_ROWS]), "rows_affected_count": len(rows)},
            "rewritten_between": list(self.rewritten_between) if self.rewritten_between else None,
            "checkpoint_note": self.checkpoint_note,
            "findings": [
                {**finding.to_dict(), "action": self.action(finding.kind), "cause_seq": self.cause_seq(finding)}
                for finding in self.findings
            ],
            "findings_by_kind": self.findings_by_kind(),
            "database": self.database,
            "tool": {"name": TOOL_NAME, "version": self.tool_version},
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "policy_versions": dict(sorted(self.policy_counts.items())),
            "head": {
                "seq": self.head.seq,
                "chain_hash": self.head.chain_hash,
                "budget_id": self.head.budget_id,
                "root": base64.b64encode(self.root).decode("ascii") if self.root is not None else None,
            },
            "origin": self.origin,
            "trusted_keys": list(self.trusted_keys),
            "attested_size": self.attested_size,
            "provenance": self.provenance,
            "witness_keys": list(self.witness_keys),
            "witnessed_size": self.witnessed_size,
            "witness_age": self.witness_age,
            "freshness_checked": self.freshness_checked,
            "head_read": self.head_read,
            "witness_policy": self.witness_policy,
            "status_counts": dict(sorted(self.status_counts.items())),
            "reason_counts": dict(sorted(self.reason_counts.items())),
            "checkpoint": self.checkpoint.to_dict() if self.checkpoint else None,
            "since": self.since.to_dict() if self.since else None,
            "mode": "incremental" if self.since and not self.escalated else "full",
            "escalated": self.escalated,
            "look_back": self.look_back.to_dict() if self.look_back is not None else None,
            "attest_wait": self.attest_wait.to_dict() if self.attest_wait is not None else None,
            "affected_rows": {
                "count": len(rows),
                "first": rows[0] if rows else None,
                "seqs": list(rows[:MAX_LISTED_ROWS]),
            },
            "jobs": self.jobs,
            "warnings": list(self.warnings),
            "elapsed_seconds": round(self.elapsed_seconds, 3),
            "rows_per_second": round(self.rows_per_second, 1),
        }
