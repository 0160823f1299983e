"""What stops `publish` from running (exit 2): each a `ComputeBudgetError` whose message is one actionable line.

Results a person must look at (the audit's findings, `bad_signature`, `published_mismatch`) are not errors: they
come back in `PublishOutcome.refusal` or `PublishOutcome.report` (exit 1).
"""

from __future__ import annotations

from compute_budget.errors import ComputeBudgetError, InputError, StoreError


class PublishError(ComputeBudgetError):
    """A publication cannot be written as asked; nothing was written."""


class PublishFolderRefused(PublishError, InputError):
    """DIR cannot be used: not a folder, a symbolic link inside it, a file that cannot be read or written."""


class PublishBusy(PublishError):
    """Another `publish` holds DIR/.publish.lock."""


class NothingToPublish(PublishError, StoreError):
    """The store holds no checkpoint that verifies under a trusted key (and, with witness keys, carries K valid
    cosignatures)."""


class EntryTooLong(PublishError, StoreError):
    """A row whose leaf input is over 65,535 bytes (recorded before spec 9.9.8) cannot be a C2SP entry."""

    def __init__(self, message: str, *, seq: int) -> None:
        super().__init__(message)
        self.seq = seq
