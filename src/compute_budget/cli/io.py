"""The command line's files: INPUT opened with one clear error per way it fails, output files written whole.

Hostile paths are the norm here: an INPUT may be a pipe, an output must never land on the database it reports
on, and a failed write leaves nothing half-written behind.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import BinaryIO

import click

from compute_budget.errors import InputUnreadable, OutputUnwritable


@contextmanager
def open_input(path: str) -> Iterator[BinaryIO]:
    """Open INPUT (`-` is stdin) for binary reading, with one clear error for each way it can fail."""
    if path == "-":
        yield _ReadErrorsNamed(sys.stdin.buffer, "-")  # type: ignore[misc]
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


SPOOL_IN_MEMORY_BYTES = 64 * 1024 * 1024


def _is_regular(stream: BinaryIO) -> bool:
    try:
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):
        return False


@contextmanager
def read_ahead(stream: BinaryIO, name: str) -> Iterator[BinaryIO]:
    """`stream` itself when it is a regular file; the whole of it, read first, when it is a pipe (stdin or a
    FIFO): `record` holds the append lock while it reads, and a slow producer must not make other writers wait."""
    if _is_regular(stream):
        yield stream
        return
    with _spooled(stream, name) as spooled:
        yield spooled


@contextmanager
def _spooled(stream: BinaryIO, name: str) -> Iterator[BinaryIO]:
    """The whole of a streamed INPUT, read before the caller starts (memory first, then a temporary file)."""
    import tempfile

    with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY_BYTES, prefix="compute-budget-input-") as spool:
        try:
            for line in stream:
                spool.write(line)
        except OSError as error:  # the temporary file (a full disk); a failed read says so itself
            raise InputUnreadable(f"cannot keep input {name!r} aside: {error.strerror or error}") from None
        spool.seek(0)
        yield spool  # type: ignore[misc]


# No gate is anywhere near this long (the largest real ones are kilobytes); a longer line is a device such as
# /dev/zero or a file that is no JSON Lines, and reading it to its end would only fill the memory.
MAX_LINE_BYTES = 64 << 20


class _ReadErrorsNamed:
    """Lines of an input stream, where a read that fails midway (an I/O error) names the input, and a line longer
    than `MAX_LINE_BYTES` stops the reading with one clear error instead of growing without end."""

    def __init__(self, stream: BinaryIO, path: str) -> None:
        self._stream = stream
        self._path = path

    def fileno(self) -> int:
        return self._stream.fileno()

    def __iter__(self) -> Iterator[bytes]:
        shown = "stdin" if self._path == "-" else f"input file {self._path!r}"
        number = 0
        while True:
            try:
                line = self._stream.readline(MAX_LINE_BYTES + 1)
            except OSError as error:
                raise InputUnreadable(f"cannot read {shown}: {error.strerror or error}") from None
            if not line:
                return
            number += 1
            if len(line) > MAX_LINE_BYTES:
                raise InputUnreadable(
                    f"{shown}: line {number} is longer than {MAX_LINE_BYTES >> 20} MiB, which no gate is "
                    "(is INPUT a device, or not JSON Lines?)"
                )
            yield line

    def read(self, size: int) -> bytes:
        """At most `size` bytes (`Blocks` names a failed read)."""
        return self._stream.read(size)


# A JSON array (spec 9.9.9) is read in blocks, not lines: `json.dump` writes one line however long the array.
BLOCK_BYTES = 1 << 20


class Blocks:
    """INPUT in blocks of at most `BLOCK_BYTES`, whatever its lines: memory holds one block, never the file. A
    read that fails midway names the input; `fileno` lets a progress bar see the size."""

    def __init__(self, stream: BinaryIO, name: str) -> None:
        self._stream = stream
        self._name = name

    def fileno(self) -> int:
        return self._stream.fileno()

    def __iter__(self) -> Iterator[bytes]:
        while True:
            try:
                block = self._stream.read(BLOCK_BYTES)
            except OSError as error:
                raise InputUnreadable(f"cannot read {self._name}: {error.strerror or error}") from None
            if not block:
                return
            yield block


def check_writable(
    option: str, path: str, *, db: str | None, keep: Sequence[tuple[str, str]] = (), doing: str = "audited"
) -> None:
    """Refuse an output path that would destroy what the command reads or be no file at all.

    Guarded: a symbolic link (never written through, spec 9.3: a planted link would aim the write at a key file),
    the database and its `-wal`, `-shm` and `-journal` files, every input given to the same command
    (`keep`: (option, path) pairs such as the checkpoint being read or a key file), and anything that is not a
    regular file (a device, FIFO or socket, `/dev/null` and `/dev/stdout` included, or a link to one): writing
    atomically replaces the path, which would turn a device name into an ordinary file. `doing` says what the
    command does to the database ("the database being audited").
    """
    if path == "-":  # stdin for an INPUT; as an output it would quietly become a file named '-'
        raise click.BadParameter(
            "'-' names no file here: leave the option out to write to stdout, or name a file", param_hint=option
        )
    target = os.path.realpath(path)
    from compute_budget.store.engine import locate  # here: `--help` and `decide` load no database code

    database = locate(db).sqlite_path
    if database is not None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            if target == os.path.realpath(database.with_name(database.name + suffix)):
                raise click.BadParameter(
                    f"{path} is the database being {doing}{' (its ' + suffix[1:] + ' file)' if suffix else ''}",
                    param_hint=option,
                )
    for other_option, other_path in keep:
        if other_path and target == os.path.realpath(other_path):
            raise click.BadParameter(f"{path} is also given to {other_option}; it would be replaced", param_hint=option)
    if os.path.isdir(path):
        raise click.BadParameter(f"{path} is a folder", param_hint=option)
    if target.startswith(("/dev/", "/proc/")) or (os.path.lexists(path) and not os.path.isfile(path)):
        raise click.BadParameter(
            f"{path} is not a regular file (a device, pipe, socket or broken link); name a file", param_hint=option
        )
    if os.path.islink(path):
        raise click.BadParameter(
            f"{path} is a symbolic link: compute-budget never writes through one (name the file itself)",
            param_hint=option,
        )
    folder = os.path.dirname(os.path.abspath(path))
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

    if os.path.islink(path):  # checked again here: a link planted after the options were checked
        raise OutputUnwritable(f"{path} is a symbolic link: compute-budget never writes through one")
    folder = os.path.dirname(os.path.abspath(path))
    temporary: str | None = None
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
    except BaseException as error:
        if temporary is not None:  # a full disk (or anything else) must not leave .compute-budget-*.tmp behind
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        if isinstance(error, OSError):
            raise OutputUnwritable(f"cannot write {path}: {error.strerror or error}") from None
        raise
