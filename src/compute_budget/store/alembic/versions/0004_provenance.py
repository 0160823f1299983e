"""Salvage provenance (spec 9.8): where a store copied with ``copy --through`` came from.

One new table, append-only like the seal's: ``compute_budget_provenance`` holds at most one row (``id = 1``), the
source store's origin, the size it was copied through, and the tree root (standard base64) and chain hash at that
size. ``copy SRC DST --through SEQ`` writes it in the same transaction as the rows; ``audit`` prints it. The guard
reuses the seal's PostgreSQL function (revision 0003), so nothing else changes.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PROVENANCE = "compute_budget_provenance"

# The guard as this revision installs it, frozen here: a revision never imports live code.
_SQLITE_GUARD = (
    """CREATE TRIGGER compute_budget_provenance_no_update BEFORE UPDATE ON compute_budget_provenance
    BEGIN SELECT RAISE(ABORT, 'compute_budget_provenance is append-only: UPDATE is not allowed'); END""",
    """CREATE TRIGGER compute_budget_provenance_no_delete BEFORE DELETE ON compute_budget_provenance
    BEGIN SELECT RAISE(ABORT, 'compute_budget_provenance is append-only: DELETE is not allowed'); END""",
    """CREATE TRIGGER compute_budget_provenance_no_replace BEFORE INSERT ON compute_budget_provenance
    WHEN EXISTS (SELECT 1 FROM compute_budget_provenance WHERE id = NEW.id)
    BEGIN SELECT RAISE(ABORT, 'compute_budget_provenance is append-only: a stored row cannot be replaced'); END""",
)
_SQLITE_UNGUARD = (
    "DROP TRIGGER IF EXISTS compute_budget_provenance_no_update",
    "DROP TRIGGER IF EXISTS compute_budget_provenance_no_delete",
    "DROP TRIGGER IF EXISTS compute_budget_provenance_no_replace",
)
_POSTGRESQL_GUARD = (
    """CREATE TRIGGER compute_budget_provenance_no_update_delete BEFORE UPDATE OR DELETE ON compute_budget_provenance
    FOR EACH ROW EXECUTE FUNCTION compute_budget_seal_append_only()""",
    """CREATE TRIGGER compute_budget_provenance_no_truncate BEFORE TRUNCATE ON compute_budget_provenance
    FOR EACH STATEMENT EXECUTE FUNCTION compute_budget_seal_append_only()""",
)
_POSTGRESQL_UNGUARD = (
    "DROP TRIGGER IF EXISTS compute_budget_provenance_no_update_delete ON compute_budget_provenance",
    "DROP TRIGGER IF EXISTS compute_budget_provenance_no_truncate ON compute_budget_provenance",
)


def _run(statements: dict[str, tuple[str, ...]]) -> None:
    # op.execute, not a live connection: works online and in offline (--sql) mode alike.
    dialect = op.get_context().dialect.name
    if dialect not in statements:
        raise NotImplementedError(f"no append-only guard is written for the {dialect} backend")
    for statement in statements[dialect]:
        op.execute(statement)


def upgrade() -> None:
    op.create_table(
        PROVENANCE,
        sa.Column("id", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("source_origin", sa.Text(), nullable=False),
        sa.Column("through_seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("root", sa.Text(), nullable=False),
        sa.Column("chain_hash", sa.String(64), nullable=False),
        sa.Column("recorded_at", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_compute_budget_provenance"),
        sa.CheckConstraint("id = 1", name=op.f("ck_compute_budget_provenance_single_row")),
        sa.CheckConstraint("through_seq >= 0", name=op.f("ck_compute_budget_provenance_through_non_negative")),
        sa.CheckConstraint("length(chain_hash) = 64", name=op.f("ck_compute_budget_provenance_chain_hash_sha256")),
    )
    _run({"sqlite": _SQLITE_GUARD, "postgresql": _POSTGRESQL_GUARD})


def downgrade() -> None:
    _run({"sqlite": _SQLITE_UNGUARD, "postgresql": _POSTGRESQL_UNGUARD})
    op.drop_table(PROVENANCE)
