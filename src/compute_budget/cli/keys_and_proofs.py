"""The seal's commands (spec section 8): `keygen`, `verifier-key`, `prove`, `verify-proof` and `consistency`.

The seal's options of the older commands (`record --signing-key`, `checkpoint --signing-key`, `audit
--trusted-key/--cosign`) live with those commands.
"""

from __future__ import annotations

import re
import sys
import time
from typing import TYPE_CHECKING

import click

from compute_budget.cli.group import cli, db_option
from compute_budget.cli.program import say
from compute_budget.cli.trust import TrustOptions, trust_options, trusted_key_option

if TYPE_CHECKING:
    from compute_budget.core.log.note import VerifierKey
    from compute_budget.core.log.witness_policy import TlogPolicy
    from compute_budget.core.receipts import ProofBundle

# `prove --format`: the project's JSON bundle (the default) or C2SP's tlog-proof (spec 10.3).
PROOF_V1, TLOG_PROOF = "compute_budget.proof.v1", "tlog-proof"


@cli.command("keygen")
@click.argument("name")
@click.option(
    "--out", "out_path", metavar="FILE", help="Where to write the signer key [default: NAME with / as _, plus .key]."
)
@click.option(
    "--witness", is_flag=True, help="Make a witness key (C2SP cosignature type 0x04) for `witness serve --key`."
)
@click.option(
    "--ml-dsa", "ml_dsa", is_flag=True,
    help="With --witness: an ML-DSA-44 witness key (C2SP type 0x06, post-quantum, subtree/v1) instead of Ed25519.",
)
def keygen_command(name: str, out_path: str | None, witness: bool, ml_dsa: bool) -> None:
    """Make a new Ed25519 signer key named NAME: write it to a new file (mode 0600, never overwritten) and print
    its verifier key, the public half to hand to auditors and verifiers. With --witness, a witness's key
    (spec 9.2): its verifier key is what `--witness-key` and `--witness URL=KEY` take; with --witness --ml-dsa,
    an ML-DSA-44 witness key (C2SP tlog-cosignature type 0x06). Writers' keys are Ed25519 only."""
    from compute_budget.core.log.cosignature import generate_witness
    from compute_budget.core.log.note import generate_signer
    from compute_budget.keys.key_files import default_key_file, write_new_signer_key

    if ml_dsa and not witness:
        raise click.BadParameter(
            "an ML-DSA-44 key is a witness's key (C2SP tlog-cosignature): add --witness; a writer's key is Ed25519",
            param_hint="--ml-dsa",
        )
    key = generate_witness(name, ml_dsa=ml_dsa) if witness else generate_signer(name)
    path = write_new_signer_key(out_path or default_key_file(name), key)
    click.echo(key.verifier().format())
    kind = ("ML-DSA-44 witness" if ml_dsa else "witness") if witness else "signer"
    say(f"wrote {kind} key {path} (mode 0600: keep it secret; give out the verifier key above)")


@cli.command("verifier-key")
@click.argument("key_path", metavar="FILE")
def verifier_key_command(key_path: str) -> None:
    """Print the verifier key of the signer key in FILE (made by keygen, a witness key too): the public half
    again, for a verifier key that was lost or never printed. Exit 0; 2 when FILE holds no signer key."""
    from compute_budget.keys.key_files import load_any_signer

    click.echo(load_any_signer(key_path).verifier().format())


@cli.command("prove")
@click.argument("budget_id", required=False)
@db_option
@click.option("--tiles", metavar="LOCATION", help="Prove from a publication (a folder or http(s):// prefix); no --db.")
@click.option("--seq", type=click.IntRange(min=1), metavar="N", help="With --tiles: the row N (1-based).")
@click.option("--origin", metavar="NAME", help="With --tiles: the log the publication's checkpoint must be of "
              "(required when --policy names several logs).")
@click.option(
    "--checkpoint",
    "checkpoint_path",
    metavar="FILE",
    help="Prove against this signed checkpoint [default: the newest stored one covering the row].",
)
@trusted_key_option(
    "Use only a checkpoint whose signature by this writer key verifies (verifier key text, else a file): "
    "the newest stored one covering the row; repeatable. Without it the stored note is used unverified."
)
@trust_options
@click.option(
    "--format",
    "output_format",
    type=click.Choice([PROOF_V1, TLOG_PROOF]),
    default=PROOF_V1,
    show_default=True,
    help="compute_budget.proof.v1 (JSON), or a C2SP tlog-proof whose extra data is the row's leaf input.",
)
def prove_command(
    budget_id: str | None,
    db: str | None,
    tiles: str | None,
    seq: int | None,
    origin: str | None,
    checkpoint_path: str | None,
    trust: TrustOptions,
    output_format: str,
) -> None:
    """Print the receipt of decision BUDGET_ID (64 hex digits, or a unique prefix of 8 or more): the row, its
    inclusion path and a signed checkpoint, for `compute-budget verify-proof` without the database. The default
    is the JSON proof bundle; --format tlog-proof prints a C2SP tlog-proof (the row's leaf input as its extra
    data, index = seq - 1).

    Exit 0 printed; 1 no such decision; 2 cannot run (a checkpoint that does not cover the row, say, or for a
    tlog-proof no signed checkpoint covering it).
    """
    from compute_budget.auditor.proving import prove
    from compute_budget.auditor.scan import load_checkpoint
    from compute_budget.errors import UnknownBudgetId
    from compute_budget.store import BudgetStore

    rule = trust.witness_rule()
    wanted = _checked_budget_id(budget_id)
    if tiles is not None or seq is not None:  # spec 10.3: from a publication
        from compute_budget.cli.audit.tiles import prove_from_tiles

        bundle_from_tiles = prove_from_tiles(tiles, wanted, seq, db=db, checkpoint=checkpoint_path, trust=trust,
                                             rule=rule, origin=origin)
        _print_receipt(bundle_from_tiles, output_format, verified=True)
        return
    if wanted is None:
        raise click.BadParameter("give the decision's budget_id", param_hint="BUDGET_ID")
    if origin is not None:
        raise click.BadParameter("--origin checks a publication's checkpoint: it goes with --tiles",
                                 param_hint="--origin")
    keys = trust.writer_keys()
    checkpoint = load_checkpoint(checkpoint_path) if checkpoint_path else None
    if len(wanted) < 64:
        with BudgetStore.open(db, readonly=True) as store:
            found = store.find(wanted)
        if len(found) > 1:
            raise click.BadParameter(f"prefix {wanted} matches more than one decision", param_hint="BUDGET_ID")
        wanted = found[0].decision.budget_id if found else wanted
    try:
        bundle = prove(wanted, db, checkpoint=checkpoint, trusted_keys=keys, witness_policy=rule,
                       key_states=trust.key_states())
    except UnknownBudgetId as unknown:
        say(str(unknown))
        click.get_current_context().exit(1)
    _print_receipt(bundle, output_format, verified=bool(keys) or bool(rule and rule.logs))


def _checked_budget_id(budget_id: str | None) -> str | None:
    """BUDGET_ID as lower-case hex, 8 to 64 digits (None when not given); anything else is a usage error (exit 2),
    with --tiles too, where it would otherwise cost a scan of every entry bundle to find no row."""
    if budget_id is None:
        return None
    wanted = budget_id.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{8,64}", wanted):
        raise click.BadParameter(
            f"{budget_id[:80]!r} is not a budget_id: give its 64 hex digits (or a unique prefix of at least 8)",
            param_hint="BUDGET_ID",
        )
    return wanted


def _print_receipt(bundle: ProofBundle, output_format: str, *, verified: bool) -> None:
    """Print `bundle` in `output_format`, warning on stderr when its note is unsigned or was not verified; a
    tlog-proof of an unsigned note is refused (exit 2): a C2SP checkpoint is a signed note."""
    from compute_budget.core.log.checkpoint import Checkpoint
    from compute_budget.errors import ProofError

    again = "record with a signing key (or run `compute-budget checkpoint --signing-key`) and prove again"
    if not Checkpoint.from_note(bundle.checkpoint).signatures():
        if output_format == TLOG_PROOF:
            raise ProofError(
                f"no signed checkpoint covers row {bundle.leaf_index + 1}, and a tlog-proof carries a signed "
                f"checkpoint (C2SP tlog-checkpoint); {again}"
            )
        say(
            f"warning: no signed checkpoint covers row {bundle.leaf_index + 1}: this receipt's checkpoint is unsigned, "
            f"so verify-proof will refuse it; {again}"
        )
    elif not verified:
        say(
            "warning: this receipt's checkpoint note is unverified (no --trusted-key): a note planted in the store "
            "would make verify-proof refuse it; give the writer's verifier key with --trusted-key"
        )
    if output_format == TLOG_PROOF:
        click.echo(bundle.to_tlog_proof().encode(), nl=False)
    else:
        click.echo(bundle.to_json())


@cli.command("verify-proof")
@click.argument("bundle_path", metavar="FILE")
@trusted_key_option(
    "A verifier key (name+hash+key) or a file holding one; repeatable. Required unless --policy has a log line."
)
@click.option("--origin", metavar="NAME", help="Also require the checkpoint to be of this log.")
@trust_options
def verify_proof_command(bundle_path: str, origin: str | None, trust: TrustOptions) -> None:
    """Check a receipt (FILE, '-' for stdin) offline, without any database: a proof bundle, or a C2SP tlog-proof
    (told apart by the first line). A trusted signature on its checkpoint, the inclusion path to the checkpoint's
    root, and the decision re-derived from its gate; a tlog-proof's extra data is hashed as the leaf at its index,
    and its line always says `chain_hash not covered`.

    Exit 0 valid; 1 invalid (the line says which check failed); 2 an unreadable or incomplete receipt (a
    tlog-proof without extra data: no entry).
    """
    from compute_budget.core.receipts import verify_proof
    from compute_budget.errors import InputUnreadable

    rule = trust.witness_rule()
    keys, origin = receipt_keys(trust.writer_keys(), rule, origin)
    states = trust.key_states()
    try:
        if bundle_path == "-":
            raw = sys.stdin.buffer.read(MAX_BUNDLE_BYTES + 1)
        else:
            with open(bundle_path, "rb") as handle:
                raw = handle.read(MAX_BUNDLE_BYTES + 1)
    except OSError as error:
        raise InputUnreadable(f"cannot read proof bundle {bundle_path}: {error.strerror or error}") from None
    if len(raw) > MAX_BUNDLE_BYTES:  # /dev/zero, say: read no further than any bundle could be
        raise InputUnreadable(f"proof bundle {bundle_path} is larger than {MAX_BUNDLE_BYTES >> 20} MiB: not a bundle")
    from compute_budget.cli.render import escaped

    result = verify_proof(raw, keys, origin=origin, policy=rule, now=int(time.time()), key_states=states)
    # Every string a bundle carries reaches the line (spec 9.6): escaped, so a bundle made with a stolen key can
    # neither drive the terminal nor forge a second line.
    if result.valid:
        click.echo(escaped(result.message))
        return
    click.echo(f"invalid ({result.check}): {escaped(result.message)}")
    click.get_current_context().exit(1)


def receipt_keys(
    keys: list[VerifierKey], rule: TlogPolicy | None, origin: str | None
) -> tuple[list[VerifierKey], str | None]:
    """The writer keys a receipt may be signed by and the origin it must be of: --trusted-key, and a policy's log
    keys (C2SP names each by its log's origin, which a receipt's checkpoint must then be of); exit 2 with neither."""
    by_origin = rule.log_keys_by_origin() if rule is not None else {}
    if by_origin and origin is None:
        if len(by_origin) > 1:
            raise click.BadParameter(
                f"the policy names {len(by_origin)} logs: give --origin NAME, the one the receipt is of",
                param_hint="--origin",
            )
        origin = next(iter(by_origin))
    if rule is not None and origin is not None:
        keys = list(dict.fromkeys([*keys, *rule.store_log_keys(origin)]))
    if not keys:
        raise click.BadParameter("give the writer's verifier key (--trusted-key KEY), or a --policy with a log line",
                                 param_hint="--trusted-key")
    return keys, origin


# A bundle holds one row: its gate input is the only large part, and no gate that size is sensible.
MAX_BUNDLE_BYTES = 256 << 20


@cli.command("consistency")
@click.argument("old_path", metavar="OLD")
@db_option
@trusted_key_option("Require OLD to carry a valid signature by this key (a verifier key or a file); repeatable.")
@click.option(
    "--auditor-key",
    "auditor_key",
    metavar="KEY",
    help="Also require OLD to carry a valid signature by this auditor (the verifier key of `audit --cosign`).",
)
@trust_options
def consistency_command(old_path: str, db: str | None, auditor_key: str | None, trust: TrustOptions) -> None:
    """Prove that the store extends the older checkpoint OLD (a signed checkpoint, or a JSON checkpoint with a
    root) and print the checked consistency proof (JSON).

    Exit 0 the store extends OLD; 1 it does not (another log, untrusted, truncated or rewritten); 2 OLD unusable.
    """
    from compute_budget.auditor.proving import prove_consistency
    from compute_budget.auditor.scan import load_checkpoint
    from compute_budget.errors import NotConsistent
    from compute_budget.keys.key_files import verifier_key

    rule = trust.witness_rule()
    old = load_checkpoint(old_path)
    keys = trust.writer_keys()
    try:
        proof = prove_consistency(
            old, db, trusted_keys=keys, witness_policy=rule,
            auditor_key=verifier_key(auditor_key) if auditor_key is not None else None,
            key_states=trust.key_states(),
        )
    except NotConsistent as failed:
        if failed.reason == "untrusted":  # not a verdict on the store: the old checkpoint is not the one asked for
            say(f"the old checkpoint is untrusted: {failed.detail}; the store was not compared with it")
        else:
            say(f"the store {failed}")
        click.get_current_context().exit(1)
    click.echo(proof.to_json())
