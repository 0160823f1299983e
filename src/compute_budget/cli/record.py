"""`compute-budget record`: decide and append gates, signed and witnessed when asked (a lazy command)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import click

from compute_budget.cli.group import (
    JSON_ARRAY,
    array_gates,
    cli,
    db_option,
    http_submitter,
    input_format_option,
    input_label,
    origin_option,
    policy_verdict,
    submit_targets,
    witness_submit_options,
    writer_options,
)
from compute_budget.cli.io import Blocks, check_writable, open_input, read_ahead, write_atomically
from compute_budget.cli.program import say
from compute_budget.cli.progress import progress_bar
from compute_budget.errors import GateTooLarge, InputUnreadable, OutputUnwritable

if TYPE_CHECKING:
    from typing import BinaryIO

    from compute_budget.core.log.witness_policy import TlogPolicy
    from compute_budget.core.policy.lines import GateLine
    from compute_budget.store import BudgetStore
    from compute_budget.store.results import BatchResult, RecordOptions


MAX_CONFLICTS_SHOWN = 20


@cli.command("record")
@click.argument("input_path", metavar="[INPUT]", default="-")
@db_option
@input_format_option
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
    "--after-repair",
    "after_repair",
    metavar="REPAIR_ID",
    type=click.IntRange(min=1),
    default=None,
    help="Acknowledge repair REPAIR_ID (`migrate` names it) once a full audit found nothing else: every row is "
    "re-derived first; until then every append is refused (spec 9.9.10).",
)
@click.option(
    "--unsigned",
    is_flag=True,
    help="Append without a key to a store that holds signed checkpoints (ignores $COMPUTE_BUDGET_SIGNING_KEY).",
)
@click.option(
    "--checkpoint-interval",
    "checkpoint_interval",
    metavar="SECONDS",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Sign at most one checkpoint per SECONDS (spec 12.1) instead of one per transaction; one batch is still "
    "signed once, at the end. Not with --peer-key.",
)
@witness_submit_options
@origin_option
def record_command(
    input_path: str,
    db: str | None,
    input_format: str,
    on_conflict: str,
    rejects_path: str | None,
    signing_key: str | None,
    writer_state: str | None,
    init_writer_state: bool,
    peer_keys: tuple[str, ...],
    adopt_unsigned: int | None,
    after_repair: int | None,
    unsigned: bool,
    checkpoint_interval: float,
    witnesses: tuple[str, ...],
    witness_timeout: float,
    policy_path: str | None,
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

    options = _record_options(input_path, db, on_conflict, rejects_path, signing_key, adopt_unsigned, after_repair,
                              unsigned, checkpoint_interval)
    targets, policy = submit_targets(policy_path, witnesses)
    opened = BudgetStore.open(  # handed the witness client when there are witnesses (the store imports none)
        db, origin=origin, signing_key=signing_key, writer_state=writer_state, init_writer_state=init_writer_state,
        peer_keys=peer_keys, allow_unsigned=unsigned, witnesses=targets, witness_timeout=witness_timeout,
        submitter=http_submitter() if targets else None, checkpoint_interval=checkpoint_interval)
    with contextlib.ExitStack() as context:
        try:
            raw = context.enter_context(open_input(input_path))
        except BaseException:
            opened.discard_if_unused()  # an input that cannot be read leaves no new, empty database behind
            raise
        store = context.enter_context(opened)
        _check_policy_logs(store, policy)
        result = _record_input(store, raw, input_path, input_format, options)
        _say_what_happened(store, result, input_path, input_format, options)
        if result.new + result.present == 0 and not result.conflicts and not options.signs_anyway:
            store.discard_if_unused()  # an empty input creates no store
            say(f"no gates in {input_label(input_path)}")
            return
        _print_summary(store, result, options)
        if rejects_path is not None:
            write_atomically(rejects_path, "".join(conflict.gate_input + "\n" for conflict in result.conflicts))
            say(f"wrote {_plural(len(result.conflicts), 'skipped gate')} to {rejects_path}")
        for warning in result.witness_warnings:
            say(warning)
        if result.witnessed is not None:
            say(f"cosigned by {result.witnessed[0]}/{result.witnessed[1]} witnesses")
            if policy is not None:
                say(policy_verdict(policy, result.cosigned_by))


def _check_policy_logs(store: BudgetStore, policy: TlogPolicy | None) -> None:
    """A policy's log lines name this store (C2SP: a log key is named by its origin): one that does not is refused
    before anything is written, and a store this run created is removed."""
    if policy is None or not policy.logs:
        return
    try:
        policy.store_log_keys(store.origin() or "")
    except BaseException:
        store.discard_if_unused()
        raise


def _has_key(signing_key: str | None, unsigned: bool) -> bool:
    """Whether `record` signs: a --signing-key, or $COMPUTE_BUDGET_SIGNING_KEY unless --unsigned."""
    from compute_budget.keys.key_files import SIGNING_KEY_ENV_VAR

    return not unsigned and (signing_key is not None or bool(os.environ.get(SIGNING_KEY_ENV_VAR)))


def _record_options(
    input_path: str, db: str | None, on_conflict: str, rejects_path: str | None, signing_key: str | None,
    adopt_unsigned: int | None, after_repair: int | None, unsigned: bool, checkpoint_interval: float,
) -> RecordOptions:
    """The usage errors of `record`'s options, before any store is opened (exit 2); else how to record."""
    from compute_budget.store.results import RecordOptions

    if unsigned and signing_key is not None:
        raise click.UsageError("--unsigned and --signing-key contradict each other: give one")
    if rejects_path is not None:
        if on_conflict != "skip":
            raise click.UsageError("--rejects FILE keeps the gates --on-conflict skip leaves out: give both")
        check_writable("--rejects", rejects_path, db=db, keep=[("INPUT", input_path)], doing="recorded into")
    if adopt_unsigned is not None and not _has_key(signing_key, unsigned):
        raise click.UsageError("--adopt-unsigned signs the rows it adopts: it needs --signing-key")
    if checkpoint_interval > 0 and not _has_key(signing_key, unsigned):  # else it would be silently ignored
        raise click.UsageError("--checkpoint-interval is how often the writer signs: it needs --signing-key")
    return RecordOptions(
        on_conflict="skip" if on_conflict == "skip" else "raise", adopt_unsigned_through=adopt_unsigned,
        after_repair=after_repair,
    )


def _record_input(
    store: BudgetStore, raw: BinaryIO, input_path: str, input_format: str, options: RecordOptions
) -> BatchResult:
    """Every gate of INPUT recorded in one `record_many` (all or nothing); a failure leaves no new, empty store."""
    arrays: list[int] = []  # where a gate of JSON Lines input was a JSON array: then a hint is said
    try:
        with read_ahead(raw, input_label(input_path)) as stream, progress_bar(
            Blocks(stream, input_label(input_path)) if input_format == JSON_ARRAY else stream,  # type: ignore[arg-type]
            "recording",
        ) as lines:
            return store.record_many(
                _gates(lines, input_path, input_format, arrays), on_conflict=options.on_conflict,
                adopt_unsigned_through=options.adopt_unsigned_through, after_repair=options.after_repair,
            )
    except GateTooLarge as error:
        store.discard_if_unused()
        raise _placed(error, input_path, input_format) from None
    except BaseException:
        store.discard_if_unused()
        raise
    finally:
        if arrays:  # spec 9.9.9: without the flag an array stays one malformed gate; say the flag exists
            say(f"{input_label(input_path)} holds a JSON array; did you mean --input-format json-array?")


def _say_what_happened(
    store: BudgetStore, result: BatchResult, input_path: str, input_format: str, options: RecordOptions
) -> None:
    """On stderr: a writer state created, rows adopted, a repair acknowledged, and the conflicts skipped."""
    if result.writer_state_created:
        say(f"created writer state {store.writer_state} from the store's newest checkpoint signed by this key")
    if options.adopt_unsigned_through is not None:
        first, last = result.adopted_after + 1, result.adopted_after + result.adopted
        say(f"adopted {_plural(result.adopted, 'row')} (seq {first}..{last})" if result.adopted else
            "adopted 0 rows (the head was already signed)")
    if result.acknowledged_repair is not None:
        say(f"acknowledged repair #{result.acknowledged_repair}: every row stored before this run re-derived")
    for conflict in result.conflicts[:MAX_CONFLICTS_SHOWN]:
        differ = f" (they differ in {', '.join(conflict.differing)})" if conflict.differing else ""
        unit = "element" if input_format == JSON_ARRAY else "line"
        at = f"{unit} {conflict.line}" if conflict.line is not None else f"gate {conflict.index + 1}"
        say(
            f"{input_label(input_path)} {at}: conflict: budget_id {conflict.budget_id} is already recorded with a "
            f"different gate{differ}; skipped"
        )
    if result.conflicts:
        hidden = len(result.conflicts) - MAX_CONFLICTS_SHOWN
        more = f", {hidden} more not shown" if hidden > 0 else ""
        say(f"{_plural(len(result.conflicts), 'conflicting gate')} skipped{more}")


def _print_summary(store: BudgetStore, result: BatchResult, options: RecordOptions) -> None:
    """The one stdout line: how many gates, new and present; the rows are committed whatever printing does."""
    total = result.new + result.present
    skipped = f", {len(result.conflicts)} skipped as conflicts" if options.skip_conflicts else ""
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


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _gates(
    lines: Iterator[bytes], input_path: str, input_format: str, arrays: list[int]
) -> Iterator[GateLine]:
    """The gates of INPUT in its format; a line (or an array) that is not JSON stops the run, nothing written.
    The first JSON Lines gate that is a JSON array is noted in `arrays`."""
    from compute_budget.core.policy.lines import BadLine, read_gates

    label = input_label(input_path)
    if input_format == JSON_ARRAY:
        yield from array_gates(lines, label, nothing="nothing was written")
        return
    for item in read_gates(lines):
        if isinstance(item, BadLine):
            raise InputUnreadable(f"{label} line {item.line}: {item.message}; nothing was written")
        if not arrays and item.text.startswith("["):
            arrays.append(item.line)  # the first is enough: the hint is said once
        yield item


def _placed(error: GateTooLarge, input_path: str, input_format: str) -> GateTooLarge:
    """The refusal naming INPUT and the gate's line (or element) in it."""
    unit = "element" if input_format == JSON_ARRAY else "line"
    where = f"at {input_label(input_path)} {unit} {error.line}" if error.line is not None else None
    return GateTooLarge(error.budget_id, error.size, error.limit, index=error.index, line=error.line, where=where)
