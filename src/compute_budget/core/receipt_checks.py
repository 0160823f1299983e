"""What a receipt's two formats share when it is verified offline (spec 8 and 10.3). Pure.

A ``compute_budget.proof.v1`` bundle and a C2SP tlog-proof carry the same claim in two layouts: a row, its leaf
index, an inclusion path and a checkpoint note. Both are judged by the same rules, kept here once: a row's values
read strictly (`row_problem`), the note's signature, origin and witness quorum (`ReceiptTrust.judge`), and the
row re-derived from its gate input as the audit does (`rederive_problem`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from compute_budget.core.chain import CHAINED_COLUMNS
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.cosignature import WitnessKey, valid_cosignatures
from compute_budget.core.log.key_states import KeyStates, signature_problem, vouches_for_chain
from compute_budget.core.log.note import VerifierKey
from compute_budget.core.log.witness_policy import QuorumTally, TlogPolicy, shown
from compute_budget.core.row import ROW_COLUMNS
from compute_budget.core.seal_checks import trusted_signers
from compute_budget.core.verify import FindingKind, RangeResult, check_row
from compute_budget.errors import CheckpointError, MalformedProof, NoteError

INTEGER_COLUMNS = frozenset({"seq", "max_candidates", "max_depth", "max_steps", "max_parallelism"})
# The stored integer columns are 64-bit: a receipt's integers outside that range are no row's.
MIN_STORED_INTEGER, MAX_STORED_INTEGER = -(2**63), 2**63 - 1
# Stands in for a chain hash a receipt leaves out (a row that is not the last leaf): re-derivation ignores chains.
_UNCOVERED_CHAIN = "0" * 64


def quoted(text: str, limit: int = 40) -> str:
    """Untrusted text for a one-line message: ASCII-escaped and cut, so it can neither drive a terminal nor
    break the line."""
    cut = text if len(text) <= limit else text[:limit] + "..."
    return json.dumps(cut)


def valid_text(text: str) -> bool:
    """Text that is valid Unicode (JSON's \\ud800 escapes can carry lone surrogates, which no UTF-8 holds)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _what_is_wrong(name: str, item: object) -> str:
    """Why `item` is no value of column `name`: the type it should have had, or what is wrong with it."""
    wanted = "an integer" if name in INTEGER_COLUMNS or name == "max_wallclock_ms" else "text"
    if name == "max_wallclock_ms":
        wanted = "an integer or null"
    if isinstance(item, bool) or not isinstance(item, str | int):
        return f"of type {type(item).__name__}: it must be {wanted}"
    if isinstance(item, str) and wanted == "text":
        return "as text that is not valid Unicode"
    if isinstance(item, int) and wanted != "text":
        return "as an integer out of range (-2**63 to 2**63-1)"
    return f"as {'text' if isinstance(item, str) else 'an integer'}: it must be {wanted}"


def _stored_integer(item: object) -> bool:
    return type(item) is int and MIN_STORED_INTEGER <= item <= MAX_STORED_INTEGER


def row_problem(row: Mapping[str, Any], what: str) -> str | None:
    """Why a receipt's `row` (the columns it has, `seq` among them) holds no stored row's values, or None;
    `what` names it in the message (``the bundle's row``)."""
    for name in ROW_COLUMNS:
        if name not in row:
            continue  # which keys must be there is the format's rule (chain_hash depends on where the row sits)
        item = row[name]
        if name in INTEGER_COLUMNS:
            ok = _stored_integer(item)
        elif name == "max_wallclock_ms":
            ok = item is None or _stored_integer(item)
        else:
            ok = isinstance(item, str) and valid_text(item)
        if not ok:
            return f"{what} has {name} {_what_is_wrong(name, item)}"
    if not 1 <= row["seq"] <= MAX_STORED_INTEGER:
        return f"{what} has seq {row['seq']}: a seq is from 1 to 2**63-1"
    return None


def rederive_problem(row: Mapping[str, Any], seq: int) -> str | None:
    """The first way the row (its 17 leaf keys, and `chain_hash` when known) fails re-derivation from its
    ``gate_input`` as the audit checks it (budget_id recomputed, every field but the explanation compared,
    ``max_wallclock_ms`` null under v1), as ``kind: detail``; None when it holds. Chains are not judged here."""
    result = RangeResult()
    chain = row.get("chain_hash", _UNCOVERED_CHAIN)
    check_row((*(row[name] for name in CHAINED_COLUMNS), chain), seq - 1, chain, result)
    problems = [finding for finding in result.findings if finding.kind is not FindingKind.CHAIN_BREAK]
    return f"{problems[0].kind.value}: {problems[0].detail}" if problems else None


@dataclass(frozen=True, slots=True)
class Judgement:
    """A receipt's checkpoint as `ReceiptTrust.judge` found it: the `checkpoint`, the trusted keys whose signature
    verified (`signers`), the `failure` (check, message) if any, and the quorum checked (`witnessed`, for the line)."""

    checkpoint: Checkpoint
    signers: tuple[VerifierKey, ...]
    failure: tuple[str, str] | None
    witnessed: str = ""
    chain_vouched: bool = True  # a signer that does not stand revoked vouches for the `chain` line (spec 11.7.4)

    @property
    def signer_names(self) -> tuple[str, ...]:
        """Each verified signer as ``name+keyhash``."""
        return tuple(f"{key.name}+{key.key_hash:08x}" for key in self.signers)


@dataclass(frozen=True, slots=True)
class ReceiptTrust:
    """Whom a verifier trusts: the writers' `keys`, the log's `origin` (when one is required), the witness
    `policy` (C2SP tlog-policy: its witnesses, groups and quorum; None: no cosignature is required), judged at `now`
    (seconds since the epoch), and the writer keys' `states` (retired, revoked: spec 11)."""

    keys: tuple[VerifierKey, ...]
    origin: str | None = None
    policy: TlogPolicy | None = None
    now: int | None = None
    states: KeyStates = field(default_factory=KeyStates)

    @classmethod
    def of(
        cls,
        keys: Sequence[VerifierKey],
        origin: str | None,
        witnesses: Sequence[WitnessKey],
        quorum: int | None,
        now: int | None,
        policy: TlogPolicy | None = None,
    ) -> ReceiptTrust:
        """The trust of a verifier: `policy`, or `witnesses` with `quorum` of them (default: all) as its one-group
        shorthand. `ValueError` for both at once, a quorum outside 1..N, or witnesses without `now`."""
        if policy is not None and (witnesses or quorum is not None):
            raise ValueError("give a witness policy or witness keys with a quorum, not both")
        if policy is None and (witnesses or quorum is not None):
            if not witnesses:
                raise ValueError("a witness quorum needs witness keys")
            policy = TlogPolicy.from_witness_keys(witnesses, quorum)
        if policy is not None and not policy.requires_witnesses:
            policy = None  # `quorum none`: nothing to check
        if policy is not None and now is None:
            raise ValueError("verify_proof(witnesses=...) needs now= (seconds since the epoch) to judge timestamps")
        return cls(tuple(keys), origin, policy, now)

    @property
    def witnesses(self) -> tuple[WitnessKey, ...]:
        """The policy's witness keys (optional ones included), or () with no policy."""
        return self.policy.witness_keys if self.policy is not None else ()

    def tally(self, note: str) -> QuorumTally | None:
        """What the note's valid cosignatures come to under the policy, or None with no policy."""
        if self.policy is None or self.now is None:
            return None
        cosigned = valid_cosignatures(note, self.policy.witness_keys, now=self.now)
        return self.policy.tally({item.key: item.timestamp for item in cosigned})

    def judge(self, note: str, what: str) -> Judgement:
        """Check the receipt's checkpoint `note` (named `what` in errors): a trusted signature and none that
        fails, the origin, the witness quorum. `MalformedProof` for a note that is no checkpoint."""
        try:
            checkpoint = Checkpoint.from_note(note, source=what)
        except CheckpointError as error:
            raise MalformedProof(str(error)) from None
        signed = bool(checkpoint.signatures())
        try:
            verified, failed = trusted_signers(note, self.keys) if signed else ([], [])
        except NoteError as error:
            raise MalformedProof(f"{what}: {error}") from None
        if failed:
            message = f"the checkpoint's signature by {failed[0].name} does not verify"
            return Judgement(checkpoint, (), ("signature", message))
        if not verified:
            by = ", ".join(sorted({item.name for item in checkpoint.signatures()})) if signed else ""
            why = f"signed by {by}" if by else "it is unsigned"
            message = f"the checkpoint carries no signature by a trusted key ({why})"
            return Judgement(checkpoint, (), ("signature", message))
        signers = tuple(verified)
        limited = self._limited(note, checkpoint, signers)
        if limited is not None:
            return Judgement(checkpoint, signers, ("signature", limited))
        if self.origin is not None and checkpoint.origin != self.origin:
            message = f"the checkpoint is of log {checkpoint.origin}, not {self.origin}"
            return Judgement(checkpoint, signers, ("origin", message))
        vouched = vouches_for_chain(self.states, signers)
        tally = self.tally(note)
        if tally is None or self.policy is None:
            return Judgement(checkpoint, signers, None, chain_vouched=vouched)
        said = self.policy.count_words(tally.counted)
        if tally.verdict.optional:  # asked, reported, never counted (C2SP tlog-policy)
            said += f" (optional: {', '.join(shown(name) for name in tally.verdict.optional)})"
        if not tally.met:
            return Judgement(checkpoint, signers, ("witness", said))
        # The quorum checked is said on the line, so a reader sees which witnesses made it count.
        return Judgement(checkpoint, signers, None, f"; witnessed: {said}", vouched)

    def _limited(self, note: str, checkpoint: Checkpoint, signers: tuple[VerifierKey, ...]) -> str | None:
        """Why a verified signature of a retired or revoked key does not count (spec 11.7.4), or None. Offline, a
        revoked key's checkpoint below its size counts only when the witness quorum cosigned it."""
        states = [self.states.of_key(key) for key in signers]
        if not any(state.status.value != "active" for state in states):
            return None
        tally = self.tally(note)
        quorum = tally is not None and tally.met
        for state in states:
            reason = signature_problem(state, checkpoint.seq, checkpoint.root, proven=quorum)
            if reason is not None:
                return f"the checkpoint's signature by {state.label()} does not count: {reason}"
        return None
