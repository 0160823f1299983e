"""`publish` (spec 10.1) on both backends: what it writes, what stops it, and what DIR is after a crash midway."""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

import pytest

from compute_budget import BudgetStore
from compute_budget.core.log.merkle import MemoryTree, consistency_proof, inclusion_proof
from compute_budget.core.log.note import sign_note
from compute_budget.core.log.tile_reader import TileNodeReader
from compute_budget.core.log.tiles import Tile, parse_tile_path
from compute_budget.core.verify import FindingKind
from compute_budget.errors import EntryTooLong, NothingToPublish, PublishBusy, PublishFolderRefused
from compute_budget.publication_writer import write
from tests.backends import insert_sql, tamper
from tests.publishing_helpers import (
    assert_valid_publication,
    full_tile,
    leaf_inputs,
    published,
    published_files,
    record_signed,
)
from tests.sealing import forged_row, signer

pytestmark = pytest.mark.usefixtures("writer_state_env")  # SignerKey objects keep their state there

WRITER = signer("writer")


def _stat(folder: Path, path: str) -> tuple[int, int]:
    """(inode, mtime in ns) of a published file: a rewrite changes one or the other."""
    found = os.stat(folder / path)
    return found.st_ino, found.st_mtime_ns


@pytest.mark.postgres_smoke
def test_a_first_publish_is_the_trees_tiles_and_bundles(store_target: str, tmp_path: Path) -> None:
    """600 rows: DIR holds exactly the checkpoint and C2SP's tiles and bundles of the tree of their leaf inputs
    (the core's, from a MemoryTree), and the checkpoint names the RFC 6962 root of those leaves."""
    record_signed(store_target, WRITER, 600)
    folder = tmp_path / "log"
    outcome = published(store_target, folder, WRITER)
    assert outcome.published
    assert (outcome.previous, outcome.size) == (0, 600)
    entries = leaf_inputs(store_target, 600)
    assert_valid_publication(folder, entries, [WRITER.verifier()], size=600)
    assert sorted(published_files(folder)) == sorted([
        "checkpoint", "tile/0/000", "tile/0/001", "tile/0/002.p/88", "tile/1/000.p/2",
        "tile/entries/000", "tile/entries/001", "tile/entries/002.p/88",
    ])
    assert outcome.written[-1] == "checkpoint"  # written last (rule 3)


@pytest.mark.postgres_smoke
def test_an_incremental_publish_writes_only_new_files(store_target: str, tmp_path: Path) -> None:
    """From 300 to 600 rows: only the new full tiles and bundles, the new partial ones and the checkpoint are
    written; the full tile and bundle already published keep their inode and mtime (never rewritten); the partial
    tile and bundle of size 300 go once the full ones at their position are there; level 1's stays (a partial tile
    of every published size is kept until its full tile exists)."""
    record_signed(store_target, WRITER, 300)
    folder = tmp_path / "log"
    published(store_target, folder, WRITER)
    before = {path: _stat(folder, path) for path in ("tile/0/000", "tile/entries/000", "tile/1/000.p/1")}
    record_signed(store_target, WRITER, 300, prefix="more")
    outcome = published(store_target, folder, WRITER)
    assert sorted(outcome.written) == sorted([
        "tile/entries/001", "tile/0/001", "tile/entries/002.p/88", "tile/0/002.p/88", "tile/1/000.p/2", "checkpoint",
    ])
    assert sorted(outcome.removed) == ["tile/0/001.p", "tile/entries/001.p"]
    assert {path: _stat(folder, path) for path in before} == before
    assert not (folder / "tile/0/001.p").exists()
    assert_valid_publication(folder, leaf_inputs(store_target, 600), [WRITER.verifier()], size=600)


def test_a_publish_with_nothing_new_writes_nothing(store_target: str, tmp_path: Path) -> None:
    record_signed(store_target, WRITER, 10)
    folder = tmp_path / "log"
    published(store_target, folder, WRITER)
    before = published_files(folder)
    again = published(store_target, folder, WRITER)
    assert again.published
    assert again.written == ()
    assert again.size == 10
    assert published_files(folder) == before


def test_rows_after_the_newest_trusted_checkpoint_are_not_published(store_target: str, tmp_path: Path) -> None:
    """Rows no trusted signature covers (appended unsigned) are left out, and their `unattested_rows` finding, about
    rows after the size published, does not stop the publish."""
    record_signed(store_target, WRITER, 20)
    with BudgetStore.open(store_target, allow_unsigned=True) as store:
        store.record_many([f'{{"decision_id": "unsigned-{index}"}}' for index in range(3)])
    folder = tmp_path / "log"
    outcome = published(store_target, folder, WRITER)
    assert outcome.published
    assert outcome.size == 20
    assert_valid_publication(folder, leaf_inputs(store_target, 20), [WRITER.verifier()], size=20)


def test_a_store_with_no_trusted_checkpoint_has_nothing_to_publish(store_target: str, tmp_path: Path) -> None:
    """Signed by another key only: nothing to publish (exit 2), and the message says how to make one."""
    record_signed(store_target, signer("someone-else"), 5)
    with pytest.raises(NothingToPublish, match="record with --signing-key"):
        published(store_target, tmp_path / "log", WRITER)
    assert published_files(tmp_path / "log") == {}


def test_a_finding_in_the_new_rows_stops_the_publish(store_target: str, tmp_path: Path) -> None:
    """Rule 1: a row edited after the last publish is found by the audit of the new rows (with DIR's checkpoint as
    --since), and nothing is written."""
    record_signed(store_target, WRITER, 300)
    folder = tmp_path / "log"
    published(store_target, folder, WRITER)
    record_signed(store_target, WRITER, 20, prefix="more")
    tamper(store_target, "UPDATE compute_budget_decisions SET max_steps = max_steps + 1 WHERE seq = 305")
    before = published_files(folder)
    outcome = published(store_target, folder, WRITER)
    assert not outcome.published
    assert outcome.report is not None
    assert outcome.report.since is not None
    assert outcome.report.since.seq == 300
    assert 305 in {finding.seq for finding in outcome.report.findings}
    assert published_files(folder) == before


def test_a_first_publish_audits_every_row(store_target: str, tmp_path: Path) -> None:
    record_signed(store_target, WRITER, 50)
    tamper(store_target, "UPDATE compute_budget_decisions SET max_steps = max_steps + 1 WHERE seq = 7")
    outcome = published(store_target, tmp_path / "log", WRITER)
    assert outcome.report is not None
    assert 7 in outcome.report.affected_rows
    assert published_files(tmp_path / "log") == {}


def test_a_forged_dir_checkpoint_is_bad_signature(store_target: str, tmp_path: Path) -> None:
    """Rule 1: a DIR/checkpoint whose signature does not verify, or that no trusted key signed, is bad_signature
    (exit 1), nothing written."""
    record_signed(store_target, WRITER, 10)
    folder = tmp_path / "log"
    published(store_target, folder, WRITER)
    record_signed(store_target, WRITER, 10, prefix="more")
    note = (folder / "checkpoint").read_text()
    text, _, line = note.partition("\n\n")
    forged = line[:-6] + ("AAAA" if line[-6:-2] != "AAAA" else "BBBB") + line[-2:]
    for replacement in (f"{text}\n\n{forged}", sign_note(text + "\n", signer("other"))):
        (folder / "checkpoint").write_text(replacement)
        before = published_files(folder)
        outcome = published(store_target, folder, WRITER)
        assert outcome.refusal is not None
        assert outcome.refusal.kind == FindingKind.BAD_SIGNATURE.value
        assert published_files(folder) == before


def test_an_edited_published_file_is_published_mismatch(store_target: str, tmp_path: Path) -> None:
    """Rule 2: a full tile already in DIR whose bytes differ from the store's (here one a crashed publish left, then
    edited) is published_mismatch naming it; nothing is written, not even the files before it."""
    record_signed(store_target, WRITER, 300)
    folder = tmp_path / "log"
    published(store_target, folder, WRITER)
    record_signed(store_target, WRITER, 300, prefix="more")
    planted = folder / full_tile(0, 1)
    planted.write_bytes(b"\x00" * 8192)
    before = published_files(folder)
    outcome = published(store_target, folder, WRITER)
    assert outcome.refusal is not None
    assert outcome.refusal.kind == "published_mismatch"
    assert "tile/0/001" in outcome.refusal.detail
    assert published_files(folder) == before
    assert not [path for path in folder.rglob(".*") if path.name != ".publish.lock"]  # no staged file left


def test_a_symbolic_link_inside_dir_is_refused(store_target: str, tmp_path: Path) -> None:
    """Rule 3: a link inside DIR is never followed: nothing is written through it, outside DIR or in it."""
    record_signed(store_target, WRITER, 300)
    folder, outside = tmp_path / "log", tmp_path / "outside"
    published(store_target, folder, WRITER)
    record_signed(store_target, WRITER, 300, prefix="more")
    outside.mkdir()
    shutil.rmtree(folder / "tile/entries")
    (folder / "tile/entries").symlink_to(outside)
    before = published_files(folder)
    with pytest.raises(PublishFolderRefused, match="tile/entries is a symbolic link"):
        published(store_target, folder, WRITER)
    assert list(outside.iterdir()) == []
    assert published_files(folder) == before


def test_a_linked_checkpoint_is_refused(store_target: str, tmp_path: Path) -> None:
    record_signed(store_target, WRITER, 3)
    folder = tmp_path / "log"
    folder.mkdir()
    (tmp_path / "elsewhere").write_text("x")
    (folder / "checkpoint").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(PublishFolderRefused, match="checkpoint is a symbolic link"):
        published(store_target, folder, WRITER)
    assert (tmp_path / "elsewhere").read_text() == "x"


def test_a_concurrent_publish_is_refused_by_the_lock(store_target: str, tmp_path: Path) -> None:
    """Rule 3: one publish at a time per DIR: while DIR/.publish.lock is held, another publish stops (exit 2)."""
    record_signed(store_target, WRITER, 3)
    folder = tmp_path / "log"
    folder.mkdir()
    with open(folder / ".publish.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(PublishBusy, match="another publish holds"):
            published(store_target, folder, WRITER)
    assert published(store_target, folder, WRITER).published


def test_a_row_over_65535_bytes_names_the_salvage(store_target: str, tmp_path: Path) -> None:
    """Rule 4: a row recorded before spec 9.9.8 with a leaf input over 65,535 bytes cannot be an entry: exit 2
    naming its seq and `copy --through SEQ-1`, and nothing is written."""
    record_signed(store_target, WRITER, 10)
    huge = forged_row(store_target, evidence_spans=[{"text": "x" * 70_000, "start": 0, "end": 1, "sentence_index": 0}])
    tamper(store_target, insert_sql(huge))
    with BudgetStore.open(store_target, signing_key=WRITER) as store:
        store.record_many(['{"decision_id": "after-the-huge-one"}'], adopt_unsigned_through=11)
    folder = tmp_path / "log"
    with pytest.raises(EntryTooLong, match=r"row 11's leaf input .*copy SRC DST --through 10") as raised:
        published(store_target, folder, WRITER)
    assert raised.value.seq == 11
    assert published_files(folder) == {}


@pytest.mark.parametrize("failing_rename", [1, 4, 6])
def test_a_crash_midway_leaves_the_previous_publication(
    store_target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing_rename: int
) -> None:
    """Rule 3: a publish that dies at its n-th rename (of 6: five tiles and bundles, then DIR/checkpoint) leaves DIR
    a valid publication of the previous checkpoint; the next publish completes it."""
    record_signed(store_target, WRITER, 300)
    folder = tmp_path / "log"
    published(store_target, folder, WRITER)
    record_signed(store_target, WRITER, 300, prefix="more")
    calls = []
    real_rename = write._rename

    def crashing(name: str, target: str, parent: int) -> None:
        calls.append(target)
        if len(calls) == failing_rename:
            raise OSError(5, "Input/output error")  # a full disk says more: tests/publication_writer/test_faults.py
        real_rename(name, target, parent)

    monkeypatch.setattr(write, "_rename", crashing)
    with pytest.raises(OSError, match="Input/output error"):
        published(store_target, folder, WRITER)
    assert failing_rename < 6 or calls[-1] == "checkpoint"
    monkeypatch.setattr(write, "_rename", real_rename)
    assert_valid_publication(folder, leaf_inputs(store_target, 300), [WRITER.verifier()], size=300)
    assert published(store_target, folder, WRITER).published
    assert_valid_publication(folder, leaf_inputs(store_target, 600), [WRITER.verifier()], size=600)


def test_a_rolled_back_dir_checkpoint_is_brought_forward(store_target: str, tmp_path: Path) -> None:
    """DIR/checkpoint put back to an older one this store signed: the publish checks the rows after it again and
    writes the newest checkpoint; no full tile is rewritten."""
    record_signed(store_target, WRITER, 300)
    folder = tmp_path / "log"
    published(store_target, folder, WRITER)
    older = (folder / "checkpoint").read_text()
    record_signed(store_target, WRITER, 300, prefix="more")
    published(store_target, folder, WRITER)
    tile = _stat(folder, "tile/0/001")
    (folder / "checkpoint").write_text(older)
    outcome = published(store_target, folder, WRITER)
    assert outcome.published
    assert (outcome.previous, outcome.size) == (300, 600)
    assert _stat(folder, "tile/0/001") == tile
    assert_valid_publication(folder, leaf_inputs(store_target, 600), [WRITER.verifier()], size=600)


def test_a_store_behind_dir_is_never_published_over_it(tmp_path: Path) -> None:
    """DIR publishes 600 rows and the store it is given now holds a trusted checkpoint of only 300 (a restored
    backup, or another store under the same key): checkpoint_mismatch, nothing written; DIR is never rolled back.
    (SQLite only: the older store is a copy of the file.)"""
    store = str(tmp_path / "store.db")
    record_signed(store, WRITER, 300)
    shutil.copy(store, tmp_path / "backup.db")
    record_signed(store, WRITER, 300, prefix="more")
    folder = tmp_path / "log"
    published(store, folder, WRITER)
    before = published_files(folder)
    outcome = published(str(tmp_path / "backup.db"), folder, WRITER)
    assert outcome.refusal is not None
    assert outcome.refusal.kind == FindingKind.CHECKPOINT_MISMATCH.value
    assert published_files(folder) == before


def test_another_stores_publication_signed_by_the_same_key_is_not_published_over(
    store_target: str, tmp_path: Path
) -> None:
    """DIR holds log A's publication; publishing log B (another origin, the same writer key) into it stops at the
    audit of B against A's checkpoint (another log: checkpoint_mismatch), and nothing is written."""
    record_signed(store_target, WRITER, 300, origin="example.org/a")
    other = str(tmp_path / "b.db")
    record_signed(other, WRITER, 600, origin="example.org/b")
    folder = tmp_path / "log"
    published(store_target, folder, WRITER)
    before = published_files(folder)
    outcome = published(other, folder, WRITER)
    assert outcome.report is not None
    kinds = {finding.kind for finding in outcome.report.findings}
    assert FindingKind.CHECKPOINT_MISMATCH in kinds
    assert any("example.org/a" in finding.detail for finding in outcome.report.findings)
    assert published_files(folder) == before


class _Folder:
    """A `TileSource` over a published folder: `[tile]` is the file at its path (KeyError when there is none)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __getitem__(self, tile: Tile) -> bytes:
        path = self.folder / tile.path
        if not path.is_file():
            raise KeyError(tile.path)
        return path.read_bytes()


def test_the_cores_tile_reader_proves_from_the_publication(store_target: str, tmp_path: Path) -> None:
    """The core's `TileNodeReader` (Go's TileHashReader), given only DIR's files and the published checkpoint, checks
    every tile it reads against the root and gives the same inclusion and consistency proofs as a MemoryTree of the
    rows: after two incremental publishes and the partial tiles they superseded were removed."""
    folder = tmp_path / "log"
    for count, prefix in ((300, "a"), (300, "b"), (70, "c")):
        record_signed(store_target, WRITER, count, prefix=prefix)
        published(store_target, folder, WRITER)
    checkpoint = assert_valid_publication(folder, leaf_inputs(store_target, 670), [WRITER.verifier()], size=670)
    assert checkpoint.root is not None
    reader = TileNodeReader(670, checkpoint.root, _Folder(folder))
    tree = MemoryTree.from_leaves(leaf_inputs(store_target, 670))
    for index in (0, 255, 256, 599, 669):
        assert inclusion_proof(reader, index, 670) == inclusion_proof(tree, index, 670)
    assert consistency_proof(reader, 300, 670) == consistency_proof(tree, 300, 670)
    assert all(parse_tile_path(tile.path) == tile for tile in reader.tiles_read)


def test_dir_must_be_a_folder_whose_parent_exists(tmp_path: Path) -> None:
    """DIR is made when missing, but only DIR: a missing parent or a file in DIR's place is one clear error."""
    store = str(tmp_path / "store.db")
    record_signed(store, WRITER, 3)
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(PublishFolderRefused, match="cannot be used as DIR: not a folder"):
        published(store, tmp_path / "a-file", WRITER)
    with pytest.raises(PublishFolderRefused, match="cannot make the folder"):
        published(store, tmp_path / "missing" / "log", WRITER)
    assert not (tmp_path / "missing").exists()
