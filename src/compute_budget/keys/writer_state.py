"""The writer state file (spec 9.1, rule 2): the newest checkpoint a writer key signed, per origin, kept outside
the database the insider controls.

The file is JSON, ``{"compute_budget_writer_state": 1, "notes": {"<origin>": "<signed note>"}}``, mode 0600,
replaced whole (a temporary file in the same folder, then a rename). ``FILE.lock`` is a file that is never
replaced: a writer holds an exclusive lock on it from before its transaction begins until FILE is replaced, so
writers sharing a key on one host queue there. No fsync: a state left behind by a crash is older, never newer, than
the store, and an older state is still extended by the store.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from compute_budget.core.log.note import SignerKey
from compute_budget.errors import InputError, WriterStateError

WRITER_STATE_ENV_VAR = "COMPUTE_BUDGET_WRITER_STATE"
STATE_FORMAT = "compute_budget_writer_state"
MAX_STATE_BYTES = 16 << 20


def state_path_for(key_source: SignerKey | str | os.PathLike[str], writer_state: str | os.PathLike[str] | None) -> Path:
    """Where a key's state lives: `writer_state`, else ``$COMPUTE_BUDGET_WRITER_STATE``, else the key file's path
    plus ``.state``. A `SignerKey` object has no file: without either of the first two it is an `InputError`."""
    if writer_state is not None:
        return Path(os.fspath(writer_state))
    from_environment = os.environ.get(WRITER_STATE_ENV_VAR)
    if from_environment:
        return Path(from_environment)
    if isinstance(key_source, SignerKey):
        raise InputError(
            "a SignerKey object has no key file to keep its writer state beside: give writer_state= (a file path), "
            f"or set ${WRITER_STATE_ENV_VAR}"
        )
    return Path(os.fspath(key_source) + ".state")


class WriterState:
    """One state file, read and replaced only while its lock is held (`locked`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock_handle: int | None = None
        # What this lock's holder read (or wrote) last: under the lock no other writer replaces the file, so `save`
        # need not read it again after `note_for` (one read per signed append instead of two).
        self._held_notes: dict[str, str] | None = None

    @contextlib.contextmanager
    def locked(self) -> Iterator[WriterState]:
        """Hold the exclusive lock on ``FILE.lock`` (waiting for other writers) for the block."""
        lock_path = Path(str(self.path) + ".lock")
        folder = lock_path.parent
        if self.path.is_dir():  # refused before its lock is made beside it
            raise WriterStateError(f"writer state {self.path} is a folder: name a file with --writer-state FILE")
        if os.path.islink(lock_path):
            raise WriterStateError(f"writer state lock {lock_path} is a symbolic link (never followed)")
        try:
            handle = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as error:
            raise WriterStateError(
                f"cannot create the writer state {self.path} in folder {folder} ({error.strerror or error}): "
                "choose another place with --writer-state FILE"
            ) from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
            self._lock_handle = handle
            yield self
        finally:
            self._lock_handle = None
            self._held_notes = None
            os.close(handle)  # closing releases the lock

    def is_link(self) -> bool:
        """True when FILE is a symbolic link (refused whatever else is asked)."""
        return os.path.islink(self.path)

    def _require_locked(self) -> None:
        if self._lock_handle is None:  # pragma: no cover  (a programming error, not an input)
            raise RuntimeError("the writer state is read and written only under its lock")

    def note_for(self, origin: str) -> str | None:
        """The note this state holds for `origin`; None when the file is missing or empty or has none for it.
        `WriterStateError` when the file is a link, writable by group or others, or not a state file."""
        notes = self._read()
        return notes.get(origin) if notes is not None else None

    def _read(self) -> dict[str, str] | None:
        self._require_locked()
        notes = self._read_file()
        self._held_notes = dict(notes) if notes is not None else {}
        return notes

    def _read_file(self) -> dict[str, str] | None:
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise WriterStateError(f"cannot read writer state {self.path}: {error.strerror or error}") from None
        if stat.S_ISLNK(info.st_mode):
            raise WriterStateError(f"writer state {self.path} is a symbolic link; compute-budget never follows one")
        if not stat.S_ISREG(info.st_mode):
            raise WriterStateError(f"writer state {self.path} is not a regular file")
        if info.st_mode & 0o022:
            raise WriterStateError(
                f"writer state {self.path} has mode {stat.S_IMODE(info.st_mode):04o}: group or others may write it; "
                f"chmod 600 {self.path}"
            )
        if info.st_size > MAX_STATE_BYTES:
            raise WriterStateError(f"writer state {self.path} is not a writer state file (it is too large)")
        try:
            with open(self.path, "rb") as stream:
                raw = stream.read(MAX_STATE_BYTES + 1)
        except OSError as error:
            raise WriterStateError(f"cannot read writer state {self.path}: {error.strerror or error}") from None
        if raw.strip() == b"":
            return None
        try:
            content = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            content = None
        notes = content.get("notes") if isinstance(content, dict) and content.get(STATE_FORMAT) == 1 else None
        if not isinstance(notes, dict) or not all(
            isinstance(origin, str) and isinstance(note, str) for origin, note in notes.items()
        ):
            raise WriterStateError(
                f"writer state {self.path} cannot be read (it is not a compute-budget writer state file)"
            )
        return dict(notes)

    def save(self, origin: str, note: str, *, discard_unreadable: bool = False) -> None:
        """Replace the file with one whose note for `origin` is `note` (others kept; with `discard_unreadable`, as
        `--init-writer-state` asks, an unreadable file is replaced whole, but never a link)."""
        try:
            notes = dict(self._held_notes) if self._held_notes is not None else (self._read() or {})
        except WriterStateError:
            if not discard_unreadable or self.is_link():
                raise
            notes = {}
        notes[origin] = note
        text = json.dumps({STATE_FORMAT: 1, "notes": dict(sorted(notes.items()))}, ensure_ascii=False, indent=1)
        folder = self.path.parent
        temporary = folder / f".{self.path.name}.{os.getpid()}.tmp"
        try:
            handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                os.fchmod(handle, 0o600)
                content = (text + "\n").encode("utf-8")
                if os.write(handle, content) != len(content):
                    raise OSError("short write")
            finally:
                os.close(handle)
            os.replace(temporary, self.path)
            self._held_notes = notes
        except OSError as error:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise WriterStateError(
                f"the rows are committed, but writer state {self.path} could not be written "
                f"({error.strerror or error}); the next append checks the store against the older state"
            ) from None
