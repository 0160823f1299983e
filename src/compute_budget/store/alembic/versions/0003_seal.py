"""The seal (spec section 8): the store's origin, its Merkle tree's stored nodes and its signed checkpoints.

Three new tables, each append-only like the decisions table (UPDATE and DELETE abort with a message containing
``append-only``; on SQLite also INSERT OR REPLACE, on PostgreSQL also TRUNCATE). The decisions table and its guard
are not touched, so nothing is rebuilt.

This revision only creates tables: it writes no origin (the store sets one the first time it finds none, so a
``--sql`` script applied to many databases does not give them all one origin) and computes no hash (an offline
script cannot). The store builds the tree of an existing store's rows the first time it is opened for writing,
or at ``compute-budget migrate`` (both run this revision first), online and offline alike.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ORIGIN = "compute_budget_origin"
NODES = "compute_budget_tree_nodes"
CHECKPOINTS = "compute_budget_checkpoints"

# The guard of the three tables as this revision installs it, frozen here: a revision never imports live code.
_SQLITE_GUARD = (
    """CREATE TRIGGER compute_budget_origin_no_update BEFORE UPDATE ON compute_budget_origin
    BEGIN SELECT RAISE(ABORT, 'compute_budget_origin is append-only: UPDATE is not allowed'); END""",
    """CREATE TRIGGER compute_budget_origin_no_delete BEFORE DELETE ON compute_budget_origin
    BEGIN SELECT RAISE(ABORT, 'compute_budget_origin is append-only: DELETE is not allowed'); END""",
    """CREATE TRIGGER compute_budget_origin_no_replace BEFORE INSERT ON compute_budget_origin
    WHEN EXISTS (SELECT 1 FROM compute_budget_origin WHERE id = NEW.id)
    BEGIN SELECT RAISE(ABORT, 'compute_budget_origin is append-only: a stored row cannot be replaced'); END""",
    """CREATE TRIGGER compute_budget_tree_nodes_no_update BEFORE UPDATE ON compute_budget_tree_nodes
    BEGIN SELECT RAISE(ABORT, 'compute_budget_tree_nodes is append-only: UPDATE is not allowed'); END""",
    """CREATE TRIGGER compute_budget_tree_nodes_no_delete BEFORE DELETE ON compute_budget_tree_nodes
    BEGIN SELECT RAISE(ABORT, 'compute_budget_tree_nodes is append-only: DELETE is not allowed'); END""",
    """CREATE TRIGGER compute_budget_tree_nodes_no_replace BEFORE INSERT ON compute_budget_tree_nodes
    WHEN EXISTS (SELECT 1 FROM compute_budget_tree_nodes WHERE level = NEW.level AND idx = NEW.idx)
    BEGIN SELECT RAISE(ABORT, 'compute_budget_tree_nodes is append-only: a stored row cannot be replaced'); END""",
    """CREATE TRIGGER compute_budget_checkpoints_no_update BEFORE UPDATE ON compute_budget_checkpoints
    BEGIN SELECT RAISE(ABORT, 'compute_budget_checkpoints is append-only: UPDATE is not allowed'); END""",
    """CREATE TRIGGER compute_budget_checkpoints_no_delete BEFORE DELETE ON compute_budget_checkpoints
    BEGIN SELECT RAISE(ABORT, 'compute_budget_checkpoints is append-only: DELETE is not allowed'); END""",
    """CREATE TRIGGER compute_budget_checkpoints_no_replace BEFORE INSERT ON compute_budget_checkpoints
    WHEN EXISTS (SELECT 1 FROM compute_budget_checkpoints WHERE id = NEW.id)
    BEGIN SELECT RAISE(ABORT, 'compute_budget_checkpoints is append-only: a stored row cannot be replaced'); END""",
)
_SQLITE_UNGUARD = (
    "DROP TRIGGER IF EXISTS compute_budget_origin_no_update",
    "DROP TRIGGER IF EXISTS compute_budget_origin_no_delete",
    "DROP TRIGGER IF EXISTS compute_budget_origin_no_replace",
    "DROP TRIGGER IF EXISTS compute_budget_tree_nodes_no_update",
    "DROP TRIGGER IF EXISTS compute_budget_tree_nodes_no_delete",
    "DROP TRIGGER IF EXISTS compute_budget_tree_nodes_no_replace",
    "DROP TRIGGER IF EXISTS compute_budget_checkpoints_no_update",
    "DROP TRIGGER IF EXISTS compute_budget_checkpoints_no_delete",
    "DROP TRIGGER IF EXISTS compute_budget_checkpoints_no_replace",
)
_POSTGRESQL_GUARD = (
    """CREATE OR REPLACE FUNCTION compute_budget_seal_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION USING
            MESSAGE = TG_TABLE_NAME || ' is append-only: ' || TG_OP || ' is not allowed',
            ERRCODE = 'insufficient_privilege';
    END $$""",
    """CREATE TRIGGER compute_budget_origin_no_update_delete BEFORE UPDATE OR DELETE ON compute_budget_origin
    FOR EACH ROW EXECUTE FUNCTION compute_budget_seal_append_only()""",
    """CREATE TRIGGER compute_budget_origin_no_truncate BEFORE TRUNCATE ON compute_budget_origin
    FOR EACH STATEMENT EXECUTE FUNCTION compute_budget_seal_append_only()""",
    """CREATE TRIGGER compute_budget_tree_nodes_no_update_delete BEFORE UPDATE OR DELETE ON compute_budget_tree_nodes
    FOR EACH ROW EXECUTE FUNCTION compute_budget_seal_append_only()""",
    """CREATE TRIGGER compute_budget_tree_nodes_no_truncate BEFORE TRUNCATE ON compute_budget_tree_nodes
    FOR EACH STATEMENT EXECUTE FUNCTION compute_budget_seal_append_only()""",
    """CREATE TRIGGER compute_budget_checkpoints_no_update_delete BEFORE UPDATE OR DELETE ON compute_budget_checkpoints
    FOR EACH ROW EXECUTE FUNCTION compute_budget_seal_append_only()""",
    """CREATE TRIGGER compute_budget_checkpoints_no_truncate BEFORE TRUNCATE ON compute_budget_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION compute_budget_seal_append_only()""",
)
_POSTGRESQL_UNGUARD = (
    "DROP TRIGGER IF EXISTS compute_budget_origin_no_update_delete ON compute_budget_origin",
    "DROP TRIGGER IF EXISTS compute_budget_origin_no_truncate ON compute_budget_origin",
    "DROP TRIGGER IF EXISTS compute_budget_tree_nodes_no_update_delete ON compute_budget_tree_nodes",
    "DROP TRIGGER IF EXISTS compute_budget_tree_nodes_no_truncate ON compute_budget_tree_nodes",
    "DROP TRIGGER IF EXISTS compute_budget_checkpoints_no_update_delete ON compute_budget_checkpoints",
    "DROP TRIGGER IF EXISTS compute_budget_checkpoints_no_truncate ON compute_budget_checkpoints",
    "DROP FUNCTION IF EXISTS compute_budget_seal_append_only()",
)


def _run(statements: dict[str, tuple[str, ...]]) -> None:
    # op.execute, not a live connection: works online and in offline (--sql) mode alike.
    dialect = op.get_context().dialect.name
    if dialect not in statements:
        raise NotImplementedError(f"no append-only guard is written for the {dialect} backend")
    for statement in statements[dialect]:
        op.execute(statement)


def _big() -> sa.types.TypeEngine[int]:
    # BIGINT on PostgreSQL; INTEGER on SQLite, where only INTEGER is a 64-bit rowid-style integer.
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        ORIGIN,
        sa.Column("id", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("origin", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_compute_budget_origin"),
        sa.CheckConstraint("id = 1", name=op.f("ck_compute_budget_origin_single_row")),
    )
    op.create_table(
        NODES,
        sa.Column("level", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("idx", _big(), nullable=False, autoincrement=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("level", "idx", name="pk_compute_budget_tree_nodes"),
        sa.CheckConstraint("level >= 0 AND idx >= 0", name=op.f("ck_compute_budget_tree_nodes_position_non_negative")),
        sa.CheckConstraint("length(hash) = 64", name=op.f("ck_compute_budget_tree_nodes_hash_sha256")),
    )
    op.create_table(
        CHECKPOINTS,
        sa.Column("id", _big(), nullable=False, autoincrement=True),
        sa.Column("tree_size", _big(), nullable=False),
        sa.Column("key_name", sa.Text(), nullable=False),
        sa.Column("key_hash", sa.String(8), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("recorded_at", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_compute_budget_checkpoints"),
        sa.CheckConstraint("tree_size >= 0", name=op.f("ck_compute_budget_checkpoints_tree_size_non_negative")),
    )
    op.create_index("ix_compute_budget_checkpoints_tree_size", CHECKPOINTS, ["tree_size"])
    op.create_index("ix_compute_budget_checkpoints_key", CHECKPOINTS, ["key_name", "key_hash", "tree_size"])
    _run({"sqlite": _SQLITE_GUARD, "postgresql": _POSTGRESQL_GUARD})


def downgrade() -> None:
    _run({"sqlite": _SQLITE_UNGUARD, "postgresql": _POSTGRESQL_UNGUARD})
    op.drop_index("ix_compute_budget_checkpoints_key", table_name=CHECKPOINTS)
    op.drop_index("ix_compute_budget_checkpoints_tree_size", table_name=CHECKPOINTS)
    op.drop_table(CHECKPOINTS)
    op.drop_table(NODES)
    op.drop_table(ORIGIN)
