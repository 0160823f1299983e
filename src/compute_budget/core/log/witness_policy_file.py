"""Reading a C2SP tlog-policy file strictly (`--policy`, spec 11.5): every refusal is one `MalformedPolicy` line that
starts with the line number it is about. Pure: the file's bytes in, a `TlogPolicy` out.

The format (C2SP `tlog-policy.md`, see `witness_policy.py`) treats the file as octets: tab, newline, 0x20-0x7E and
0x80-0xFF only; octets with the high bit set are opaque, so names are compared as octet strings. They are decoded
here with `surrogateescape`, which is one-to-one: two names are equal as text exactly when their octets are, and
`render()` writes the octets back.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from compute_budget.core.log.cosignature import WitnessKey
from compute_budget.core.log.note import VerifierKey
from compute_budget.core.log.witness_policy import (
    PolicyGroup,
    PolicyLog,
    PolicyRules,
    PolicyWitness,
    TlogPolicy,
    policy_sha256,
    shown,
)
from compute_budget.errors import ArgumentTypeError, MalformedPolicy, NoteError, PolicyProblem

_FORBIDDEN = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]")  # C2SP: the only control characters are tab and newline
_SEPARATOR = re.compile(r"[ \t]+")  # "whitespace" is ASCII space and tab only, never Unicode spaces
_DECIMAL = re.compile(r"[0-9]+")  # ASCII digits only: int() would take Unicode digits, signs and underscores
_KEYWORDS = "log, witness, group or quorum"
_Key = TypeVar("_Key", VerifierKey, WitnessKey)


def parse_policy(data: bytes) -> TlogPolicy:
    """The policy a C2SP tlog-policy file's bytes define, its `sha256` the hex SHA-256 of `data`; anything the
    format does not allow is a `MalformedPolicy` naming its line (``line 7: group G names undefined member W``)."""
    if not isinstance(data, bytes):
        raise ArgumentTypeError(f"a policy is read from the file's bytes, not {type(data).__name__}")
    reader = _Reader()
    lines = data.split(b"\n")
    if lines[-1] != b"":
        raise MalformedPolicy(
            PolicyProblem.NO_FINAL_NEWLINE,
            "the file does not end with a newline (C2SP: every line, the last included, ends in one)",
            line=len(lines),
        )
    for number, raw in enumerate(lines[:-1], start=1):
        reader.line(number, raw)
    if reader.rules.quorum is None:
        raise MalformedPolicy(
            PolicyProblem.QUORUM_MISSING,
            "the policy has no quorum line: add `quorum NAME` (a witness or group defined above it), or "
            "`quorum none` to require no cosignature",
        )
    return TlogPolicy(
        tuple(reader.logs), tuple(reader.witnesses), tuple(reader.groups), reader.rules.quorum, policy_sha256(data)
    )


class _Reader:
    """The lines read so far and the format's rules over them."""

    def __init__(self) -> None:
        self.rules = PolicyRules()
        self.logs: list[PolicyLog] = []
        self.witnesses: list[PolicyWitness] = []
        self.groups: list[PolicyGroup] = []
        self._kinds: dict[str, Callable[[int, list[str]], None]] = {
            "log": self._log, "witness": self._witness, "group": self._group, "quorum": self._quorum,
        }

    def line(self, number: int, raw: bytes) -> None:
        """Read line `number` (its bytes without the newline): a comment, blank, or one definition."""
        bad = _FORBIDDEN.search(raw)
        if bad is not None:
            octet = raw[bad.start()]
            hint = " (a Windows line ending? save the file with LF endings)" if octet == 0x0D else ""
            raise MalformedPolicy(
                PolicyProblem.CHARACTER,
                f"byte 0x{octet:02x} at column {bad.start() + 1} is a control character; only tab and newline "
                f"are allowed{hint}",
                line=number,
            )
        text = raw.decode("utf-8", "surrogateescape").strip(" \t")
        if text == "" or text.startswith("#"):
            return
        keyword, *fields = _SEPARATOR.split(text)
        handler = self._kinds.get(keyword)
        if handler is None:
            raise MalformedPolicy(
                PolicyProblem.UNKNOWN_KEYWORD,
                f"unknown keyword {shown(keyword)}: a line is {_KEYWORDS} (a comment line starts with #)",
                line=number,
            )
        handler(number, fields)

    def _log(self, number: int, fields: list[str]) -> None:
        _count(number, "log", fields, 1, 2, "log <vkey> [<url>]")
        key = _key(number, "log", fields[0], VerifierKey.parse)
        log = PolicyLog(key, _url(number, "log", fields[1]) if len(fields) == 2 else None, number)
        self.rules.log(log)
        self.logs.append(log)

    def _witness(self, number: int, fields: list[str]) -> None:
        _count(number, "witness", fields, 2, 3, "witness <name> <vkey> [<url>]")
        name = fields[0]
        key = _key(number, f"witness {shown(name)}", fields[1], WitnessKey.parse)
        witness = PolicyWitness(name, key, _url(number, "witness", fields[2]) if len(fields) == 3 else None, number)
        self.rules.witness(witness)
        self.witnesses.append(witness)

    def _group(self, number: int, fields: list[str]) -> None:
        if len(fields) < 3:
            raise MalformedPolicy(
                PolicyProblem.FIELDS,
                "a group line is `group <name> all|any|<k> <member>...` with at least one member",
                line=number,
            )
        name, spelled, members = fields[0], fields[1], tuple(fields[2:])
        group = PolicyGroup(name, _threshold(number, name, spelled, len(members)), members, number)
        self.rules.group(group)
        self.groups.append(group)

    def _quorum(self, number: int, fields: list[str]) -> None:
        _count(number, "quorum", fields, 1, 1, "quorum <name>")
        self.rules.set_quorum(fields[0], number)


def _count(number: int, kind: str, fields: list[str], least: int, most: int, form: str) -> None:
    """Refuse a `kind` line without `least`..`most` fields after its keyword. A `#` after the fields is not a
    comment (C2SP has whole-line comments only), so the message says so when that is the likely cause."""
    if least <= len(fields) <= most:
        return
    hint = "; # starts a comment only at the start of a line" if any(f.startswith("#") for f in fields) else ""
    raise MalformedPolicy(
        PolicyProblem.FIELDS, f"a {kind} line is `{form}`, this one has {_fields(len(fields) + 1)}{hint}", line=number
    )


def _fields(count: int) -> str:
    return f"{count} field" if count == 1 else f"{count} fields"


def _key(number: int, what: str, text: str, parse: Callable[[str], _Key]) -> _Key:
    """The key `text` read by `parse`, or `MalformedPolicy` with the key parser's reason."""
    try:
        return parse(text)
    except NoteError as error:
        raise MalformedPolicy(PolicyProblem.BAD_KEY, f"the {what} key is {error}", line=number) from None


def _url(number: int, kind: str, text: str) -> str:
    """`text` if it is an http:// or https:// URL with a host: the only URLs a log or a witness is reached at here
    (a log's base URL, a witness's tlog-witness submission prefix). Not echoed: it may hold a password."""
    if text.startswith("#"):
        raise MalformedPolicy(
            PolicyProblem.BAD_URL,
            f"the {kind}'s URL starts with #: a comment starts only at the start of a line",
            line=number,
        )
    scheme, separator, rest = text.partition("://")
    host = rest.split("/", 1)[0].rpartition("@")[2]
    if not separator or scheme.lower() not in ("http", "https") or host in ("", ":") or host.startswith(":"):
        raise MalformedPolicy(
            PolicyProblem.BAD_URL,
            f"the {kind}'s URL must start with http:// or https:// and name a host",
            line=number,
        )
    return text


def _threshold(number: int, group: str, spelled: str, members: int) -> int:
    """A group's k: `any` is 1, `all` is the member count, else a decimal number without leading zeros (its
    range, 1..members, is `PolicyRules.group`'s to check, after the members)."""
    if spelled == "any":
        return 1
    if spelled == "all":
        return members
    if not _DECIMAL.fullmatch(spelled) or (len(spelled) > 1 and spelled.startswith("0")):
        raise MalformedPolicy(
            PolicyProblem.BAD_THRESHOLD,
            f"group {shown(group)}'s threshold {shown(spelled)} is not all, any or a decimal number (no sign, no "
            "leading zero)",
            line=number,
        )
    # A number with more digits than any member count is out of range whatever it is: no need to read it.
    return int(spelled) if len(spelled) <= 9 else members + 1
