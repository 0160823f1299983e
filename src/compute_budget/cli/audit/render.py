"""Audit reports rendered for people (text), programs (JSON) and CI systems (JUnit XML), and the report of an
audit that could not run, in the same three forms."""

from __future__ import annotations

import base64
import json
from xml.etree import ElementTree

from compute_budget.auditor.causes import KIND_ORDER
from compute_budget.auditor.freshness import NOT_CHECKED
from compute_budget.auditor.report import ROW_KINDS, TOOL_NAME, tool_version
from compute_budget.auditor.scan import AuditReport, Finding, FindingKind
from compute_budget.cli.render import escaped, shown

REPORT_FORMATS = ("text", "json", "junit")

MAX_TEXT_FINDINGS_PER_KIND = 50
MAX_ROWS_NAMED = 20  # on the first screen
MAX_ROW_CASES = 100  # JUnit test cases of affected rows; the rest are counted in one more case


def render(report: AuditReport, output_format: str) -> str:
    """The report in `text`, `json` or `junit` form."""
    if output_format == "json":
        return json.dumps(report.to_dict(), ensure_ascii=False)
    if output_format == "junit":
        return render_junit(report)
    return render_text(report)


def _key_name(key: str) -> str:
    """A verifier key as the report names it, ``name+hash``: its key material (base64, which may hold a ``+``)
    left out."""
    return "+".join(key.split("+", 2)[:2])


def _witness_lines(report: AuditReport) -> list[str]:
    """What the witnesses cosigned, how fresh, and the witness policy checked (its quorum in words, its SHA-256)."""
    if not report.witness_keys:
        return []
    names = ", ".join(escaped(_key_name(key)) for key in report.witness_keys)
    lines = [f"  witnessed     through seq {report.witnessed_size or 0} by witness keys ({names})"]
    if report.witness_age is not None:
        lines.append(f"  freshness     {escaped(report.witness_age)}")
    if report.witness_policy is not None:
        policy = report.witness_policy
        optional = ", ".join(escaped(str(name)) for name in policy.get("optional", ()))
        lines.append(f"  policy        quorum {escaped(str(policy['quorum']))} (SHA-256 {policy['sha256']})"
                     + (f"; optional, not counted: {optional}" if optional else ""))
    return lines


def render_text(report: AuditReport) -> str:
    """A summary a person reads at a glance, findings grouped by kind."""
    verdict = "CLEAN" if report.clean else f"{len(report.findings)} FINDING{'S' if len(report.findings) != 1 else ''}"
    mode = f"incremental after seq {report.since.seq}" if report.since and not report.escalated else "full"
    if report.escalated and report.since is not None:
        mode = f"full: the --since checkpoint (seq {report.since.seq}) did not hold, so every row was checked"
    lines = [
        f"compute-budget audit of {escaped(report.database)}: {verdict}",
        *_first_screen(report),
        f"  rows checked  {report.rows_checked} ({mode}, {report.jobs} job{'s' if report.jobs != 1 else ''}) "
        f"in {report.elapsed_seconds:.2f} s, {report.rows_per_second:,.0f} rows/s",
        _head_line(report),
    ]
    if report.look_back is not None:
        lines.append(_look_back_line(report))
    if report.origin is not None and report.root is not None:
        lines.append(f"  tree          {escaped(report.origin)}, root {base64.b64encode(report.root).decode('ascii')}")
    if report.provenance is not None:
        item = report.provenance
        lines.append(
            f"  provenance    salvaged from {escaped(str(item['source_origin']))} through seq {item['through_seq']} "
            f"(root {escaped(str(item['root']))}, chain_hash {escaped(str(item['chain_hash']))})"
        )
    if report.trusted_keys:
        names = ", ".join(escaped(_key_name(key)) for key in report.trusted_keys)
        lines.append(f"  attested      through seq {report.attested_size or 0} by trusted keys ({names})")
    if report.attest_wait is not None:
        lines.append(f"  attest wait   {escaped(report.attest_wait.said())}")
    lines += _witness_lines(report)
    if NOT_CHECKED in report.warnings:  # a publication's audit without --witness-url (spec 10.2)
        lines.append(f"  freshness     {NOT_CHECKED.removeprefix('freshness ')}")
    lines += _checkpoint_lines(report)
    if report.checkpoint is None and report.since is None:
        lines.append("  checkpoint    none given (checkpoint_mismatch not checked)")
    if report.policy_counts:
        lines.append(
            "  policies      " + ", ".join(f"{key} {value}" for key, value in sorted(report.policy_counts.items()))
        )
    if report.status_counts:
        counts = sorted(report.status_counts.items())
        lines.append("  statuses      " + ", ".join(f"{escaped(key)} {value}" for key, value in counts))
    if report.reason_counts:
        counts = sorted(report.reason_counts.items())
        lines.append("  reasons       " + ", ".join(f"{escaped(key)} {value}" for key, value in counts))
    lines.append(f"  ran           {report.started_at} to {report.finished_at} UTC, {TOOL_NAME} {report.tool_version}")
    for kind, count in report.findings_by_kind().items():
        lines.append(f"  {kind} ({count})")
        listed = [finding for finding in report.findings if finding.kind == kind][:MAX_TEXT_FINDINGS_PER_KIND]
        lines.append(f"    what to do: {report.action(FindingKind(kind))}")
        lines.extend(f"    {_where(report, finding)}: {escaped(finding.detail)}" for finding in listed)
        if count > len(listed):
            lines.append(f"    ... and {count - len(listed)} more (use --format json for all)")
    return "\n".join(lines)


def _head_line(report: AuditReport) -> str:
    """The head the audit reached; none when a publication's audit stopped at its checkpoint (spec 11.2)."""
    if not report.head_read:
        return "  head          not read: the audit stopped at the published checkpoint (no tile or entry was read)"
    return f"  head          seq {report.head.seq}, chain_hash {escaped(report.head.chain_hash)}"


def _checkpoint_lines(report: AuditReport) -> list[str]:
    """Whether the checkpoint and the --since checkpoint hold. A publication's checkpoint that did not verify
    holds nothing (the audit stopped there), and the --since one was then not checked."""
    kinds = {finding.kind for finding in report.findings}
    if report.head_read:
        verdict = "DOES NOT HOLD" if FindingKind.CHECKPOINT_MISMATCH in kinds else "holds"
        verdicts = {"checkpoint": verdict, "since": verdict}
    else:
        failed = "DOES NOT VERIFY (bad_signature)" if FindingKind.BAD_SIGNATURE in kinds else "DOES NOT HOLD"
        verdicts = {"checkpoint": failed, "since": "not checked (the audit stopped at the published checkpoint)"}
    return [
        f"  {label:<13} seq {proof.seq}, chain_hash {proof.chain_hash}: {verdicts[label]}"
        for label, proof in (("checkpoint", report.checkpoint), ("since", report.since)) if proof is not None
    ]


def _look_back_line(report: AuditReport) -> str:
    """What the look-back re-checked below the --since checkpoint, and its cost."""
    item = report.look_back
    assert item is not None
    assert report.since is not None
    return (
        f"  look-back     slice {item.slice} of {item.n}: {item.tiles} tile(s), {item.rows:,} rows below seq "
        f"{report.since.seq} re-derived and re-hashed in {item.seconds:.2f} s (the partial last tile every night; "
        f"{item.n} nightly audits in a row re-check every row)"
    )


def _first_screen(report: AuditReport) -> list[str]:
    """Which rows, and what now: the lines an operator reads first on a red night (the first right after the
    verdict is `N rows affected: seq a, b, …`)."""
    if report.clean:
        return []
    if report.publication:
        return _first_screen_of_publication(report)
    rows = report.affected_rows
    if not rows and report.rewritten_between is not None:
        first, last = report.rewritten_between
        return [
            f"0 rows affected: every row re-derives and links, so no row can be named; history was rewritten "
            f"consistently from a row in seq {first}..{last} on (the stored checkpoints below seq {first} still "
            f"hold, the one at {last} does not)",
            f"  what now      keep the evidence; compare the rows {first}..{last} with a backup or a kept copy; "
            f"salvage the rows before seq {first} (`compute-budget copy {escaped(report.database)} NEW --through "
            f"{first - 1}`; docs/incident.md)",
        ]
    beyond = [
        finding.seq for finding in report.findings
        if finding.kind is FindingKind.CHECKPOINT_MISMATCH and finding.seq is not None and finding.seq > report.head.seq
    ]
    if not rows and beyond:
        end, claimed = report.head.seq, max(beyond)
        hidden = any(finding.kind is FindingKind.SCHEMA_TAMPERED for finding in report.findings)
        maybe = " (or hidden from this role: see schema_tampered below)" if hidden else ""
        return [
            f"0 rows affected: history was truncated: the store ends at seq {end}, but a checkpoint names {claimed} "
            f"rows, so rows {end + 1}..{claimed} are gone{maybe}",
            f"  what now      keep the evidence; restore the missing rows from a backup; rows 1..{end} can be "
            f"salvaged to go on (`compute-budget copy {escaped(report.database)} NEW --through {end}`; "
            "docs/incident.md)",
        ]
    if not rows:
        kinds = ", ".join(report.findings_by_kind())
        return [
            f"0 rows affected: no row check failed ({kinds}); each finding below says what to do",
            "  what now      docs/incident.md is the runbook",
        ]
    named = ", ".join(str(seq) for seq in rows[:MAX_ROWS_NAMED])
    more = ", …" if len(rows) > MAX_ROWS_NAMED else ""
    follows = len(report.findings) - sum(finding.kind in ROW_KINDS for finding in report.findings)
    consequence = f"; {follows} other finding(s) follow from them or stand beside them" if follows else ""
    since = ""
    if report.escalated and report.since is not None:
        since = f"; changed since the --since checkpoint (seq {report.since.seq}) was taken, which no longer holds"
    return [
        f"{len(rows)} rows affected: seq {named}{more}{since}{consequence}",
        f"  what now      keep the evidence (copy the file and the reports); `compute-budget show` each row; to go "
        f"on from the rows before seq {rows[0]}, salvage them into a new log with `compute-budget copy "
        f"{escaped(report.database)} NEW --through {rows[0] - 1}` (docs/incident.md)",
    ]


def _first_screen_of_publication(report: AuditReport) -> list[str]:
    """Which entries, and what now, for the reader of a publication (spec 11.4): no command that needs the
    publisher's database, which the reader does not have."""
    rows = report.affected_rows
    what_now = ("  what now      keep a copy of the publication's files (checkpoint, tile/) and this report as "
                "evidence; tell the publisher {}; audit again after they republish (docs/incident.md, \"Auditing a "
                "publication\")")
    if not rows:
        kinds = ", ".join(report.findings_by_kind())
        return [f"0 rows affected: no entry can be named ({kinds}); each finding below says what it means",
                what_now.format("what this report found")]
    named = ", ".join(str(seq) for seq in rows[:MAX_ROWS_NAMED])
    more = ", …" if len(rows) > MAX_ROWS_NAMED else ""
    follows = len(report.findings) - sum(report.is_row_finding(finding) for finding in report.findings)
    consequence = f"; {follows} other finding(s) follow from them or stand beside them" if follows else ""
    return [f"{len(rows)} rows affected: seq {named}{more}{consequence}",
            what_now.format(f"which entries differ (from seq {rows[0]})")]


def _where(report: AuditReport, finding: Finding) -> str:
    if finding.seq is None and finding.budget_id is None:
        if finding.kind is FindingKind.SCHEMA_TAMPERED:
            return "the schema"
        return "the publication" if report.publication else "the store"
    seq = "seq ?" if finding.seq is None else f"seq {finding.seq}"
    return f"{seq} budget_id {escaped(shown(finding.budget_id)) if finding.budget_id else '?'}"


def _not_run(report: AuditReport) -> dict[FindingKind, str]:
    """The checks this audit did not carry out, and why (JUnit marks them skipped)."""
    if report.checkpoint is None and report.since is None:
        return {FindingKind.CHECKPOINT_MISMATCH: "no checkpoint was given (--checkpoint or --since)"}
    if NOT_CHECKED in report.warnings:
        return {FindingKind.UNPUBLISHED_ROWS: NOT_CHECKED}
    return {}


def render_junit(report: AuditReport) -> str:
    """JUnit XML: one test case per kind of check, failing with every finding of that kind, skipped when the
    check did not run; before them, one failing test case per affected row (`compute_budget.audit.rows`, named
    `row <seq>`; the first 100, then one counting the rest), so a CI page names the rows themselves first."""
    skipped = _not_run(report)
    rows = report.affected_rows
    row_cases = min(len(rows), MAX_ROW_CASES) + (len(rows) > MAX_ROW_CASES)
    suite = _suite(
        tests=len(FindingKind) + row_cases,
        failures=len(report.findings_by_kind()) + row_cases,
        errors=0,
        skipped=len(skipped),
        seconds=report.elapsed_seconds,
        timestamp=report.started_at,
    )
    _properties(
        suite,
        [
            ("database", report.database),
            ("rows_checked", str(report.rows_checked)),
            *([("head_seq", str(report.head.seq)), ("head_chain_hash", report.head.chain_hash)]
              if report.head_read else [("head", "not read: the audit stopped at the published checkpoint")]),
            ("mode", "incremental" if report.since else "full"),
            *[
                (f"{label}_{part}", value)
                for label, proof in (("checkpoint", report.checkpoint), ("since", report.since))
                if proof is not None
                for part, value in (("seq", str(proof.seq)), ("chain_hash", proof.chain_hash))
            ],
            ("policy_versions", ", ".join(f"{key} {value}" for key, value in sorted(report.policy_counts.items()))),
            ("started_at", report.started_at),
            ("finished_at", report.finished_at),
            ("tool", f"{TOOL_NAME} {report.tool_version}"),
        ],
    )
    _row_cases(suite, report, rows)
    _kind_cases(suite, report, skipped)
    return _document(suite)


def _row_cases(suite: ElementTree.Element, report: AuditReport, rows: tuple[int, ...]) -> None:
    """One failing test case per affected row (the first `MAX_ROW_CASES`), then one counting the rest."""
    for seq in rows[:MAX_ROW_CASES]:
        case = ElementTree.SubElement(suite, "testcase", classname="compute_budget.audit.rows", name=f"row {seq}")
        found = [finding for finding in report.findings if finding.seq == seq and report.is_row_finding(finding)]
        said = [f"{finding.kind.value}: {escaped(finding.detail)}" for finding in found]
        failure = ElementTree.SubElement(
            case, "failure", type=found[0].kind.value, message=f"row seq {seq}: " + "; ".join(said)
        )
        failure.text = "\n".join(
            f"{_where(report, finding)}: {line}" for finding, line in zip(found, said, strict=True)
        )
    if len(rows) > MAX_ROW_CASES:
        case = ElementTree.SubElement(
            suite, "testcase", classname="compute_budget.audit.rows", name=f"{len(rows) - MAX_ROW_CASES} more rows"
        )
        ElementTree.SubElement(case, "failure", type="affected_rows",
                               message=f"rows from seq {rows[MAX_ROW_CASES]} on (use --format json for all)")


def _kind_cases(suite: ElementTree.Element, report: AuditReport, skipped: dict[FindingKind, str]) -> None:
    """One test case per kind of check, causes first: failing with its findings, skipped when the check did not
    run."""
    for kind in KIND_ORDER:
        case = ElementTree.SubElement(suite, "testcase", classname="compute_budget.audit", name=kind.value)
        found = [finding for finding in report.findings if finding.kind is kind]
        if kind in skipped and not found:
            ElementTree.SubElement(case, "skipped", message=skipped[kind])
        elif found:
            failure = ElementTree.SubElement(
                case,
                "failure",
                type=kind.value,
                message=f"{len(found)} finding(s); what to do: {report.action(kind)}; first: "
                f"{_where(report, found[0])}: {escaped(found[0].detail)}",
            )
            failure.text = "\n".join(f"{_where(report, finding)}: {escaped(finding.detail)}" for finding in found)


def render_error(output_format: str, reason: str, *, database: str, started_at: str, finished_at: str) -> str:
    """The report of an audit that could not run (exit 2), so a nightly job's report file says why instead of
    keeping last night's verdict: JSON with ``clean: false`` and ``error``; JUnit with one test case in error;
    text with the reason."""
    version = tool_version()
    if output_format == "json":
        document = {
            "clean": False,
            "error": reason,
            "rows_checked": 0,
            "findings": [],
            "checkpoint_note": None,
            "database": database,
            "tool": {"name": TOOL_NAME, "version": version},
            "started_at": started_at,
            "finished_at": finished_at,
        }
        return json.dumps(document, ensure_ascii=False)
    if output_format == "junit":
        suite = _suite(tests=1, failures=0, errors=1, skipped=0, seconds=0.0, timestamp=started_at)
        _properties(
            suite,
            [("database", database), ("started_at", started_at), ("finished_at", finished_at),
             ("tool", f"{TOOL_NAME} {version}")],
        )
        case = ElementTree.SubElement(suite, "testcase", classname="compute_budget.audit", name="audit")
        error = ElementTree.SubElement(case, "error", type="audit_could_not_run", message=escaped(reason))
        error.text = escaped(f"the audit of {database} could not run: {reason}")
        return _document(suite)
    return "\n".join(
        [
            f"compute-budget audit of {database}: COULD NOT RUN",
            f"  error         {reason}",
            f"  ran           {started_at} to {finished_at} UTC, {TOOL_NAME} {version}",
        ]
    )


def _suite(
    *, tests: int, failures: int, errors: int, skipped: int, seconds: float, timestamp: str
) -> ElementTree.Element:
    return ElementTree.Element(
        "testsuite",
        name="compute-budget audit",
        tests=str(tests),
        failures=str(failures),
        errors=str(errors),
        skipped=str(skipped),
        time=f"{seconds:.3f}",
        timestamp=timestamp.removesuffix("Z"),  # JUnit's timestamp has no zone; the properties say UTC
    )


def _properties(suite: ElementTree.Element, pairs: list[tuple[str, str]]) -> None:
    properties = ElementTree.SubElement(suite, "properties")
    for name, value in pairs:
        ElementTree.SubElement(properties, "property", name=name, value=escaped(value))


def _document(suite: ElementTree.Element) -> str:
    testsuites = ElementTree.Element("testsuites")
    testsuites.append(suite)
    ElementTree.indent(testsuites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(testsuites, encoding="unicode")
