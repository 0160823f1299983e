"""Alembic environment for compute-budget, wired both ways.

Programmatic use passes a live connection in `config.attributes["connection"]` (Alembic's "sharing a
connection" recipe), so the store can create or upgrade its schema inside its own locked transaction. The
`alembic` command line builds its own engine from `-x db=...`, `$COMPUTE_BUDGET_DB` or the default file.
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import Engine

from compute_budget.store.engine import begin_write, create_store_engine, locate
from compute_budget.store.table import metadata

config = context.config


def run_migrations_online() -> None:
    """Run the migrations on the shared connection, or on one of our own."""
    connection = config.attributes.get("connection")
    if isinstance(connection, Engine):  # pytest-alembic hands over an engine rather than a connection
        with begin_write(connection) as engine_connection:
            context.configure(connection=engine_connection, target_metadata=metadata)
            with context.begin_transaction():
                context.run_migrations()
        return
    if connection is not None:
        context.configure(connection=connection, target_metadata=metadata)
        with context.begin_transaction():
            context.run_migrations()
        return
    if config.config_file_name is not None:
        fileConfig(config.config_file_name)
    target = context.get_x_argument(as_dictionary=True).get("db")
    engine = create_store_engine(locate(target), readonly=False)
    with begin_write(engine) as own_connection:
        context.configure(connection=own_connection, target_metadata=metadata)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


def run_migrations_offline() -> None:
    """Emit the migrations as SQL (`alembic upgrade head --sql`)."""
    target = context.get_x_argument(as_dictionary=True).get("db")
    context.configure(url=locate(target).url, target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
