"""The one reader of the nightly audit report (the JSON `--report` the workbench is given): the banner
(`verdicts`) and the checkpoints page (`checkpoints`) read it here, with one size limit."""

from __future__ import annotations

import json
from typing import Any

# Larger than any audit report the auditor writes: a file over it is not one (and is not read whole).
MAX_AUDIT_REPORT_BYTES = 64 << 20


def read_report(path: str) -> dict[str, Any]:
    """The report at `path` as a JSON object; raises `OSError`, or `ValueError`/`RecursionError` saying why the file
    is not an audit report (too large, not JSON, not an object)."""
    with open(path, "rb") as handle:
        raw = handle.read(MAX_AUDIT_REPORT_BYTES + 1)
    if len(raw) > MAX_AUDIT_REPORT_BYTES:
        raise ValueError("it is larger than any audit report")
    report = json.loads(raw)
    if not isinstance(report, dict):
        raise ValueError("it is not a JSON object")
    return report


def mismatched_sizes(path: str | None) -> frozenset[int]:
    """The tree sizes the report's checkpoint_mismatch findings name (none without a readable report)."""
    if path is None:
        return frozenset()
    try:
        found = read_report(path).get("findings", [])
    except (OSError, ValueError, RecursionError):
        return frozenset()
    findings: list[Any] = found if isinstance(found, list) else []
    return frozenset(
        item["seq"] for item in findings if isinstance(item, dict) and item.get("kind") == "checkpoint_mismatch"
        and type(item.get("seq")) is int
    )
