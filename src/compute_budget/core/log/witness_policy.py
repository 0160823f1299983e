"""C2SP tlog-policy: the logs a checkpoint may come from and the witnesses whose cosignatures make it count
(`--policy`). Pure: the file's bytes in, a frozen `TlogPolicy` out; nothing here opens a file or reads a clock.

Followed: C2SP `tlog-policy.md` at commit 13027eee7f3f824e464e803373c774ab37fcc43e of C2SP/C2SP (the editor's copy
of c2sp.org/tlog-policy), which grew out of Sigsum's policy files. A policy is lines, each ending in a newline,
of fields split by runs of ASCII space and tab only; blank lines and lines whose first field starts with ``#`` are
ignored::

    log <vkey> [<url>]                      a log; its key's name is the log's origin
    witness <name> <vkey> [<url>]           a witness (type 0x04 or 0x06 key), named for the lines below
    group <name> all|any|<k> <name>...      cosigned when k of its members are (any = 1, all = n)
    quorum <name>                           exactly one; `none` requires no cosignature

A group or the quorum names only witnesses and groups defined on lines above it, so there is no cycle; a name is
a group member at most once in the whole file, so the groups under the quorum form a tree; a witness no path from
the quorum reaches is *optional*: asked, reported, never counted. The parser is `witness_policy_file.py`; this
module is the value, its checks, and what callers ask of it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from compute_budget.core.log.cosignature import MAX_TIMESTAMP, WitnessKey
from compute_budget.core.log.note import VerifierKey
from compute_budget.errors import MalformedPolicy, PolicyOriginMismatch, PolicyProblem

NONE = "none"  # the predefined name: a quorum that requires no cosignature, never a member or a definition
SHORTHAND_GROUP = "witness-quorum"  # the group `from_witness_keys` makes (a `+` is added if a key takes the name)
_NAME_LIMIT = 60


def shown(name: str, limit: int = _NAME_LIMIT) -> str:
    """`name` safe for a message or a report: bytes that are not UTF-8 as ``\\xNN``, characters that do not print
    as ``\\uNNNN``, cut to `limit` characters. Names are opaque octets (C2SP), read with `surrogateescape`."""
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    safe = "".join(char if char.isprintable() else f"\\u{ord(char):04x}" for char in text)
    return safe if len(safe) <= limit else safe[: limit - 1] + "…"


@dataclass(frozen=True, slots=True)
class PolicyLog:
    """A `log` line: the log's note key (its name is the log's origin), its URL if given, and the line number."""

    key: VerifierKey
    url: str | None = None
    line: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class PolicyWitness:
    """A `witness` line: the policy's name for it, its cosignature key (type 0x04 or 0x06), its URL, the line."""

    name: str
    key: WitnessKey
    url: str | None = None
    line: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class PolicyGroup:
    """A `group` line: cosigned when at least `threshold` of its `members` (witness or group names) are."""

    name: str
    threshold: int
    members: tuple[str, ...]
    line: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class QuorumVerdict:
    """What a set of cosigning witnesses comes to: whether the quorum is `met`, the cosigners it `counted` (those
    the quorum reaches) and the `optional` ones (cosigned, reported, never counted), each in file order."""

    met: bool
    counted: tuple[str, ...]
    optional: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class QuorumTally:
    """Valid cosignatures of one checkpoint under a policy: how many witnesses cosigned it (`valid`, optional ones
    included), what they come to (`verdict`), and the quorum's `time` (see `TlogPolicy.quorum_time`; None when the
    quorum is not met)."""

    valid: int
    verdict: QuorumVerdict
    time: int | None

    @property
    def met(self) -> bool:
        """Whether the quorum is met."""
        return self.verdict.met

    @property
    def counted(self) -> int:
        """How many of the cosigners count toward the quorum (optional witnesses never do)."""
        return len(self.verdict.counted)


class PolicyRules:
    """The format's rules on names, keys, members and the quorum, applied one definition at a time, in order: the
    parser's, and a policy value's own check of itself."""

    def __init__(self) -> None:
        self.defined: dict[str, int | None] = {NONE: None}  # name -> its line
        self.member_of: dict[str, tuple[str, int | None]] = {}  # name -> (its group, that group's line)
        self.log_keys: dict[bytes, int | None] = {}
        self.witness_keys: dict[bytes, int | None] = {}
        self.quorum_line: int | None = None
        self.quorum: str | None = None

    def log(self, log: PolicyLog) -> None:
        """One log; its public key must not be another log line's (C2SP: duplicate logs are not allowed)."""
        self._unique_key(self.log_keys, log.key.public_key, "log", log.line)

    def witness(self, witness: PolicyWitness) -> None:
        """One witness; its name new, its public key not another witness line's."""
        self._define(witness.name, witness.line)
        self._unique_key(self.witness_keys, witness.key.public_key, "witness", witness.line)

    def group(self, group: PolicyGroup) -> None:
        """One group: a new name, members defined above and not yet members anywhere, 1 <= threshold <= n."""
        self._define(group.name, group.line)
        seen: set[str] = set()
        for member in group.members:
            self._member(group, member, seen)
            seen.add(member)
        for member in group.members:
            self.member_of[member] = (group.name, group.line)
        count = len(group.members)
        if not 1 <= group.threshold <= count:
            raise MalformedPolicy(
                PolicyProblem.THRESHOLD_RANGE,
                f"group {shown(group.name)} needs {group.threshold} of its {count} member(s); the threshold must be "
                f"1..{count} (`quorum none` is how to require no cosignature)",
                line=group.line,
            )

    def set_quorum(self, name: str, line: int | None) -> None:
        """The one quorum line, naming `none` or a witness or group defined above it."""
        if self.quorum is not None:
            first = f" (the first is line {self.quorum_line})" if self.quorum_line is not None else ""
            raise MalformedPolicy(
                PolicyProblem.QUORUM_TWICE, f"a second quorum line{first}; a policy has exactly one", line=line
            )
        if name not in self.defined:
            raise MalformedPolicy(
                PolicyProblem.UNDEFINED_NAME,
                f"the quorum names undefined {shown(name)} (define the witness or group on a line above it)",
                line=line,
            )
        self.quorum, self.quorum_line = name, line

    def _define(self, name: str, line: int | None) -> None:
        if name == NONE:
            raise MalformedPolicy(
                PolicyProblem.DUPLICATE_NAME,
                "the name none is predefined (a quorum of no cosignature) and cannot name a witness or group",
                line=line,
            )
        if name in self.defined:
            where = f" on line {self.defined[name]}" if self.defined[name] is not None else ""
            raise MalformedPolicy(
                PolicyProblem.DUPLICATE_NAME,
                f"the name {shown(name)} is already defined{where} (witnesses and groups share one set of names)",
                line=line,
            )
        self.defined[name] = line

    def _member(self, group: PolicyGroup, member: str, seen: set[str]) -> None:
        where = f"group {shown(group.name)}"
        if member == NONE:
            raise MalformedPolicy(
                PolicyProblem.NONE_MEMBER,
                f"{where} lists none, which is only a quorum, never a member",
                line=group.line,
            )
        if member not in self.defined or member == group.name:
            itself = " (a group cannot contain itself)" if member == group.name else ""
            raise MalformedPolicy(
                PolicyProblem.UNDEFINED_NAME,
                f"{where} names undefined member {shown(member)}{itself} (define it on a line above)",
                line=group.line,
            )
        if member in seen:
            raise MalformedPolicy(
                PolicyProblem.MEMBER_TWICE, f"{where} lists {shown(member)} twice", line=group.line
            )
        if member in self.member_of:
            other, other_line = self.member_of[member]
            at = f" (line {other_line})" if other_line is not None else ""
            raise MalformedPolicy(
                PolicyProblem.MEMBER_TWICE,
                f"{where} lists {shown(member)}, already a member of group {shown(other)}{at}; a name is a member of "
                "one group only, so each witness counts toward the quorum in one way",
                line=group.line,
            )

    @staticmethod
    def _unique_key(seen: dict[bytes, int | None], public_key: bytes, kind: str, line: int | None) -> None:
        if public_key in seen:
            where = f" on line {seen[public_key]}" if seen[public_key] is not None else ""
            raise MalformedPolicy(
                PolicyProblem.DUPLICATE_KEY,
                f"this {kind} key wraps the same public key as the {kind} line{where} (one {kind} line per key, "
                "whatever the key's name)",
                line=line,
            )
        seen[public_key] = line


@dataclass(frozen=True, slots=True)
class TlogPolicy:
    """A witness policy (C2SP tlog-policy): `logs`, `witnesses`, `groups` in file order, the `quorum` name (`none`,
    a witness or a group), and `sha256`, the hex SHA-256 of the file's bytes that reports name it by (for the
    `--witness-key` shorthand, of `render()`). Made by `parse_policy` or `from_witness_keys`; checked on creation."""

    logs: tuple[PolicyLog, ...]
    witnesses: tuple[PolicyWitness, ...]
    groups: tuple[PolicyGroup, ...]
    quorum: str
    sha256: str
    source: str | None = field(default=None, compare=False)  # the file it was read from, for messages
    # The witnesses the quorum reaches, worked out once: every tally of an audit's cosignature scan asks for them.
    _counted: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Hold the value to the format's rules, whoever built it (the parser already did, line by line)."""
        rules = PolicyRules()
        for log in self.logs:
            rules.log(log)
        for witness in self.witnesses:
            rules.witness(witness)
        for group in self.groups:
            rules.group(group)
        rules.set_quorum(self.quorum, None)
        object.__setattr__(self, "_counted", self._reached_witnesses())

    @classmethod
    def from_witness_keys(cls, keys: Iterable[WitnessKey], quorum: int | None = None) -> TlogPolicy:
        """The `--witness-key`/`--witness-quorum` shorthand (spec 9.3) as a one-group policy: `quorum` (default:
        all) of the distinct keys; no key at all is `quorum none`. It has no logs: those stay `--trusted-key`."""
        distinct = tuple(dict.fromkeys(keys))
        problem = _shorthand_problem(distinct, quorum)
        if problem is not None:
            raise MalformedPolicy(PolicyProblem.SHORTHAND, problem)
        if not distinct:
            return _with_identity((), (), (), NONE)
        names = _shorthand_names(distinct)
        witnesses = tuple(PolicyWitness(name, key) for name, key in zip(names, distinct, strict=True))
        group_name = SHORTHAND_GROUP if SHORTHAND_GROUP not in names else SHORTHAND_GROUP + "+"
        group = PolicyGroup(group_name, len(distinct) if quorum is None else quorum, names)
        return _with_identity((), witnesses, (group,), group_name)

    @property
    def witness_keys(self) -> tuple[WitnessKey, ...]:
        """Every witness's key, in file order: the keys to verify cosignatures with (optional ones included)."""
        return tuple(witness.key for witness in self.witnesses)

    @property
    def requires_witnesses(self) -> bool:
        """False for `quorum none`: a checkpoint needs no cosignature."""
        return self.quorum != NONE

    def names_of(self, keys: Iterable[WitnessKey]) -> frozenset[str]:
        """The policy's names of the witnesses whose keys are among `keys` (say, the keys that validly cosigned)."""
        wanted = set(keys)
        return frozenset(witness.name for witness in self.witnesses if witness.key in wanted)

    def counted_witnesses(self) -> tuple[str, ...]:
        """The witnesses the quorum reaches through its groups, in file order: the ones that count."""
        return self._counted

    def _reached_witnesses(self) -> tuple[str, ...]:
        members = {group.name: group.members for group in self.groups}
        reached: set[str] = set()
        stack = [self.quorum]
        while stack:
            name = stack.pop()
            reached.add(name)
            stack.extend(members.get(name, ()))
        return tuple(witness.name for witness in self.witnesses if witness.name in reached)

    def optional_witnesses(self) -> tuple[str, ...]:
        """The witnesses defined but not reached from the quorum, in file order: asked, reported, never counted."""
        return tuple(witness.name for witness in self.witnesses if witness.name not in self._counted)

    def evaluate(self, cosigned: Iterable[str]) -> QuorumVerdict:
        """Whether the witnesses named `cosigned` (their cosignatures verified) meet the quorum, groups and
        thresholds applied recursively; a name the policy does not define counts for nothing."""
        signed = frozenset(cosigned)
        met = self._fold(dict.fromkeys(signed, 1)) >= 1
        counted = tuple(name for name in self.counted_witnesses() if name in signed)
        optional = tuple(name for name in self.optional_witnesses() if name in signed)
        return QuorumVerdict(met, counted, optional)

    def tally(self, newest: Mapping[WitnessKey, int]) -> QuorumTally:
        """What the witness keys in `newest` (each with its newest valid cosignature's timestamp) come to: keys the
        policy does not name count for nothing."""
        by_name = {witness.name: newest[witness.key] for witness in self.witnesses if witness.key in newest}
        verdict = self.evaluate(by_name)
        return QuorumTally(len(by_name), verdict, self.quorum_time(by_name) if verdict.met else None)

    def need_words(self) -> str:
        """How many cosignatures the quorum needs, for ``carries 1 of 2 cosignatures``: a number when the quorum is
        one witness or one group of witnesses (the `--witness-key` shorthand always is), else the rule in words."""
        groups = {group.name: group for group in self.groups}
        if self.quorum == NONE:
            return "0"
        if self.quorum not in groups:
            return "1"
        top = groups[self.quorum]
        if not any(member in groups for member in top.members):
            return str(top.threshold)
        return f"the quorum's ({self.quorum_in_words()})"

    def count_words(self, counted: int) -> str:
        """`counted` valid cosignatures against the quorum, for a message: ``1 of 2 cosignatures`` when the quorum
        needs a number (the shorthand's form), else ``1 cosignature(s) toward the quorum all of A, B (...)``."""
        need = self.need_words()
        if need.isdigit():
            return f"{counted} of {need} cosignatures"
        return f"{counted} cosignature(s) toward the quorum {self.quorum_in_words()}"

    def quorum_met(self, cosigned: Iterable[str]) -> bool:
        """True iff the witnesses named `cosigned` meet the quorum (see `evaluate`)."""
        return self.evaluate(cosigned).met

    def quorum_time(self, timestamps: Mapping[str, int]) -> int | None:
        """The newest time T at which the quorum is met by the witnesses whose cosignature timestamp (by name) is
        at least T, or None when the quorum is not met at all: for K of N witnesses, the K-th newest timestamp
        (spec 9.3's age rule), and for groups the same rule applied level by level. `quorum none` gives
        2**63-1: nothing is required, so nothing is ever stale."""
        if not self.requires_witnesses:
            return MAX_TIMESTAMP
        value = self._fold(timestamps)
        return value if value >= 0 else None

    def _fold(self, values: Mapping[str, int]) -> int:
        """The quorum's value when each witness has `values[name]` (absent: -1) and each group the
        threshold-th largest of its members' values; groups in file order, so members come first, no recursion."""
        known = {witness.name: values.get(witness.name, -1) for witness in self.witnesses}
        for group in self.groups:
            ranked = sorted((known[member] for member in group.members), reverse=True)
            known[group.name] = ranked[group.threshold - 1]
        return MAX_TIMESTAMP if self.quorum == NONE else known[self.quorum]

    def quorum_in_words(self) -> str:
        """The quorum for a report, one line: ``all of A, B (A = 2 of w1, w2, w3; B = 1 of w4, w5)``."""
        if self.quorum == NONE:
            return "none (no cosignature is required)"
        groups = {group.name: group for group in self.groups}
        if self.quorum not in groups:
            return f"a cosignature by {shown(self.quorum)}"
        nested: list[str] = []
        pending = [member for member in groups[self.quorum].members if member in groups]
        while pending:
            name = pending.pop(0)
            nested.append(f"{shown(name)} = {_rule(groups[name])}")
            pending.extend(member for member in groups[name].members if member in groups)
        head = _rule(groups[self.quorum])
        return f"{head} ({'; '.join(nested)})" if nested else head

    def log_keys_by_origin(self) -> dict[str, tuple[VerifierKey, ...]]:
        """The log keys grouped by their name, which is each log's origin: a witness's `--log` list."""
        found: dict[str, list[VerifierKey]] = {}
        for log in self.logs:
            found.setdefault(log.key.name, []).append(log.key)
        return {origin: tuple(keys) for origin, keys in found.items()}

    def store_log_keys(self, origin: str) -> tuple[VerifierKey, ...]:
        """The log keys of the log named `origin` (C2SP: a log key's name is the log's origin); the lines of other
        logs are theirs (one policy may name every log its witnesses follow). A policy with log lines of which
        none is `origin`'s is `PolicyOriginMismatch`, naming the first: a writer key made under another name. A
        policy with no log line gives (): the writer keys then come from elsewhere (`--trusted-key`)."""
        if not self.logs:
            return ()
        mine = tuple(log.key for log in self.logs if log.key.name == origin)
        if mine:
            return mine
        first = self.logs[0]
        where = f"line {first.line}: " if first.line is not None else ""
        refused = PolicyOriginMismatch(
            PolicyProblem.ORIGIN_MISMATCH,
            f"{f'policy file {self.source}, ' if self.source else ''}{where}the log key is named "
            f"{shown(first.key.name)}, not this store's origin {shown(origin)}, and no log line names it; a policy "
            "names each log by its origin, so make the store's writer key with `compute-budget keygen ORIGIN`",
        )
        refused.line = first.line
        raise refused

    def render(self) -> bytes:
        """The policy as a C2SP tlog-policy file (logs, witnesses, groups, the quorum; no comments), which
        `parse_policy` reads back to an equal policy; the shorthand's identity is this text's SHA-256."""
        lines = [_spaced("log", log.key.format(), log.url) for log in self.logs]
        lines += [_spaced("witness", w.name, w.key.format(), w.url) for w in self.witnesses]
        lines += [_spaced("group", g.name, str(g.threshold), *g.members) for g in self.groups]
        lines.append(_spaced("quorum", self.quorum))
        return "".join(line + "\n" for line in lines).encode("utf-8", "surrogateescape")


def _spaced(*fields: str | None) -> str:
    return " ".join(text for text in fields if text is not None)


def _rule(group: PolicyGroup) -> str:
    count = "all" if group.threshold == len(group.members) else str(group.threshold)
    return f"{count} of {', '.join(shown(member) for member in group.members)}"


def _with_identity(
    logs: tuple[PolicyLog, ...], witnesses: tuple[PolicyWitness, ...], groups: tuple[PolicyGroup, ...], quorum: str
) -> TlogPolicy:
    """A policy with no file behind it, named by the SHA-256 of its own rendering."""
    unnamed = TlogPolicy(logs, witnesses, groups, quorum, "")
    return TlogPolicy(logs, witnesses, groups, quorum, hashlib.sha256(unnamed.render()).hexdigest())


def _shorthand_problem(keys: tuple[WitnessKey, ...], quorum: int | None) -> str | None:
    """Why `--witness-key`/`--witness-quorum` make no policy, or None."""
    by_public: dict[bytes, WitnessKey] = {}
    for key in keys:
        other = by_public.setdefault(key.public_key, key)
        if other is not key:
            return (
                f"--witness-key {shown(other.name)}+{other.key_id:08x} and {shown(key.name)}+{key.key_id:08x} wrap "
                "the same public key: one witness would count twice; give it once"
            )
    if quorum is not None and not 1 <= quorum <= len(keys):
        return f"--witness-quorum {quorum} is outside 1..{len(keys)}, the number of distinct --witness-key keys"
    return None


def _shorthand_names(keys: tuple[WitnessKey, ...]) -> tuple[str, ...]:
    """Each key's name, or ``name+keyID`` where two keys share a name or a key is named `none` (a key name never
    holds a ``+``, so these never collide)."""
    counts: dict[str, int] = {}
    for key in keys:
        counts[key.name] = counts.get(key.name, 0) + 1
    return tuple(
        key.name if counts[key.name] == 1 and key.name != NONE else f"{key.name}+{key.key_id:08x}" for key in keys
    )


def policy_sha256(data: bytes) -> str:
    """A policy file's identity for reports: the hex SHA-256 of its bytes, exactly as read."""
    return hashlib.sha256(data).hexdigest()
