"""Create compute_budget_decisions with its indexes and the append-only guard.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "compute_budget_decisions"

# The append-only guard as this revision installed it, frozen here: a revision never imports live code.
_SQLITE_GUARD = (
    """CREATE TRIGGER compute_budget_decisions_no_update BEFORE UPDATE ON compute_budget_decisions
    BEGIN SELECT RAISE(ABORT, 'compute_budget_decisions is append-only: UPDATE is not allowed'); END""",
    """CREATE TRIGGER compute_budget_decisions_no_delete BEFORE DELETE ON compute_budget_decisions
    BEGIN SELECT RAISE(ABORT, 'compute_budget_decisions is append-only: DELETE is not allowed'); END""",
    """CREATE TRIGGER compute_budget_decisions_no_replace BEFORE INSERT ON compute_budget_decisions
    WHEN EXISTS (SELECT 1 FROM compute_budget_decisions WHERE budget_id = NEW.budget_id OR seq = NEW.seq)
    BEGIN SELECT RAISE(ABORT, 'compute_budget_decisions is append-only: a stored row cannot be replaced'); END""",
)
_SQLITE_UNGUARD = (
    "DROP TRIGGER IF EXISTS compute_budget_decisions_no_update",
    "DROP TRIGGER IF EXISTS compute_budget_decisions_no_delete",
    "DROP TRIGGER IF EXISTS compute_budget_decisions_no_replace",
)
_POSTGRESQL_GUARD = (
    """CREATE OR REPLACE FUNCTION compute_budget_decisions_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION USING
            MESSAGE = 'compute_budget_decisions is append-only: ' || TG_OP || ' is not allowed',
            ERRCODE = 'insufficient_privilege';
    END $$""",
    """CREATE TRIGGER compute_budget_decisions_no_update_delete BEFORE UPDATE OR DELETE ON compute_budget_decisions
    FOR EACH ROW EXECUTE FUNCTION compute_budget_decisions_append_only()""",
    """CREATE TRIGGER compute_budget_decisions_no_truncate BEFORE TRUNCATE ON compute_budget_decisions
    FOR EACH STATEMENT EXECUTE FUNCTION compute_budget_decisions_append_only()""",
)
_POSTGRESQL_UNGUARD = (
    "DROP TRIGGER IF EXISTS compute_budget_decisions_no_update_delete ON compute_budget_decisions",
    "DROP TRIGGER IF EXISTS compute_budget_decisions_no_truncate ON compute_budget_decisions",
    "DROP FUNCTION IF EXISTS compute_budget_decisions_append_only()",
)


def _run(statements: dict[str, tuple[str, ...]]) -> None:
    # op.execute, not a live connection: works online and in offline (--sql) mode alike.
    dialect = op.get_context().dialect.name
    if dialect not in statements:
        raise NotImplementedError(f"no append-only guard is written for the {dialect} backend")
    for statement in statements[dialect]:
        op.execute(statement)


def create_guard() -> None:
    _run({"sqlite": _SQLITE_GUARD, "postgresql": _POSTGRESQL_GUARD})


def drop_guard() -> None:
    _run({"sqlite": _SQLITE_UNGUARD, "postgresql": _POSTGRESQL_UNGUARD})


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
    create_guard()


def downgrade() -> None:
    drop_guard()
    op.drop_index("ix_compute_budget_decisions_status", table_name=TABLE)
    op.drop_index("ix_compute_budget_decisions_gate_decision_id", table_name=TABLE)
    op.drop_table(TABLE)
