"""The signer loop of a writer with a checkpoint interval (spec 12.1): a daemon thread in the writer's process that
signs at most one checkpoint per interval, of the head this writer state recorded as committed, covering every row
appended so far (`Appender.sign_tail`, under 9.1 and 12.3). Appends tell it of each commit; callers waiting for a
checkpoint (`record(..., wait=)`) wait on its condition and share its one signature. Writers sharing the writer
state take turns by the time it recorded for its note (`Deferred`). A `StoreDamaged` stops it: the next `record()`
raises it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from compute_budget.core.log.head import ChainHead
from compute_budget.errors import ComputeBudgetError, StoreClosed, StoreDamaged
from compute_budget.store.append import Appender
from compute_budget.store.results import Deferred, Signed


class Signer:
    """One store's signer loop (see the module docstring)."""

    def __init__(self, appender: Appender, interval: float, on_signed: Callable[[str], None]) -> None:
        self._appender = appender
        self._interval = interval
        self._on_signed = on_signed  # a checkpoint this process stored: its witnesses get it
        self._cond = threading.Condition()
        self._wanted = 0  # the newest head this process committed (or a waiter needs covered)
        self._covered = 0  # the size of the newest checkpoint known to cover the rows
        self._note: str | None = None  # that checkpoint
        self._not_before = 0.0  # `time.monotonic()` before which the loop does not sign
        self._damaged: StoreDamaged | None = None
        self._failure: ComputeBudgetError | None = None  # the last attempt's error, for the callers waiting
        self._stopping = False  # the loop ends
        self._closed = False  # and the tail was signed: waiters left now wait for nothing
        self._thread = threading.Thread(target=self._run, daemon=True, name="compute-budget signer")
        self._thread.start()

    def committed(self, head: ChainHead, note: str | None) -> None:
        """An append of this process committed `head` (`Appender.after_commit`), signing it as `note` when it
        signed anyway (adopting rows, acknowledging a repair)."""
        with self._cond:
            self._wanted = max(self._wanted, head.seq)
            if note is not None and head.seq >= self._covered:
                self._covered, self._note = head.seq, note
            self._cond.notify_all()
        if note is not None:
            self._on_signed(note)

    def require_healthy(self) -> None:
        """Raise the `StoreDamaged` the loop met, if it met one."""
        if self._damaged is not None:
            raise self._damaged

    def wait_covered(self, seq: int) -> str:
        """The note of a signed checkpoint covering row `seq`, once the loop signed one (never signs itself)."""
        with self._cond:
            self._wanted = max(self._wanted, seq)
            self._failure = None
            self._cond.notify_all()
            while self._covered < seq or self._note is None:
                self.require_healthy()
                if self._failure is not None:
                    raise self._failure
                if self._closed:
                    raise StoreClosed("the store was closed while waiting for a checkpoint")
                self._cond.wait()
            return self._note

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and self._damaged is None and self._wanted <= self._covered:
                    self._cond.wait()
                if self._stopping or self._damaged is not None:
                    return
                delay = self._not_before - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
            self.sign(interval=self._interval)

    def sign(self, *, interval: float = 0.0) -> Signed | Deferred | None:
        """Sign the committed head now (`interval` 0: `flush()`, `close()`) or when its turn has come; what it did,
        and None after an error (kept for the waiters; a `StoreDamaged` stops the loop)."""
        try:
            outcome = self._appender.sign_tail(interval=interval)
        except StoreDamaged as error:
            with self._cond:
                self._damaged = error
                self._cond.notify_all()
            if not interval:
                raise
            return None
        except ComputeBudgetError as error:
            with self._cond:
                self._failure, self._not_before = error, time.monotonic() + max(self._interval, 0.05)
                self._cond.notify_all()
            if not interval:
                raise
            return None
        with self._cond:
            if isinstance(outcome, Deferred):
                self._not_before = time.monotonic() + max(outcome.due - time.time(), 0.0)
            else:
                self._not_before = time.monotonic() + self._interval
                if outcome.size >= self._covered:
                    self._covered, self._note = outcome.size, outcome.note
                self._failure = None
            self._cond.notify_all()
        if isinstance(outcome, Signed) and outcome.stored:
            self._on_signed(outcome.note)
        return outcome

    def close(self) -> Signed | None:
        """Stop the loop, then sign the tail this process appended, if any is not covered yet."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join()
        with self._cond:
            tail = self._damaged is None and self._wanted > self._covered
        try:
            outcome = self.sign() if tail else None
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
        return outcome if isinstance(outcome, Signed) else None
