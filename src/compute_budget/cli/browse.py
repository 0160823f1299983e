"""`compute-budget show` and `list`: reading stored decisions (lazy commands)."""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING

import click

from compute_budget.cli.group import SEQ, cli, db_option, json_line
from compute_budget.cli.program import say
from compute_budget.errors import StoreDamaged, clip

if TYPE_CHECKING:
    from compute_budget.store import BudgetStore, RowCheck, StoredDecision


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
    wanted = _wanted_id(budget_id, gate_id)
    shown, where = _read_shown(db, wanted, gate_id)
    if not shown:
        what = f"of gate {_shown(gate_id)}" if gate_id is not None else f"with budget_id {wanted}"
        say(f"not found: no decision {what} in {where}")
        click.get_current_context().exit(1)
    _print_shown(shown, output_format)
    failing = [check for _, _, check in shown if not check.holds]
    for check in failing:
        kinds = ", ".join(dict.fromkeys(finding.kind.value for finding in check.findings))
        say(
            # With --verify this is the result (exit 1), not an error: "error:" lines mean the command could not run.
            f"{'' if verify else 'warning: '}budget_id {check.budget_id} (seq {check.seq}) does not hold: "
            f"{kinds}; run `compute-budget audit` for the whole store"
        )
    if verify and failing:
        click.get_current_context().exit(1)


def _wanted_id(budget_id: str | None, gate_id: str | None) -> str:
    """BUDGET_ID as searched for (lower case; "" with --gate), after the usage checks (exit 2)."""
    if (budget_id is None) == (gate_id is None):
        raise click.UsageError("give either BUDGET_ID or --gate DECISION_ID")
    if budget_id is None:
        return ""
    wanted = budget_id.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{8,64}", wanted):
        raise click.BadParameter(
            f"{clip(budget_id, 80)!r} is not a budget_id: give its 64 hex digits (or a unique prefix of at least 8)",
            param_hint="BUDGET_ID",
        )
    return wanted


def _read_shown(
    db: str | None, wanted: str, gate_id: str | None
) -> tuple[list[tuple[str, StoredDecision | None, RowCheck]], str]:
    """Each decision to show (its id, the stored decision unless it cannot be read, its row check), read in one
    open of the store, and the store's display name."""
    from compute_budget.store import BudgetStore

    shown: list[tuple[str, StoredDecision | None, RowCheck]] = []
    with BudgetStore.open(db, readonly=True) as store:
        warn_if_schema_differs(store)
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
        return shown, store.location.display


def _print_shown(shown: list[tuple[str, StoredDecision | None, RowCheck]], output_format: str) -> None:
    """The decisions on stdout: one JSON line each (with their verification), or text blocks."""
    from compute_budget.cli.render import describe_check, describe_stored

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
            out.write(json_line(document))
        out.flush()
        return
    blocks = []
    for found, stored, check in shown:
        head = describe_stored(stored) if stored is not None else f"{'budget_id':<12} {found}"
        blocks.append(f"{head}\n{describe_check(check)}")
    click.echo("\n\n".join(blocks))


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
        warn_if_schema_differs(store)
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
                out.write(json_line(stored.to_dict()))
            return
        from compute_budget.cli.render import print_table

        print_table(rows, filtered=any(value is not None for value in filters), last_seq=store.head_seq())




def _shown(text: str) -> str:
    from compute_budget.cli.render import shown

    return shown(text)


def warn_if_schema_differs(store: BudgetStore) -> None:
    """One warning line when the schema is not what this release made (the audit's check): a row-level security
    policy, say, hides rows from this role, and what is listed or shown may not be all there is."""
    with store.snapshot() as snapshot:
        problems = snapshot.schema_problems()
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        say(f"warning: {problems[0]}{more}: what is shown may not be all the store holds; run `compute-budget audit`")
