"""Helpers for tests that publish a store (spec 10.1): a signed store, `published(store, dir)`, and the files a
publication must hold, computed from the rows with the core alone (MemoryTree, tile bytes, entry bundles), never
with the publisher's own code."""

from __future__ import annotations

import os
from pathlib import Path

from compute_budget import BudgetStore
from compute_budget.core.leaf import leaf_input
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.entry_bundle import encode_bundle
from compute_budget.core.log.merkle import MemoryTree
from compute_budget.core.log.note import SignerKey, VerifierKey
from compute_budget.core.log.tiles import Tile, tile_bytes, tiles_for_size
from compute_budget.core.seal_checks import trusted_signers
from compute_budget.publication_writer import PublishOutcome, PublishRequest, publish
from tests.backends import rows
from tests.conftest import gate_lines


def record_signed(
    target: str | os.PathLike[str], key: SignerKey, count: int, *, prefix: str = "gate", origin: str | None = None
) -> int:
    """Record `count` new gates into the store at `target` (of log `origin`, when new), signed by `key` (one signed
    checkpoint); the new size."""
    with BudgetStore.open(target, signing_key=key, origin=origin) as store:
        store.record_many(gate_lines(count, prefix=prefix))
        return store.head().seq


def published(
    target: str | os.PathLike[str], folder: str | os.PathLike[str], *keys: VerifierKey | SignerKey,
    witness_keys: tuple[object, ...] = (), witness_quorum: int | None = None,
) -> PublishOutcome:
    """Publish the store at `target` into `folder`, trusting `keys` (a signer key stands for its verifier key)."""
    verifiers = tuple(key.verifier() if isinstance(key, SignerKey) else key for key in keys)
    return publish(PublishRequest(
        os.fspath(folder), target, trusted_keys=verifiers, witness_keys=witness_keys,  # type: ignore[arg-type]
        witness_quorum=witness_quorum,
    ))


def leaf_inputs(target: str | os.PathLike[str], size: int) -> list[bytes]:
    """The leaf inputs (section 8) of rows 1..`size` of the store."""
    return [leaf_input(row[:17]) for row in rows(target)[:size]]


def expected_files(entries: list[bytes], size: int) -> dict[str, bytes]:
    """Every tile and entry bundle of the tree of the first `size` entries, by path, from a MemoryTree."""
    tree = MemoryTree.from_leaves(entries[:size])
    files: dict[str, bytes] = {}
    for tile in tiles_for_size(size):
        files[tile.path] = tile_bytes(tree, tile)
        if tile.level == 0:
            first = tile.index * 256
            files[tile.bundle_path] = encode_bundle(tile, entries[first : first + tile.width])
    return files


def published_files(folder: str | os.PathLike[str]) -> dict[str, bytes]:
    """Every file under `folder` but the lock, by path relative to it."""
    root = Path(folder)
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*")) if path.is_file() and path.name != ".publish.lock"
    }


def assert_valid_publication(
    folder: str | os.PathLike[str], entries: list[bytes], keys: list[VerifierKey], *, size: int | None = None
) -> Checkpoint:
    """DIR is a valid publication (of `size` rows, when given): its checkpoint verifies under `keys` and names the
    root of those entries, and every tile and bundle of its tree is served with the right bytes (a partial one may be
    gone once the full tile at its position is there: C2SP's fallback). Returns the checkpoint."""
    checkpoint = Checkpoint.from_note((Path(folder) / "checkpoint").read_text(encoding="utf-8"))
    assert checkpoint.note is not None
    verified, failed = trusted_signers(checkpoint.note, keys)
    assert verified
    assert not failed
    if size is not None:
        assert checkpoint.seq == size
    assert checkpoint.root == MemoryTree.from_leaves(entries[: checkpoint.seq]).root()
    files = published_files(folder)
    for path, data in expected_files(entries, checkpoint.seq).items():
        if path in files:
            assert files[path] == data, path
            continue
        assert ".p/" in path, f"{path} is missing"
        assert path.split(".p/")[0] in files, f"{path} is missing, and so is the full tile at its position"
    return checkpoint


def full_tile(level: int, index: int) -> str:
    """The path of a full tile."""
    return Tile(level, index).path
