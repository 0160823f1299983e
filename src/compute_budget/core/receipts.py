"""Proof bundles and consistency documents (spec section 8), and their offline verification. Pure.

A proof bundle (``compute_budget.proof.v1``) makes one stored decision a portable, self-verifying receipt:

    {"format": "compute_budget.proof.v1",
     "row": {the 17 leaf keys and "chain_hash", with the row's logical values},
     "leaf_index": seq - 1, "tree_size": N,
     "inclusion": [lowercase hex hashes, RFC 9162 order (leaf end first)],
     "checkpoint": "the checkpoint note of size N, with its signature lines"}

`verify_proof` checks, in this order: a trusted signature on the note (and its origin, when one is required);
the inclusion path from the row's leaf to the note's root; the chain hash when the row is the note's last (any
other row's is not covered, spec 9.6: `prove` leaves it out, and a bundle carrying one is told so); and the row
re-derived from its ``gate_input`` as the audit does (``budget_id`` recomputed, every field but ``explanation``
compared, ``max_wallclock_ms`` null under v1). Reading is strict: a key named twice at any depth, an unknown
top-level key, or any value of the wrong type or range is `MalformedProof`, never an internal error.

A consistency document (``compute_budget.consistency.v1``) proves a newer tree extends an older one:
``origin``, ``old_size``, ``old_root``, ``new_size``, ``new_root`` (roots in standard base64, as in checkpoint
notes) and ``proof`` (lowercase hex hashes, RFC 9162).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compute_budget.core.chain import CHAINED_COLUMNS
from compute_budget.core.leaf import row_leaf_hash
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.cosignature import WitnessKey, valid_cosignatures
from compute_budget.core.log.merkle import EMPTY_ROOT, verify_inclusion
from compute_budget.core.log.merkle import verify_consistency as merkle_verify_consistency
from compute_budget.core.log.note import VerifierKey, valid_origin
from compute_budget.core.row import ROW_COLUMNS
from compute_budget.core.seal_checks import trusted_signers
from compute_budget.core.verify import FindingKind, RangeResult, check_row
from compute_budget.errors import CheckpointError, MalformedProof, NoteError

PROOF_FORMAT = "compute_budget.proof.v1"
CONSISTENCY_FORMAT = "compute_budget.consistency.v1"
_HEX_HASH = re.compile(r"[0-9a-f]{64}")
_BUNDLE_KEYS = ("format", "row", "leaf_index", "tree_size", "inclusion", "checkpoint")
_INTEGER_COLUMNS = frozenset({"seq", "max_candidates", "max_depth", "max_steps", "max_parallelism"})
MAX_PROOF_HASHES = 64  # a tree of 2**64 leaves needs no more
# The stored integer columns are 64-bit: a bundle's integers outside that range are no row's.
MIN_STORED_INTEGER, MAX_STORED_INTEGER = -(2**63), 2**63 - 1
# Stands in for a chain hash a bundle leaves out (a row that is not the last leaf): re-derivation ignores chains.
_UNCOVERED_CHAIN = "0" * 64


def row_from_values(values: Sequence[Any]) -> dict[str, Any]:
    """A stored row (values in `row.ROW_COLUMNS` order) as the bundle's ``row`` object."""
    return dict(zip(ROW_COLUMNS, values, strict=True))


def _count(value: object) -> bool:
    return type(value) is int and value >= 0


def _hashes(value: object, what: str) -> tuple[bytes, ...]:
    if not isinstance(value, list) or len(value) > MAX_PROOF_HASHES:
        raise MalformedProof(f"{what} must be a list of at most {MAX_PROOF_HASHES} hex hashes")
    if not all(isinstance(item, str) and _HEX_HASH.fullmatch(item) for item in value):
        raise MalformedProof(f"{what} must hold 64-digit lowercase hex hashes")
    return tuple(bytes.fromhex(item) for item in value)


class _DuplicateKey(ValueError):
    """A JSON object that names one key twice (spec 9.6: refused, whichever value a parser would keep)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for key, item in pairs:
        if key in document:
            raise _DuplicateKey(key)
        document[key] = item
    return document


def _loads(value: object, what: str) -> dict[str, Any]:
    """A JSON object from a mapping, JSON text or bytes; a key named twice at any depth is refused."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str | bytes):
        try:
            loaded = json.loads(value, object_pairs_hook=_unique_keys)
        except _DuplicateKey as duplicate:
            raise MalformedProof(f"the {what} names the key {_quoted(str(duplicate))} twice in one object") from None
        except (ValueError, UnicodeDecodeError) as error:
            raise MalformedProof(f"the {what} is not JSON ({error})") from None
        except RecursionError:  # arrays or objects nested thousands deep: no bundle nests more than 3
            raise MalformedProof(f"the {what} is not a proof bundle (its JSON nests too deeply)") from None
        if isinstance(loaded, dict):
            return loaded
    raise MalformedProof(f"the {what} is not a JSON object")


def _what_is_wrong(name: str, item: object) -> str:
    """Why `item` is no value of column `name`: the type it should have had, or what is wrong with it."""
    wanted = "an integer" if name in _INTEGER_COLUMNS or name == "max_wallclock_ms" else "text"
    if name == "max_wallclock_ms":
        wanted = "an integer or null"
    if isinstance(item, bool) or not isinstance(item, str | int):
        return f"of type {type(item).__name__}: it must be {wanted}"
    if isinstance(item, str) and wanted == "text":
        return "as text that is not valid Unicode"
    if isinstance(item, int) and wanted != "text":
        return "as an integer out of range (-2**63 to 2**63-1)"
    return f"as {'text' if isinstance(item, str) else 'an integer'}: it must be {wanted}"


def _quoted(text: str, limit: int = 40) -> str:
    """Untrusted text for a one-line message: ASCII-escaped and cut, so it can neither drive a terminal nor
    break the line."""
    cut = text if len(text) <= limit else text[:limit] + "..."
    return json.dumps(cut)


def _valid_text(text: str) -> bool:
    """Text that is valid Unicode (JSON's \\ud800 escapes can carry lone surrogates, which no UTF-8 holds)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class ProofBundle:
    """A decision's proof of inclusion: its `row`, `leaf_index`, the `tree_size`, the `inclusion` path and the
    `checkpoint` note (signed, or the bare note text) whose root it leads to."""

    row: dict[str, Any]
    leaf_index: int
    tree_size: int
    inclusion: tuple[bytes, ...]
    checkpoint: str

    @property
    def budget_id(self) -> Any:
        """The row's budget_id, as the bundle has it."""
        return self.row.get("budget_id")

    @property
    def seq(self) -> Any:
        """The row's seq, as the bundle has it."""
        return self.row.get("seq")

    def to_dict(self) -> dict[str, Any]:
        """The bundle as JSON."""
        return {
            "format": PROOF_FORMAT,
            "row": dict(self.row),
            "leaf_index": self.leaf_index,
            "tree_size": self.tree_size,
            "inclusion": [item.hex() for item in self.inclusion],
            "checkpoint": self.checkpoint,
        }

    def to_json(self) -> str:
        """The bundle as indented JSON text (a receipt people may read)."""
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=2)

    @classmethod
    def parse(cls, value: ProofBundle | Mapping[str, Any] | str | bytes) -> ProofBundle:
        """Read a bundle strictly; `MalformedProof` says what is missing or of the wrong type."""
        if isinstance(value, ProofBundle):
            return value
        document = _loads(value, "proof bundle")
        if document.get("format") != PROOF_FORMAT:
            raise MalformedProof(f"not a proof bundle (format {PROOF_FORMAT!r})")
        missing = [name for name in _BUNDLE_KEYS if name not in document]
        if missing:
            raise MalformedProof(f"incomplete proof bundle: {', '.join(missing)} missing")
        unknown = sorted(set(document) - set(_BUNDLE_KEYS))
        if unknown:
            raise MalformedProof(f"the proof bundle has an unknown key {_quoted(unknown[0])}")
        row = document["row"]
        if not isinstance(row, dict):
            raise MalformedProof("the bundle's row is not an object")
        absent = [name for name in CHAINED_COLUMNS if name not in row]
        extra = sorted(set(row) - set(ROW_COLUMNS))
        if absent or extra:
            problem = (f"missing {', '.join(absent)}" if absent else "") + (
                f"{'; ' if absent else ''}unexpected {', '.join(_quoted(name) for name in extra)}" if extra else ""
            )
            raise MalformedProof(f"the bundle's row must have the 17 leaf keys (and chain_hash): {problem}")
        for name in ROW_COLUMNS:
            if name not in row:
                continue  # chain_hash: checked below, against where the row sits
            item = row[name]
            if name in _INTEGER_COLUMNS:
                ok = type(item) is int and MIN_STORED_INTEGER <= item <= MAX_STORED_INTEGER
            elif name == "max_wallclock_ms":
                ok = item is None or (type(item) is int and MIN_STORED_INTEGER <= item <= MAX_STORED_INTEGER)
            else:
                ok = isinstance(item, str) and _valid_text(item)
            if not ok:
                raise MalformedProof(f"the bundle's row has {name} {_what_is_wrong(name, item)}")
        if not 1 <= row["seq"] <= MAX_STORED_INTEGER:
            raise MalformedProof(f"the bundle's row has seq {row['seq']}: a seq is from 1 to 2**63-1")
        leaf_index, tree_size = document["leaf_index"], document["tree_size"]
        if not (_count(leaf_index) and _count(tree_size) and max(leaf_index, tree_size) <= MAX_STORED_INTEGER):
            raise MalformedProof("leaf_index and tree_size must be integers from 0 to 2**63-1")
        if "chain_hash" in row and not (isinstance(row["chain_hash"], str) and _HEX_HASH.fullmatch(row["chain_hash"])):
            raise MalformedProof("the bundle's row has a chain_hash that is not 64 lowercase hex digits")
        if "chain_hash" not in row and row["seq"] == tree_size:
            raise MalformedProof("the bundle's row is the tree's last leaf but has no chain_hash")
        if not isinstance(document["checkpoint"], str) or not _valid_text(document["checkpoint"]):
            raise MalformedProof("the bundle's checkpoint must be a checkpoint note (text)")
        ordered = {name: row[name] for name in ROW_COLUMNS if name in row}
        inclusion = _hashes(document["inclusion"], "inclusion")
        return cls(ordered, leaf_index, tree_size, inclusion, document["checkpoint"])


@dataclass(frozen=True, slots=True)
class ProofVerification:
    """The outcome of `verify_proof`: `valid`, else the `check` that failed (``signature``, ``origin``,
    ``witness``, ``inclusion``, ``chain`` or ``rederive``); `message` is one line either way."""

    valid: bool
    check: str | None
    message: str
    budget_id: str
    seq: int
    origin: str
    tree_size: int
    signers: tuple[str, ...]


def verify_proof(
    bundle: ProofBundle | Mapping[str, Any] | str | bytes,
    trusted_keys: Iterable[VerifierKey | str],
    *,
    origin: str | None = None,
    witnesses: Sequence[WitnessKey] = (),
    quorum: int | None = None,
    now: int | None = None,
) -> ProofVerification:
    """Check a proof bundle offline (see the module docstring). Raises `MalformedProof` for a bundle that cannot
    be read or lacks a part, and `NoteError` for a key that is not a verifier key; a bundle that is complete but
    wrong is `valid=False`, with the failing check named.

    With `witnesses` (spec 9.3) the checkpoint must also carry valid cosignatures by `quorum` of them (default:
    all), judged at `now` (seconds since the epoch; required with witnesses, since the core reads no clock);
    else the failing check is ``witness``. A writer's signature never counts as a cosignature."""
    distinct = tuple(dict.fromkeys(witnesses))
    if distinct and now is None:
        raise ValueError("verify_proof(witnesses=...) needs now= (seconds since the epoch) to judge timestamps")
    need = len(distinct) if quorum is None else quorum
    if distinct and not 1 <= need <= len(distinct):
        raise ValueError(f"the witness quorum must be 1..{len(distinct)}, not {need}")
    proof = ProofBundle.parse(bundle)
    keys = [key if isinstance(key, VerifierKey) else VerifierKey.parse(key) for key in trusted_keys]
    try:
        checkpoint = Checkpoint.from_note(proof.checkpoint, source="the bundle's checkpoint")
    except CheckpointError as error:
        raise MalformedProof(str(error)) from None
    assert checkpoint.origin is not None
    assert checkpoint.root is not None
    row = proof.row
    budget_id, seq = row["budget_id"], row["seq"]

    def outcome(check: str | None, message: str, signers: Iterable[VerifierKey] = ()) -> ProofVerification:
        names = tuple(f"{key.name}+{key.key_hash:08x}" for key in signers)
        return ProofVerification(
            check is None, check, message, budget_id, seq, str(checkpoint.origin), checkpoint.seq, names
        )

    signed = bool(checkpoint.signatures())
    try:
        verified, failed = trusted_signers(proof.checkpoint, keys) if signed else ([], [])
    except NoteError as error:
        raise MalformedProof(f"the bundle's checkpoint: {error}") from None
    if failed:
        return outcome("signature", f"the checkpoint's signature by {failed[0].name} does not verify")
    if not verified:
        by = ", ".join(sorted({item.name for item in checkpoint.signatures()})) if signed else ""
        return outcome(
            "signature",
            f"the checkpoint carries no signature by a trusted key ({f'signed by {by}' if by else 'it is unsigned'})",
        )
    if origin is not None and checkpoint.origin != origin:
        return outcome("origin", f"the checkpoint is of log {checkpoint.origin}, not {origin}", verified)
    witnessed = ""
    if distinct:
        assert now is not None
        cosigned = valid_cosignatures(proof.checkpoint, distinct, now=now)
        if len(cosigned) < need:
            return outcome("witness", f"{len(cosigned)} of {need} cosignatures", verified)
        witnessed = f"; witnessed: {len(cosigned)} of {need} cosignatures"  # the quorum checked (issue 28, 12)
    if proof.tree_size != checkpoint.seq:
        return outcome(
            "inclusion", f"the bundle says tree size {proof.tree_size}, its checkpoint {checkpoint.seq}", verified
        )
    if proof.leaf_index != seq - 1 or seq < 1:
        return outcome("inclusion", f"leaf_index {proof.leaf_index} is not the row's seq {seq} minus 1", verified)
    leaf = row_leaf_hash([row[name] for name in CHAINED_COLUMNS])
    if not verify_inclusion(leaf, proof.leaf_index, proof.tree_size, proof.inclusion, checkpoint.root):
        return outcome(
            "inclusion", "the inclusion path from the row's leaf does not lead to the checkpoint's root", verified
        )
    last = seq == checkpoint.seq
    if last and row["chain_hash"] != checkpoint.chain_hash:
        return outcome("chain", "the row is the checkpoint's last but its chain_hash is not the checkpoint's", verified)
    result = RangeResult()
    chain = row.get("chain_hash", _UNCOVERED_CHAIN)
    check_row((*(row[name] for name in CHAINED_COLUMNS), chain), seq - 1, chain, result)
    problems = [finding for finding in result.findings if finding.kind is not FindingKind.CHAIN_BREAK]
    if problems:
        first = problems[0]
        return outcome("rederive", f"{first.kind.value}: {first.detail}", verified)
    signers = ", ".join(f"{key.name}+{key.key_hash:08x}" for key in verified)
    # Spec 9.6: only the last leaf's chain hash is named by the note; any other is the bundle's word alone.
    uncovered = "; chain_hash not covered (only the tree's last row's is)" if not last and "chain_hash" in row else ""
    return outcome(
        None,
        f"valid: budget_id {budget_id}, seq {seq}, in {checkpoint.origin} (tree size {checkpoint.seq}), "
        f"signed by {signers}{witnessed}{uncovered}",
        verified,
    )


@dataclass(frozen=True, slots=True)
class ConsistencyProof:
    """A proof that the tree (`new_size`, `new_root`) of log `origin` extends (`old_size`, `old_root`)."""

    origin: str
    old_size: int
    old_root: bytes
    new_size: int
    new_root: bytes
    proof: tuple[bytes, ...]

    def verify(self) -> bool:
        """True iff `proof` shows the new tree extends the old one (RFC 9162 section 2.1.4.2)."""
        if self.old_size == 0:
            return len(self.proof) == 0 and self.old_root == EMPTY_ROOT
        return merkle_verify_consistency(self.old_size, self.new_size, self.old_root, self.new_root, self.proof)

    def to_dict(self) -> dict[str, Any]:
        """The document as JSON."""
        return {
            "format": CONSISTENCY_FORMAT,
            "origin": self.origin,
            "old_size": self.old_size,
            "old_root": base64.b64encode(self.old_root).decode("ascii"),
            "new_size": self.new_size,
            "new_root": base64.b64encode(self.new_root).decode("ascii"),
            "proof": [item.hex() for item in self.proof],
        }

    def to_json(self) -> str:
        """The document as one line of JSON."""
        return json.dumps(self.to_dict())

    @classmethod
    def parse(cls, value: ConsistencyProof | Mapping[str, Any] | str | bytes) -> ConsistencyProof:
        """Read a consistency document strictly; `MalformedProof` says what is wrong."""
        if isinstance(value, ConsistencyProof):
            return value
        document = _loads(value, "consistency document")
        if document.get("format") != CONSISTENCY_FORMAT:
            raise MalformedProof(f"not a consistency document (format {CONSISTENCY_FORMAT!r})")
        origin = document.get("origin")
        if not valid_origin(origin):
            raise MalformedProof("the consistency document's origin is not a valid origin")
        old_size, new_size = document.get("old_size"), document.get("new_size")
        if not (isinstance(old_size, int) and isinstance(new_size, int) and _count(old_size) and _count(new_size)):
            raise MalformedProof("old_size and new_size must be non-negative integers")
        roots = [_root(document.get(name), name) for name in ("old_root", "new_root")]
        return cls(str(origin), old_size, roots[0], new_size, roots[1], _hashes(document.get("proof"), "proof"))


def verify_consistency(
    document: ConsistencyProof | Mapping[str, Any] | str | bytes,
    *,
    old: Checkpoint | None = None,
    new: Checkpoint | None = None,
) -> bool:
    """True iff the consistency document's proof holds and, when given, the `old` and `new` checkpoints are the
    ones it names (same origin, size and root). `MalformedProof` for a document that cannot be read."""
    proof = ConsistencyProof.parse(document)
    for checkpoint, size, root in ((old, proof.old_size, proof.old_root), (new, proof.new_size, proof.new_root)):
        if checkpoint is not None and (
            checkpoint.origin != proof.origin or checkpoint.seq != size or checkpoint.root != root
        ):
            return False
    return proof.verify()


def _root(value: object, name: str) -> bytes:
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) == 32 and base64.b64encode(raw).decode("ascii") == value:
            return raw
    raise MalformedProof(f"{name} must be the standard base64 of a 32-byte hash")



