"""`compute-budget publish DIR`: the store's log as static C2SP tiles (spec 10.1; a lazy command)."""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Any

import click

from compute_budget.cli.group import cli, db_option
from compute_budget.cli.program import say
from compute_budget.cli.trust import TrustOptions, trust_options, trusted_key_option

if TYPE_CHECKING:
    from compute_budget.publication_writer.run import PublishOutcome


@cli.command("publish")
@click.argument("folder", metavar="DIR")
@db_option
@trusted_key_option(
    "A writer's verifier key (name+hash+key) or a file holding one: the checkpoint published is the newest "
    "stored one it signed, and DIR/checkpoint must verify under it; repeatable. Required unless --policy has a log "
    "line."
)
@trust_options
@click.option(
    "--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True,
    help="What stdout says: one line, or a JSON summary (docs/cli.md lists its fields).",
)
def publish_command(folder: str, db: str | None, trust: TrustOptions, output_format: str) -> None:
    """Publish the newest trusted checkpoint and every tile and entry bundle of its tree into DIR, for any
    static web server: exit 0 published (or already current), 1 findings (nothing written), 2 cannot run.

    Incremental (only the rows since DIR's checkpoint are read, audited as `audit --since` would, and written),
    atomic (DIR/checkpoint is renamed into place last) and immutable (a full tile in DIR is never rewritten).
    On a terminal, stderr shows the progress.
    """
    from compute_budget.cli.progress import phase_progress
    from compute_budget.publication_writer import PublishRequest, publish

    if trust.witness_quorum is not None and not trust.witness_keys:
        raise click.BadParameter("a witness quorum needs --witness-key", param_hint="--witness-quorum")
    rule = trust.witness_rule()
    with phase_progress() as on_progress:
        outcome = publish(PublishRequest(
            folder, db, trusted_keys=trust.trusted_keys, witness_policy=rule, key_states=trust.key_states(),
            on_progress=on_progress,
        ))
    if output_format == "json":
        click.echo(json.dumps(summary_json(outcome), indent=2, sort_keys=True))
    if not outcome.published:
        _refused(outcome, text=output_format == "text")
        click.get_current_context().exit(1)
    if output_format == "text":
        click.echo(_summary(outcome) + _waiting(outcome, db, trust))


def summary_json(outcome: PublishOutcome) -> dict[str, Any]:
    """`--format json`: what the run did, or why it wrote nothing (docs/cli.md says each field)."""
    audit: Any = None
    if outcome.report is not None:
        from compute_budget.cli.audit.render import render

        audit = json.loads(render(outcome.report, "json"))
    refusal = outcome.refusal
    return {
        "folder": outcome.folder,
        "published": outcome.published,
        "previous_size": outcome.previous,
        "size": outcome.size,
        "written": list(outcome.written),
        "handovers_written": [path for path in outcome.written if path.startswith("handover/")],
        "unchanged": outcome.unchanged,
        "removed": list(outcome.removed),
        "tidied": list(outcome.tidied),
        "refusal": None if refusal is None else {"kind": refusal.kind, "detail": refusal.detail},
        "unwitnessed_size": outcome.unwitnessed,
        "audit": audit,
    }


def _refused(outcome: PublishOutcome, *, text: bool) -> None:
    """Exit 1's words: the one refusal line, then the audit's report as `audit` prints it (on stdout with the text
    format; the JSON summary holds them otherwise)."""
    if outcome.refusal is not None and text:
        click.echo(outcome.refusal.line())
    if outcome.report is not None:
        if text:
            from compute_budget.cli.audit.render import render

            click.echo(render(outcome.report, "text"))
        say(f"the rows to publish did not pass the audit: nothing was written to {outcome.folder}")


def _summary(outcome: PublishOutcome) -> str:
    """The one line a publish prints."""
    tidied = f"; {len(outcome.tidied)} file(s) an earlier run left removed" if outcome.tidied else ""
    if not outcome.written:
        newest = "the newest trusted checkpoint" if outcome.unwitnessed is None else \
            "the newest checkpoint the witness quorum cosigned"
        return f"{outcome.folder} already publishes {newest} ({outcome.size} rows){tidied}"
    removed = f"; {len(outcome.removed)} partial tile(s) replaced by full ones removed" if outcome.removed else ""
    return (
        f"published {outcome.size} rows to {outcome.folder} (before: {outcome.previous}): {len(outcome.written)} "
        f"file(s) written, {outcome.unchanged} already there{removed}{tidied}"
    )


def _waiting(outcome: PublishOutcome, db: str | None, trust: TrustOptions) -> str:
    """The rows a trusted key signed that wait for the witness quorum, and the command that sends them."""
    if outcome.unwitnessed is None:
        return ""
    store = f" --db {shlex.quote(db)}" if db is not None else ""
    witnesses = f"--policy {shlex.quote(trust.policy_path)}" if trust.policy_path is not None else "--witness URL=KEY"
    return (
        f"; rows {outcome.size + 1}..{outcome.unwitnessed} wait for the witness quorum (the newest checkpoint "
        f"that meets it is at {outcome.size}): once the witnesses answer, `compute-budget witness submit{store} "
        f"{witnesses}`, then publish again"
    )
