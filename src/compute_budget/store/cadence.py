"""When a writer signs and asks its witnesses (spec 12.1), and receipts on request (12.4): what `Writing` holds for
one opened store besides its appender. Interval 0 keeps section 8 (each appending transaction signs, witnesses
asked before `record()` returns); above 0 a `Signer` loop signs and a `WitnessSender` sends in the background.

Also the process rules: a store opened before `os.fork()` refuses to write in the child, and an `atexit` hook
closes every store still open (signing its tail)."""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from typing import Literal

from compute_budget.errors import ComputeBudgetError, InputError, StoreError, WitnessTimeout
from compute_budget.store.append import Appender
from compute_budget.store.receipt import receipt
from compute_budget.store.results import Signed, WitnessStatus
from compute_budget.store.session import StoreSession
from compute_budget.store.signer import Signer
from compute_budget.store.witness_sender import WitnessSender
from compute_budget.store.witness_submit import submit
from compute_budget.submitter import WitnessTarget

Wait = Literal["checkpoint", "witnessed"] | None
DEFAULT_WITNESS_INTERVAL = 10.0

_open: set[Cadence] = set()  # stores with a signer, still open: the atexit hook closes them
_open_lock = threading.Lock()


class Cadence:
    """The signing cadence of one opened store (see the module docstring)."""

    def __init__(
        self, session: StoreSession, appender: Appender, *, interval: float, witnesses: tuple[WitnessTarget, ...],
        witness_interval: float,
    ) -> None:
        self._session = session
        self._appender = appender
        self.interval = interval
        self.witnesses = witnesses
        self.pid = os.getpid()
        self._sender: WitnessSender | None = None
        self._signer: Signer | None = None
        if interval > 0 and appender.writer is not None:
            if witnesses:
                self._sender = WitnessSender(session, witnesses, timeout=appender.witness_timeout,
                                             interval=witness_interval, submitter=appender.witness_submitter)
            self._signer = Signer(appender, interval, self._signed)
            appender.after_commit = self._signer.committed
            with _open_lock:
                _open.add(self)

    def _signed(self, note: str) -> None:
        if self._sender is not None:
            self._sender.offer(note)

    def require_usable(self, wait: Wait) -> None:
        """Before a write: refuse a child of `os.fork()`, a signer that met damage, and a `wait` it cannot give."""
        if os.getpid() != self.pid:
            raise StoreError("this store was opened before os.fork(): open the store after forking")
        if self._signer is not None:
            self._signer.require_healthy()
        if wait is None:
            return
        if wait not in ("checkpoint", "witnessed"):
            raise InputError(f"wait must be None, 'checkpoint' or 'witnessed', not {wait!r}")
        if self._appender.writer is None:
            raise InputError(f"wait={wait!r} waits for a signed checkpoint: open the store with a signing key")
        if wait == "witnessed" and not self.witnesses:
            raise InputError("wait='witnessed' waits for the witnesses' cosignatures: open the store with witnesses")

    def covering_note(self, seq: int, signed_now: str | None) -> str:
        """A signed checkpoint covering row `seq`: the one this transaction signed, the signer loop's next one
        (interval above 0: shared with every caller waiting), else the head's own note (signed if need be)."""
        if self._signer is not None:
            return self._signer.wait_covered(seq)
        if signed_now is not None:
            return signed_now
        signed = self._appender.sign_tail()
        assert isinstance(signed, Signed)
        return signed.note

    def receipt(self, budget_id: str, note: str, *, cosigned: bool = False) -> str:
        """The row's tlog-proof against `note`."""
        return receipt(self._session, budget_id, note, cosigned=cosigned)

    def witnessed_note(self, seq: int, began: float, note: str, fresh: bool) -> tuple[str | None, str]:
        """A checkpoint covering row `seq` that every witness cosigned, within `witness_timeout` of `began`
        (`time.monotonic`): (its note, "K of K"), or (None, "N of K"). `note` covers the row; `fresh` says its
        transaction already asked the witnesses (interval 0)."""
        count = len(self.witnesses)
        deadline = began + self._appender.witness_timeout
        if self._sender is not None:
            found, cosigned = self._sender.wait_quorum(seq, deadline)
            return found, f"{cosigned} of {count}"
        if fresh:
            return None, ""  # the caller judges the transaction's own outcome
        results = submit(self._session, note, self.witnesses, timeout=max(deadline - time.monotonic(), 0.01),
                         submitter=self._appender.witness_submitter())
        cosigned = sum(item.cosigned for item in results)
        return (note if cosigned == count else None), f"{cosigned} of {count}"

    def flush(self) -> str:
        """Sign the committed head now; its note."""
        self.require_usable(None)
        signed = self._signer.sign() if self._signer is not None else self._appender.sign_tail()
        assert isinstance(signed, Signed)
        return signed.note

    def witness_status(self) -> list[WitnessStatus]:
        """Per witness, the largest size it cosigned and its last error (interval above 0; else empty)."""
        return self._sender.status() if self._sender is not None else []

    def close(self) -> None:
        """Sign the tail and wait at most `witness_timeout` for the witnesses (not in a child of `os.fork()`)."""
        with _open_lock:
            _open.discard(self)
        if os.getpid() != self.pid or self._signer is None:
            return
        try:
            self._signer.close()
        finally:
            if self._sender is not None:
                self._sender.close(self._appender.witness_timeout)


def raise_timeout(result: object, cosigned: str) -> None:
    """`WitnessTimeout` for `wait="witnessed"`: the row is recorded (`result`), the quorum was not met."""
    raise WitnessTimeout(
        f"no checkpoint covering the row carried every witness's cosignature in time ({cosigned} cosigned); the row "
        "is recorded", result=result, cosigned=cosigned,
    )


@atexit.register
def _close_open_stores() -> None:
    """At exit, close every store this process opened with a signer and did not close (its tail is signed)."""
    with _open_lock:
        left = [cadence for cadence in _open if cadence.pid == os.getpid()]
    for cadence in left:
        try:
            cadence.close()
        except ComputeBudgetError as error:  # one line, never a traceback at exit
            print(f"compute-budget: signing a store's tail at exit: {error}", file=sys.stderr)

