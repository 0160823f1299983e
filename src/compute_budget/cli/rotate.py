"""`compute-budget rotate`: hand the log over from one writer key to a new one (spec 11.6; a lazy command)."""

from __future__ import annotations

import base64
import shlex

import click

from compute_budget.cli.group import cli, db_option, writer_options
from compute_budget.cli.program import say
from compute_budget.cli.trust import key_state_options


@cli.command("rotate")
@db_option
@click.option("--signing-key", "signing_key", metavar="OLD", required=True,
              help="The writer key being retired (its key file).")
@click.option("--new-key", "new_key", metavar="NEW", required=True,
              help="The writer key taking the log over (its key file, from `keygen`).")
@click.option("--new-writer-state", "new_writer_state", metavar="FILE", default=None,
              help="The new key's writer state file [default: the new key file plus .state].")
@writer_options
@key_state_options
def rotate_command(
    db: str | None, signing_key: str, new_key: str, new_writer_state: str | None, writer_state: str | None,
    init_writer_state: bool, peer_keys: tuple[str, ...], retired: tuple[str, ...], revoked: tuple[str, ...],
) -> None:
    """Store a handover: the head's checkpoint signed by OLD, then NEW, inside the append lock and under spec 9.1's
    rules for OLD. Both writer states then hold it: OLD never signs again, NEW starts from it. Prints the handover
    note; refuses (exit 2) an OLD that a handover, --retired or --revoked already retired."""
    from compute_budget.auditor.checkpoints import key_label
    from compute_budget.auditor.key_states import configured_states
    from compute_budget.errors import KeyRetired
    from compute_budget.keys.key_files import load_signer_key
    from compute_budget.store import BudgetStore

    old, new = load_signer_key(signing_key), load_signer_key(new_key)
    state = configured_states(retired, revoked).of_key(old.verifier())
    if state.status.value != "active":
        raise KeyRetired(f"refusing to rotate from {state.label()}: it is {state.words()} (--{state.status.value})")
    with BudgetStore.open(
        db, signing_key=signing_key, writer_state=writer_state, init_writer_state=init_writer_state,
        peer_keys=peer_keys,
    ) as store:
        rotated = store.rotate(new_key, new_writer_state=new_writer_state)
    root = base64.b64encode(rotated.root).decode("ascii")
    # Named with their key IDs: `keygen ORIGIN`, as the docs advise, gives both keys the log's name.
    say(f"handed {rotated.origin} over at size {rotated.head.seq} (root {root}) from {key_label(old.verifier())} "
        f"to {key_label(new.verifier())}")
    for line in verifier_lines(rotated.origin, old.verifier().format(), new.verifier().format(), rotated.head.seq):
        click.echo(line, err=True)
    click.echo(rotated.note, nl=False)


# Every command that checks this log's writer signatures, as the auditors and the publisher run them.
_CHECKING_COMMANDS = ("audit", "audit --tiles", "publish", "prove", "verify-proof", "consistency", "serve")


def verifier_lines(origin: str, old: str, new: str, size: int) -> list[str]:
    """What `rotate` tells the operator to hand on: both verifier keys, and the exact arguments each checking
    command then takes in place of `--trusted-key OLD` (the real keys: nothing left to fill in)."""
    arguments = f"--trusted-key {new} --retired {old}@{size}"
    lines = [
        f"new verifier key: {new}",
        f"old verifier key: {old}",
        "give every command that checks this log's signatures these arguments in place of --trusted-key OLD "
        "(the new key to auditors out of band, as the old one was):",
    ]
    for command in _CHECKING_COMMANDS:
        extra = f" --origin {shlex.quote(origin)}" if command == "audit --tiles" else ""
        lines.append(f"  compute-budget {command}{extra} {arguments}")
    return lines
