"""The `compute-budget` command: a thin Click shell over the core, the store and the auditor.

Every command returns its exit status; `run` turns any `ComputeBudgetError` (and I/O trouble) into one
line on stderr, so no input, however bad, ends in a traceback.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import BinaryIO

import click

from compute_budget.errors import ComputeBudgetError
from compute_budget.gate_json import decide_parsed
from compute_budget.gate_lines import BadLine, GateLine, read_gates
from compute_budget.types import ComputeBudgetStatus
from compute_budget.validation import is_valid_text

PROG = "compute-budget"


class InputUnreadable(ComputeBudgetError):
    """The INPUT path is missing, a folder, or cannot be read."""


def _say(message: str) -> None:
    click.echo(f"{PROG}: {message}", err=True)


@contextmanager
def open_input(path: str) -> Iterator[BinaryIO]:
    """Open INPUT (`-` is stdin) for binary reading, with one clear error for each way it can fail."""
    if path == "-":
        yield sys.stdin.buffer
        return
    if os.path.isdir(path):
        raise InputUnreadable(f"input {path!r} is a folder, not a file of gates")
    try:
        stream = open(path, "rb")  # noqa: SIM115  (closed below; a with-block cannot yield the error we want)
    except FileNotFoundError:
        raise InputUnreadable(f"input file {path!r} does not exist") from None
    except OSError as error:
        raise InputUnreadable(f"cannot read input file {path!r}: {error.strerror or error}") from None
    with stream:
        yield _ReadErrorsNamed(stream, path)  # type: ignore[misc]


class _ReadErrorsNamed:
    """Lines of an input stream, where a read that fails midway (an I/O error) names the input."""

    def __init__(self, stream: BinaryIO, path: str) -> None:
        self._stream = stream
        self._path = path

    def fileno(self) -> int:
        return self._stream.fileno()

    def __iter__(self) -> Iterator[bytes]:
        lines = iter(self._stream)
        while True:
            try:
                line = next(lines)
            except StopIteration:
                return
            except OSError as error:
                raise InputUnreadable(f"cannot read input file {self._path!r}: {error.strerror or error}") from None
            yield line


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="compute-budget", prog_name=PROG)
def cli() -> None:
    """Deterministic compute budgets for search-gate decisions, kept in an append-only, hash-chained store."""


@cli.command("decide")
@click.argument("input_path", metavar="[INPUT]", default="-")
def decide_command(input_path: str) -> int:
    """Print one decision (a JSON line) per gate of INPUT (JSON Lines; '-' or nothing is stdin).

    A line that is not JSON is reported on stderr with its number (the first 20, then how many more); the
    other gates are still decided and the exit status is 2.
    """
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
    return 2 if bad_lines else 0


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
            _say(message)
    if count > limit:
        unsaid = count - limit
        _say(f"{about}… and {unsaid} more {one if unsaid == 1 else many}")
    return count


db_option = click.option(
    "--db",
    "db",
    metavar="PATH|URL",
    default=None,
    help="Database file or SQLAlchemy URL [default: $COMPUTE_BUDGET_DB, else ./compute_budget.db].",
)


@cli.command("record")
@click.argument("input_path", metavar="[INPUT]", default="-")
@db_option
def record_command(input_path: str, db: str | None) -> int:
    """Decide every gate of INPUT and append them all to the store, atomically (all or nothing).

    Re-recording a stored gate is a no-op; the same budget_id with a different gate is a conflict (exit 2,
    nothing written), and so is a line that is not JSON.
    """
    from compute_budget.store import BudgetStore

    with open_input(input_path) as stream, BudgetStore.open(db) as store:
        with progress_bar(stream, "recording") as lines:
            result = store.record_many(_gates_or_fail(read_gates(lines), input_path))
        total = result.new + result.present
        click.echo(
            f"recorded {total} gate{'s' if total != 1 else ''}: {result.new} new, {result.present} already present "
            f"(head seq {result.head.seq}) in {store.location.display}"
        )
    return 0


def _gates_or_fail(items: Iterator[GateLine | BadLine], input_path: str) -> Iterator[GateLine]:
    for item in items:
        if isinstance(item, BadLine):
            raise InputUnreadable(f"{_where(input_path)} line {item.line}: {item.message}; nothing was written")
        yield item


@cli.command("show")
@click.argument("budget_id")
@db_option
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def show_command(budget_id: str, db: str | None, output_format: str) -> int:
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
        _say(f"no decision with budget_id {wanted} in {where}")
        return 1
    if len(found) > 1:
        raise click.BadParameter(
            f"prefix {wanted} is ambiguous: it matches more than one decision; give more digits",
            param_hint="BUDGET_ID",
        )
    stored = found[0]
    if output_format == "json":
        sys.stdout.buffer.write(_json_bytes(stored.to_dict()))
        return 0
    from compute_budget.report import describe_stored

    click.echo(describe_stored(stored))
    return 0


@cli.command("list")
@db_option
@click.option("--status", type=click.Choice([status.value for status in ComputeBudgetStatus]), help="Only this status.")
@click.option("--limit", type=click.IntRange(min=0, max=2**62), default=None, help="Only the newest N decisions.")
@click.option("--format", "output_format", type=click.Choice(["table", "jsonl"]), default="table", show_default=True)
def list_command(db: str | None, status: str | None, limit: int | None, output_format: str) -> int:
    """List stored decisions, oldest first and newest last."""
    from compute_budget.store import BudgetStore

    with BudgetStore.open(db, readonly=True) as store:
        rows = store.iter_decisions(status=status, limit=limit)
        if output_format == "jsonl":
            out = sys.stdout.buffer
            for stored in rows:
                out.write(_json_bytes(stored.to_dict()))
            return 0
        from compute_budget.report import print_table

        print_table(rows, filtered=status is not None or limit is not None)
    return 0


@cli.command("migrate")
@db_option
def migrate_command(db: str | None) -> int:
    """Bring the database schema to this release's head (creating it when the database is empty)."""
    from compute_budget.store import BudgetStore

    before, after = BudgetStore.migrate(db)
    if before == after:
        click.echo(f"schema already at head revision {after}")
    else:
        click.echo(f"schema migrated from {before or 'nothing'} to head revision {after}")
    return 0


@cli.command("checkpoint")
@db_option
def checkpoint_command(db: str | None) -> int:
    """Print a checkpoint of the chain head (keep it outside the database for the next audit)."""
    from compute_budget.store import BudgetStore

    with BudgetStore.open(db, readonly=True) as store:
        click.echo(store.checkpoint().to_json())
    return 0


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
def audit_command(
    db: str | None,
    checkpoint_path: str | None,
    since_path: str | None,
    save_path: str | None,
    output_format: str,
    output_path: str | None,
    jobs: int,
) -> int:
    """Replay-audit the store read-only: exit 0 clean, 1 findings, 2 cannot run."""
    from compute_budget.audit import audit, load_checkpoint
    from compute_budget.audit_report import render
    from compute_budget.checkpoint import Checkpoint

    checkpoint = load_checkpoint(checkpoint_path) if checkpoint_path else None
    since = load_checkpoint(since_path) if since_path else None
    for option, path in (("--output", output_path), ("--save-checkpoint", save_path)):
        if path:
            _check_writable(option, path, db)  # before the audit: a nightly run must not fail only at its end
    with audit_progress(enabled=jobs == 1) as on_progress:
        report = audit(db, checkpoint=checkpoint, since=since, jobs=jobs, on_progress=on_progress)
    text = render(report, output_format)
    if output_path:
        _write_atomically(output_path, text + "\n")
    else:
        click.echo(text)
    if save_path:
        if report.clean:
            _write_atomically(save_path, Checkpoint.from_head(report.head).to_json() + "\n")
        else:
            _say(f"audit not clean: checkpoint {save_path} was not written")
    return 0 if report.clean else 1


def _check_writable(option: str, path: str, db: str | None) -> None:
    from compute_budget.engine import locate

    database = locate(db).sqlite_path
    if database is not None:
        target = os.path.realpath(path)
        for guarded in (
            database,
            database.with_name(database.name + "-wal"),
            database.with_name(database.name + "-shm"),
        ):
            if target == os.path.realpath(guarded):
                raise click.BadParameter(f"{path} is the database being audited (or its journal)", param_hint=option)
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise click.BadParameter(f"{path} is a folder", param_hint=option)
    if not os.path.isdir(folder):
        raise click.BadParameter(f"folder {folder} does not exist", param_hint=option)
    if not os.access(folder, os.W_OK):
        raise click.BadParameter(f"folder {folder} is not writable", param_hint=option)


def _write_atomically(path: str, text: str) -> None:
    """Write a whole file or nothing: a half-written checkpoint would fail tomorrow's audit."""
    import tempfile

    folder = os.path.dirname(os.path.abspath(path))
    try:
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=".compute-budget-", suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        try:  # mkstemp makes 0600: keep an existing file's mode, else what the umask gives a new file
            mode = os.stat(path).st_mode & 0o777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except OSError as error:
        raise InputUnreadable(f"cannot write {path}: {error.strerror or error}") from None


@contextmanager
def audit_progress(*, enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar with rows/s and ETA on stderr, only when stderr is a terminal."""
    if not (enabled and sys.stderr.isatty()):
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(
        TextColumn("[bold]auditing"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]} rows/s"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        task = progress.add_task("audit", total=None, rate="-")

        def update(done: int, total: int) -> None:
            speed = progress.tasks[0].speed
            progress.update(task, completed=done, total=total or None, rate=f"{speed:,.0f}" if speed else "-")

        yield update


@cli.command("copy")
@click.argument("source", metavar="SRC")
@click.argument("destination", metavar="DST")
def copy_command(source: str, destination: str) -> int:
    """Copy the whole history of store SRC into the empty store DST (paths or URLs), verifying every row.

    Exit 0 copied; 1 a source row failed verification (nothing copied); 2 cannot run.
    """
    from compute_budget.errors import CopyVerificationFailed
    from compute_budget.transfer import copy_store

    try:
        with audit_progress(enabled=True) as on_progress:
            head = copy_store(source, destination, on_progress=on_progress)
    except CopyVerificationFailed as failed:
        _say(f"error: {failed}")
        return 1
    click.echo(f"copied {head.seq} rows; head seq {head.seq}, chain_hash {head.chain_hash}")
    return 0


@contextmanager
def progress_bar(stream: BinaryIO, label: str) -> Iterator[Iterator[bytes]]:
    """Lines of `stream`, with a progress bar on stderr by bytes read, only when stderr is a terminal."""
    if not sys.stderr.isatty():
        yield iter(stream)
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    total: int | None = None
    try:
        total = os.fstat(stream.fileno()).st_size or None
    except (OSError, ValueError, AttributeError):
        total = None
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        task = progress.add_task(label, total=total)

        def lines() -> Iterator[bytes]:
            for line in stream:
                progress.advance(task, len(line))  # Rich's progress is thread-safe: gates are read ahead
                yield line

        yield lines()


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
    """Run the command line with `argv` and return the exit status instead of exiting."""
    args = list(argv) if argv is not None else sys.argv[1:]
    if not args:
        click.echo(cli.get_help(click.Context(cli, info_name=PROG)), err=True)
        return 2
    try:
        # make_context + invoke rather than main(): main() turns a broken pipe into exit 1 before we see it
        with cli.make_context(PROG, args) as context:
            result = cli.invoke(context)
    except click.exceptions.Exit as done:
        return int(done.exit_code)
    except click.UsageError as error:
        hint = f" (try '{error.ctx.command_path} --help')" if error.ctx is not None else ""
        _say(f"error: {error.format_message()}{hint}")
        return 2
    except click.ClickException as error:
        _say(error.format_message())
        return error.exit_code if error.exit_code else 2
    except (click.Abort, KeyboardInterrupt):
        _say("interrupted")
        return 130
    except BrokenPipeError:
        _silence_stdout()  # the reader went away (`| head`): not an error worth a traceback
        return 0
    except ComputeBudgetError as error:
        _say(f"error: {error}")
        return 2
    except OSError as error:
        _say(f"error: {error.strerror or error}" + (f": {error.filename}" if error.filename else ""))
        return 2
    except Exception as error:  # a bug of ours: still one line, never a traceback
        _say(f"error: unexpected {type(error).__name__}: {error} (please report this)")
        return 2
    return result if isinstance(result, int) else 0


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


def main() -> None:
    """Console-script entry point."""
    sys.exit(run())
