"""Witnesses (spec 9.5): the size each witness last cosigned for this store, and the cosignatures it returned.

Two new tables, append-only like the seal's:

- ``compute_budget_witness_sizes``: one row each time a witness answers 200 or 409 (its key name and ID, the size
  it now holds); a witness's current size is its newest row.
- ``compute_budget_cosignatures``: each valid cosignature line a witness returned, with the checkpoint text it
  covers, its tree size and timestamp.

The guard reuses the seal's PostgreSQL function (revision 0003), as 0004 does.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SIZES = "compute_budget_witness_sizes"
COSIGNATURES = "compute_budget_cosignatures"

# The guard as this revision installs it, frozen here: a revision never imports live code.
_SQLITE_GUARD = tuple(
    statement
    for table in (SIZES, COSIGNATURES)
    for statement in (
        f"""CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table}
    BEGIN SELECT RAISE(ABORT, '{table} is append-only: UPDATE is not allowed'); END""",
        f"""CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table}
    BEGIN SELECT RAISE(ABORT, '{table} is append-only: DELETE is not allowed'); END""",
        f"""CREATE TRIGGER {table}_no_replace BEFORE INSERT ON {table}
    WHEN EXISTS (SELECT 1 FROM {table} WHERE id = NEW.id)
    BEGIN SELECT RAISE(ABORT, '{table} is append-only: a stored row cannot be replaced'); END""",
    )
)
_SQLITE_UNGUARD = tuple(
    f"DROP TRIGGER IF EXISTS {table}_{name}"
    for table in (SIZES, COSIGNATURES)
    for name in ("no_update", "no_delete", "no_replace")
)
_POSTGRESQL_GUARD = tuple(
    statement
    for table in (SIZES, COSIGNATURES)
    for statement in (
        f"""CREATE TRIGGER {table}_no_update_delete BEFORE UPDATE OR DELETE ON {table}
    FOR EACH ROW EXECUTE FUNCTION compute_budget_seal_append_only()""",
        f"""CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table}
    FOR EACH STATEMENT EXECUTE FUNCTION compute_budget_seal_append_only()""",
    )
)
_POSTGRESQL_UNGUARD = tuple(
    f"DROP TRIGGER IF EXISTS {table}_{name} ON {table}"
    for table in (SIZES, COSIGNATURES)
    for name in ("no_update_delete", "no_truncate")
)


def _run(statements: dict[str, tuple[str, ...]]) -> None:
    # op.execute, not a live connection: works online and in offline (--sql) mode alike.
    dialect = op.get_context().dialect.name
    if dialect not in statements:
        raise NotImplementedError(f"no append-only guard is written for the {dialect} backend")
    for statement in statements[dialect]:
        op.execute(statement)


def upgrade() -> None:
    big = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        SIZES,
        sa.Column("id", big, nullable=False, autoincrement=True),
        sa.Column("witness_name", sa.Text(), nullable=False),
        sa.Column("witness_key_id", sa.String(8), nullable=False),
        sa.Column("tree_size", big, nullable=False),
        sa.Column("recorded_at", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_compute_budget_witness_sizes"),
        sa.CheckConstraint("tree_size >= 0", name=op.f("ck_compute_budget_witness_sizes_tree_size_non_negative")),
    )
    op.create_index("ix_compute_budget_witness_sizes_witness", SIZES, ["witness_name", "witness_key_id", "id"])
    op.create_table(
        COSIGNATURES,
        sa.Column("id", big, nullable=False, autoincrement=True),
        sa.Column("tree_size", big, nullable=False),
        sa.Column("witness_name", sa.Text(), nullable=False),
        sa.Column("witness_key_id", sa.String(8), nullable=False),
        sa.Column("timestamp", big, nullable=False),
        sa.Column("checkpoint", sa.Text(), nullable=False),
        sa.Column("line", sa.Text(), nullable=False),
        sa.Column("recorded_at", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_compute_budget_cosignatures"),
        sa.CheckConstraint("tree_size >= 0", name=op.f("ck_compute_budget_cosignatures_tree_size_non_negative")),
    )
    op.create_index("ix_compute_budget_cosignatures_tree_size", COSIGNATURES, ["tree_size"])
    _run({"sqlite": _SQLITE_GUARD, "postgresql": _POSTGRESQL_GUARD})


def downgrade() -> None:
    _run({"sqlite": _SQLITE_UNGUARD, "postgresql": _POSTGRESQL_UNGUARD})
    op.drop_index("ix_compute_budget_cosignatures_tree_size", table_name=COSIGNATURES)
    op.drop_table(COSIGNATURES)
    op.drop_index("ix_compute_budget_witness_sizes_witness", table_name=SIZES)
    op.drop_table(SIZES)
