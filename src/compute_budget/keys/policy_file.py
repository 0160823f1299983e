"""Reading a witness policy file (C2SP tlog-policy) that an operator hands a command with `--policy`: a
regular file, read once and never past a limit, parsed by the core's strict parser."""

from __future__ import annotations

import dataclasses

from compute_budget.core.log.witness_policy import TlogPolicy
from compute_budget.core.log.witness_policy_file import parse_policy
from compute_budget.errors import MalformedPolicy, PolicyError, PolicyProblem
from compute_budget.keys.small_files import read_small_file

# A policy names a few logs and witnesses; a megabyte is thousands of lines, far past any real one.
MAX_POLICY_BYTES = 1 << 20


def load_policy(path: str) -> TlogPolicy:
    """The policy in the file at `path`; a `PolicyError` naming the file (and the line, for a malformed one) when it
    cannot be read or used."""

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
