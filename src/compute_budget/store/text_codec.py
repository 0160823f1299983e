"""Stored text as read on each backend: PostgreSQL's encoding of NUL, and SQLite text that is not UTF-8.

PostgreSQL stores what SQLite stores: its text type cannot hold NUL (U+0000), a gate's copied ids can.

On PostgreSQL only, the three columns copied from a gate (`gate_decision_id`, `gate_policy_version`,
`gate_input_digest`) hold a value with a NUL, or one that starts with the marker U+FFFF, as the marker followed
by the lowercase hex of its UTF-8 bytes; every other value is stored as it is, so stores written before this
encoding read unchanged. Reads decode before anything else sees a row: the chain, the tree and the audit work on
the logical values, identical on both backends. (Every other text column is ours or JSON, where a NUL is always
escaped as `\\u0000`.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from compute_budget.core.row import ROW_COLUMNS

MARK = "\uffff"
ENCODED_COLUMNS: tuple[int, ...] = tuple(
    ROW_COLUMNS.index(name) for name in ("gate_decision_id", "gate_policy_version", "gate_input_digest")
)


def needs_encoding(value: object) -> bool:
    """True for a text value PostgreSQL could not hold as it is (or one that looks encoded)."""
    return isinstance(value, str) and ("\x00" in value or value.startswith(MARK))


def encode_text(value: str) -> str:
    """A copied id as PostgreSQL stores it."""
    return MARK + value.encode("utf-8").hex() if needs_encoding(value) else value


def decode_text(value: Any) -> Any:
    """A stored copied id as its logical value (a value that is not a well-formed encoding stays as stored)."""
    if isinstance(value, str) and value.startswith(MARK):
        try:
            return bytes.fromhex(value[1:]).decode("utf-8")
        except ValueError:
            return value
    return value


def encode_rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows (in `ROW_COLUMNS` order) as PostgreSQL stores them; the common row is returned untouched."""
    return [_encoded(row) if any(needs_encoding(row[index]) for index in ENCODED_COLUMNS) else row for row in rows]


def decode_row(row: Sequence[Any]) -> tuple[Any, ...]:
    """A stored row (in `ROW_COLUMNS` order) with its copied ids decoded."""
    values = tuple(row)
    if not any(isinstance(values[index], str) and values[index].startswith(MARK) for index in ENCODED_COLUMNS):
        return values
    return tuple(decode_text(value) if index in ENCODED_COLUMNS else value for index, value in enumerate(values))


def _encoded(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(encode_text(value) if index in ENCODED_COLUMNS else value for index, value in enumerate(row))
