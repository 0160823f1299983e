"""`compute-budget audit`: the replay audit and its report files (a lazy command)."""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Literal

import click

from compute_budget.cli.app import CannotRun, Terminated, say
from compute_budget.cli.commands import cli, db_option, witness_role_options
from compute_budget.cli.io import check_keys_apart, check_writable, write_atomically
from compute_budget.cli.progress import audit_progress
from compute_budget.errors import clip

if TYPE_CHECKING:
    from compute_budget.auditor.head_note import HeadNote
    from compute_budget.auditor.report import AuditReport
    from compute_budget.core.log.checkpoint import Checkpoint
    from compute_budget.core.log.cosignature import WitnessKey
    from compute_budget.core.log.note import SignerKey, VerifierKey


def _report_spec(value: str) -> tuple[str, str]:
    """FORMAT:FILE of `audit --report`."""
    from compute_budget.cli.render_audit import REPORT_FORMATS

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
                _reports_for_usage_error(list(args), error)
            except Exception as failed:  # the usage error is what to say; an unusable --db must not replace it
                say(f"warning: no report file replaced: {clip(str(failed), 200)}")
            raise


def _option_values(args: list[str], name: str) -> list[str]:
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


def _reports_for_usage_error(args: list[str], error: click.UsageError) -> None:
    """Replace each report file the raw `args` name with an error report, under the same guards as a run that
    parsed (never the database, an input or a key file)."""
    from compute_budget.auditor.report import utc_now
    from compute_budget.cli.render_audit import REPORT_FORMATS

    formats = [value for value in _option_values(args, "--format") if value in REPORT_FORMATS]
    targets = [(formats[-1] if formats else "text", path) for path in _option_values(args, "--output")[-1:]]
    for value in _option_values(args, "--report"):
        report_format, colon, path = value.partition(":")
        if colon and report_format in REPORT_FORMATS and path:
            targets.append((report_format, path))
    if not targets:
        return
    dbs = _option_values(args, "--db")
    db = dbs[-1] if dbs else None
    inputs = [("--checkpoint", path) for path in _option_values(args, "--checkpoint")]
    inputs += [("--since", path) for path in _option_values(args, "--since")]
    inputs += [("--save-checkpoint", path) for path in _option_values(args, "--save-checkpoint")]
    inputs += [(option, path + ".head") for option, path in list(inputs) if option in ("--since", "--save-checkpoint")]
    key_files = [("--cosign", path) for path in _option_values(args, "--cosign")]
    key_files += [("--trusted-key", item) for item in _option_values(args, "--trusted-key") if os.path.exists(item)]
    writable = []
    for target_format, path in targets:
        try:
            check_writable("--report", path, db=db, keep=inputs)
            check_keys_apart(key_files, [("--report", path)])
        except (click.ClickException, OSError):
            continue
        writable.append((target_format, path))
    reason = f"the audit could not run: its command line is wrong: {error.format_message()}"
    _write_error_reports(writable, None, db, utc_now(), reason=reason)


@cli.command("audit", cls=AuditCommand)
@db_option
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
    help="Write the new head here, only when the audit is clean. With --witness-key: the newest checkpoint the "
    "witnesses cosigned, and FILE.head, the head this audit checked and when (needs --trusted-key).",
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
@click.option(
    "--trusted-key",
    "trusted_keys",
    metavar="KEY",
    multiple=True,
    help="A verifier key (name+hash+key) or a file holding one, whose signatures vouch for the rows; repeatable.",
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
@witness_role_options
@click.option(
    "--max-witness-age", "max_witness_age", type=click.IntRange(min=0), default=86400, show_default=True,
    metavar="SECONDS", help="Rows after a checkpoint the witnesses cosigned longer ago than this are unwitnessed_rows.",
)
@click.option(
    "--witness-url", "witness_urls", metavar="URL=KEY", multiple=True,
    help="Before the audit, fetch this compute-budget witness's latest checkpoint of the log; the store must extend "
    "it. Unreachable, or a stale or unverifiable answer: exit 2. Repeatable.",
)
def audit_command(
    db: str | None,
    checkpoint_path: str | None,
    since_path: str | None,
    save_path: str | None,
    output_format: str,
    output_path: str | None,
    reports: tuple[str, ...],
    jobs: int | Literal["auto"],
    trusted_keys: tuple[str, ...],
    all_signatures: bool,
    cosign_path: str | None,
    expected_origin: str | None,
    witness_keys: tuple[str, ...],
    witness_quorum: int | None,
    max_witness_age: int,
    witness_urls: tuple[str, ...],
    look_back: int,
) -> None:
    """Replay-audit the store read-only: exit 0 clean, 1 findings, 2 cannot run.

    Every report file asked for (--output, --report) is written; when the audit cannot run, each is replaced by
    a report saying why (JUnit: one test case in error; JSON: clean false and an error).
    """
    from compute_budget.auditor.report import utc_now

    started_at = utc_now()
    targets = [(output_format, output_path)] if output_path else []
    targets += [_report_spec(value) for value in reports]
    writable: list[tuple[str, str]] = []
    unwritten: dict[str, str] = {}
    inputs = [("--checkpoint", checkpoint_path or ""), ("--since", since_path or "")]
    inputs += [("--since", since_path + ".head")] if since_path else []  # spec 9.9.2: read with witness keys
    key_files = [("--cosign", cosign_path)] if cosign_path else []
    key_files += [("--trusted-key", item) for item in trusted_keys if os.path.exists(item)]
    try:
        # Before the audit: a nightly run must not fail only at its end. A path the output guards refuse gets
        # no report at all; the others get one whatever happens next.
        refused: list[click.BadParameter] = []
        for option, (target_format, path) in zip(
            ["--output"] * bool(output_path) + ["--report"] * len(reports), targets, strict=True
        ):
            try:
                # The kept checkpoint is never a report either: an error report there would lose the next night's
                # --since anchor.
                kept = [("--save-checkpoint", path) for path in (save_path or "", f"{save_path}.head") if save_path]
                check_writable(option, path, db=db, keep=[*inputs, *kept])
                check_keys_apart(key_files, [(option, path)])  # a key is never an output, not even an error report
                writable.append((target_format, path))
            except click.BadParameter as error:
                refused.append(error)
        if refused:
            raise refused[0]
        saved = [save_path, save_path + ".head"] if save_path and witness_keys else [save_path] if save_path else []
        _distinct_outputs([path for _, path in targets] + saved)
        for path in saved:
            check_writable("--save-checkpoint", path, db=db, keep=inputs)
            check_keys_apart(key_files, [("--save-checkpoint", path)])
        # Until this audit has a verdict, every report says it has none: a run killed outright (SIGKILL, the OOM
        # killer) must not leave last night's CLEAN in place. A report that cannot be replaced (a full disk) was
        # removed instead: it is said once and not tried again.
        unwritten = _write_error_reports(
            writable, None, db, started_at,
            reason=f"the audit started at {started_at} and has not finished: if this stays, it was killed",
        )
        writable[:] = [target for target in writable if target[1] not in unwritten]
        _audit_and_report(
            db,
            checkpoint_path,
            since_path,
            save_path,
            output_format,
            output_path,
            writable,
            jobs,
            trusted_keys,
            all_signatures,
            cosign_path,
            expected_origin,
            (witness_keys, witness_quorum, max_witness_age, witness_urls),
            look_back=look_back,
            unwritten=unwritten,
        )
    except (click.exceptions.Exit, ReportsNotWritten):
        raise  # a result (exit 0 or 1), its reports written; or reports removed, the others holding the result
    except KeyboardInterrupt as error:  # Ctrl-C, or SIGTERM (a cron timeout): no verdict, so none may survive
        _write_error_reports(writable, error, db, started_at)
        raise
    except Exception as error:  # the audit cannot run (exit 2): every report file says why
        _write_error_reports(writable, error, db, started_at)
        raise


def _audit_and_report(
    db: str | None,
    checkpoint_path: str | None,
    since_path: str | None,
    save_path: str | None,
    output_format: str,
    output_path: str | None,
    targets: list[tuple[str, str]],
    jobs: int | Literal["auto"],
    trusted_keys: tuple[str, ...],
    all_signatures: bool,
    cosign_path: str | None,
    expected_origin: str | None,
    witnessing: tuple[tuple[str, ...], int | None, int, tuple[str, ...]],
    *,
    look_back: int = 0,
    unwritten: dict[str, str] | None = None,
) -> None:
    from compute_budget.auditor.scan import audit, load_checkpoint
    from compute_budget.cli.render_audit import render
    from compute_budget.errors import AuditError, CheckpointError, OutputUnwritable, StoreDamaged
    from compute_budget.store.keys import verifier_key

    if look_back and not since_path:  # a usage error: the look-back is below a --since checkpoint, none is given
        raise click.BadParameter("--look-back re-checks rows below a --since checkpoint: give --since FILE too",
                                 param_hint="--look-back")
    checkpoint = load_checkpoint(checkpoint_path) if checkpoint_path else None
    if since_path and not os.path.lexists(since_path):
        raise CheckpointError(
            f"checkpoint file {since_path} does not exist. The first night, audit in full once and keep its "
            f"checkpoint: `compute-budget audit{f' --db {db}' if db else ''} --save-checkpoint {since_path}` (see "
            "the README's nightly recipe); "
            "on any later night a missing checkpoint was lost or removed: find out why before making a new one"
        )
    since = load_checkpoint(since_path) if since_path else None
    keys = [verifier_key(item) for item in trusted_keys]
    if cosign_path and not save_path:
        raise click.BadParameter(
            "--cosign signs the checkpoint --save-checkpoint writes: give both", param_hint="--cosign"
        )
    cosigner = _auditor_key(cosign_path, keys)
    witness_keys, witness_quorum, max_witness_age, witness_urls = witnessing
    witnesses = _witness_keys(witness_keys, witness_quorum)
    since_head = _since_head(since_path, save_path, witnesses, keys)
    fetched = _fetch_witnessed(db, witness_urls, expected_origin)
    with audit_progress() as on_progress:
        report = audit(
            db,
            checkpoint=checkpoint,
            since=since,
            jobs=jobs,
            on_progress=on_progress,
            trusted_keys=keys,
            all_signatures=all_signatures,
            expected_origin=expected_origin,
            witness_keys=witnesses,
            witness_quorum=witness_quorum,
            max_witness_age=max_witness_age,
            witnessed_checkpoints=fetched,
            look_back=look_back,
            since_head=since_head,
        )
    for warning in report.warnings:
        say(f"warning: {warning}")
    failed = dict(unwritten or {})
    given = [item for item in (checkpoint, since) if item is not None]
    kept, refusal = None, None
    try:
        kept = _checkpoint_to_keep(db, report, save_path, cosigner, given, keys, witnesses, witness_quorum)
    except (AuditError, StoreDamaged) as refused:  # nothing to keep; the reports still say what the audit found
        refusal = refused
    if kept is not None and cosigner is not None:  # the reports embed the auditor's note (`checkpoint_note`)
        report = dataclasses.replace(report, checkpoint_note=kept[0])
    for target_format, path in targets:
        try:
            write_atomically(path, render(report, target_format) + "\n")
        except OutputUnwritable as error:
            failed[path] = _remove_unwritten(path, error)
            say(f"warning: {failed[path]}")
    if not output_path:
        click.echo(render(report, output_format))
    if failed:  # said after the report itself; nothing more is written (no checkpoint to rotate to)
        raise ReportsNotWritten(_not_written(failed, report))
    if refusal is not None:  # the reports carry the audit's verdict; what it refused to keep is said last
        raise refusal
    if save_path and kept is not None:
        _write_kept(save_path, kept, report, keys, cosigner)
    if not report.clean:
        click.get_current_context().exit(1)


def _auditor_key(cosign_path: str | None, keys: list[VerifierKey]) -> SignerKey | None:
    """The `--cosign` key (spec 9.9.5): it needs --trusted-key, and it is never one of them (exit 2)."""
    if not cosign_path:
        return None
    from compute_budget.store.keys import load_signer_key

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
    since_path: str | None, save_path: str | None, witnesses: list[WitnessKey], keys: list[VerifierKey]
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

    return load_head_note(head_path(since_path))


def _checkpoint_to_keep(
    db: str | None,
    report: AuditReport,
    save_path: str | None,
    cosigner: SignerKey | None,
    given: list[Checkpoint],
    keys: list[VerifierKey],
    witnesses: list[WitnessKey],
    quorum: int | None,
) -> tuple[str, int, str | None] | None:
    """What --save-checkpoint writes, its size, and with witness keys the text of FILE.head (spec 9.9.2); None
    (said on stderr) when nothing is. Made before the reports are written, so that they can embed the auditor's
    note."""
    if not save_path:
        return None
    if not report.clean:
        say(f"audit not clean: checkpoint {save_path} was not written")
        return None
    if witnesses:
        return _witnessed_to_keep(db, report, save_path, cosigner, given, witnesses, quorum)
    if cosigner is not None:
        from compute_budget.auditor.proofs import cosign

        note = cosign(db, report, _attested(report, report.head.seq, cosigner), given, keys)
        return note, report.head.seq, None
    return report.head_checkpoint().to_json() + "\n", report.head.seq, None


def _write_kept(
    save_path: str, kept: tuple[str, int, str | None], report: AuditReport, keys: list[VerifierKey],
    cosigner: SignerKey | None,
) -> None:
    """Write what --save-checkpoint keeps: FILE.head first (a failure between the two leaves the older FILE with a
    newer head, which judges no row more leniently than the pair it replaces), then FILE."""
    from compute_budget.auditor.head_note import head_path

    note, size, head = kept
    if head is not None:
        write_atomically(head_path(save_path), head)
        write_atomically(save_path, note)
        say(f"saved checkpoint seq {size} to {save_path} (and the head, seq {report.head.seq}, to "
            f"{head_path(save_path)})")
        return
    write_atomically(save_path, note)
    say(f"saved checkpoint seq {size} to {save_path}")
    if keys and cosigner is None:  # spec 8: with --trusted-key a given checkpoint must carry a trusted signature
        say(
            f"warning: {save_path} is an unsigned JSON checkpoint: given to --since or --checkpoint with "
            "--trusted-key it is bad_signature; add --cosign AUDITOR_KEY to keep the writer-signed note instead"
        )


def _witness_keys(witness_keys: tuple[str, ...], quorum: int | None) -> list[WitnessKey]:
    """The distinct witness keys, and a quorum in 1..their number (else a usage error, exit 2)."""
    from compute_budget.store.keys import witness_key

    keys = list(dict.fromkeys(witness_key(item) for item in witness_keys))
    if quorum is not None and not 1 <= quorum <= len(keys):
        raise click.BadParameter(
            f"{quorum} is not between 1 and the number of distinct --witness-key keys ({len(keys)})",
            param_hint="--witness-quorum",
        )
    return keys


def _fetch_witnessed(
    db: str | None, urls: tuple[str, ...], expected_origin: str | None
) -> list[tuple[str, str]]:
    """What each `--witness-url` witness last cosigned for this store's log (exit 2 when one cannot say)."""
    if not urls:
        return []
    from compute_budget.errors import StoreUnavailable
    from compute_budget.store import BudgetStore
    from compute_budget.store.witnessing import WitnessTarget, fetch_latest

    targets = [WitnessTarget.parse(url) for url in urls]
    origin = expected_origin
    if origin is None:
        with BudgetStore.open(db, readonly=True) as store:
            origin = store.origin()
    if origin is None:
        raise StoreUnavailable("the store has no origin yet: no witness can have cosigned it (give --origin NAME)")
    return [(f"--witness-url ({target.label})", fetch_latest(target, origin)) for target in targets]


def _witnessed_to_keep(
    db: str | None,
    report: AuditReport,
    save_path: str,
    cosigner: SignerKey | None,
    given: list[Checkpoint],
    witnesses: list[WitnessKey],
    quorum: int | None,
) -> tuple[str, int, str] | None:
    """--save-checkpoint with witness keys: the newest checkpoint K witnesses cosigned, with its signatures, its
    size and the text of FILE.head (the head this audit checked, spec 9.9.2), or None when none is."""
    import time

    from compute_budget.auditor.head_note import format_head_note, head_path, writer_signed_head
    from compute_budget.auditor.witnessed import WitnessPolicy, witnessed_note
    from compute_budget.core.log.note import VerifierKey, add_signature
    from compute_budget.errors import StoreDamaged
    from compute_budget.store import BudgetStore

    policy = WitnessPolicy(tuple(witnesses), quorum or len(witnesses), 0, int(time.time()))
    note = head = None
    writers = [VerifierKey.parse(text) for text in report.trusted_keys]
    if report.witnessed_size:
        with BudgetStore.open(db, readonly=True) as store, store.snapshot() as snapshot:
            note = witnessed_note(snapshot, policy, report.witnessed_size, given, writers)
            head = writer_signed_head(snapshot, report.head_checkpoint().note_text(), report.head.seq, writers)
    if note is None or not report.witnessed_size:
        say(f"no checkpoint carries {policy.quorum} cosignature(s) by the witness keys: {save_path} was not written")
        return None
    if head is None:
        raise StoreDamaged(
            f"{save_path} was not written: no stored checkpoint of the head (seq {report.head.seq}) carries a writer "
            f"signature that verifies under --trusted-key, so there is no {head_path(save_path)} to keep (record with "
            "the writer's key, or run `compute-budget checkpoint --signing-key`, and audit again)"
        )
    if cosigner is not None:
        note = add_signature(note, _attested(report, report.witnessed_size, cosigner))
    return note, report.witnessed_size, format_head_note(head, report.started_at)


def _attested(report: AuditReport, size: int, cosigner: SignerKey) -> SignerKey:
    """`cosigner`, once every row through `size` is covered by a trusted writer's stored checkpoint (spec 9.9.5)."""
    from compute_budget.errors import AuditError

    if report.attested_size is None or report.attested_size < size:
        raise AuditError(
            f"refusing to cosign size {size} with {cosigner.name}: a trusted writer's stored checkpoint covers only "
            f"{report.attested_size or 0} rows"
        )
    return cosigner


def _distinct_outputs(paths: list[str]) -> None:
    seen: set[str] = set()
    for path in paths:
        real = os.path.realpath(path)
        if real in seen:
            raise click.BadParameter(f"{path} is named twice among the reports and the checkpoint to save")
        seen.add(real)


def _write_error_reports(
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
    from compute_budget.cli.render_audit import render_error
    from compute_budget.errors import ComputeBudgetError
    from compute_budget.store.backend import locate

    if reason is None:
        reason = _error_reason(error)
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
            unwritten[path] = _remove_unwritten(path, failed)
            say(f"warning: {unwritten[path]}")
    return unwritten


class ReportsNotWritten(CannotRun):
    """The audit ran, but report files asked for could not be written (and were removed): exit 2, naming them."""


def _remove_unwritten(path: str, error: Exception) -> str:
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


def _not_written(failed: dict[str, str], report: AuditReport) -> str:
    """The one error line of an audit whose reports could not all be written (each was warned about once)."""
    verdict = "CLEAN" if report.clean else f"{len(report.findings)} finding(s)"
    return (
        f"the audit finished ({verdict}), but {', '.join(failed)} could not be written (said above): "
        "no report there stands for this run; fix that and run the audit again"
    )


def _error_reason(error: BaseException | None) -> str:
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
