"""The program: its entry point (`main`, `run`), the class of the Click group every command hangs from (the group
itself and what its commands share are `cli.group`), and how failures become exit statuses, Click's own way.

Exit statuses: 0 done; 1 a result a person must look at (findings, not found, an invalid proof); 2 the command
could not run (bad arguments, unreadable input, a database it cannot use). A `ComputeBudgetError` becomes
`CannotRun`, a `ClickException` with exit code 2, so Click's standalone mode prints it and exits, and
`CliRunner` sees exactly what the installed command does. Results exit 1 through `ctx.exit(1)`.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from typing import IO, Any

import click

from compute_budget.errors import ComputeBudgetError

PROG = "compute-budget"

CANNOT_RUN = 2


def say(message: str) -> None:
    """One line on stderr, prefixed with the program's name."""
    click.echo(f"{PROG}: {message}", err=True)


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's timeout, `kill`), raised where the program is, so that it ends as Ctrl-C does:
    its clean-ups run and an audit's report files say it did not finish (exit 143)."""


def _raise_terminated(_signal: int, _frame: object) -> None:
    raise Terminated()


class CannotRun(click.ClickException):
    """The command could not run (exit 2); its message is one line saying what is wrong and where."""

    exit_code = CANNOT_RUN

    def show(self, file: IO[Any] | None = None) -> None:
        """Print `compute-budget: error: …` on stderr."""
        say(f"error: {self.format_message()}")


# Subcommands that live in modules of their own, loaded when named: `decide` and `--version` start without them
# (a fast start); `--help` loads them to list their help. Each module registers its commands on the group as it loads.
LAZY_COMMANDS = {
    "record": "compute_budget.cli.record",
    "show": "compute_budget.cli.browse",
    "list": "compute_budget.cli.browse",
    "migrate": "compute_budget.cli.admin",
    "grants": "compute_budget.cli.admin",
    "checkpoint": "compute_budget.cli.admin",
    "copy": "compute_budget.cli.admin",
    "rotate": "compute_budget.cli.rotate",
    "sign": "compute_budget.cli.sign",
    "audit": "compute_budget.cli.audit.command",
    "keygen": "compute_budget.cli.keys_and_proofs",
    "verifier-key": "compute_budget.cli.keys_and_proofs",
    "prove": "compute_budget.cli.keys_and_proofs",
    "verify-proof": "compute_budget.cli.keys_and_proofs",
    "consistency": "compute_budget.cli.keys_and_proofs",
    "serve": "compute_budget.cli.serve",
    "witness": "compute_budget.cli.witness",
    "publish": "compute_budget.cli.publish",
}


class BudgetGroup(click.Group):
    """A group whose commands fail with one line and a documented exit status, never a traceback; the commands of
    `LAZY_COMMANDS` load when named (or listed by --help)."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command `cmd_name`, loading its module first when it is one of `LAZY_COMMANDS`."""
        if cmd_name not in self.commands and cmd_name in LAZY_COMMANDS:
            import importlib
            import logging

            # Every command that opens a store is one of these. The driver's and SQLAlchemy's own log lines ("error
            # ignored terminating <psycopg.Pipeline [BAD]>: the connection is lost", the pool's "Error closing
            # cursor" or "Exception during reset" with a traceback) would reach stderr through logging's last-resort
            # handler beside the one line the command prints for the same failure. Forked workers inherit this.
            for name in ("psycopg", "sqlalchemy"):
                library_log = logging.getLogger(name)
                if not any(isinstance(handler, logging.NullHandler) for handler in library_log.handlers):
                    library_log.addHandler(logging.NullHandler())
            importlib.import_module(LAZY_COMMANDS[cmd_name])
        return super().get_command(ctx, cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """Click's, with "Did you mean" drawn from every command, the lazy ones included (Click's own suggestions
        come from the commands loaded so far)."""
        name = args[0] if args else ""
        if name and not name.startswith("-") and not ctx.resilient_parsing and self.get_command(ctx, name) is None:
            import difflib

            close = difflib.get_close_matches(name, self.list_commands(ctx))
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise click.UsageError(f"No such command {name!r}.{hint}", ctx)
        return super().resolve_command(ctx, args)

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command's name, the lazy ones included, sorted."""
        return sorted({*self.commands, *LAZY_COMMANDS})

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; turn our errors and I/O trouble into `CannotRun`, a closed pipe into exit 0."""
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: as Abort, so Click prints no empty line before ours
            raise click.Abort() from stop
        except BrokenPipeError:
            _silence_stdout()  # the reader went away (`| head`): not an error worth a message
            ctx.exit(0)
        except ComputeBudgetError as error:
            raise CannotRun(str(error)) from error
        except OSError as error:
            where = f": {error.filename}" if error.filename else ""
            raise CannotRun(f"{error.strerror or error}{where}") from error
        except Exception as error:
            if ctx.meta.get("compute_budget.debug"):
                raise
            raise CannotRun(
                f"unexpected {type(error).__name__}: {error} (please report this; --debug shows the traceback)"
            ) from error

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        """Click's, with --help and --version into a reader that went away (`| head`) ending quietly with 0,
        as any other cut-short output does (Click itself would exit 1)."""
        try:
            return super().make_context(info_name, args, parent, **extra)
        except BrokenPipeError:
            _silence_stdout()
            raise click.exceptions.Exit(0) from None

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Click's main, with usage errors as one line (exit 2) and Ctrl-C as exit 130."""
        argv = list(args) if args is not None else sys.argv[1:]
        if not standalone_mode:
            return super().main(argv, prog_name or PROG, complete_var, standalone_mode=False, **extra)
        if not argv:
            context = click.Context(self, info_name=prog_name or PROG, **(self.context_settings or {}))
            click.echo(self.get_help(context), err=True)
            sys.exit(CANNOT_RUN)
        previous = _on_sigterm(_raise_terminated)
        try:
            # Not standalone, so that usage errors and Ctrl-C are ours to word; `ctx.exit(n)` comes back as n.
            code = super().main(argv, prog_name or PROG, complete_var, standalone_mode=False, **extra)
        except click.exceptions.Exit as done:
            sys.exit(done.exit_code)
        except click.UsageError as error:
            if isinstance(error, click.exceptions.NoArgsIsHelpError) and error.ctx is not None:
                # A group named without a subcommand (`witness`): its help, as the program itself without one.
                click.echo(error.ctx.get_help(), err=True)
                sys.exit(CANNOT_RUN)
            hint = f" (try '{error.ctx.command_path} --help')" if error.ctx is not None else ""
            say(f"error: {error.format_message()}{hint}")
            sys.exit(CANNOT_RUN)
        except click.ClickException as error:
            error.show()
            sys.exit(error.exit_code)
        except (click.Abort, KeyboardInterrupt, EOFError) as stop:
            if isinstance(stop, Terminated) or isinstance(stop.__cause__, Terminated):
                say("terminated")
                sys.exit(143)
            say("interrupted")
            sys.exit(130)
        except OSError as error:  # --help or --version into a full disk, say (commands' own are CannotRun)
            _silence_stdout()
            say(f"error: {error.strerror or error}")
            sys.exit(CANNOT_RUN)
        finally:
            _on_sigterm(previous)
        _exit_quietly_on_closed_stdout()
        sys.exit(code if isinstance(code, int) else 0)


def _on_sigterm(handler: Any) -> Any:
    """Install `handler` for SIGTERM where the program owns the signal (the main thread, the default handler, or
    ours being put back); returns what to restore. A host that set its own handler keeps it."""
    try:
        current = signal.getsignal(signal.SIGTERM)
        if handler is None or current not in (signal.SIG_DFL, _raise_terminated):
            return None
        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: signals are not ours to handle
        return None
    return current


def _exit_quietly_on_closed_stdout() -> None:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main() -> None:
    """Console-script entry point."""
    from compute_budget.cli.group import cli  # the group imports this module for its class

    cli.main(prog_name=PROG)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the command line with `argv` and return the exit status instead of exiting (as the console script)."""
    from compute_budget.cli.group import cli

    return run_group(cli, argv)


def run_group(command: BudgetGroup, argv: Sequence[str] | None = None) -> int:
    """Run `command` as the installed program would and return its exit status instead of exiting."""
    try:
        command.main(list(argv) if argv is not None else None, prog_name=PROG)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else CANNOT_RUN)
    return 0  # pragma: no cover  (standalone main always exits)
