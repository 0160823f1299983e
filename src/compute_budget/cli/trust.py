"""What the commands that check signatures trust, given on their command line: the writer keys (`--trusted-key`),
the witness policy (`--policy FILE`, or `--witness-key` with `--witness-quorum` as its shorthand) and the writer
keys' states (`--retired`, `--revoked`: the operator's word on which keys still sign). `audit`, `prove`,
`verify-proof`, `consistency`, `publish` and `serve` take them all, each as one `TrustOptions`."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from compute_budget.core.log.key_states import KeyStates
    from compute_budget.core.log.note import VerifierKey
    from compute_budget.core.log.witness_policy import TlogPolicy


@dataclass(frozen=True, slots=True)
class TrustOptions:
    """The trust options as Click parsed them (the option values, unread: a key file is read when it is asked
    for, in the order each command says its errors)."""

    trusted_keys: tuple[str, ...] = ()
    witness_keys: tuple[str, ...] = ()
    witness_quorum: int | None = None
    policy_path: str | None = None
    retired: tuple[str, ...] = ()
    revoked: tuple[str, ...] = ()

    def writer_keys(self) -> list[VerifierKey]:
        """The `--trusted-key` keys, each read (key text, else a file), then the `--retired` ones: a retired key was
        the log's writer up to its size, where its signatures still count (above it the key states say they do
        not), so `--trusted-key NEW --retired OLD@H`, as `rotate` prints them, verifies what OLD signed."""
        from compute_budget.keys.key_files import verifier_key

        keys = [verifier_key(item) for item in self.trusted_keys]
        if self.retired:
            keys += [state.key for state in self.key_states().states if state.status.value == "retired"]
        return list(dict.fromkeys(keys))

    def witness_rule(self) -> TlogPolicy | None:
        """The witness policy: `--policy`, or the `--witness-key` shorthand; None with neither (`witness_rule`)."""
        return witness_rule(self.policy_path, self.witness_keys, self.witness_quorum)

    def key_states(self) -> KeyStates:
        """The writer keys' states `--retired` and `--revoked` give."""
        from compute_budget.auditor.key_states import configured_states

        return configured_states(self.retired, self.revoked)


_TRUST_PARAMETERS = tuple(field.name for field in dataclasses.fields(TrustOptions))


def trusted_key_option(help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--trusted-key KEY`, repeatable, with the command's own help (what the key vouches for differs), listed
    where the command puts it; `trust_options` hands its values on in `TrustOptions.trusted_keys`."""
    return click.option("--trusted-key", "trusted_keys", metavar="KEY", multiple=True, help=help_text)


def trust_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add `--witness-key`, `--witness-quorum`, `--policy`, `--retired` and `--revoked`, and call the command with
    `trust`: one `TrustOptions` of them and of its `--trusted-key` (`trusted_key_option`)."""

    @functools.wraps(command)  # also carries the options declared below this decorator over to the wrapper
    def with_trust(**given: Any) -> Any:
        trust = TrustOptions(**{name: given.pop(name) for name in _TRUST_PARAMETERS})
        return command(trust=trust, **given)

    return witness_role_options(key_state_options(with_trust))


def witness_role_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--witness-key KEY` (repeatable, type 0x04 or 0x06) and `--witness-quorum K` (spec 9.3), or `--policy FILE`
    (a C2SP tlog-policy); `witness_rule` reads them as one policy."""
    command = click.option(
        "--policy", "policy_path", metavar="FILE",
        help="A C2SP tlog-policy file: its witnesses, groups and quorum decide whether a checkpoint is witnessed "
        "(instead of --witness-key/--witness-quorum), and its log keys (each named by the store's origin) are "
        "trusted writer keys.",
    )(command)
    command = click.option(
        "--witness-quorum", "witness_quorum", type=int, metavar="K",
        help="How many of the --witness-key witnesses must have cosigned [default: all of them].",
    )(command)
    return click.option(
        "--witness-key", "witness_keys", metavar="KEY", multiple=True,
        help="A witness's verifier key (type 0x04 or 0x06, keygen --witness) or a file holding one; repeatable.",
    )(command)


def key_state_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--retired KEY@SIZE` and `--revoked KEY@SIZE:ROOT`, both repeatable (parsed by `auditor.key_states`); `rotate`
    takes them alone."""
    command = click.option(
        "--revoked", "revoked", metavar="KEY@SIZE:ROOT", multiple=True,
        help="KEY leaked: its signature counts only on a checkpoint consistent with tree SIZE and ROOT (base64), "
        "none above SIZE; repeatable.",
    )(command)
    return click.option(
        "--retired", "retired", metavar="KEY@SIZE", multiple=True,
        help="KEY was handed over at SIZE (`rotate`): its signature on a checkpoint above SIZE does not count; "
        "repeatable.",
    )(command)


# A policy names a few logs and witnesses; a megabyte is thousands of lines, far past any real one.
MAX_POLICY_BYTES = 1 << 20


def load_policy(path: str) -> TlogPolicy:
    """The witness policy (C2SP tlog-policy) in the `--policy` file at `path`: a regular file, read once and never
    past `MAX_POLICY_BYTES`, parsed by the core's strict parser; a `PolicyError` naming the file (and the line, for
    a malformed one) when it cannot be read or used."""
    from compute_budget.core.log.witness_policy_file import parse_policy
    from compute_budget.errors import MalformedPolicy, PolicyError, PolicyProblem
    from compute_budget.keys.small_files import read_small_file

    def unreadable(message: str) -> PolicyError:
        return MalformedPolicy(PolicyProblem.UNREADABLE, message)

    data = read_small_file(path, MAX_POLICY_BYTES, "policy file", unreadable)
    if len(data) > MAX_POLICY_BYTES:
        raise unreadable(f"policy file {path} is over {MAX_POLICY_BYTES} bytes: not a witness policy")
    try:
        policy = parse_policy(data)
    except PolicyError as error:
        named = type(error)(error.problem, f"policy file {path}, {error}")
        named.line = error.line
        raise named from None
    return dataclasses.replace(policy, source=path)  # later refusals (a log of another origin) name the file


def witness_rule(
    policy_path: str | None, witness_keys: tuple[str, ...], quorum: int | None
) -> TlogPolicy | None:
    """The witness policy of a command line: `--policy FILE`, or `--witness-key` keys with `--witness-quorum` of them
    (default: all) as its one-group shorthand; None with neither. Both, or a quorum outside 1..N: exit 2."""
    from compute_budget.core.log.witness_policy import TlogPolicy
    from compute_budget.keys.key_files import witness_key

    if policy_path is not None:
        if witness_keys or quorum is not None:
            raise click.BadParameter(
                "a policy file names the witnesses and the quorum: give --policy or --witness-key/--witness-quorum, "
                "not both", param_hint="--policy",
            )
        return load_policy(policy_path)
    keys = list(dict.fromkeys(witness_key(item) for item in witness_keys))
    if quorum is not None and not 1 <= quorum <= len(keys):
        raise click.BadParameter(
            f"{quorum} is not between 1 and the number of distinct --witness-key keys ({len(keys)})",
            param_hint="--witness-quorum",
        )
    return TlogPolicy.from_witness_keys(keys, quorum) if keys else None
