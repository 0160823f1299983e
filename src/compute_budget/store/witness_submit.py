"""Submitting a writer's checkpoints to witnesses (spec 9.5, as 9.9.1 amends it), after the append committed.

Each witness gets the newest signed checkpoint, with `old` = the size of the largest stored cosignature of that
witness that verifies under its key and is of a checkpoint this store extends (0 if none), and the consistency
proof from there, all witnesses in parallel. What the store says about a witness is a claim anyone who can write
the database can make, so a size is only ever taken from a cosignature checked here, never from the witness-sizes
table. A 409 gets one retry from the size it returned when the store can prove from it (at most the checkpoint
sent); nothing read from a 409 body is stored. Valid cosignatures are stored with the checkpoint text they cover.
A witness that is down, slow or refusing never loses a record and never holds the caller longer than the timeout:
it becomes one warning line. A URL's user information is never shown (spec 9.9.6): it is sent as HTTP Basic
authentication, and messages show `***@`.
"""

from __future__ import annotations

import base64
import http.client
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from compute_budget.core.log.cosignature import WitnessKey, valid_cosignatures
from compute_budget.core.log.merkle import NodeReader, consistency_proof, root_from_reader
from compute_budget.core.log.note import CheckpointBody, parse_checkpoint, parse_note
from compute_budget.errors import (
    ComputeBudgetError,
    InputError,
    MerkleError,
    NoteError,
    StoreDamaged,
    StoreUnavailable,
)
from compute_budget.keys.key_files import witness_key
from compute_budget.store import seal_tables as sealing
from compute_budget.store.backend import begin_write
from compute_budget.store.backends import backend_for
from compute_budget.store.session import StoreSession, utc_now

DEFAULT_TIMEOUT_SECONDS = 5.0
SIZE_TYPE = "text/x.tlog.size"
MAX_ANSWER_BYTES = 64 * 1024
MAX_SIZE_DIGITS = 19  # a size of 2^63 or more is no size (spec 9.9.6); longer text is not even converted
# The user information of a URL: what follows "//" up to the last "@" before the host's end (urlsplit's rule).
_USERINFO = re.compile(r"(//)[^/?#]*@")


def redacted_url(text: str) -> str:
    """`text` with any URL user information (``user:password@``) shown as ``***@`` (spec 9.9.6)."""
    return _USERINFO.sub(r"\1***@", text)


def _shown(typed: str) -> str:
    """What the user typed as a URL, for an error line: everything up to its last "@" hidden. Not only the
    user information `urlsplit` finds: a password typed raw with "/", "?" or "#" in it ends the authority early,
    and without "//" there is no authority at all (``user:pw@host``)."""
    shown = redacted_url(typed)
    if "@" in shown:
        scheme, slashes, _ = shown.partition("//")
        shown = (scheme + slashes if slashes else "") + "***@" + shown.rpartition("@")[2]
    return shown[:80]


@dataclass(frozen=True, slots=True)
class WitnessTarget:
    """A witness to submit to: the URL prefix of its `/add-checkpoint` and `/latest`, and its verifier key.

    A ``user:password@`` in the URL is sent as HTTP Basic authentication and never shown (`label`, `repr`)."""

    url: str = field(repr=False)  # may hold a password: shown only through `shown_url`
    key: WitnessKey

    @classmethod
    def parse(cls, text: str) -> WitnessTarget:
        """Read ``URL=KEY`` (split at the first ``=``; KEY a witness verifier key or a file holding one)."""
        url, equals, key_text = text.partition("=")
        if not equals or not key_text:
            raise InputError(f"{_shown(text)!r} is not URL=WITNESS_KEY (a witness's URL, '=', its verifier key)")
        shown = _shown(url)
        try:
            parts = urllib.parse.urlsplit(url)
            _ = parts.port  # a port that is not a number from 0 to 65535 raises here, not at the first request
        except ValueError as error:  # its text can quote part of a password (as a port): not shown when "@" is
            reason = redacted_url(str(error)) if "@" not in url else "its host or port cannot be read"
            raise InputError(f"witness URL {shown!r} is not a URL: {reason}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise InputError(f"witness URL {shown!r} is not an http:// or https:// prefix (no query or fragment)")
        return cls(url.rstrip("/"), witness_key(key_text))

    def __repr__(self) -> str:
        return f"WitnessTarget(url={self.shown_url!r}, key={self.key!r})"

    @property
    def shown_url(self) -> str:
        """The URL as messages show it: its user information, if any, as ``***@``."""
        return redacted_url(self.url)

    @property
    def label(self) -> str:
        """How a message names the witness: its key name and URL (without its user information)."""
        return f"witness {self.key.name} at {self.shown_url}"

    def request(self, path: str, data: bytes | None = None) -> urllib.request.Request:
        """A request for `path` under the URL prefix, its user information moved into an Authorization header (a
        URL holding it cannot be requested, and an error message could show it)."""
        parts = urllib.parse.urlsplit(self.url)
        userinfo, at, host = parts.netloc.rpartition("@")
        headers = {"Content-Type": "text/plain"} if data is not None else {}
        if at:
            user, _, password = userinfo.partition(":")
            pair = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        url = urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", "")) + path
        return urllib.request.Request(url, data=data, method="POST" if data is not None else "GET", headers=headers)


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
    """Send `note` (a signed checkpoint of this store) to every target; store the cosignatures; never raise for a
    witness's sake (a store that cannot take the results is a warning too)."""
    began = time.monotonic()
    deadline = began + timeout
    text = parse_note(note)[0]
    checkpoint = parse_checkpoint(text)
    outcome: dict[WitnessTarget, Submitted] = {}
    try:
        attempts = _plan(session, checkpoint, dict.fromkeys(targets), began + timeout * CHECK_SHARE)
        _send(attempts, note, deadline)
        lines, retry = _judge(attempts, note, checkpoint, outcome, final=False)
        if retry and time.monotonic() < deadline:
            again = _plan(session, checkpoint, retry, deadline)
            _send(again, note, deadline)
            lines += _judge(again, note, checkpoint, outcome, final=True)[0]
        else:
            for target in retry:
                outcome[target] = Submitted(target, False, "did not answer the retry in time")
        _keep(session, checkpoint.size, text, lines)
    except (ComputeBudgetError, SQLAlchemyError, NoteError) as error:
        for target in targets:
            done = outcome.get(target)
            if done is not None and done.cosigned:  # cosigned, but nothing of it was kept: not a success
                outcome[target] = Submitted(target, False, f"cosigned, but the store could not keep it: {error}")
            else:
                outcome.setdefault(target, Submitted(target, False, f"not submitted: {error}"))
    return [outcome.get(target, Submitted(target, False, "not submitted")) for target in targets]


# The share of the timeout that choosing `old` from stored cosignatures may take; the rest is for the request and
# its one retry.
CHECK_SHARE = 0.5


def _plan(
    session: StoreSession,
    checkpoint: CheckpointBody,
    wanted: dict[WitnessTarget, int | None],
    deadline: float,
) -> list[_Attempt]:
    """One attempt per target: `old` (given, else the size of its newest cosignature the store can back) and the
    proof from it, computed from the stored tree, read in one transaction."""
    attempts = []
    with session.reading() as connection:
        reader = sealing.tree_reader(connection, session.seal, checkpoint.size)
        for target, given in wanted.items():
            old = given
            if old is None:
                # Past its share of the timeout (a flood of planted rows: the audit names them), `old` is 0: the
                # witness's 409 then gives the size for the one retry, which the store's own tree must prove from.
                old = _cosigned_size(connection, session.seal, reader, checkpoint, target.key, deadline) or 0
            proof = consistency_proof(reader, old, checkpoint.size) if 0 < old < checkpoint.size else []
            attempts.append(_Attempt(target, old, proof))
    return attempts


def _cosigned_size(
    connection: Connection,
    seal: sealing.SealStatements,
    reader: NodeReader,
    checkpoint: CheckpointBody,
    key: WitnessKey,
    deadline: float,
) -> int | None:
    """The size of the largest stored cosignature by `key` (at most the checkpoint's size) that verifies and is of
    a checkpoint of this log whose root is the store's root at that size; 0 if none; None when the deadline passes
    first. Newest first, stopping at the first that holds: an honest store checks one cosignature per append."""
    size, last_id, now = checkpoint.size, 2**63 - 1, int(time.time())
    roots: dict[int, bytes | None] = {}  # the store's root at each size looked at (a fork's cosignatures share sizes)
    seen: set[tuple[int, object, object]] = set()  # a row copied at the same size is verified once
    while time.monotonic() < deadline:
        # An undecodable planted row is skipped, not a failure of every witness.
        with backend_for(connection).tolerant_text(connection):
            rows = connection.exec_driver_sql(
                seal.witness_cosignatures_desc, (key.name, f"{key.key_id:08x}", size, size, last_id)
            ).fetchall()
        for row in rows:
            last_id, size = int(row[0]), int(row[1])
            if (size, row[2], row[3]) in seen:
                continue
            seen.add((size, row[2], row[3]))
            body = _cosigned_body(row[2], row[3], key, now)
            if body is None or body.size != size or body.origin != checkpoint.origin:
                continue
            if size not in roots:
                roots[size] = _root_at(reader, size)
            if roots[size] == body.root:
                return size
        if len(rows) < sealing.NEWEST_PAGE_ROWS:
            return 0
    return None


def _root_at(reader: NodeReader, size: int) -> bytes | None:
    """The store's root at `size`, or None where its tree cannot say (damaged: not a size it extends; the proof,
    or the audit, says the rest)."""
    try:
        return root_from_reader(reader, size)
    except (MerkleError, StoreDamaged):
        return None


def _cosigned_body(text: object, line: object, key: WitnessKey, now: int) -> CheckpointBody | None:
    """The checkpoint `text` when `line` is `key`'s valid cosignature of it, else None."""
    if not isinstance(text, str) or not isinstance(line, str):
        return None
    try:
        if not valid_cosignatures(text + "\n" + line, [key], now=now):
            return None
        return parse_checkpoint(text)
    except NoteError:
        return None


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
    request = attempt.target.request("/add-checkpoint", body)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            attempt.answer = (response.status, response.read(MAX_ANSWER_BYTES).decode("utf-8", "replace"),
                              response.headers.get("Content-Type", ""))
    except urllib.error.HTTPError as error:
        attempt.answer = (error.code, error.read(MAX_ANSWER_BYTES).decode("utf-8", "replace"),
                          error.headers.get("Content-Type", "") if error.headers else "")
    except (OSError, ValueError, http.client.HTTPException) as error:  # HTTPException: an answer that is not HTTP
        reason = str(getattr(error, "reason", None) or error) or type(error).__name__
        attempt.answer = f"unreachable ({redacted_url(reason)})"


def _judge(
    attempts: list[_Attempt],
    note: str,
    checkpoint: CheckpointBody,
    outcome: dict[WitnessTarget, Submitted],
    *,
    final: bool,
) -> tuple[list[tuple[WitnessTarget, int, str]], dict[WitnessTarget, int | None]]:
    """Cosignature lines to store, and the targets to retry (409) from the size they returned."""
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
            lines.extend((target, timestamp, line) for timestamp, line in found)
            outcome[target] = Submitted(target, True, None)
        elif answer[0] == 409 and answer[2].split(";")[0].strip() == SIZE_TYPE and answer[1].strip().isdigit():
            claimed = answer[1].strip()
            size = int(claimed) if len(claimed) <= MAX_SIZE_DIGITS else None
            if size is not None and size <= checkpoint.size and not final:
                retry[target] = size  # the proof from it comes from this store's own tree
            else:
                outcome[target] = Submitted(target, False, _refusal(claimed, size, checkpoint.size))
        else:
            first = answer[1].strip().split("\n")[0][:120]
            outcome[target] = Submitted(target, False, f"refused with {answer[0]}: {first!r}")
    return lines, retry


def _refusal(claimed: str, size: int | None, sent: int) -> str:
    """The warning for a 409 not (or no longer) retried: the size the witness claims, which nothing stores."""
    if size is not None and size <= sent:
        return f"holds size {size} of this log; it refused this store's {sent} (409)"
    shown = claimed if len(claimed) <= 40 else f"{claimed[:20]}...({len(claimed)} digits)"
    return (f"claims size {shown} of this log, above the checkpoint sent ({sent}); not retried, nothing stored (was "
            "the store rolled back, or is this not the witness? see docs/incident.md)")


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


def _keep(session: StoreSession, size: int, text: str, lines: list[tuple[WitnessTarget, int, str]]) -> None:
    """Store the witnesses' cosignatures (with the checkpoint `text` they cover), append-only, in one write
    transaction. The witness-sizes table is no longer written (spec 9.9.1): a size is read from cosignatures."""
    if not lines:
        return
    now = utc_now()
    with begin_write(session.engine) as connection:
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
    request = target.request(f"/latest?origin={urllib.parse.quote(origin, safe='')}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = str(response.read(MAX_ANSWER_BYTES + 1).decode("utf-8", "replace"))
    except urllib.error.HTTPError as error:
        if error.code == 404:
            raise StoreUnavailable(
                f"{target.label} has cosigned nothing for log {origin}: submit to it first (`compute-budget witness "
                "submit`), or leave this --witness-url out until it has"
            ) from None
        raise StoreUnavailable(f"{target.label} answered {error.code} to GET /latest") from None
    except (OSError, ValueError, http.client.HTTPException) as error:
        reason = redacted_url(str(getattr(error, "reason", None) or error) or type(error).__name__)
        raise StoreUnavailable(f"{target.label} cannot be reached: {reason}") from None
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
