"""Speaking to witnesses over HTTP (spec 9.5, as 9.9.1 amends it): the targets, the requests, the answers.

A writer's store plans what to send (`old` and the proof from it, from its own tables) and keeps what comes back;
this module drives the exchange (`submit_to_witnesses`): every witness in parallel, `POST /add-checkpoint`, then
judges each answer (a valid cosignature, a 409 with a size to retry from once, or a refusal), asks the store to plan
the one retry, and hands it the cosignatures to keep. A witness that is down, slow or refusing never
holds the caller longer than the deadline: it becomes one warning line. A URL's user information is never shown
(spec 9.9.6): it is sent as HTTP Basic authentication, and messages show `***@`. `fetch_latest` reads a witness's
`GET /latest` for the audit. Nothing here opens a database: the store is above, the witness server beside.
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from compute_budget.core.log.cosignature import WitnessKey, valid_cosignatures
from compute_budget.errors import InputError, NoteError, StoreUnavailable
from compute_budget.keys.key_files import witness_key

DEFAULT_TIMEOUT_SECONDS = 5.0
SIZE_TYPE = "text/x.tlog.size"
MAX_ANSWER_BYTES = 64 * 1024
MAX_SIZE_DIGITS = 19  # a size of 2^63 or more is no size (spec 9.9.6); longer text is not even converted
MAX_LATEST_AGE_SECONDS = 600
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
        return cls.of(url, witness_key(key_text))

    @classmethod
    def of(cls, url: str, key: WitnessKey) -> WitnessTarget:
        """A witness at the http(s) prefix `url` with `key`, the URL checked (a policy's witness line gives both
        apart, so an ``=`` in its URL is never taken for the separator)."""
        shown = _shown(url)
        try:
            parts = urllib.parse.urlsplit(url)
            _ = parts.port  # a port that is not a number from 0 to 65535 raises here, not at the first request
        except ValueError as error:  # its text can quote part of a password (as a port): not shown when "@" is
            reason = redacted_url(str(error)) if "@" not in url else "its host or port cannot be read"
            raise InputError(f"witness URL {shown!r} is not a URL: {reason}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise InputError(f"witness URL {shown!r} is not an http:// or https:// prefix (no query or fragment)")
        return cls(url.rstrip("/"), key)

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

    @property
    def key_id(self) -> str:
        """The witness key's id as the store keeps it: eight lowercase hex digits."""
        return f"{self.key.key_id:08x}"

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


@dataclass(frozen=True, slots=True)
class Submission:
    """One checkpoint request to one witness: `old`, the size it is believed to hold, and the proof from it."""

    target: WitnessTarget
    old: int
    proof: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class Cosigned:
    """A valid cosignature line a witness returned, with its timestamp: what the store keeps."""

    target: WitnessTarget
    timestamp: int
    line: str


@dataclass(frozen=True, slots=True)
class Exchange:
    """What one round of requests came to: per witness an outcome (`Submitted`), the cosignatures to keep, and the
    witnesses to ask once more (a 409) from the size each returned."""

    outcomes: dict[WitnessTarget, Submitted]
    cosigned: tuple[Cosigned, ...]
    retry: dict[WitnessTarget, int]


# (status, body, content type), an error text, or None while unanswered.
_Answer = tuple[int, str, str] | str | None


def exchange(submissions: Sequence[Submission], note: str, size: int, deadline: float, *, final: bool) -> Exchange:
    """POST `note` (a signed checkpoint of `size` entries) to every submission's witness in parallel and judge the
    answers; whatever has not answered by `deadline` (a `time.monotonic` instant) counts as no answer. A 409 with
    a size at most `size` is to be retried, unless this round is `final`."""
    answers = _post_all(submissions, note, deadline)
    outcomes: dict[WitnessTarget, Submitted] = {}
    cosigned: list[Cosigned] = []
    retry: dict[WitnessTarget, int] = {}
    for submission, answer in zip(submissions, answers, strict=True):
        target = submission.target
        if answer is None:
            outcomes[target] = Submitted(target, False, "did not answer in time")
        elif isinstance(answer, str):
            outcomes[target] = Submitted(target, False, answer)
        elif answer[0] == 200:
            found = _cosignature_lines(note, answer[1], target)
            cosigned.extend(found)
            reason = None if found else "answered 200 without a valid cosignature"
            outcomes[target] = Submitted(target, bool(found), reason)
        elif answer[0] == 409 and answer[2].split(";")[0].strip() == SIZE_TYPE and answer[1].strip().isdigit():
            claimed = answer[1].strip()
            held = int(claimed) if len(claimed) <= MAX_SIZE_DIGITS else None
            if held is not None and held <= size and not final:
                retry[target] = held  # the proof from it comes from the store's own tree
            else:
                outcomes[target] = Submitted(target, False, _refusal(claimed, held, size))
        else:
            first = answer[1].strip().split("\n")[0][:120]
            outcomes[target] = Submitted(target, False, f"refused with {answer[0]}: {first!r}")
    return Exchange(outcomes, tuple(cosigned), retry)


# What the store provides: the submissions for some targets (each with the `old` given, or None for "choose it from
# the stored cosignatures") before a `time.monotonic` deadline, and the keeping of the cosignatures returned.
Plan = Callable[[Mapping[WitnessTarget, int | None], float], Sequence[Submission]]
Keep = Callable[[Sequence[Cosigned]], None]


def submit_to_witnesses(
    note: str,
    size: int,
    targets: Sequence[WitnessTarget],
    *,
    plan: Plan,
    keep: Keep,
    plan_deadline: float,
    deadline: float,
    failures: tuple[type[Exception], ...],
) -> list[Submitted]:
    """Send `note` (a signed checkpoint of `size` entries) to every target: plan (by `plan_deadline`), one round of
    requests, one retry round for the 409s whose size the store can prove from (planned again), then `keep` the
    cosignatures. Never raises one of `failures` (what the caller's `plan` and `keep` may raise): each becomes a
    warning per witness, and a witness that cosigned what could not be kept is no success."""
    outcome: dict[WitnessTarget, Submitted] = {}
    try:
        first = exchange(plan(dict.fromkeys(targets), plan_deadline), note, size, deadline, final=False)
        outcome.update(first.outcomes)
        cosigned = list(first.cosigned)
        if first.retry and time.monotonic() < deadline:
            again = exchange(plan(dict(first.retry), deadline), note, size, deadline, final=True)
            outcome.update(again.outcomes)
            cosigned += again.cosigned
        else:
            for target in first.retry:
                outcome[target] = Submitted(target, False, "did not answer the retry in time")
        keep(cosigned)
    except failures as error:
        for target in targets:
            done = outcome.get(target)
            if done is not None and done.cosigned:  # cosigned, but nothing of it was kept: not a success
                outcome[target] = Submitted(target, False, f"cosigned, but the store could not keep it: {error}")
            else:
                outcome.setdefault(target, Submitted(target, False, f"not submitted: {error}"))
    return [outcome.get(target, Submitted(target, False, "not submitted")) for target in targets]


def _post_all(submissions: Sequence[Submission], note: str, deadline: float) -> list[_Answer]:
    """POST every submission in parallel; whatever has not answered by `deadline` stays None."""
    answers: list[_Answer] = [None] * len(submissions)
    threads = []
    for index, submission in enumerate(submissions):
        proof = "".join(base64.b64encode(item).decode() + "\n" for item in submission.proof)
        body = (f"old {submission.old}\n{proof}\n{note}").encode()
        thread = threading.Thread(
            target=_post, args=(answers, index, submission.target, body, max(0.01, deadline - time.monotonic())),
            daemon=True,  # one that outlives the deadline must not hold the process at exit
        )
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return answers[:]  # a copy: a thread answering after the deadline changes nothing judged


def _post(answers: list[_Answer], index: int, target: WitnessTarget, body: bytes, timeout: float) -> None:
    request = target.request("/add-checkpoint", body)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answers[index] = (response.status, response.read(MAX_ANSWER_BYTES).decode("utf-8", "replace"),
                              response.headers.get("Content-Type", ""))
    except urllib.error.HTTPError as error:
        answers[index] = (error.code, error.read(MAX_ANSWER_BYTES).decode("utf-8", "replace"),
                          error.headers.get("Content-Type", "") if error.headers else "")
    except (OSError, ValueError, http.client.HTTPException) as error:  # HTTPException: an answer that is not HTTP
        reason = str(getattr(error, "reason", None) or error) or type(error).__name__
        answers[index] = f"unreachable ({redacted_url(reason)})"


def _refusal(claimed: str, size: int | None, sent: int) -> str:
    """The warning for a 409 not (or no longer) retried: the size the witness claims, which nothing stores."""
    if size is not None and size <= sent:
        return f"holds size {size} of this log; it refused this store's {sent} (409)"
    shown = claimed if len(claimed) <= 40 else f"{claimed[:20]}...({len(claimed)} digits)"
    return (f"claims size {shown} of this log, above the checkpoint sent ({sent}); not retried, nothing stored (was "
            "the store rolled back, or is this not the witness? see docs/incident.md)")


def _cosignature_lines(note: str, body: str, target: WitnessTarget) -> list[Cosigned]:
    """Each line of a 200 body that is `target`'s valid cosignature of the note's text."""
    found = []
    for line in body.splitlines():
        try:
            cosigned = valid_cosignatures(note + line + "\n", [target.key], now=int(time.time()))
        except NoteError:
            continue
        if cosigned:
            found.append(Cosigned(target, cosigned[0].timestamp, line + "\n"))
    return found


def fetch_latest(target: WitnessTarget, origin: str, *, timeout: float = 10.0, now: int | None = None) -> str:
    """The latest checkpoint `target` cosigned for `origin` (its `GET /latest`, this project's extension), as a
    note carrying the log signatures it verified and a fresh cosignature. `StoreUnavailable` (the audit cannot
    run) when the witness cannot be reached, has cosigned nothing for the log, or answers with a cosignature that
    does not verify under its key or is more than 600 s old."""
    body = _get_latest(target, origin, timeout)
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


def _get_latest(target: WitnessTarget, origin: str, timeout: float) -> str:
    """The body of `target`'s answer to `GET /latest` for `origin`; `StoreUnavailable` for anything but a 200."""
    request = target.request(f"/latest?origin={urllib.parse.quote(origin, safe='')}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return str(response.read(MAX_ANSWER_BYTES + 1).decode("utf-8", "replace"))
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
