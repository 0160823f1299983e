"""The store's side of the seal (spec section 8): its origin, its Merkle tree's stored nodes, its append-only table
of signed checkpoints, and the rule a signer obeys before it signs.

Everything here runs on a connection the facade hands in, inside the facade's transaction: a writer's tree nodes
and signed checkpoint are written in the same transaction as its rows.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy import Connection

from compute_budget.core.leaf import unreadable_leaf_hash
from compute_budget.core.log.head import GENESIS_CHAIN_HASH, ChainHead
from compute_budget.core.log.merkle import CompactRange, Node
from compute_budget.core.log.note import (
    SignerKey,
    VerifierKey,
    add_signature,
    format_checkpoint,
    sign_note,
    valid_origin,
)
from compute_budget.core.log.tree import TILE_LEVEL, TILE_SIZE, TiledTree
from compute_budget.core.row import CHAINED_COUNT
from compute_budget.core.seal_checks import StoredCheckpoint
from compute_budget.errors import InputError, MerkleError, StoreDamaged, StoreError
from compute_budget.store.backends import backend_for
from compute_budget.store.seal_sql import (  # the SQL lives apart (the backends build it); its names stay here too
    MAX_NODE_LEVEL as MAX_NODE_LEVEL,
)
from compute_budget.store.seal_sql import NEWEST_PAGE_ROWS as NEWEST_PAGE_ROWS
from compute_budget.store.seal_sql import ORIGIN_PREFIX as ORIGIN_PREFIX
from compute_budget.store.seal_sql import PAGE_ROWS as PAGE_ROWS
from compute_budget.store.seal_sql import SealStatements as SealStatements
from compute_budget.store.statements import Statements

# -- origin ----------------------------------------------------------------------------------------------------


def new_origin() -> str:
    """A fresh origin: ``compute-budget/`` and 32 lowercase hex digits of randomness."""
    return ORIGIN_PREFIX + secrets.token_hex(16)


def check_origin_name(name: str) -> str:
    """`name` if it is a valid origin (spec section 8), else `InputError` saying why."""
    if not valid_origin(name):
        raise InputError(
            f"invalid origin {name!r}: 1 to 128 printable ASCII characters (no spaces), without '+'"
        )
    return name


def read_origin(connection: Connection, seal: SealStatements) -> str | None:
    """The store's origin, or None when none is set yet."""
    value = connection.exec_driver_sql(seal.get_origin).scalar()
    if value is None:
        return None
    if not isinstance(value, str) or not valid_origin(value):
        raise StoreDamaged(f"the stored origin {value!r} is not a valid origin: run `compute-budget audit`")
    return value


def ensure_origin(connection: Connection, seal: SealStatements, wanted: str | None, *, create: bool) -> str | None:
    """The store's origin; when none is set, set `wanted` (or, with `create`, a random one). A `wanted` origin
    that differs from the one already set is refused: an origin is set once."""
    existing = read_origin(connection, seal)
    if existing is not None:
        if wanted is not None and wanted != existing:
            raise StoreError(f"the store's origin is already {existing}; it cannot become {wanted} (set once)")
        return existing
    if wanted is None and not create:
        return None
    chosen = wanted if wanted is not None else new_origin()
    connection.exec_driver_sql(seal.set_origin, (chosen,))
    return chosen


# -- the tree --------------------------------------------------------------------------------------------------


def tree_reader(connection: Connection, seal: SealStatements, size: int) -> TiledTree:
    """A `NodeReader` over the stored tree of the first `size` rows, read on `connection`."""

    def fetch_node(level: int, index: int) -> bytes | None:
        value = connection.exec_driver_sql(seal.node, (level, index)).scalar()
        if value is None:
            return None
        try:
            return bytes.fromhex(value) if isinstance(value, str) and len(value) == 64 else None
        except ValueError:
            return None

    def fetch_leaves(first: int, count: int) -> list[bytes]:
        # A tampered row still has a leaf: the audit reports the row itself.
        with backend_for(connection).tolerant_text(connection):
            rows = connection.exec_driver_sql(seal.leaf_rows, (first, first + count)).fetchall()
        if [row[0] for row in rows] != list(range(first + 1, first + count + 1)):
            return []  # a row is missing or out of place: the tile cannot be computed
        # Sliced, not named: a per-row path (see `core.row.CHAINED_COUNT`).
        return [unreadable_leaf_hash(tuple(row)[:CHAINED_COUNT]) for row in rows]

    return TiledTree(size, fetch_node, fetch_leaves)


def frontier_at(connection: Connection, seal: SealStatements, size: int) -> CompactRange:
    """The compact range of the stored tree at `size` (its perfect nodes, stored or recomputed from a tile)."""
    try:
        return CompactRange.from_reader(tree_reader(connection, seal, size), size)
    except MerkleError as error:
        raise StoreDamaged(
            f"the store's Merkle tree at size {size} cannot be read: {error}; run `compute-budget audit`"
        ) from None


def tree_is_built(connection: Connection, seal: SealStatements, size: int) -> bool:
    """True when every stored node a tree of `size` rows needs is there (checked at its last complete tile)."""
    if size < TILE_SIZE:
        return True
    last_tile = size // TILE_SIZE - 1
    return connection.exec_driver_sql(seal.node, (TILE_LEVEL, last_tile)).first() is not None


def tree_is_empty(connection: Connection, seal: SealStatements) -> bool:
    """True when no tree node is stored (a store migrated without its tree built yet)."""
    return connection.exec_driver_sql(seal.any_node).first() is None


def insert_counted(connection: Connection, sql: str, rows: list[tuple[Any, ...]], what: str) -> None:
    """Insert `rows` with `sql` and prove the database stored every one: a hand-made trigger or rule that drops them
    (SQLite's `RAISE(IGNORE)`, a PostgreSQL trigger returning NULL or a `DO INSTEAD NOTHING` rule) must not let a
    writer report a checkpoint, node or cosignature it never stored. `StoreDamaged` rolls the transaction back."""
    if not rows:
        return
    written = connection.exec_driver_sql(sql, rows if len(rows) > 1 else rows[0]).rowcount
    if written != len(rows):
        raise StoreDamaged(
            f"the store kept {written} of the {len(rows)} {what} just inserted: something on the table drops rows "
            "(a trigger or rule added by hand?); nothing was written; run `compute-budget audit`"
        )


def insert_nodes(connection: Connection, seal: SealStatements, nodes: list[Node]) -> None:
    """Store the perfect nodes at `TILE_LEVEL` and above."""
    rows = [(node.level, node.index, node.hash.hex()) for node in nodes]
    insert_counted(connection, seal.insert_node, rows, "tree nodes")


def build_tree(
    connection: Connection, statements: Statements, seal: SealStatements, size: int
) -> CompactRange:
    """Compute the tree of the first `size` stored rows and store its nodes (an existing store's first write after
    migration 0003). Refuses when nodes are already stored: a partial tree is damage, not a fresh store."""
    if not tree_is_empty(connection, seal):
        raise StoreDamaged("the store's Merkle tree is incomplete: tree nodes are missing; run `compute-budget audit`")
    frontier = CompactRange()
    for low in range(0, size, PAGE_ROWS):
        rows = connection.exec_driver_sql(statements.seq_range, (low, min(low + PAGE_ROWS, size))).fetchall()
        # Sliced, not named: a per-row path (see `core.row.CHAINED_COUNT`).
        leaves = [unreadable_leaf_hash(tuple(row)[:CHAINED_COUNT]) for row in rows]
        insert_nodes(connection, seal, frontier.extend(leaves, min_level=TILE_LEVEL))
    return frontier


# -- signed checkpoints ----------------------------------------------------------------------------------------


def stored_checkpoint(row: Any) -> StoredCheckpoint:
    """A row of the checkpoint table (id, tree_size, key_name, key_hash, note) as read."""
    ident, size, name, hash_text, note = row
    if not (
        type(ident) is int
        and type(size) is int
        and isinstance(name, str)
        and isinstance(hash_text, str)
        and isinstance(note, str)
    ):
        raise StoreDamaged(f"stored checkpoint #{ident!r} cannot be read: run `compute-budget audit`")
    return StoredCheckpoint(ident, size, name, hash_text, note)


def insert_checkpoint(
    connection: Connection, seal: SealStatements, size: int, key: SignerKey | VerifierKey, note: str, at: str
) -> None:
    """Append one signed checkpoint to the store's table."""
    insert_counted(connection, seal.insert_checkpoint, [(size, key.name, f"{key.key_hash:08x}", note, at)],
                   "signed checkpoints")


def checkpoints_between(
    connection: Connection, seal: SealStatements, low: int, high: int
) -> Iterator[StoredCheckpoint]:
    """Stored checkpoints with low < tree_size <= high, in (tree_size, id) order, a page per query."""
    size, ident = low, 2**62
    while True:
        rows = connection.exec_driver_sql(seal.checkpoints_between, (size, size, ident, high)).fetchall()
        for row in rows:
            checkpoint = stored_checkpoint(tuple(row))
            size, ident = checkpoint.tree_size, checkpoint.id
            yield checkpoint
        if len(rows) < PAGE_ROWS:
            return


def newest_by_key(
    connection: Connection, seal: SealStatements, key: VerifierKey | SignerKey, *, at_most: int | None = None
) -> Iterator[StoredCheckpoint]:
    """Stored checkpoints recorded as signed by `key`, newest (largest tree size) first."""
    size = (at_most if at_most is not None else 2**62) + 1
    ident = 0
    while True:
        rows = connection.exec_driver_sql(
            seal.newest_by_key, (key.name, f"{key.key_hash:08x}", size, size, ident)
        ).fetchall()
        for row in rows:
            checkpoint = stored_checkpoint(tuple(row))
            size, ident = checkpoint.tree_size, checkpoint.id
            yield checkpoint
        if len(rows) < 50:
            return


def chain_at(connection: Connection, statements: Statements) -> Callable[[int], str | None]:
    """A function giving the stored chain_hash of row `seq` (None when there is no such readable row)."""

    def at(seq: int) -> str | None:
        if seq == 0:
            return GENESIS_CHAIN_HASH
        row = connection.exec_driver_sql(statements.link_at, (seq,)).first()
        return row[1] if row is not None and isinstance(row[1], str) else None

    return at


def signed_note(origin: str, head: ChainHead, root: bytes, signers: list[SignerKey]) -> str:
    """The checkpoint note of a head, signed by every key of `signers` (in order)."""
    note = sign_note(format_checkpoint(origin, head.seq, root, head.chain_hash), signers[0])
    for signer in signers[1:]:
        note = add_signature(note, signer)
    return note


Provenance = tuple[str, int, str, str, str]  # source_origin, through_seq, root (base64), chain_hash, recorded_at


def read_provenance(connection: Connection, seal: SealStatements) -> Provenance | None:
    """The store's provenance row (spec 9.8) as stored, or None; `StoreDamaged` for one of the wrong types."""
    row = connection.exec_driver_sql(seal.get_provenance).first()
    if row is None:
        return None
    source, through, root, chain, at = tuple(row)
    if not (isinstance(source, str) and type(through) is int and isinstance(root, str) and isinstance(chain, str)
            and isinstance(at, str)):
        raise StoreDamaged("the store's provenance row cannot be read: run `compute-budget audit`")
    return source, through, root, chain, at
