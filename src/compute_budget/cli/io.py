"""The command line's files: INPUT opened with one clear error per way it fails, output files written whole.

Hostile paths are the norm here: an INPUT may be a pipe, an output must never land on the database it reports
on, and a failed write leaves nothing half-written behind.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

import click

from compute_budget.errors import InputUnreadable, OutputUnwritable
from compute_budget.store.backend import locate


@contextmanager
def open_input(path: str) -> Iterator[BinaryIO]:
    """Open INPUT (`-` is stdin) for binary reading, with one clear error for each way it can fail."""
    if path == "-":
        yield sys.stdin.buffer
        return
    if os.path.isdir(path):
        raise InputUnreadable(f"input {path!r} is a folder, not a file of gates")
    try:
        stream = open(path, "rb")  # noqa: SIM115  (closed below; a with-block cannot yield the error we want)
    except FileNotFoundError:
        raise InputUnreadable(f"input file {path!r} does not exist") from None
    except OSError as error:
        raise InputUnreadable(f"cannot read input file {path!r}: {error.strerror or error}") from None
    with stream:
        yield _ReadErrorsNamed(stream, path)  # type: ignore[misc]


class _ReadErrorsNamed:
    """Lines of an input stream, where a read that fails midway (an I/O error) names the input."""

    def __init__(self, stream: BinaryIO, path: str) -> None:
        self._stream = stream
        self._path = path

    def fileno(self) -> int:
        return self._stream.fileno()

    def __iter__(self) -> Iterator[bytes]:
        lines = iter(self._stream)
        while True:
            try:
                line = next(lines)
            except StopIteration:
                return
            except OSError as error:
                raise InputUnreadable(f"cannot read input file {self._path!r}: {error.strerror or error}") from None
            yield line



def check_writable(option: str, path: str, db: str | None) -> None:
    database = locate(db).sqlite_path
    if database is not None:
        target = os.path.realpath(path)
        for guarded in (
            database,
            database.with_name(database.name + "-wal"),
            database.with_name(database.name + "-shm"),
        ):
            if target == os.path.realpath(guarded):
                raise click.BadParameter(f"{path} is the database being audited (or its journal)", param_hint=option)
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise click.BadParameter(f"{path} is a folder", param_hint=option)
    if not os.path.isdir(folder):
        raise click.BadParameter(f"folder {folder} does not exist", param_hint=option)
    if not os.access(folder, os.W_OK):
        raise click.BadParameter(f"folder {folder} is not writable", param_hint=option)


def check_keys_apart(keys: list[tuple[str, str]], outputs: list[tuple[str, str | None]]) -> None:
    """Refuse a key file that is also a file this command writes: the output would destroy the key."""
    for key_option, key_path in keys:
        for output_option, output_path in outputs:
            if output_path and os.path.realpath(key_path) == os.path.realpath(output_path):
                raise click.BadParameter(
                    f"{key_path} is the key file of {key_option}; {output_option} must not overwrite it",
                    param_hint=output_option,
                )


def write_atomically(path: str, text: str) -> None:
    """Write a whole file or nothing: a half-written checkpoint would fail tomorrow's audit."""
    import tempfile

    folder = os.path.dirname(os.path.abspath(path))
    try:
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=".compute-budget-", suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        try:  # mkstemp makes 0600: keep an existing file's mode, else what the umask gives a new file
            mode = os.stat(path).st_mode & 0o777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except OSError as error:
        raise OutputUnwritable(f"cannot write {path}: {error.strerror or error}") from None
