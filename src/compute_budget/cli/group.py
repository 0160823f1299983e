"""The `compute-budget` group, `decide`, and what the other commands share (options, input names, JSON lines);
how the program starts and fails is `cli.program`.

The other commands live in modules of their own (`record`, `browse`, `admin`, `audit`, `seal`, `serve`,
`witness`, `publish`), loaded when named (`cli.program.LAZY_COMMANDS`), so that `decide`, `--version` and `--help`
start without them (a fast start): a thin Click shell over the core, the store and the auditor.

Results that need a person's eye exit 1 through `ctx.exit(1)`; everything that stops a command from running is
an error the group (`cli.program.BudgetGroup`) turns into one line on stderr and exit 2.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import click

from compute_budget._version import __version__
from compute_budget.cli.io import Blocks, open_input
from compute_budget.cli.program import PROG, BudgetGroup, say
from compute_budget.errors import InputNotJson, InputUnreadable

if TYPE_CHECKING:
    from compute_budget.core.log.cosignature import WitnessKey
    from compute_budget.core.log.witness_policy import TlogPolicy
    from compute_budget.core.policy.lines import GateLine
    from compute_budget.submitter import WitnessSubmitter
    from compute_budget.witness.client import WitnessTarget


@click.group(cls=BudgetGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=__version__, prog_name=PROG)  # no importlib.metadata: a start 20 ms sooner
@click.option("--debug", is_flag=True, help="Show the traceback of an unexpected error (for a bug report).")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Deterministic compute budgets for search-gate decisions, kept in an append-only, hash-chained store."""
    ctx.meta["compute_budget.debug"] = debug


JSON_ARRAY = "json-array"

input_format_option = click.option(
    "--input-format",
    "input_format",
    type=click.Choice(["json-lines", JSON_ARRAY]),
    default="json-lines",
    show_default=True,
    help="json-lines: one gate per line (an object may span lines); json-array: INPUT is one JSON array and each "
    "element is one gate, numbered from 1 where a line number would be.",
)


def array_gates(blocks: Iterable[bytes], label: str, *, nothing: str) -> Iterator[GateLine]:
    """The gates of INPUT read as one JSON array (spec 9.9.9); anything else is one `InputUnreadable` line naming
    INPUT and where, ending with `nothing` ("nothing was written")."""
    from compute_budget.core.policy.json_array import read_array_gates

    try:
        yield from read_array_gates(blocks)
    except InputNotJson as error:
        raise InputUnreadable(f"{label}: {error}; {nothing}") from None


@cli.command("decide")
@click.argument("input_path", metavar="[INPUT]", default="-")
@input_format_option
def decide_command(input_path: str, input_format: str) -> None:
    """Print one decision (a JSON line) per gate of INPUT (JSON Lines; '-' or nothing is stdin).

    A line that is not JSON is reported on stderr with its number (the first 20, then how many more); the
    other gates are still decided and the exit status is 2. With --input-format json-array, INPUT that is not
    one JSON array prints no decision at all: one line saying where it breaks, exit 2.
    """
    if input_format == JSON_ARRAY:
        _decide_array(input_path)
        return
    from compute_budget.core.policy.lines import BadLine, read_gates
    from compute_budget.core.policy.parse import decide_parsed

    out = sys.stdout.buffer

    def decided_reporting_bad_lines(stream: Iterable[bytes]) -> Iterator[str]:
        for item in read_gates(stream):
            if isinstance(item, BadLine):
                out.flush()  # keep stdout and stderr in input order when both go to one terminal
                yield f"{input_label(input_path)} line {item.line}: {item.message}"
                continue
            decision = decide_parsed(item.parsed)
            out.write(json_line(decision.to_dict()))

    with open_input(input_path) as stream:
        bad_lines = report_capped(decided_reporting_bad_lines(stream), about=f"{input_label(input_path)}: ")
    out.flush()
    if bad_lines:
        click.get_current_context().exit(2)


def _decide_array(input_path: str) -> None:
    """`decide --input-format json-array`: the decisions are kept aside (in memory, then a temporary file) until
    the whole array has been read, so a broken array prints none of them."""
    import shutil
    import tempfile

    from compute_budget.core.policy.parse import decide_parsed

    label = input_label(input_path)
    with (
        open_input(input_path) as stream,
        tempfile.SpooledTemporaryFile(max_size=32 << 20, prefix="compute-budget-decisions-") as kept,
    ):
        for gate in array_gates(Blocks(stream, label), label, nothing="no decision was printed"):
            kept.write(json_line(decide_parsed(gate.parsed).to_dict()))
        kept.seek(0)
        shutil.copyfileobj(kept, sys.stdout.buffer)
        sys.stdout.buffer.flush()


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
    """`--witness URL=KEY` (repeatable) and `--witness-timeout SECONDS` (spec 9.5), or `--policy FILE` (its
    witnesses that have a URL; `submit_targets` reads them)."""
    command = click.option(
        "--policy", "policy_path", metavar="FILE",
        help="A C2SP tlog-policy file: send to each of its witnesses that has a URL (optional ones too), instead of "
        "--witness, and say whether its quorum cosigned.",
    )(command)
    command = click.option(
        "--witness-timeout", "witness_timeout", type=click.FloatRange(min=0, min_open=True), default=5.0,
        show_default=True, metavar="SECONDS", help="Wait at most this long for the witnesses.",
    )(command)
    return click.option(
        "--witness", "witnesses", metavar="URL=KEY", multiple=True,
        help="After the append, send its signed checkpoint to this witness (URL prefix = its verifier key, type "
        "0x04 or 0x06); repeatable. A witness that is down is a warning: the rows stay recorded.",
    )(command)


def submit_targets(
    policy_path: str | None, witnesses: tuple[str, ...]
) -> tuple[tuple[str | WitnessTarget, ...], TlogPolicy | None]:
    """The witnesses a writer sends to (``URL=KEY``): `--witness`, or those of the `--policy` file with a URL, each
    once; and that policy (None without one). Both at once: exit 2. A policy witness with no URL cannot be asked:
    said once, on stderr."""
    from compute_budget.cli.trust import load_policy
    from compute_budget.core.log.witness_policy import shown
    from compute_budget.witness.client import WitnessTarget

    if policy_path is None:
        return witnesses, None
    if witnesses:
        raise click.BadParameter("a policy file names the witnesses to ask: give --policy or --witness, not both",
                                 param_hint="--policy")
    policy = load_policy(policy_path)
    unreachable = [shown(witness.name) for witness in policy.witnesses if witness.url is None]
    if unreachable:
        say(f"warning: the policy gives no URL for witness(es) {', '.join(unreachable)}: they are not asked")
    # Built from the URL and the key as the file gives them apart: an `=` in a URL is never a separator.
    targets = tuple(WitnessTarget.of(witness.url, witness.key) for witness in policy.witnesses if witness.url)
    return targets, policy


def http_submitter() -> WitnessSubmitter:
    """The witness client a command hands the store it opens (the store imports none): `witness.client`'s."""
    from compute_budget.witness.client import HttpSubmitter

    return HttpSubmitter()


def policy_verdict(policy: TlogPolicy, cosigned_by: Iterable[WitnessKey]) -> str:
    """One line on what the witnesses that cosigned come to under `policy`: the quorum met or not, who counted,
    and the optional witnesses that cosigned (asked, reported, never counted)."""
    from compute_budget.core.log.witness_policy import shown

    verdict = policy.evaluate(policy.names_of(cosigned_by))
    state = "met" if verdict.met else "NOT met"
    counted = ", ".join(shown(name) for name in verdict.counted) or "none"
    line = f"witness policy: quorum {state} ({policy.quorum_in_words()}); counted: {counted}"
    if verdict.optional:
        line += f"; optional, not counted: {', '.join(shown(name) for name in verdict.optional)}"
    return line


SEQ = click.IntRange(min=0, max=2**62)


def input_label(input_path: str) -> str:
    """INPUT as shown in messages: as typed when plain, quoted when it holds newlines or undecodable bytes."""
    from compute_budget.core.policy.gate import is_valid_text

    if input_path == "-":
        return "stdin"
    return input_path if input_path.isprintable() and is_valid_text(input_path) else repr(input_path)


def json_line(value: object) -> bytes:
    import orjson

    return orjson.dumps(value, option=orjson.OPT_APPEND_NEWLINE)


