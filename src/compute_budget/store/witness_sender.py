"""Witnesses in the background, for a writer with a checkpoint interval (spec 12.1): one lane (a daemon thread) per
witness, at most one request in flight on it. When a request ends, the newest checkpoint this process signed is
sent if it is newer than the size that witness last cosigned, no sooner than `witness_interval` after the last
request began. Each request is `witness_submit.submit`'s, one witness at a time (its 409 retry included)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.store.results import WitnessStatus
from compute_budget.store.session import StoreSession
from compute_budget.store.witness_submit import submit
from compute_budget.submitter import WitnessSubmitter, WitnessTarget

# How many recent checkpoint sizes remember who cosigned them (a `wait="witnessed"` caller looks among these).
RECENT_SIZES = 256


@dataclass(slots=True)
class _Lane:
    """What the sender knows of one witness."""

    cosigned: int = 0  # the largest size it cosigned for this process
    sent: int = 0  # the size of the last request that ended
    busy: bool = False
    started: float = float("-inf")  # when the last request began (`time.monotonic`)
    error: str | None = None


class WitnessSender:
    """The background witness lanes of one store (see the module docstring)."""

    def __init__(
        self, session: StoreSession, targets: tuple[WitnessTarget, ...], *, timeout: float, interval: float,
        submitter: Callable[[], WitnessSubmitter],
    ) -> None:
        self.targets = targets
        self._session = session
        self._timeout = timeout
        self._interval = interval
        self._submitter = submitter
        self._cond = threading.Condition()
        self._lanes = {target: _Lane() for target in targets}
        self._notes: dict[int, str] = {}  # recent signed notes by size
        self._cosigners: dict[int, set[WitnessTarget]] = {}  # recent sizes: who cosigned each
        self._newest = 0
        self._stopping = False
        self._hurry = False  # at close: the last checkpoint goes at once, whatever the interval
        for target in targets:
            threading.Thread(target=self._run, args=(target,), daemon=True, name="compute-budget witness").start()

    def offer(self, note: str) -> None:
        """A checkpoint this process just signed and stored: the lanes send it when their turn comes."""
        size = Checkpoint.from_note(note).seq
        with self._cond:
            if size <= self._newest:
                return
            self._newest, self._notes[size] = size, note
            for old in sorted(self._notes)[:-RECENT_SIZES]:
                del self._notes[old]
                self._cosigners.pop(old, None)
            self._cond.notify_all()

    def _next(self, target: WitnessTarget) -> tuple[int, str] | None:
        """Wait for this lane's next request: (size, note), or None when the sender stops."""
        lane = self._lanes[target]
        with self._cond:
            while True:
                if self._stopping:
                    return None
                fresh = self._newest > lane.sent
                if self._newest > lane.cosigned and (fresh or lane.error is not None):
                    hurry = self._hurry and fresh
                    delay = 0.0 if hurry else lane.started + self._interval - time.monotonic()
                    if delay <= 0:
                        lane.busy, lane.started = True, time.monotonic()
                        return self._newest, self._notes[self._newest]
                    self._cond.wait(delay)
                else:
                    self._cond.wait()

    def _run(self, target: WitnessTarget) -> None:
        lane = self._lanes[target]
        while True:
            wanted = self._next(target)
            if wanted is None:
                return
            size, note = wanted
            try:
                outcome = submit(self._session, note, (target,), timeout=self._timeout, submitter=self._submitter())
                cosigned, error = outcome[0].cosigned, outcome[0].reason
            except Exception as failure:  # a lane never dies: the error is its status
                cosigned, error = False, str(failure) or type(failure).__name__
            with self._cond:
                lane.busy, lane.sent = False, size
                lane.error = None if cosigned else error
                if cosigned:
                    lane.cosigned = max(lane.cosigned, size)
                    self._cosigners.setdefault(size, set()).add(target)
                self._cond.notify_all()

    def status(self) -> list[WitnessStatus]:
        """Per witness: the largest size it cosigned for this process, and its last error."""
        with self._cond:
            return [WitnessStatus(target.label, lane.cosigned, lane.error) for target, lane in self._lanes.items()]

    def wait_quorum(self, seq: int, deadline: float) -> tuple[str | None, int]:
        """Wait until `time.monotonic()` reaches `deadline` for a checkpoint covering row `seq` that every witness
        cosigned: (its note, K), or (None, the most witnesses that cosigned one covering checkpoint)."""
        with self._cond:
            while True:
                counts = {size: len(who) for size, who in self._cosigners.items() if size >= seq}
                full = [size for size, count in counts.items() if count == len(self.targets) and size in self._notes]
                if full:
                    return self._notes[min(full)], len(self.targets)
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stopping:
                    return None, max(counts.values(), default=0)
                self._cond.wait(remaining)

    def close(self, timeout: float) -> None:
        """Send the newest checkpoint to every witness that has not cosigned it, at once, and wait at most `timeout`
        for those requests to end; then stop the lanes."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._hurry = True
            self._cond.notify_all()
            while any(lane.busy or (lane.cosigned < self._newest and lane.sent < self._newest)
                      for lane in self._lanes.values()):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            self._stopping = True
            self._cond.notify_all()
