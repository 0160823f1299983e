"""`compute-budget witness serve|show` (spec 9.4): a witness for other machines' logs, and what it holds.

Only Click is imported here: the witness's server (Starlette, uvicorn) comes from the workbench extra and is
imported when `serve` runs.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import click

from compute_budget.cli.render import escaped
from compute_budget.cli.serve import WORKBENCH_PACKAGES

if TYPE_CHECKING:
    from compute_budget.core.log.note import VerifierKey
    from compute_budget.core.log.witness_policy import TlogPolicy
    from compute_budget.witness.client import Submitted
    from compute_budget.witness.state import WitnessState

DEFAULT_STATE = "witness.db"


def _say(message: str) -> None:
    click.echo(f"compute-budget: {message}", err=True)


@click.group("witness")
def witness_group() -> None:
    """Run a witness (C2SP tlog-witness) or look at its state."""


def _logs(pairs: tuple[str, ...], policy_path: str | None = None) -> dict[str, list[VerifierKey]]:
    """The logs to witness: each --log ORIGIN=KEY, and each log line of the --policy file (its key's name is its
    origin, as C2SP says); exit 2 with neither."""
    from compute_budget.cli.trust import load_policy
    from compute_budget.keys.key_files import verifier_key

    logs: dict[str, list[VerifierKey]] = {}
    if policy_path is not None:
        for origin, keys in load_policy(policy_path).log_keys_by_origin().items():
            logs[origin] = list(keys)
        if not logs and not pairs:
            raise click.BadParameter(f"policy file {policy_path} has no log line: nothing to witness",
                                     param_hint="--policy")
    if not pairs and policy_path is None:
        raise click.BadParameter("give the logs to witness: --log ORIGIN=KEY, or a --policy with log lines",
                                 param_hint="--log")
    for pair in pairs:
        origin, equals, key_text = pair.partition("=")
        if not equals or not origin or not key_text:
            raise click.BadParameter(f"{pair[:80]!r} is not ORIGIN=VERIFIER_KEY", param_hint="--log")
        key = verifier_key(key_text, what=f"log key of origin {origin[:80]!r} (--log)")
        if key not in logs.setdefault(origin, []):
            logs[origin].append(key)
    return logs


@witness_group.command("serve")
@click.option("--key", "key_path", required=True, metavar="FILE", help="The witness's signer key (keygen --witness).")
@click.option(
    "--log", "log_pairs", multiple=True, metavar="ORIGIN=KEY",
    help="A log to witness and one of its writers' verifier keys (type 0x01); repeatable, also for one origin.",
)
@click.option("--policy", "policy_path", metavar="FILE",
              help="A C2SP tlog-policy file: witness each of its logs (a log line's key is named by its origin); "
              "with --log, both.")
@click.option("--state", "state_path", default=DEFAULT_STATE, show_default=True, metavar="FILE",
              help="The witness's own SQLite state file.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=7380, show_default=True, help="Port to listen on.")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME",
              help="Another Host name to answer to (the name clients use); needed for a non-loopback --host.")
def witness_serve_command(
    key_path: str, log_pairs: tuple[str, ...], policy_path: str | None, state_path: str, host: str, port: int,
    allow_hosts: tuple[str, ...],
) -> int:
    """Serve POST /add-checkpoint (C2SP tlog-witness) and GET /latest until Ctrl-C or SIGTERM.

    It cosigns a checkpoint only when a log key signed it and it extends the last one it cosigned for that log
    (a consistency proof), keeps that size per log in its state file, and keeps refused forks as evidence.
    """
    try:
        from compute_budget.serving import is_loopback
        from compute_budget.witness.server import serve_witness
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] not in WORKBENCH_PACKAGES:
            raise
        _say("witness serve needs the workbench extra: pip install 'compute-budget[workbench]'")
        return 2
    from compute_budget.keys.key_files import load_witness_signer

    signer = load_witness_signer(key_path)
    logs = _logs(log_pairs, policy_path)
    if not is_loopback(host) and not allow_hosts:
        raise click.BadParameter(
            f"serving on {host}, not a loopback address: name the Host clients use with --allow-host NAME",
            param_hint="--host",
        )
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: uvicorn shuts down cleanly, then re-raises it
        serve_witness(signer, logs, state_path, host=host, port=port, allow_hosts=allow_hosts, say=_say)
    _say("witness stopped")
    return 0


@witness_group.command("show")
@click.option("--state", "state_path", default=DEFAULT_STATE, show_default=True, metavar="FILE",
              help="The witness's state file.")
def witness_show_command(state_path: str) -> None:
    """Print, per log, the latest cosigned size and root (base64), the conclusive fork evidence (labelled fork or
    extension_mismatch) and, apart, the pending notes (refused at the proof check, not yet shown to be forks)."""
    from compute_budget.witness.state import WitnessState

    state = WitnessState(state_path, create=False)
    try:
        latest = state.all_latest()
        if not latest:
            click.echo("no checkpoint cosigned yet")
        for cosigned in latest:
            click.echo(f"{escaped(cosigned.origin)}\tsize {cosigned.size}\troot {cosigned.root}")
        for origin in state.origins_with_evidence():
            _show_evidence(state, origin)
    finally:
        state.close()


def _show_evidence(state: WitnessState, origin: str) -> None:
    """One log's conclusive evidence, then its pending notes, each with the count of notes past its cap."""
    kept, dropped = state.evidence(origin)
    more = f" (and {dropped} more not kept)" if dropped else ""
    click.echo(f"{escaped(origin)}\tfork evidence: {len(kept)} conclusive note(s){more}")
    for item in kept:
        click.echo(f"  {item.label}: size {item.size} root {escaped(item.root)}")
    pending, dropped = state.pending(origin)
    if pending or dropped:
        more = f" (and {dropped} more not kept)" if dropped else ""
        click.echo(
            f"{escaped(origin)}\tpending: {len(pending)} note(s) whose proof did not verify, not evidence until "
            f"the witness cosigns their size{more}"
        )
        for note in pending:
            click.echo(f"  pending: size {note.size} root {escaped(note.root)}")


@witness_group.command("submit")
@click.option("--db", "db", metavar="PATH|URL", default=None,
              help="Database file or SQLAlchemy URL [default: $COMPUTE_BUDGET_DB, else ./compute_budget.db].")
@click.option("--witness", "witnesses", metavar="URL=KEY", multiple=True,
              help="A witness (URL prefix = its verifier key, type 0x04 or 0x06); repeatable.")
@click.option("--policy", "policy_path", metavar="FILE",
              help="A C2SP tlog-policy file: send to each of its witnesses that has a URL, instead of --witness.")
@click.option("--witness-timeout", "witness_timeout", type=click.FloatRange(min=0, min_open=True), default=5.0,
              show_default=True, metavar="SECONDS", help="Wait at most this long for the witnesses.")
@click.option("--trusted-key", "trusted_keys", metavar="KEY", multiple=True,
              help="A writer's verifier key (name+hash+key) or a file holding one; repeatable: send the newest stored "
              "checkpoint that verifies under one of them.")
def witness_submit_command(
    db: str | None, witnesses: tuple[str, ...], policy_path: str | None, witness_timeout: float,
    trusted_keys: tuple[str, ...],
) -> None:
    """Send the store's newest signed checkpoint to each witness and keep what they cosign (spec 9.5): how a
    writer catches up after a witness was down. With --trusted-key, the newest one a trusted writer signed.

    Exit 0 every witness cosigned; 1 one refused or could not be reached (one line each); 2 cannot run. With
    --policy, an optional witness (one its quorum does not reach) that does not cosign is a warning only, and exit
    1 also when the quorum is not met.
    """
    from compute_budget.auditor.checkpoints import policy_log_keys
    from compute_budget.cli.group import http_submitter, submit_targets
    from compute_budget.keys.key_files import verifier_key
    from compute_budget.store import BudgetStore
    from compute_budget.store.engine import locate
    from compute_budget.witness.client import witness_targets

    asked, policy = submit_targets(policy_path, witnesses)
    if not asked:
        raise click.BadParameter("give the witnesses to send to: --witness URL=KEY, or a --policy whose witnesses "
                                 "have URLs", param_hint="--witness")
    targets = witness_targets(asked)  # a malformed URL=KEY is said before the store is looked at
    keys = [verifier_key(item) for item in trusted_keys]
    sqlite_path = locate(db).sqlite_path
    if sqlite_path is not None and not sqlite_path.exists():
        with BudgetStore.open(db, readonly=True):
            pass  # the reader's own "does not exist" message; a writer would create an empty file
    with BudgetStore.open(db, allow_unsigned=True) as store:
        try:
            # A policy's log keys are the writer's (named by the store's origin, else refused): only a note one
            # of them signed is sent, as with --trusted-key.
            keys = policy_log_keys(keys, policy, store.origin())
            submitted = store.submit_to_witnesses(targets, timeout=witness_timeout, trusted_keys=keys,
                                                  submitter=http_submitter())
        except BaseException:
            store.discard_if_unused()  # a mistyped --db must not leave an empty database behind
            raise
    if not keys:  # a planted newer note would have been sent as it is: said once, after it was sent
        _say("warning: without --trusted-key the checkpoint sent is the newest stored one, unverified: give the "
             "writer's verifier key to send only one it signed")
    if _said_submitted(submitted, policy):
        click.get_current_context().exit(1)


def _said_submitted(submitted: list[Submitted], policy: TlogPolicy | None) -> bool:
    """One line per witness (an optional one tagged so), the policy's verdict; True when it is a failure: a
    counted witness that did not cosign, or the quorum not met."""
    from compute_budget.cli.group import policy_verdict

    optional = {witness.key for witness in policy.witnesses
                if witness.name in policy.optional_witnesses()} if policy is not None else set()
    for item in submitted:
        tag = " (optional: asked, not counted)" if item.witness.key in optional else ""
        if item.reason is None:
            click.echo(f"cosigned by {escaped(item.witness.label)}{tag}")
        else:  # not the writers' "retry with witness submit": this is it; run it again once the witness answers
            _say(f"warning: {item.witness.label}{tag}: {item.reason}")
    failed = any(item.reason is not None and item.witness.key not in optional for item in submitted)
    if policy is not None:
        cosigned = [item.witness.key for item in submitted if item.reason is None]
        click.echo(policy_verdict(policy, cosigned))
        failed = failed or not policy.evaluate(policy.names_of(cosigned)).met
    return failed


def _register() -> None:
    from compute_budget.cli.group import cli  # loaded first: this module is one of the group's lazy commands

    cli.add_command(witness_group)


_register()
