"""The sources the audit reads, built: a database read-only, or a publication over its transport. This layer sits
between the auditor, which reads any source through `auditor.source`'s protocols and never names one, and the
concrete sources below it (`store`, `publication`); the command line builds a source here once and hands it down."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from compute_budget.errors import NoHistory
from compute_budget.publication_reader.fetch import DEFAULT_TIMEOUT
from compute_budget.publication_reader.snapshot import Publication, PublicationTarget
from compute_budget.store import BudgetStore


def open_database(target: str | os.PathLike[str] | None) -> BudgetStore:
    """The store at a path or URL, read-only (None: `$COMPUTE_BUDGET_DB` or `compute_budget.db`)."""
    return BudgetStore.open(target, readonly=True)


def open_publication(location: str, *, timeout: float = DEFAULT_TIMEOUT) -> Publication:
    """The publication at a folder or an http(s) prefix, its checkpoint read and parsed once
    (`PublicationUnavailable` when it cannot be)."""
    return Publication.open(PublicationTarget(location, timeout=timeout))


def open_source(
    db: str | os.PathLike[str] | None = None, *, tiles: str | None = None, timeout: float = DEFAULT_TIMEOUT
) -> BudgetStore | Publication:
    """What the command line audits: the publication at `tiles` when given, else the database `db`."""
    return open_publication(tiles, timeout=timeout) if tiles is not None else open_database(db)


@contextlib.contextmanager
def opened_once(
    db: str | os.PathLike[str] | None = None, *, tiles: str | None = None, timeout: float = DEFAULT_TIMEOUT
) -> Iterator[BudgetStore | Publication | None]:
    """`open_source`, closed on leaving: the one opening of a command line's audit, handed down. None for a
    database whose history is gone (the audit opens it itself, to say so against the checkpoints it was given)."""
    source: BudgetStore | Publication | None
    try:
        source = open_source(db, tiles=tiles, timeout=timeout)
    except NoHistory:
        source = None
    if source is None:
        yield None
        return
    with source:
        yield source
