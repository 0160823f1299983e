"""What a writer's store is handed to reach its witnesses (spec 9.5, as 9.9.1 amends it): the `WitnessSubmitter`
protocol, and the values that cross it (the targets, what is sent to each, what comes back).

The store plans what to send from its own tables and keeps what is cosigned; a submitter drives the exchange and
never opens a database. `witness.client`'s HTTP submitter is the one this package has: the store never imports
it (the witness sits beside the store, not below it). Whoever opens a store may hand it one; without, the store
asks `default_submitter()`, which the package root installs (it loads the HTTP client on first use). Still
synchronous: `submit` returns when every witness answered or the deadline passed.

Light on purpose: the package root imports this module, and importing the package loads no cryptography (a
target's key is read when a ``URL=KEY`` text is parsed).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from compute_budget.errors import InputError

if TYPE_CHECKING:
    from compute_budget.core.log.cosignature import WitnessKey

DEFAULT_TIMEOUT_SECONDS = 5.0
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
        from compute_budget.keys.key_files import witness_key  # loads the cryptography: see the module docstring

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


# What the store provides: the submissions for some targets (each with the `old` given, or None for "choose it from
# the stored cosignatures") before a `time.monotonic` deadline, and the keeping of the cosignatures returned.
Plan = Callable[[Mapping[WitnessTarget, int | None], float], Sequence[Submission]]
Keep = Callable[[Sequence[Cosigned]], None]


class WitnessSubmitter(Protocol):
    """Sends a writer's signed checkpoint to its witnesses, synchronously, and says what each did."""

    def submit(
        self,
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
        """Send `note` (a signed checkpoint of `size` entries) to every target: `plan` the requests (by
        `plan_deadline`), one round, one retry round for the 409s whose size the store can prove from (planned
        again), then `keep` the cosignatures; all by `deadline` (`time.monotonic` instants). Never raises one of
        `failures` (what `plan` and `keep` may raise): each becomes a warning per witness. One `Submitted` per
        target, in order."""
        ...


_installed: list[Callable[[], WitnessSubmitter]] = []


def install_default_submitter(factory: Callable[[], WitnessSubmitter]) -> None:
    """Make `factory` what `default_submitter` calls (the package root installs witness.client's)."""
    _installed[:] = [factory]


def default_submitter() -> WitnessSubmitter:
    """The submitter a store uses when it was handed none."""
    if not _installed:
        raise InputError("no witness submitter is installed: hand the store one (submitter=...)")
    return _installed[0]()


__all__ = [
    "DEFAULT_TIMEOUT_SECONDS", "Cosigned", "Keep", "Plan", "Submission", "Submitted", "WitnessSubmitter",
    "WitnessTarget", "default_submitter", "install_default_submitter", "redacted_url", "witness_targets",
]
