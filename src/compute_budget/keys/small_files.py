"""The small files an operator hands the tools (signer and verifier keys, checkpoints): regular files only, never
waited on (a FIFO or a device is refused at once), never read past a limit."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

from compute_budget.errors import ComputeBudgetError


def read_small_file(path: str, limit: int, what: str, error: Callable[[str], ComputeBudgetError]) -> bytes:
    """The bytes of the regular file at `path`, at most `limit` + 1 of them (the caller says what a longer one is).

    A missing file, a folder, a FIFO, device or socket, or a failed read raises `error` with one line naming
    `what` ("checkpoint file", "signing key", …)."""
    try:
        # Non-blocking: opening a FIFO would otherwise wait for a writer that may never come.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise error(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise error(f"{what} {path} is a folder, not a file") from None
    except OSError as failure:
        raise error(f"cannot read {what} {path}: {failure.strerror or failure}") from None
    try:
        mode = os.fstat(descriptor).st_mode
        if stat.S_ISDIR(mode):
            raise error(f"{what} {path} is a folder, not a file")
        if not stat.S_ISREG(mode):
            raise error(f"{what} {path} is not a regular file (a device, pipe or socket)")
        with os.fdopen(descriptor, "rb", closefd=False) as handle:
            return handle.read(limit + 1)
    except OSError as failure:
        raise error(f"cannot read {what} {path}: {failure.strerror or failure}") from None
    finally:
        os.close(descriptor)
