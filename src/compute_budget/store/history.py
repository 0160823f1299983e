"""Importing another store's history into an empty one (`copy`, and salvage with `copy --through`): every row
exactly as stored, the chain kept, the tree rebuilt from the rows, the checkpoints and provenance after them."""

from __future__ import annotations

import base64
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from compute_budget.core.leaf import unreadable_leaf_hash
from compute_budget.core.log.head import ChainHead
from compute_budget.core.log.merkle import CompactRange
from compute_budget.core.log.tree import TILE_LEVEL
from compute_budget.core.row import named
from compute_budget.errors import DestinationNotEmpty, ReadOnlyStore
from compute_budget.store import repairs
from compute_budget.store import seal_tables as sealing
from compute_budget.store.engine import begin_write, translate
from compute_budget.store.inserting import insert_exactly, require_guard
from compute_budget.store.plan import CHUNK_SIZE
from compute_budget.store.repairs import Repair
from compute_budget.store.seal_tables import SealStatements
from compute_budget.store.session import StoreSession, lock_for_append, read_head, utc_now


def import_history(
    session: StoreSession,
    rows: Iterable[tuple[Any, ...]],
    *,
    origin: str | None,
    checkpoints: Iterable[tuple[int, str, str, str, str]],
    provenance: sealing.Provenance | None,
    provenance_from: str | None,
    on_progress: Callable[[int], None] | None,
    witness_rows: Iterable[tuple[Any, ...]] = (),
    cosignature_rows: Iterable[tuple[Any, ...]] = (),
    repair_rows: Iterable[Repair] = (),
) -> ChainHead:
    """Append `rows` as stored into the empty store of `session`, in one transaction (see
    `BudgetStore.import_history`); returns the copied head."""
    session.require_open()
    location = session.location
    if session.readonly:
        raise ReadOnlyStore(f"{location.display} was opened read-only; open it for writing to copy into it")
    seal = session.seal
    try:
        with begin_write(session.engine) as connection:
            lock_for_append(connection, readonly=False)
            require_guard(connection, location)
            head = _empty_head(connection, session, origin)
            frontier = CompactRange()
            source = iter(rows)
            while chunk := list(itertools.islice(source, CHUNK_SIZE * 4)):
                insert_exactly(connection, chunk, location)
                hashes = [unreadable_leaf_hash(named(row).chained) for row in chunk]
                sealing.insert_nodes(connection, seal, frontier.extend(hashes, min_level=TILE_LEVEL))
                last = named(chunk[-1])
                head = ChainHead(int(last.seq), str(last.chain_hash), str(last.budget_id))
                if on_progress is not None:
                    on_progress(len(chunk))
            for batch in _batched(checkpoints, CHUNK_SIZE):
                connection.exec_driver_sql(seal.insert_checkpoint, list(batch))
            if provenance_from is not None:
                root = base64.b64encode(frontier.root()).decode("ascii")
                provenance = (provenance_from, head.seq, root, head.chain_hash, utc_now())
            if provenance is not None:
                connection.exec_driver_sql(seal.insert_provenance, provenance)
            _copy_witnessing(connection, seal, witness_rows, cosignature_rows, repair_rows)
    except SQLAlchemyError as error:
        raise translate(error, location) from None
    return head


def _empty_head(connection: Connection, session: StoreSession, origin: str | None) -> ChainHead:
    """The head of the empty destination (`DestinationNotEmpty` otherwise), its origin set to the source's."""
    location = session.location
    existing = read_head(connection, session.statements)
    if existing.seq != 0:
        raise DestinationNotEmpty(f"{location.display} already holds {existing.seq} rows; copy needs an empty store")
    present = sealing.read_origin(connection, session.seal)
    if origin is not None and present is not None and present != origin:
        raise DestinationNotEmpty(
            f"{location.display} already has origin {present}, not the source's {origin}; "
            "copy into a new, empty database"
        )
    if present is None and origin is not None:
        sealing.ensure_origin(connection, session.seal, origin, create=False)
    return existing


def _copy_witnessing(
    connection: Connection,
    seal: SealStatements,
    witness_rows: Iterable[tuple[Any, ...]],
    cosignature_rows: Iterable[tuple[Any, ...]],
    repair_rows: Iterable[Repair],
) -> None:
    """Witness sizes and cosignatures as stored (hints and claims the audit checks against witness keys), then the
    repairs and their acknowledgements (spec 9.9.10), in order: a copy never launders a repair away."""
    for batch in _batched(witness_rows, CHUNK_SIZE):
        connection.exec_driver_sql(seal.insert_witness_size, list(batch))
    for batch in _batched(cosignature_rows, CHUNK_SIZE):
        connection.exec_driver_sql(seal.insert_cosignature, list(batch))
    for repair in repair_rows:
        repairs.copy_row(connection, repair)


def _batched(items: Iterable[Any], size: int) -> Iterator[tuple[Any, ...]]:
    source = iter(items)
    while batch := tuple(itertools.islice(source, size)):
        yield batch
