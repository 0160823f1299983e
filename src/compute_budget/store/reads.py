"""Reading a store: rows by id, prefix and gate, one row's check, filtered streams, the head, the checkpoint of the
head and the stored checkpoints (the auditor's scans and snapshots are `scans`). Every read is its own read
transaction."""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator
from typing import Any

from sqlalchemy import Connection

from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.head import GENESIS_CHAIN_HASH, ChainHead
from compute_budget.core.policy.types import ComputeBudgetStatus
from compute_budget.core.row import StoredDecision, stored_from_row
from compute_budget.core.verify import RangeResult, check_row
from compute_budget.errors import MalformedDecision, StoreDamaged, StoreUnavailable
from compute_budget.store import seal_tables as sealing
from compute_budget.store.engine import Location
from compute_budget.store.results import RowCheck
from compute_budget.store.seal_tables import SealStatements
from compute_budget.store.session import StoreSession, read_head

_HEX_PREFIX = re.compile(r"[0-9a-f]{1,64}")


class Reads:
    """The read side of an opened store (`BudgetStore` delegates to it)."""

    def __init__(self, session: StoreSession) -> None:
        self._session = session
        self._sql = session.statements
        self._seal = session.seal

    def get(self, budget_id: str) -> StoredDecision | None:
        """The stored row with this `budget_id`, or None."""
        with self._session.reading() as connection:
            row = connection.exec_driver_sql(self._sql.by_budget_id, (budget_id,)).first()
        return None if row is None else readable(self._session.logical(row))

    def find(self, prefix: str, *, limit: int) -> list[StoredDecision]:
        """Stored rows whose budget_id starts with `prefix` (lowercase hex), at most `limit` of them."""
        if not _HEX_PREFIX.fullmatch(prefix):
            self._session.require_open()
            return []
        with self._session.reading() as connection:
            rows = connection.exec_driver_sql(
                self._sql.by_prefix(limit),
                (prefix, prefix + "g"),  # "g" sorts after every hex digit: the range is exactly the prefix
            ).fetchall()
        return [readable(self._session.logical(row)) for row in rows]

    def find_ids(self, prefix: str, *, limit: int) -> list[str]:
        """The stored budget_ids that start with `prefix`, at most `limit`; reads no row."""
        if not _HEX_PREFIX.fullmatch(prefix):
            self._session.require_open()
            return []
        with self._session.reading() as connection:
            rows = connection.exec_driver_sql(self._sql.ids_by_prefix(limit), (prefix, prefix + "g")).fetchall()
        return [str(row[0]) for row in rows]

    def find_by_gate(self, decision_id: str) -> list[StoredDecision]:
        """The stored decisions of the gate with this `decision_id`, in `seq` order."""
        with self._session.reading() as connection:
            wanted = self._session.backend.stored_text(decision_id)
            rows = connection.exec_driver_sql(self._sql.by_gate, (wanted,)).fetchall()
        return [readable(self._session.logical(row)) for row in rows]

    def check(self, budget_id: str) -> RowCheck | None:
        """The audit's check of one stored row, linked to the row stored before it; None when it is not stored."""
        with self._session.reading() as connection:
            row = connection.exec_driver_sql(self._sql.by_budget_id, (budget_id,)).first()
            if row is None:
                return None
            raw = self._session.logical(row)
            seq = raw[0]
            anchor: tuple[int, str] = (0, GENESIS_CHAIN_HASH)
            if type(seq) is int and seq > 1:
                before = connection.exec_driver_sql(self._sql.link_at_or_before, (seq - 1,)).first()
                if before is not None and type(before[0]) is int and isinstance(before[1], str):
                    anchor = (before[0], before[1])
        result = RangeResult()
        check_row(raw, anchor[0], anchor[1], result)
        return RowCheck(budget_id, seq if type(seq) is int else None, tuple(result.findings))

    def iter_decisions(
        self,
        *,
        status: ComputeBudgetStatus | str | None,
        limit: int | None,
        reason_code: str | None,
        policy_version: str | None,
        gate_decision_id: str | None,
        after_seq: int | None,
        before_seq: int | None,
    ) -> Iterator[StoredDecision]:
        """Stored rows matching every filter given, in `seq` order, streamed (see `BudgetStore.iter_decisions`)."""
        self._session.require_open()
        if gate_decision_id is not None:
            gate_decision_id = self._session.backend.stored_text(gate_decision_id)
        wanted = {
            "status": None if status is None else str(status),
            "reason_code": reason_code,
            "policy_version": policy_version,
            "gate_decision_id": gate_decision_id,
            "after_seq": after_seq,
            "before_seq": before_seq,
        }
        filters = tuple(name for name, value in wanted.items() if value is not None)
        return self._stream(self._sql.listing(filters, limit), tuple(wanted[name] for name in filters))

    def _stream(self, query: str, params: tuple[Any, ...]) -> Iterator[StoredDecision]:
        with self._session.reading() as connection:
            result = connection.execution_options(stream_results=True, max_row_buffer=1000).exec_driver_sql(
                query, params
            )
            for row in result:
                yield readable(self._session.logical(row))

    def iter_raw_rows(self) -> Generator[tuple[Any, ...], None, None]:
        """Every stored row as raw column values, in `seq` order, streamed."""
        self._session.require_open()
        return self._raw_rows()

    def _raw_rows(self) -> Generator[tuple[Any, ...], None, None]:
        with self._session.reading() as connection:
            # A copy reads the whole table: no sort spilled to disk.
            self._session.backend.prefer_index_order(connection)
            result = connection.execution_options(stream_results=True).exec_driver_sql(
                f"{self._sql.select} ORDER BY seq"
            )
            for partition in result.partitions(2000):  # the size is given: a bare partitions() fetches ALL
                for row in partition:
                    yield self._session.logical(row)

    def count(self) -> int:
        """How many rows are stored."""
        with self._session.reading() as connection:
            return int(connection.exec_driver_sql(self._sql.count).scalar_one())

    def head(self) -> ChainHead:
        """The last link of the chain."""
        with self._session.reading() as connection:
            return read_head(connection, self._sql)

    def checkpoint(self) -> Checkpoint:
        """A checkpoint of the current head: chain head, origin and tree root (None while there is no origin)."""
        with self._session.reading() as connection:
            head = read_head(connection, self._sql)
            origin = sealing.read_origin(connection, self._seal)
            if origin is None:
                return Checkpoint.from_head(head)
            return Checkpoint.from_head(
                head, origin=origin, root=stored_root(connection, self._seal, head, self._session.location)
            )

    def origin(self) -> str | None:
        """The store's origin (its log name), or None while none is set."""
        with self._session.reading() as connection:
            return sealing.read_origin(connection, self._seal)

    def iter_checkpoint_rows(self) -> Iterator[tuple[int, str, str, str, str]]:
        """Every stored signed checkpoint as (tree_size, key_name, key_hash, note, recorded_at), oldest first."""
        after = 0
        while True:
            with self._session.reading() as connection:
                rows = connection.exec_driver_sql(self._seal.copy_checkpoints, (after,)).fetchall()
            for row in rows:
                after = row[0]
                yield (row[1], row[2], row[3], row[4], row[5])
            if len(rows) < sealing.PAGE_ROWS:
                return

    def iter_witness_rows(self) -> Iterator[tuple[Any, ...]]:
        """Every stored witness size as (witness_name, witness_key_id, tree_size, recorded_at), oldest first."""
        return self._paged(self._seal.copy_witness_sizes)

    def iter_cosignature_rows(self) -> Iterator[tuple[Any, ...]]:
        """Every stored cosignature as (tree_size, witness_name, witness_key_id, timestamp, checkpoint, line,
        recorded_at), oldest first."""
        return self._paged(self._seal.copy_cosignatures)

    def _paged(self, query: str) -> Iterator[tuple[Any, ...]]:
        after = 0
        while True:
            with self._session.reading() as connection:
                rows = connection.exec_driver_sql(query, (after,)).fetchall()
            for row in rows:
                after = row[0]
                yield tuple(row[1:])
            if len(rows) < sealing.PAGE_ROWS:
                return


def stored_root(connection: Connection, seal: SealStatements, head: ChainHead, location: Location) -> bytes:
    """The root of the stored tree at `head` (a store not yet built refuses: run migrate)."""
    if not sealing.tree_is_built(connection, seal, head.seq):
        raise StoreUnavailable(
            f"{location.display} has no Merkle tree yet (migrated offline): run `compute-budget migrate` or "
            "record with it once to build it"
        )
    return sealing.frontier_at(connection, seal, head.seq).root()


def readable(row: tuple[Any, ...]) -> StoredDecision:
    """A stored row for a viewer: one that cannot be read is reported with where it is, not skipped."""
    try:
        return stored_from_row(row)
    except MalformedDecision as error:
        raise StoreDamaged(
            f"row seq {row[0]!r} (budget_id {row[1]!r}) cannot be read: {error}; run `compute-budget audit`"
        ) from None
