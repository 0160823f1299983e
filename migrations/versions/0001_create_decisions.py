"""Create compute_budget_decisions with its indexes and the append-only guard.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from compute_budget.guard import create_guard, drop_guard

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "compute_budget_decisions"


def _big() -> sa.types.TypeEngine[int]:
    # BIGINT on PostgreSQL; INTEGER on SQLite, where only INTEGER is a 64-bit rowid-style integer.
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("seq", _big(), nullable=False),
        sa.Column("budget_id", sa.String(64), nullable=False),
        sa.Column("policy_version", sa.Text(), nullable=False),
        sa.Column("gate_decision_id", sa.Text(), nullable=False),
        sa.Column("gate_policy_version", sa.Text(), nullable=False),
        sa.Column("gate_input_digest", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("reason_code", sa.Text(), nullable=False),
        sa.Column("max_candidates", sa.Integer(), nullable=False),
        sa.Column("max_depth", sa.Integer(), nullable=False),
        sa.Column("max_steps", sa.Integer(), nullable=False),
        sa.Column("max_wallclock_ms", _big(), nullable=True),
        sa.Column("max_parallelism", sa.Integer(), nullable=False),
        sa.Column("evidence_spans", sa.Text(), nullable=False),
        sa.Column("explanation", sa.Text(), nullable=False),
        sa.Column("gate_input", sa.Text(), nullable=False),
        sa.Column("recorded_at", sa.Text(), nullable=False),
        sa.Column("chain_hash", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("budget_id", name="pk_compute_budget_decisions"),
        sa.UniqueConstraint("seq", name="uq_compute_budget_decisions_seq"),
    )
    op.create_index("ix_compute_budget_decisions_gate_decision_id", TABLE, ["gate_decision_id"])
    op.create_index("ix_compute_budget_decisions_status", TABLE, ["status"])
    create_guard(op.get_bind())


def downgrade() -> None:
    drop_guard(op.get_bind())
    op.drop_index("ix_compute_budget_decisions_status", table_name=TABLE)
    op.drop_index("ix_compute_budget_decisions_gate_decision_id", table_name=TABLE)
    op.drop_table(TABLE)
