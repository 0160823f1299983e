"""A rotated log read from its publication (spec 11.1, 11.2, 11.7.5): `audit --tiles --retired OLD@H` judges the
published `handover/H/<OLD's key ID>` as the database audit judges the stored one; `prove --tiles` checks the
checkpoint (trusted keys, origin, --retired/--revoked, quorum) before it reads any tile, and exits 2 in one line
when it does not count. The handover file is written here from the store's stored handover, as `publish` writes
it."""

from __future__ import annotations

import base64
import json
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.note import add_signature, format_checkpoint, generate_signer, sign_note
from compute_budget.keys.key_files import load_signer_key, write_new_signer_key
from compute_budget.store import BudgetStore
from tests.conftest import gate_lines
from tests.publications import publish_store, served_folder

Run = Callable[..., tuple[int, str, str]]
ORIGIN = "example.org/rotated-log"


class Rotated:
    """A store recorded with OLD (3 rows), rotated to NEW (`rotate` as the docs run it), recorded with NEW (2 more
    rows), and published into `folder` with the stored handover as `handover/3/<OLD's key ID>`."""

    def __init__(self, run: Run, target: str, folder: Path) -> None:
        self.run, self.target, self.folder = run, target, folder
        self.old_path, self.new_path = folder / "old.key", folder / "new.key"
        self.old, self.new = self.keygen("old", self.old_path), self.keygen("new", self.new_path)
        self.record(self.old_path, 3, "before", "--origin", ORIGIN)
        status, _, self.said = run("rotate", "--db", target, "--signing-key", str(self.old_path), "--new-key",
                                   str(self.new_path))
        assert status == 0, self.said
        self.record(self.new_path, 2, "after")
        self.published = publish_store(target, folder / "published", load_signer_key(self.new_path).verifier())
        with BudgetStore.open(target, readonly=True) as store:
            self.handover = next(row[3] for row in store.iter_checkpoint_rows() if row[3].count("\n\u2014 ") == 2)
        self.handover_path = self.published / "handover" / "3" / f"{load_signer_key(self.old_path).key_hash:08x}"
        self.handover_path.parent.mkdir(parents=True)
        self.handover_path.write_text(self.handover)

    def keygen(self, name: str, path: Path) -> str:
        status, out, err = self.run("keygen", name, "--out", str(path))
        assert status == 0, err
        return out.strip()

    def record(self, key: Path, count: int, prefix: str, *extra: str) -> None:
        gates = self.folder / f"{prefix}.jsonl"
        gates.write_text("\n".join(gate_lines(count, prefix=prefix)) + "\n")
        status, _, err = self.run("record", str(gates), "--db", self.target, "--signing-key", str(key), *extra)
        assert status == 0, err

    def printed(self, command: str) -> list[str]:
        """The arguments `rotate` printed for `command`."""
        prefix = f"  compute-budget {command} --"
        lines = [line for line in self.said.splitlines() if line.startswith(prefix)
                 and (command == "audit --tiles" or not line.startswith("  compute-budget audit --tiles"))]
        assert len(lines) == 1, self.said
        return shlex.split(lines[0])[1 + len(command.split()):]

    def audit(self, location: str | None = None) -> tuple[int, dict, str]:  # type: ignore[type-arg]
        status, out, err = self.run("audit", "--tiles", location or str(self.published),
                                    *self.printed("audit --tiles"), "--format", "json", "--jobs", "1")
        return status, json.loads(out) if out.strip() else {}, err

    def signed_at_head(self, *keys: Path, root: bytes | None = None, size: int | None = None) -> str:
        """A checkpoint of the published head (or `size`, `root`) signed by `keys` in order."""
        head = Checkpoint.from_note((self.published / "checkpoint").read_text())
        assert head.root is not None
        text = format_checkpoint(ORIGIN, size or head.seq, root or head.root, head.chain_hash)
        signers = [load_signer_key(key) for key in keys]
        note = sign_note(text, signers[0])
        for signer in signers[1:]:
            note = add_signature(note, signer)
        return note


@pytest.fixture
def rotated(run_cli: Run, store_target: str, tmp_path: Path) -> Rotated:
    return Rotated(run_cli, store_target, tmp_path)


def _findings(report: dict) -> list[tuple[str, str]]:  # type: ignore[type-arg]
    return [(item["kind"], item["detail"]) for item in report["findings"]]


def test_a_rotated_publication_audited_and_proven_with_the_printed_arguments_is_clean(
    rotated: Rotated, tmp_path: Path
) -> None:
    with served_folder(rotated.published) as url:
        status, report, err = rotated.audit(url)
        assert status == 0, (_findings(report), err)
        status, bundle, err = rotated.run("prove", "--tiles", url, "--seq", "1", *rotated.printed("prove"))
    assert status == 0, err
    receipt = tmp_path / "receipt.json"
    receipt.write_text(bundle)
    status, out, err = rotated.run("verify-proof", str(receipt), *rotated.printed("verify-proof"))
    assert status == 0, (out, err)


def test_a_missing_published_handover_is_handover_missing(rotated: Rotated) -> None:
    rotated.handover_path.unlink()
    status, report, _ = rotated.audit()
    assert status == 1
    missing = [detail for kind, detail in _findings(report) if kind == "checkpoint_mismatch"]
    assert len(missing) == 1
    assert missing[0].startswith("handover missing")
    assert f"the publication holds no handover/3/{rotated.handover_path.name}," in missing[0]


def test_a_published_handover_of_another_root_is_checkpoint_mismatch(rotated: Rotated) -> None:
    rotated.handover_path.write_text(rotated.signed_at_head(rotated.old_path, rotated.new_path, root=bytes(32),
                                                            size=3))
    status, report, _ = rotated.audit()
    assert status == 1
    found = _findings(report)
    assert any(kind == "checkpoint_mismatch" and f"handover/3/{rotated.handover_path.name}" in detail
               and "root" in detail for kind, detail in found)
    assert any(kind == "checkpoint_mismatch" and detail.startswith("handover missing") for kind, detail in found)
    assert any(f"the publication holds no valid handover/3/{rotated.handover_path.name} (the file there is not this "
               "log's handover: reported above as checkpoint_mismatch)" in detail for _, detail in found)


def test_a_forged_published_handover_is_bad_signature(rotated: Rotated) -> None:
    # The honest note OLD signed at 3, with a signature of a key of the forger's own appended (spec 11.7.3).
    insider = generate_signer("new")
    with BudgetStore.open(rotated.target, readonly=True) as store:
        honest = next(row[3] for row in store.iter_checkpoint_rows() if row[0] == 3 and row[3].count("\n\u2014 ") == 1)
    rotated.handover_path.write_text(add_signature(honest, insider))
    status, report, _ = rotated.audit()
    assert status == 1
    found = _findings(report)
    assert any(kind == "bad_signature" and f"handover/3/{rotated.handover_path.name}" in detail
               for kind, detail in found)
    missing = [detail for kind, detail in found if kind == "checkpoint_mismatch"]
    assert len(missing) == 1
    assert missing[0].startswith("handover missing")
    # the file is there: never "holds no handover/3/ID", but no valid one, the cause named
    assert (f"the publication holds no valid handover/3/{rotated.handover_path.name} (the file there does not "
            "verify: reported above as bad_signature)") in missing[0]


def test_a_checkpoint_the_stolen_old_key_signed_above_the_handover_counts_nowhere(
    rotated: Rotated, tmp_path: Path
) -> None:
    (rotated.published / "checkpoint").write_text(rotated.signed_at_head(rotated.old_path))
    status, report, _ = rotated.audit()
    assert status == 1
    assert any(kind == "bad_signature" and "retired at 3" in detail for kind, detail in _findings(report))
    status, out, err = rotated.run("prove", "--tiles", str(rotated.published), "--seq", "1",
                                   *rotated.printed("prove"))
    assert (status, out) == (2, "")
    assert err.startswith("compute-budget: error: untrusted checkpoint: ")
    assert "retired at 3" in err
    assert len(err.strip().splitlines()) == 1
    # Without --retired, the same checkpoint would count: the refusal is the retirement's.
    status, _, err = rotated.run("prove", "--tiles", str(rotated.published), "--seq", "1", "--trusted-key",
                                 rotated.old)
    assert status == 0, err


def test_prove_tiles_checks_the_checkpoint_before_any_tile(rotated: Rotated) -> None:
    shutil.rmtree(rotated.published / "tile")
    options = ("prove", "--tiles", str(rotated.published), "--seq", "1")
    status, _, err = rotated.run(*options, "--trusted-key", rotated.old, "--retired", f"{rotated.old}@2")
    assert status == 2
    assert "untrusted checkpoint: " in err
    other = generate_signer("other").verifier().format()
    status, _, err = rotated.run(*options, "--trusted-key", other)
    assert status == 2
    assert "untrusted checkpoint: " in err
    assert "new+" in err  # each signer as the note shows it
    status, _, err = rotated.run(*options, *rotated.printed("prove"), "--origin", "example.org/another")
    assert status == 2
    assert "checkpoint of another log: " in err
    assert "example.org/another" in err
    # A checkpoint that counts, with its tiles gone: the publication cannot be read (exit 2), not a verdict.
    status, _, err = rotated.run(*options, *rotated.printed("prove"), "--origin", ORIGIN)
    assert status == 2
    assert "untrusted" not in err
    assert "missing" in err


def test_prove_tiles_needs_origin_with_a_policy_of_several_logs(run_cli: Run, store_target: str,
                                                                 tmp_path: Path) -> None:
    writer = generate_signer(ORIGIN)  # a policy names a log's key by its origin
    write_new_signer_key(tmp_path / "log.key", writer)
    with BudgetStore.open(store_target, signing_key=str(tmp_path / "log.key"), origin=ORIGIN) as store:
        store.record_many([json.loads(line) for line in gate_lines(3)])
    folder = publish_store(store_target, tmp_path / "published", writer.verifier())
    other = generate_signer("example.org/other-log").verifier().format()
    policy = tmp_path / "policy.txt"
    policy.write_text(f"log {writer.verifier().format()}\nlog {other}\nquorum none\n")
    options = ("prove", "--tiles", str(folder), "--seq", "2", "--policy", str(policy))
    status, _, err = run_cli(*options)
    assert status == 2
    assert "the policy names 2 logs: give --origin NAME" in err
    status, out, err = run_cli(*options, "--origin", ORIGIN)
    assert status == 0, err
    assert json.loads(out)["leaf_index"] == 1
    status, _, err = run_cli(*options, "--origin", "example.org/other-log")
    assert status == 2
    assert "checkpoint of another log: " in err or "untrusted checkpoint: " in err


@pytest.mark.parametrize("forged", [
    "a note with no signature line\n",
    "example.org/rotated-log\n3\nnot base64\n\n\u2014 new AAAA\n",
])
def test_a_published_handover_that_is_no_signed_note_is_bad_signature(rotated: Rotated, forged: str) -> None:
    """A keyless insider's file at handover/3/<ID>: none of its signatures verifies, so it is skipped as a forged
    handover is (spec 11.7.3, `bad_signature`, not a tree finding), and the retirement has no handover."""
    rotated.handover_path.write_text(forged)
    status, report, _ = rotated.audit()
    assert status == 1
    kinds = [kind for kind, _ in _findings(report)]
    assert kinds == ["bad_signature", "checkpoint_mismatch"]
    assert f"the published handover/3/{rotated.handover_path.name} is no signed checkpoint" in _findings(report)[0][1]
    assert _findings(report)[1][1].startswith("handover missing")
    assert f"holds no valid handover/3/{rotated.handover_path.name} (the file there does not verify" \
        in _findings(report)[1][1]


ADVICE = "obtain the new verifier key from the log's operator out of band, then add --trusted-key <that key> --retired "


def _untold(rotated: Rotated, location: str, *extra: str) -> tuple[list[str], str]:
    """`audit --tiles` by an auditor who trusts only OLD (not told of the rotation): its bad_signature details and
    everything it printed."""
    status, out, err = rotated.run("audit", "--tiles", location, "--trusted-key", rotated.old, "--origin", ORIGIN,
                                   *extra, "--format", "json")  # no tile is read: no worker
    assert status == 1, (out, err)
    found = _findings(json.loads(out))
    assert [kind for kind, _ in found] == ["bad_signature"], found
    return [detail for _, detail in found], out + err


def test_an_auditor_not_told_of_the_rotation_is_named_the_published_handover(rotated: Rotated) -> None:
    (detail,), said = _untold(rotated, str(rotated.published))
    new_key = load_signer_key(rotated.new_path)
    assert f"signed by new (key ID {new_key.key_hash:08x}), unverified" in detail  # as the note shows it
    assert f"handover/3/{rotated.handover_path.name}" in detail
    assert ADVICE + f"{rotated.old}@3" in detail
    assert rotated.new not in said  # the new verifier key was never given: it is printed nowhere


def test_over_http_the_handover_is_found_at_the_since_size_only(rotated: Rotated, tmp_path: Path) -> None:
    with BudgetStore.open(rotated.target, readonly=True) as store:
        at_3 = next(row[3] for row in store.iter_checkpoint_rows() if row[0] == 3 and row[3].count("\n\u2014 ") == 1)
    since = tmp_path / "since.note"
    since.write_text(at_3)  # OLD's note at the handover's size, kept by the last audit
    with served_folder(rotated.published) as url:
        (unlisted,), _ = _untold(rotated, url)
        (probed,), said = _untold(rotated, url, "--since", str(since))
    assert "handover/" not in unlisted
    assert ADVICE not in unlisted
    assert f"signed by new (key ID {load_signer_key(rotated.new_path).key_hash:08x}), unverified" in unlisted
    assert f"handover/3/{rotated.handover_path.name}" in probed
    assert ADVICE + f"{rotated.old}@3" in probed
    assert rotated.new not in said


def _forged(note: str) -> str:
    """`note` with its first signature's bytes changed, its name and key ID kept: no longer that key's."""
    text, _, lines = note.partition("\n\n")
    first, *rest = lines.splitlines()
    prefix, _, value = first.rpartition(" ")
    raw = bytearray(base64.b64decode(value))
    raw[-1] ^= 1
    return "\n".join([f"{text}\n", f"{prefix} {base64.b64encode(bytes(raw)).decode()}", *rest]) + "\n"


def test_a_forged_published_handover_gives_no_advice(rotated: Rotated) -> None:
    rotated.handover_path.write_text(_forged(rotated.handover))
    (detail,), _ = _untold(rotated, str(rotated.published))
    assert "unverified" in detail
    assert "handover/" not in detail
    assert ADVICE not in detail
    # A forged newer one beside the genuine one at 3: only the genuine one is named.
    rotated.handover_path.write_text(rotated.handover)
    newer = rotated.published / "handover" / "5" / rotated.handover_path.name
    newer.parent.mkdir()
    newer.write_text(_forged(rotated.signed_at_head(rotated.old_path, rotated.new_path)))
    (detail,), _ = _untold(rotated, str(rotated.published))
    assert f"handover/3/{rotated.handover_path.name}" in detail
    assert ADVICE + f"{rotated.old}@3" in detail
    assert "handover/5/" not in detail
    assert "@5" not in detail
