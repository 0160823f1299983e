"""`compute-budget audit`: the replay audit and its report files (a lazy command)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import click

from compute_budget.cli.audit.keep import attested, with_head, witnessed_to_keep, write_kept
from compute_budget.cli.audit.reports import (
    ReportsNotWritten,
    distinct_outputs,
    not_written,
    remove_unwritten,
    reports_for_usage_error,
    write_error_reports,
)
from compute_budget.cli.group import cli, db_option
from compute_budget.cli.io import check_keys_apart, check_writable, write_atomically
from compute_budget.cli.program import say
from compute_budget.cli.progress import audit_progress
from compute_budget.cli.trust import TrustOptions, trust_options, trusted_key_option
from compute_budget.errors import clip

if TYPE_CHECKING:
    from compute_budget.auditor.head_note import HeadNote
    from compute_budget.auditor.report import AuditReport
    from compute_budget.auditor.request import AuditRequest
    from compute_budget.auditor.source import AuditSource
    from compute_budget.core.log.checkpoint import Checkpoint
    from compute_budget.core.log.note import SignerKey, VerifierKey
    from compute_budget.core.log.witness_policy import TlogPolicy


def _report_spec(value: str) -> tuple[str, str]:
    """FORMAT:FILE of `audit --report`."""
    from compute_budget.cli.audit.render import REPORT_FORMATS

    output_format, colon, path = value.partition(":")
    if not colon or output_format not in REPORT_FORMATS or not path:
        raise click.BadParameter(
            f"{clip(value, 80)!r} is not FORMAT:FILE with FORMAT one of {', '.join(REPORT_FORMATS)} "
            "(for example junit:audit.xml)",
            param_hint="--report",
        )
    return output_format, path


def _jobs_option(_ctx: click.Context, param: click.Parameter, value: object) -> int | Literal["auto"]:
    """``--jobs``: ``auto`` or a whole number from 1 to 64."""
    text = str(value).strip()
    if text.lower() == "auto":
        return "auto"
    if text.isdecimal() and 1 <= int(text) <= 64:
        return int(text)
    raise click.BadParameter(f"{text!r} is neither 'auto' nor a whole number from 1 to 64", param=param)


class AuditCommand(click.Command):
    """`audit`, whose report files are replaced by an error report even when its arguments cannot be parsed: a
    nightly job whose command line broke must not leave last night's CLEAN in place (README, exit 2)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Click's, writing the error reports of a usage error before raising it."""
        try:
            return super().parse_args(ctx, list(args))
        except click.UsageError as error:
            try:
                reports_for_usage_error(list(args), error)
            except Exception as failed:  # the usage error is what to say; an unusable --db must not replace it
                say(f"warning: no report file replaced: {clip(str(failed), 200)}")
            raise


@cli.command("audit", cls=AuditCommand)
@db_option
@click.option(
    "--tiles", "tiles", metavar="LOCATION",
    help="Audit a published log (a folder, or an http(s):// prefix) instead of a database: no --db; needs --origin "
    "and --trusted-key.",
)
@click.option(
    "--fetch-timeout", "fetch_timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True,
    metavar="SECONDS", help="With --tiles over HTTP: the time one request may take (retried at most 3 times).",
)
@click.option(
    "--checkpoint", "checkpoint_path", metavar="FILE", help="Prove the stored chain still extends this checkpoint."
)
@click.option(
    "--since",
    "since_path",
    metavar="FILE",
    help="Incremental: prove this checkpoint holds, then check only the rows after it. With --witness-key, the "
    "FILE.head beside it (written by --save-checkpoint) is required.",
)
@click.option(
    "--look-back",
    "look_back",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    metavar="N",
    help="With --since: also re-check the N-th of the rows below the checkpoint due today (by UTC day number), "
    "and the last partial tile of 256; N nightly audits in a row re-check every row. 0: off.",
)
@click.option(
    "--save-checkpoint", "save_path", metavar="FILE",
    help="Write the new head here, only when the audit is clean; with a trusted key also FILE.head, the head this "
    "audit checked and when. With --witness-key: the newest checkpoint the witnesses cosigned (needs --trusted-key).",
)
@click.option(
    "--format", "output_format", type=click.Choice(["text", "json", "junit"]), default="text", show_default=True
)
@click.option("--output", "output_path", metavar="FILE", help="Write the report to FILE instead of stdout.")
@click.option(
    "--report",
    "reports",
    metavar="FORMAT:FILE",
    multiple=True,
    help="Also write the report as FORMAT (text, json, junit) to FILE; repeatable.",
)
@click.option(
    "--jobs",
    callback=_jobs_option,
    default="auto",
    show_default=True,
    metavar="N|auto",
    help="Processes to split the rows across (1 to 64); auto: one per CPU once the store is big enough to pay "
    "for processes, else 1.",
)
@trusted_key_option(
    "A verifier key (name+hash+key) or a file holding one, whose signatures vouch for the rows; repeatable."
)
@click.option(
    "--all-signatures", is_flag=True, help="Verify every stored checkpoint signed by a trusted key, not the newest."
)
@click.option(
    "--cosign",
    "cosign_path",
    metavar="FILE",
    help="After a clean audit, sign the checkpoint --save-checkpoint writes with this note key (type 0x01: the "
    "auditor attests re-derivation; cosignatures come from witnesses). Needs --trusted-key, and is never one.",
)
@click.option(
    "--origin",
    "expected_origin",
    metavar="NAME",
    help="Require the store to be this log (its origin): another store put in its place is a finding.",
)
@trust_options
@click.option(
    "--max-witness-age", "max_witness_age", type=click.IntRange(min=0), default=86400, show_default=True,
    metavar="SECONDS", help="Rows after a checkpoint the witnesses cosigned longer ago than this are unwitnessed_rows.",
)
@click.option(
    "--attest-wait", "attest_wait", type=click.FloatRange(min=0, max=86400), default=5.0, show_default=True,
    envvar="COMPUTE_BUDGET_ATTEST_WAIT", show_envvar=True, metavar="SECONDS",
    help="Rows above the newest checkpoint a trusted key signed wait this long for a covering one, which counts once "
    "the rows up to it check and give its root; set it to at least the writers' interval plus 2 s. A publication "
    "(--tiles) has nothing to wait for.",
)
@click.option(
    "--witness-url", "witness_urls", metavar="URL=KEY", multiple=True,
    help="Before the audit, fetch this compute-budget witness's latest checkpoint of the log; the store must extend "
    "it. Unreachable, or a stale or unverifiable answer: exit 2. Repeatable.",
)
def audit_command(**given: Any) -> None:
    """Replay-audit the store read-only: exit 0 clean, 1 findings, 2 cannot run.

    Every report file asked for (--output, --report) is written; when the audit cannot run, each is replaced by
    a report saying why (JUnit: one test case in error; JSON: clean false and an error).
    """
    from compute_budget.auditor.report import utc_now

    line = _CommandLine(**given)
    started_at = utc_now()
    writable: list[tuple[str, str]] = []
    try:
        _check_outputs(line, writable)
        # Until this audit has a verdict, every report says it has none: a run killed outright (SIGKILL, the OOM
        # killer) must not leave last night's CLEAN in place. A report that cannot be replaced (a full disk) was
        # removed instead: it is said once and not tried again.
        unwritten = write_error_reports(
            writable, None, line.tiles or line.db, started_at,
            reason=f"the audit started at {started_at} and has not finished: if this stays, it was killed",
        )
        writable[:] = [target for target in writable if target[1] not in unwritten]
        _audit_and_report(line, writable, unwritten)
    except (click.exceptions.Exit, ReportsNotWritten):
        raise  # a result (exit 0 or 1), its reports written; or reports removed, the others holding the result
    except KeyboardInterrupt as error:  # Ctrl-C, or SIGTERM (a cron timeout): no verdict, so none may survive
        write_error_reports(writable, error, line.tiles or line.db, started_at)
        raise
    except Exception as error:  # the audit cannot run (exit 2): every report file says why
        write_error_reports(writable, error, line.tiles or line.db, started_at)
        raise


@dataclass(frozen=True, slots=True)
class _CommandLine:
    """`audit`'s options as Click parsed them (its parameter names), read once."""

    db: str | None
    tiles: str | None
    fetch_timeout: float
    checkpoint_path: str | None
    since_path: str | None
    save_path: str | None
    output_format: str
    output_path: str | None
    reports: tuple[str, ...]
    jobs: int | Literal["auto"]
    trust: TrustOptions
    all_signatures: bool
    cosign_path: str | None
    expected_origin: str | None
    max_witness_age: int
    witness_urls: tuple[str, ...]
    look_back: int
    attest_wait: float

    def targets(self) -> list[tuple[str, str, str]]:
        """Every report file asked for: (option, format, path)."""
        outputs = [("--output", self.output_format, self.output_path)] if self.output_path else []
        return outputs + [("--report", *_report_spec(value)) for value in self.reports]

    def inputs(self) -> list[tuple[str, str]]:
        """The files the audit reads, which no output may replace."""
        inputs = [("--checkpoint", self.checkpoint_path or ""), ("--since", self.since_path or "")]
        return inputs + ([("--since", self.since_path + ".head")] if self.since_path else [])  # spec 9.9.2

    def key_files(self) -> list[tuple[str, str]]:
        """The key files named, which no output may replace, not even with an error report."""
        key_files = [("--cosign", self.cosign_path)] if self.cosign_path else []
        policy = [("--policy", self.trust.policy_path)] if self.trust.policy_path else []
        trusted = [("--trusted-key", item) for item in self.trust.trusted_keys if os.path.exists(item)]
        return key_files + policy + trusted


def _check_outputs(line: _CommandLine, writable: list[tuple[str, str]]) -> None:
    """Before the audit (a nightly run must not fail only at its end): each report file the output guards accept is
    added to `writable`, and gets a report whatever happens next; a refused one gets none, and is the error."""
    inputs, key_files, save_path = line.inputs(), line.key_files(), line.save_path
    targets = line.targets()
    refused: list[click.BadParameter] = []
    for option, target_format, path in targets:
        try:
            # The kept checkpoint is never a report either: an error report there would lose the next night's
            # --since anchor.
            kept = [("--save-checkpoint", path) for path in (save_path or "", f"{save_path}.head") if save_path]
            check_writable(option, path, db=line.db, keep=[*inputs, *kept])
            check_keys_apart(key_files, [(option, path)])  # a key is never an output, not even an error report
            writable.append((target_format, path))
        except click.BadParameter as error:
            refused.append(error)
    if refused:
        raise refused[0]
    # FILE.head is kept whenever a trusted key is given (spec 11.5)
    trusted = line.trust.trusted_keys or line.trust.witness_keys or line.trust.policy_path
    saved = [save_path, save_path + ".head"] if save_path and trusted else [save_path] if save_path else []
    distinct_outputs([path for _, _, path in targets] + saved)
    for path in saved:
        check_writable("--save-checkpoint", path, db=line.db, keep=inputs)
        check_keys_apart(key_files, [("--save-checkpoint", path)])


@dataclass(frozen=True, slots=True)
class _Loaded:
    """What the command line names, read and checked before the audit runs."""

    checkpoint: Checkpoint | None
    since: Checkpoint | None
    keys: list[VerifierKey]
    cosigner: SignerKey | None
    rule: TlogPolicy | None  # --policy, or the --witness-key shorthand; None with neither
    since_head: HeadNote | None
    fetched: list[tuple[str, str]]  # what each --witness-url witness served: (source, note)

    @property
    def witnessing(self) -> TlogPolicy | None:
        """The policy when it requires cosignatures (not `quorum none`): what FILE.head and the kept note follow."""
        return self.rule if self.rule is not None and self.rule.requires_witnesses else None

    def given(self) -> list[Checkpoint]:
        """The checkpoints given (--checkpoint, --since)."""
        return [item for item in (self.checkpoint, self.since) if item is not None]


def _load(line: _CommandLine) -> _Loaded:
    """Read the checkpoints, keys and witness answers the command line names, in the order their errors are said."""
    from compute_budget.auditor.scan import load_checkpoint
    from compute_budget.errors import CheckpointError

    db, since_path, save_path = line.db, line.since_path, line.save_path
    rule = line.trust.witness_rule()
    if line.tiles is not None:
        from compute_budget.cli.audit.tiles import check_tiles_line

        check_tiles_line(line.tiles, db=db, origin=line.expected_origin, trusted_keys=line.trust.trusted_keys,
                         checkpoint=line.checkpoint_path, cosign=line.cosign_path, policy=rule)
    if line.look_back and not since_path:  # a usage error: the look-back is below a --since checkpoint
        raise click.BadParameter("--look-back re-checks rows below a --since checkpoint: give --since FILE too",
                                 param_hint="--look-back")
    checkpoint = load_checkpoint(line.checkpoint_path) if line.checkpoint_path else None
    if since_path and not os.path.lexists(since_path):
        raise CheckpointError(
            f"checkpoint file {since_path} does not exist. The first night, audit in full once and keep its "
            f"checkpoint: `compute-budget audit{f' --db {db}' if db else ''} --save-checkpoint {since_path}` (see "
            "the README's nightly recipe); "
            "on any later night a missing checkpoint was lost or removed: find out why before making a new one"
        )
    since = load_checkpoint(since_path) if since_path else None
    # A policy's log keys must carry the store's origin; the audit refuses them once it reads it (naming the line).
    keys = list(dict.fromkeys([*line.trust.writer_keys(), *_log_keys(rule)]))
    if line.cosign_path and not save_path:
        raise click.BadParameter(
            "--cosign signs the checkpoint --save-checkpoint writes: give both", param_hint="--cosign"
        )
    cosigner = _auditor_key(line.cosign_path, keys)
    witnessing = rule if rule is not None and rule.requires_witnesses else None
    since_head = _since_head(since_path, save_path, witnessing, keys, line)
    fetched = _fetch_witnessed(db, line.witness_urls, line.expected_origin)
    return _Loaded(checkpoint, since, keys, cosigner, rule, since_head, fetched)


def _request(
    line: _CommandLine, loaded: _Loaded, on_progress: Callable[[int, int], None] | None, source: AuditSource | None
) -> AuditRequest:
    """The one `AuditRequest` of this command line, reading `source` (None: the database, opened by the audit)."""
    from compute_budget.auditor.request import AuditRequest
    from compute_budget.cli.audit.tiles import url_keys

    tiles = line.tiles is not None
    return AuditRequest(
        line.db, source=source,
        freshness_keys=url_keys(line.witness_urls) if tiles else (), checkpoint=loaded.checkpoint,
        since=loaded.since, jobs=line.jobs, on_progress=on_progress,
        trusted_keys=tuple(loaded.keys), all_signatures=line.all_signatures, expected_origin=line.expected_origin,
        witness_policy=loaded.rule, max_witness_age=line.max_witness_age,
        witnessed_checkpoints=tuple(loaded.fetched), look_back=line.look_back,
        since_head=loaded.since_head, key_states=line.trust.key_states(), attest_wait=line.attest_wait,
    )


def _audit_and_report(line: _CommandLine, targets: list[tuple[str, str]], unwritten: dict[str, str]) -> None:
    """Run the audit, write its reports, keep its checkpoint when clean, and exit 1 on findings."""
    from compute_budget.auditor.scan import run_audit
    from compute_budget.errors import AuditError, StoreDamaged

    loaded = _load(line)
    from compute_budget.sources import opened_once

    with opened_once(line.db, tiles=line.tiles, timeout=line.fetch_timeout) as source:
        with audit_progress() as on_progress:
            report = run_audit(_request(line, loaded, on_progress, source))
        if line.tiles is not None:
            from compute_budget.cli.audit.tiles import with_redirects

            report = with_redirects(report, source)
        for warning in report.warnings:
            say(f"warning: {warning}")
        kept, refusal = None, None
        try:
            kept = _checkpoint_to_keep(line, report, loaded, source)
        except (AuditError, StoreDamaged) as refused:  # nothing to keep; the reports still say what the audit found
            refusal = refused
    if kept is not None and loaded.cosigner is not None:  # the reports embed the auditor's note (`checkpoint_note`)
        report = dataclasses.replace(report, checkpoint_note=kept[0])
    failed = _write_reports(line, report, targets, dict(unwritten))
    if failed:  # said after the report itself; nothing more is written (no checkpoint to rotate to)
        raise ReportsNotWritten(not_written(failed, report))
    if refusal is not None:  # the reports carry the audit's verdict; what it refused to keep is said last
        raise refusal
    if line.save_path and kept is not None:
        write_kept(line.save_path, kept, report, loaded.keys, loaded.cosigner)
    if not report.clean:
        click.get_current_context().exit(1)


def _write_reports(
    line: _CommandLine, report: AuditReport, targets: list[tuple[str, str]], failed: dict[str, str]
) -> dict[str, str]:
    """Write the report to every file asked for (and to stdout without --output); returns those that could not be
    written, each removed and warned about once, with the ones `failed` already names."""
    from compute_budget.cli.audit.render import render
    from compute_budget.errors import OutputUnwritable

    for target_format, path in targets:
        try:
            write_atomically(path, render(report, target_format) + "\n")
        except OutputUnwritable as error:
            failed[path] = remove_unwritten(path, error)
            say(f"warning: {failed[path]}")
    if not line.output_path:
        click.echo(render(report, line.output_format))
    return failed


def _auditor_key(cosign_path: str | None, keys: list[VerifierKey]) -> SignerKey | None:
    """The `--cosign` key (spec 9.9.5): it needs --trusted-key, and it is never one of them (exit 2)."""
    if not cosign_path:
        return None
    from compute_budget.keys.key_files import load_signer_key

    cosigner = load_signer_key(cosign_path)  # an unusable key file is the first thing to say
    if not keys:
        raise click.BadParameter(
            "--cosign vouches only for rows a trusted writer signed: give the writer's verifier key with "
            "--trusted-key (the auditor's own key is never one)",
            param_hint="--cosign",
        )
    if cosigner.verifier() in keys:
        raise click.BadParameter(
            f"the --cosign key {cosigner.name} is also a --trusted-key: an auditor's signature is never a writer's; "
            "trust only the writers' keys, and check the auditor's line with `consistency --auditor-key`",
            param_hint="--cosign",
        )
    return cosigner


def _since_head(
    since_path: str | None, save_path: str | None, witnesses: TlogPolicy | None, keys: list[VerifierKey],
    line: _CommandLine,
) -> HeadNote | None:
    """With witness keys (spec 9.9.2), the `FILE.head` beside `--since FILE` (missing: exit 2, naming it); and the
    one `--save-checkpoint FILE` will keep needs a writer key to verify the head's signature under (exit 2)."""
    if save_path and witnesses and not keys:
        raise click.BadParameter(
            f"with --witness-key, --save-checkpoint also keeps {save_path}.head, the head's checkpoint as the writer "
            "signed it: give the writer's verifier key with --trusted-key",
            param_hint="--save-checkpoint",
        )
    if not since_path or not witnesses:
        return None
    from compute_budget.auditor.head_note import head_path, load_head_note
    from compute_budget.cli.audit.keep import rebaseline_command

    return load_head_note(head_path(since_path), rebaseline_command(line, since_path))


def _checkpoint_to_keep(
    line: _CommandLine, report: AuditReport, loaded: _Loaded, source: AuditSource | None
) -> tuple[str, int, str | None] | None:
    """What --save-checkpoint writes, its size, and with witness keys the text of FILE.head (spec 9.9.2); None
    (said on stderr) when nothing is. Made before the reports are written, so that they can embed the auditor's
    note."""
    save_path, cosigner = line.save_path, loaded.cosigner
    if not save_path:
        return None
    if not report.clean:
        say(f"audit not clean: checkpoint {save_path} was not written")
        return None
    if loaded.witnessing is not None:
        assert source is not None  # a store whose history is gone is never clean
        return witnessed_to_keep(source, report, save_path, cosigner, loaded.given(), loaded.witnessing)
    if cosigner is not None:
        from compute_budget.auditor.proving import cosign

        note = cosign(line.db, report, attested(report, report.head.seq, cosigner), loaded.given(), loaded.keys)
        return with_head((note, report.head.seq, None), source, report, save_path)
    if line.tiles is not None:
        from compute_budget.cli.audit.tiles import published_to_keep

        return with_head(published_to_keep(report), source, report, save_path)
    return with_head((report.head_checkpoint().to_json() + "\n", report.head.seq, None), source, report, save_path)


def _log_keys(rule: TlogPolicy | None) -> list[VerifierKey]:
    return [log.key for log in rule.logs] if rule is not None else []


def _fetch_witnessed(
    db: str | None, urls: tuple[str, ...], expected_origin: str | None
) -> list[tuple[str, str]]:
    """What each `--witness-url` witness last cosigned for this store's log (exit 2 when one cannot say)."""
    if not urls:
        return []
    from compute_budget.errors import StoreUnavailable
    from compute_budget.store import BudgetStore
    from compute_budget.witness.client import WitnessTarget, fetch_latest

    targets = [WitnessTarget.parse(url) for url in urls]
    origin = expected_origin
    if origin is None:
        with BudgetStore.open(db, readonly=True) as store:
            origin = store.origin()
    if origin is None:
        raise StoreUnavailable("the store has no origin yet: no witness can have cosigned it (give --origin NAME)")
    return [(f"--witness-url ({target.label})", fetch_latest(target, origin)) for target in targets]
