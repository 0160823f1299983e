"""`compute-budget serve`: the read-only workbench (needs the extra `compute-budget[workbench]`).

Only Click is imported here: `compute-budget --help` works without the extra, and `serve` without it says
what to install.
"""

from __future__ import annotations

import contextlib

import click

from compute_budget.cli.commands import witness_role_options, witness_rule
from compute_budget.cli.key_options import key_state_options

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
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (no authentication!).")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="Port to listen on.")
@click.option(
    "--trusted-key",
    "trusted_keys",
    metavar="KEY",
    multiple=True,
    help="A verifier key (or a file holding one) whose signed checkpoints you trust; repeatable.",
)
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
@witness_role_options
@key_state_options
def serve_command(
    db: str | None,
    host: str,
    port: int,
    trusted_keys: tuple[str, ...],
    allow_hosts: tuple[str, ...],
    audit_report: str | None,
    auditor_key: str | None,
    witness_keys: tuple[str, ...],
    witness_quorum: int | None,
    policy_path: str | None,
    retired: tuple[str, ...],
    revoked: tuple[str, ...],
) -> int:
    """Serve the read-only workbench: browse decisions, see why each was decided, run the replay audit.

    It opens the store read-only and never writes. It listens on localhost unless --host says otherwise,
    and has no authentication: anyone who can reach the address can read every stored decision.
    """
    try:
        from compute_budget.web.server import is_loopback, serve
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] not in WORKBENCH_PACKAGES:
            raise
        _say("serve needs the workbench extra: pip install 'compute-budget[workbench]'")
        return 2
    _check_keys(trusted_keys, witness_keys, witness_quorum, auditor_key)
    from compute_budget.auditor.key_states import configured_states

    # Only a policy file is handed on: the --witness-key shorthand goes to the page's audit as it is.
    policy = witness_rule(policy_path, witness_keys, witness_quorum) if policy_path else None

    states = configured_states(retired, revoked)
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
        serve(db, host=host, port=port, trusted_keys=trusted_keys, allow_hosts=allow_hosts, audit_report=audit_report,
              witness_keys=witness_keys, witness_quorum=witness_quorum, auditor_key=auditor_key, say=_say,
              key_states=states, witness_policy=policy)
    _say("workbench stopped")
    return 0


def _check_keys(
    trusted_keys: tuple[str, ...], witness_keys: tuple[str, ...], quorum: int | None, auditor_key: str | None
) -> None:
    """Every key is read as the audit reads it, before anything is served: a FIFO, a device or garbage is one line
    now, not a page later (exit 2)."""
    from compute_budget.keys.key_files import verifier_key, witness_key

    writers = [verifier_key(item) for item in trusted_keys]
    witnesses = list(dict.fromkeys(witness_key(item) for item in witness_keys))
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
    from compute_budget.cli.commands import cli  # loaded first: this module is one of the group's lazy commands

    cli.add_command(serve_command)


_register()
