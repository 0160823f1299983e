"""The SQL of the seal's tables (spec section 8), written once for every backend: each backend hands in its
placeholder mark and its few phrases (`Backend.seal`). Apart from `store.seal_tables`, which runs it, so that the
backends can build it without importing what reads through them."""

from __future__ import annotations

from compute_budget.core.log.tree import TILE_LEVEL
from compute_budget.core.row import ROW_COLUMNS
from compute_budget.store.table import (
    CHECKPOINTS_TABLE,
    COSIGNATURES_TABLE,
    NODES_TABLE,
    ORIGIN_TABLE,
    PROVENANCE_TABLE,
    TABLE_NAME,
    WITNESS_SIZES_TABLE,
)

ORIGIN_PREFIX = "compute-budget/"
PAGE_ROWS = 2000  # rows or table entries read per query when streaming
NEWEST_PAGE_ROWS = 50  # checkpoint entries read per query, newest first (the first page almost always answers)
MAX_NODE_LEVEL = 62  # a node at level 63 would cover 2**63 rows, more than a seq can number
_CHECKPOINT_COLUMNS = "id, tree_size, key_name, key_hash, note"
# A checkpoint entry whose values have their columns' types (a CAST to the same type compares unequal to a text in
# an INTEGER column, a real with a fraction, a blob in a TEXT column; NULL leaves the test NULL). On PostgreSQL the
# typed columns make it always true.
_READABLE_CHECKPOINT = (
    "(tree_size = CAST(tree_size AS BIGINT) AND key_name = CAST(key_name AS TEXT) "
    "AND key_hash = CAST(key_hash AS TEXT) AND note = CAST(note AS TEXT))"
)
# The names of an entry's columns that fail that test, as ASCII text (the values themselves may not decode).
_UNREADABLE_COLUMNS = " || ".join(
    f"CASE WHEN COALESCE({name} = CAST({name} AS {kind}), FALSE) THEN '' ELSE '{name} ' END"
    for name, kind in (("tree_size", "BIGINT"), ("key_name", "TEXT"), ("key_hash", "TEXT"), ("note", "TEXT"))
)


class SealStatements:
    """The seal's SQL for one backend (`mark` is its parameter placeholder)."""

    def __init__(self, mark: str) -> None:
        self.mark = m = mark
        self.get_origin = f"SELECT origin FROM {ORIGIN_TABLE} WHERE id = 1"
        self.set_origin = f"INSERT INTO {ORIGIN_TABLE} (id, origin) VALUES (1, {m})"
        self.node = f"SELECT hash FROM {NODES_TABLE} WHERE level = {m} AND idx = {m}"
        self.insert_node = f"INSERT INTO {NODES_TABLE} (level, idx, hash) VALUES ({m}, {m}, {m})"
        self.any_node = f"SELECT 1 FROM {NODES_TABLE} LIMIT 1"
        self.nodes_at = (
            f"SELECT idx, hash FROM {NODES_TABLE} WHERE level = {m} AND idx >= {m} AND idx <= {m} "
            f"ORDER BY idx LIMIT {PAGE_ROWS}"
        )
        # Nodes no range of rows accounts for: a level or index that is not an integer (SQLite keeps 0.5 or 'zz' in
        # an INTEGER column; the CAST compares unequal to them), below the stored levels, above any tree's, or over
        # rows beyond the last one. (idx + 1) << level > size would overflow 64 bits for a forged index or level
        # and wrap to 0 or below, so the test is the equivalent idx >= size >> level, with levels capped at 62.
        self.misplaced_nodes = (
            f"SELECT level, idx FROM {NODES_TABLE} WHERE level <> CAST(level AS BIGINT) OR idx <> CAST(idx AS BIGINT) "
            f"OR level < {TILE_LEVEL} OR level > {MAX_NODE_LEVEL} OR idx < 0 OR idx >= ({m} >> level) "
            "ORDER BY level, idx LIMIT 100"
        )
        columns = ", ".join(ROW_COLUMNS)
        self.leaf_rows = f"SELECT {columns} FROM {TABLE_NAME} WHERE seq > {m} AND seq <= {m} ORDER BY seq"
        self._checkpoints(m)
        self._witnesses(m)

    def _checkpoints(self, m: str) -> None:
        """The signed checkpoints' and the provenance's SQL."""
        self.insert_checkpoint = (
            f"INSERT INTO {CHECKPOINTS_TABLE} (tree_size, key_name, key_hash, note, recorded_at) "
            f"VALUES ({m}, {m}, {m}, {m}, {m})"
        )
        # Every reader of checkpoints skips an entry whose values are not of their column's type (SQLite keeps
        # 'abc' in an INTEGER column, a blob in a TEXT one: a plain INSERT, which no guard stops, can add one);
        # the audit reports such entries (`unreadable_checkpoints`) instead of failing on them.
        ok = _READABLE_CHECKPOINT
        self.unreadable_checkpoints = (
            f"SELECT id, {_UNREADABLE_COLUMNS} FROM {CHECKPOINTS_TABLE} WHERE NOT COALESCE({ok}, FALSE) "
            "ORDER BY id LIMIT 100"
        )
        after = f"(tree_size > {m} OR (tree_size = {m} AND id > {m}))"
        self.checkpoints_between = (
            f"SELECT {_CHECKPOINT_COLUMNS} FROM {CHECKPOINTS_TABLE} WHERE {ok} AND {after} AND tree_size <= {m} "
            f"ORDER BY tree_size, id LIMIT {PAGE_ROWS}"
        )
        before = f"(tree_size < {m} OR (tree_size = {m} AND id < {m}))"
        self.newest_by_key = (
            f"SELECT {_CHECKPOINT_COLUMNS} FROM {CHECKPOINTS_TABLE} WHERE {ok} AND key_name = {m} AND key_hash = {m} "
            f"AND {before} ORDER BY tree_size DESC, id DESC LIMIT 50"
        )
        self.newest_any = (
            f"SELECT {_CHECKPOINT_COLUMNS} FROM {CHECKPOINTS_TABLE} WHERE {ok} AND {before} "
            f"ORDER BY tree_size DESC, id DESC LIMIT {NEWEST_PAGE_ROWS}"
        )
        self.newest_any_note = (
            f"SELECT note FROM {CHECKPOINTS_TABLE} WHERE {ok} ORDER BY tree_size DESC, id DESC LIMIT 1"
        )
        self.any_checkpoint = f"SELECT 1 FROM {CHECKPOINTS_TABLE} LIMIT 1"
        self.newest_covering = (
            f"SELECT {_CHECKPOINT_COLUMNS} FROM {CHECKPOINTS_TABLE} WHERE {ok} AND tree_size >= {m} "
            f"AND tree_size <= {m} ORDER BY tree_size DESC, id DESC LIMIT 1"
        )
        self.at_size = (
            f"SELECT {_CHECKPOINT_COLUMNS} FROM {CHECKPOINTS_TABLE} WHERE {ok} AND tree_size = {m} "
            "ORDER BY id DESC LIMIT 20"
        )
        self.beyond = (
            f"SELECT {_CHECKPOINT_COLUMNS} FROM {CHECKPOINTS_TABLE} WHERE {ok} AND tree_size > {m} "
            "ORDER BY tree_size, id LIMIT 100"
        )
        self.copy_checkpoints = (
            f"SELECT id, tree_size, key_name, key_hash, note, recorded_at FROM {CHECKPOINTS_TABLE} WHERE id > {m} "
            f"ORDER BY id LIMIT {PAGE_ROWS}"
        )
        self.get_provenance = (
            f"SELECT source_origin, through_seq, root, chain_hash, recorded_at FROM {PROVENANCE_TABLE} WHERE id = 1"
        )
        self.insert_provenance = (
            f"INSERT INTO {PROVENANCE_TABLE} (id, source_origin, through_seq, root, chain_hash, recorded_at) "
            f"VALUES (1, {m}, {m}, {m}, {m}, {m})"
        )

    def _witnesses(self, m: str) -> None:
        """The witnesses' SQL (spec 9.5, migration 0005)."""
        # The witness-sizes table is only copied now (`copy`): a submitter reads a witness's size from its
        # cosignatures (spec 9.9.1).
        self.insert_witness_size = (
            f"INSERT INTO {WITNESS_SIZES_TABLE} (witness_name, witness_key_id, tree_size, recorded_at) "
            f"VALUES ({m}, {m}, {m}, {m})"
        )
        self.insert_cosignature = (
            f"INSERT INTO {COSIGNATURES_TABLE} (tree_size, witness_name, witness_key_id, timestamp, checkpoint, line, "
            f"recorded_at) VALUES ({m}, {m}, {m}, {m}, {m}, {m}, {m})"
        )
        self.cosignatures_at = (
            f"SELECT checkpoint, line FROM {COSIGNATURES_TABLE} WHERE tree_size = {m} "
            "AND checkpoint = CAST(checkpoint AS TEXT) AND line = CAST(line AS TEXT) ORDER BY id LIMIT 1000"
        )
        self.cosignatures_desc = (
            f"SELECT id, tree_size, checkpoint, line FROM {COSIGNATURES_TABLE} WHERE tree_size = CAST(tree_size AS "
            "BIGINT) AND checkpoint = CAST(checkpoint AS TEXT) AND line = CAST(line AS TEXT) "
            f"AND (tree_size < {m} OR (tree_size = {m} AND id < {m})) "
            f"ORDER BY tree_size DESC, id DESC LIMIT {PAGE_ROWS}"
        )
        # One witness's stored cosignatures, newest first from a (size, id) cursor, skipping a size that is not an
        # integer (the caller skips text that is not text). A small page: the first row almost always answers.
        self.witness_cosignatures_desc = (
            f"SELECT id, tree_size, checkpoint, line FROM {COSIGNATURES_TABLE} WHERE witness_name = {m} "
            f"AND witness_key_id = {m} AND tree_size = CAST(tree_size AS BIGINT) "
            f"AND (tree_size < {m} OR (tree_size = {m} AND id < {m})) "
            f"ORDER BY tree_size DESC, id DESC LIMIT {NEWEST_PAGE_ROWS}"
        )
        self.copy_witness_sizes = (
            f"SELECT id, witness_name, witness_key_id, tree_size, recorded_at FROM {WITNESS_SIZES_TABLE} "
            f"WHERE id > {m} ORDER BY id LIMIT {PAGE_ROWS}"
        )
        # The audit's view of the sizes a submitter stored (spec 9.9.1): claims, each to be backed by a cosignature.
        self.witness_sizes_claimed = (
            f"SELECT witness_name, witness_key_id, tree_size FROM {WITNESS_SIZES_TABLE} "
            "WHERE tree_size = CAST(tree_size AS BIGINT) AND witness_name = CAST(witness_name AS TEXT) "
            "AND witness_key_id = CAST(witness_key_id AS TEXT) "
            f"GROUP BY witness_name, witness_key_id, tree_size ORDER BY tree_size DESC LIMIT {PAGE_ROWS}"
        )
        self.copy_cosignatures = (
            f"SELECT id, tree_size, witness_name, witness_key_id, timestamp, checkpoint, line, recorded_at "
            f"FROM {COSIGNATURES_TABLE} WHERE id > {m} ORDER BY id LIMIT {PAGE_ROWS}"
        )
