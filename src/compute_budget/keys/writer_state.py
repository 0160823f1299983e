"""The writer state file (spec 9.1, rule 2; spec 12.3): per origin, the newest checkpoint a writer key signed and
the heads its transactions committed, kept outside the database the insider controls.

The file is JSON, mode 0600, replaced whole (a temporary file in the same folder, then a rename), or overwritten in
place by a write that changes heads alone (`WriterState._overwritten` says why that is as safe)::

    {"compute_budget_writer_state": 2,
     "notes": {"<origin>": "<signed note>"},
     "heads": {"<origin>": {"committed": HEAD, "pending": HEAD or null}},
     "signed_at": {"<origin>": SECONDS}}

with HEAD ``{"size": N, "root": "<base64>", "chain_hash": "<hex>"}``. Format 1 (``notes`` only) is read, with no
heads, and written back as format 2 at the first write. ``pending`` is written before a transaction's COMMIT and
becomes ``committed`` after it; `resolve` says what a crash in between left. ``signed_at`` (optional) is the
time (Unix seconds, this host's clock) the note was signed: writers sharing the state with a checkpoint interval
sign at most once per interval between them (spec 12.1), timed by this file, never by the database.

``FILE.lock`` is a file that is never replaced: a writer holds an exclusive lock on it from before its transaction
begins until FILE is replaced, so writers sharing a key on one host queue there. Each write also puts a fresh token
in it, so a writer keeps what it read last in memory and reads the file again only when another process replaced
it since (the file's identity or the token changed).

No fsync, of the file or its folder (spec 12.3): fsyncing twice per transaction would cost more than the append
itself, and what a crash can leave is safe. After a process dies (`kill -9`) the page cache still holds the newest
state, and `resolve` turns its pending head into the committed one; after a power loss the file may be older than
the store (the database syncs, this file does not), so the writer finds a head it cannot place and refuses
(`StoreDamaged`) rather than sign it: docs/incident.md says how to adopt those rows (`record --adopt-unsigned`).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.encoding import strict_b64decode
from compute_budget.core.log.note import SignerKey
from compute_budget.errors import CheckpointError, InputError, NoteError, WriterStateError

WRITER_STATE_ENV_VAR = "COMPUTE_BUDGET_WRITER_STATE"
STATE_FORMAT = "compute_budget_writer_state"
STATE_VERSION = 2
READABLE_VERSIONS = (1, 2)
MAX_STATE_BYTES = 16 << 20
TOKEN_BYTES = 16
PAGE_BYTES = 4096  # the largest state written in place (one page: see `WriterState._overwritten`)
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class StateHead:
    """A head as the writer state records it: the tree `size`, its Merkle `root` and the head's `chain_hash`."""

    size: int
    root: bytes
    chain_hash: str

    def to_json(self) -> dict[str, object]:
        """The head's JSON form in the state file."""
        return {"size": self.size, "root": base64.b64encode(self.root).decode("ascii"), "chain_hash": self.chain_hash}

    @classmethod
    def from_json(cls, value: object) -> StateHead:
        """The head of a JSON value; `ValueError` when it is not one."""
        if not isinstance(value, dict) or set(value) != {"size", "root", "chain_hash"}:
            raise ValueError("not a head")
        size, root, chain_hash = value["size"], value["root"], value["chain_hash"]
        if type(size) is not int or size < 0 or not isinstance(root, str) or not isinstance(chain_hash, str):
            raise ValueError("not a head")
        if not _HEX64.fullmatch(chain_hash):
            raise ValueError("not a chain hash")
        decoded = strict_b64decode(root)
        if decoded is None or len(decoded) != 32:
            raise ValueError("not a root")
        return cls(size, decoded, chain_hash)

    @classmethod
    def of_note(cls, note: str) -> StateHead | None:
        """The head a checkpoint note names (None when it cannot be read or names no root)."""
        try:
            checkpoint = Checkpoint.from_note(note)
        except (CheckpointError, NoteError):
            return None
        if checkpoint.root is None:
            return None
        return cls(checkpoint.seq, checkpoint.root, checkpoint.chain_hash)


@dataclass(frozen=True, slots=True)
class OriginState:
    """What the state holds for one origin: the note this key signed last, and the `committed` and `pending`
    heads (spec 12.3). A format 1 state, or a note written before any head, has `committed` None."""

    note: str | None = None
    committed: StateHead | None = None
    pending: StateHead | None = None
    signed_at: float | None = None  # when `note` was signed (spec 12.1), if the signer said

    def committed_head(self) -> StateHead | None:
        """The newest head this writer committed: `committed`, else the head its note names."""
        if self.committed is not None:
            return self.committed
        return StateHead.of_note(self.note) if self.note is not None else None


def resolve(state: OriginState, head: StateHead) -> OriginState:
    """What a crash left, placed against the store's `head` (spec 12.3): a pending head the store holds was
    committed; one it does not hold never was, and is dropped when the store is at the committed head. Any other
    head leaves the state as it is (the writer's check then refuses it unless a trusted checkpoint names it)."""
    if state.pending is None:
        return state
    if state.pending == head:
        return OriginState(state.note, head, None, state.signed_at)
    if state.committed_head() == head:
        return OriginState(state.note, state.committed, None, state.signed_at)
    return state


@dataclass(slots=True)
class _Content:
    """The file's content: notes and heads per origin."""

    notes: dict[str, str]
    heads: dict[str, tuple[StateHead | None, StateHead | None]]
    signed_at: dict[str, float]

    def copy(self) -> _Content:
        return _Content(dict(self.notes), dict(self.heads), dict(self.signed_at))

    def origin(self, origin: str) -> OriginState:
        committed, pending = self.heads.get(origin, (None, None))
        return OriginState(self.notes.get(origin), committed, pending, self.signed_at.get(origin))

    def text(self) -> str:
        heads = {
            origin: {"committed": committed.to_json() if committed else None,
                     "pending": pending.to_json() if pending else None}
            for origin, (committed, pending) in sorted(self.heads.items())
        }
        document: dict[str, object] = {
            STATE_FORMAT: STATE_VERSION, "notes": dict(sorted(self.notes.items())), "heads": heads
        }
        if self.signed_at:
            document["signed_at"] = dict(sorted(self.signed_at.items()))
        # orjson: the standard library's encoder runs in Python once it indents (a quarter of a signed append's cost)
        return orjson.dumps(document, option=orjson.OPT_INDENT_2).decode("utf-8") + "\n"


def _parse(raw: bytes) -> _Content:
    """The content of a state file's bytes; `ValueError` when it is not a state file of a known format."""
    content = json.loads(raw.decode("utf-8"))
    version = content.get(STATE_FORMAT) if isinstance(content, dict) else None
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise ValueError("not a writer state")
    notes = content.get("notes")
    if not isinstance(notes, dict) or not all(
        isinstance(origin, str) and isinstance(note, str) for origin, note in notes.items()
    ):
        raise ValueError("no notes")
    heads: dict[str, tuple[StateHead | None, StateHead | None]] = {}
    if version >= 2:
        found = content.get("heads")
        if not isinstance(found, dict):
            raise ValueError("no heads")
        for origin, pair in found.items():
            if not isinstance(pair, dict) or set(pair) != {"committed", "pending"}:
                raise ValueError("not a pair of heads")
            committed, pending = (
                StateHead.from_json(pair[name]) if pair[name] is not None else None for name in ("committed", "pending")
            )
            heads[str(origin)] = (committed, pending)
    signed_at = content.get("signed_at", {})
    if not isinstance(signed_at, dict) or not all(
        type(value) in (int, float) and value >= 0 for value in signed_at.values()
    ):
        raise ValueError("signed_at is not a time per origin")
    return _Content(dict(notes), heads, {str(origin): float(value) for origin, value in signed_at.items()})


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
        # What this process read or wrote last, with the file's identity and the lock file's token then: while
        # both are unchanged no other process replaced the file, so it is not read again (one read per open, not
        # per transaction). Kept across locks; checked under each.
        self._cache: tuple[tuple[int, ...], bytes, _Content] | None = None

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
            os.close(handle)  # closing releases the lock

    def is_link(self) -> bool:
        """True when FILE is a symbolic link (refused whatever else is asked)."""
        return os.path.islink(self.path)

    def _require_locked(self) -> int:
        if self._lock_handle is None:  # pragma: no cover  (a programming error, not an input)
            raise RuntimeError("the writer state is read and written only under its lock")
        return self._lock_handle

    def note_for(self, origin: str) -> str | None:
        """The note this state holds for `origin`; None when the file is missing or empty or has none for it.
        `WriterStateError` when the file is a link, writable by group or others, or not a state file."""
        content = self._content()
        return content.notes.get(origin) if content is not None else None

    def origin_state(self, origin: str) -> OriginState:
        """The note and heads this state holds for `origin` (empty when it holds none); `WriterStateError` as
        `note_for`."""
        content = self._content()
        return content.origin(origin) if content is not None else OriginState()

    def save(
        self, origin: str, note: str | None, *, committed: StateHead | None = None, discard_unreadable: bool = False,
        signed_at: float | None = None,
    ) -> None:
        """After a commit: replace the file with one whose note for `origin` is `note` (None keeps the one held)
        and whose committed head is `committed` (default: the head `note` names), with no pending head; other
        origins kept. `signed_at`: when `note` was signed (a new note without it drops the time held). With
        `discard_unreadable`, as `--init-writer-state` asks, an unreadable file is replaced whole, but never a
        link."""
        content = self._writable(discard_unreadable)
        if note is not None:
            if content.notes.get(origin) != note or signed_at is not None:
                content.signed_at.pop(origin, None)
            if signed_at is not None:
                content.signed_at[origin] = signed_at
            content.notes[origin] = note
        head = committed if committed is not None else StateHead.of_note(note) if note is not None else None
        content.heads[origin] = (head or content.origin(origin).committed, None)
        self._write(content, failed="the rows are committed, but writer state {path} could not be written ({error}); "
                    "the next append checks the store against the older state")

    def prepare(self, origin: str, start: StateHead, pending: StateHead, *, discard_unreadable: bool = False) -> None:
        """Before a commit: record `pending` as the head the transaction that found the store at `start` is about
        to commit for `origin` (the note kept; the committed head as `resolve` places it against `start`). A
        failure here fails the transaction: nothing is written."""
        content = self._writable(discard_unreadable)
        committed = resolve(content.origin(origin), start).committed_head()
        content.heads[origin] = (committed, pending)
        self._write(content, failed="writer state {path} could not be written ({error}); nothing was written")

    def _writable(self, discard_unreadable: bool) -> _Content:
        try:
            content = self._content()
        except WriterStateError:
            if not discard_unreadable or self.is_link():
                raise
            content = None
        return content.copy() if content is not None else _Content({}, {}, {})

    def _content(self) -> _Content | None:
        """The file's content, read again only when another process replaced it since this one last read or
        wrote it; None when it is missing or empty."""
        handle = self._require_locked()
        info = self._checked_stat()
        if info is None:
            return None
        identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        token = os.pread(handle, TOKEN_BYTES, 0)
        if self._cache is not None and self._cache[:2] == (identity, token):
            return self._cache[2]
        content = self._read_file()
        self._cache = (identity, token, content) if content is not None else None
        return content

    def _checked_stat(self) -> os.stat_result | None:
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
        return info

    def _read_file(self) -> _Content | None:
        try:
            with open(self.path, "rb") as stream:
                raw = stream.read(MAX_STATE_BYTES + 1)
        except OSError as error:
            raise WriterStateError(f"cannot read writer state {self.path}: {error.strerror or error}") from None
        if raw.strip() == b"":
            return None
        try:
            return _parse(raw)
        except (UnicodeDecodeError, ValueError):
            raise WriterStateError(
                f"writer state {self.path} cannot be read (it is not a compute-budget writer state file)"
            ) from None

    def _write(self, content: _Content, *, failed: str) -> None:
        """Write `content` (in place when only heads change, else a temporary file and a rename; no fsync: see the
        module's docstring), then put a fresh token in the lock file so other processes know to read it again."""
        handle = self._require_locked()
        temporary = self.path.parent / f".{self.path.name}.{os.getpid()}.tmp"
        data = content.text().encode("utf-8")
        try:
            info = self._overwritten(data) if self._heads_only(content) else None
            if info is None:
                out = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                try:
                    os.fchmod(out, 0o600)
                    if os.write(out, data) != len(data):
                        raise OSError("short write")
                finally:
                    os.close(out)
                os.replace(temporary, self.path)
                info = os.lstat(self.path)
            token = os.urandom(TOKEN_BYTES)
            os.pwrite(handle, token, 0)
        except OSError as error:
            self._cache = None
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise WriterStateError(failed.format(path=self.path, error=error.strerror or error)) from None
        identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        self._cache = (identity, token, content)

    def _heads_only(self, content: _Content) -> bool:
        """True when `content` differs from the file as last read or written only in its heads."""
        held = self._cache[2] if self._cache is not None else None
        return held is not None and held.notes == content.notes and held.signed_at == content.signed_at

    def _overwritten(self, data: bytes) -> os.stat_result | None:
        """Write `data` over the file in place, in one `pwrite` of at most one page, padded with spaces (JSON's
        trailing whitespace) to the file's length; None (nothing written) when the file is not a small regular file
        this user alone may write, which is then replaced whole.

        Why in place: the writer state is written twice per append (the pending head, then the committed one), and
        a rename over an existing file costs a disk flush on ext4 (auto_da_alloc), more than the append itself. It
        is done only for a write that changes heads alone, never a note (spec 9.1 rule 2 replaces the note by a
        rename), and 12.3's rules still hold: a `kill -9` cannot split one write of a single page, so the file is
        the old content or the new, as with a rename (no fsync either way); after a power loss a torn page can
        hold only the same note bytes (the notes come first and are unchanged) and a mix of two heads this writer
        wrote, or an unreadable file, which is refused (`WriterStateError`) like any unreadable state."""
        try:
            out = os.open(self.path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            info = os.fstat(out)
            padded = data + b" " * max(info.st_size - len(data), 0)
            if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o022 or len(padded) > PAGE_BYTES:
                return None
            if os.pwrite(out, padded, 0) != len(padded):
                raise OSError("short write")
            return os.fstat(out)
        finally:
            os.close(out)


__all__ = ["OriginState", "StateHead", "WriterState", "resolve", "state_path_for"]
