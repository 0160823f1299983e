"""Group commit (spec 12.2): concurrent `record()` calls, and `record_many()` calls of at most `GROUP_MAX_GATES`
gates given as a sequence, share one append transaction when one is already in flight.

The classic leader/follower scheme, with no timer: a caller that finds no transaction in flight runs one itself
with just its gates; callers arriving meanwhile queue, and when it ends the first queued becomes the leader and
runs everything queued, in the order queued, as one batch through the ordinary append path (`Appender.append`).
Each caller's gates are decided in its own thread before it queues, so input that is not JSON fails only that
call. Inside the shared transaction conflicts are skipped and checked before the commit: the first caller (in
queue order) that would have raised `GateConflict` or `GateTooLarge` alone is failed and the group re-planned
without it, so nothing of its gates is written and every other caller gets what it would have got alone, one
after the other.
"""

from __future__ import annotations

import bisect
import functools
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from compute_budget.core.leaf import RowHasher
from compute_budget.core.policy.prepare import PreparedGate
from compute_budget.errors import GateConflict, GateTooLarge, StoreUnavailable
from compute_budget.store.append import Appended
from compute_budget.store.plan import DecidedGates
from compute_budget.store.results import RecordOptions

GROUP_MAX_GATES = 1000  # a larger batch runs in a transaction of its own (spec 12.2)

_Indexed = TypeVar("_Indexed", bound=tuple[Any, ...])
AppendFn = Callable[[Iterable[object], RecordOptions], Appended]


def joins_group(gates: object) -> bool:
    """True for a `record_many` input that may share a transaction: a sequence (not text) of at most
    `GROUP_MAX_GATES` gates. Streams and larger batches run alone."""
    return (
        isinstance(gates, Sequence) and not isinstance(gates, str | bytes | bytearray)
        and len(gates) <= GROUP_MAX_GATES
    )


@dataclass(eq=False, slots=True)
class Call:
    """One caller's gates, decided, waiting for (or running) the transaction that records them."""

    gates: list[PreparedGate]
    hashers: list[RowHasher]
    results: bool = True  # the caller wants its per-gate outcomes
    skip_conflicts: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    group: list[Call] | None = None  # set when this call becomes the leader: the calls it must now run
    outcome: Appended | None = None
    error: BaseException | None = None

    @classmethod
    def of(cls, decided: DecidedGates, *, results: bool, skip_conflicts: bool) -> Call:
        """The call recording `decided`."""
        return cls(decided.gates, decided.hashers, results, skip_conflicts)


class _Refused(Exception):
    """Inside the shared transaction: the call at this place of the group would have raised this conflict alone."""

    def __init__(self, member: int, conflict: GateConflict) -> None:
        super().__init__(member)
        self.member = member
        self.conflict = conflict


class GroupCommit:
    """The queue of one opened store's callers, and the transaction in flight (see the module's docstring)."""

    def __init__(self, append: AppendFn) -> None:
        self._append = append
        self._lock = threading.Lock()
        self._in_flight = False
        self._queue: list[Call] = []

    def queued(self) -> int:
        """How many calls wait for the transaction in flight to end."""
        with self._lock:
            return len(self._queue)

    def run(self, call: Call) -> Appended:
        """Record `call`'s gates: at once when no transaction is in flight, else in the next one; its own outcome."""
        with self._lock:
            leading = not self._in_flight
            if leading:
                self._in_flight = True
            else:
                self._queue.append(call)
        if not leading:
            call.done.wait()
        group = call.group if call.group is not None else [call]
        if leading or call.group is not None:
            try:
                self._commit(group)
            finally:
                self._hand_over(group, call)
        if call.error is not None:
            raise call.error
        assert call.outcome is not None
        return call.outcome

    def _hand_over(self, group: list[Call], leader: Call) -> None:
        """Wake every other call of the finished group, then make the first queued call the next leader."""
        for member in group:
            if member.outcome is None and member.error is None:  # the leader was interrupted
                member.error = StoreUnavailable(
                    "the transaction this call shared was interrupted; look up whether its gates were recorded"
                )
            if member is not leader:
                member.done.set()
        with self._lock:
            waiting, self._queue = self._queue, []
            self._in_flight = bool(waiting)
        if waiting:
            waiting[0].group = waiting
            waiting[0].done.set()

    def _commit(self, group: list[Call]) -> None:
        """Run the group's transaction, dropping (and failing) each call that would have failed alone, until the
        rest commits or fails together."""
        live = list(group)
        while live:
            starts = _starts(live)
            gates = DecidedGates(
                [gate for member in live for gate in member.gates],
                [hasher for member in live for hasher in member.hashers],
            )
            check = functools.partial(_refuse_own_conflicts, live, starts)
            options = RecordOptions(results=True, on_conflict="skip", ahead=False, check_skipped=check)
            try:
                appended = self._append(gates, options)
            except _Refused as refused:
                failed = live.pop(refused.member)
                failed.error = refused.conflict
                continue
            except GateTooLarge as error:
                place = _owner(starts, error.index)
                failed = live.pop(place)
                failed.error = GateTooLarge(
                    error.budget_id, error.size, error.limit, index=error.index - starts[place], line=error.line
                )
                continue
            except Exception as error:  # the store's, not any one caller's: every call gets it
                for member in live:
                    member.error = error
                return
            for member, start in zip(live, starts, strict=True):
                member.outcome = _own_part(appended, member, start)
            return


def _starts(members: list[Call]) -> list[int]:
    """Where each call's gates start in the group's batch."""
    starts: list[int] = []
    total = 0
    for member in members:
        starts.append(total)
        total += len(member.gates)
    return starts


def _owner(starts: list[int], index: int) -> int:
    """The place in the group of the call whose gates hold the batch's `index`."""
    place = 0
    while place + 1 < len(starts) and starts[place + 1] <= index:
        place += 1
    return place


def _refuse_own_conflicts(live: list[Call], starts: list[int], skipped: list[tuple[int, GateConflict]]) -> None:
    """Raise `_Refused` for the first call, in queue order, that did not ask to skip conflicts and has one. Only
    the first: a later call's conflict may be with a gate of the call that fails, and then not stand alone."""
    for index, conflict in skipped:  # in batch order, so in queue order
        place = _owner(starts, index)
        if not live[place].skip_conflicts:
            raise _Refused(place, conflict)


def _between(items: list[_Indexed], start: int, end: int) -> list[_Indexed]:
    """The items (in batch order) whose index is at least `start` and below `end`: a group's outcomes are split
    without walking them once per call."""
    return items[bisect.bisect_left(items, start, key=_index) : bisect.bisect_left(items, end, key=_index)]


def _index(item: tuple[Any, ...]) -> int:
    return int(item[0])


def _own_part(appended: Appended, member: Call, start: int) -> Appended:
    """`member`'s outcome of the group's transaction: its gates' results and conflicts, and the group's head,
    witnesses and writer state."""
    end = start + len(member.gates)
    every_result, every_conflict = appended.results or [], appended.conflicts or []
    results = [
        (index - start, item, new, seq) for index, item, new, seq in _between(every_result, start, end)
    ]
    conflicts = [(index - start, conflict) for index, conflict in _between(every_conflict, start, end)]
    new = sum(1 for _, _, is_new, _ in results if is_new)
    return Appended(
        appended.head, new, len(results) - new, results if member.results else None,
        conflicts if member.skip_conflicts else None, state_created=appended.state_created,
        witness_warnings=appended.witness_warnings, witnessed=appended.witnessed, cosigned_by=appended.cosigned_by,
    )


__all__ = ["GROUP_MAX_GATES", "Call", "GroupCommit", "joins_group"]
