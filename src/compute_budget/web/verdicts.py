"""What every page leads with: the store's guard, checked live, and the nightly audit report's verdict, trusted only
as far as the auditor's signature and the store's own tree back it: a report file anyone could edit proves nothing.

A banner is red (an alarm), green (a verdict the auditor signed, of this store's rows as they are now) or grey
(a claim nobody vouches for). Anyone who can write the report file can write `{"clean": true}`, so only the note
the audit's `--cosign` made, embedded in the report (`checkpoint_note`), can make it green.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.note import VerifierKey
from compute_budget.core.seal_checks import signature_problem
from compute_budget.errors import ComputeBudgetError
from compute_budget.store import BudgetStore
from compute_budget.web.report import read_report

# How stale a page's view of the guard (and of the report's standing) may be: a guard dropped now is on every
# page within this many seconds.
MAX_CHECK_AGE_SECONDS = 5.0


class Tone(StrEnum):
    """A banner's colour: what it asks of the reader."""

    RED = "red"  # something is wrong: act
    GREEN = "green"  # the auditor's signed verdict, of these rows as they are now
    GREY = "grey"  # a claim: nobody vouches for it


@dataclass(frozen=True, slots=True)
class Banner:
    """One banner at the top of every page."""

    tone: Tone
    text: str

    @property
    def clean(self) -> bool:
        """True for a green banner only."""
        return self.tone is Tone.GREEN


class GuardWatch:
    """The store's append-only guard and schema, checked as the audit checks them (`schema_problems`), at most
    `max_age` seconds old: the full check runs again once the last one is older (a few catalog reads)."""

    def __init__(self, store: BudgetStore, max_age: float = MAX_CHECK_AGE_SECONDS) -> None:
        self._store = store
        self._max_age = max_age
        self._lock = threading.Lock()
        self._checked_at = -max_age - 1.0
        self._found: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())

    def problems(self) -> tuple[str, ...]:
        """How the guard and schema differ from this release's, then each repair no writer acknowledged (spec
        9.9.10: the audit's `schema_tampered` too), one sentence each (empty: they hold)."""
        guard, repairs = self._current()
        return guard + repairs

    def repair_problems(self) -> tuple[str, ...]:
        """The unacknowledged repairs alone (the last of `problems`)."""
        return self._current()[1]

    def _current(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        with self._lock:
            now = time.monotonic()
            if now - self._checked_at > self._max_age:
                self._found = self._check()
                self._checked_at = now
            return self._found

    def _check(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        try:
            with self._store.snapshot() as snapshot:
                return tuple(snapshot.schema_problems()), tuple(snapshot.repair_problems())
        except (ComputeBudgetError, SQLAlchemyError) as error:
            # A store the check cannot read is no store to vouch for: the failure is the problem. SQLAlchemy's
            # text would carry SQL, never the URL; only its class is named.
            reason = str(error) if isinstance(error, ComputeBudgetError) else type(error).__name__
            return (f"the guard could not be checked ({reason})",), ()


def guard_banner(problems: tuple[str, ...], display: str, repairs: tuple[str, ...] = ()) -> Banner | None:
    """The red banner of a broken guard, or of a repair not acknowledged (`repairs`, the last of `problems`): what
    is wrong and what to do; None while the guard holds and every repair is acknowledged."""
    if not problems:
        return None
    if len(problems) == len(repairs):  # the guard holds again: the rows may have changed while it did not
        more = f" (and {len(repairs) - 1} more)" if len(repairs) > 1 else ""
        return Banner(Tone.RED, f"The store was repaired and the repair is not acknowledged: {repairs[0]}{more}.")
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return Banner(
        Tone.RED,
        f"The store's append-only guard is broken: {problems[0]}{more}. Any row may have been changed: run "
        f"`compute-budget migrate --db {display}` (as the store's owner), then a full `compute-budget audit --db "
        f"{display}` (docs/incident.md).",
    )


class ReportWatch:
    """The audit report's banner, worked out again when the file changes (its size, inode or modification time)
    or once it is `max_age` seconds old (the store it vouches for may have changed), else kept: checking the
    auditor's note re-hashes up to a tile of rows."""

    def __init__(
        self, path: str | None, auditor_key: VerifierKey | None, store: BudgetStore,
        max_age: float = MAX_CHECK_AGE_SECONDS,
    ) -> None:
        self._path = path
        self._key = auditor_key
        self._store = store
        self._max_age = max_age
        self._lock = threading.Lock()
        self._seen: tuple[tuple[int, int, int] | None, float, Banner | None] | None = None

    def banner(self) -> Banner | None:
        """The report's banner now (None without a report)."""
        if self._path is None:
            return None
        try:
            found = os.stat(self._path)
            version: tuple[int, int, int] | None = (found.st_mtime_ns, found.st_size, found.st_ino)
        except OSError:
            version = None
        with self._lock:
            now = time.monotonic()
            if self._seen is not None and self._seen[0] == version and now - self._seen[1] <= self._max_age:
                return self._seen[2]
            banner = audit_banner(self._path, self._key, self._store)
            self._seen = (version, now, banner)
            return banner


def audit_banner(path: str | None, auditor_key: VerifierKey | None, store: BudgetStore) -> Banner | None:
    """The banner of the audit report at `path` (the nightly job's JSON report), read on every page so the newest
    night shows; a report that cannot be read says so instead of disappearing. A clean verdict is green only when
    it is the auditor's, signed by `auditor_key`, of this store's rows (see `_signed_verdict`)."""
    if path is None:
        return None
    try:
        report = read_report(path)
    except (OSError, ValueError, RecursionError) as error:
        return Banner(Tone.RED, f"The audit report {path} cannot be read ({error}): the last verdict is unknown.")
    when = str(report.get("finished_at") or "an unknown time")
    if report.get("error"):
        return Banner(Tone.RED, f"The last audit (finished {when}) COULD NOT RUN: {report.get('error')}")
    if report.get("clean") is True:
        return _signed_verdict(path, report, auditor_key, store)
    return Banner(Tone.RED, _findings_text(report, when))


def _findings_text(report: dict[str, Any], when: str) -> str:
    # A report of problems needs no signature to be worth a look: at worst someone raised a false alarm.
    found = report.get("findings")
    findings: list[Any] = found if isinstance(found, list) else []
    given = report.get("affected_rows")
    affected: dict[str, Any] = given if isinstance(given, dict) else {}
    listed_seqs = affected.get("seqs")
    seqs: list[Any] = listed_seqs if isinstance(listed_seqs, list) else []
    rows = ", ".join(f"seq {seq}" for seq in seqs[:10]) + (" and more" if len(seqs) > 10 else "")
    named = f" Rows affected: {rows}." if rows else " No row is named by a row check."
    return (f"The last audit (finished {when}) found {len(findings)} problem(s).{named} "
            "Rows marked 'does not hold' below are among them; see the audit report.")


def _signed_verdict(path: str, report: dict[str, Any], key: VerifierKey | None, store: BudgetStore) -> Banner:
    """Green only when the report embeds the auditor's `--cosign` note, signed by `key`, whose size and root are
    this store's at that size now; else grey, saying which of those fails."""
    unauthenticated = f"unauthenticated report: anyone who can write {path} could have written it"
    note = report.get("checkpoint_note")
    if key is None:
        return Banner(Tone.GREY, f"The audit report says clean, but: {unauthenticated} (start the workbench with "
                                 "--auditor-key KEY, the auditor's verifier key, to check its signature).")
    if not isinstance(note, str):
        return Banner(Tone.GREY, f"The audit report says clean, but: {unauthenticated} (it embeds no checkpoint "
                                 "note signed by the auditor: run the audit with --cosign and --save-checkpoint).")
    problem = signature_problem(note, key)
    if problem is not None:
        return Banner(Tone.GREY, f"The audit report says clean, but: {unauthenticated} (its checkpoint note: "
                                 f"{problem}).")
    try:
        signed = Checkpoint.from_note(note, source="the report's checkpoint note")
        mismatch, head = _store_mismatch(signed, store)
    except (ComputeBudgetError, SQLAlchemyError) as error:
        reason = str(error) if isinstance(error, ComputeBudgetError) else type(error).__name__
        return Banner(Tone.GREY, f"The audit report says clean, but its checkpoint cannot be checked ({reason}).")
    if mismatch is not None:
        return Banner(Tone.GREY, f"The audit report says clean, but {mismatch}.")
    return _green(report, signed, key, head)


def _store_mismatch(signed: Checkpoint, store: BudgetStore) -> tuple[str | None, int]:
    """Why the auditor's checkpoint is not this store's rows at its size (None when it is: another log, or the
    store changed since: rows gone, or rows at that size that no longer give its root or chain hash), and the
    store's head seq."""
    with store.snapshot() as snapshot:
        origin = snapshot.origin()
        head = snapshot.max_seq()
        if signed.origin != origin:
            return (f"the report is not of this store: its checkpoint is of log {signed.origin}, this store is log "
                    f"{origin or '(none)'}"), head
        if signed.seq > head:
            return (f"the store changed since: the report's checkpoint covers {signed.seq} rows, the store holds "
                    f"{head} (rows were removed)"), head
        if not snapshot.tree_is_built(signed.seq):
            return ("its checkpoint cannot be checked: the store has no Merkle tree yet (run `compute-budget "
                    "migrate`)"), head
        root = snapshot.frontier(signed.seq).root()
        chain = snapshot.chain_at(signed.seq)
    if root != signed.root or chain != signed.chain_hash:
        which = "root" if root != signed.root else "chain hash"
        return (f"the store changed since: its rows 1..{signed.seq} no longer give the {which} the auditor signed "
                "(run a full audit)"), head
    return None, head


def _green(report: dict[str, Any], signed: Checkpoint, key: VerifierKey, head: int) -> Banner:
    # The report's time is not under the auditor's signature (a note signs the checkpoint alone): say so, without
    # calling the signed verdict itself unsigned.
    when = str(report.get("finished_at") or "an unknown time")
    newer = head - signed.seq
    since = f"; the {newer} row(s) recorded since are not covered by it" if newer > 0 else ""
    return Banner(
        Tone.GREEN,
        f"The last audit was clean: auditor {key.name} signed rows 1..{signed.seq} of this store, whose stored tree "
        f"still gives the root it signed{since}. The report says it finished {when}: the signature covers the rows, "
        "not that time.",
    )


def under_broken_guard(report: Banner) -> Banner:
    """The report's banner while the guard banner is up: a green verdict turns grey, since rows may have changed
    since the auditor signed (and the stored tree with them); a red or grey one stands as it is."""
    if report.tone is not Tone.GREEN:
        return report
    return Banner(Tone.GREY, "The audit report says clean and the auditor signed it, but the store's guard is not "
                             "whole now (see above): rows may have changed since. Run a full audit.")
