"""Canonical JSON (RFC 8785, JCS) for the values compute-budget hashes.

The hashed payloads hold only ASCII keys, strings of valid Unicode, integers below 2**53 and null, where
RFC 8785 equals ``json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` encoded as
UTF-8. orjson produces those same bytes several times faster; the test suite proves the equality against the
independent `rfc8785` implementation, so no other value kinds may be passed here.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

_SORTED = orjson.OPT_SORT_KEYS


def canonical_json(value: Any) -> bytes:
    """The RFC 8785 bytes of `value` (dicts with ASCII keys, str, int below 2**53, None, lists)."""
    return orjson.dumps(value, option=_SORTED)


def canonical_sha256(value: Any) -> str:
    """Lowercase hex SHA-256 of `canonical_json(value)`."""
    return hashlib.sha256(orjson.dumps(value, option=_SORTED)).hexdigest()


def json_line(value: Any) -> str:
    """One compact JSON line in the value's own key order (for output meant for people and pipes)."""
    return orjson.dumps(value).decode("utf-8")
