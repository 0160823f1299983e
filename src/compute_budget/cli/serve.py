"""`compute-budget serve`: the read-only workbench (needs the extra `compute-budget[workbench]`).

Only Click is imported here: `compute-budget --help` works without the extra, and `serve` without it says
what to install.
"""

from __future__ import annotations

import contextlib

import click

from compute_budget.cli.trust import TrustOptions, trust_options, trusted_key_option

# The packages the workbench extra brings; a missing one means the extra is not installed.
WORKBENCH_PACKAGES = frozenset({"starlette", "jinja2", "uvicorn", "markupsafe", "anyio", "h11", "click"})


def _say(message: str) -> None:
    click.echo(f"compute-budget: {message}", err=True)


@click.command("serve")
@click.option(
    "--db",
    "db",
    metavar="PATH|URL",
    default=None,
    help="Database file or SQLAlchemy URL [default: $COMPUTE_BUDGET_DB, else ./compute_budget.db].",
)
@click.option(
    "--tiles", "tiles", metavar="LOCATION",
    help="Serve a published log (a folder, or an http(s):// prefix) instead of a database: no --db; needs --origin "
    "and --trusted-key. Every row is shown only once its entry and tiles hash up to the verified checkpoint.",
)
@click.option(
    "--origin", "origin", metavar="NAME",
    help="With --tiles: the log's name; the publication's checkpoint must be of that log.",
)
@click.option(
    "--fetch-timeout", "fetch_timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True,
    metavar="SECONDS", help="With --tiles over HTTP: the time one request may take (retried at most 3 times).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (no authentication!).")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="Port to listen on.")
@trusted_key_option("A verifier key (or a file holding one) whose signed checkpoints you trust; repeatable.")
@click.option(
    "--allow-host",
    "allow_hosts",
    metavar="NAME",
    multiple=True,
    help="Another Host name to answer to (the name browsers use to reach it); repeatable. Without it only the "
    "loopback names and the bound address are answered.",
)
@click.option(
    "--audit-report",
    "audit_report",
    metavar="FILE",
    help="The nightly audit's JSON report (audit --report json:FILE): every page shows its verdict and the rows "
    "it names in a banner, reread as the file changes. A clean verdict is green only with --auditor-key.",
)
@click.option(
    "--auditor-key",
    "auditor_key",
    metavar="KEY",
    help="The auditor's verifier key (its --cosign key's; or a file holding it): a clean --audit-report is shown "
    "green only when it embeds a checkpoint note signed by this key that the store's rows still give.",
)
@trust_options
def serve_command(
    db: str | None,
    tiles: str | None,
    origin: str | None,
    fetch_timeout: float,
    host: str,
    port: int,
    allow_hosts: tuple[str, ...],
    audit_report: str | None,
    auditor_key: str | None,
    trust: TrustOptions,
) -> int:
    """Serve the read-only workbench: browse decisions, see why each was decided, run the replay audit.

    It opens the store read-only and never writes. It listens on localhost unless --host says otherwise,
    and has no authentication: anyone who can reach the address can read every stored decision. With --tiles it
    serves a publication instead, with no database.
    """
    try:
        from compute_budget.web.server import is_loopback, serve
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] not in WORKBENCH_PACKAGES:
            raise
        _say("serve needs the workbench extra: pip install 'compute-budget[workbench]'")
        return 2
    if tiles is not None:
        _check_tiles_line(tiles, db=db, origin=origin, trust=trust, audit_report=audit_report,
                          auditor_key=auditor_key)
    elif origin is not None:
        raise click.BadParameter("--origin names the log of a publication: give --tiles LOCATION",
                                 param_hint="--origin")
    _check_keys(trust, auditor_key)
    # Only a policy file is handed on: the --witness-key shorthand goes to the page's audit as it is.
    policy = trust.witness_rule() if trust.policy_path else None
    states = trust.key_states()
    if not is_loopback(host) and not allow_hosts:
        raise click.BadParameter(
            f"serving on {host}, not a loopback address: name the Host the browsers use with --allow-host NAME "
            "(the workbench answers no other)",
            param_hint="--host",
        )
    if not is_loopback(host):
        _say(
            f"warning: serving on {host}, not localhost: the workbench has no authentication, so anyone who can "
            "reach this address can read every stored decision"
        )
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: uvicorn shuts down cleanly, then re-raises it
        if tiles is not None:
            _serve_tiles(tiles, origin or "", fetch_timeout, trust, host=host, port=port, allow_hosts=allow_hosts)
        else:
            serve(db, host=host, port=port, trusted_keys=trust.trusted_keys, allow_hosts=allow_hosts,
                  audit_report=audit_report, witness_keys=trust.witness_keys, witness_quorum=trust.witness_quorum,
                  auditor_key=auditor_key, say=_say, key_states=states, witness_policy=policy)
    _say("workbench stopped")
    return 0


def _check_tiles_line(
    tiles: str, *, db: str | None, origin: str | None, trust: TrustOptions, audit_report: str | None,
    auditor_key: str | None,
) -> None:
    """The usage rules of `serve --tiles`, as `audit --tiles` says them (exit 2, one line), and no option that
    needs a database."""
    from compute_budget.cli.audit.tiles import check_tiles_line

    check_tiles_line(tiles, db=db, origin=origin, trusted_keys=trust.trusted_keys, checkpoint=None, cosign=None,
                     policy=trust.witness_rule())
    for given, option in ((audit_report, "--audit-report"), (auditor_key, "--auditor-key")):
        if given is not None:
            raise click.BadParameter(f"{option} is checked against a database's rows: serve --tiles takes none "
                                     "(its audit page runs audit --tiles)", param_hint=option)


def _serve_tiles(tiles: str, origin: str, timeout: float, trust: TrustOptions, *, host: str, port: int,
                 allow_hosts: tuple[str, ...]) -> None:
    """Serve the viewer over the publication at `tiles`, with the keys `audit --tiles` takes."""
    from compute_budget.publication_reader.snapshot import PublicationTarget
    from compute_budget.web.publication_watch import Trust
    from compute_budget.web.server import serve_publication

    verified = Trust(origin, tuple(dict.fromkeys(trust.writer_keys())), trust.witness_rule(), trust.key_states())
    serve_publication(PublicationTarget(tiles, timeout=timeout), verified, host=host, port=port,
                      allow_hosts=allow_hosts, say=_say)


def _check_keys(trust: TrustOptions, auditor_key: str | None) -> None:
    """Every key is read as the audit reads it, before anything is served: a FIFO, a device or garbage is one line
    now, not a page later (exit 2)."""
    from compute_budget.keys.key_files import verifier_key, witness_key

    writers = trust.writer_keys()
    witnesses = list(dict.fromkeys(witness_key(item) for item in trust.witness_keys))
    quorum = trust.witness_quorum
    if quorum is not None and not 1 <= quorum <= len(witnesses):
        raise click.BadParameter(
            f"{quorum} is not between 1 and the number of distinct --witness-key keys ({len(witnesses)})",
            param_hint="--witness-quorum",
        )
    if auditor_key is not None and verifier_key(auditor_key, what="auditor key") in writers:
        raise click.BadParameter(  # spec 9.9.5: an auditor's signature is never a writer's
            "the auditor's key is one of the --trusted-key writer keys: an auditor's signature is never a writer's",
            param_hint="--auditor-key",
        )


def _register() -> None:
    from compute_budget.cli.group import cli  # loaded first: this module is one of the group's lazy commands

    cli.add_command(serve_command)


_register()
