"""`prove --tiles` (spec 10.3): a receipt from a publication, with no database. The checkpoint is verified before
use (a trusted writer's signature; with witness keys, K valid cosignatures); the row is found by its seq, or by
its budget_id in a scan of the entry bundles (linear in the log); its entry must hash to its level-0 tile and the
tiles must prove it against the checkpoint's root."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence

from compute_budget.core.leaf import LEAF_KEYS
from compute_budget.core.log.cosignature import WitnessKey, valid_cosignatures
from compute_budget.core.log.merkle import inclusion_proof, verify_inclusion
from compute_budget.core.log.note import VerifierKey, verify_note
from compute_budget.core.log.tile_reader import TileNodeReader
from compute_budget.core.log.tiles import TILE_HEIGHT, Tile
from compute_budget.core.log.witness_policy import TlogPolicy
from compute_budget.core.receipts import ProofBundle
from compute_budget.errors import (
    ArgumentTypeError,
    MerkleError,
    NoteError,
    ProofError,
    PublicationMissing,
    TileError,
    UnknownBudgetId,
)
from compute_budget.publication_reader.snapshot import Publication, PublicationTarget, entry_row

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
) -> ProofBundle:
    """The receipt of row `seq` (1-based) or of the decision `budget_id` (a unique prefix of 8 or more hex digits
    will do) in the publication at `target`. `ProofError` when its checkpoint does not verify or its tiles do not
    prove the row; `UnknownBudgetId` when no such row is published. The witnesses: `witness_policy` (C2SP
    tlog-policy; its log keys count beside `trusted_keys`), or `witness_quorum` (default: all) of `witness_keys`."""
    rule = witness_policy
    if rule is None and witness_keys:
        rule = TlogPolicy.from_witness_keys(witness_keys, witness_quorum)
    publication = Publication.open(target)
    if witness_policy is not None and witness_policy.logs:
        origin = publication.checkpoint.origin or ""
        trusted_keys = [*trusted_keys, *witness_policy.store_log_keys(origin)]
    _check_checkpoint(publication, trusted_keys, rule)
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
        path = inclusion_proof(TileNodeReader(size, root or b"", _Tiles(publication)), seq - 1, size)
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


def _check_checkpoint(publication: Publication, keys: Sequence[VerifierKey], rule: TlogPolicy | None) -> None:
    """The published checkpoint carries a valid trusted writer signature (and the witness quorum), else
    `ProofError`."""
    try:
        outcome = verify_note(publication.note, list(keys))
        cosigned = valid_cosignatures(publication.note, rule.witness_keys, now=int(time.time())) if rule else []
    except NoteError as error:
        raise ProofError(f"the publication's checkpoint cannot be read: {error}") from None
    if not outcome.verified or outcome.failed:
        raise ProofError("the publication's checkpoint carries no valid signature by a --trusted-key: not used")
    if rule is None or not rule.requires_witnesses:
        return
    tally = rule.tally({item.key: item.timestamp for item in cosigned})
    if not tally.met:
        raise ProofError(
            f"the publication's checkpoint carries {rule.count_words(tally.counted)} by --witness-key keys"
        )


def _find(publication: Publication, wanted: str) -> int:
    """The seq of the one published row whose budget_id is or starts with `wanted`: a scan of every bundle."""
    needle = b'"budget_id":"' + wanted.encode("ascii", "replace")
    found: list[int] = []
    for number in range((publication.size + 255) >> TILE_HEIGHT):
        for offset, entry in enumerate(publication.bundle(number)):
            if needle in entry:
                seq = (number << TILE_HEIGHT) + offset + 1
                budget_id = entry_row(entry, seq)[_BUDGET_ID]
                if isinstance(budget_id, str) and budget_id.startswith(wanted):
                    found.append(seq)
        if len(found) > 1:
            raise ProofError(f"prefix {wanted} matches more than one published decision")
    if not found:
        raise UnknownBudgetId(f"no decision with budget_id {wanted} in the publication")
    return found[0]


class _Tiles:
    """The publication's tiles as the core's `TileSource`: a missing one is a `KeyError`."""

    def __init__(self, publication: Publication) -> None:
        self._publication = publication

    def __getitem__(self, tile: Tile, /) -> bytes:
        try:
            return self._publication.tile(tile)
        except PublicationMissing:
            raise KeyError(tile) from None
