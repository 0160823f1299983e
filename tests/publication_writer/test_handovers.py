"""`publish --retired OLD@H` writes the stored handover as `DIR/handover/<H>/<OLD's key ID>` (spec 11.1), on both
backends: with only the lines that verify, before the checkpoint, never rewritten, backfilled when DIR already
publishes the newest checkpoint; a DIR/checkpoint signed by OLD counts up to H only."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from compute_budget import BudgetStore
from compute_budget.core.log.cosignature import WitnessSigner
from compute_budget.core.log.key_states import KeyState, KeyStates, KeyStatus
from compute_budget.core.log.note import SignerKey, VerifierKey, add_signature, parse_note, sign_note
from compute_budget.core.log.tiles import handover_path
from compute_budget.core.verify import FindingKind
from compute_budget.publication_writer import PublishOutcome, PublishRequest, publish
from compute_budget.publication_writer.handovers import handover_files
from tests.backends import execute
from tests.conftest import gate_lines
from tests.publishing_helpers import assert_valid_publication, leaf_inputs, published_files
from tests.sealing import signer

OLD, NEW = signer("old"), signer("new")
WITNESS = WitnessSigner.from_seed("witness.example/w", bytes(range(32)))


def _record(target: str, key: SignerKey, state: Path, count: int, prefix: str) -> None:
    with BudgetStore.open(target, signing_key=key, writer_state=state, origin="example.org/log") as store:
        store.record_many(gate_lines(count, prefix=prefix))


def _rotate(target: str, tmp_path: Path) -> None:
    """Hand the log over from OLD to NEW at its head (`rotate`), then record 2 rows with NEW."""
    with BudgetStore.open(target, signing_key=OLD, writer_state=tmp_path / "old.state") as store:
        store.rotate(NEW, new_writer_state=str(tmp_path / "new.state"))
    _record(target, NEW, tmp_path / "new.state", 2, "after")


@pytest.fixture
def rotated(store_target: str, tmp_path: Path) -> str:
    """A store recorded with OLD (3 rows), handed over to NEW at 3 (`rotate`), then recorded with NEW (2 rows)."""
    _record(store_target, OLD, tmp_path / "old.state", 3, "before")
    _rotate(store_target, tmp_path)
    return store_target


def _publish(target: str, folder: Path, *trusted: VerifierKey, retired: int | None = 3,
             witness: bool = False) -> PublishOutcome:
    states = KeyStates() if retired is None else KeyStates.of([KeyState(OLD.verifier(), KeyStatus.RETIRED, retired)])
    return publish(PublishRequest(
        os.fspath(folder), target, trusted_keys=trusted or (NEW.verifier(),), key_states=states,
        witness_keys=(WITNESS.verifier(),) if witness else (), witness_quorum=None,
    ))


def _stored_handover(target: str) -> str:
    with BudgetStore.open(target, readonly=True) as store, store.snapshot() as snapshot:
        notes = {stored.note for stored in snapshot.checkpoints_at(3) if stored.note.count("\n\u2014 ") == 2}
    assert len(notes) == 1
    return notes.pop()


HANDOVER = handover_path(3, OLD.verifier().key_hash)


@pytest.mark.postgres_smoke
def test_a_rotated_log_publishes_its_handover_before_the_checkpoint(store_target: str, tmp_path: Path) -> None:
    """DIR published by OLD at 3, then the log handed over: `publish --trusted-key NEW --retired OLD@3` (the
    arguments `rotate` prints) accepts DIR's checkpoint (OLD's, at 3: it counts) and writes the stored handover,
    byte for byte, before the new checkpoint."""
    rotated, folder = store_target, tmp_path / "log"
    _record(rotated, OLD, tmp_path / "old.state", 3, "before")
    first = publish(PublishRequest(os.fspath(folder), rotated, trusted_keys=(OLD.verifier(),)))
    assert first.published, first.refusal or first.report
    _rotate(rotated, tmp_path)
    outcome = _publish(rotated, folder)
    assert outcome.published, outcome.refusal or outcome.report
    assert (outcome.previous, outcome.size) == (3, 5)
    assert outcome.written.index(HANDOVER) < outcome.written.index("checkpoint") == len(outcome.written) - 1
    assert (folder / HANDOVER).read_text() == _stored_handover(rotated)
    assert [line.name for line in parse_note((folder / HANDOVER).read_text())[1]] == ["old", "new"]
    assert_valid_publication(folder, leaf_inputs(rotated, 5), [NEW.verifier()], size=5)


def test_a_handover_is_backfilled_when_dir_is_already_current_and_never_rewritten(
    rotated: str, tmp_path: Path
) -> None:
    """DIR published before the upgrade (no handover file, the newest checkpoint already there): the next publish
    writes the handover alone and leaves the checkpoint; the one after writes nothing; an edited handover file is
    `published_mismatch`, nothing written."""
    folder = tmp_path / "log"
    assert _publish(rotated, folder, OLD.verifier(), NEW.verifier(), retired=None).published
    assert not (folder / "handover").exists()
    checkpoint = os.stat(folder / "checkpoint")
    outcome = _publish(rotated, folder)
    assert outcome.published
    assert outcome.written == (HANDOVER,)
    assert (outcome.previous, outcome.size) == (5, 5)
    assert os.stat(folder / "checkpoint").st_mtime_ns == checkpoint.st_mtime_ns
    assert (folder / HANDOVER).read_text() == _stored_handover(rotated)
    again = _publish(rotated, folder)
    assert (again.written, again.unchanged) == ((), 1)
    (folder / HANDOVER).write_text((folder / HANDOVER).read_text().replace("\n3\n", "\n4\n"))
    before = published_files(folder)
    refused = _publish(rotated, folder)
    assert refused.refusal is not None
    assert refused.refusal.kind == "published_mismatch"
    assert HANDOVER in refused.refusal.detail
    assert published_files(folder) == before


def test_the_handover_file_keeps_only_the_lines_that_verify(rotated: str, tmp_path: Path) -> None:
    """The stored handover carries a witness's cosignature: published without the witness's key it is left out,
    with it (`--witness-key`) it is kept, after the writers' signatures."""
    note = _stored_handover(rotated)
    text = parse_note(note)[0]
    timestamp = int(time.time())
    line = WITNESS.cosign(text, timestamp).line()
    execute(rotated, ("UPDATE compute_budget_checkpoints SET note = :cosigned WHERE note = :note",
                      {"cosigned": note + line, "note": note}), lift_guard=True, lift_seal=True)
    execute(rotated, (  # as `witness submit` keeps it, so that the handover is the newest witnessed checkpoint
        "INSERT INTO compute_budget_cosignatures (tree_size, witness_name, witness_key_id, timestamp, checkpoint, "
        "line, recorded_at) VALUES (3, :name, :key_id, :timestamp, :text, :line, '2026-01-01T00:00:00Z')",
        {"name": WITNESS.name, "key_id": f"{WITNESS.verifier().key_id:08x}", "timestamp": timestamp, "text": text,
         "line": line},
    ))
    plain = tmp_path / "plain"
    assert _publish(rotated, plain).published
    assert (plain / HANDOVER).read_text() == note
    witnessed = tmp_path / "witnessed"
    outcome = _publish(rotated, witnessed, witness=True)
    assert outcome.published, outcome.refusal or outcome.report
    assert outcome.size == 3
    assert (witnessed / HANDOVER).read_text() == note + line


def test_only_a_handover_to_a_trusted_or_retired_key_whose_signatures_verify_is_written(
    store_target: str, tmp_path: Path
) -> None:
    """Notes of size 3 by OLD then by a key neither trusted nor retired (a thief's rotation), or whose second
    signature fails, or on another tree, give no handover file; a genuine one filed after them does. (The
    function itself: the audit of the rows already stops a publish over such notes.)"""
    _record(store_target, OLD, tmp_path / "old.state", 3, "before")
    text = parse_note(_newest(store_target))[0]
    by_new = add_signature(sign_note(text, OLD), NEW)
    other_root = text.replace(text.split("\n")[2], "A" * 43 + "=")
    broken = by_new[:-6] + ("AAAA" if by_new[-6:-2] != "AAAA" else "BBBB") + by_new[-2:]
    for forged in (add_signature(sign_note(text, OLD), signer("thief")), broken,
                   add_signature(sign_note(other_root, OLD), NEW)):
        _file(store_target, forged)
    keys = [OLD.verifier(), NEW.verifier()]
    states = KeyStates.of([KeyState(OLD.verifier(), KeyStatus.RETIRED, 3)])
    assert _files(store_target, keys, states) == []
    _file(store_target, by_new)
    assert _files(store_target, keys, states) == [(HANDOVER, by_new)]
    assert _files(store_target, [OLD.verifier()], states) == []  # NEW is neither trusted nor retired
    assert _files(store_target, keys, KeyStates()) == []  # no --retired: no handover to publish
    assert _files(store_target, keys, KeyStates.of([KeyState(OLD.verifier(), KeyStatus.RETIRED, 2)])) == []


def _file(target: str, note: str) -> None:
    execute(target, (
        "INSERT INTO compute_budget_checkpoints (tree_size, key_name, key_hash, note, recorded_at) "
        "VALUES (3, :name, :hash, :note, '2026-01-01T00:00:00Z')",
        {"name": OLD.name, "hash": f"{OLD.key_hash:08x}", "note": note},
    ))


def _files(target: str, keys: list[VerifierKey], states: KeyStates) -> list[tuple[str, str]]:
    with BudgetStore.open(target, readonly=True) as store, store.snapshot() as snapshot:
        return [(item.path, item.data.decode()) for item in handover_files(snapshot, 3, states, keys, None)]


def _newest(target: str) -> str:
    with BudgetStore.open(target, readonly=True) as store, store.snapshot() as snapshot:
        return next(snapshot.newest_by_key(OLD.verifier())).note


def test_a_dir_checkpoint_signed_by_the_retired_key_above_the_handover_is_bad_signature(
    rotated: str, tmp_path: Path
) -> None:
    """A stolen OLD key signs a checkpoint of size 5 and it is put in DIR: with `--retired OLD@3` that signature
    does not count, so DIR's checkpoint is `bad_signature`, nothing written."""
    folder = tmp_path / "log"
    assert _publish(rotated, folder).published
    text = parse_note((folder / "checkpoint").read_text())[0]
    (folder / "checkpoint").write_text(sign_note(text, OLD))
    before = published_files(folder)
    outcome = _publish(rotated, folder)
    assert outcome.refusal is not None
    assert outcome.refusal.kind == FindingKind.BAD_SIGNATURE.value
    assert "retired at 3" in outcome.refusal.detail
    assert published_files(folder) == before


def _published_by_old_then_rotated(target: str, tmp_path: Path) -> Path:
    """DIR published by OLD at 3, then the log handed over to NEW (2 rows signed by NEW): the night after a
    `rotate`, before the operator changed the publish line."""
    folder = tmp_path / "log"
    _record(target, OLD, tmp_path / "old.state", 3, "before")
    assert publish(PublishRequest(os.fspath(folder), target, trusted_keys=(OLD.verifier(),))).published
    _rotate(target, tmp_path)
    return folder


def test_the_unchanged_publish_line_after_a_rotation_is_told_the_arguments_rotate_printed(
    store_target: str, tmp_path: Path
) -> None:
    """Only OLD given: the handover to NEW (and NEW's rows after it) is said to the operator who rotated, naming
    NEW by name and key ID and OLD's key at 3, never "adopt the rows" nor "obtain the new key from the operator"."""
    folder = _published_by_old_then_rotated(store_target, tmp_path)
    before = published_files(folder)
    outcome = _publish(store_target, folder, OLD.verifier(), retired=None)
    assert outcome.report is None  # nothing else stopped it: the handover explains every finding
    assert outcome.refusal is not None
    assert outcome.refusal.kind == FindingKind.BAD_SIGNATURE.value
    new = f"{NEW.name}+{NEW.key_hash:08x}"
    assert (f"if you rotated, give publish the arguments `rotate` printed, --trusted-key <the new verifier key, "
            f"{new}> --retired {OLD.verifier().format()}@3") in outcome.refusal.detail
    assert "adopt" not in outcome.refusal.detail
    assert "out of band" not in outcome.refusal.detail
    assert published_files(folder) == before


def test_after_a_rotation_findings_the_handover_does_not_explain_are_still_reported(
    store_target: str, tmp_path: Path
) -> None:
    """A checkpoint of size 3 filed as OLD's whose signature does not verify: its finding stays in the report
    beside the advice; the handover's and the rows NEW signed are left out."""
    folder = _published_by_old_then_rotated(store_target, tmp_path)
    signed = _stored_handover(store_target)
    text = parse_note(signed)[0]
    forged = text.replace("\n3\n", "\n2\n", 1) + signed[len(text):]  # OLD's signature, of another text
    execute(store_target, (
        "INSERT INTO compute_budget_checkpoints (tree_size, key_name, key_hash, note, recorded_at) "
        "VALUES (3, :name, :hash, :note, '2026-01-01T00:00:00Z')",
        {"name": OLD.name, "hash": f"{OLD.key_hash:08x}", "note": forged},
    ))
    outcome = _publish(store_target, folder, OLD.verifier(), retired=None)
    assert outcome.refusal is not None
    assert "give publish the arguments `rotate` printed" in outcome.refusal.detail
    assert outcome.report is not None
    assert [finding.kind for finding in outcome.report.findings] == [FindingKind.BAD_SIGNATURE]
    assert "a handover" not in outcome.report.findings[0].detail
