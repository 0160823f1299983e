"""Rendering for people: a stored decision described, and tables of decisions (Rich on a terminal)."""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterable

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


TABLE_CHUNK_ROWS = 500  # rows laid out and printed at a time: `list` of millions of rows streams in bounded memory
# Widths every chunk gets at least, whatever its first rows hold: the longest status and v1 reason code, and room
# for a gate id; so a later chunk's columns start where the first one's did.
_FLOOR = {"status": 19, "reason": 25, "gate": 40}


def print_table(rows: Iterable[StoredDecision], *, filtered: bool = False, last_seq: int = 0) -> int:
    """Print decisions as a table on stdout, a chunk of rows at a time; returns how many rows it printed.

    On a terminal narrower than a full row, budget_ids are cut to 16 hex digits (enough for `show`, which
    takes a unique prefix) and the recording time is left out; piped output always has everything. Each chunk
    is laid out with at least the column widths of the first, so the columns line up down the whole listing
    (a later, wider cell widens only its own chunk): `last_seq`, the highest seq listed (or more), sizes the seq
    column for the whole listing, and the gate column keeps the first chunk's width (longer ids fold).
    """
    # Rich is imported here, not with the module: every other command (the nightly audit among them) would pay
    # its import, about 50 ms, for nothing.
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console() if sys.stdout.isatty() else Console(width=240, no_color=True)
    narrow = console.is_terminal and console.width < 200
    headers = ["seq", "budget_id", "status", "reason", "limits c/d/s/p", "gate"] + ([] if narrow else ["recorded_at"])
    widths: list[int] | None = None
    count = 0
    source = iter(rows)
    while chunk := list(itertools.islice(source, TABLE_CHUNK_ROWS)):
        cells = [_row_cells(stored, narrow, console.width) for stored in chunk]
        if widths is None:
            floors = {**_FLOOR, "seq": len(str(last_seq))}
            widths = [
                max(len(header), floors.get(header, 0), *(len(row[index]) for row in cells))
                for index, header in enumerate(headers)
            ]
        table = Table(show_edge=False, pad_edge=False, show_header=count == 0)
        for index, header in enumerate(headers):
            right = header in ("seq", "limits c/d/s/p")
            folds = header in ("status", "reason", "limits c/d/s/p", "gate")
            table.add_column(
                header,
                justify="right" if right else "left",
                overflow="fold" if folds else "ellipsis",
                no_wrap=not folds,
                # A hostile 10,000-character reason must not squeeze the other columns: folded ones keep 40 at most.
                min_width=min(widths[index], 40) if folds else widths[index],
                # The gate column keeps the first chunk's width (40 to 120) all the way down: longer ids fold.
                width=min(widths[index], 120) if header == "gate" else None,
            )
        for row in cells:
            # Text, not markup: a stored "[red]" or "[link=…]" is shown as typed, never interpreted by Rich.
            table.add_row(*(Text(cell) for cell in row))
        console.print(table)
        count += len(chunk)
    if not count:
        console.print("no stored decision matches" if filtered else "no decisions stored")
    return count


def _row_cells(stored: StoredDecision, narrow: bool, width: int) -> list[str]:
    decision = stored.decision
    cells = [
        str(stored.seq),
        decision.budget_id[: 12 if width < 120 else 16] + "…" if narrow else decision.budget_id,
        decision.status.value,
        escaped(decision.reason_code),
        f"{decision.max_candidates}/{decision.max_depth}/{decision.max_steps}/{decision.max_parallelism}",
        shown(decision.gate_decision_id),
    ]
    return cells if narrow else [*cells, escaped(stored.recorded_at)]
