"""`compute-budget sign`: sign and store the head's checkpoint, the tail a writer left (a lazy command)."""

from __future__ import annotations

import os

import click

from compute_budget.cli.group import cli, db_option, writer_options
from compute_budget.cli.program import say


@cli.command("sign")
@db_option
@click.option(
    "--signing-key",
    "signing_key",
    metavar="FILE",
    default=None,
    help="The writer key to sign with [default: the file $COMPUTE_BUDGET_SIGNING_KEY names, if set].",
)
@writer_options
def sign_command(
    db: str | None, signing_key: str | None, writer_state: str | None, init_writer_state: bool,
    peer_keys: tuple[str, ...],
) -> None:
    """Sign and store the checkpoint of the head (the command for a tail a writer left unsigned), inside the append
    lock under spec 9.1 and 12.3: the head must be the newest checkpoint this key or a --peer-key signed, or the
    head this key's writer state recorded as committed; any other rows are refused, named (exit 2). Prints one
    line: the size signed, or that this key's checkpoint of the head was already stored.

    Exit 0 signed; 2 refused or cannot run.
    """
    from compute_budget.keys.key_files import SIGNING_KEY_ENV_VAR
    from compute_budget.store import BudgetStore
    from compute_budget.store.engine import locate

    if signing_key is None and not os.environ.get(SIGNING_KEY_ENV_VAR):
        raise click.UsageError("sign needs the writer's key: give --signing-key FILE")
    sqlite_path = locate(db).sqlite_path
    if sqlite_path is not None and not sqlite_path.exists():
        with BudgetStore.open(db, readonly=True):
            pass  # the reader's own "does not exist" message; a writer would create an empty file
    with BudgetStore.open(db, signing_key=signing_key, writer_state=writer_state, init_writer_state=init_writer_state,
                          peer_keys=peer_keys) as store:
        signed = store.sign()
        key = store.signing_key
    assert key is not None
    if signed.state_created:
        say(f"created writer state {store.writer_state} from the store's newest checkpoint signed by this key")
    label = f"{key.name}+{key.key_hash:08x}"
    if signed.stored:
        click.echo(f"signed the checkpoint of size {signed.size} of {signed.origin} with {label}")
    else:
        click.echo(f"the checkpoint of size {signed.size} of {signed.origin} is already signed by {label}; "
                   "nothing stored")
