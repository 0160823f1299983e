"""The `compute_budget_decisions` table as SQLAlchemy metadata (the migrations create it; this describes it).

Every constraint is named, so migrations and autogenerate agree on every backend.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, CheckConstraint, Column, Index, Integer, MetaData, String, Table, Text

TABLE_NAME = "compute_budget_decisions"

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_name)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "pk": "pk_%(table_name)s",
    }
)

decisions = Table(
    TABLE_NAME,
    metadata,
    Column("seq", BigInteger().with_variant(Integer(), "sqlite"), nullable=False, unique=True),
    Column("budget_id", String(64), primary_key=True),
    Column("policy_version", Text, nullable=False),
    Column("gate_decision_id", Text, nullable=False),
    Column("gate_policy_version", Text, nullable=False),
    Column("gate_input_digest", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("reason_code", Text, nullable=False),
    Column("max_candidates", Integer, nullable=False),
    Column("max_depth", Integer, nullable=False),
    Column("max_steps", Integer, nullable=False),
    Column("max_wallclock_ms", BigInteger().with_variant(Integer(), "sqlite"), nullable=True),
    Column("max_parallelism", Integer, nullable=False),
    Column("evidence_spans", Text, nullable=False),
    Column("explanation", Text, nullable=False),
    Column("gate_input", Text, nullable=False),
    Column("recorded_at", Text, nullable=False),
    Column("chain_hash", String(64), nullable=False),
    Index("ix_compute_budget_decisions_gate_decision_id", "gate_decision_id"),
    Index("ix_compute_budget_decisions_status", "status"),
    CheckConstraint("seq >= 1", name="seq_positive"),
    CheckConstraint(
        "max_candidates >= 0 AND max_depth >= 0 AND max_steps >= 0 AND max_parallelism >= 0",
        name="limits_non_negative",
    ),
    CheckConstraint("length(budget_id) = 64", name="budget_id_sha256"),
    CheckConstraint("length(chain_hash) = 64", name="chain_hash_sha256"),
)

# Every stored column, in table order (seq, budget_id, the decision's fields, gate_input, recorded_at,
# chain_hash); `chain.CHAINED_COLUMNS` is this without chain_hash, and a test holds the two together.
COLUMNS: tuple[str, ...] = tuple(column.name for column in decisions.columns)

# The seal (spec section 8, migration 0003): the store's origin, the stored nodes of its Merkle tree (levels 8 and
# up, see core.log.tree) and its append-only table of signed checkpoints.
ORIGIN_TABLE = "compute_budget_origin"
NODES_TABLE = "compute_budget_tree_nodes"
CHECKPOINTS_TABLE = "compute_budget_checkpoints"

origin = Table(
    ORIGIN_TABLE,
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("origin", Text, nullable=False),
    CheckConstraint("id = 1", name="single_row"),
)

tree_nodes = Table(
    NODES_TABLE,
    metadata,
    Column("level", Integer, primary_key=True, autoincrement=False),
    Column("idx", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=False),
    Column("hash", String(64), nullable=False),
    CheckConstraint("level >= 0 AND idx >= 0", name="position_non_negative"),
    CheckConstraint("length(hash) = 64", name="hash_sha256"),
)

checkpoints = Table(
    CHECKPOINTS_TABLE,
    metadata,
    Column("id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True),
    Column("tree_size", BigInteger().with_variant(Integer(), "sqlite"), nullable=False),
    Column("key_name", Text, nullable=False),
    Column("key_hash", String(8), nullable=False),
    Column("note", Text, nullable=False),
    Column("recorded_at", Text, nullable=False),
    Index("ix_compute_budget_checkpoints_tree_size", "tree_size"),
    Index("ix_compute_budget_checkpoints_key", "key_name", "key_hash", "tree_size"),
    CheckConstraint("tree_size >= 0", name="tree_size_non_negative"),
)

# Salvage (spec 9.8, migration 0004): where a store made by `copy --through` came from. At most one row.
PROVENANCE_TABLE = "compute_budget_provenance"

provenance = Table(
    PROVENANCE_TABLE,
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("source_origin", Text, nullable=False),
    Column("through_seq", BigInteger().with_variant(Integer(), "sqlite"), nullable=False),
    Column("root", Text, nullable=False),
    Column("chain_hash", String(64), nullable=False),
    Column("recorded_at", Text, nullable=False),
    CheckConstraint("id = 1", name="single_row"),
    CheckConstraint("through_seq >= 0", name="through_non_negative"),
    CheckConstraint("length(chain_hash) = 64", name="chain_hash_sha256"),
)

# Witnesses (spec 9.5, migration 0005): the size each witness last cosigned for this store (its newest row), and
# the cosignatures witnesses returned, with the checkpoint text each covers.
WITNESS_SIZES_TABLE = "compute_budget_witness_sizes"
COSIGNATURES_TABLE = "compute_budget_cosignatures"

witness_sizes = Table(
    WITNESS_SIZES_TABLE,
    metadata,
    Column("id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True),
    Column("witness_name", Text, nullable=False),
    Column("witness_key_id", String(8), nullable=False),
    Column("tree_size", BigInteger().with_variant(Integer(), "sqlite"), nullable=False),
    Column("recorded_at", Text, nullable=False),
    Index("ix_compute_budget_witness_sizes_witness", "witness_name", "witness_key_id", "id"),
    CheckConstraint("tree_size >= 0", name="tree_size_non_negative"),
)

cosignatures = Table(
    COSIGNATURES_TABLE,
    metadata,
    Column("id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True),
    Column("tree_size", BigInteger().with_variant(Integer(), "sqlite"), nullable=False),
    Column("witness_name", Text, nullable=False),
    Column("witness_key_id", String(8), nullable=False),
    Column("timestamp", BigInteger().with_variant(Integer(), "sqlite"), nullable=False),
    Column("checkpoint", Text, nullable=False),
    Column("line", Text, nullable=False),
    Column("recorded_at", Text, nullable=False),
    Index("ix_compute_budget_cosignatures_tree_size", "tree_size"),
    CheckConstraint("tree_size >= 0", name="tree_size_non_negative"),
)

WITNESS_TABLES: tuple[str, ...] = (WITNESS_SIZES_TABLE, COSIGNATURES_TABLE)

# Repairs (spec 9.9.10, migration 0006): one row each time `migrate` repaired something (kind 'repair': what it
# repaired and the head's size then), and one row each time a writer acknowledged the repairs before it (kind
# 'acknowledged', `record --after-repair ID`). Order is meaning: an acknowledgement covers every repair before it.
REPAIRS_TABLE = "compute_budget_repairs"

repairs = Table(
    REPAIRS_TABLE,
    metadata,
    Column("id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True),
    Column("kind", Text, nullable=False),
    Column("recorded_at", Text, nullable=False),
    Column("what", Text, nullable=False),
    Column("head_size", BigInteger().with_variant(Integer(), "sqlite"), nullable=False),
    CheckConstraint("kind IN ('repair', 'acknowledged')", name="kind_known"),
    CheckConstraint("head_size >= 0", name="head_size_non_negative"),
)

# Every table of this release's head schema, Alembic's own included (spec 9.7 compares a database with it).
VERSION_TABLE = "alembic_version"
HEAD_TABLES: frozenset[str] = frozenset({VERSION_TABLE, *metadata.tables})
