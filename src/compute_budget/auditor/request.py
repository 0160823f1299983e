"""`AuditRequest`: what one audit is asked to do, built once by its caller (the command line, or `audit` from its
keywords) and read by every room of the audit, so the options are written out in one place."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from compute_budget.auditor.checkpoints import CheckpointLike, HeadLike, WitnessAnswer
from compute_budget.auditor.witness_rules import DEFAULT_MAX_WITNESS_AGE
from compute_budget.core.log.cosignature import WitnessKey
from compute_budget.core.log.key_states import KeyStates
from compute_budget.core.log.note import VerifierKey
from compute_budget.publication.snapshot import PublicationTarget


@dataclass(frozen=True, slots=True)
class AuditRequest:
    """The store to audit and the options of `compute_budget.audit`, which says what each one does.

    `trusted_keys`, `witness_keys`: verifier and witness keys, their text or files holding them.
    `witnessed_checkpoints`: what witnesses served (`--witness-url`), each a note or a (source, note) pair.
    `look_back`: N of spec 9.9.7 (0: off); `look_back_day` overrides the UTC day number of the audit's start.
    `target` a `PublicationTarget`: audit a published log (spec 10.2) instead of a database.
    """

    target: str | os.PathLike[str] | PublicationTarget | None = None
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
