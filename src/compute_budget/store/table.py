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
