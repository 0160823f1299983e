"""Submitting a writer's checkpoints to witnesses (spec 9.5), after the append committed.

Each witness gets the newest signed checkpoint, with `old` = the size it last cosigned for this store (kept in
the store, append-only, updated on every 200 and 409) and the consistency proof from there, all witnesses in
parallel. A 409 gets one retry from the size it returned. Valid cosignatures are stored with the checkpoint text
they cover. A witness that is down, slow or refusing never loses a record and never holds the caller longer than
the timeout: it becomes one warning line.
"""

from __future__ import annotations

import base64
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy.exc import SQLAlchemyError

from compute_budget.core.log.cosignature import WitnessKey, valid_cosignatures
from compute_budget.core.log.merkle import consistency_proof
from compute_budget.core.log.note import CheckpointBody, parse_checkpoint, parse_note
from compute_budget.errors import ComputeBudgetError, InputError, NoteError, StoreUnavailable
from compute_budget.store import seal as sealing
from compute_budget.store.backend import begin_write
from compute_budget.store.keys import witness_key
from compute_budget.store.session import StoreSession, utc_now

DEFAULT_TIMEOUT_SECONDS = 5.0
SIZE_TYPE = "text/x.tlog.size"
MAX_ANSWER_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class WitnessTarget:
    """A witness to submit to: the URL prefix of its `/add-checkpoint` and `/latest`, and its verifier key."""

    url: str
    key: WitnessKey

    @classmethod
    def parse(cls, text: str) -> WitnessTarget:
        """Read ``URL=KEY`` (split at the first ``=``; KEY a witness verifier key or a file holding one)."""
        url, equals, key_text = text.partition("=")
        if not equals or not key_text:
            raise InputError(f"{text[:80]!r} is not URL=WITNESS_KEY (a witness's URL, '=', its verifier key)")
        try:
            parts = urllib.parse.urlsplit(url)
            _ = parts.port  # a port that is not a number from 0 to 65535 raises here, not at the first request
        except ValueError as error:
            raise InputError(f"witness URL {url[:80]!r} is not a URL: {error}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise InputError(f"witness URL {url[:80]!r} is not an http:// or https:// prefix (no query or fragment)")
        return cls(url.rstrip("/"), witness_key(key_text))

    @property
    def label(self) -> str:
        """How a message names the witness: its key name and URL."""
        return f"witness {self.key.name} at {self.url}"


def witness_targets(values: Iterable[WitnessTarget | str]) -> tuple[WitnessTarget, ...]:
    """`WitnessTarget`s from objects or ``URL=KEY`` texts, each once."""
    return tuple(dict.fromkeys(value if isinstance(value, WitnessTarget) else WitnessTarget.parse(value)
                               for value in values))


@dataclass(frozen=True, slots=True)
class Submitted:
    """What one witness did with the checkpoint: `cosigned`, or the `reason` it did not."""

    witness: WitnessTarget
    cosigned: bool
    reason: str | None

    @property
    def warning(self) -> str | None:
        """The warning line a writer prints after recording (None when the witness cosigned)."""
        if self.reason is None:
            return None
        return (f"warning: {self.witness.label}: {self.reason}; the rows are recorded (retry with `compute-budget "
                "witness submit`)")


@dataclass(slots=True)
class _Attempt:
    target: WitnessTarget
    old: int
    proof: list[bytes]
    answer: tuple[int, str, str] | str | None = None  # (status, body, content type), an error, or no answer yet


def submit(session: StoreSession, note: str, targets: Sequence[WitnessTarget], *, timeout: float) -> list[Submitted]:
    """Send `note` (a signed checkpoint of this store) to every target; store sizes and cosignatures; never raise
    for a witness's sake (a store that cannot take the results is a warning too)."""
    deadline = time.monotonic() + timeout
    text = parse_note(note)[0]
    checkpoint = parse_checkpoint(text)
    outcome: dict[WitnessTarget, Submitted] = {}
    try:
        attempts = _plan(session, checkpoint, dict.fromkeys(targets), outcome)
        _send(attempts, note, deadline)
        sizes, lines, retry = _judge(attempts, note, checkpoint, outcome, final=False)
        if retry and time.monotonic() < deadline:
            again = _plan(session, checkpoint, retry, outcome)
            _send(again, note, deadline)
            more_sizes, more_lines, _ = _judge(again, note, checkpoint, outcome, final=True)
            sizes += more_sizes
            lines += more_lines
        else:
            for target in retry:
                outcome[target] = Submitted(target, False, "did not answer the retry in time")
        _keep(session, checkpoint.size, text, sizes, lines)
    except (ComputeBudgetError, SQLAlchemyError, NoteError) as error:
        for target in targets:
            done = outcome.get(target)
            if done is not None and done.cosigned:  # cosigned, but nothing of it was kept: not a success
                outcome[target] = Submitted(target, False, f"cosigned, but the store could not keep it: {error}")
            else:
                outcome.setdefault(target, Submitted(target, False, f"not submitted: {error}"))
    return [outcome.get(target, Submitted(target, False, "not submitted")) for target in targets]


def _plan(
    session: StoreSession,
    checkpoint: CheckpointBody,
    wanted: dict[WitnessTarget, int | None],
    outcome: dict[WitnessTarget, Submitted],
) -> list[_Attempt]:
    """One attempt per target: `old` (given, else the stored size) and the proof from it, read in one transaction."""
    attempts = []
    with session.reading() as connection:
        reader = sealing.tree_reader(connection, session.seal, checkpoint.size)
        for target, given in wanted.items():
            old = given
            if old is None:
                row = connection.exec_driver_sql(session.seal.witness_size, (target.key.name, _key_id(target))).first()
                old = int(row[0]) if row is not None else 0
            if old > checkpoint.size:
                outcome[target] = Submitted(target, False, (
                    f"it has cosigned size {old} of this log, above this store's {checkpoint.size}: was the store "
                    "rolled back? (see docs/incident.md)"
                ))
                continue
            proof = consistency_proof(reader, old, checkpoint.size) if 0 < old < checkpoint.size else []
            attempts.append(_Attempt(target, old, proof))
    return attempts


def _send(attempts: list[_Attempt], note: str, deadline: float) -> None:
    """POST every attempt in parallel; whatever has not answered by `deadline` stays unanswered."""
    threads = []
    for attempt in attempts:
        body = f"old {attempt.old}\n" + "".join(base64.b64encode(item).decode() + "\n" for item in attempt.proof)
        thread = threading.Thread(
            target=_post, args=(attempt, (body + "\n" + note).encode(), max(0.01, deadline - time.monotonic())),
            daemon=True,  # one that outlives the deadline must not hold the process at exit
        )
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


def _post(attempt: _Attempt, body: bytes, timeout: float) -> None:
    request = urllib.request.Request(
        attempt.target.url + "/add-checkpoint", data=body, method="POST", headers={"Content-Type": "text/plain"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            attempt.answer = (response.status, response.read(MAX_ANSWER_BYTES).decode("utf-8", "replace"),
                              response.headers.get("Content-Type", ""))
    except urllib.error.HTTPError as error:
        attempt.answer = (error.code, error.read(MAX_ANSWER_BYTES).decode("utf-8", "replace"),
                          error.headers.get("Content-Type", "") if error.headers else "")
    except (OSError, ValueError) as error:
        reason = getattr(error, "reason", None) or error
        attempt.answer = f"unreachable ({reason})"


def _judge(
    attempts: list[_Attempt],
    note: str,
    checkpoint: CheckpointBody,
    outcome: dict[WitnessTarget, Submitted],
    *,
    final: bool,
) -> tuple[list[tuple[WitnessTarget, int]], list[tuple[WitnessTarget, int, str]], dict[WitnessTarget, int | None]]:
    """Sizes to store, cosignature lines to store, and the targets to retry (409) from the size they returned."""
    sizes: list[tuple[WitnessTarget, int]] = []
    lines: list[tuple[WitnessTarget, int, str]] = []
    retry: dict[WitnessTarget, int | None] = {}
    for attempt in attempts:
        target, answer = attempt.target, attempt.answer
        if answer is None:
            outcome[target] = Submitted(target, False, "did not answer in time")
        elif isinstance(answer, str):
            outcome[target] = Submitted(target, False, answer)
        elif answer[0] == 200:
            found = _cosignature_lines(note, answer[1], target.key)
            if not found:
                outcome[target] = Submitted(target, False, "answered 200 without a valid cosignature")
                continue
            sizes.append((target, checkpoint.size))
            lines.extend((target, timestamp, line) for timestamp, line in found)
            outcome[target] = Submitted(target, True, None)
        elif answer[0] == 409 and answer[2].split(";")[0].strip() == SIZE_TYPE and answer[1].strip().isdigit():
            size = int(answer[1].strip())
            sizes.append((target, size))
            if final or size > checkpoint.size:
                refusal = f"holds size {size} of this log; it refused this store's {checkpoint.size} (409)"
                outcome[target] = Submitted(target, False, refusal)
            else:
                retry[target] = size
        else:
            first = answer[1].strip().split("\n")[0][:120]
            outcome[target] = Submitted(target, False, f"refused with {answer[0]}: {first!r}")
    return sizes, lines, retry


def _cosignature_lines(note: str, body: str, key: WitnessKey) -> list[tuple[int, str]]:
    """The (timestamp, line) of each line of a 200 body that is `key`'s valid cosignature of the note's text."""
    found = []
    for line in body.splitlines():
        try:
            cosigned = valid_cosignatures(note + line + "\n", [key], now=int(time.time()))
        except NoteError:
            continue
        if cosigned:
            found.append((cosigned[0].timestamp, line + "\n"))
    return found


def _keep(
    session: StoreSession,
    size: int,
    text: str,
    sizes: list[tuple[WitnessTarget, int]],
    lines: list[tuple[WitnessTarget, int, str]],
) -> None:
    """Store the witnesses' sizes and cosignatures (with the checkpoint `text` they cover), append-only, in one
    write transaction."""
    if not sizes and not lines:
        return
    now = utc_now()
    with begin_write(session.engine) as connection:
        sealing.insert_counted(
            connection, session.seal.insert_witness_size,
            [(target.key.name, _key_id(target), witnessed, now) for target, witnessed in sizes], "witness sizes",
        )
        sealing.insert_counted(
            connection, session.seal.insert_cosignature,
            [(size, target.key.name, _key_id(target), timestamp, text, line, now) for target, timestamp, line in lines],
            "cosignatures",
        )


def _key_id(target: WitnessTarget) -> str:
    return f"{target.key.key_id:08x}"


MAX_LATEST_AGE_SECONDS = 600


def fetch_latest(target: WitnessTarget, origin: str, *, timeout: float = 10.0, now: int | None = None) -> str:
    """The latest checkpoint `target` cosigned for `origin` (its `GET /latest`, this project's extension), as a
    note carrying the log signatures it verified and a fresh cosignature. `StoreUnavailable` (the audit cannot
    run) when the witness cannot be reached, has cosigned nothing for the log, or answers with a cosignature that
    does not verify under its key or is more than 600 s old."""
    url = f"{target.url}/latest?origin={urllib.parse.quote(origin, safe='')}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = str(response.read(MAX_ANSWER_BYTES + 1).decode("utf-8", "replace"))
    except urllib.error.HTTPError as error:
        if error.code == 404:
            raise StoreUnavailable(
                f"{target.label} has cosigned nothing for log {origin}: submit to it first (`compute-budget witness "
                "submit`), or leave this --witness-url out until it has"
            ) from None
        raise StoreUnavailable(f"{target.label} answered {error.code} to GET /latest") from None
    except (OSError, ValueError) as error:
        raise StoreUnavailable(f"{target.label} cannot be reached: {getattr(error, 'reason', None) or error}") from None
    clock = int(time.time()) if now is None else now
    try:
        found = valid_cosignatures(body, [target.key], now=clock)
    except NoteError as error:
        raise StoreUnavailable(f"{target.label} answered GET /latest with no checkpoint note: {error}") from None
    if not found:
        raise StoreUnavailable(f"{target.label}: its answer carries no cosignature that verifies under its key")
    if found[0].timestamp < clock - MAX_LATEST_AGE_SECONDS:
        raise StoreUnavailable(
            f"{target.label}: its cosignature is {clock - found[0].timestamp} s old (over {MAX_LATEST_AGE_SECONDS} s): "
            "a replayed or stale answer"
        )
    return body
