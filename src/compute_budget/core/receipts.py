"""Receipts (spec sections 8 and 10.3) and consistency documents, and their offline verification. Pure.

A receipt makes one stored decision portable and self-verifying, in either of two formats:

* a proof bundle (``compute_budget.proof.v1``, JSON):

      {"format": "compute_budget.proof.v1",
       "row": {the 17 leaf keys and "chain_hash", with the row's logical values},
       "leaf_index": seq - 1, "tree_size": N,
       "inclusion": [lowercase hex hashes, RFC 9162 order (leaf end first)],
       "checkpoint": "the checkpoint note of size N, with its signature lines"}

* a C2SP tlog-proof (`core.log.tlog_proof`), whose ``extra`` data is the row's leaf input and ``index`` its
  seq - 1 (spec 10.3). `verify_proof` tells them apart by the first line.

`verify_proof` checks, in this order: a trusted signature on the note (and its origin, when one is required, and
the witness quorum, when witnesses are given); the inclusion path from the row's leaf to the note's root; for a
bundle, the chain hash when the row is the note's last (any other row's is not covered, spec 9.6: `prove` leaves
it out, and a bundle carrying one is told so; a tlog-proof carries none, and the line always says so); and the row
re-derived from its ``gate_input`` as the audit does (`receipt_checks`, shared by both formats). Reading is strict:
a key named twice at any depth, an unknown top-level key, or any value of the wrong type or range is
`MalformedProof`, never an internal error.

A consistency document (``compute_budget.consistency.v1``) proves a newer tree extends an older one:
``origin``, ``old_size``, ``old_root``, ``new_size``, ``new_root`` (roots in standard base64, as in checkpoint
notes) and ``proof`` (lowercase hex hashes, RFC 9162).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compute_budget.core.chain import CHAINED_COLUMNS
from compute_budget.core.leaf import leaf_input, row_leaf_hash
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.cosignature import WitnessKey
from compute_budget.core.log.encoding import strict_b64decode
from compute_budget.core.log.key_states import KeyStates
from compute_budget.core.log.merkle import EMPTY_ROOT, leaf_hash, verify_inclusion
from compute_budget.core.log.merkle import verify_consistency as merkle_verify_consistency
from compute_budget.core.log.note import VerifierKey, valid_origin
from compute_budget.core.log.tlog_proof import TlogProof, is_tlog_proof
from compute_budget.core.log.witness_policy import TlogPolicy
from compute_budget.core.receipt_checks import (
    MAX_STORED_INTEGER,
    Judgement,
    ReceiptTrust,
    quoted,
    rederive_problem,
    row_problem,
    valid_text,
)
from compute_budget.core.row import ROW_COLUMNS
from compute_budget.errors import MalformedProof

PROOF_FORMAT = "compute_budget.proof.v1"
CONSISTENCY_FORMAT = "compute_budget.consistency.v1"
_HEX_HASH = re.compile(r"[0-9a-f]{64}")
_BUNDLE_KEYS = ("format", "row", "leaf_index", "tree_size", "inclusion", "checkpoint")
MAX_PROOF_HASHES = 64  # a tree of 2**64 leaves needs no more


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
            raise MalformedProof(f"the {what} names the key {quoted(str(duplicate))} twice in one object") from None
        except (ValueError, UnicodeDecodeError) as error:
            raise MalformedProof(f"the {what} is not JSON ({error})") from None
        except RecursionError:  # arrays or objects nested thousands deep: no bundle nests more than 3
            raise MalformedProof(f"the {what} is not a proof bundle (its JSON nests too deeply)") from None
        if isinstance(loaded, dict):
            return loaded
    raise MalformedProof(f"the {what} is not a JSON object")


def _row_keys_problem(row: Mapping[str, Any], required: Iterable[str], allowed: Iterable[str]) -> str | None:
    """Which of the `required` keys the row lacks and which keys outside `allowed` it has, or None."""
    absent = [name for name in required if name not in row]
    extra = sorted(set(row) - set(allowed))
    if not absent and not extra:
        return None
    missing = f"missing {', '.join(absent)}" if absent else ""
    unexpected = f"unexpected {', '.join(quoted(name) for name in extra)}" if extra else ""
    return "; ".join(part for part in (missing, unexpected) if part)


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

    def to_tlog_proof(self) -> TlogProof:
        """The same receipt as a C2SP tlog-proof (spec 10.3): the row's leaf input as ``extra``, ``index`` =
        seq - 1, the same inclusion path and checkpoint note. `MalformedTlogProof` when the note is unsigned
        (a C2SP checkpoint is a signed note)."""
        values = [self.row[name] for name in CHAINED_COLUMNS]
        return TlogProof(self.leaf_index, self.inclusion, self.checkpoint, leaf_input(values))

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
            raise MalformedProof(f"the proof bundle has an unknown key {quoted(unknown[0])}")
        row = document["row"]
        if not isinstance(row, dict):
            raise MalformedProof("the bundle's row is not an object")
        problem = _row_keys_problem(row, CHAINED_COLUMNS, ROW_COLUMNS)
        if problem is not None:
            raise MalformedProof(f"the bundle's row must have the 17 leaf keys (and chain_hash): {problem}")
        problem = row_problem(row, "the bundle's row")
        if problem is not None:
            raise MalformedProof(problem)
        leaf_index, tree_size = document["leaf_index"], document["tree_size"]
        if not (_count(leaf_index) and _count(tree_size) and max(leaf_index, tree_size) <= MAX_STORED_INTEGER):
            raise MalformedProof("leaf_index and tree_size must be integers from 0 to 2**63-1")
        if "chain_hash" in row and not (isinstance(row["chain_hash"], str) and _HEX_HASH.fullmatch(row["chain_hash"])):
            raise MalformedProof("the bundle's row has a chain_hash that is not 64 lowercase hex digits")
        if "chain_hash" not in row and row["seq"] == tree_size:
            raise MalformedProof("the bundle's row is the tree's last leaf but has no chain_hash")
        if not isinstance(document["checkpoint"], str) or not valid_text(document["checkpoint"]):
            raise MalformedProof("the bundle's checkpoint must be a checkpoint note (text)")
        ordered = {name: row[name] for name in ROW_COLUMNS if name in row}
        inclusion = _hashes(document["inclusion"], "inclusion")
        return cls(ordered, leaf_index, tree_size, inclusion, document["checkpoint"])


def entry_row(extra: bytes) -> dict[str, Any]:
    """The row a tlog-proof's ``extra`` data holds (spec 10.3: the row's leaf input, the RFC 8785 object of its
    17 leaf keys), read as strictly as a bundle's row; `MalformedProof` when it is not one."""
    document = _loads(extra, "tlog-proof's entry (its extra data)")
    problem = _row_keys_problem(document, CHAINED_COLUMNS, CHAINED_COLUMNS)
    if problem is not None:
        raise MalformedProof(f"the tlog-proof's entry is not a row's leaf input (the 17 leaf keys): {problem}")
    problem = row_problem(document, "the tlog-proof's entry")
    if problem is not None:
        raise MalformedProof(problem)
    return {name: document[name] for name in CHAINED_COLUMNS}


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


def _outcome(judged: Judgement, row: Mapping[str, Any], check: str | None, message: str) -> ProofVerification:
    checkpoint = judged.checkpoint
    return ProofVerification(
        check is None, check, message, row["budget_id"], row["seq"], str(checkpoint.origin), checkpoint.seq,
        judged.signer_names,
    )


def _valid_line(judged: Judgement, row: Mapping[str, Any], uncovered: str) -> ProofVerification:
    """The one line of a receipt that holds (`uncovered` says what the receipt's signature does not vouch for)."""
    checkpoint = judged.checkpoint
    signers = ", ".join(judged.signer_names)
    return _outcome(
        judged,
        row,
        None,
        f"valid: budget_id {row['budget_id']}, seq {row['seq']}, in {checkpoint.origin} (tree size {checkpoint.seq}), "
        f"signed by {signers}{judged.witnessed}{uncovered}",
    )


def verify_proof(
    bundle: ProofBundle | TlogProof | Mapping[str, Any] | str | bytes,
    trusted_keys: Iterable[VerifierKey | str],
    *,
    origin: str | None = None,
    witnesses: Sequence[WitnessKey] = (),
    quorum: int | None = None,
    now: int | None = None,
    key_states: KeyStates | None = None,
    policy: TlogPolicy | None = None,
) -> ProofVerification:
    """Check a receipt offline (see the module docstring): a proof bundle, or a C2SP tlog-proof (a `TlogProof`,
    or text whose first line names one). Raises `MalformedProof` for a receipt that cannot be read or lacks a
    part (`MalformedTlogProof` for a tlog-proof off the format; ``no entry`` for one without extra data), and
    `NoteError` for a key that is not a verifier key; a receipt that is complete but wrong is `valid=False`,
    with the failing check named.

    With `witnesses` (spec 9.3) the checkpoint must also carry valid cosignatures by `quorum` of them (default:
    all), judged at `now` (seconds since the epoch; required with witnesses, since the core reads no clock);
    else the failing check is ``witness``; `policy` (a C2SP tlog-policy, instead of `witnesses` and `quorum`) says
    which witnesses count in which groups. A writer's signature never counts as a cosignature. `key_states`
    (spec 11.7.4): a signature of a retired or revoked key that does not count fails the ``signature`` check."""
    keys = [key if isinstance(key, VerifierKey) else VerifierKey.parse(key) for key in trusted_keys]
    trust = ReceiptTrust.of(keys, origin, witnesses, quorum, now, policy)
    if key_states is not None:
        trust = dataclasses.replace(trust, states=key_states)
    if isinstance(bundle, TlogProof) or (isinstance(bundle, str | bytes) and is_tlog_proof(bundle)):
        return _verify_tlog_proof(bundle if isinstance(bundle, TlogProof) else TlogProof.parse(bundle), trust)
    return _verify_bundle(ProofBundle.parse(bundle), trust)


def _verify_bundle(proof: ProofBundle, trust: ReceiptTrust) -> ProofVerification:
    """`verify_proof` of a ``compute_budget.proof.v1`` bundle."""
    judged = trust.judge(proof.checkpoint, "the bundle's checkpoint")
    row, checkpoint = proof.row, judged.checkpoint
    if judged.failure is not None:
        return _outcome(judged, row, *judged.failure)
    assert checkpoint.root is not None
    seq = row["seq"]
    if proof.tree_size != checkpoint.seq:
        message = f"the bundle says tree size {proof.tree_size}, its checkpoint {checkpoint.seq}"
        return _outcome(judged, row, "inclusion", message)
    if proof.leaf_index != seq - 1:
        return _outcome(judged, row, "inclusion", f"leaf_index {proof.leaf_index} is not the row's seq {seq} minus 1")
    leaf = row_leaf_hash([row[name] for name in CHAINED_COLUMNS])
    if not verify_inclusion(leaf, proof.leaf_index, proof.tree_size, proof.inclusion, checkpoint.root):
        message = "the inclusion path from the row's leaf does not lead to the checkpoint's root"
        return _outcome(judged, row, "inclusion", message)
    last = seq == checkpoint.seq
    if last and row["chain_hash"] != checkpoint.chain_hash:
        message = "the row is the checkpoint's last but its chain_hash is not the checkpoint's"
        return _outcome(judged, row, "chain", message)
    problem = rederive_problem(row, seq)
    if problem is not None:
        return _outcome(judged, row, "rederive", problem)
    # Spec 9.6: only the last leaf's chain hash is named by the note; any other is the bundle's word alone. Spec
    # 11.7.4: a note only revoked keys signed counts for its size and root, its `chain` line for nothing.
    uncovered = "; chain_hash not covered (only the tree's last row's is)" if not last and "chain_hash" in row else ""
    if last and not judged.chain_vouched:
        uncovered = ("; chain_hash not covered (the checkpoint's chain line is signed by revoked keys only, which "
                     "vouch for its size and root alone)")
    return _valid_line(judged, row, uncovered)


def _verify_tlog_proof(proof: TlogProof, trust: ReceiptTrust) -> ProofVerification:
    """`verify_proof` of a C2SP tlog-proof: ``extra`` is hashed as the leaf at ``index`` (so it is authenticated
    by the inclusion proof, whatever C2SP says of extra data in general) and re-derived (spec 10.3)."""
    if proof.extra is None:
        raise MalformedProof("no entry: the tlog-proof carries no extra data, so there is no row to check")
    row = entry_row(proof.extra)
    judged = trust.judge(proof.checkpoint, "the tlog-proof's checkpoint")
    if judged.failure is not None:
        return _outcome(judged, row, *judged.failure)
    checkpoint = judged.checkpoint
    assert checkpoint.root is not None
    seq = row["seq"]
    if proof.index != seq - 1:
        return _outcome(judged, row, "inclusion", f"index {proof.index} is not the entry's seq {seq} minus 1")
    if not verify_inclusion(leaf_hash(proof.extra), proof.index, checkpoint.seq, proof.hashes, checkpoint.root):
        message = "the inclusion proof from the entry's leaf does not lead to the checkpoint's root"
        return _outcome(judged, row, "inclusion", message)
    if leaf_input([row[name] for name in CHAINED_COLUMNS]) != proof.extra:
        message = "the entry is not its row's leaf input as RFC 8785 writes it (spec 8)"
        return _outcome(judged, row, "rederive", message)
    problem = rederive_problem(row, seq)
    if problem is not None:
        return _outcome(judged, row, "rederive", problem)
    # A leaf input holds no chain hash, so the receipt says nothing of the chain (spec 10.3: always said).
    return _valid_line(judged, row, "; chain_hash not covered")


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
        raw = strict_b64decode(value)
        if raw is not None and len(raw) == 32:
            return raw
    raise MalformedProof(f"{name} must be the standard base64 of a 32-byte hash")
