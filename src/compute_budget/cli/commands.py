"""The `compute-budget` commands: a thin Click shell over the core, the store and the auditor.

Results that need a person's eye exit 1 through `ctx.exit(1)`; everything that stops a command from running is
an error the group (`cli.app.BudgetGroup`) turns into one line on stderr and exit 2.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

import click

from compute_budget._version import __version__
from compute_budget.cli.app import PROG, BudgetGroup, Terminated, say
from compute_budget.cli.app import run as run_group
from compute_budget.cli.io import check_keys_apart, check_writable, open_input, read_ahead, write_atomically
from compute_budget.cli.progress import audit_progress, progress_bar
from compute_budget.errors import InputUnreadable, OutputUnwritable, StoreDamaged, clip

if TYPE_CHECKING:
    from compute_budget.auditor.report import AuditReport
    from compute_budget.core.log.checkpoint import Checkpoint
    from compute_budget.core.log.cosignature import WitnessKey
    from compute_budget.core.log.note import SignerKey
    from compute_budget.core.policy.lines import BadLine, GateLine


@click.group(cls=BudgetGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=__version__, prog_name=PROG)  # no importlib.metadata: a start 20 ms sooner
@click.option("--debug", is_flag=True, help="Show the traceback of an unexpected error (for a bug report).")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Deterministic compute budgets for search-gate decisions, kept in an append-only, hash-chained store."""
    ctx.meta["compute_budget.debug"] = debug


@cli.command("decide")
@click.argument("input_path", metavar="[INPUT]", default="-")
def decide_command(input_path: str) -> None:
    """Print one decision (a JSON line) per gate of INPUT (JSON Lines; '-' or nothing is stdin).

    A line that is not JSON is reported on stderr with its number (the first 20, then how many more); the
    other gates are still decided and the exit status is 2.
    """
    from compute_budget.core.policy.lines import BadLine, read_gates
    from compute_budget.core.policy.parse import decide_parsed

    out = sys.stdout.buffer

    def decided_reporting_bad_lines(stream: Iterable[bytes]) -> Iterator[str]:
        for item in read_gates(stream):
            if isinstance(item, BadLine):
                out.flush()  # keep stdout and stderr in input order when both go to one terminal
                yield f"{_where(input_path)} line {item.line}: {item.message}"
                continue
            decision = decide_parsed(item.parsed)
            out.write(_json_bytes(decision.to_dict()))

    with open_input(input_path) as stream:
        bad_lines = report_capped(decided_reporting_bad_lines(stream), about=f"{_where(input_path)}: ")
    out.flush()
    if bad_lines:
        click.get_current_context().exit(2)


MAX_REPORTED_LINES = 20


def report_capped(
    messages: Iterable[str],
    *,
    about: str = "",
    one: str = "line that is not JSON",
    many: str = "lines that are not JSON",
    limit: int = MAX_REPORTED_LINES,
) -> int:
    """Say the first `limit` messages on stderr, then one line counting the rest; return how many there were.

    `messages` is consumed as it comes, so each is said in its place among other output. The count line reads
    "{about}… and N more {one or many}".
    """
    count = 0
    for count, message in enumerate(messages, start=1):
        if count <= limit:
            say(message)
    if count > limit:
        unsaid = count - limit
        say(f"{about}… and {unsaid} more {one if unsaid == 1 else many}")
    return count


db_option = click.option(
    "--db",
    "db",
    metavar="PATH|URL",
    default=None,
    help="Database file or SQLAlchemy URL [default: $COMPUTE_BUDGET_DB, else ./compute_budget.db].",
)


MAX_CONFLICTS_SHOWN = 20


def writer_options(command: Callable[..., None]) -> Callable[..., None]:
    """The writer's state and peer options of spec 9.1 (`record`, `checkpoint --signing-key`)."""
    command = click.option(
        "--peer-key",
        "peer_keys",
        metavar="KEY",
        multiple=True,
        help="Also trust checkpoints signed by this writer key (verifier key text, else a file); repeatable. "
        "Never a key that leaked.",
    )(command)
    command = click.option(
        "--init-writer-state",
        is_flag=True,
        help="Create a missing or unreadable writer state from the newest checkpoint this key signed in the store.",
    )(command)
    return click.option(
        "--writer-state",
        "writer_state",
        metavar="FILE",
        default=None,
        help="The writer state file: the checkpoint this key signed last, per origin "
        "[default: $COMPUTE_BUDGET_WRITER_STATE, else the key file plus .state].",
    )(command)


origin_option = click.option(
    "--origin",
    metavar="NAME",
    default=None,
    help="The log name of a new store [default: compute-budget/ and 32 random hex digits].",
)


def witness_submit_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--witness URL=KEY` (repeatable) and `--witness-timeout SECONDS` (spec 9.5)."""
    command = click.option(
        "--witness-timeout", "witness_timeout", type=click.FloatRange(min=0, min_open=True), default=5.0,
        show_default=True, metavar="SECONDS", help="Wait at most this long for the witnesses.",
    )(command)
    return click.option(
        "--witness", "witnesses", metavar="URL=KEY", multiple=True,
        help="After the append, send its signed checkpoint to this witness (URL prefix = its verifier key, type "
        "0x04); repeatable. A witness that is down is a warning: the rows stay recorded.",
    )(command)


def witness_role_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--witness-key KEY` (repeatable, type 0x04) and `--witness-quorum K` (spec 9.3)."""
    command = click.option(
        "--witness-quorum", "witness_quorum", type=int, metavar="K",
        help="How many of the --witness-key witnesses must have cosigned [default: all of them].",
    )(command)
    return click.option(
        "--witness-key", "witness_keys", metavar="KEY", multiple=True,
        help="A witness's verifier key (type 0x04, keygen --witness) or a file holding one; repeatable.",
    )(command)


@cli.command("record")
@click.argument("input_path", metavar="[INPUT]", default="-")
@db_option
@click.option(
    "--on-conflict",
    type=click.Choice(["raise", "skip"]),
    default="raise",
    show_default=True,
    help="raise: a conflict stops the run (exit 2, nothing written); skip: record every other gate and list "
    "the conflicts.",
)
@click.option(
    "--rejects",
    "rejects_path",
    metavar="FILE",
    help="With --on-conflict skip: write the skipped gates there, one JSON line each, as they were given.",
)
@click.option(
    "--signing-key",
    "signing_key",
    metavar="FILE",
    default=None,
    help="Sign a checkpoint of the new head with this key, in the same transaction "
    "[default: the file $COMPUTE_BUDGET_SIGNING_KEY names, if set].",
)
@writer_options
@click.option(
    "--adopt-unsigned",
    "adopt_unsigned",
    metavar="SEQ",
    type=click.IntRange(min=0),
    default=None,
    help="Sign over the rows after the newest trusted checkpoint through SEQ, the head (review them first with "
    "`list --after-seq K`); each is re-derived before it is signed.",
)
@click.option(
    "--unsigned",
    is_flag=True,
    help="Append without a key to a store that holds signed checkpoints (ignores $COMPUTE_BUDGET_SIGNING_KEY).",
)
@witness_submit_options
@origin_option
def record_command(
    input_path: str,
    db: str | None,
    on_conflict: str,
    rejects_path: str | None,
    signing_key: str | None,
    writer_state: str | None,
    init_writer_state: bool,
    peer_keys: tuple[str, ...],
    adopt_unsigned: int | None,
    unsigned: bool,
    witnesses: tuple[str, ...],
    witness_timeout: float,
    origin: str | None,
) -> None:
    """Decide every gate of INPUT and append them all to the store, atomically (all or nothing).

    Re-recording a stored gate is a no-op; the same budget_id with a different gate is a conflict (exit 2,
    nothing written; with --on-conflict skip it is left out and named on stderr), and so is a line that is not
    JSON. A run that fails removes the new, empty database file it created. With a signing key, the writer signs
    only what it wrote (spec 9.1): rows after the newest checkpoint it or a --peer-key signed are refused (exit 2,
    named) unless adopted with --adopt-unsigned.
    """
    from compute_budget.store import BudgetStore
    from compute_budget.store.keys import SIGNING_KEY_ENV_VAR

    if unsigned and signing_key is not None:
        raise click.UsageError("--unsigned and --signing-key contradict each other: give one")
    if rejects_path is not None:
        if on_conflict != "skip":
            raise click.UsageError("--rejects FILE keeps the gates --on-conflict skip leaves out: give both")
        check_writable("--rejects", rejects_path, db=db, keep=[("INPUT", input_path)])
    if adopt_unsigned is not None and (unsigned or (signing_key is None and not os.environ.get(SIGNING_KEY_ENV_VAR))):
        raise click.UsageError("--adopt-unsigned signs the rows it adopts: it needs --signing-key")
    opened = BudgetStore.open(
        db, origin=origin, signing_key=signing_key, writer_state=writer_state, init_writer_state=init_writer_state,
        peer_keys=peer_keys, allow_unsigned=unsigned, witnesses=witnesses, witness_timeout=witness_timeout,
    )
    with contextlib.ExitStack() as context:
        try:
            raw = context.enter_context(open_input(input_path))
        except BaseException:
            opened.discard_if_unused()  # an input that cannot be read leaves no new, empty database behind
            raise
        store = context.enter_context(opened)
        try:
            with read_ahead(raw, _where(input_path)) as stream, progress_bar(stream, "recording") as lines:
                from compute_budget.core.policy.lines import read_gates

                gates = _gates_or_fail(read_gates(lines), input_path)
                result = store.record_many(
                    gates, on_conflict="skip" if on_conflict == "skip" else "raise",
                    adopt_unsigned_through=adopt_unsigned,
                )
        except BaseException:
            store.discard_if_unused()
            raise
        if result.writer_state_created:
            say(f"created writer state {store.writer_state} from the store's newest checkpoint signed by this key")
        if adopt_unsigned is not None:
            first, last = result.adopted_after + 1, result.adopted_after + result.adopted
            say(f"adopted {_plural(result.adopted, 'row')} (seq {first}..{last})" if result.adopted else
                "adopted 0 rows (the head was already signed)")
        for conflict in result.conflicts[:MAX_CONFLICTS_SHOWN]:
            differ = f" (they differ in {', '.join(conflict.differing)})" if conflict.differing else ""
            at = f"line {conflict.line}" if conflict.line is not None else f"gate {conflict.index + 1}"
            say(
                f"{_where(input_path)} {at}: conflict: budget_id {conflict.budget_id} is already recorded with a "
                f"different gate{differ}; skipped"
            )
        if result.conflicts:
            hidden = len(result.conflicts) - MAX_CONFLICTS_SHOWN
            more = f", {hidden} more not shown" if hidden > 0 else ""
            say(f"{_plural(len(result.conflicts), 'conflicting gate')} skipped{more}")
        total = result.new + result.present
        if total == 0 and not result.conflicts and adopt_unsigned is None:
            store.discard_if_unused()  # an empty input creates no store
            say(f"no gates in {_where(input_path)}")
            return
        skipped = f", {len(result.conflicts)} skipped as conflicts" if on_conflict == "skip" else ""
        summary = (
            f"recorded {total} gate{'s' if total != 1 else ''}: {result.new} new, {result.present} already present"
            f"{skipped} (head seq {result.head.seq}) in {store.location.display}"
        )
        try:
            click.echo(summary)
        except BrokenPipeError:
            raise  # the reader went away: not an error
        except OSError as error:  # the rows are committed: the failure must not read as "nothing was written"
            raise OutputUnwritable(
                f"the gates were recorded ({result.new} new, head seq {result.head.seq}), but the summary could not "
                f"be printed: {error.strerror or error}"
            ) from None
        if rejects_path is not None:
            write_atomically(rejects_path, "".join(conflict.gate_input + "\n" for conflict in result.conflicts))
            say(f"wrote {_plural(len(result.conflicts), 'skipped gate')} to {rejects_path}")
        for warning in result.witness_warnings:
            say(warning)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _gates_or_fail(items: Iterator[GateLine | BadLine], input_path: str) -> Iterator[GateLine]:
    from compute_budget.core.policy.lines import BadLine

    for item in items:
        if isinstance(item, BadLine):
            raise InputUnreadable(f"{_where(input_path)} line {item.line}: {item.message}; nothing was written")
        yield item


@cli.command("show")
@click.argument("budget_id", required=False)
@db_option
@click.option("--gate", "gate_id", metavar="DECISION_ID", help="Show every stored decision of this gate instead.")
@click.option("--verify", is_flag=True, help="Exit 1 unless every row shown holds (re-derives, hashes and links).")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def show_command(budget_id: str | None, db: str | None, gate_id: str | None, verify: bool, output_format: str) -> None:
    """Show the stored decision BUDGET_ID (64 hex digits, or a unique prefix of 8 or more), or with --gate every
    decision of a gate, with its gate input and why (exit 1 when none is stored).

    Every row shown is checked as the audit checks it (re-derived from its gate input, budget_id recomputed,
    linked to the row before it); one that does not hold is marked. With --verify such a row exits 1.
    """
    from compute_budget.cli.render import describe_check, describe_stored
    from compute_budget.store import BudgetStore, RowCheck, StoredDecision

    if (budget_id is None) == (gate_id is None):
        raise click.UsageError("give either BUDGET_ID or --gate DECISION_ID")
    wanted = ""
    if budget_id is not None:
        wanted = budget_id.strip().lower()
        if not re.fullmatch(r"[0-9a-f]{8,64}", wanted):
            raise click.BadParameter(
                f"{clip(budget_id, 80)!r} is not a budget_id: give its 64 hex digits "
                "(or a unique prefix of at least 8)",
                param_hint="BUDGET_ID",
            )
    shown: list[tuple[str, StoredDecision | None, RowCheck]] = []
    with BudgetStore.open(db, readonly=True) as store:
        where = store.location.display
        if gate_id is not None:
            ids = [stored.decision.budget_id for stored in store.find_by_gate(gate_id)]
        else:
            ids = store.find_ids(wanted)
            if len(ids) > 1:
                raise click.BadParameter(
                    f"prefix {wanted} is ambiguous: it matches more than one decision; give more digits",
                    param_hint="BUDGET_ID",
                )
        for found in ids:
            check = store.check(found)
            if check is None:  # pragma: no cover  (read in the same breath as its id)
                continue
            try:
                stored = store.get(found)
            except StoreDamaged:
                stored = None  # shown by its check, which says why it cannot be read
            shown.append((found, stored, check))
    if not shown:
        what = f"of gate {_shown(gate_id)}" if gate_id is not None else f"with budget_id {wanted}"
        say(f"not found: no decision {what} in {where}")
        click.get_current_context().exit(1)
    if output_format == "json":
        out = sys.stdout.buffer
        for found, stored, check in shown:
            document: dict[str, object] = (
                stored.to_dict() if stored is not None else {"budget_id": found, "seq": check.seq}
            )
            document["verification"] = {
                "holds": check.holds,
                "findings": [finding.to_dict() for finding in check.findings],
            }
            out.write(_json_bytes(document))
        out.flush()
    else:
        blocks = []
        for found, stored, check in shown:
            head = describe_stored(stored) if stored is not None else f"{'budget_id':<12} {found}"
            blocks.append(f"{head}\n{describe_check(check)}")
        click.echo("\n\n".join(blocks))
    failing = [check for _, _, check in shown if not check.holds]
    for check in failing:
        kinds = ", ".join(dict.fromkeys(finding.kind.value for finding in check.findings))
        say(
            f"{'error' if verify else 'warning'}: budget_id {check.budget_id} (seq {check.seq}) does not hold: "
            f"{kinds}; run `compute-budget audit` for the whole store"
        )
    if verify and failing:
        click.get_current_context().exit(1)


SEQ = click.IntRange(min=0, max=2**62)
# ComputeBudgetStatus's values, written out so that the command line loads no policy module to build its options
# (a test holds the two equal).
STATUSES = ("budget_allowed", "budget_blocked", "budget_zero", "budget_unassessable")


@cli.command("list")
@db_option
@click.option("--status", type=click.Choice(STATUSES), help="Only this status.")
@click.option("--reason", metavar="REASON_CODE", help="Only this reason_code.")
@click.option("--policy-version", metavar="VERSION", help="Only this policy_version.")
@click.option("--gate", "gate_id", metavar="DECISION_ID", help="Only the decisions of the gate with this decision_id.")
@click.option("--after-seq", type=SEQ, metavar="SEQ", help="Only rows after this seq.")
@click.option("--before-seq", type=SEQ, metavar="SEQ", help="Only rows before this seq.")
@click.option(
    "--limit",
    type=SEQ,
    default=None,
    help="Only N of the decisions that match: the first N after --after-seq when it is given, else the newest N.",
)
@click.option("--format", "output_format", type=click.Choice(["table", "jsonl"]), default="table", show_default=True)
def list_command(
    db: str | None,
    status: str | None,
    reason: str | None,
    policy_version: str | None,
    gate_id: str | None,
    after_seq: int | None,
    before_seq: int | None,
    limit: int | None,
    output_format: str,
) -> None:
    """List stored decisions, oldest first and newest last; the filters combine."""
    from compute_budget.store import BudgetStore

    filters = (status, reason, policy_version, gate_id, after_seq, before_seq, limit)
    with BudgetStore.open(db, readonly=True) as store:
        rows = store.iter_decisions(
            status=status,
            reason_code=reason,
            policy_version=policy_version,
            gate_decision_id=gate_id,
            after_seq=after_seq,
            before_seq=before_seq,
            limit=limit,
        )
        if output_format == "jsonl":
            out = sys.stdout.buffer
            for stored in rows:
                out.write(_json_bytes(stored.to_dict()))
            return
        from compute_budget.cli.render import print_table

        print_table(rows, filtered=any(value is not None for value in filters), last_seq=store.head_seq())


@cli.command("migrate")
@db_option
@origin_option
def migrate_command(db: str | None, origin: str | None) -> None:
    """Bring the database schema to this release's head (creating it when the database is empty), build the
    Merkle tree of rows recorded before it, and set the origin of a store that holds rows but has none."""
    from compute_budget.store import BudgetStore

    def restored(problems: list[str]) -> None:
        for problem in problems:
            # The guard's problems are restored; the revision record (spec 9.7) is repaired, and says so itself.
            say(problem if problem.startswith("repaired ") else f"restored the append-only guard: {problem}")

    before, after = BudgetStore.migrate(db, origin=origin, on_restore=restored)
    if before == after:
        click.echo(f"schema already at head revision {after}")
    else:
        click.echo(f"schema migrated from {before or 'nothing'} to head revision {after}")


@cli.command("grants")
@click.option("--role", "role_name", required=True, metavar="NAME", help="The PostgreSQL role to grant to.")
@click.option("--writer", "role", flag_value="writer", help="A role that records: SELECT and INSERT.")
@click.option("--auditor", "role", flag_value="auditor", help="A read-only role: audit, list, show, serve.")
@click.option(
    "--db",
    "database",
    metavar="DB",
    help="Also GRANT CONNECT on this database (its name, or a postgresql:// URL naming it).",
)
@click.option("--schema", default="public", show_default=True, metavar="NAME", help="The schema the store is in.")
def grants_command(role_name: str, role: str | None, database: str | None, schema: str) -> None:
    """Print the GRANT statements that let PostgreSQL role NAME record (--writer) or read (--auditor) a store of
    this release, one per line, for `psql` run as the store's owner. Creating the schema (`migrate`) stays the
    owner's. Exit 0; 2 on a name that cannot be quoted exactly."""
    from compute_budget.store.grants import Role, grant_statements

    if role is None:
        raise click.UsageError("give --writer or --auditor")
    if database is not None and "://" in database:
        from sqlalchemy.engine import make_url

        try:
            url = make_url(database)
        except Exception:
            raise click.BadParameter(f"{clip(database)!r} is not a database URL", param_hint="--db") from None
        if not url.drivername.startswith("postgresql") or not url.database:
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
    from compute_budget.store.backend import locate

    sqlite_path = locate(db).sqlite_path
    if sqlite_path is not None and not sqlite_path.exists():
        with BudgetStore.open(db, readonly=True):
            pass  # the reader's own "does not exist" message; a writer would create an empty file
    with BudgetStore.open(db, allow_unsigned=True) as store:
        note = store.signed_checkpoint(
            signing_keys, writer_state=writer_state, peer_keys=peer_keys, init_writer_state=init_writer_state
        )
    click.echo(note, nl=False)


def _report_spec(value: str) -> tuple[str, str]:
    """FORMAT:FILE of `audit --report`."""
    from compute_budget.cli.render_audit import REPORT_FORMATS

    output_format, colon, path = value.partition(":")
    if not colon or output_format not in REPORT_FORMATS or not path:
        raise click.BadParameter(
            f"{clip(value, 80)!r} is not FORMAT:FILE with FORMAT one of {', '.join(REPORT_FORMATS)} "
            "(for example junit:audit.xml)",
            param_hint="--report",
        )
    return output_format, path


def _jobs_option(_ctx: click.Context, param: click.Parameter, value: object) -> int | Literal["auto"]:
    """``--jobs``: ``auto`` or a whole number from 1 to 64."""
    text = str(value).strip()
    if text.lower() == "auto":
        return "auto"
    if text.isdecimal() and 1 <= int(text) <= 64:
        return int(text)
    raise click.BadParameter(f"{text!r} is neither 'auto' nor a whole number from 1 to 64", param=param)


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
    "--report",
    "reports",
    metavar="FORMAT:FILE",
    multiple=True,
    help="Also write the report as FORMAT (text, json, junit) to FILE; repeatable.",
)
@click.option(
    "--jobs",
    callback=_jobs_option,
    default="auto",
    show_default=True,
    metavar="N|auto",
    help="Processes to split the rows across (1 to 64); auto: one per CPU once the store is big enough to pay "
    "for processes, else 1.",
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
    help="After a clean audit, sign the checkpoint --save-checkpoint writes with this note key (type 0x01: the "
    "auditor attests re-derivation; cosignatures come from witnesses).",
)
@click.option(
    "--origin",
    "expected_origin",
    metavar="NAME",
    help="Require the store to be this log (its origin): another store put in its place is a finding.",
)
@witness_role_options
@click.option(
    "--max-witness-age", "max_witness_age", type=click.IntRange(min=0), default=86400, show_default=True,
    metavar="SECONDS", help="Rows after a checkpoint the witnesses cosigned longer ago than this are unwitnessed_rows.",
)
@click.option(
    "--witness-url", "witness_urls", metavar="URL=KEY", multiple=True,
    help="Before the audit, fetch this compute-budget witness's latest checkpoint of the log; the store must extend "
    "it. Unreachable, or a stale or unverifiable answer: exit 2. Repeatable.",
)
def audit_command(
    db: str | None,
    checkpoint_path: str | None,
    since_path: str | None,
    save_path: str | None,
    output_format: str,
    output_path: str | None,
    reports: tuple[str, ...],
    jobs: int | Literal["auto"],
    trusted_keys: tuple[str, ...],
    all_signatures: bool,
    cosign_path: str | None,
    expected_origin: str | None,
    witness_keys: tuple[str, ...],
    witness_quorum: int | None,
    max_witness_age: int,
    witness_urls: tuple[str, ...],
) -> None:
    """Replay-audit the store read-only: exit 0 clean, 1 findings, 2 cannot run.

    Every report file asked for (--output, --report) is written; when the audit cannot run, each is replaced by
    a report saying why (JUnit: one test case in error; JSON: clean false and an error).
    """
    from compute_budget.auditor.report import utc_now

    started_at = utc_now()
    targets = [(output_format, output_path)] if output_path else []
    targets += [_report_spec(value) for value in reports]
    writable: list[tuple[str, str]] = []
    inputs = [("--checkpoint", checkpoint_path or ""), ("--since", since_path or "")]
    key_files = [("--cosign", cosign_path)] if cosign_path else []
    key_files += [("--trusted-key", item) for item in trusted_keys if os.path.exists(item)]
    try:
        # Before the audit: a nightly run must not fail only at its end. A path the output guards refuse gets
        # no report at all; the others get one whatever happens next.
        refused: list[click.BadParameter] = []
        for option, (target_format, path) in zip(
            ["--output"] * bool(output_path) + ["--report"] * len(reports), targets, strict=True
        ):
            try:
                check_writable(option, path, db=db, keep=inputs)
                check_keys_apart(key_files, [(option, path)])  # a key is never an output, not even an error report
                writable.append((target_format, path))
            except click.BadParameter as error:
                refused.append(error)
        if refused:
            raise refused[0]
        _distinct_outputs([path for _, path in targets] + ([save_path] if save_path else []))
        if save_path:
            check_writable("--save-checkpoint", save_path, db=db, keep=inputs)
            check_keys_apart(key_files, [("--save-checkpoint", save_path)])
        # Until this audit has a verdict, every report says it has none: a run killed outright (SIGKILL, the OOM
        # killer) must not leave last night's CLEAN in place.
        _write_error_reports(
            writable, None, db, started_at,
            reason=f"the audit started at {started_at} and has not finished: if this stays, it was killed",
        )
        _audit_and_report(
            db,
            checkpoint_path,
            since_path,
            save_path,
            output_format,
            output_path,
            writable,
            jobs,
            trusted_keys,
            all_signatures,
            cosign_path,
            expected_origin,
            (witness_keys, witness_quorum, max_witness_age, witness_urls),
        )
    except click.exceptions.Exit:
        raise  # a result (exit 0 or 1), its reports written
    except KeyboardInterrupt as error:  # Ctrl-C, or SIGTERM (a cron timeout): no verdict, so none may survive
        _write_error_reports(writable, error, db, started_at)
        raise
    except Exception as error:  # the audit cannot run (exit 2): every report file says why
        _write_error_reports(writable, error, db, started_at)
        raise


def _audit_and_report(
    db: str | None,
    checkpoint_path: str | None,
    since_path: str | None,
    save_path: str | None,
    output_format: str,
    output_path: str | None,
    targets: list[tuple[str, str]],
    jobs: int | Literal["auto"],
    trusted_keys: tuple[str, ...],
    all_signatures: bool,
    cosign_path: str | None,
    expected_origin: str | None,
    witnessing: tuple[tuple[str, ...], int | None, int, tuple[str, ...]],
) -> None:
    from compute_budget.auditor.scan import audit, load_checkpoint
    from compute_budget.cli.render_audit import render
    from compute_budget.errors import CheckpointError
    from compute_budget.store.keys import load_signer_key, verifier_key

    checkpoint = load_checkpoint(checkpoint_path) if checkpoint_path else None
    if since_path and not os.path.lexists(since_path):
        raise CheckpointError(
            f"checkpoint file {since_path} does not exist. The first night, audit in full once and keep its "
            f"checkpoint: `compute-budget audit{f' --db {db}' if db else ''} --save-checkpoint {since_path}` (see "
            "the README's nightly recipe); "
            "on any later night a missing checkpoint was lost or removed: find out why before making a new one"
        )
    since = load_checkpoint(since_path) if since_path else None
    keys = [verifier_key(item) for item in trusted_keys]
    if cosign_path and not save_path:
        raise click.BadParameter(
            "--cosign signs the checkpoint --save-checkpoint writes: give both", param_hint="--cosign"
        )
    cosigner = load_signer_key(cosign_path) if cosign_path else None
    witness_keys, witness_quorum, max_witness_age, witness_urls = witnessing
    witnesses = _witness_keys(witness_keys, witness_quorum)
    fetched = _fetch_witnessed(db, witness_urls, expected_origin)
    with audit_progress() as on_progress:
        report = audit(
            db,
            checkpoint=checkpoint,
            since=since,
            jobs=jobs,
            on_progress=on_progress,
            trusted_keys=keys,
            all_signatures=all_signatures,
            expected_origin=expected_origin,
            witness_keys=witnesses,
            witness_quorum=witness_quorum,
            max_witness_age=max_witness_age,
            witnessed_checkpoints=fetched,
        )
    for warning in report.warnings:
        say(f"warning: {warning}")
    for target_format, path in targets:
        write_atomically(path, render(report, target_format) + "\n")
    if not output_path:
        click.echo(render(report, output_format))
    if save_path and witnesses:
        _save_witnessed(db, report, save_path, cosigner, [item for item in (checkpoint, since) if item is not None],
                        witnesses, witness_quorum)
    elif save_path:
        if report.clean and cosigner is not None:
            from compute_budget.auditor.proofs import cosign

            given = [item for item in (checkpoint, since) if item is not None]
            write_atomically(save_path, cosign(db, report, cosigner, given))
            say(f"saved checkpoint seq {report.head.seq} to {save_path}")
        elif report.clean:
            write_atomically(save_path, report.head_checkpoint().to_json() + "\n")
            say(f"saved checkpoint seq {report.head.seq} to {save_path}")
        else:
            say(f"audit not clean: checkpoint {save_path} was not written")
    if not report.clean:
        click.get_current_context().exit(1)


def _witness_keys(witness_keys: tuple[str, ...], quorum: int | None) -> list[WitnessKey]:
    """The distinct witness keys, and a quorum in 1..their number (else a usage error, exit 2)."""
    from compute_budget.store.keys import witness_key

    keys = list(dict.fromkeys(witness_key(item) for item in witness_keys))
    if quorum is not None and not 1 <= quorum <= len(keys):
        raise click.BadParameter(
            f"{quorum} is not between 1 and the number of distinct --witness-key keys ({len(keys)})",
            param_hint="--witness-quorum",
        )
    return keys


def _fetch_witnessed(db: str | None, urls: tuple[str, ...], expected_origin: str | None) -> list[str]:
    """What each `--witness-url` witness last cosigned for this store's log (exit 2 when one cannot say)."""
    if not urls:
        return []
    from compute_budget.errors import StoreUnavailable
    from compute_budget.store import BudgetStore
    from compute_budget.store.witnessing import WitnessTarget, fetch_latest

    targets = [WitnessTarget.parse(url) for url in urls]
    origin = expected_origin
    if origin is None:
        with BudgetStore.open(db, readonly=True) as store:
            origin = store.origin()
    if origin is None:
        raise StoreUnavailable("the store has no origin yet: no witness can have cosigned it (give --origin NAME)")
    return [fetch_latest(target, origin) for target in targets]


def _save_witnessed(
    db: str | None,
    report: AuditReport,
    save_path: str,
    cosigner: SignerKey | None,
    given: list[Checkpoint],
    witnesses: list[WitnessKey],
    quorum: int | None,
) -> None:
    """--save-checkpoint with witness keys: the newest checkpoint K witnesses cosigned, with its signatures."""
    import time

    from compute_budget.auditor.witnessed import WitnessPolicy, witnessed_note
    from compute_budget.core.log.note import VerifierKey, add_signature
    from compute_budget.store import BudgetStore

    if not report.clean:
        say(f"audit not clean: checkpoint {save_path} was not written")
        return
    policy = WitnessPolicy(tuple(witnesses), quorum or len(witnesses), 0, int(time.time()))
    note = None
    if report.witnessed_size:
        with BudgetStore.open(db, readonly=True) as store, store.snapshot() as snapshot:
            writers = [VerifierKey.parse(text) for text in report.trusted_keys]
            note = witnessed_note(snapshot, policy, report.witnessed_size, given, writers)
    if note is None:
        say(f"no checkpoint carries {policy.quorum} cosignature(s) by the witness keys: {save_path} was not written")
        return
    if cosigner is not None:
        note = add_signature(note, cosigner)
    write_atomically(save_path, note)
    say(f"saved checkpoint seq {report.witnessed_size} to {save_path}")


def _distinct_outputs(paths: list[str]) -> None:
    seen: set[str] = set()
    for path in paths:
        real = os.path.realpath(path)
        if real in seen:
            raise click.BadParameter(f"{path} is named twice among the reports and the checkpoint to save")
        seen.add(real)


def _write_error_reports(
    targets: list[tuple[str, str]],
    error: BaseException | None,
    db: str | None,
    started_at: str,
    *,
    reason: str | None = None,
) -> None:
    """Replace every report file asked for with the report of an audit that could not run, saying why (`reason`,
    else the error's own words)."""
    if not targets:
        return
    from compute_budget.auditor.report import utc_now
    from compute_budget.cli.render_audit import render_error
    from compute_budget.errors import ComputeBudgetError
    from compute_budget.store.backend import locate

    if reason is None:
        reason = _error_reason(error)
    try:
        database = locate(db).display
    except ComputeBudgetError:
        database = db or "(no database)"
    finished_at = utc_now()
    for target_format, path in targets:
        text = render_error(target_format, reason, database=database, started_at=started_at, finished_at=finished_at)
        try:
            write_atomically(path, text + "\n")
        except ComputeBudgetError as failed:  # that report cannot be written either: say so, keep the first error
            say(f"warning: {failed}")


def _error_reason(error: BaseException | None) -> str:
    """Why an audit could not run, in one line."""
    from compute_budget.errors import ComputeBudgetError

    if isinstance(error, KeyboardInterrupt):
        how = "terminated (SIGTERM)" if isinstance(error, Terminated) else "interrupted (Ctrl-C)"
        return f"the audit was {how} before it finished"
    if isinstance(error, click.ClickException):
        return error.format_message()
    if isinstance(error, OSError):
        return f"{error.strerror or error}{f': {error.filename}' if error.filename else ''}"
    if isinstance(error, ComputeBudgetError):
        return str(error)
    return f"unexpected {type(error).__name__}: {error}"


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
    from compute_budget.auditor.copy import copy_store
    from compute_budget.errors import CopyVerificationFailed

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


def _shown(text: str) -> str:
    from compute_budget.cli.render import shown

    return shown(text)


def _where(input_path: str) -> str:
    """INPUT as shown in messages: as typed when plain, quoted when it holds newlines or undecodable bytes."""
    from compute_budget.core.policy.gate import is_valid_text

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

