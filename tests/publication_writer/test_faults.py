"""`publish` under faults (issue item 8): a write refused for lack of room says in one line the file, DIR and that
DIR still holds the previous publication (never blaming a symbolic link), and what a publish killed after its
checkpoint's rename left (superseded partial tiles, temporary files) is removed by the next one."""

from __future__ import annotations

import errno
import os
import resource
import signal
from pathlib import Path
from typing import Any

import pytest

from compute_budget.errors import PublishNoRoom
from compute_budget.publication_writer.write import PublicationFolder
from tests.publishing_helpers import assert_valid_publication, leaf_inputs, published, published_files, record_signed
from tests.sealing import signer

pytestmark = pytest.mark.usefixtures("writer_state_env")

WRITER = signer("writer")


@pytest.fixture
def half_published(tmp_path: Path) -> tuple[str, Path]:
    """A store of 600 rows whose first 300 are published into DIR (SQLite: the faults are DIR's, not the store's)."""
    store = str(tmp_path / "store.db")
    record_signed(store, WRITER, 300)
    folder = tmp_path / "log"
    assert published(store, folder, WRITER).published
    record_signed(store, WRITER, 300, prefix="more")
    return store, folder


def _no_leftovers(folder: Path) -> None:
    assert [path.name for path in folder.rglob(".*") if path.name != ".publish.lock"] == []


def test_a_write_over_the_file_size_limit_names_the_file_and_keeps_the_previous_publication(
    half_published: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real refused write, no full disk needed: while DIR's files are written, RLIMIT_FSIZE is 4 KiB with SIGXFSZ
    ignored, so the kernel refuses the first entry bundle's write midway (EFBIG; the limit is lifted around the
    store's reads, which SQLite's shared memory file would trip). One line names the file and DIR, says DIR still
    holds the previous publication; nothing is left half-written, and without the limit the next publish completes."""
    store, folder = half_published
    before = published_files(folder)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    real_stage = PublicationFolder.stage

    def limited(self: PublicationFolder, relative: str, data: bytes) -> None:
        previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
        try:
            real_stage(self, relative, data)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            signal.signal(signal.SIGXFSZ, previous)

    monkeypatch.setattr(PublicationFolder, "stage", limited)
    with pytest.raises(PublishNoRoom) as raised:
        published(store, folder, WRITER)
    monkeypatch.undo()
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"cannot write {folder}/tile/entries/001: the file is over the size")
    assert f"{folder} still holds the previous publication" in message
    assert "symbolic link" not in message
    assert published_files(folder) == before
    _no_leftovers(folder)
    assert published(store, folder, WRITER).published
    assert_valid_publication(folder, leaf_inputs(store, 600), [WRITER.verifier()], size=600)


@pytest.mark.parametrize("call", ["open", "mkdir"])
def test_no_inode_left_is_said_as_such_and_never_blamed_on_a_link(
    half_published: tuple[str, Path], monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    """No inode left (simulated: the filesystem's ENOSPC on creating a file or a folder in DIR, and statvfs's
    zero free inodes; a real inode-starved filesystem needs a mount this suite cannot make): the line says the
    filesystem has no free inode and names the file; DIR keeps its publication."""
    store, folder = half_published
    before = published_files(folder)
    real_open, real_mkdir, real_statvfs = os.open, os.mkdir, os.fstatvfs

    def starved(real: Any, *args: Any, **kwargs: Any) -> Any:
        name = str(args[0])
        if name.endswith((".publishing", ".p")):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), name)
        return real(*args, **kwargs)

    def no_inodes(descriptor: int) -> Any:
        counts = list(real_statvfs(descriptor))
        counts[6] = 0  # f_ffree, then f_favail
        counts[7] = 0
        return os.statvfs_result(counts)

    monkeypatch.setattr(os, call, lambda *args, **kwargs: starved(real_open if call == "open" else real_mkdir,
                                                                   *args, **kwargs))
    monkeypatch.setattr(os, "fstatvfs", no_inodes)
    with pytest.raises(PublishNoRoom) as raised:
        published(store, folder, WRITER)
    monkeypatch.undo()
    message = str(raised.value)
    assert f"cannot write {folder}/tile/" in message
    assert "has no free inode left (No space left on device; see `df -i`)" in message
    assert f"{folder} still holds the previous publication" in message
    assert "symbolic link" not in message
    assert published_files(folder) == before
    _no_leftovers(folder)


def test_what_a_publish_killed_after_its_checkpoint_left_is_removed_by_the_next(
    half_published: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A publish from 300 to 600 rows killed right after renaming DIR/checkpoint (it never removed the partial
    tiles the full ones replaced), and temporary files an earlier killed run left: the next publish, with nothing
    new to publish, removes them all and nothing a checkpoint needs."""
    store, folder = half_published
    monkeypatch.setattr(PublicationFolder, "remove_folder", lambda self, relative: False)
    monkeypatch.setattr(PublicationFolder, "tidy", lambda self, folders: [])
    assert published(store, folder, WRITER).size == 600
    monkeypatch.undo()
    left = ["tile/0/001.p/44", "tile/entries/001.p/44"]
    assert all((folder / path).is_file() for path in left)
    temporary = [".checkpoint.publishing", "tile/entries/.002.publishing", "tile/0/002.p/.100.publishing",
                 "tile/1/000.p/.3.publishing"]
    for path in temporary:
        (folder / path).write_bytes(b"half")
    checkpoint = os.stat(folder / "checkpoint").st_mtime_ns
    outcome = published(store, folder, WRITER)
    assert outcome.written == ()
    assert sorted(outcome.tidied) == sorted([*temporary, "tile/0/001.p", "tile/entries/001.p"])
    assert not (folder / "tile/0/001.p").exists()
    assert not (folder / "tile/entries/001.p").exists()
    _no_leftovers(folder)
    assert os.stat(folder / "checkpoint").st_mtime_ns == checkpoint
    assert (folder / "tile/1/000.p/1").is_file()  # level 1's partials stay: no full tile there yet
    assert (folder / "tile/0/002.p/88").is_file()
    assert_valid_publication(folder, leaf_inputs(store, 600), [WRITER.verifier()], size=600)
