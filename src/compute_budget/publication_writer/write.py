"""DIR on disk (spec 10.1, rule 3): an exclusive lock, files staged under a temporary name in their own folder and
renamed into place only once every one of them is ready, `DIR/checkpoint` last.

Every path is walked from DIR's own descriptor one name at a time, never following a symbolic link (`O_NOFOLLOW`,
`dir_fd`): a link anywhere inside DIR is refused, so nothing is read or written outside DIR, even through a link
planted while the publish runs. DIR itself may be a link (a served folder often is).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from compute_budget.errors import PublishBusy, PublishFolderRefused, PublishNoRoom, clip

LOCK_NAME = ".publish.lock"
CHECKPOINT_NAME = "checkpoint"
TEMPORARY_SUFFIX = ".publishing"  # ".<name>.publishing": a dotfile, replaced by the next publish if one is left
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# A write refused for lack of room: no space or no inode left (both ENOSPC), a quota, a file size limit (ulimit -f).
_NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def _rename(name: str, target: str, folder: int) -> None:
    """Rename within one folder (a name of its own so that tests can make it fail midway, as a crash would)."""
    os.rename(name, target, src_dir_fd=folder, dst_dir_fd=folder)


@dataclass(slots=True)
class _Staged:
    folder: int
    temporary: str
    name: str
    relative: str


@dataclass(slots=True)
class PublicationFolder:
    """DIR opened for one publish (see the module docstring): `stage` files, then `commit` them, or `discard`."""

    path: str
    _root: int
    _folders: dict[tuple[str, ...], int] = field(default_factory=dict)
    _created: list[tuple[str, ...]] = field(default_factory=list)
    _staged: list[_Staged] = field(default_factory=list)
    written: list[str] = field(default_factory=list)

    @classmethod
    @contextlib.contextmanager
    def locked(cls, path: str) -> Iterator[PublicationFolder]:
        """DIR (made when missing; its parent must exist) with `DIR/.publish.lock` held until the block ends;
        `PublishBusy` when another publish holds it. Anything still staged at the end is removed."""
        folder = cls(path, _open_root(path))
        try:
            lock = folder._open_file(LOCK_NAME, os.O_RDWR | os.O_CREAT, folder._root)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise PublishBusy(
                    f"another publish holds {os.path.join(path, LOCK_NAME)}: it is still running (one publish at a "
                    "time per folder; the next cron run catches up); nothing was written"
                ) from None
            try:
                yield folder
            finally:
                folder.discard()
                os.close(lock)
        finally:
            for descriptor in folder._folders.values():
                os.close(descriptor)
            os.close(folder._root)

    def read(self, relative: str, limit: int) -> bytes | None:
        """The file at `relative` (at most `limit` + 1 bytes of it), or None when there is none."""
        parts = relative.split("/")
        parent = self._folder(tuple(parts[:-1]), create=False)
        if parent is None:
            return None
        try:
            descriptor = self._open_file(parts[-1], os.O_RDONLY | os.O_NONBLOCK, parent, relative=relative)
        except FileNotFoundError:
            return None
        with os.fdopen(descriptor, "rb") as stream:
            if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
                raise self._refused(relative, "is not a regular file")
            return stream.read(limit + 1)

    def stage(self, relative: str, data: bytes) -> None:
        """Write `data` under a temporary name in the folder of `relative` (made as needed), to be renamed by
        `commit`."""
        parts = relative.split("/")
        parent = self._folder(tuple(parts[:-1]), create=True)
        assert parent is not None  # made when missing
        temporary = f".{parts[-1]}{TEMPORARY_SUFFIX}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        descriptor = self._open_file(temporary, flags, parent, relative=relative)
        self._staged.append(_Staged(parent, temporary, parts[-1], relative))
        try:
            with os.fdopen(descriptor, "wb") as stream:
                stream.write(data)
        except OSError as error:
            if error.errno in _NO_ROOM:
                raise self._no_room(relative, error, parent) from None
            raise
        self.written.append(relative)

    def commit(self) -> None:
        """Make every staged file durable, rename each into place in the order staged, then make the renames
        durable: a power cut never leaves a renamed file without its bytes."""
        if not self._staged:
            return
        try:
            _sync_filesystem(self._root)
        except OSError as error:
            if error.errno in _NO_ROOM and self._staged:
                raise self._no_room(self._staged[0].relative, error, self._root) from None
            raise
        touched: dict[int, None] = {}
        while self._staged:
            staged = self._staged[0]
            try:
                _rename(staged.temporary, staged.name, staged.folder)
            except OSError as error:
                if error.errno in _NO_ROOM:
                    raise self._no_room(staged.relative, error, staged.folder) from None
                raise
            self._staged.pop(0)
            touched[staged.folder] = None
        for descriptor in touched:
            os.fsync(descriptor)

    def discard(self) -> None:
        """Remove what is staged and not yet renamed, and the folders made for it that stayed empty."""
        for staged in self._staged:
            with contextlib.suppress(OSError):
                os.unlink(staged.temporary, dir_fd=staged.folder)
        self._staged.clear()
        for parts in reversed(self._created):
            parent = self._folders.get(parts[:-1]) if len(parts) > 1 else self._root
            if parent is not None:
                with contextlib.suppress(OSError):
                    os.rmdir(parts[-1], dir_fd=parent)  # only an empty one: a renamed file keeps its folder
        self._created.clear()

    def remove_folder(self, relative: str) -> bool:
        """Remove the folder `relative` and the files in it (a superseded partial tile's `.p` folder); False when
        there is none."""
        parts = tuple(relative.split("/"))
        parent = self._folder(parts[:-1], create=False)
        if parent is None:
            return False
        try:
            descriptor = os.open(parts[-1], _DIRECTORY, dir_fd=parent)
        except FileNotFoundError:
            return False
        except OSError as error:
            raise self._refused(relative, _why(error, parts[-1], parent)) from None
        try:
            for name in os.listdir(descriptor):
                os.unlink(name, dir_fd=descriptor)
        finally:
            os.close(descriptor)
        os.rmdir(parts[-1], dir_fd=parent)
        return True

    def tidy(self, folders: Iterable[str]) -> list[str]:
        """Remove from each of `folders` (relative to DIR; "" is DIR) what no checkpoint needs and a killed publish
        left: temporary files, and partial-tile folders whose full tile is there (rule 3 lets them go then). Call
        it with nothing staged; the paths removed."""
        assert not self._staged, "tidy runs after commit"
        removed: list[str] = []
        for folder in dict.fromkeys(folders):
            parts = tuple(folder.split("/")) if folder else ()
            descriptor = self._folder(parts, create=False)
            if descriptor is None:
                continue
            with os.scandir(descriptor) as listing:
                entries = {entry.name: entry for entry in listing}
            files = {name for name, entry in entries.items() if entry.is_file(follow_symlinks=False)}
            for name, entry in sorted(entries.items()):
                relative = f"{folder}/{name}" if folder else name
                if name.startswith(".") and name.endswith(TEMPORARY_SUFFIX) and name in files:
                    os.unlink(name, dir_fd=descriptor)
                    removed.append(relative)
                elif name.endswith(".p") and name[:-2] in files and entry.is_dir(follow_symlinks=False):
                    self.remove_folder(relative)
                    removed.append(relative)
        return removed

    def _folder(self, parts: tuple[str, ...], *, create: bool) -> int | None:
        """The descriptor of the folder DIR/`parts`, walked name by name; None when missing and not `create`."""
        if not parts:
            return self._root
        known = self._folders.get(parts)
        if known is not None:
            return known
        parent = self._folder(parts[:-1], create=create)
        if parent is None:
            return None
        try:
            descriptor = os.open(parts[-1], _DIRECTORY, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                return None
            descriptor = self._made(parts, parent)
        except OSError as error:
            raise self._refused("/".join(parts), _why(error, parts[-1], parent)) from None
        self._folders[parts] = descriptor
        return descriptor

    def _made(self, parts: tuple[str, ...], parent: int) -> int:
        """Make the folder DIR/`parts` in `parent` (its last name is missing there) and open it."""
        try:
            os.mkdir(parts[-1], 0o755, dir_fd=parent)
        except OSError as error:
            if error.errno in _NO_ROOM:
                raise self._no_room("/".join(parts), error, parent) from None
            raise
        self._created.append(parts)
        return os.open(parts[-1], _DIRECTORY, dir_fd=parent)

    def _open_file(self, name: str, flags: int, parent: int, *, relative: str | None = None) -> int:
        """Open `name` in `parent` without following a link (a link there is refused)."""
        try:
            return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=parent)
        except FileNotFoundError:
            raise
        except OSError as error:
            if error.errno in _NO_ROOM:
                raise self._no_room(relative or name, error, parent) from None
            raise self._refused(relative or name, _why(error, name, parent)) from None

    def _no_room(self, relative: str, error: OSError, folder: int) -> PublishNoRoom:
        """One line: the file, why there was no room for it, and that DIR still holds the previous publication
        (this is only raised before `DIR/checkpoint` is renamed)."""
        where = self.path.rstrip("/") or self.path
        return PublishNoRoom(
            f"cannot write {clip(os.path.join(self.path, relative), 200)}: {_room_words(error, folder)}; "
            f"{clip(where, 200)} still holds the previous publication (its checkpoint is unchanged): make room, "
            "then publish again, which completes it"
        )

    def _refused(self, relative: str, why: str) -> PublishFolderRefused:
        return PublishFolderRefused(
            f"{clip(os.path.join(self.path, relative), 200)} {why}: publish writes only real files and folders "
            "inside DIR and follows no symbolic link there; nothing was written"
        )


def _sync_filesystem(descriptor: int) -> None:
    """Flush the filesystem holding `descriptor` to disk: one syncfs(2) for every staged file (an fsync each costs
    milliseconds, a whole first publish thousands of them); sync(2) where syncfs is not available."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syncfs(descriptor) == 0:
            return
        failed = ctypes.get_errno()
    except (OSError, AttributeError):
        failed = errno.ENOSYS
    if failed not in (0, errno.ENOSYS):  # a write-back that failed (a full disk found late): the files are not safe
        raise OSError(failed, os.strerror(failed))
    os.sync()


def _room_words(error: OSError, folder: int) -> str:
    """What ran out, in words: ENOSPC is both no space and no inode left, told apart by the filesystem's counts."""
    if error.errno == errno.EDQUOT:
        return "the disk quota is used up (Disk quota exceeded; see `quota`)"
    if error.errno == errno.EFBIG:
        return "the file is over the size this process may write (File too large; see `ulimit -f`)"
    try:
        counts = os.fstatvfs(folder)
        no_inode = counts.f_files > 0 and counts.f_favail == 0
    except OSError:
        no_inode = False
    if no_inode:
        return "its filesystem has no free inode left (No space left on device; see `df -i`)"
    return "its filesystem is full (No space left on device; see `df -h`)"


def _why(error: OSError, name: str, parent: int) -> str:
    """An `OSError` met opening `name` in `parent` while walking DIR, in words (Linux says ENOTDIR or ELOOP for a
    link opened with O_NOFOLLOW, so the entry itself is looked at)."""
    try:
        link = stat.S_ISLNK(os.lstat(name, dir_fd=parent).st_mode)
    except OSError:
        link = False
    if link or error.errno == errno.ELOOP:
        return "is a symbolic link"
    if error.errno == errno.ENOTDIR:
        return "is not a folder"
    return f"cannot be used ({error.strerror or error})"


def _open_root(path: str) -> int:
    """DIR's descriptor, made when missing (its parent must exist)."""
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    except OSError as error:
        raise PublishFolderRefused(f"cannot make the folder {clip(path, 200)}: {error.strerror or error}") from None
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise PublishFolderRefused(
            f"{clip(path, 200)} cannot be used as DIR: {'not a folder' if error.errno == errno.ENOTDIR else error}"
        ) from None
