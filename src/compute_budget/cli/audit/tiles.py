"""`audit --tiles LOCATION` (spec 10.2) and `prove --tiles` (10.3): a published log checked with no database. What
the command line adds: the usage rules, the publication's target, what --save-checkpoint keeps, and the receipt."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

import click

from compute_budget.errors import clip

if TYPE_CHECKING:
    from compute_budget.auditor.report import AuditReport
    from compute_budget.cli.trust import TrustOptions
    from compute_budget.core.log.cosignature import WitnessKey
    from compute_budget.core.log.witness_policy import TlogPolicy
    from compute_budget.core.receipts import ProofBundle

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")  # RFC 3986's scheme, as a location's start


def check_tiles_line(
    tiles: str, *, db: str | None, origin: str | None, trusted_keys: tuple[str, ...], checkpoint: str | None,
    cosign: str | None, policy: TlogPolicy | None = None,
) -> None:
    """The usage rules of --tiles (exit 2, one line): no --db; --origin and --trusted-key required."""
    if db is not None:
        raise click.BadParameter("--tiles audits a publication, --db a database: give one of them", param_hint="--db")
    if not origin:
        raise click.BadParameter(
            "--tiles needs the log's name: give --origin NAME (a publication's checkpoint must be of that log)",
            param_hint="--origin",
        )
    if not trusted_keys and (policy is None or not policy.logs):
        raise click.BadParameter(
            "--tiles needs the writer's verifier key: give --trusted-key KEY (the published checkpoint must carry "
            "its signature), or a --policy with a log line",
            param_hint="--trusted-key",
        )
    if checkpoint:
        raise click.BadParameter(
            "--tiles holds the publication's own checkpoint: use --since FILE for the one kept last night",
            param_hint="--checkpoint",
        )
    if cosign:
        raise click.BadParameter("--cosign needs the store's checkpoints: audit with --db to cosign",
                                 param_hint="--cosign")
    check_location(tiles)


def check_location(tiles: str) -> None:
    """--tiles names an http(s):// prefix or a folder that exists, else a usage error (exit 2, one line): an ftp: or
    file: URL would otherwise be read as a folder's name and reported as a publication missing its checkpoint."""
    if not tiles.strip():
        raise click.BadParameter("--tiles needs a folder or an http(s):// prefix", param_hint="--tiles")
    if tiles.lower().startswith(("http://", "https://")):
        return
    scheme = _SCHEME.match(tiles)
    # a folder may have a colon in its name; `scheme://` never names one, nor `scheme:` when no such folder exists
    if scheme is not None and (tiles[scheme.end():].startswith("//") or not os.path.isdir(tiles)):
        raise click.BadParameter(  # only the scheme is said: a URL may carry a password
            f"a {clip(scheme.group(1), 20)}: URL is not read: give a folder or an http:// or https:// prefix",
            param_hint="--tiles",
        )
    if not os.path.lexists(tiles):
        raise click.BadParameter(f"no such folder: {clip(tiles, 200)}", param_hint="--tiles")
    if not os.path.isdir(tiles):
        raise click.BadParameter(
            f"{clip(tiles, 200)} is not a folder: give the folder holding the publication's checkpoint and tile/, "
            "or an http(s):// prefix",
            param_hint="--tiles",
        )


def url_keys(urls: tuple[str, ...]) -> tuple[WitnessKey, ...]:
    """The keys of the --witness-url witnesses, whose cosignatures date the published checkpoint."""
    from compute_budget.witness.client import WitnessTarget

    return tuple(WitnessTarget.parse(url).key for url in urls)


def with_redirects(report: AuditReport, source: object) -> AuditReport:
    """The report of a publication read through redirects, saying them as a warning (spec 11.7.2)."""
    import dataclasses

    from compute_budget.publication_reader.snapshot import Publication

    warning = source.redirects.warning() if isinstance(source, Publication) else None
    return dataclasses.replace(report, warnings=(*report.warnings, warning)) if warning else report


def published_to_keep(report: AuditReport) -> tuple[str, int, str | None] | None:
    """Without witness keys, --save-checkpoint keeps the published checkpoint as signed (the next night's --since
    is then accepted on the writer's signature)."""
    published = report.checkpoint
    if published is None or published.note is None:
        return None
    return published.note, published.seq, None


def prove_from_tiles(
    tiles: str | None, budget_id: str | None, seq: int | None, *, db: str | None, checkpoint: str | None,
    trust: TrustOptions, rule: TlogPolicy | None, origin: str | None,
) -> ProofBundle:
    """`prove --tiles LOCATION --trusted-key KEY ... [--origin NAME] (BUDGET_ID | --seq N)` (spec 10.3, 11.2): its
    usage rules and a checkpoint that does not count (checked before any tile is read) exit 2, an unknown budget_id
    or seq exits 1. With a policy naming several logs, --origin is required (as for `verify-proof`)."""
    from compute_budget.cli.keys_and_proofs import receipt_keys
    from compute_budget.errors import UnknownBudgetId
    from compute_budget.publication_reader.receipt import prove_published
    from compute_budget.publication_reader.snapshot import PublicationTarget

    if tiles is None:
        raise click.BadParameter("--seq names a row of a publication: give --tiles LOCATION", param_hint="--seq")
    check_location(tiles)
    if db is not None or checkpoint is not None:
        raise click.BadParameter("--tiles proves against the publication's own checkpoint: no --db or --checkpoint",
                                 param_hint="--tiles")
    if (budget_id is None) == (seq is None):
        raise click.BadParameter("give a BUDGET_ID or --seq N, not both", param_hint="--seq")
    if not trust.trusted_keys and (rule is None or not rule.logs):
        raise click.BadParameter("--tiles verifies the publication's checkpoint: give --trusted-key KEY (or a "
                                 "--policy with a log line)", param_hint="--trusted-key")
    keys, origin = receipt_keys(trust.writer_keys(), rule, origin)
    try:
        return prove_published(PublicationTarget(tiles), trusted_keys=keys, budget_id=budget_id, seq=seq,
                               witness_policy=rule, origin=origin, key_states=trust.key_states())
    except UnknownBudgetId as unknown:
        from compute_budget.cli.program import say

        say(str(unknown))
        click.get_current_context().exit(1)
        raise  # unreachable: exit raises
