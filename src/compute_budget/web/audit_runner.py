"""The workbench's replay audit: one at a time per server, in a background thread, read-only, with progress.

The audit is the auditor's own (`auditor.scan.audit`) over a `seq` range: rows after `after_seq` (the stored
row there is trusted as its start, like `audit --since`) through `through_seq`, with the keys `serve` was given
(`--trusted-key`, `--witness-key`, `--witness-quorum`), so its verdict is the command line's; it does not wait for a
live writer's next checkpoint (`audit --attest-wait 0`), and says so.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from compute_budget.auditor.report import AuditReport
from compute_budget.auditor.scan import audit
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.key_states import KeyStates
from compute_budget.core.log.witness_policy import TlogPolicy
from compute_budget.core.verify import Finding, FindingKind
from compute_budget.errors import ComputeBudgetError

FINDINGS_SHOWN_PER_KIND = 500
# The Workbench's audit does not wait for a live writer to sign its newest rows (spec 12.5): a person is watching the
# page, and the report and the page say so.
WORKBENCH_ATTEST_WAIT = 0.0


class _Stopped(Exception):
    """Raised inside a running audit when the server shuts down."""


@dataclass
class AuditRun:
    """One audit the server ran or is running; fields change only under the runner's lock."""

    number: int
    after_seq: int
    through_seq: int
    started: float = field(default_factory=time.time)
    rows_done: int = 0
    rows_total: int = 0
    finished: bool = False
    report: AuditReport | None = None
    error: str | None = None
    elapsed_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The run as JSON (the report's own JSON form once it finished)."""
        return {
            "number": self.number,
            "after_seq": self.after_seq,
            "through_seq": self.through_seq,
            "running": not self.finished,
            "rows_done": self.rows_done,
            "rows_total": self.rows_total,
            "error": self.error,
            "report": self.report.to_dict() if self.report is not None else None,
        }

    def findings_by_kind(self) -> list[tuple[str, int, list[Finding]]]:
        """(kind, how many, the first ones) for each kind of finding, in the spec's order of kinds."""
        if self.report is None:
            return []
        grouped: dict[str, list[Finding]] = {}
        for finding in self.report.findings:
            grouped.setdefault(finding.kind.value, []).append(finding)
        return [
            (kind, len(grouped[kind]), grouped[kind][:FINDINGS_SHOWN_PER_KIND])
            for kind in self.report.findings_by_kind()
        ]

    @property
    def percent(self) -> int:
        """Progress in whole percent."""
        return 100 if self.finished else (100 * self.rows_done // self.rows_total if self.rows_total else 0)


@dataclass(frozen=True, slots=True)
class AuditKeys:
    """The keys `serve` was given, as given (verifier key text or files): the audit reads them as `audit` does."""

    trusted: tuple[str, ...] = ()
    witnesses: tuple[str, ...] = ()
    witness_quorum: int | None = None
    states: KeyStates = field(default_factory=KeyStates)  # --retired / --revoked, parsed (spec 11)
    policy: TlogPolicy | None = None  # --policy (C2SP tlog-policy), instead of witnesses/witness_quorum

    def policy_in_words(self) -> str | None:
        """The witness policy the audit checks, for the page: its quorum in words and its SHA-256; None without."""
        if self.policy is None:
            return None
        return f"{self.policy.quorum_in_words()} (policy SHA-256 {self.policy.sha256})"


WholeAudit = Callable[[Callable[[int, int], None]], AuditReport]
"""An audit of everything a viewer serves, given its progress callback (`serve --tiles`: `audit --tiles`)."""


class AuditRunner:
    """Runs at most one audit at a time for a server; keeps the latest run for the audit page."""

    def __init__(self, target: str, keys: AuditKeys | None = None, *, whole: WholeAudit | None = None) -> None:
        self._target = target  # the store's path or URL as given, password included: never shown or logged
        self._keys = keys if keys is not None else AuditKeys()
        self._whole = whole  # a publication's viewer: the one audit it runs (`audit --tiles`), not a store's range
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._latest: AuditRun | None = None
        self._count = 0

    @property
    def keys(self) -> AuditKeys:
        """The keys every audit of this runner is given."""
        return self._keys

    def latest(self) -> AuditRun | None:
        """The running or last finished audit (a snapshot of it), or None before the first."""
        with self._lock:
            if self._latest is None:
                return None
            return AuditRun(**{name: getattr(self._latest, name) for name in AuditRun.__dataclass_fields__})

    def start(self, after: Checkpoint | None, through_seq: int) -> AuditRun | None:
        """Start an audit of the rows after `after` (None: from the first) through `through_seq`; None when
        one is already running."""
        with self._lock:
            if self._latest is not None and not self._latest.finished:
                return None
            self._count += 1
            run = AuditRun(self._count, after.seq if after is not None else 0, through_seq)
            self._latest = run
            self._thread = threading.Thread(
                target=self._run, args=(run, after), name=f"workbench-audit-{run.number}", daemon=True
            )
            self._thread.start()
            return run

    def _run(self, run: AuditRun, after: Checkpoint | None) -> None:
        began = time.perf_counter()

        def progress(done: int, total: int) -> None:
            if self._stopping.is_set():
                raise _Stopped
            with self._lock:
                run.rows_done, run.rows_total = done, total

        report: AuditReport | None = None
        error: str | None = None
        try:
            report = self._whole(progress) if self._whole is not None else audit(
                self._target, since=after, through=run.through_seq, on_progress=progress,
                trusted_keys=self._keys.trusted, witness_keys=self._keys.witnesses,
                witness_quorum=self._keys.witness_quorum, retired=self._keys.states.states,  # KeyStates as they are
                witness_policy=self._keys.policy, attest_wait=WORKBENCH_ATTEST_WAIT,
            )
            if after is not None:
                report = _without_start_findings(report, after)
        except _Stopped:
            error = "the server stopped before the audit finished"
        except ComputeBudgetError as failure:
            error = str(failure)
        except Exception as failure:  # a bug of ours: the page says so instead of hanging on "running"
            error = f"unexpected {type(failure).__name__}: {failure}"
        with self._lock:
            run.report, run.error = report, error
            run.elapsed_seconds = time.perf_counter() - began
            run.finished = True

    def stop(self, timeout: float = 5.0) -> None:
        """Ask a running audit to stop, and wait for it a little."""
        self._stopping.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def wait(self, timeout: float = 60.0) -> None:
        """Wait for the running audit, if any, to finish (for tests and tools)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)


def _without_start_findings(report: AuditReport, start: Checkpoint) -> AuditReport:
    """A range audit's start is the stored row there, not a note someone gave: with keys, the audit would report
    that this start carries no signature or cosignature (`bad_signature`, "the given checkpoint ..."), which says
    nothing about the store. Only those findings go; the stored checkpoints' own are kept."""
    kept = tuple(
        finding for finding in report.findings
        if not (
            finding.kind is FindingKind.BAD_SIGNATURE and finding.seq == start.seq
            and finding.budget_id == start.budget_id and finding.detail.startswith("the given checkpoint")
        )
    )
    return report if len(kept) == len(report.findings) else dataclasses.replace(report, findings=kept)
