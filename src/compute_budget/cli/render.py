"""Rendering for people: a stored decision described, and tables of decisions (Rich on a terminal)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable

from rich.console import Console
from rich.table import Table
from rich.text import Text

from compute_budget.store import RowCheck, StoredDecision


def escaped(text: str) -> str:
    """Free text (a detail, an explanation, a line of gate input) safe for a terminal: every character that is
    not printable (C0 and C1 controls, ESC, CR, U+0085, U+2028, bidirectional overrides such as U+202E …) is
    written as its escape, so stored text can neither drive the terminal nor forge or reorder a line."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def shown(text: str) -> str:
    """Gate-supplied text as it may reach a terminal: as is when printable, JSON-quoted otherwise, so no
    escape sequence, line break or carriage return from a gate can clear, forge or overwrite a line."""
    return text if text.isprintable() else json.dumps(text)


def describe_stored(stored: StoredDecision) -> str:
    """A stored decision, its gate input and why, as aligned lines of text."""
    decision = stored.decision
    wallclock = "none" if decision.max_wallclock_ms is None else f"{decision.max_wallclock_ms} ms"
    lines = [
        ("budget_id", decision.budget_id),
        ("seq", str(stored.seq)),
        ("recorded_at", escaped(stored.recorded_at)),
        ("policy", escaped(decision.policy_version)),
        ("status", f"{decision.status.value} ({escaped(decision.reason_code)})"),
        (
            "limits",
            f"candidates {decision.max_candidates}, depth {decision.max_depth}, steps {decision.max_steps}, "
            f"parallelism {decision.max_parallelism}, wallclock {wallclock}",
        ),
        (
            "gate",
            f"{shown(decision.gate_decision_id) or '(none)'} "
            f"(policy {shown(decision.gate_policy_version) or '(none)'}, "
            f"input digest {shown(decision.gate_input_digest) or '(none)'})",
        ),
    ]
    for index, span in enumerate(decision.evidence_spans):
        lines.append(
            (
                "evidence" if index == 0 else "",
                f"{json.dumps(span.text)} [{span.start}, {span.end}) sentence {span.sentence_index}",
            )
        )
    lines += [("why", escaped(decision.explanation))]
    lines += [("gate_input" if index == 0 else "", escaped(line)) for index, line in enumerate(gate_lines(stored))]
    lines += [("chain_hash", escaped(stored.chain_hash))]
    return "\n".join(f"{label:<12} {value}" for label, value in lines)


def gate_lines(stored: StoredDecision) -> list[str]:
    """The stored gate input as lines (a pretty-printed gate keeps its layout; each line is escaped apart)."""
    return stored.gate_input.split("\n") or [""]


def describe_check(check: RowCheck) -> str:
    """The `verified` line of `show`: whether the row holds, and if not, every finding about it."""
    if check.holds:
        return f"{'verified':<12} holds (re-derived from its gate input, budget_id recomputed, linked to seq before)"
    lines = [f"{'verified':<12} DOES NOT HOLD: this row was changed behind the store's back"]
    lines += [f"{'':<12} {finding.kind.value}: {finding.detail}" for finding in check.findings]
    return "\n".join(lines)


def print_table(rows: Iterable[StoredDecision], *, filtered: bool = False) -> int:
    """Print decisions as a table on stdout; returns how many rows it printed.

    On a terminal narrower than a full row, budget_ids are cut to 16 hex digits (enough for `show`, which
    takes a unique prefix) and the recording time is left out; piped output always has everything.
    """
    console = Console() if sys.stdout.isatty() else Console(width=240, no_color=True)
    narrow = console.is_terminal and console.width < 200
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("seq", justify="right", no_wrap=True)
    table.add_column("budget_id", no_wrap=True)
    table.add_column("status", overflow="fold")
    table.add_column("reason", overflow="fold")
    table.add_column("limits c/d/s/p", justify="right", overflow="fold")
    table.add_column("gate", overflow="fold", min_width=8)
    if not narrow:
        table.add_column("recorded_at", no_wrap=True)
    count = 0
    for stored in rows:
        decision = stored.decision
        cells = [
            str(stored.seq),
            decision.budget_id[: 12 if console.width < 120 else 16] + "…" if narrow else decision.budget_id,
            decision.status.value,
            escaped(decision.reason_code),
            f"{decision.max_candidates}/{decision.max_depth}/{decision.max_steps}/{decision.max_parallelism}",
            shown(decision.gate_decision_id),
        ]
        # Text, not markup: a stored "[red]" or "[link=…]" is shown as typed, never interpreted by Rich.
        table.add_row(*(Text(cell) for cell in cells), *([] if narrow else [Text(escaped(stored.recorded_at))]))
        count += 1
    if count:
        console.print(table)
    else:
        console.print("no stored decision matches" if filtered else "no decisions stored")
    return count
