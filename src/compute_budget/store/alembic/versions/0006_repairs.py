"""Repairs (spec 9.9.10): what `migrate` repaired, and who acknowledged it.

One new table, append-only like the seal's: ``compute_budget_repairs`` holds a row of kind ``repair`` each time
`migrate` repaired something (what, and the head's size then), and a row of kind ``acknowledged`` each time a
writer acknowledged the repairs before it (`record --after-repair ID`). Until then writers refuse to append and
the audit reports the repair as ``schema_tampered``.

The guard reuses the seal's PostgreSQL function (revision 0003), as 0004 and 0005 do.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

REPAIRS = "compute_budget_repairs"

# The guard as this revision installs it, frozen here: a revision never imports live code.
_SQLITE_GUARD = (
    f"""CREATE TRIGGER {REPAIRS}_no_update BEFORE UPDATE ON {REPAIRS}
    BEGIN SELECT RAISE(ABORT, '{REPAIRS} is append-only: UPDATE is not allowed'); END""",
    f"""CREATE TRIGGER {REPAIRS}_no_delete BEFORE DELETE ON {REPAIRS}
    BEGIN SELECT RAISE(ABORT, '{REPAIRS} is append-only: DELETE is not allowed'); END""",
    f"""CREATE TRIGGER {REPAIRS}_no_replace BEFORE INSERT ON {REPAIRS}
    WHEN EXISTS (SELECT 1 FROM {REPAIRS} WHERE id = NEW.id)
    BEGIN SELECT RAISE(ABORT, '{REPAIRS} is append-only: a stored row cannot be replaced'); END""",
)
_SQLITE_UNGUARD = tuple(f"DROP TRIGGER IF EXISTS {REPAIRS}_{name}" for name in ("no_update", "no_delete", "no_replace"))
_POSTGRESQL_GUARD = (
    f"""CREATE TRIGGER {REPAIRS}_no_update_delete BEFORE UPDATE OR DELETE ON {REPAIRS}
    FOR EACH ROW EXECUTE FUNCTION compute_budget_seal_append_only()""",
    f"""CREATE TRIGGER {REPAIRS}_no_truncate BEFORE TRUNCATE ON {REPAIRS}
    FOR EACH STATEMENT EXECUTE FUNCTION compute_budget_seal_append_only()""",
)
_POSTGRESQL_UNGUARD = tuple(
    f"DROP TRIGGER IF EXISTS {REPAIRS}_{name} ON {REPAIRS}" for name in ("no_update_delete", "no_truncate")
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
        REPAIRS,
        sa.Column("id", big, nullable=False, autoincrement=True),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("recorded_at", sa.Text(), nullable=False),
        sa.Column("what", sa.Text(), nullable=False),
        sa.Column("head_size", big, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_compute_budget_repairs"),
        sa.CheckConstraint("kind IN ('repair', 'acknowledged')", name=op.f("ck_compute_budget_repairs_kind_known")),
        sa.CheckConstraint("head_size >= 0", name=op.f("ck_compute_budget_repairs_head_size_non_negative")),
    )
    _run({"sqlite": _SQLITE_GUARD, "postgresql": _POSTGRESQL_GUARD})


def downgrade() -> None:
    _run({"sqlite": _SQLITE_UNGUARD, "postgresql": _POSTGRESQL_UNGUARD})
    op.drop_table(REPAIRS)
