"""Check constraints: positive seq, non-negative limits, 64-character budget_id and chain_hash.

On SQLite this rebuilds the table (batch mode), which drops its triggers: the append-only guard is taken
down first and put back before the migration ends, inside the same transaction.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from collections.abc import Sequence

from alembic import op

from compute_budget.guard import create_guard, drop_guard

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "compute_budget_decisions"
CHECKS = {
    "ck_compute_budget_decisions_seq_positive": "seq >= 1",
    "ck_compute_budget_decisions_limits_non_negative": (
        "max_candidates >= 0 AND max_depth >= 0 AND max_steps >= 0 AND max_parallelism >= 0"
    ),
    "ck_compute_budget_decisions_budget_id_sha256": "length(budget_id) = 64",
    "ck_compute_budget_decisions_chain_hash_sha256": "length(chain_hash) = 64",
}


def upgrade() -> None:
    drop_guard(op.get_bind())
    with op.batch_alter_table(TABLE) as batch:
        for name, condition in CHECKS.items():
            batch.create_check_constraint(op.f(name), condition)
    create_guard(op.get_bind())


def downgrade() -> None:
    drop_guard(op.get_bind())
    with op.batch_alter_table(TABLE) as batch:
        for name in CHECKS:
            batch.drop_constraint(op.f(name), type_="check")
    create_guard(op.get_bind())
