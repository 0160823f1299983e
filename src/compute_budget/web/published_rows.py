"""The publication viewer's rows: each entry shown only after it is authenticated, its leaf hash held against its
level-0 tile and that tile up to the verified checkpoint's root (`core.log.tile_reader.TileNodeReader`). An entry or
tile that does not hold is `does not hold (published_mismatch)` and its content is not shown; one that cannot be
fetched now is said as such. A shown row is also checked as the audit checks it (`core.verify.check_row`: re-derived
from its gate input, its budget_id re-hashed), and carries its receipt (`core.receipts.ProofBundle`) in both
formats."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from compute_budget.core.leaf import LEAF_KEYS
from compute_budget.core.log.head import GENESIS_CHAIN_HASH
from compute_budget.core.log.merkle import inclusion_proof
from compute_budget.core.log.tile_reader import TileNodeReader
from compute_budget.core.log.tiles import TILE_HEIGHT, TILE_WIDTH, Tile
from compute_budget.core.receipts import ProofBundle
from compute_budget.core.verify import Finding, RangeResult, check_row
from compute_budget.errors import ComputeBudgetError, MalformedTlogProof, TileMismatch
from compute_budget.publication_reader.entries import chained, entry_row
from compute_budget.publication_reader.receipt import PublishedTiles
from compute_budget.publication_reader.snapshot import Publication

PUBLISHED_MISMATCH = "does not hold (published_mismatch)"
_BUDGET_ID = LEAF_KEYS.index("budget_id")
_PREFIX = re.compile(r"[0-9a-f]{8,64}")


@dataclass(frozen=True, slots=True)
class PublishedRow:
    """One published row: its `seq`, and either its authenticated `entry` (with the audit's `findings` on it) or
    why it is not shown (`problem`; `mismatch` when it does not hold rather than cannot be read now)."""

    seq: int
    entry: bytes | None
    problem: str | None = None
    mismatch: bool = False
    findings: tuple[Finding, ...] = ()

    @property
    def values(self) -> tuple[Any, ...] | None:
        """The row's 17 leaf values (None when not shown)."""
        return entry_row(self.entry, self.seq) if self.entry is not None else None

    @property
    def holds(self) -> bool:
        """Authenticated, and the audit's check of it finds nothing."""
        return self.entry is not None and not self.findings

    def fields(self) -> dict[str, Any]:
        """The row's leaf keys and values (empty when not shown)."""
        values = self.values
        return dict(zip(LEAF_KEYS, values, strict=True)) if values is not None else {}


def reader(publication: Publication) -> TileNodeReader:
    """The authenticating reader of the publication's (pinned, verified) tree."""
    root = publication.checkpoint.root
    assert root is not None  # a verified checkpoint has a root
    return TileNodeReader(publication.size, root, PublishedTiles(publication))


def bundle_rows(publication: Publication, tiles: TileNodeReader, number: int) -> list[PublishedRow]:
    """Every row of entry bundle `number`, each authenticated (see the module)."""
    first = number << TILE_HEIGHT
    width = min(TILE_WIDTH, publication.size - first)
    seqs = range(first + 1, first + width + 1)
    tile = Tile(0, number, width)
    try:
        leaves = tiles.tile_data(tile)
    except TileMismatch as error:
        return [PublishedRow(seq, None, f"{PUBLISHED_MISMATCH}: {error}", True) for seq in seqs]
    except ComputeBudgetError as error:
        return [PublishedRow(seq, None, f"cannot be read now: {error}") for seq in seqs]
    try:
        entries = publication.bundle(number)
    except ComputeBudgetError as error:
        return [PublishedRow(seq, None, f"cannot be read now: {error}") for seq in seqs]
    found = []
    for offset, entry in enumerate(entries):
        seq = first + offset + 1
        digest = hashlib.sha256(b"\x00" + entry).digest()
        if digest != leaves[32 * offset : 32 * offset + 32]:
            found.append(PublishedRow(seq, None, f"{PUBLISHED_MISMATCH}: entry {seq} of {tile.bundle_path} hashes to "
                                                 f"{digest.hex()}, its level-0 tile {tile.path} says otherwise", True))
        else:
            found.append(PublishedRow(seq, entry, findings=_check(entry, seq)))
    return found


def _check(entry: bytes, seq: int) -> tuple[Finding, ...]:
    """The audit's check of one authenticated entry: re-derived from its gate input, its budget_id re-hashed, and
    its place (its seq). Its link in the hash chain needs every row before it: the audit page checks that."""
    values = entry_row(entry, seq)
    chain = chained(GENESIS_CHAIN_HASH, values, entry)
    result = RangeResult()
    check_row((*values, chain), seq - 1, GENESIS_CHAIN_HASH, result)
    return tuple(result.findings)


def newest(publication: Publication, before: int | None, limit: int) -> list[PublishedRow]:
    """The rows below `before` (None: from the newest), newest first, at most `limit`."""
    high = publication.size if before is None else min(before - 1, publication.size)
    low = max(0, high - limit)
    tiles = reader(publication)
    rows: list[PublishedRow] = []
    for number in range(low >> TILE_HEIGHT, ((high - 1) >> TILE_HEIGHT) + 1 if high > 0 else 0):
        rows.extend(row for row in bundle_rows(publication, tiles, number) if low < row.seq <= high)
    return rows[::-1]


def at(publication: Publication, seq: int) -> PublishedRow | None:
    """Row `seq`, authenticated; None beyond the published tree."""
    if not 1 <= seq <= publication.size:
        return None
    number = (seq - 1) >> TILE_HEIGHT
    return bundle_rows(publication, reader(publication), number)[(seq - 1) - (number << TILE_HEIGHT)]


def is_budget_id_prefix(text: str) -> bool:
    """8 to 64 lowercase hex digits: a budget_id, or a prefix of one that may name a single decision."""
    return _PREFIX.fullmatch(text) is not None


def receipt(publication: Publication, row: PublishedRow) -> tuple[ProofBundle | None, str | None]:
    """The receipt of an authenticated row against the verified checkpoint, or why there is none."""
    values = row.values
    if values is None:
        return None, row.problem
    if any(value is None for name, value in zip(LEAF_KEYS, values, strict=True) if name != "max_wallclock_ms"):
        return None, f"entry {row.seq} is not a row's leaf input (17 keys): no receipt is made of it"
    try:
        path = inclusion_proof(reader(publication), row.seq - 1, publication.size)
    except ComputeBudgetError as error:
        return None, f"the tiles cannot prove row {row.seq} now: {error}"
    fields = row.fields()
    if row.seq == publication.size:  # only the last leaf's chain hash is covered, by the checkpoint's chain line
        fields["chain_hash"] = publication.checkpoint.chain_hash
    return ProofBundle(fields, row.seq - 1, publication.size, tuple(path), publication.note), None


def tlog_proof(bundle: ProofBundle) -> str | None:
    """The receipt as a C2SP tlog-proof (None when its values cannot be one)."""
    try:
        return bundle.to_tlog_proof().encode()
    except (MalformedTlogProof, KeyError, TypeError, ValueError):
        return None
