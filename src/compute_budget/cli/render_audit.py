"""Audit reports rendered for people (text), programs (JSON) and CI systems (JUnit XML)."""

from __future__ import annotations

import base64
import json
from xml.etree import ElementTree

from compute_budget.auditor.scan import AuditReport, Finding, FindingKind
from compute_budget.cli.render import shown

MAX_TEXT_FINDINGS_PER_KIND = 50


def render(report: AuditReport, output_format: str) -> str:
    """The report in `text`, `json` or `junit` form."""
    if output_format == "json":
        return json.dumps(report.to_dict(), ensure_ascii=False)
    if output_format == "junit":
        return render_junit(report)
    return render_text(report)


def render_text(report: AuditReport) -> str:
    """A summary a person reads at a glance, findings grouped by kind."""
    verdict = "CLEAN" if report.clean else f"{len(report.findings)} FINDING{'S' if len(report.findings) != 1 else ''}"
    mode = f"incremental after seq {report.since.seq}" if report.since else "full"
    lines = [
        f"compute-budget audit of {report.database}: {verdict}",
        f"  rows checked  {report.rows_checked} ({mode}, {report.jobs} job{'s' if report.jobs != 1 else ''}) "
        f"in {report.elapsed_seconds:.2f} s, {report.rows_per_second:,.0f} rows/s",
        f"  head          seq {report.head.seq}, chain_hash {report.head.chain_hash}",
    ]
    if report.origin is not None and report.root is not None:
        lines.append(f"  tree          {report.origin}, root {base64.b64encode(report.root).decode('ascii')}")
    if report.trusted_keys:
        names = ", ".join(key.rsplit("+", 1)[0] for key in report.trusted_keys)
        lines.append(f"  attested      through seq {report.attested_size} by trusted keys ({names})")
    if report.checkpoint is not None:
        held = not any(finding.kind is FindingKind.CHECKPOINT_MISMATCH for finding in report.findings)
        lines.append(f"  checkpoint    seq {report.checkpoint.seq}: {'holds' if held else 'DOES NOT HOLD'}")
    if report.status_counts:
        lines.append(
            "  statuses      " + ", ".join(f"{key} {value}" for key, value in sorted(report.status_counts.items()))
        )
    if report.reason_counts:
        lines.append(
            "  reasons       " + ", ".join(f"{key} {value}" for key, value in sorted(report.reason_counts.items()))
        )
    for kind, count in report.findings_by_kind().items():
        lines.append(f"  {kind} ({count})")
        shown = [finding for finding in report.findings if finding.kind == kind][:MAX_TEXT_FINDINGS_PER_KIND]
        lines.extend(f"    {_where(finding)}: {finding.detail}" for finding in shown)
        if count > len(shown):
            lines.append(f"    ... and {count - len(shown)} more (use --format json for all)")
    return "\n".join(lines)


def _where(finding: Finding) -> str:
    seq = "seq ?" if finding.seq is None else f"seq {finding.seq}"
    return f"{seq} budget_id {shown(finding.budget_id) if finding.budget_id else '?'}"


def render_junit(report: AuditReport) -> str:
    """JUnit XML: one test case per kind of check, failing with every finding of that kind."""
    suite = ElementTree.Element(
        "testsuite",
        name="compute-budget audit",
        tests=str(len(FindingKind)),
        failures=str(len(report.findings_by_kind())),
        errors="0",
        time=f"{report.elapsed_seconds:.3f}",
    )
    properties = ElementTree.SubElement(suite, "properties")
    for name, value in (
        ("database", report.database),
        ("rows_checked", str(report.rows_checked)),
        ("head_seq", str(report.head.seq)),
        ("head_chain_hash", report.head.chain_hash),
    ):
        ElementTree.SubElement(properties, "property", name=name, value=value)
    for kind in FindingKind:
        case = ElementTree.SubElement(suite, "testcase", classname="compute_budget.auditor.scan", name=kind.value)
        found = [finding for finding in report.findings if finding.kind is kind]
        if found:
            failure = ElementTree.SubElement(
                case, "failure", type=kind.value, message=f"{len(found)} row(s): {_where(found[0])}: {found[0].detail}"
            )
            failure.text = "\n".join(f"{_where(finding)}: {finding.detail}" for finding in found)
    testsuites = ElementTree.Element("testsuites")
    testsuites.append(suite)
    ElementTree.indent(testsuites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(testsuites, encoding="unicode")
