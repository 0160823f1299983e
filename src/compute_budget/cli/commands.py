"""The `compute-budget` commands: a thin Click shell over the core, the store and the auditor.

Results that need a person's eye exit 1 through `ctx.exit(1)`; everything that stops a command from running is
an error the group (`cli.app.BudgetGroup`) turns into one line on stderr and exit 2.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator, Sequence

import click

from compute_budget.cli.app import PROG, BudgetGroup, say
from compute_budget.cli.app import run as run_group
from compute_budget.cli.io import check_keys_apart, check_writable, open_input, write_atomically
from compute_budget.cli.progress import audit_progress, progress_bar
from compute_budget.core.gate import is_valid_text
from compute_budget.core.lines import BadLine, GateLine, read_gates
from compute_budget.core.policy import V1
from compute_budget.core.types import ComputeBudgetStatus
from compute_budget.errors import InputUnreadable


@click.group(cls=BudgetGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="compute-budget", prog_name=PROG)
@click.option("--debug", is_flag=True, help="Show the traceback of an unexpected error (for a bug report).")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Deterministic compute budgets for search-gate decisions, kept in an append-only, hash-chained store."""
    ctx.meta["compute_budget.debug"] = debug


@cli.command("decide")
@click.argument("input_path", metavar="[INPUT]", default="-")
def decide_command(input_path: str) -> None:
    """Print one decision (a JSON line) per gate of INPUT (JSON Lines; '-' or nothing is stdin).

    A line that is not JSON is reported on stderr with its number; the other gates are still decided and the
    exit status is 2.
    """
    bad_lines = 0
    out = sys.stdout.buffer
    with open_input(input_path) as stream:
        for item in read_gates(stream):
            if isinstance(item, BadLine):
                bad_lines += 1
                out.flush()  # keep stdout and stderr in input order when both go to one terminal
                say(f"{_where(input_path)} line {item.line}: {item.message}")
                continue
            decision = V1.decide(item.parsed.value, defect=item.parsed.defect)
            out.write(_json_bytes(decision.to_dict()))
    out.flush()
    if bad_lines:
        click.get_current_context().exit(2)


db_option = click.option(
    "--db",
    "db",
    metavar="PATH|URL",
    default=None,
    help="Database file or SQLAlchemy URL [default: $COMPUTE_BUDGET_DB, else ./compute_budget.db].",
)


origin_option = click.option(
    "--origin",
    metavar="NAME",
    default=None,
    help="The log name of a new store [default: compute-budget/ and 32 random hex digits].",
)


@cli.command("record")
@click.argument("input_path", metavar="[INPUT]", default="-")
@db_option
@click.option(
    "--signing-key",
    "signing_key",
    metavar="FILE",
    default=None,
    help="Sign a checkpoint of the new head with this key, in the same transaction "
    "[default: the file $COMPUTE_BUDGET_SIGNING_KEY names, if set].",
)
@origin_option
def record_command(input_path: str, db: str | None, signing_key: str | None, origin: str | None) -> None:
    """Decide every gate of INPUT and append them all to the store, atomically (all or nothing).

    Re-recording a stored gate is a no-op; the same budget_id with a different gate is a conflict (exit 2,
    nothing written), and so is a line that is not JSON.
    """
    from compute_budget.store import BudgetStore

    with open_input(input_path) as stream, BudgetStore.open(db, origin=origin, signing_key=signing_key) as store:
        with progress_bar(stream, "recording") as lines:
            result = store.record_many(_gates_or_fail(read_gates(lines), input_path))
        total = result.new + result.present
        click.echo(
            f"recorded {total} gate{'s' if total != 1 else ''}: {result.new} new, {result.present} already present "
            f"(head seq {result.head.seq}) in {store.location.display}"
        )


def _gates_or_fail(items: Iterator[GateLine | BadLine], input_path: str) -> Iterator[GateLine]:
    for item in items:
        if isinstance(item, BadLine):
            raise InputUnreadable(f"{_where(input_path)} line {item.line}: {item.message}; nothing was written")
        yield item


@cli.command("show")
@click.argument("budget_id")
@db_option
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def show_command(budget_id: str, db: str | None, output_format: str) -> None:
    """Show the stored decision BUDGET_ID (64 hex digits, or a unique prefix of 8 or more), its gate input and
    why (exit 1 when it is not stored)."""
    from compute_budget.store import BudgetStore

    wanted = budget_id.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{8,64}", wanted):
        raise click.BadParameter(
            f"{_clip(budget_id)!r} is not a budget_id: give its 64 hex digits (or a unique prefix of at least 8)",
            param_hint="BUDGET_ID",
        )
    with BudgetStore.open(db, readonly=True) as store:
        found = store.find(wanted)
        where = store.location.display
    if not found:
        say(f"no decision with budget_id {wanted} in {where}")
        click.get_current_context().exit(1)
    if len(found) > 1:
        raise click.BadParameter(
            f"prefix {wanted} is ambiguous: it matches more than one decision; give more digits",
            param_hint="BUDGET_ID",
        )
    stored = found[0]
    if output_format == "json":
        sys.stdout.buffer.write(_json_bytes(stored.to_dict()))
        return
    from compute_budget.cli.render import describe_stored

    click.echo(describe_stored(stored))


@cli.command("list")
@db_option
@click.option("--status", type=click.Choice([status.value for status in ComputeBudgetStatus]), help="Only this status.")
@click.option("--limit", type=click.IntRange(min=0, max=2**62), default=None, help="Only the newest N decisions.")
@click.option("--format", "output_format", type=click.Choice(["table", "jsonl"]), default="table", show_default=True)
def list_command(db: str | None, status: str | None, limit: int | None, output_format: str) -> None:
    """List stored decisions, oldest first and newest last."""
    from compute_budget.store import BudgetStore

    with BudgetStore.open(db, readonly=True) as store:
        rows = store.iter_decisions(status=status, limit=limit)
        if output_format == "jsonl":
            out = sys.stdout.buffer
            for stored in rows:
                out.write(_json_bytes(stored.to_dict()))
            return
        from compute_budget.cli.render import print_table

        print_table(rows, filtered=status is not None or limit is not None)


@cli.command("migrate")
@db_option
@origin_option
def migrate_command(db: str | None, origin: str | None) -> None:
    """Bring the database schema to this release's head (creating it when the database is empty), build the
    Merkle tree of rows recorded before it, and set the origin of a store that holds rows but has none."""
    from compute_budget.store import BudgetStore

    before, after = BudgetStore.migrate(db, origin=origin)
    if before == after:
        click.echo(f"schema already at head revision {after}")
    else:
        click.echo(f"schema migrated from {before or 'nothing'} to head revision {after}")


@cli.command("checkpoint")
@db_option
@click.option(
    "--signing-key",
    "signing_keys",
    metavar="FILE",
    multiple=True,
    help="Print the head's checkpoint note signed with this key (repeatable); nothing is stored.",
)
def checkpoint_command(db: str | None, signing_keys: tuple[str, ...]) -> None:
    """Print a checkpoint of the head (keep it outside the database for the next audit): JSON, or with
    --signing-key a signed checkpoint note."""
    from compute_budget.store import BudgetStore

    with BudgetStore.open(db, readonly=True) as store:
        if signing_keys:
            click.echo(store.signed_checkpoint(signing_keys), nl=False)
        else:
            click.echo(store.checkpoint().to_json())


@cli.command("audit")
@db_option
@click.option(
    "--checkpoint", "checkpoint_path", metavar="FILE", help="Prove the stored chain still extends this checkpoint."
)
@click.option(
    "--since",
    "since_path",
    metavar="FILE",
    help="Incremental: prove this checkpoint holds, then check only the rows after it.",
)
@click.option(
    "--save-checkpoint", "save_path", metavar="FILE", help="Write the new head here, only when the audit is clean."
)
@click.option(
    "--format", "output_format", type=click.Choice(["text", "json", "junit"]), default="text", show_default=True
)
@click.option("--output", "output_path", metavar="FILE", help="Write the report to FILE instead of stdout.")
@click.option(
    "--jobs",
    type=click.IntRange(min=1, max=64),
    default=1,
    show_default=True,
    help="Processes to split the rows across.",
)
@click.option(
    "--trusted-key",
    "trusted_keys",
    metavar="KEY",
    multiple=True,
    help="A verifier key (name+hash+key) or a file holding one, whose signatures vouch for the rows; repeatable.",
)
@click.option(
    "--all-signatures", is_flag=True, help="Verify every stored checkpoint signed by a trusted key, not the newest."
)
@click.option(
    "--cosign",
    "cosign_path",
    metavar="FILE",
    help="After a clean audit, sign the checkpoint --save-checkpoint writes with this key (a witness).",
)
def audit_command(
    db: str | None,
    checkpoint_path: str | None,
    since_path: str | None,
    save_path: str | None,
    output_format: str,
    output_path: str | None,
    jobs: int,
    trusted_keys: tuple[str, ...],
    all_signatures: bool,
    cosign_path: str | None,
) -> None:
    """Replay-audit the store read-only: exit 0 clean, 1 findings, 2 cannot run."""
    from compute_budget.auditor.scan import audit, load_checkpoint
    from compute_budget.cli.render_audit import render
    from compute_budget.store.keys import load_signer_key, verifier_key

    checkpoint = load_checkpoint(checkpoint_path) if checkpoint_path else None
    since = load_checkpoint(since_path) if since_path else None
    for option, path in (("--output", output_path), ("--save-checkpoint", save_path)):
        if path:
            check_writable(option, path, db)  # before the audit: a nightly run must not fail only at its end
    key_files = [("--cosign", cosign_path)] if cosign_path else []
    key_files += [("--trusted-key", item) for item in trusted_keys if os.path.exists(item)]
    check_keys_apart(key_files, [("--output", output_path), ("--save-checkpoint", save_path)])
    keys = [verifier_key(item) for item in trusted_keys]
    if cosign_path and not save_path:
        raise click.BadParameter(
            "--cosign signs the checkpoint --save-checkpoint writes: give both", param_hint="--cosign"
        )
    cosigner = load_signer_key(cosign_path) if cosign_path else None
    with audit_progress(enabled=jobs == 1) as on_progress:
        report = audit(
            db,
            checkpoint=checkpoint,
            since=since,
            jobs=jobs,
            on_progress=on_progress,
            trusted_keys=keys,
            all_signatures=all_signatures,
        )
    text = render(report, output_format)
    if output_path:
        write_atomically(output_path, text + "\n")
    else:
        click.echo(text)
    if save_path:
        if report.clean and cosigner is not None:
            from compute_budget.auditor.proofs import cosign

            given = [item for item in (checkpoint, since) if item is not None]
            write_atomically(save_path, cosign(db, report, cosigner, given))
        elif report.clean:
            write_atomically(save_path, report.head_checkpoint().to_json() + "\n")
        else:
            say(f"audit not clean: checkpoint {save_path} was not written")
    if not report.clean:
        click.get_current_context().exit(1)


@cli.command("copy")
@click.argument("source", metavar="SRC")
@click.argument("destination", metavar="DST")
def copy_command(source: str, destination: str) -> None:
    """Copy the whole history of store SRC into the empty store DST (paths or URLs), verifying every row.

    Exit 0 copied; 1 a source row failed verification (nothing copied); 2 cannot run.
    """
    from compute_budget.auditor.copy import copy_store
    from compute_budget.errors import CopyVerificationFailed

    try:
        with audit_progress(enabled=True) as on_progress:
            head = copy_store(source, destination, on_progress=on_progress)
    except CopyVerificationFailed as failed:
        say(f"error: {failed}")
        click.get_current_context().exit(1)
    click.echo(f"copied {head.seq} rows; head seq {head.seq}, chain_hash {head.chain_hash}")


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _where(input_path: str) -> str:
    """INPUT as shown in messages: as typed when plain, quoted when it holds newlines or undecodable bytes."""
    if input_path == "-":
        return "stdin"
    return input_path if input_path.isprintable() and is_valid_text(input_path) else repr(input_path)


def _json_bytes(value: object) -> bytes:
    import orjson

    return orjson.dumps(value, option=orjson.OPT_APPEND_NEWLINE)




def run(argv: Sequence[str] | None = None) -> int:
    """Run the command line with `argv` and return the exit status instead of exiting (as the console script)."""
    return run_group(cli, argv)


def main() -> None:
    """Console-script entry point."""
    cli.main(prog_name=PROG)
