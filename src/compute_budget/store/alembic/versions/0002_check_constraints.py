"""Check constraints: positive seq, non-negative limits, 64-character budget_id and chain_hash.

On SQLite this rebuilds the table (batch mode), which drops its triggers: the append-only guard is taken
down first and put back before the migration ends, inside the same transaction.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import context, op

revision: str = "0002"
down_revision: str | None = "0001"
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


CHECKS = {
    "ck_compute_budget_decisions_seq_positive": "seq >= 1",
    "ck_compute_budget_decisions_limits_non_negative": (
        "max_candidates >= 0 AND max_depth >= 0 AND max_steps >= 0 AND max_parallelism >= 0"
    ),
    "ck_compute_budget_decisions_budget_id_sha256": "length(budget_id) = 64",
    "ck_compute_budget_decisions_chain_hash_sha256": "length(chain_hash) = 64",
}


def _table_at_0001() -> sa.Table:
    """The table exactly as revision 0001 created it: offline (--sql) batch mode cannot reflect it."""
    big = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    return sa.Table(
        TABLE,
        sa.MetaData(),
        sa.Column("seq", big, nullable=False),
        sa.Column("budget_id", sa.String(64), nullable=False),
        *(
            sa.Column(name, sa.Text(), nullable=False)
            for name in (
                "policy_version",
                "gate_decision_id",
                "gate_policy_version",
                "gate_input_digest",
                "status",
                "reason_code",
            )
        ),
        *(sa.Column(name, sa.Integer(), nullable=False) for name in ("max_candidates", "max_depth", "max_steps")),
        sa.Column("max_wallclock_ms", big, nullable=True),
        sa.Column("max_parallelism", sa.Integer(), nullable=False),
        *(
            sa.Column(name, sa.Text(), nullable=False)
            for name in ("evidence_spans", "explanation", "gate_input", "recorded_at")
        ),
        sa.Column("chain_hash", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("budget_id", name="pk_compute_budget_decisions"),
        sa.UniqueConstraint("seq", name="uq_compute_budget_decisions_seq"),
        sa.Index("ix_compute_budget_decisions_gate_decision_id", "gate_decision_id"),
        sa.Index("ix_compute_budget_decisions_status", "status"),
    )


def _batch() -> Any:
    return op.batch_alter_table(TABLE, copy_from=_table_at_0001() if context.is_offline_mode() else None)


def upgrade() -> None:
    drop_guard()
    with _batch() as batch:
        for name, condition in CHECKS.items():
            batch.create_check_constraint(op.f(name), condition)
    create_guard()


def downgrade() -> None:
    drop_guard()
    with _batch() as batch:
        for name in CHECKS:
            batch.drop_constraint(op.f(name), type_="check")
    create_guard()
