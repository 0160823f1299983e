"""Every error compute-budget raises on purpose: one root, one subclass per thing a caller can act on."""

from __future__ import annotations

from enum import StrEnum


class ComputeBudgetError(Exception):
    """Root of every compute-budget error; the CLI catches this once and prints its message."""


class InputError(ComputeBudgetError):
    """What a caller handed over cannot be used: a gate, a decision, an input or output file."""


class StoreError(ComputeBudgetError):
    """The store cannot be used as asked: unavailable, damaged, read-only, or a conflicting gate."""


class AuditError(ComputeBudgetError):
    """An audit, a checkpoint or a copy cannot be carried out as asked."""


class ArgumentTypeError(InputError, TypeError):
    """An argument of a type the function cannot take (a programming error, still under the one root)."""


class MalformedGate(InputError, ValueError):
    """A gate breaks a well-formedness rule of spec section 3.1; `rule` names it (for example ``"3.1.5"``)."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"malformed gate decision (rule {rule}): {message}")
        self.rule = rule
        self.message = message


class MalformedDecision(InputError, ValueError):
    """A stored or supplied `ComputeBudgetDecision` JSON form has missing keys or wrong types."""


class InputNotJson(InputError, ValueError):
    """Gate text that is not JSON at all (an input error, unlike JSON that is not a gate).

    `incomplete` is True when the text broke off mid-value, so more lines might complete it.
    """

    def __init__(
        self, message: str, *, incomplete: bool = False, reason: str | None = None, line: int = 1, column: int = 1
    ) -> None:
        super().__init__(message)
        self.incomplete = incomplete
        self.reason = reason or message
        self.line = line
        self.column = column


class RefusalReason(StrEnum):
    """Why `admit` refused a decision (spec section 4)."""

    STATUS_NOT_ALLOWED = "status_not_allowed"
    LIMITS_EXHAUSTED = "limits_exhausted"
    BUDGET_ID_MISMATCH = "budget_id_mismatch"
    UNSUPPORTED_POLICY_VERSION = "unsupported_policy_version"
    GATE_REDERIVE_MISMATCH = "gate_rederive_mismatch"
    LIMITS_INVALID = "limits_invalid"  # spec revision 3


class BudgetRefused(ComputeBudgetError):
    """A consumer must not start a run under this decision; `reason` is a `RefusalReason`."""

    def __init__(self, reason: RefusalReason, message: str) -> None:
        super().__init__(f"budget refused ({reason.value}): {message}")
        self.reason = reason


class UnsupportedPolicyVersion(ComputeBudgetError, LookupError):
    """No policy is registered under the requested version."""


class GateNotSerializable(InputError, ValueError):
    """A Python gate that cannot be stored as JSON faithfully enough to re-derive its decision."""


class GateTooLarge(InputError, ValueError):
    """A gate whose stored row's leaf input would exceed 65,535 bytes (spec 9.9.8): no C2SP entry bundle could
    carry it, so it is refused and nothing of its batch is written. `line` is where it starts in its input (None
    for a Python gate), `index` its 0-based place in the batch, `size` the leaf input's size in bytes."""

    def __init__(
        self, budget_id: str, size: int, limit: int, *, index: int, line: int | None = None, where: str | None = None
    ) -> None:
        at = where or (f"on input line {line}" if line is not None else f"number {index + 1} of the batch")
        super().__init__(
            f"the gate {at} is too large: its row would be {size:,} bytes as a leaf of the log, over the "
            f"{limit:,} a published entry can carry; shorten it (budget_id {budget_id}); nothing was written"
        )
        self.budget_id = budget_id
        self.size = size
        self.limit = limit
        self.index = index
        self.line = line


class GateConflict(StoreError):
    """The same `budget_id` is already stored with a different gate; nothing was written."""

    def __init__(
        self,
        budget_id: str,
        stored_gate: str,
        new_gate: str,
        differing: tuple[str, ...] = (),
        line: int | None = None,
    ) -> None:
        where = f" (they differ in {', '.join(differing)})" if differing else ""
        at = f" on input line {line}" if line is not None else ""
        super().__init__(
            f"conflict: budget_id {budget_id} is already recorded (in the store or earlier in this batch) with gate "
            f"{clip(stored_gate)}; refusing the different gate{at} {clip(new_gate)}{where}; nothing was written"
        )
        self.line = line
        self.differing = differing
        self.budget_id = budget_id
        self.stored_gate = stored_gate
        self.new_gate = new_gate


class StoreUnavailable(StoreError):
    """The database cannot be opened or used (missing, not SQLite, read-only, server down, disk full ...)."""


class NotABudgetStore(StoreUnavailable):
    """The database exists but is not a compute-budget store (foreign tables, unknown revision)."""


class NoHistory(StoreUnavailable):
    """The database holds no decisions table: empty, or the table was dropped (`dropped`); with a checkpoint
    given, the audit reports that history as gone rather than stopping."""

    def __init__(self, message: str, *, where: str, dropped: bool) -> None:
        super().__init__(message)
        self.where = where
        self.dropped = dropped


class SchemaBehindHead(StoreUnavailable):
    """The store's schema is older than this release; `compute-budget migrate` brings it to head."""


class DestinationNotEmpty(StoreError):
    """`copy` writes a history only into an empty store."""


class CopyVerificationFailed(AuditError):
    """A source row failed verification during `copy`; nothing was written to the destination."""


class StoreDamaged(StoreError):
    """A row the store itself needs (its chain head, a row to show) cannot be read: it was tampered with."""


class UnsignedAppendRefused(StoreError):
    """An append without a signing key to a store that holds signed checkpoints (spec 9.1): it would leave rows no
    writer signed. `allow_unsigned=True` (`record --unsigned`) appends anyway."""


class RepairNotAcknowledged(StoreError):
    """`migrate` repaired the store (spec 9.9.10) and no writer acknowledged it: appends are refused until
    `record --after-repair REPAIR_ID` (`record_many(..., after_repair=REPAIR_ID)`), after a full audit.
    `repair_id` names the repair."""

    def __init__(self, message: str, *, repair_id: int) -> None:
        super().__init__(message)
        self.repair_id = repair_id


class WriterStateError(StoreError):
    """The writer state file (spec 9.1, rule 2) cannot be used as it is: the message names the file."""


class KeyRetired(StoreError):
    """A writer key asked to sign after a handover retired it (`compute-budget rotate`), or one the operator
    retired or revoked: nothing is signed; the message names the handover or the option."""


class ReadOnlyStore(StoreError):
    """A write was attempted through a store opened with ``readonly=True``."""


class StoreClosed(StoreError):
    """A method was called on a `BudgetStore` after `close()` (or after its `with` block ended)."""


class WitnessTimeout(StoreError):
    """`record(..., wait="witnessed")` (spec 12.4): no checkpoint covering the row carried the witness quorum within
    `witness_timeout`. The row stays recorded: `result` is its `RecordResult` (or `BatchResult`), `cosigned` says how
    many witnesses cosigned a covering checkpoint, as "N of K"."""

    def __init__(self, message: str, *, result: object, cosigned: str) -> None:
        super().__init__(message)
        self.result = result
        self.cosigned = cosigned


class CheckpointError(AuditError, ValueError):
    """A checkpoint document cannot be read or is not a compute-budget checkpoint."""


class InputUnreadable(InputError):
    """An INPUT path is missing, a folder, or cannot be read."""


class OutputUnwritable(InputError):
    """A report or checkpoint file cannot be written where it was asked for (nothing was left half-written)."""


class MerkleError(AuditError, ValueError):
    """A tree request that cannot be answered: an index or sizes out of range, a missing node, a bad saved state."""


class NoteError(InputError, ValueError):
    """A key, signed note or checkpoint that is malformed or cannot be used; the message says which and why."""


class KeyStateError(InputError, ValueError):
    """A `--retired KEY@SIZE` or `--revoked KEY@SIZE:ROOT` that cannot be used; the message names the option."""


def clip(text: str, limit: int = 160) -> str:
    """`text` on one line and at most `limit` characters, for messages and finding details about huge values."""
    flat = text.replace("\n", " ")
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class ProofError(AuditError):
    """A proof cannot be made as asked: a checkpoint that does not cover the row, or is of another store."""


class UntrustedCheckpoint(ProofError):
    """A publication's checkpoint that does not count (`prove --tiles`, spec 11.2; `serve --tiles` shows nothing
    from it): no trusted signature that counts, another log's, or short of the witness quorum; one line starting
    `untrusted checkpoint:` or `checkpoint of another log:`."""


class UnknownBudgetId(ProofError, LookupError):
    """No decision with this budget_id is stored (nothing to prove)."""


class MalformedProof(InputError, ValueError):
    """A proof bundle or consistency document that cannot be read or lacks a part; the message says which."""


class MalformedTlogProof(MalformedProof):
    """A C2SP tlog-proof that does not follow the format (header, extra, index, hashes, checkpoint); the message
    names the line and what is wrong with it."""


class NotConsistent(AuditError):
    """The store does not extend an older checkpoint; `reason` is ``origin``, ``untrusted``, ``truncated`` or
    ``rewritten``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"does not extend the old checkpoint ({reason}): {message}")
        self.reason = reason
        self.detail = message


class TileError(AuditError, ValueError):
    """A C2SP tlog-tiles tile, entry bundle or tile path that cannot be used; `path` names it ("" when it has none).

    The audit of a publication turns the subclasses into findings or exit 2; each message is one line.
    """

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


class BadTilePath(TileError):
    """A tile or entry bundle path that is not in the canonical C2SP form (`tile/<L>/<N>[.p/<W>]`)."""


class MalformedTile(TileError):
    """A hash tile whose bytes are not exactly 32 per hash of its width."""


class TileMismatch(TileError):
    """A hash tile that does not hash to the entry its parent tile (or the checkpoint's root) holds for it."""


class TileMissing(TileError, LookupError):
    """A tile the requested hash or proof needs is not in the publication."""


class MalformedEntryBundle(TileError):
    """An entry bundle with a length prefix running past its end, too few entries for its width or trailing bytes."""


class EntryTooLarge(TileError):
    """An entry over 65,535 bytes, which no entry bundle can hold; `index` is its 0-based leaf index (seq - 1)."""

    def __init__(self, message: str, *, index: int, path: str = "") -> None:
        super().__init__(message, path=path)
        self.index = index


# C2SP tlog-policy files (`--policy`): one family, so the CLI turns every one into exit 2 and one line.
class PolicyProblem(StrEnum):
    """What is wrong with a witness policy (C2SP tlog-policy); `PolicyError.problem` names it."""

    CHARACTER = "character"  # a byte the format does not allow (a control character other than tab and newline)
    NO_FINAL_NEWLINE = "no_final_newline"
    UNKNOWN_KEYWORD = "unknown_keyword"
    FIELDS = "fields"  # too few or too many fields for the line's keyword
    BAD_KEY = "bad_key"
    BAD_URL = "bad_url"
    BAD_THRESHOLD = "bad_threshold"  # not `all`, `any` or a decimal number
    THRESHOLD_RANGE = "threshold_range"  # k outside 1..the number of members
    DUPLICATE_NAME = "duplicate_name"  # a witness or group name defined twice, or `none` defined
    UNDEFINED_NAME = "undefined_name"  # a member or quorum naming nothing defined on a line above
    NONE_MEMBER = "none_member"
    MEMBER_TWICE = "member_twice"  # a name listed as a group member more than once in the file
    DUPLICATE_KEY = "duplicate_key"  # two log lines, or two witness lines, with one public key
    QUORUM_MISSING = "quorum_missing"
    QUORUM_TWICE = "quorum_twice"
    ORIGIN_MISMATCH = "origin_mismatch"  # a log key whose name is not the store's origin
    SHORTHAND = "shorthand"  # `--witness-key`/`--witness-quorum` that make no policy
    UNREADABLE = "unreadable"  # a policy file that cannot be read (missing, a folder, a pipe, too large)


class PolicyError(InputError, ValueError):
    """A witness policy that cannot be used; `problem` says why and `line` is the file's 1-based line number it is
    about (None when no one line is: a missing quorum, the `--witness-key` shorthand). One line, starting
    ``line N:``."""

    def __init__(self, problem: PolicyProblem, message: str, *, line: int | None = None) -> None:
        super().__init__(f"line {line}: {message}" if line is not None else message)
        self.problem = problem
        self.line = line
        self.detail = message


class MalformedPolicy(PolicyError):
    """A policy file that does not follow C2SP tlog-policy, or `--witness-key`/`--witness-quorum` that make no
    policy."""


class PolicyOriginMismatch(PolicyError):
    """A policy's `log` line whose key name is not the store's origin: C2SP requires a log key to be named after the
    log's origin, so the store's writer key must be made with `compute-budget keygen ORIGIN`."""


class PublicationUnavailable(StoreUnavailable):
    """A published log (spec section 10) cannot be read as one: a missing tile, bundle or checkpoint, a server that
    answers too slowly, too much or with HTML, or a file of the wrong size (`audit --tiles`, `prove --tiles`:
    exit 2)."""


class PublicationMissing(PublicationUnavailable):
    """The publication has no such file (a 404, or no such file in the folder)."""


# What stops `publish` from running (exit 2), each one actionable line. Results a person must look at (the audit's
# findings, `bad_signature`, `published_mismatch`) are not errors: they come back in `PublishOutcome` (exit 1).
class PublishError(ComputeBudgetError):
    """A publication cannot be written as asked; nothing was written."""


class PublishFolderRefused(PublishError, InputError):
    """DIR cannot be used: not a folder, a symbolic link inside it, a file that cannot be read or written."""


class PublishBusy(PublishError):
    """Another `publish` holds DIR/.publish.lock."""


class PublishNoRoom(PublishError):
    """DIR's filesystem refused a write for lack of room (no space, no inode, a quota, a file size limit): DIR still
    holds the previous publication."""


class NothingToPublish(PublishError, StoreError):
    """The store holds no checkpoint that verifies under a trusted key (and, with witness keys, carries K valid
    cosignatures)."""


class EntryTooLong(PublishError, StoreError):
    """A row whose leaf input is over 65,535 bytes (recorded before spec 9.9.8) cannot be a C2SP entry."""

    def __init__(self, message: str, *, seq: int) -> None:
        super().__init__(message)
        self.seq = seq


class CannotListen(ComputeBudgetError):
    """A server cannot listen on the address asked for (the port is in use, or the host is unknown)."""


# Two signals inside the HTTP servers, each answered there (a bare 400, a page saying which parameter): never raised
# to a caller, so not under the root.
class ClientGone(Exception):
    """The client closed its connection before its whole request body arrived: nothing is done and nothing can be
    answered (the servers reply with a bare 400 nobody reads, instead of logging a traceback)."""


class BadQuery(ValueError):
    """A query parameter of the Workbench's decisions page that cannot be used (the page says which, status 400)."""
