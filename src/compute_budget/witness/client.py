"""Speaking to witnesses over HTTP (spec 9.5, as 9.9.1 amends it): the requests and the answers.

A writer's store plans what to send (`old` and the proof from it, from its own tables) and keeps what comes back;
this module drives the exchange (`submit_to_witnesses`, or `HttpSubmitter`, the `submitter.WitnessSubmitter` a
store is handed): every witness in parallel, `POST /add-checkpoint`, then
judges each answer (a valid cosignature, a 409 with a size to retry from once, or a refusal), asks the store to plan
the one retry, and hands it the cosignatures to keep. A witness that is down, slow or refusing never
holds the caller longer than the deadline: it becomes one warning line. A URL's user information is never shown
(spec 9.9.6): it is sent as HTTP Basic authentication, and messages show `***@`. `fetch_latest` reads a witness's
`GET /latest` for the audit. Nothing here opens a database: the store sits beside, handed a submitter by whoever
opens it; the values that cross (`WitnessTarget`, `Submitted`, ...) are `compute_budget.submitter`'s, named here too.
"""

from __future__ import annotations

import base64
import http.client
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass

from compute_budget.core.log.cosignature import valid_cosignatures
from compute_budget.errors import NoteError, StoreUnavailable
from compute_budget.submitter import (
    DEFAULT_TIMEOUT_SECONDS,
    Cosigned,
    Keep,
    Plan,
    Submission,
    Submitted,
    WitnessTarget,
    redacted_url,
    witness_targets,
)

SIZE_TYPE = "text/x.tlog.size"
MAX_ANSWER_BYTES = 64 * 1024
MAX_SIZE_DIGITS = 19  # a size of 2^63 or more is no size (spec 9.9.6); longer text is not even converted
MAX_LATEST_AGE_SECONDS = 600


def request_for(target: WitnessTarget, path: str, data: bytes | None = None) -> urllib.request.Request:
    """A request for `path` under `target`'s URL prefix, its user information moved into an Authorization header
    (a URL holding it cannot be requested, and an error message could show it)."""
    parts = urllib.parse.urlsplit(target.url)
    userinfo, at, host = parts.netloc.rpartition("@")
    headers = {"Content-Type": "text/plain"} if data is not None else {}
    if at:
        user, _, password = userinfo.partition(":")
        pair = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
    url = urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", "")) + path
    return urllib.request.Request(url, data=data, method="POST" if data is not None else "GET", headers=headers)


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


class HttpSubmitter:
    """The `submitter.WitnessSubmitter` that speaks HTTP: `submit_to_witnesses` (the package root installs it as
    the default; the command line hands it to the store it opens)."""

    submit = staticmethod(submit_to_witnesses)


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
    request = request_for(target, "/add-checkpoint", body)
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
    request = request_for(target, f"/latest?origin={urllib.parse.quote(origin, safe='')}")
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


__all__ = [
    "DEFAULT_TIMEOUT_SECONDS", "Cosigned", "Exchange", "HttpSubmitter", "Submission", "Submitted", "WitnessTarget",
    "exchange", "fetch_latest", "redacted_url", "request_for", "submit_to_witnesses", "witness_targets",
]
