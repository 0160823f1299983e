"""`Snapshot`: the auditor's reads inside one read transaction of a store, so every query sees the same rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import Connection

from compute_budget.core.log.merkle import CompactRange
from compute_budget.core.log.note import VerifierKey
from compute_budget.core.log.tree import TiledTree
from compute_budget.core.seal_checks import StoredCheckpoint
from compute_budget.errors import StoreDamaged
from compute_budget.store import repairs
from compute_budget.store import seal_tables as sealing
from compute_budget.store.backends import backend_for
from compute_budget.store.repairs import Repair
from compute_budget.store.schema_check import schema_problems
from compute_budget.store.seal_tables import SealStatements
from compute_budget.store.session import prefer_index_order
from compute_budget.store.statements import Statements


class Snapshot:
    """Reads inside one transaction of a store (see `BudgetStore.snapshot`)."""

    def __init__(self, connection: Connection, statements: Statements, seal: SealStatements) -> None:
        self._connection = connection
        self._statements = statements
        self._seal = seal

    # -- the seal -----------------------------------------------------------------------------------------------

    def origin(self) -> str | None:
        """The store's origin, or None while none is set."""
        return sealing.read_origin(self._connection, self._seal)

    def provenance(self) -> sealing.Provenance | None:
        """Where a salvaged store came from (spec 9.8): (source origin, through seq, root, chain hash, recorded at),
        or None for a store that was not made by `copy --through`."""
        return sealing.read_provenance(self._connection, self._seal)

    def tree(self, size: int) -> TiledTree:
        """A `NodeReader` over the stored tree of the first `size` rows."""
        return sealing.tree_reader(self._connection, self._seal, size)

    def tree_is_built(self, size: int) -> bool:
        """True when the stored tree covers `size` rows (False for a store migrated without its tree yet)."""
        return sealing.tree_is_built(self._connection, self._seal, size)

    def has_tree_nodes(self) -> bool:
        """True when any tree node is stored."""
        return not sealing.tree_is_empty(self._connection, self._seal)

    def frontier(self, size: int) -> CompactRange:
        """The compact range of the stored tree at `size` (`StoreDamaged` when it cannot be read)."""
        return sealing.frontier_at(self._connection, self._seal, size)

    def chain_at(self, seq: int) -> str | None:
        """The stored chain_hash of row `seq` (the genesis for 0), or None."""
        return sealing.chain_at(self._connection, self._statements)(seq)

    def raw_row(self, budget_id: str) -> tuple[Any, ...] | None:
        """The stored row with this budget_id, raw (`row.ROW_COLUMNS` order), or None."""
        row = self._connection.exec_driver_sql(self._statements.by_budget_id, (budget_id,)).first()
        return None if row is None else tuple(row)

    def newest_by_key(self, key: VerifierKey, *, at_most: int | None = None) -> Iterator[StoredCheckpoint]:
        """Stored checkpoints recorded as signed by `key`, newest first (up to tree size `at_most`)."""
        return sealing.newest_by_key(self._connection, self._seal, key, at_most=at_most)

    def newest_covering(self, seq: int, at_most: int) -> StoredCheckpoint | None:
        """The newest stored checkpoint whose tree covers row `seq` (size seq..at_most), or None."""
        row = self._connection.exec_driver_sql(self._seal.newest_covering, (seq, at_most)).first()
        return None if row is None else sealing.stored_checkpoint(tuple(row))

    def checkpoints_at(self, size: int) -> list[StoredCheckpoint]:
        """The stored checkpoints of tree size `size`, newest first (at most 20)."""
        rows = self._connection.exec_driver_sql(self._seal.at_size, (size,)).fetchall()
        return [sealing.stored_checkpoint(tuple(row)) for row in rows]

    def unreadable_checkpoints(self) -> list[tuple[int, str]]:
        """(id, names of the wrongly typed columns) of stored checkpoint entries that are no checkpoint at all: a
        value not of its column's type, which every other reader of checkpoints skips (at most 100)."""
        rows = self._connection.exec_driver_sql(self._seal.unreadable_checkpoints).fetchall()
        return [(row[0], str(row[1]).strip()) for row in rows]

    def checkpoints_beyond(self, size: int) -> list[StoredCheckpoint]:
        """Stored checkpoints naming more rows than `size` (at most 100)."""
        rows = self._connection.exec_driver_sql(self._seal.beyond, (size,)).fetchall()
        return [sealing.stored_checkpoint(tuple(row)) for row in rows]

    def misplaced_nodes(self, size: int) -> list[tuple[Any, Any]]:
        """(level, idx) of stored tree nodes below the stored levels or over rows beyond `size` (at most 100)."""
        return [(row[0], row[1]) for row in self._connection.exec_driver_sql(self._seal.misplaced_nodes, (size,))]

    def checkpoints_between(self, low: int, high: int) -> Iterator[StoredCheckpoint]:
        """Stored checkpoints with low < tree_size <= high, in size order."""
        return sealing.checkpoints_between(self._connection, self._seal, low, high)

    def nodes_at(self, level: int, first: int, last: int) -> Iterator[tuple[int, str]]:
        """Stored tree nodes (idx, hex hash) of `level` with first <= idx <= last, in order."""
        while first <= last:
            rows = self._connection.exec_driver_sql(self._seal.nodes_at, (level, first, last)).fetchall()
            for row in rows:
                first = int(row[0]) + 1
                yield int(row[0]), str(row[1])
            if len(rows) < sealing.PAGE_ROWS:
                return

    def cosignatures_newest_first(self, at_most: int) -> Iterator[tuple[int, str, str]]:
        """Stored cosignatures (tree_size, checkpoint text, line) of trees up to `at_most` rows, newest first."""
        size, last_id = at_most, 2**63 - 1
        while True:
            rows = self._connection.exec_driver_sql(self._seal.cosignatures_desc, (size, size, last_id)).fetchall()
            for row in rows:
                last_id, size = int(row[0]), int(row[1])
                yield size, str(row[2]), str(row[3])
            if len(rows) < sealing.PAGE_ROWS:
                return

    def witness_sizes(self) -> list[tuple[str, str, int]]:
        """The distinct (witness name, key ID, size) a submitter stored (spec 9.5), largest sizes first; at most
        one page of them (a store where more were planted is reported from its largest)."""
        rows = self._connection.exec_driver_sql(self._seal.witness_sizes_claimed).fetchall()
        return [(str(row[0]), str(row[1]), int(row[2])) for row in rows]

    def cosignatures_filed_at(self, size: int) -> list[tuple[str, str]]:
        """The stored cosignatures (checkpoint text, line) filed under `size`."""
        rows = self._connection.exec_driver_sql(self._seal.cosignatures_at, (size,)).fetchall()
        return [(str(row[0]), str(row[1])) for row in rows]

    def cosignatures_of(self, checkpoint_text: str, size: int) -> list[str]:
        """The stored cosignature lines of exactly this checkpoint text."""
        rows = self._connection.exec_driver_sql(self._seal.cosignatures_at, (size,)).fetchall()
        return [str(row[1]) for row in rows if row[0] == checkpoint_text]

    def rows_between(self, low: int, high: int, *, batch_rows: int = 2000) -> Iterator[list[tuple[Any, ...]]]:
        """Raw rows with low < seq <= high in seq order, a batch per query."""
        while low < high:
            upper = min(low + batch_rows, high)
            with backend_for(self._connection).tolerant_text(self._connection):
                prefer_index_order(self._connection)
                rows = self._connection.exec_driver_sql(self._statements.seq_range, (low, upper)).fetchall()
            yield [tuple(row) for row in rows]
            low = upper

    # -- the chain ----------------------------------------------------------------------------------------------

    def max_seq(self) -> int:
        """The highest seq that is an integer (0 for an empty store)."""
        value = self._connection.exec_driver_sql(self._statements.max_integer_seq).scalar()
        return int(value) if value is not None else 0

    def link_at(self, seq: int) -> tuple[Any, Any, Any] | None:
        """The raw (seq, chain_hash, budget_id) stored at `seq`, as stored (tampered values included), or None."""
        with backend_for(self._connection).tolerant_text(self._connection):
            row = self._connection.exec_driver_sql(self._statements.link_at, (seq,)).first()
        return None if row is None else (row[0], row[1], row[2])

    def link_at_or_before(self, seq: int) -> tuple[int, str] | None:
        """The (seq, chain_hash) of the last row at or before `seq`, when it is readable."""
        with backend_for(self._connection).tolerant_text(self._connection):
            row = self._connection.exec_driver_sql(self._statements.link_at_or_before, (seq,)).first()
        if row is None or type(row[0]) is not int or not isinstance(row[1], str):
            return None
        return row[0], row[1]

    # -- the database's own health (`auditor.source.DatabaseHealth`) ------------------------------------------------

    def health(self) -> Snapshot:
        """This snapshot: a database answers the health checks itself, in the same transaction as its rows."""
        return self

    def schema_problems(self) -> list[str]:
        """How the guard and the guarded tables differ from what this release creates (empty: they do not)."""
        return schema_problems(self._connection)

    def repair_problems(self) -> list[str]:
        """Each repair `migrate` recorded that no writer acknowledged, and each acknowledgement written by hand
        (spec 9.9.10): the audit's `schema_tampered`."""
        return repairs.problems(self._connection)

    def repairs(self) -> list[Repair]:
        """Every repair and acknowledgement, oldest first (`StoreDamaged` when one was written by hand so that it
        cannot be read: a copy would lose it)."""
        found, unreadable = repairs.read_all(self._connection)
        if unreadable:
            raise StoreDamaged(f"{unreadable[0]}; run `compute-budget audit`")
        return found

    def write_privileges(self) -> list[str]:
        """On PostgreSQL, which of INSERT, UPDATE, DELETE and TRUNCATE this connection's role holds on the
        decisions table (a reader's `default_transaction_read_only` can be lifted by `SET TRANSACTION READ
        WRITE`; only a SELECT-only role is a real guarantee). SQLite: none (readers open the file read-only)."""
        return backend_for(self._connection).write_privileges(self._connection)

    def count(self) -> int:
        """How many rows the table holds."""
        return int(self._connection.exec_driver_sql(self._statements.count).scalar_one())

    def misplaced_rows(self, max_seq: int) -> list[tuple[Any, Any]]:
        """(budget_id, seq) of the rows whose seq is missing, not a positive integer, or beyond `max_seq`."""
        with backend_for(self._connection).tolerant_text(self._connection):
            rows = self._connection.exec_driver_sql(self._statements.misplaced, (max_seq,)).fetchall()
        return [(row[0], row[1]) for row in rows]
