"""`compute-budget migrate`, `grants`, `checkpoint` and `copy`: the store's upkeep (lazy commands)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from compute_budget.cli.group import cli, db_option, origin_option, writer_options
from compute_budget.cli.program import say
from compute_budget.cli.progress import audit_progress
from compute_budget.errors import ComputeBudgetError, clip

if TYPE_CHECKING:
    from compute_budget.store.repairs import Repair

MAX_ROWS_SHOWN = 20  # rows that do not hold, listed by migrate after a repair (the audit lists them all)


@cli.command("migrate")
@db_option
@origin_option
def migrate_command(db: str | None, origin: str | None) -> None:
    """Bring the database schema to this release's head (creating it when the database is empty), build the
    Merkle tree of rows recorded before it, and set the origin of a store that holds rows but has none.

    A repair (a guard restored, the revision record repaired) is recorded in the store and followed by a full
    audit: the rows that do not hold and the salvage command come first. Exit 0 done; 1 a row does not hold (or
    the audit found something else); 2 cannot run.
    """
    from compute_budget.store import BudgetStore

    repaired: list[str] = []
    recorded: list[Repair] = []
    before, after = BudgetStore.migrate(db, origin=origin, on_restore=repaired.extend, on_repair=recorded.append)
    findings = _audit_after_repair(db, recorded[0]) if recorded else None
    for problem in repaired:
        # The guard's problems are restored; the revision record (spec 9.7) is repaired, and says so itself.
        say(problem if problem.startswith("repaired ") else f"restored the append-only guard: {problem}")
    record_repaired = any(problem.startswith("repaired the schema's bookkeeping") for problem in repaired)
    if repaired and (before == after or record_repaired):  # a repair, not "already at head" nor a migration
        click.echo(f"schema at head revision {after}; repaired {len(repaired)} problem(s) (listed above)")
    elif before == after:
        click.echo(f"schema already at head revision {after}")
    else:
        click.echo(f"schema migrated from {before or 'nothing'} to head revision {after}")
    if recorded:
        repair = recorded[0]
        if not findings:
            click.echo("full audit after the repair: every row holds, and nothing else was found")
        click.echo(
            f"recorded repair #{repair.id} at seq {repair.head_size}: every append is refused until `compute-budget "
            f"record --after-repair {repair.id}`, to be given once a full audit finds nothing else (docs/incident.md)"
        )
    if findings:
        click.get_current_context().exit(1)


def _audit_after_repair(db: str | None, repair: Repair) -> int:
    """Spec 9.9.10: audit every row after a repair; print the rows that do not hold and the salvage command
    (first, on stdout). Returns how many findings there are besides the repair's own."""
    import shlex

    from compute_budget.auditor.report import ROW_KINDS
    from compute_budget.auditor.scan import audit
    from compute_budget.cli.render import shown
    from compute_budget.store.repairs import NOT_ACKNOWLEDGED

    try:
        with audit_progress() as on_progress:
            report = audit(db, on_progress=on_progress)
    except ComputeBudgetError as error:  # the repair is committed: say so below, and that the audit is owed
        click.echo(f"the full audit after the repair could not run: {error}; run `compute-budget audit`")
        return 1
    own = f"repair #{repair.id} "
    others = [item for item in report.findings if not (item.detail.startswith(own) and NOT_ACKNOWLEDGED in item.detail)]
    rows = sorted((item for item in others if item.kind in ROW_KINDS), key=lambda item: item.seq or 0)
    affected, between = report.affected_rows, report.rewritten_between
    starts = [*affected[:1], *(between[:1] if between is not None else ())]
    first = min(starts) if starts else None
    if first is not None:
        listed = ", ".join(str(seq) for seq in affected[:MAX_ROWS_SHOWN])
        if between is not None:  # a consistent rewrite names no row: only the range the stored checkpoints bound
            listed += f"{', ' if listed else ''}somewhere in {between[0]}..{between[1]} (rewritten consistently)"
        more = f" and {len(affected) - MAX_ROWS_SHOWN} more" if len(affected) > MAX_ROWS_SHOWN else ""
        click.echo(f"rows that do not hold after the repair: seq {listed}{more}")
        for item in rows[:MAX_ROWS_SHOWN]:
            click.echo(f"  seq {item.seq} {item.kind.value}: {shown(clip(item.detail))}")
        # Quoted for a shell: the line is meant to be pasted, and a path may hold `?`, `#`, spaces or `;`.
        click.echo(f"salvage: compute-budget copy {shown(shlex.quote(report.database))} NEW_DB --through {first - 1}")
    elif others:
        click.echo(
            f"the full audit after the repair found {len(others)} problem(s) (first: {others[0].kind.value}: "
            f"{shown(clip(others[0].detail))}); run `compute-budget audit` for the report"
        )
    return len(others)


@cli.command("grants")
@click.option("--role", "role_name", required=True, metavar="NAME", help="The PostgreSQL role to grant to.")
@click.option("--writer", "writer", is_flag=True, help="A role that records: SELECT and INSERT.")
@click.option("--auditor", "auditor", is_flag=True, help="A read-only role: audit, list, show, serve.")
@click.option(
    "--db",
    "database",
    metavar="DB",
    help="Also GRANT CONNECT on this database (its name, or a postgresql:// URL naming it).",
)
@click.option("--schema", default="public", show_default=True, metavar="NAME", help="The schema the store is in.")
def grants_command(role_name: str, writer: bool, auditor: bool, database: str | None, schema: str) -> None:
    """Print the GRANT statements that let PostgreSQL role NAME record (--writer) or read (--auditor) a store of
    this release, one per line, for `psql` run as the store's owner. Creating the schema (`migrate`) stays the
    owner's. Exit 0; 2 on a name that cannot be quoted exactly."""
    from compute_budget.store.grants import Role, grant_statements

    if writer == auditor:  # both is no choice: the last one given used to win, read-only grants for a writer
        raise click.UsageError("give exactly one of --writer or --auditor")
    role = "writer" if writer else "auditor"
    if database is not None and "://" in database:
        from sqlalchemy.engine import make_url

        try:
            url = make_url(database)
        except Exception:
            raise click.BadParameter(f"{clip(database)!r} is not a database URL", param_hint="--db") from None
        from compute_budget.store.backends import find_backend

        backend = find_backend(url.get_backend_name())
        if backend is None or not backend.has_roles or not url.database:  # grants are for databases with roles
            raise click.BadParameter("give a postgresql:// URL that names a database, or the database's name",
                                     param_hint="--db")
        database = url.database
    for statement in grant_statements(role_name, Role(role), database=database, schema=schema):
        click.echo(statement)


@cli.command("checkpoint")
@db_option
@click.option(
    "--signing-key",
    "signing_keys",
    metavar="FILE",
    multiple=True,
    help="Print the head's checkpoint note signed with this writer key (repeatable); nothing is stored.",
)
@writer_options
def checkpoint_command(
    db: str | None, signing_keys: tuple[str, ...], writer_state: str | None, init_writer_state: bool,
    peer_keys: tuple[str, ...],
) -> None:
    """Print a checkpoint of the head (keep it outside the database for the next audit): JSON, or with
    --signing-key a signed checkpoint note, made inside the append lock under spec 9.1's rules (the head must be
    the newest checkpoint the key or a --peer-key signed)."""
    from compute_budget.store import BudgetStore

    if not signing_keys:
        if writer_state is not None or init_writer_state or peer_keys:
            raise click.UsageError("--writer-state, --init-writer-state and --peer-key go with --signing-key")
        with BudgetStore.open(db, readonly=True) as store:
            click.echo(store.checkpoint().to_json())
        return
    if writer_state is not None and len(signing_keys) > 1:
        raise click.UsageError("--writer-state names one key's state file: give one --signing-key with it")
    from compute_budget.store.engine import locate

    sqlite_path = locate(db).sqlite_path
    if sqlite_path is not None and not sqlite_path.exists():
        with BudgetStore.open(db, readonly=True):
            pass  # the reader's own "does not exist" message; a writer would create an empty file
    with BudgetStore.open(db, allow_unsigned=True) as store:
        note = store.signed_checkpoint(
            signing_keys, writer_state=writer_state, peer_keys=peer_keys, init_writer_state=init_writer_state
        )
    click.echo(note, nl=False)




@cli.command("copy")
@click.argument("source", metavar="SRC")
@click.argument("destination", metavar="DST")
@click.option(
    "--through",
    type=click.IntRange(min=0),
    metavar="SEQ",
    default=None,
    help="Salvage: copy only rows 1..SEQ (the last witnessed size) into a new origin, with no checkpoints and a "
    "provenance row (spec 9.8).",
)
@click.option("--origin", "new_origin", metavar="NAME", default=None, help="With --through: the new store's origin.")
def copy_command(source: str, destination: str, through: int | None, new_origin: str | None) -> None:
    """Copy the whole history of store SRC into the empty store DST (paths or URLs), verifying every row; with
    --through SEQ, salvage rows 1..SEQ into a new origin (its first signed append needs --adopt-unsigned SEQ).

    Exit 0 copied; 1 a source row failed verification (nothing copied); 2 cannot run.
    """
    from compute_budget.errors import CopyVerificationFailed
    from compute_budget.store.copy import copy_store

    if new_origin is not None and through is None:
        raise click.UsageError("--origin goes with --through: a whole copy keeps the source's origin")
    try:
        with audit_progress() as on_progress:
            head = copy_store(source, destination, on_progress=on_progress, through=through, new_origin=new_origin)
    except CopyVerificationFailed as failed:
        say(f"error: {failed}")
        click.get_current_context().exit(1)
    click.echo(f"copied {head.seq} rows; head seq {head.seq}, chain_hash {head.chain_hash}")
    if through is not None:
        say(
            f"salvaged rows 1..{through} into a new origin; its first signed append needs "
            f"`record --signing-key KEY --adopt-unsigned {through}`"
        )
