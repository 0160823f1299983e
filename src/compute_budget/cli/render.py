"""Rendering for people: a stored decision described, and tables of decisions (Rich on a terminal)."""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

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


def print_table(
    rows: Iterable[StoredDecision], *, filtered: bool = False, last_seq: int = 0, console: Console | None = None
) -> int:
    """Print decisions as a table on stdout, a chunk of rows at a time; returns how many rows it printed.

    On a terminal the columns are fitted to its width: budget_ids are cut to 16 hex digits (enough for `show`,
    which takes a unique prefix) and the text columns fold, down to a floor each; when even that is too wide,
    whole columns are left out, last first (recorded_at, then budget_id, the gate, the limits), so no column is
    ever squeezed to nothing. Piped output always has everything. Each chunk is laid out with the same columns;
    `last_seq`, the highest seq listed (or more), sizes the seq column.
    """
    # Rich is imported here, not with the module: every other command (the nightly audit among them) would pay
    # its import, about 50 ms, for nothing.
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            # Rich's own handling exits 1; a reader that went away (`| head`) is exit 0 for every command, which the
            # group does for a BrokenPipeError.
            raise BrokenPipeError

    if console is None:
        console = PipeConsole() if sys.stdout.isatty() else PipeConsole(width=240, no_color=True)
    on_terminal = console.is_terminal
    shown_columns = _fit_columns(len(str(last_seq)), console.width) if on_terminal else list(COLUMNS)
    positions = [COLUMNS.index(name) for name in shown_columns]
    widths: list[int] | None = None
    count = 0
    source = iter(rows)
    while chunk := list(itertools.islice(source, TABLE_CHUNK_ROWS)):
        cells = []
        for stored in chunk:
            row = _row_cells(stored)
            if on_terminal:
                row[1] = row[1][:16] + "…"
            cells.append([row[index] for index in positions])
        if widths is None:  # the first chunk sets the widths of the whole listing, so the columns line up
            widths = _widths(shown_columns, cells, len(str(last_seq)), console.width if on_terminal else None)
            if not on_terminal:  # piped output is complete: the line is as wide as the columns need
                console.width = max(console.width, sum(widths) + _SEPARATOR * (len(widths) - 1))
        table = Table(show_edge=False, pad_edge=False, show_header=count == 0)
        for name, width in zip(shown_columns, widths, strict=True):
            folds = name in COLUMN_FLOORS
            table.add_column(
                COLUMN_HEADERS[name],
                justify="right" if name in ("seq", "limits") else "left",
                overflow="fold" if folds else "ellipsis",
                no_wrap=not folds,
                width=width,
            )
        for row in cells:
            # Text, not markup: a stored "[red]" or "[link=…]" is shown as typed, never interpreted by Rich.
            table.add_row(*(Text(cell) for cell in row))
        console.print(table)
        count += len(chunk)
    if not count:
        console.print("no stored decision matches" if filtered else "no decisions stored")
    return count


COLUMNS = ("seq", "budget_id", "status", "reason", "limits", "gate", "recorded_at")
COLUMN_HEADERS = {
    "seq": "seq", "budget_id": "budget_id", "status": "status", "reason": "reason", "limits": "limits c/d/s/p",
    "gate": "gate", "recorded_at": "recorded_at",
}
# The narrowest a folding column gets; the others keep their width (seq its digits, a cut budget_id 17, a time 27).
COLUMN_FLOORS = {"status": 8, "reason": 10, "limits": 9, "gate": 10}
# The widest a folding column gets: every status and v1 reason fits unfolded when there is room.
COLUMN_CAPS = {"status": 40, "reason": 60, "limits": 40, "gate": 120}
_DROP_ORDER = ("recorded_at", "budget_id", "gate", "limits", "reason")
_SEPARATOR = 3  # " │ " between two columns


def _widths(columns: list[str], cells: list[list[str]], seq_digits: int, room: int | None) -> list[int]:
    """Each column's width for the whole listing: what the first chunk needs (a folding column `COLUMN_CAPS` at
    most, so a hostile 10,000-character value cannot squeeze the others), then, on a terminal `room` wide, the
    folding columns narrowed toward their floors until the row fits."""
    widths = []
    for index, name in enumerate(columns):
        header = len(COLUMN_HEADERS[name]) if name not in COLUMN_FLOORS else 0
        natural = max(header, *(len(row[index]) for row in cells))
        if name == "seq":
            natural = max(natural, seq_digits, 3)
        elif name in COLUMN_FLOORS:
            natural = max(COLUMN_FLOORS[name], min(natural, COLUMN_CAPS[name]))
        widths.append(natural)
    if room is not None:
        excess = sum(widths) + _SEPARATOR * (len(widths) - 1) - room
        while excess > 0:
            wide = [
                index for index, name in enumerate(columns)
                if name in COLUMN_FLOORS and widths[index] > COLUMN_FLOORS[name]
            ]
            if not wide:
                break
            widest = max(wide, key=lambda index: widths[index] - COLUMN_FLOORS[columns[index]])
            widths[widest] -= 1
            excess -= 1
    return widths


def _fit_columns(seq_digits: int, width: int) -> list[str]:
    """The columns a terminal `width` wide shows: all of them when their floors fit, else without whole columns,
    last first."""
    shown = list(COLUMNS)
    floors = {**COLUMN_FLOORS, "seq": max(3, seq_digits), "budget_id": 17, "recorded_at": 27}

    def needed(columns: list[str]) -> int:
        return sum(floors[name] for name in columns) + _SEPARATOR * (len(columns) - 1)

    for name in _DROP_ORDER:
        if needed(shown) <= width:
            break
        shown.remove(name)
    return shown


def _row_cells(stored: StoredDecision) -> list[str]:
    decision = stored.decision
    return [
        str(stored.seq),
        decision.budget_id,
        decision.status.value,
        escaped(decision.reason_code),
        f"{decision.max_candidates}/{decision.max_depth}/{decision.max_steps}/{decision.max_parallelism}",
        shown(decision.gate_decision_id),
        escaped(stored.recorded_at),
    ]
