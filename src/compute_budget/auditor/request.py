"""`AuditRequest`: what one audit is asked to do, built once by its caller (the command line, or `audit` from its
keywords) and read by every room of the audit, so the options are written out in one place; and `AuditInputs`,
what its options come to once parsed and checked, before any store opens."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from compute_budget.auditor.checkpoints import (
    CheckpointLike,
    HeadLike,
    WitnessAnswer,
    as_checkpoint,
    unique_keys,
    witness_answer,
    witness_policy,
)
from compute_budget.auditor.head_note import HeadNote
from compute_budget.auditor.look_back import check_look_back, day_number
from compute_budget.auditor.source import AuditSource, SourceLocation
from compute_budget.auditor.witness_rules import DEFAULT_MAX_WITNESS_AGE, WitnessRequirement
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.cosignature import WitnessKey
from compute_budget.core.log.key_states import KeyStates
from compute_budget.core.log.note import VerifierKey, valid_origin
from compute_budget.core.log.witness_policy import TlogPolicy
from compute_budget.errors import ArgumentTypeError, clip
from compute_budget.keys.key_files import verifier_key


@dataclass(frozen=True, slots=True)
class AuditRequest:
    """The store to audit and the options of `compute_budget.audit`, which says what each one does.

    `trusted_keys`, `witness_keys`: verifier and witness keys, their text or files holding them.
    `witnessed_checkpoints`: what witnesses served (`--witness-url`), each a note or a (source, note) pair.
    `look_back`: N of spec 9.9.7 (0: off); `look_back_day` overrides the UTC day number of the audit's start.
    `target`: a database's path or URL, or a source's location (a `publication.snapshot.PublicationTarget`: audit
    a published log, spec 10.2), opened once; `source`: a source opened already, read instead (the caller closes
    it: the command line opens its source once).
    """

    target: str | os.PathLike[str] | SourceLocation | None = None
    checkpoint: CheckpointLike | None = None
    since: CheckpointLike | None = None
    jobs: int | Literal["auto"] = 1
    on_progress: Callable[[int, int], None] | None = None
    trusted_keys: tuple[VerifierKey | str | os.PathLike[str], ...] = ()
    all_signatures: bool = False
    through: int | None = None
    expected_origin: str | None = None
    witness_keys: tuple[WitnessKey | str | os.PathLike[str], ...] = ()
    witness_quorum: int | None = None
    max_witness_age: int = DEFAULT_MAX_WITNESS_AGE
    witnessed_checkpoints: tuple[WitnessAnswer, ...] = ()
    since_head: HeadLike | None = None
    look_back: int = 0
    look_back_day: int | None = None
    key_states: KeyStates = field(default_factory=KeyStates)  # --retired / --revoked: which signatures count
    # A publication's audit (spec 10.2): the --witness-url witnesses' keys, whose cosignatures on the published
    # checkpoint say how fresh it is.
    freshness_keys: tuple[WitnessKey | str | os.PathLike[str], ...] = ()
    # A C2SP tlog-policy (`--policy`): its witnesses, groups and quorum instead of witness_keys/witness_quorum, and
    # its `log` keys beside trusted_keys.
    witness_policy: TlogPolicy | None = None
    source: AuditSource | None = None
    # Seconds the rows above the newest trusted checkpoint wait for a covering one (spec 12.5); None:
    # `$COMPUTE_BUDGET_ATTEST_WAIT`, else `DEFAULT_ATTEST_WAIT`.
    attest_wait: float | None = None


@dataclass(frozen=True, slots=True)
class AuditInputs:
    """A request's inputs, parsed and checked before the store opens."""

    checkpoint: Checkpoint | None
    since: Checkpoint | None
    answers: list[tuple[str, Checkpoint | str]]  # the witnesses' answers, each with its source
    keys: list[VerifierKey]
    policy: WitnessRequirement | None
    day: int  # the UTC day number the look-back is due for
    head: HeadNote | None
    checkpoint_label: str  # what findings call the given checkpoint
    attest_wait: float = 0.0  # seconds, resolved (`attest_wait_seconds`)


def parse_inputs(request: AuditRequest, head: HeadNote | None, checkpoint_label: str) -> AuditInputs:
    """The request's options checked and parsed, in the order their errors are said."""
    jobs, expected_origin = request.jobs, request.expected_origin
    if jobs != "auto" and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise ArgumentTypeError(f"jobs is a positive integer or 'auto', not {jobs!r}")
    if expected_origin is not None and not valid_origin(expected_origin):
        raise ArgumentTypeError(f"origin {expected_origin!r} is not a log origin (1 to 128 printable ASCII, no '+')")
    day = request.look_back_day if request.look_back_day is not None else day_number(time.time())
    check_look_back(request.look_back, day, request.since)
    checkpoint = as_checkpoint(request.checkpoint) if request.checkpoint is not None else None
    since = as_checkpoint(request.since) if request.since is not None else None
    answers = [witness_answer(index, item) for index, item in enumerate(request.witnessed_checkpoints)]
    keys = unique_keys(verifier_key(item) for item in request.trusted_keys)
    policy = witness_policy(
        request.witness_keys, request.witness_quorum, request.max_witness_age, request.witness_policy
    )
    wait = attest_wait_seconds(request.attest_wait)
    return AuditInputs(checkpoint, since, answers, keys, policy, day, head, checkpoint_label, wait)


ATTEST_WAIT_ENV_VAR = "COMPUTE_BUDGET_ATTEST_WAIT"
DEFAULT_ATTEST_WAIT = 5.0
MAX_ATTEST_WAIT = 86400.0  # a day: a nightly job must end even when told to wait for a writer that is gone


def attest_wait_seconds(value: float | None) -> float:
    """The attest wait (spec 12.5): `value`, else `$COMPUTE_BUDGET_ATTEST_WAIT`, else `DEFAULT_ATTEST_WAIT`;
    `ArgumentTypeError` for anything but a number of seconds from 0 to `MAX_ATTEST_WAIT`."""
    where, shown = "attest_wait", repr(value)
    if value is None:
        text = os.environ.get(ATTEST_WAIT_ENV_VAR, "").strip()
        if not text:
            return DEFAULT_ATTEST_WAIT
        where, shown = f"${ATTEST_WAIT_ENV_VAR}", repr(clip(text, 40))
        try:
            value = float(text)
        except ValueError:
            value = math.nan
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_ATTEST_WAIT:
        raise ArgumentTypeError(f"{where} is a number of seconds from 0 to {MAX_ATTEST_WAIT:.0f}, not {shown}")
    return float(value)
