"""`compute-budget audit`'s report files when the audit has no verdict: replaced by an error report saying why (a
usage error, an audit that could not run or was stopped), or removed when even that cannot be written."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from compute_budget.cli.io import check_keys_apart, check_writable, write_atomically
from compute_budget.cli.program import CannotRun, Terminated, say

if TYPE_CHECKING:
    from compute_budget.auditor.report import AuditReport


def option_values(args: list[str], name: str) -> list[str]:
    """Every value given to option `name` in raw `args` (`--name VALUE` or `--name=VALUE`), read leniently."""
    values = []
    for index, arg in enumerate(args):
        if arg == "--":
            break
        if arg == name and index + 1 < len(args):
            values.append(args[index + 1])
        elif arg.startswith(name + "="):
            values.append(arg[len(name) + 1 :])
    return values


def reports_for_usage_error(args: list[str], error: click.UsageError) -> None:
    """Replace each report file the raw `args` name with an error report, under the same guards as a run that
    parsed (never the database, an input or a key file)."""
    from compute_budget.auditor.report import utc_now
    from compute_budget.cli.audit.render import REPORT_FORMATS

    formats = [value for value in option_values(args, "--format") if value in REPORT_FORMATS]
    targets = [(formats[-1] if formats else "text", path) for path in option_values(args, "--output")[-1:]]
    for value in option_values(args, "--report"):
        report_format, colon, path = value.partition(":")
        if colon and report_format in REPORT_FORMATS and path:
            targets.append((report_format, path))
    if not targets:
        return
    dbs = option_values(args, "--db")
    db = dbs[-1] if dbs else None
    inputs = [("--checkpoint", path) for path in option_values(args, "--checkpoint")]
    inputs += [("--since", path) for path in option_values(args, "--since")]
    inputs += [("--save-checkpoint", path) for path in option_values(args, "--save-checkpoint")]
    inputs += [(option, path + ".head") for option, path in list(inputs) if option in ("--since", "--save-checkpoint")]
    key_files = [("--cosign", path) for path in option_values(args, "--cosign")]
    key_files += [("--trusted-key", item) for item in option_values(args, "--trusted-key") if os.path.exists(item)]
    writable = []
    for target_format, path in targets:
        try:
            check_writable("--report", path, db=db, keep=inputs)
            check_keys_apart(key_files, [("--report", path)])
        except (click.ClickException, OSError):
            continue
        writable.append((target_format, path))
    reason = f"the audit could not run: its command line is wrong: {error.format_message()}"
    write_error_reports(writable, None, db, utc_now(), reason=reason)


def distinct_outputs(paths: list[str]) -> None:
    """No two outputs name the same file (a usage error)."""
    seen: set[str] = set()
    for path in paths:
        real = os.path.realpath(path)
        if real in seen:
            raise click.BadParameter(f"{path} is named twice among the reports and the checkpoint to save")
        seen.add(real)


def write_error_reports(
    targets: list[tuple[str, str]],
    error: BaseException | None,
    db: str | None,
    started_at: str,
    *,
    reason: str | None = None,
) -> dict[str, str]:
    """Replace every report file asked for with the report of an audit that could not run, saying why (`reason`,
    else the error's own words). A report that cannot be replaced is removed, with one warning; returns those, each
    with what was said about it."""
    if not targets:
        return {}
    from compute_budget.auditor.report import utc_now
    from compute_budget.cli.audit.render import render_error
    from compute_budget.errors import ComputeBudgetError
    from compute_budget.store.engine import locate

    if reason is None:
        reason = error_reason(error)
    try:
        database = locate(db).display
    except ComputeBudgetError:
        database = db or "(no database)"
    finished_at = utc_now()
    unwritten: dict[str, str] = {}
    for target_format, path in targets:
        text = render_error(target_format, reason, database=database, started_at=started_at, finished_at=finished_at)
        try:
            write_atomically(path, text + "\n")
        except ComputeBudgetError as failed:  # that report cannot be written either: say so, keep the first error
            unwritten[path] = remove_unwritten(path, failed)
            say(f"warning: {unwritten[path]}")
    return unwritten


class ReportsNotWritten(CannotRun):
    """The audit ran, but report files asked for could not be written (and were removed): exit 2, naming them."""


def remove_unwritten(path: str, error: Exception) -> str:
    """Remove the report at `path` that could not be replaced (removing needs no free space), so that an earlier
    run's verdict does not stand for this one; returns what to say about it."""
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isfile(path)):
        return f"{error}; left in place (not a regular file): it may hold an earlier report"
    if not os.path.lexists(path):
        return f"{error} (no earlier report was there)"
    try:
        os.unlink(path)
    except OSError as removing:
        why = removing.strerror or removing
        return f"{error}; it could not be removed either ({why}): it may hold an earlier report"
    return f"{error}; removed it, so that no earlier report stands for this run"


def not_written(failed: dict[str, str], report: AuditReport) -> str:
    """The one error line of an audit whose reports could not all be written (each was warned about once)."""
    verdict = "CLEAN" if report.clean else f"{len(report.findings)} finding(s)"
    return (
        f"the audit finished ({verdict}), but {', '.join(failed)} could not be written (said above): "
        "no report there stands for this run; fix that and run the audit again"
    )


def error_reason(error: BaseException | None) -> str:
    """Why an audit could not run, in one line."""
    from compute_budget.errors import ComputeBudgetError

    if isinstance(error, KeyboardInterrupt):
        how = "terminated (SIGTERM)" if isinstance(error, Terminated) else "interrupted (Ctrl-C)"
        return f"the audit was {how} before it finished"
    if isinstance(error, click.ClickException):
        return error.format_message()
    if isinstance(error, OSError):
        return f"{error.strerror or error}{f': {error.filename}' if error.filename else ''}"
    if isinstance(error, ComputeBudgetError):
        return str(error)
    return f"unexpected {type(error).__name__}: {error}"
