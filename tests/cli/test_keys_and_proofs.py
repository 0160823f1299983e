"""The seal's command line (spec section 8): keygen, signing on record and checkpoint, the audit's trusted keys and
cosignature, prove / verify-proof / consistency, and keys that cannot be used."""

from __future__ import annotations

import json
import os
import re
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.cosignature import WitnessKey, WitnessSigner, with_cosignatures
from compute_budget.core.log.note import SignerKey, VerifierKey, sign_note, verify_note
from tests.backends import query, rows
from tests.conftest import REPO_ROOT, gate_lines
from tests.sealing import rewrite_consistently

Run = Callable[..., tuple[int, str, str]]
EXAMPLES = str(REPO_ROOT / "examples" / "gates.jsonl")


def keygen(run_cli: Run, folder: Path, name: str) -> tuple[Path, str]:
    """A new key in `folder`: its file and its verifier key text."""
    path = folder / f"{name}.key"
    status, out, err = run_cli("keygen", name, "--out", str(path))
    assert status == 0, err
    return path, out.strip()


@pytest.fixture
def keys(run_cli: Run, tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """A writer's and an auditor's keys."""
    return {name: keygen(run_cli, tmp_path, name) for name in ("writer", "auditor")}


@pytest.fixture
def signed(run_cli: Run, store_target: str, keys: dict[str, tuple[Path, str]], tmp_path: Path) -> str:
    """A store of the example gates plus 20 more, recorded in two signed transactions."""
    lines = tmp_path / "more.jsonl"
    lines.write_text("\n".join(gate_lines(20)) + "\n")
    for source in (EXAMPLES, str(lines)):
        status, _, err = run_cli(
            "record", source, "--db", store_target, "--signing-key", str(keys["writer"][0]),
            "--origin", "example.org/cli",
        )
        assert status == 0, err
    return store_target


def test_keygen_writes_a_private_file_and_prints_the_verifier_key(
    run_cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key file is mode 0600 whatever the umask; stdout is exactly its verifier key."""
    monkeypatch.chdir(tmp_path)
    old = os.umask(0)
    try:
        status, out, err = run_cli("keygen", "ops/writer")
    finally:
        os.umask(old)
    assert status == 0
    path = tmp_path / "ops_writer.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    signer_key = SignerKey.parse(path.read_text().strip())
    assert out == signer_key.verifier().format() + "\n"
    assert VerifierKey.parse(out.strip()).name == "ops/writer"
    assert "ops_writer.key" in err
    assert signer_key.format() not in out + err


def test_verifier_key_prints_the_public_half_of_a_key_file_again(run_cli: Run, tmp_path: Path) -> None:
    """A verifier key lost (or never printed: keygen's stdout on a full disk) is printed again from the key file;
    a file holding no signer key is one clear line, exit 2."""
    path, verifier = keygen(run_cli, tmp_path, "writer")
    assert run_cli("verifier-key", str(path)) == (0, verifier + "\n", "")
    public = tmp_path / "writer.pub"
    public.write_text(verifier + "\n")
    status, out, err = run_cli("verifier-key", str(public))
    assert (status, out) == (2, "")
    assert err.count("\n") == 1
    assert "(is this a verifier key?)" in err


def test_keygen_witness_makes_a_type_4_key_that_only_the_witness_roles_take(run_cli: Run, tmp_path: Path) -> None:
    """`keygen --witness` (spec 9.2): a private 0x04 key file, its verifier key on stdout, printed again by
    `verifier-key`; as a writer's `--trusted-key` it is refused, naming its type."""
    status, out, err = run_cli("keygen", "ops/witness", "--witness", "--out", str(tmp_path / "w.key"))
    assert status == 0, err
    signer = WitnessSigner.parse((tmp_path / "w.key").read_text().strip())
    assert stat.S_IMODE((tmp_path / "w.key").stat().st_mode) == 0o600
    assert out == signer.verifier().format() + "\n"
    assert WitnessKey.parse(out.strip()).name == "ops/witness"
    assert "witness key" in err
    assert signer.format() not in out + err
    assert run_cli("verifier-key", str(tmp_path / "w.key")) == (0, out, "")
    status, _, err = run_cli("audit", "--db", str(tmp_path / "none.db"), "--trusted-key", out.strip())
    assert status == 2
    assert "witness key (type 0x04)" in err


def test_keygen_never_overwrites(run_cli: Run, tmp_path: Path) -> None:
    """An existing file, key or not, stays as it was: exit 2 and one line."""
    path, _ = keygen(run_cli, tmp_path, "writer")
    before = path.read_bytes()
    status, out, err = run_cli("keygen", "writer", "--out", str(path))
    assert (status, out) == (2, "")
    assert err.count("\n") == 1
    assert "never overwritten" in err
    assert path.read_bytes() == before
    status, _, err = run_cli("keygen", "bad name", "--out", str(tmp_path / "x.key"))
    assert status == 2
    assert "invalid key name" in err
    assert not (tmp_path / "x.key").exists()


@pytest.mark.parametrize("name", ["wé", "writer-ñandú", "書き手", "🔏signer", "ops/検証"])
def test_keygen_takes_every_name_spec_9_2_allows(
    run_cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Latin-1, CJK and emoji names (issue 18): the key file is UTF-8, its verifier key (printed, and again by
    verifier-key) verifies a note signed with the key file, and the default file name is the key's name."""
    from compute_budget.core.log.note import sign_note
    from compute_budget.keys.key_files import default_key_file, load_signer_key

    status, out, err = run_cli("keygen", name, "--out", str(tmp_path / "chosen.key"))
    assert status == 0, err
    verifier = VerifierKey.parse(out.strip())
    assert verifier.name == name
    signer = load_signer_key(tmp_path / "chosen.key")
    assert (tmp_path / "chosen.key").read_bytes().decode("utf-8") == signer.format() + "\n"
    note = sign_note("example.org/log\n1\nAAAA\n", signer)
    assert verify_note(note, [verifier]).verified == (verifier,)
    assert run_cli("verifier-key", str(tmp_path / "chosen.key")) == (0, out, "")
    monkeypatch.chdir(tmp_path)
    status, _, err = run_cli("keygen", name)
    assert status == 0, err
    assert load_signer_key(tmp_path / default_key_file(name)).name == name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("two words", "white space character U+0020"),
        ("no\u00a0break", "white space character U+00A0"),
        ("ideographic\u3000space", "white space character U+3000"),
        ("tab\there", "control character U+0009"),
        ("a+b", "contains '+'"),
        ("bad\udcffbyte", "not valid UTF-8"),
    ],
)
def test_keygen_refuses_a_name_spec_9_2_forbids_and_leaves_no_file(
    run_cli: Run, tmp_path: Path, name: str, why: str
) -> None:
    """One line saying why; no file left behind to block a retry."""
    status, out, err = run_cli("keygen", name, "--out", str(tmp_path / "refused.key"))
    assert (status, out) == (2, "")
    assert err.count("\n") == 1
    assert "invalid key name" in err
    assert why in err
    assert list(tmp_path.iterdir()) == []


def test_a_key_file_written_by_another_tool_with_a_utf8_name_is_read(tmp_path: Path) -> None:
    """C2SP tools write key names as UTF-8: such a file (signer and verifier) is accepted, not refused as
    'not ASCII'; a file that is not UTF-8 at all is still one clear line."""
    from compute_budget.errors import InputError
    from compute_budget.keys.key_files import load_signer_key, verifier_key

    signer = SignerKey.from_seed("écrivain", bytes(range(32)))
    (tmp_path / "key").write_bytes(signer.format().encode("utf-8") + b"\n")
    (tmp_path / "key").chmod(0o600)
    assert load_signer_key(tmp_path / "key") == signer
    (tmp_path / "pub").write_bytes(signer.verifier().format().encode("utf-8") + b"\n")
    assert verifier_key(str(tmp_path / "pub")) == signer.verifier()
    (tmp_path / "latin1").write_bytes(signer.format().encode("latin-1") + b"\n")
    with pytest.raises(InputError, match="not UTF-8 text"):
        load_signer_key(tmp_path / "latin1")


def test_a_key_write_interrupted_after_creating_the_file_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file is this call's own: any failure after it was created removes it (a retry is not blocked)."""
    from compute_budget.errors import InputError
    from compute_budget.keys import key_files as keys_module

    def short_write(handle: int, content: bytes) -> int:
        return len(content) - 1

    monkeypatch.setattr(keys_module.os, "write", short_write)
    with pytest.raises(InputError, match="cannot write key"):
        keys_module.write_new_signer_key(tmp_path / "k.key", SignerKey.from_seed("wé", bytes(32)))
    assert not (tmp_path / "k.key").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("PRIVATE+KEY+writer+00000000+AAAA\n", "not a signer key"),
        ("writer+12345678+AYMxQBvQhFLctRc3W+MSZapq18aHRlo60C/dtUVq3U5v\n", "is this a verifier key?"),
        ("\x00\xff garbage", "not a key file"),
        ("PRIVATE+KEY+w\xe9+00000000+AAAA\n", "not a key file (it is not UTF-8 text)"),
        ("line one\nline two\n", "not a key file"),
        ("", "not a signer key"),
    ],
)
def test_a_corrupt_or_wrong_signing_key_is_one_clear_line(
    run_cli: Run, tmp_path: Path, content: str, message: str
) -> None:
    """record, checkpoint and audit --cosign refuse an unusable key with one line, before writing anything."""
    key = tmp_path / "bad.key"
    key.write_bytes(content.encode("latin-1"))
    key.chmod(0o600)
    db = tmp_path / "store.db"
    for argv in (
        ["record", EXAMPLES, "--db", str(db), "--signing-key", str(key)],
        ["checkpoint", "--db", str(db), "--signing-key", str(key)],
        ["audit", "--db", str(db), "--save-checkpoint", str(tmp_path / "cp"), "--cosign", str(key)],
    ):
        if argv[0] != "record":
            assert run_cli("record", EXAMPLES, "--db", str(db))[0] == 0
        status, out, err = run_cli(*argv)
        assert status == 2, argv
        assert out == ""
        assert err.count("\n") == 1
        assert message in err
        assert "Traceback" not in err
    assert not (tmp_path / "cp").exists()


@pytest.mark.parametrize("mode", [0o640, 0o644, 0o604, 0o666, 0o700 | 0o010])
def test_a_signer_key_file_readable_by_others_is_refused_naming_its_mode(
    run_cli: Run, tmp_path: Path, mode: int
) -> None:
    """Spec 9.3: any group or other permission bit refuses the key (exit 2, the mode named, the secret not shown);
    0600 and 0400 are used."""
    path, _ = keygen(run_cli, tmp_path, "writer")
    secret = path.read_text().strip()
    path.chmod(mode)
    for argv in (["record", EXAMPLES, "--db", str(tmp_path / "s.db"), "--signing-key", str(path)],
                 ["verifier-key", str(path)]):
        status, out, err = run_cli(*argv)
        assert (status, out) == (2, ""), argv
        assert f"has mode {mode:04o}" in err
        assert secret not in err
    path.chmod(0o400)
    assert run_cli("verifier-key", str(path))[0] == 0


def test_a_verifier_key_argument_is_a_key_before_it_is_a_path(
    run_cli: Run, signed: str, keys: dict[str, tuple[Path, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spec 9.3: a file planted in the working folder under the writer key's own text does not replace it."""
    writer_text = keys["writer"][1]
    insider = SignerKey.parse(keys["auditor"][0].read_text().strip())
    monkeypatch.chdir(tmp_path)
    planted = tmp_path / writer_text
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text(insider.verifier().format() + "\n")
    status, out, err = run_cli("audit", "--db", signed, "--trusted-key", writer_text, "--format", "json")
    assert status == 0, err
    assert json.loads(out)["attested_size"] == 28


def test_signer_key_text_given_as_a_trusted_key_is_never_echoed(
    run_cli: Run, signed: str, keys: dict[str, tuple[Path, str]], tmp_path: Path
) -> None:
    """A signer key pasted as --trusted-key: exit 2, one line, and its text is in no output, JSON or JUnit report."""
    secret = keys["writer"][0].read_text().strip()
    report_json, report_junit = tmp_path / "audit.json", tmp_path / "audit.xml"
    status, out, err = run_cli("audit", "--db", signed, "--trusted-key", secret,
                               "--report", f"json:{report_json}", "--report", f"junit:{report_junit}")
    assert status == 2
    assert "private signer key" in err
    written = out + err + "".join(path.read_text() for path in (report_json, report_junit) if path.exists())
    assert secret not in written
    assert secret.split("+", 4)[4] not in written  # not even the base64 of the seed
    for command in (["verify-proof", str(tmp_path / "none.json"), "--trusted-key", secret],
                    ["record", EXAMPLES, "--db", signed, "--signing-key", str(keys["writer"][0]),
                     "--peer-key", secret]):
        status, out, err = run_cli(*command)
        assert status == 2, command
        assert secret.split("+", 4)[4] not in out + err


@pytest.mark.slow
def test_a_key_option_naming_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    """--signing-key, --cosign and --trusted-key naming a FIFO are refused with one line, never waited on (they
    used to block for a writer that never comes, like a device that never ends)."""
    import os
    import subprocess
    import sys

    fifo = tmp_path / "key.fifo"
    os.mkfifo(fifo)
    db = tmp_path / "store.db"
    tool = [sys.executable, "-m", "compute_budget"]
    recorded = subprocess.run([*tool, "record", EXAMPLES, "--db", str(db)], capture_output=True, check=False)
    assert recorded.returncode == 0
    for argv in (
        ["record", EXAMPLES, "--db", str(db), "--signing-key", str(fifo)],
        ["checkpoint", "--db", str(db), "--signing-key", str(fifo)],
        ["audit", "--db", str(db), "--trusted-key", str(fifo)],
        ["audit", "--db", str(db), "--save-checkpoint", str(tmp_path / "cp"), "--cosign", str(fifo)],
    ):
        done = subprocess.run([*tool, *argv], capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 2, argv
        assert done.stderr.count("\n") == 1, done.stderr
        assert "is not a regular file (a device, pipe or socket)" in done.stderr
    assert not (tmp_path / "cp").exists()


def test_a_missing_key_file_and_a_signer_given_as_trusted_key(run_cli: Run, signed: str, tmp_path: Path,
                                                                keys: dict[str, tuple[Path, str]]) -> None:
    """--signing-key to nowhere, and a private key where a verifier key belongs, are refused without the secret."""
    status, _, err = run_cli("record", EXAMPLES, "--db", signed, "--signing-key", str(tmp_path / "nope.key"))
    assert status == 2
    assert "does not exist" in err
    secret = keys["writer"][0]
    status, _, err = run_cli("audit", "--db", signed, "--trusted-key", str(secret))
    assert status == 2
    assert "give its verifier key instead" in err
    assert secret.read_text().strip() not in err
    status, _, err = run_cli("audit", "--db", signed, "--trusted-key", "nobody+00000000+AAAA")
    assert status == 2
    assert "trusted key" in err


def test_a_key_file_is_never_an_output(run_cli: Run, signed: str, keys: dict[str, tuple[Path, str]]) -> None:
    """--save-checkpoint or --output naming the --cosign or --trusted-key file is refused before the audit."""
    cosign, verifier = keys["auditor"][0], keys["writer"][1]
    trusted = cosign.with_name("writer.pub")
    trusted.write_text(verifier + "\n")
    before = cosign.read_bytes(), trusted.read_bytes()
    for argv in (
        ["--save-checkpoint", str(cosign), "--cosign", str(cosign)],
        ["--save-checkpoint", str(cosign.with_name("cp")), "--cosign", str(cosign), "--output", str(cosign)],
        ["--trusted-key", str(trusted), "--output", str(trusted)],
    ):
        status, _, err = run_cli("audit", "--db", signed, *argv)
        assert status == 2, argv
        assert "must not overwrite it" in err
    assert (cosign.read_bytes(), trusted.read_bytes()) == before


@pytest.mark.postgres_smoke
def test_record_signs_and_checkpoint_prints_the_signed_head(
    run_cli: Run, signed: str, keys: dict[str, tuple[Path, str]]
) -> None:
    """Each record run leaves one signed checkpoint; `checkpoint --signing-key` prints (and stores nothing). A second
    key that never signed this store signs the head only beside the writer named as its peer (spec 9.1)."""
    writer, auditor = (VerifierKey.parse(keys[name][1]) for name in ("writer", "auditor"))
    assert [row[0] for row in query(signed, "SELECT tree_size FROM compute_budget_checkpoints ORDER BY id")] == [8, 28]
    both = ("checkpoint", "--db", signed, "--signing-key", str(keys["writer"][0]),
            "--signing-key", str(keys["auditor"][0]))
    status, out, err = run_cli(*both)
    assert (status, out) == (2, "")
    assert "rows 1..28 were appended by no trusted writer" in err
    status, out, err = run_cli(*both, "--peer-key", keys["writer"][1])
    assert status == 0, err
    outcome = verify_note(out, [writer, auditor])
    assert outcome.ok
    assert len(outcome.verified) == 2
    assert out.startswith("example.org/cli\n28\n")
    assert len(query(signed, "SELECT * FROM compute_budget_checkpoints")) == 2
    status, out, _ = run_cli("checkpoint", "--db", signed)
    document = json.loads(out)
    assert (document["origin"], document["tree_size"]) == ("example.org/cli", 28)


@pytest.mark.postgres_smoke
def test_the_witness_round(
    run_cli: Run, signed: str, keys: dict[str, tuple[Path, str]], tmp_path: Path
) -> None:
    """The nightly witness: audit with the writer's key, cosign the head; tomorrow's audit requires the note."""
    writer, auditor = keys["writer"][1], keys["auditor"][1]
    saved = tmp_path / "checkpoint.note"
    status, out, err = run_cli(
        "audit", "--db", signed, "--trusted-key", writer, "--save-checkpoint", str(saved),
        "--cosign", str(keys["auditor"][0]),
    )
    assert status == 0, out + err
    assert "attested      through seq 28" in out
    note = saved.read_text()
    outcome = verify_note(note, [VerifierKey.parse(writer), VerifierKey.parse(auditor)])
    assert len(outcome.verified) == 2  # the writer's stored signature, and the auditor's cosignature
    status, out, _ = run_cli("audit", "--db", signed, "--since", str(saved), "--trusted-key", auditor,
                             "--trusted-key", writer)
    assert status == 0, out
    json_checkpoint = tmp_path / "old.json"
    json_checkpoint.write_text(Checkpoint.from_note(note).to_json())
    status, out, _ = run_cli("audit", "--db", signed, "--checkpoint", str(json_checkpoint), "--trusted-key", writer,
                             "--format", "json")
    assert status == 1
    assert [f["kind"] for f in json.loads(out)["findings"]] == ["bad_signature"]
    unsigned = tmp_path / "unsigned.json"
    status, _, err = run_cli("audit", "--db", signed, "--trusted-key", writer, "--save-checkpoint", str(unsigned))
    assert status == 0
    assert f"warning: {unsigned} is an unsigned JSON checkpoint" in err  # it would be bad_signature tomorrow
    status, _, err = run_cli("audit", "--db", signed, "--save-checkpoint", str(unsigned))
    assert (status, "unsigned JSON checkpoint" in err) == (0, False)  # no keys trusted: JSON is all it needs


def test_cosign_refuses_a_store_that_no_longer_extends_its_last_cosignature(
    run_cli: Run, signed: str, keys: dict[str, tuple[Path, str]], tmp_path: Path
) -> None:
    """An audit given the auditor's own older note that the store no longer extends is not clean, and the new
    checkpoint is neither cosigned nor written."""
    saved, later = tmp_path / "night1.note", tmp_path / "night2.note"
    cosign = str(keys["auditor"][0])
    writer = keys["writer"][1]
    assert run_cli("audit", "--db", signed, "--trusted-key", writer, "--save-checkpoint", str(saved),
                   "--cosign", cosign)[0] == 0
    rewrite_consistently(signed, 2)
    status, _, err = run_cli("audit", "--db", signed, "--trusted-key", writer, "--since", str(saved),
                             "--save-checkpoint", str(later), "--cosign", str(keys["auditor"][0]))
    assert status == 1
    assert "was not written" in err
    assert not later.exists()


def test_unsigned_appends_are_unattested_on_the_command_line(
    run_cli: Run, signed: str, keys: dict[str, tuple[Path, str]], tmp_path: Path
) -> None:
    """A record without the key (an INSERT-capable forger) makes the trusted audit exit 1, naming the rows."""
    lines = tmp_path / "forged.jsonl"
    lines.write_text("\n".join(gate_lines(3, prefix="forged")) + "\n")
    status, out, err = run_cli("record", str(lines), "--db", signed)
    assert (status, out) == (2, "")
    assert "holds signed checkpoints" in err
    assert "--unsigned" in err
    assert run_cli("record", str(lines), "--db", signed, "--unsigned")[0] == 0
    status, out, _ = run_cli("audit", "--db", signed, "--trusted-key", keys["writer"][1], "--format", "json")
    assert status == 1
    report = json.loads(out)
    assert [(f["kind"], f["seq"]) for f in report["findings"]] == [("unattested_rows", 29)]
    assert "rows 29..31 (3 rows)" in report["findings"][0]["detail"]
    assert report["attested_size"] == 28


@pytest.mark.postgres_smoke
def test_prove_and_verify_proof(run_cli: Run, signed: str, keys: dict[str, tuple[Path, str]], tmp_path: Path) -> None:
    """prove prints a bundle; verify-proof checks it offline: 0 valid, 1 an edited row or an untrusted signer,
    2 an unreadable bundle; prove exits 1 for an unknown budget_id."""
    budget_id = str(rows(signed)[11][1])
    status, out, _ = run_cli("prove", budget_id[:12], "--db", signed)
    assert status == 0
    bundle = tmp_path / "proof.json"
    bundle.write_text(out)
    status, out, _ = run_cli(
        "verify-proof", str(bundle), "--trusted-key", keys["writer"][1], "--origin", "example.org/cli"
    )
    assert status == 0
    assert out.count("\n") == 1
    assert budget_id in out
    assert "seq 12" in out
    assert "example.org/cli" in out
    assert "tree size 28" in out
    assert "writer+" in out

    document = json.loads(bundle.read_text())
    document["row"]["max_candidates"] = 50
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(document))
    status, out, _ = run_cli("verify-proof", str(edited), "--trusted-key", keys["writer"][1])
    assert status == 1
    assert out.startswith("invalid (inclusion)")
    status, out, _ = run_cli("verify-proof", str(bundle), "--trusted-key", keys["auditor"][1])
    assert status == 1
    assert out.startswith("invalid (signature)")
    (tmp_path / "junk.json").write_text("{\"format\": \"compute_budget.proof.v1\"}")
    status, out, err = run_cli("verify-proof", str(tmp_path / "junk.json"), "--trusted-key", keys["writer"][1])
    assert (status, out) == (2, "")
    assert "incomplete proof bundle" in err
    status, _, err = run_cli("prove", "ab" * 32, "--db", signed)
    assert status == 1
    assert "no decision with budget_id" in err


def test_verify_proof_with_witness_keys_needs_their_cosignatures(
    run_cli: Run, signed: str, keys: dict[str, tuple[Path, str]], tmp_path: Path
) -> None:
    """Spec 9.3: with --witness-key the bundle's checkpoint must carry K valid cosignatures (default all): a
    writer-only receipt is `invalid (witness): 0 of 1 cosignatures`, the writer's own key given as a witness key is
    exit 2, and the same receipt cosigned by the witness verifies; a quorum outside 1..N is exit 2."""
    witness = WitnessSigner.from_seed("witness.example/w1", bytes(range(32)))
    other = WitnessSigner.from_seed("witness.example/w2", bytes(range(1, 33)))
    budget_id = str(rows(signed)[11][1])
    status, out, _ = run_cli("prove", budget_id, "--db", signed)
    assert status == 0
    bundle = tmp_path / "proof.json"
    bundle.write_text(out)
    writer = keys["writer"][1]
    status, out, _ = run_cli("verify-proof", str(bundle), "--trusted-key", writer,
                             "--witness-key", witness.verifier().format())
    assert (status, out) == (1, "invalid (witness): 0 of 1 cosignatures\n")
    status, _, err = run_cli("verify-proof", str(bundle), "--trusted-key", writer, "--witness-key", writer)
    assert status == 2
    assert "note key (type 0x01)" in err
    document = json.loads(bundle.read_text())
    note_text = document["checkpoint"]
    text = note_text[: note_text.rindex("\n\n") + 1]
    document["checkpoint"] = with_cosignatures(note_text, [witness.cosign(text, int(time.time()) - 60)])
    cosigned = tmp_path / "cosigned.json"
    cosigned.write_text(json.dumps(document))
    status, out, _ = run_cli("verify-proof", str(cosigned), "--trusted-key", writer,
                             "--witness-key", witness.verifier().format())
    assert status == 0, out
    both = ("--witness-key", witness.verifier().format(), "--witness-key", other.verifier().format())
    status, out, _ = run_cli("verify-proof", str(cosigned), "--trusted-key", writer, *both)
    assert (status, out) == (1, "invalid (witness): 1 of 2 cosignatures\n")
    assert run_cli("verify-proof", str(cosigned), "--trusted-key", writer, *both, "--witness-quorum", "1")[0] == 0
    status, _, err = run_cli("verify-proof", str(cosigned), "--trusted-key", writer, *both, "--witness-quorum", "3")
    assert status == 2
    assert "--witness-quorum" in err
    status, out, _ = run_cli("verify-proof", str(cosigned), "--trusted-key", writer, "--witness-key",
                             other.verifier().format())
    assert (status, out) == (1, "invalid (witness): 0 of 1 cosignatures\n")  # another witness's line is not its own


def test_verify_proof_refuses_a_deep_or_endless_file_with_one_line(
    run_cli: Run, keys: dict[str, tuple[Path, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JSON nested 100,000 deep is not a bundle (it was an "unexpected RecursionError"), and a file longer than
    any bundle is refused once that many bytes are read (`/dev/zero` used to fill the memory)."""
    import compute_budget.cli.keys_and_proofs as seal_commands

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    status, out, err = run_cli("verify-proof", str(deep), "--trusted-key", keys["writer"][1])
    assert (status, out) == (2, "")
    assert err == "compute-budget: error: the proof bundle is not a proof bundle (its JSON nests too deeply)\n"
    monkeypatch.setattr(seal_commands, "MAX_BUNDLE_BYTES", 1 << 20)
    status, out, err = run_cli("verify-proof", "/dev/zero", "--trusted-key", keys["writer"][1])
    assert (status, out) == (2, "")
    assert err == "compute-budget: error: proof bundle /dev/zero is larger than 1 MiB: not a bundle\n"


def test_prove_against_a_checkpoint_that_does_not_cover_the_row(
    run_cli: Run, signed: str, tmp_path: Path
) -> None:
    """--checkpoint naming fewer rows than the row's seq: exit 2."""
    first = query(signed, "SELECT note FROM compute_budget_checkpoints WHERE tree_size = 8")[0][0]
    (tmp_path / "first.note").write_text(first)
    note = str(tmp_path / "first.note")
    status, out, err = run_cli("prove", str(rows(signed)[20][1]), "--db", signed, "--checkpoint", note)
    assert (status, out) == (2, "")
    assert "not among them" in err
    assert run_cli("prove", str(rows(signed)[2][1]), "--db", signed, "--checkpoint", note)[0] == 0


def test_consistency_command(run_cli: Run, signed: str, keys: dict[str, tuple[Path, str]], tmp_path: Path) -> None:
    """0 and a checked proof while the store extends OLD; 1 once history is rewritten; 2 for an unusable OLD."""
    old = tmp_path / "old.note"
    old.write_text(query(signed, "SELECT note FROM compute_budget_checkpoints WHERE tree_size = 8")[0][0])
    status, out, _ = run_cli("consistency", str(old), "--db", signed, "--trusted-key", keys["writer"][1])
    assert status == 0
    document = json.loads(out)
    assert document["format"] == "compute_budget.consistency.v1"
    assert (document["origin"], document["old_size"], document["new_size"]) == ("example.org/cli", 8, 28)
    assert all(len(item) == 64 for item in document["proof"])
    status, _, err = run_cli("consistency", str(old), "--db", signed, "--trusted-key", keys["auditor"][1])
    assert status == 1
    assert "untrusted" in err
    rewrite_consistently(signed, 5)
    status, out, err = run_cli("consistency", str(old), "--db", signed, "--trusted-key", keys["writer"][1])
    assert (status, out) == (1, "")
    assert "rewritten" in err
    (tmp_path / "junk").write_text("junk\n")
    assert run_cli("consistency", str(tmp_path / "junk"), "--db", signed)[0] == 2
    old_json = tmp_path / "old.json"
    old_json.write_text('{"format": "compute_budget.core.log.checkpoint.v1", "seq": 1, "chain_hash": "' + "0" * 64
                        + '", "budget_id": null}')
    status, _, err = run_cli("consistency", str(old_json), "--db", signed)
    assert status == 2
    assert "root" in err


def test_origin_options(run_cli: Run, tmp_path: Path) -> None:
    """migrate --origin names a new store; record --origin of another name on it is refused (exit 2)."""
    db = tmp_path / "store.db"
    assert run_cli("migrate", "--db", str(db), "--origin", "example.org/named")[0] == 0
    assert run_cli("record", EXAMPLES, "--db", str(db))[0] == 0
    status, _, err = run_cli("record", EXAMPLES, "--db", str(db), "--origin", "example.org/other")
    assert status == 2
    assert "already example.org/named" in err
    status, _, err = run_cli("migrate", "--db", str(tmp_path / "x.db"), "--origin", "two words")
    assert status == 2
    assert "invalid origin" in err


def test_audit_origin_requires_the_store_to_be_that_log(run_cli: Run, tmp_path: Path) -> None:
    """audit --origin NAME: the named log audits clean, another store in its place is a finding (exit 1), and a
    NAME that is no origin is one line (exit 2)."""
    db = tmp_path / "store.db"
    assert run_cli("migrate", "--db", str(db), "--origin", "example.org/named")[0] == 0
    assert run_cli("record", EXAMPLES, "--db", str(db))[0] == 0
    assert run_cli("audit", "--db", str(db), "--origin", "example.org/named")[0] == 0
    status, out, _ = run_cli("audit", "--db", str(db), "--origin", "example.org/other")
    assert status == 1
    assert "this store is log example.org/named, not example.org/other: another store is in its place" in out
    status, out, err = run_cli("audit", "--db", str(db), "--origin", "two words")
    assert (status, out) == (2, "")
    assert err.count("\n") == 1
    assert "is not a log origin" in err


# -- spec 9.6: strict receipts --------------------------------------------------------------------------------


def _bundle_of(run_cli: Run, signed: str, seq: int) -> dict[str, object]:
    status, out, err = run_cli("prove", str(rows(signed)[seq - 1][1]), "--db", signed)
    assert status == 0, err
    return dict(json.loads(out))


def _stolen_key_bundle(run_cli: Run, signed: str, keys: dict[str, tuple[Path, str]], tmp_path: Path) -> str:
    """A proof bundle of row 28 as it is now stored, against a head note signed with the writer's key as a thief
    would (the honest writer refuses to sign over a row it did not write)."""
    from compute_budget import BudgetStore
    from compute_budget.core.log.note import format_checkpoint, sign_note

    with BudgetStore.open(signed, readonly=True) as store:
        head = store.checkpoint()
    assert head.origin is not None
    assert head.root is not None
    stolen = SignerKey.parse(keys["writer"][0].read_text().strip())
    note = tmp_path / "stolen.note"
    note.write_text(sign_note(format_checkpoint(head.origin, head.seq, head.root, head.chain_hash), stolen))
    status, bundle, err = run_cli("prove", str(rows(signed)[27][1]), "--db", signed, "--checkpoint", str(note))
    assert status == 0, err
    return bundle


def _verify_text(run_cli: Run, text: str, tmp_path: Path, key: str) -> tuple[int, str, str]:
    path = tmp_path / "bundle.json"
    path.write_text(text, encoding="utf-8")
    return run_cli("verify-proof", str(path), "--trusted-key", key)


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (lambda text: text.replace('"max_steps": ', '"max_steps": 100, "max_steps": ', 1), "twice"),
        (lambda text: text.replace('"row": {', '"row": {"seq": 1, ', 1), "twice"),
        (lambda text: text.replace('"format": ', '"format": "x", "format": ', 1), "twice"),
        (lambda text: text.replace('"leaf_index"', '"extra": 1, "leaf_index"', 1), "unknown key"),
        (lambda text: re.sub(r'"seq": \d+', '"seq": 18446744073709551616', text, count=1), "out of range"),
        (lambda text: re.sub(r'"seq": \d+', '"seq": 0', text, count=1), "seq 0"),
        (lambda text: re.sub(r'"leaf_index": \d+', '"leaf_index": 9223372036854775808', text, count=1), "leaf_index"),
        (lambda text: text.replace('"recorded_at": "', '"recorded_at": "\\ud800', 1), "not valid Unicode"),
        (lambda text: re.sub(r'"max_depth": \d+', '"max_depth": 1e3', text, count=1), "max_depth of type float"),
        (lambda text: re.sub(r'"chain_hash": "[0-9a-f]+"', '"chain_hash": "zz"', text, count=1), "chain_hash"),
    ],
)
def test_verify_proof_reads_a_bundle_strictly(
    run_cli: Run, signed: str, keys: dict[str, tuple[Path, str]], tmp_path: Path,
    spoil: Callable[[str], str], message: str,
) -> None:
    """Duplicate keys at any depth, unknown top-level keys, and every value of a wrong type or range: exit 2 with
    one line, never the internal-error handler (issue 19's trial: a duplicated max_steps used to verify)."""
    bundle = json.dumps(_bundle_of(run_cli, signed, 28), ensure_ascii=False)
    status, out, err = _verify_text(run_cli, spoil(bundle), tmp_path, keys["writer"][1])
    assert (status, out) == (2, ""), err
    assert err.count("\n") == 1
    assert message in err
    assert "unexpected" not in err


def test_a_row_that_is_not_the_last_leaf_carries_no_covered_chain_hash(
    run_cli: Run, signed: str, keys: dict[str, tuple[Path, str]], tmp_path: Path
) -> None:
    """prove leaves a non-last row's chain_hash out; a bundle given one (any value) verifies, saying it is not
    covered; the last row's chain_hash is checked against the note's chain line."""
    inner = _bundle_of(run_cli, signed, 12)
    row = inner["row"]
    assert isinstance(row, dict)
    assert "chain_hash" not in row
    row["chain_hash"] = "ab" * 32
    status, out, err = _verify_text(run_cli, json.dumps(inner), tmp_path, keys["writer"][1])
    assert status == 0, err
    assert out.startswith("valid")
    assert "chain_hash not covered" in out
    last = _bundle_of(run_cli, signed, 28)
    last_row = last["row"]
    assert isinstance(last_row, dict)
    assert "chain_hash" in last_row
    status, out, _ = _verify_text(run_cli, json.dumps(last), tmp_path, keys["writer"][1])
    assert (status, "chain_hash not covered" in out) == (0, False)
    last_row["chain_hash"] = "ab" * 32
    status, out, _ = _verify_text(run_cli, json.dumps(last), tmp_path, keys["writer"][1])
    assert status == 1
    assert out.startswith("invalid (chain)")
    del last_row["chain_hash"]
    status, _, err = _verify_text(run_cli, json.dumps(last), tmp_path, keys["writer"][1])
    assert status == 2
    assert "last leaf but has no chain_hash" in err


def test_a_wall_clock_limit_under_v1_is_invalid_in_a_receipt_and_in_the_audit(
    run_cli: Run, signed: str, keys: dict[str, tuple[Path, str]], tmp_path: Path
) -> None:
    """max_wallclock_ms is not hashed but v1 fixes it to null: a stored row carrying 86,400,000 is
    rederive_mismatch in the audit, and a receipt for it (signed here by a leaked key, since the honest writer
    refuses) is invalid (rederive) (spec 6 and 8, revision 3)."""
    from tests.backends import tamper

    tamper(signed, "UPDATE compute_budget_decisions SET max_wallclock_ms = 86400000 WHERE seq = 28")
    status, out, _ = run_cli("audit", "--db", signed, "--format", "json")
    assert status == 1
    findings = json.loads(out)["findings"]
    assert [item["seq"] for item in findings if item["kind"] == "rederive_mismatch"] == [28]
    bundle = _stolen_key_bundle(run_cli, signed, keys, tmp_path)
    status, out, _ = _verify_text(run_cli, bundle, tmp_path, keys["writer"][1])
    assert status == 1
    assert out.startswith("invalid (rederive)")
    assert "max_wallclock_ms stored 86400000" in out


def test_verify_proofs_output_is_terminal_safe(
    run_cli: Run, signed: str, keys: dict[str, tuple[Path, str]], tmp_path: Path
) -> None:
    """A receipt whose row was rewritten with escape sequences and signed with a stolen key: the rederive line
    quotes the stored text escaped, on one line, with no escape character."""
    from tests.backends import tamper

    hostile = "\x1b[2J\x1b[31mforged\nvalid: all is well\u202e"
    tamper(signed, ("UPDATE compute_budget_decisions SET reason_code = :code WHERE seq = 28", {"code": hostile}))
    bundle = _stolen_key_bundle(run_cli, signed, keys, tmp_path)
    status, out, _ = _verify_text(run_cli, bundle, tmp_path, keys["writer"][1])
    assert status == 1
    assert out.startswith("invalid (rederive)")
    assert "reason_code" in out
    assert "\x1b" not in out
    assert "\u202e" not in out
    assert out.count("\n") == 1


def test_cosign_keeps_only_the_signatures_it_verified(
    run_cli: Run, signed: str, keys: dict[str, tuple[Path, str]], tmp_path: Path
) -> None:
    """An insider plants checkpoint rows at the head's size: one signed by a key nobody trusts, one carrying a bogus
    line under the writer's name and key hash. The auditor's kept note took the first stored note of that size as it
    was: the planted lines travelled in, the writer's real signature could drop out, and the next night's --since
    failed on the auditor's own file. Now it holds the writer's verified signature and the auditor's, nothing else."""
    import base64

    from tests.backends import execute
    from tests.sealing import signer

    writer, auditor = (VerifierKey.parse(keys[name][1]) for name in ("writer", "auditor"))
    text = Checkpoint.from_note(query(signed, "SELECT note FROM compute_budget_checkpoints ORDER BY id DESC")[0][0])
    body = text.note_text()
    stranger = signer("stranger")
    bogus = f"— {writer.name} " + base64.b64encode(writer.key_hash.to_bytes(4, "big") + bytes(64)).decode() + "\n"
    for key_name, key_hash, note in (
        (stranger.name, f"{stranger.key_hash:08x}", sign_note(body, stranger)),
        ("other", "00000000", body + "\n" + bogus),
    ):
        execute(signed, (
            "INSERT INTO compute_budget_checkpoints (tree_size, key_name, key_hash, note, recorded_at) "
            "VALUES (28, :name, :hash, :note, 'x')", {"name": key_name, "hash": key_hash, "note": note},
        ))
    saved = tmp_path / "kept.note"
    status, out, err = run_cli("audit", "--db", signed, "--trusted-key", keys["writer"][1],
                               "--save-checkpoint", str(saved), "--cosign", str(keys["auditor"][0]))
    assert status == 0, out + err
    kept = saved.read_text()
    lines = kept.split("\n\n", 1)[1].splitlines()
    assert [line.split()[1] for line in lines] == [writer.name, auditor.name]
    outcome = verify_note(kept, [writer, auditor])
    assert (outcome.ok, len(outcome.verified)) == (True, 2)
    status, out, _ = run_cli("audit", "--db", signed, "--since", str(saved), "--trusted-key", keys["writer"][1],
                             "--trusted-key", keys["auditor"][1])
    assert status == 0, out


def _plant_newer_note(signed: str, writer: VerifierKey, *, size: int = 28) -> None:
    """An insider files a note at the head's size under the writer's name and key hash, its signature bogus: the
    newest stored note covering every row, and one no writer made."""
    import base64

    from tests.backends import execute

    newest = query(signed, "SELECT note FROM compute_budget_checkpoints ORDER BY id DESC")[0][0]
    body = Checkpoint.from_note(newest).note_text()
    bogus = f"— {writer.name} " + base64.b64encode(writer.key_hash.to_bytes(4, "big") + bytes(64)).decode() + "\n"
    execute(signed, (
        "INSERT INTO compute_budget_checkpoints (tree_size, key_name, key_hash, note, recorded_at) "
        "VALUES (:size, :name, :hash, :note, 'x')",
        {"size": size, "name": writer.name, "hash": f"{writer.key_hash:08x}", "note": body + "\n" + bogus},
    ))


def test_prove_with_the_writers_key_passes_over_a_planted_newer_note(
    run_cli: Run, signed: str, keys: dict[str, tuple[Path, str]], tmp_path: Path
) -> None:
    """Issue 28 r: `prove` alone attaches the newest stored note covering the row, a planted one included, and
    now says on stderr that it is unverified (the receipt then fails at verify-proof, as before); with
    `--trusted-key` it chooses the newest stored note whose writer signature verifies, and the receipt holds."""
    _plant_newer_note(signed, VerifierKey.parse(keys["writer"][1]))
    budget_id = rows(signed)[4][1]
    status, unchecked, err = run_cli("prove", budget_id, "--db", signed)
    assert status == 0
    assert "unverified" in err
    assert "--trusted-key" in err
    assert len(err.strip().splitlines()) == 1
    status, out, _ = _verify_text(run_cli, unchecked, tmp_path, keys["writer"][1])
    assert (status, out.split(":")[0]) == (1, "invalid (signature)")
    status, checked, err = run_cli("prove", budget_id, "--db", signed, "--trusted-key", keys["writer"][1])
    assert (status, err) == (0, "")
    assert json.loads(checked)["tree_size"] == 28
    status, out, _ = _verify_text(run_cli, checked, tmp_path, keys["writer"][1])
    assert status == 0, out


def test_prove_with_a_key_that_signed_nothing_here_exits_2(
    run_cli: Run, signed: str, keys: dict[str, tuple[Path, str]], tmp_path: Path
) -> None:
    """A --trusted-key under which no stored note covering the row verifies (the auditor's key here) is exit 2
    with one line, and so is a given --checkpoint that it does not verify: no receipt is printed."""
    budget_id = rows(signed)[4][1]
    status, out, err = run_cli("prove", budget_id, "--db", signed, "--trusted-key", keys["auditor"][1])
    assert (status, out) == (2, "")
    assert "no stored checkpoint covering row 5 carries a valid signature by a --trusted-key" in err
    note = tmp_path / "head.note"
    note.write_text(query(signed, "SELECT note FROM compute_budget_checkpoints ORDER BY id DESC")[0][0])
    status, out, err = run_cli(
        "prove", budget_id, "--db", signed, "--checkpoint", str(note), "--trusted-key", keys["auditor"][1]
    )
    assert (status, out) == (2, "")
    assert "the given checkpoint carries no valid signature by a --trusted-key" in err
    status, out, err = run_cli(
        "prove", budget_id, "--db", signed, "--checkpoint", str(note), "--trusted-key", keys["writer"][1]
    )
    assert (status, err) == (0, "")


def test_prove_with_witness_and_writer_keys_passes_over_a_planted_note_of_the_witnessed_size(
    served: Any, run_cli: Run, tmp_path: Path
) -> None:
    """Issue 28 r with witnesses: a note planted at the cosigned size (the same text, a bogus writer line) is what
    `prove --witness-key` attaches without a writer key; with `--trusted-key` it takes the writer's own note of that
    size, which carries the cosignature too, and the receipt verifies under both keys."""
    from tests.witnessing import LOG, ORIGIN, WITNESS

    writer_key, witness_key = LOG.verifier().format(), WITNESS.verifier().format()
    key = tmp_path / "writer.key"
    key.write_text(LOG.format() + "\n")
    key.chmod(0o600)
    db = str(tmp_path / "store.db")
    gates = tmp_path / "gates.jsonl"
    gates.write_text("\n".join(gate_lines(4)) + "\n")
    status, _, err = run_cli("record", str(gates), "--db", db, "--signing-key", str(key), "--origin", ORIGIN,
                             "--witness", f"http://127.0.0.1:{served.port}={witness_key}")
    assert status == 0, err
    _plant_newer_note(db, LOG.verifier(), size=4)
    budget_id = rows(db)[1][1]
    checks = ["--trusted-key", writer_key, "--witness-key", witness_key]
    status, receipt, _ = run_cli("prove", budget_id, "--db", db, "--witness-key", witness_key)
    assert status == 0
    assert _verify_text(run_cli, receipt, tmp_path, writer_key)[0] == 1
    status, receipt, err = run_cli("prove", budget_id, "--db", db, *checks)
    assert (status, err) == (0, "")
    (tmp_path / "r.json").write_text(receipt)
    status, out, _ = run_cli("verify-proof", str(tmp_path / "r.json"), *checks)
    assert status == 0, out
