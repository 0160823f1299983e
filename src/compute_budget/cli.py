"""The `compute-budget` command: a thin Click shell over the core, the store and the auditor.

Every command returns its exit status; `run` turns any `ComputeBudgetError` (and I/O trouble) into one
line on stderr, so no input, however bad, ends in a traceback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import BinaryIO

import click

from compute_budget.errors import ComputeBudgetError
from compute_budget.gate_lines import BadLine, read_gates
from compute_budget.policy import V1

PROG = "compute-budget"
DEFAULT_DB_FILE = "compute_budget.db"


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
        yield stream


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="compute-budget", prog_name=PROG)
def cli() -> None:
    """Deterministic compute budgets for search-gate decisions, kept in an append-only, hash-chained store."""


@cli.command("decide")
@click.argument("input_path", metavar="[INPUT]", default="-")
def decide_command(input_path: str) -> int:
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
                _say(f"{_where(input_path)} line {item.line}: {item.message}")
                continue
            decision = V1.decide(item.parsed.value, defect=item.parsed.defect)
            out.write(_json_bytes(decision.to_dict()))
    out.flush()
    return 2 if bad_lines else 0


def _where(input_path: str) -> str:
    return "stdin" if input_path == "-" else input_path


def _json_bytes(value: object) -> bytes:
    import orjson

    return orjson.dumps(value, option=orjson.OPT_APPEND_NEWLINE)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the command line with `argv` and return the exit status instead of exiting."""
    try:
        result = cli.main(args=list(argv) if argv is not None else None, prog_name=PROG, standalone_mode=False)
    except click.exceptions.Exit as done:
        return int(done.exit_code)
    except click.UsageError as error:
        hint = f" (try '{error.ctx.command_path} --help')" if error.ctx is not None else ""
        _say(f"{error.format_message()}{hint}")
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
