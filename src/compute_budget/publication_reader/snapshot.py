"""`Publication` and `PublicationSnapshot`: a published log (spec section 10) as a source the auditor reads through
the same interface as a database snapshot (`auditor.source.AuditSource`, `LogView`).

Rows come from the entry bundles: each entry is a row's leaf input (section 8, the 17 keys), so the row is its
values; its chain hash is recomputed from the row before it, and the last row's is the checkpoint's ``chain``
line, so a chain that does not reach that line is a `chain_break` at the last row. Tree nodes come from the hash
tiles, every one of which `Publication.check_tiles` reads and judges first (spec 11.3); the published checkpoint
is the one stored checkpoint. An entry whose leaf hash differs from its level-0 tile (or, the tile edited, whose
bundle does not give its parent's value) is a `published_mismatch`, collected as the rows are read
(`take_findings`). A missing partial tile or bundle is read from the full one at its position. The checkpoint is
read and parsed once, when the publication opens; every later copy (a worker's, `linked_from`) carries the parsed
value (`reread` reads it again). A publication has no database of its own: its view's `health` is None.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from compute_budget.core.leaf import LEAF_KEYS
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.entry_bundle import decode_bundle
from compute_budget.core.log.head import GENESIS_CHAIN_HASH
from compute_budget.core.log.merkle import HASH_SIZE, CompactRange
from compute_budget.core.log.note import Signature, VerifierKey
from compute_budget.core.log.tiles import TILE_HEIGHT, TILE_WIDTH, Tile, check_tile, tile_hash
from compute_budget.core.seal_checks import StoredCheckpoint
from compute_budget.core.verify import Finding
from compute_budget.errors import (
    CheckpointError,
    NoteError,
    PublicationMissing,
    PublicationUnavailable,
    TileError,
    clip,
)
from compute_budget.publication_reader.entries import bundle_mismatch, chained, published_mismatch
from compute_budget.publication_reader.entries import entry_row as entry_row  # where it was first imported from
from compute_budget.publication_reader.fetch import (
    BUNDLE_LIMIT,
    CHECKPOINT_LIMIT,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT,
    TILE_LIMIT,
    Fetcher,
    Redirects,
)
from compute_budget.publication_reader.hash_tiles import PublishedTree, TreeVerdict, check_tree

_BUDGET_ID = LEAF_KEYS.index("budget_id")


@dataclass(frozen=True, slots=True)
class PublicationTarget:
    """What opens a publication: its `location` (a folder or an http(s) prefix), the fetch bounds, and once opened
    the `checkpoint` read (parsed, or its text: so every process of one audit reads the same tree) and chain
    hashes known at some sizes (`chains`: a verified --since, or computed by the parent for its workers)."""

    location: str
    timeout: float = DEFAULT_TIMEOUT
    retries: int = DEFAULT_RETRIES
    checkpoint: Checkpoint | str | None = None
    chains: tuple[tuple[int, str], ...] = ()
    # What the whole tree's check proved (spec 11.3), for every process of the audit: the content an edited tile
    # should hold ((level, index, width, hex)), and the hash an edited level-0 tile's entries must give.
    repaired: tuple[tuple[int, int, int, str], ...] = ()
    leaf_roots: tuple[tuple[int, str], ...] = ()
    redirects: Redirects = field(default_factory=Redirects, compare=False)  # shared by every copy in this process

    @property
    def display(self) -> str:
        """Where the publication is, as reports name it (a URL's user information hidden)."""
        return Fetcher(self.location, self.timeout, self.retries).display("")

    def reopen(self) -> Publication:
        """The publication this names (`PublicationUnavailable` when its checkpoint cannot be read)."""
        return Publication(self)


@dataclass(frozen=True, slots=True)
class PublicationLocation:
    """Where the publication is, as reports name it, and the target a worker process reopens."""

    display: str
    target: PublicationTarget

    def reopen(self) -> Publication:
        """The same publication, in another process: its checkpoint and the chain hashes known, not read again."""
        return Publication(self.target)


class Publication:
    """An opened publication: the checkpoint read once; `snapshot()` and `scan()` as a store's (see the module)."""

    def __init__(self, target: PublicationTarget) -> None:
        self._fetcher = Fetcher(target.location, target.timeout, target.retries, target.redirects)
        self.checkpoint = self._read_checkpoint(target.checkpoint)
        assert self.checkpoint.note is not None  # read from a note
        self.note = self.checkpoint.note
        self.size = self.checkpoint.seq
        self._snapshot = PublicationSnapshot(self, dict(target.chains))
        self._target = dataclasses.replace(target, checkpoint=self.checkpoint)
        self._findings: list[Finding] = []
        self.bytes_read = 0  # what this process fetched of the publication's files, for the benchmark
        self._repaired = {Tile(*item[:3]): bytes.fromhex(item[3]) for item in target.repaired}
        self._leaf_roots = {index: bytes.fromhex(value) for index, value in target.leaf_roots}

    def _read_checkpoint(self, given: Checkpoint | str | None) -> Checkpoint:
        """The checkpoint as read already (parsed), or read now from its text or the publication's file."""
        if isinstance(given, Checkpoint):
            return given
        text = given
        if text is None:
            text = self._fetcher.read("checkpoint", CHECKPOINT_LIMIT).decode("utf-8", "replace")
        try:
            return Checkpoint.from_note(text, source=self._fetcher.display("checkpoint"))
        except (CheckpointError, NoteError) as error:
            raise PublicationUnavailable(f"{clip(str(error), 200)}: not a signed checkpoint") from None

    @property
    def redirects(self) -> Redirects:
        """The redirects followed reading it in this process (spec 11.7.2: the report says them)."""
        return self._target.redirects

    @classmethod
    def open(cls, target: PublicationTarget) -> Publication:
        """Read the publication's checkpoint (`PublicationUnavailable` when it cannot be read)."""
        return cls(target)

    def __enter__(self) -> Publication:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    @property
    def location(self) -> PublicationLocation:
        """Where it is; its target carries the checkpoint read and every chain hash known so far."""
        chains = tuple(sorted(self._snapshot.known_chains().items()))
        return PublicationLocation(self._fetcher.display(""), dataclasses.replace(self._target, chains=chains))

    @contextmanager
    def snapshot(self) -> Iterator[PublicationSnapshot]:
        """The one snapshot of this publication (its files are immutable but for the checkpoint, read once)."""
        yield self._snapshot

    def scan(self, low: int, high: int, *, batch_rows: int = 2000) -> Iterator[list[tuple[Any, ...]]]:
        """The rows low < seq <= high, in batches; entries that differ from their tile are kept for
        `take_findings`."""
        return self._snapshot.rows(low, high, batch_rows, self._findings)

    def tree(self) -> PublishedTree:
        """A `NodeReader` over the whole published tree, from its tiles."""
        return self._snapshot.tree(self.size)

    def published(self) -> Checkpoint:
        """The checkpoint the publication is read from, which the audit holds its rows against."""
        return self.checkpoint

    def linked_from(self, since: Checkpoint | None) -> Publication:
        """This publication, its rows after a verified `since` (below its size) linked from its chain hash: the
        chain is recomputed from the entries, and would otherwise be walked from the genesis."""
        chains = self._target.chains
        if since is not None and 0 < since.seq < self.size:
            chains = (*chains, (since.seq, since.chain_hash))
        return Publication(dataclasses.replace(self._target, chains=chains))

    def take_findings(self) -> list[Finding]:
        """The `published_mismatch` findings of the rows scanned since the last call."""
        found = list(self._findings)
        self._findings.clear()  # the same list: a scan still running appends to it
        return found

    def check_tiles(self, on_progress: Callable[[int, int], None] | None = None) -> TreeVerdict:
        """Read every hash tile and judge each (`hash_tiles.check_tree`), before any entry: what it proves is kept
        for this audit's every read, in this process and its workers."""
        verdict = check_tree(self.size, self.checkpoint.root or b"", self.tile, self._leaf_hashes, on_progress)
        self._repaired.update(verdict.repaired)
        self._leaf_roots.update(verdict.leaf_roots)
        self._target = dataclasses.replace(
            self._target,
            repaired=tuple((t.level, t.index, t.width, data.hex()) for t, data in sorted(self._repaired.items())),
            leaf_roots=tuple((index, value.hex()) for index, value in sorted(self._leaf_roots.items())),
        )
        return verdict

    def _leaf_hashes(self, tile: Tile) -> bytes | None:
        """The leaf hashes of level-0 tile `tile`'s entries (None when its bundle cannot be read)."""
        try:
            return b"".join(hashlib.sha256(b"\x00" + entry).digest() for entry in self.bundle(tile.index))
        except PublicationUnavailable:
            return None

    def reread(self) -> Publication | None:
        """The publication as its checkpoint now is, read again, or None when that checkpoint has not changed (an
        audit that raced a `publish`, spec 11.7.6, starts again once from the new one)."""
        text = self._fetcher.read("checkpoint", CHECKPOINT_LIMIT).decode("utf-8", "replace")
        if text == self.note:
            return None
        return Publication(dataclasses.replace(self._target, checkpoint=text, chains=(), repaired=(), leaf_roots=()))

    def tile(self, tile: Tile) -> bytes:
        """The bytes of one hash tile (level 0: leaf hashes), checked to be 32 per hash of its width; an edited one
        as the tiles below it prove it (`check_tiles`)."""
        known = self._repaired.get(tile)
        if known is not None:
            return known
        data, whole = self._read(tile, tile.path, TILE_LIMIT, Tile(tile.level, tile.index).path)
        try:
            return check_tile(tile, data[: HASH_SIZE * tile.width] if whole else data)
        except TileError as error:
            raise PublicationUnavailable(f"{self._fetcher.display('')}{error}: a damaged tile") from None

    def bundle(self, number: int) -> list[bytes]:
        """The entries of entry bundle `number`, as many as the published tree has there."""
        tile = Tile(0, number, min(TILE_WIDTH, self.size - number * TILE_WIDTH))
        data, whole = self._read(tile, tile.bundle_path, BUNDLE_LIMIT, Tile(0, number).bundle_path)
        try:
            return decode_bundle(Tile(0, number), data)[: tile.width] if whole else decode_bundle(tile, data)
        except TileError as error:
            raise PublicationUnavailable(f"{self._fetcher.display('')}{error}: a damaged bundle") from None

    def handover(self, size: int, key_hash: int) -> str | None:
        """The text of `handover/<size>/<key_hash as 8 hex>` (spec 11.1: the handover the key with that hash gave at
        `size`), or None when the publication has no such file; `PublicationUnavailable` when it cannot be read."""
        try:
            data = self._fetcher.read(f"handover/{size}/{key_hash:08x}", CHECKPOINT_LIMIT)
        except PublicationMissing:
            return None
        return data.decode("utf-8", "replace")

    def handover_sizes(self, key_hash: int) -> list[int] | None:
        """The sizes H of every `handover/<H>/<key_hash as 8 hex>` the publication holds, ascending; None when it
        cannot be listed (HTTP: a caller probes the sizes it knows of with `handover`)."""
        sizes = self._fetcher.names("handover")
        if sizes is None:
            return None
        name = f"{key_hash:08x}"
        return sorted(int(size) for size in sizes
                      if size.isascii() and size.isdigit() and name in (self._fetcher.names(f"handover/{size}") or ()))

    def _read(self, tile: Tile, path: str, limit: int, full: str) -> tuple[bytes, bool]:
        """The file at `path` and False; a missing partial one read as the full one at its position (C2SP lets a
        log delete partials once the full one exists: its first items are the same) and True."""
        try:
            data, whole = self._fetcher.read(path, limit), False
        except PublicationMissing as missing:
            if not tile.partial:
                raise PublicationMissing(f"{missing}; it holds {self._rows_of(tile)}") from None
            try:
                data, whole = self._fetcher.read(full, limit), True
            except PublicationMissing:
                raise PublicationMissing(f"{missing}; it holds {self._rows_of(tile)}") from None
        self.bytes_read += len(data)
        return data, whole

    def leaf_root(self, number: int) -> bytes | None:
        """The hash entry bundle `number` must give when its level-0 tile was found edited, else None."""
        return self._leaf_roots.get(number)

    def _rows_of(self, tile: Tile) -> str:
        """The rows (1-based seqs) under `tile` in this publication, as a missing file's message names them: the
        operator restores the file, or knows which rows no audit could check."""
        last = min(self.size, tile.start + (tile.width << (TILE_HEIGHT * tile.level)))
        return f"rows {tile.start + 1}..{last}"


class PublicationSnapshot:
    """The reads the audit makes (`auditor.source.AuditSnapshot`), answered from the publication's files."""

    def __init__(self, publication: Publication, chains: dict[int, str]) -> None:
        self._publication = publication
        self._size = publication.size
        self._chains = {0: GENESIS_CHAIN_HASH, **chains}
        self._last_bundle: tuple[int, list[bytes]] | None = None

    def known_chains(self) -> dict[int, str]:
        """The chain hashes known at some sizes (the genesis and the checkpoint's line left out)."""
        return {seq: chain for seq, chain in self._chains.items() if 0 < seq < self._size}

    # -- rows ---------------------------------------------------------------------------------------------------

    def rows(
        self, low: int, high: int, batch_rows: int, findings: list[Finding] | None = None
    ) -> Iterator[list[tuple[Any, ...]]]:
        """Rows low < seq <= high as (17 values, chain hash), the chain linked from the row at `low`."""
        high = min(high, self._size)
        prev = self.chain_at(low) if low < high else None
        batch: list[tuple[Any, ...]] = []
        seq = low
        while seq < high:
            number = seq >> TILE_HEIGHT
            entries = self._entries(number, findings)
            for offset in range(seq - (number << TILE_HEIGHT), min(len(entries), high - (number << TILE_HEIGHT))):
                seq += 1
                values = entry_row(entries[offset], seq)
                chain = chained(prev, values, entries[offset]) if prev is not None else None
                prev = chain if chain is not None else prev
                batch.append((*values, self._publication.checkpoint.chain_hash if seq == self._size else chain))
                if len(batch) >= batch_rows:
                    yield batch
                    batch = []
        if batch:
            yield batch

    def _entries(self, number: int, findings: list[Finding] | None) -> list[bytes]:
        """Bundle `number`'s entries, each checked against its leaf hash in the level-0 tile when `findings`."""
        if self._last_bundle is not None and self._last_bundle[0] == number and findings is None:
            return self._last_bundle[1]
        entries = self._publication.bundle(number)
        expected = self._publication.leaf_root(number)
        if findings is not None and expected is not None:  # its tile was edited: the entries meet its parent's value
            leaves = b"".join(hashlib.sha256(b"\x00" + entry).digest() for entry in entries)
            if tile_hash(Tile(0, number), leaves) != expected:
                findings.append(bundle_mismatch(Tile(0, number), (number << TILE_HEIGHT) + 1))
        elif findings is not None:
            leaves = self._publication.tile(Tile(0, number, len(entries)))
            for offset, entry in enumerate(entries):
                if hashlib.sha256(b"\x00" + entry).digest() != leaves[32 * offset : 32 * offset + 32]:
                    findings.append(published_mismatch(entry, (number << TILE_HEIGHT) + offset + 1))
        self._last_bundle = (number, entries)
        return entries

    def rows_between(self, low: int, high: int, *, batch_rows: int = 2000) -> Iterator[list[tuple[Any, ...]]]:
        """Rows with low < seq <= high in seq order, a batch at a time."""
        return self.rows(low, high, batch_rows)

    def chain_at(self, seq: int) -> str | None:
        """The chain hash of row `seq`: the checkpoint's line at its size, else recomputed from the nearest known
        one before it (a verified --since, or one computed already)."""
        if seq == self._size:
            return self._publication.checkpoint.chain_hash
        if not 0 <= seq <= self._size:
            return None
        known = self._chains.get(seq)
        if known is not None:
            return known
        start = max(item for item in self._chains if item < seq)
        chain = self._chains[start]
        for batch in self.rows(start, seq, 2000):
            chain = batch[-1][-1] if batch[-1][-1] is not None else chain
        self._chains[seq] = chain
        return chain

    def max_seq(self) -> int:
        """The published size."""
        return self._size

    def count(self) -> int:
        """How many entries the publication holds (its size: a bundle short of entries cannot be read)."""
        return self._size

    def link_at(self, seq: int) -> tuple[Any, Any, Any] | None:
        """(seq, chain hash, budget_id) of row `seq`, or None beyond the publication."""
        if not 1 <= seq <= self._size:
            return None
        number = (seq - 1) >> TILE_HEIGHT
        values = entry_row(self._entries(number, None)[(seq - 1) & 0xFF], seq)
        return seq, self.chain_at(seq), values[_BUDGET_ID]

    def raw_row(self, budget_id: str) -> tuple[Any, ...] | None:
        """The row with this budget_id (17 values, chain hash), found by reading the entries in order, or None."""
        for batch in self.rows(0, self._size, 2000):
            for row in batch:
                if row[_BUDGET_ID] == budget_id:
                    return row
        return None

    def link_at_or_before(self, seq: int) -> tuple[int, str] | None:
        """(seq, chain hash) of the last row at or before `seq`."""
        seq = min(seq, self._size)
        chain = self.chain_at(seq) if seq > 0 else None
        return None if chain is None else (seq, chain)

    # -- the tree -----------------------------------------------------------------------------------------------

    def tree(self, size: int) -> PublishedTree:
        """A `NodeReader` over the first `size` leaves, from the hash tiles."""
        return PublishedTree(min(size, self._size), self._size, self._publication.tile)

    def tree_is_built(self, size: int) -> bool:
        """Always: the tiles are the tree."""
        return size <= self._size

    def has_tree_nodes(self) -> bool:
        """False: every node is in a tile, and `Publication.check_tiles` holds each tile against the level above
        and the root before the rows are read, judging each on its own; the rows' tree is then held against the
        checkpoint alone (node by node, an edited tile would be said twice)."""
        return False

    def frontier(self, size: int) -> CompactRange:
        """The compact range of the published tree at `size`."""
        return CompactRange.from_reader(self.tree(size), size)

    def nodes_at(self, level: int, first: int, last: int) -> Iterator[tuple[int, str]]:
        """The published nodes (idx, hex hash) of `level` with first <= idx <= last."""
        tree = self.tree(self._size)
        for index in range(first, last + 1):
            if (index + 1) << level > self._size:
                return
            yield index, tree.node(level, index).hex()

    # -- the checkpoint -----------------------------------------------------------------------------------------

    def origin(self) -> str | None:
        """The checkpoint's origin."""
        return self._publication.checkpoint.origin

    def provenance(self) -> None:
        """None: a publication says nothing of salvage."""
        return

    def _stored(self, name: str, key_hash: int) -> StoredCheckpoint:
        return StoredCheckpoint(1, self._size, name, f"{key_hash:08x}", self._publication.note)

    def newest_by_key(self, key: VerifierKey, *, at_most: int | None = None) -> Iterator[StoredCheckpoint]:
        """The published checkpoint, when it carries a line claiming `key`."""
        if at_most is not None and self._size > at_most:
            return
        for signature in self._signatures():
            if signature.name == key.name and signature.key_hash == key.key_hash:
                yield self._stored(key.name, key.key_hash)
                return

    def newest_covering(self, seq: int, at_most: int) -> StoredCheckpoint | None:
        """The published checkpoint, when it covers row `seq` (size seq..at_most)."""
        signatures = self._signatures()
        if not seq <= self._size <= at_most or not signatures:
            return None
        return self._stored(signatures[0].name, signatures[0].key_hash)

    def checkpoints_at(self, size: int) -> list[StoredCheckpoint]:
        """The published checkpoint at its size (as filed under its first signer)."""
        stored = self.newest_covering(size, size)
        return [stored] if stored is not None and size == self._size else []

    def checkpoints_between(self, low: int, high: int) -> Iterator[StoredCheckpoint]:
        """None: the published checkpoint is held against the tree once, as the audit's given checkpoint."""
        return iter(())

    def checkpoints_beyond(self, size: int) -> list[StoredCheckpoint]:
        """None: the checkpoint's size is the publication's."""
        return []

    def unreadable_checkpoints(self) -> list[tuple[int, str]]:
        """None: an unreadable checkpoint stops the audit (exit 2)."""
        return []

    def cosignatures_newest_first(self, at_most: int) -> Iterator[tuple[int, str, str]]:
        """The signature lines of the published checkpoint, (size, text, line); the witness rules keep those
        that verify under a witness key."""
        if self._size <= at_most:
            text = self._publication.checkpoint.note_text()
            yield from ((self._size, text, signature.line()) for signature in self._signatures())

    def cosignatures_filed_at(self, size: int) -> list[tuple[str, str]]:
        """The published checkpoint's lines at its size."""
        return [(text, line) for _, text, line in self.cosignatures_newest_first(size)] if size == self._size else []

    def cosignatures_of(self, checkpoint_text: str, size: int) -> list[str]:
        """The published checkpoint's lines, when it is this text."""
        return [line for text, line in self.cosignatures_filed_at(size) if text == checkpoint_text]

    def witness_sizes(self) -> list[tuple[str, str, int]]:
        """None: a publication keeps no witness sizes."""
        return []

    def published_handover(self, size: int, key_hash: int) -> str | None:
        """The handover the publication holds at `size` from the key with `key_hash` (`Publication.handover`)."""
        return self._publication.handover(size, key_hash)

    def _signatures(self) -> list[Signature]:
        return self._publication.checkpoint.signatures()  # parsed once, when the checkpoint was read

    def health(self) -> None:
        """None: a publication is files, with no schema, guard, repairs or grants, and an entry's place is its seq
        and a tile's nodes are those of its place (nothing can be misplaced)."""
        return
