"""`prove --tiles` (spec 10.3): a receipt from a publication, with no database. The checkpoint is verified before
any tile is read, as `verify-proof` would judge the receipt (spec 11.2: a trusted writer's signature that counts
under `--retired`/`--revoked`, the origin, the witness quorum): else `UntrustedCheckpoint`, one line. The row is
found by its seq, or by its budget_id in a scan of the entry bundles (linear in the log); its entry must hash to
its level-0 tile and the tiles must prove it against the checkpoint's root."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence

from compute_budget.core.leaf import LEAF_KEYS
from compute_budget.core.log.cosignature import WitnessKey
from compute_budget.core.log.key_states import KeyStates
from compute_budget.core.log.merkle import inclusion_proof, verify_inclusion
from compute_budget.core.log.note import VerifierKey
from compute_budget.core.log.tile_reader import TileNodeReader
from compute_budget.core.log.tiles import TILE_HEIGHT, TILE_WIDTH, Tile
from compute_budget.core.log.witness_policy import TlogPolicy
from compute_budget.core.receipt_checks import ReceiptTrust
from compute_budget.core.receipts import ProofBundle
from compute_budget.errors import (
    ArgumentTypeError,
    MalformedProof,
    MerkleError,
    ProofError,
    PublicationMissing,
    TileError,
    UnknownBudgetId,
    UntrustedCheckpoint,
)
from compute_budget.publication_reader.entries import entry_row
from compute_budget.publication_reader.snapshot import Publication, PublicationTarget

_BUDGET_ID = LEAF_KEYS.index("budget_id")


def prove_published(
    target: PublicationTarget,
    *,
    trusted_keys: Sequence[VerifierKey],
    budget_id: str | None = None,
    seq: int | None = None,
    witness_keys: Sequence[WitnessKey] = (),
    witness_quorum: int | None = None,
    witness_policy: TlogPolicy | None = None,
    origin: str | None = None,
    key_states: KeyStates | None = None,
) -> ProofBundle:
    """The receipt of row `seq` (1-based) or of the decision `budget_id` (a unique prefix of 8 or more hex digits
    will do) in the publication at `target`. `UntrustedCheckpoint` when its checkpoint does not count (checked
    before any tile is read: a trusted signature, `origin` when given, `key_states`, the witnesses), `ProofError`
    when its tiles do not prove the row; `UnknownBudgetId` when no such row is published. The witnesses:
    `witness_policy` (C2SP tlog-policy; its log keys count beside `trusted_keys`), or `witness_quorum` (default:
    all) of `witness_keys`."""
    rule = witness_policy
    if rule is None and witness_keys:
        rule = TlogPolicy.from_witness_keys(witness_keys, witness_quorum)
    publication = Publication.open(target)
    if witness_policy is not None and witness_policy.logs:
        named = origin if origin is not None else publication.checkpoint.origin or ""
        trusted_keys = [*trusted_keys, *witness_policy.store_log_keys(named)]
    _check_checkpoint(publication, trusted_keys, rule, origin, key_states or KeyStates())
    size = publication.size
    if seq is None:
        if budget_id is None:
            raise ProofError("give a budget_id or --seq N")
        seq = _find(publication, budget_id.lower())
    if not 1 <= seq <= size:
        raise UnknownBudgetId(f"no row {seq} in the publication at {target.location}: it holds rows 1..{size}")
    number, offset = (seq - 1) >> TILE_HEIGHT, (seq - 1) & 0xFF
    entry = publication.bundle(number)[offset]
    leaf = hashlib.sha256(b"\x00" + entry).digest()
    root = publication.checkpoint.root
    try:  # every tile the proof reads is authenticated up to the checkpoint's root
        path = inclusion_proof(TileNodeReader(size, root or b"", PublishedTiles(publication)), seq - 1, size)
    except (MerkleError, TileError, ArgumentTypeError) as error:
        raise ProofError(f"the publication's tiles cannot prove row {seq}: {error}") from None
    if root is None or not verify_inclusion(leaf, seq - 1, size, path, root):
        raise ProofError(
            f"the publication's entry and tiles do not prove row {seq} against its checkpoint (size {size}): the "
            "publication was altered; audit it with `compute-budget audit --tiles`"
        )
    values = entry_row(entry, seq)
    if any(value is None for name, value in zip(LEAF_KEYS, values, strict=True) if name != "max_wallclock_ms"):
        raise ProofError(f"entry {seq} of the publication is not a row's leaf input (17 keys)")
    row = dict(zip(LEAF_KEYS, values, strict=True))
    if seq == size:  # spec 9.6: only the last leaf's chain hash is covered, by the checkpoint's `chain` line
        row["chain_hash"] = publication.checkpoint.chain_hash
    return ProofBundle(row, seq - 1, size, tuple(path), publication.note)


def _check_checkpoint(
    publication: Publication, keys: Sequence[VerifierKey], rule: TlogPolicy | None, origin: str | None,
    states: KeyStates,
) -> None:
    """The published checkpoint counts as `verify-proof` would count it (a trusted writer's signature that counts
    under the key states, the origin, the witness quorum), else `UntrustedCheckpoint` in one line: `checkpoint of
    another log: ...` or `untrusted checkpoint: ...`."""
    now = int(time.time())
    try:
        trust = ReceiptTrust.of(keys, origin, (), None, now, policy=rule)
    except ValueError as error:
        raise ProofError(str(error)) from None
    try:
        judged = ReceiptTrust(trust.keys, trust.origin, trust.policy, now, states).judge(
            publication.note, "the publication's checkpoint")
    except MalformedProof as error:
        raise UntrustedCheckpoint(f"untrusted checkpoint: it cannot be read: {error}") from None
    if judged.failure is None:
        return
    check, message = judged.failure
    if check == "origin":
        raise UntrustedCheckpoint(f"checkpoint of another log: the publication's {message.removeprefix('the ')}")
    if check == "witness":
        message = f"the checkpoint carries {message} by --witness-key keys"
    elif not judged.signers:
        signers = ", ".join(f"{item.name}+{item.key_hash:08x}" for item in publication.checkpoint.signatures())
        message = (f"the checkpoint carries no valid signature by a --trusted-key (it is signed by "
                   f"{signers or 'no key'}, unverified)")
    raise UntrustedCheckpoint(f"untrusted checkpoint: the publication's {message.removeprefix('the ')}: not used")


def scan(publication: Publication, wanted: str) -> tuple[list[int], int]:
    """The seqs of the published entries whose budget_id starts with `wanted` (a scan of every entry bundle, in
    order; it stops at the second match), and how many bundles it read."""
    needle = b'"budget_id":"' + wanted.encode("ascii", "replace")
    found: list[int] = []
    bundles = (publication.size + TILE_WIDTH - 1) >> TILE_HEIGHT
    for number in range(bundles):
        for offset, entry in enumerate(publication.bundle(number)):
            if needle in entry:
                seq = (number << TILE_HEIGHT) + offset + 1
                budget_id = entry_row(entry, seq)[_BUDGET_ID]
                if isinstance(budget_id, str) and budget_id.startswith(wanted):
                    found.append(seq)
        if len(found) > 1:
            return found, number + 1
    return found, bundles


def _find(publication: Publication, wanted: str) -> int:
    """The seq of the one published row whose budget_id is or starts with `wanted`: a scan of every bundle."""
    found, _ = scan(publication, wanted)
    if len(found) > 1:
        raise ProofError(f"prefix {wanted} matches more than one published decision")
    if not found:
        raise UnknownBudgetId(f"no decision with budget_id {wanted} in the publication")
    return found[0]


class PublishedTiles:
    """A publication's tiles as the core's `TileSource`: a missing one is a `KeyError`."""

    def __init__(self, publication: Publication) -> None:
        self._publication = publication

    def __getitem__(self, tile: Tile, /) -> bytes:
        try:
            return self._publication.tile(tile)
        except PublicationMissing:
            raise KeyError(tile) from None
