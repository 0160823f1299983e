"""The strict text the log's formats share: canonical base64 only, and values quoted short for a one-line message."""

from __future__ import annotations

import base64


def shown(value: str, limit: int = 60) -> str:
    """`value` quoted for a one-line message, cut to `limit` characters."""
    return repr(value if len(value) <= limit else value[:limit] + "…")


def strict_b64decode(text: str) -> bytes | None:
    """The bytes of canonical standard base64 (padded, no stray bits or characters), else None."""
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        return None
    return raw if base64.b64encode(raw).decode("ascii") == text else None
