"""`compute-budget prove --tiles LOCATION --trusted-key KEY ... (BUDGET_ID | --seq N)` (spec 10.3): a receipt from
a publication served over loopback HTTP, which `verify-proof` accepts in either format; the checkpoint is verified
before use, and an altered publication proves nothing."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from compute_budget.core.log.note import generate_signer
from compute_budget.keys.key_files import load_signer_key, write_new_signer_key
from compute_budget.store import BudgetStore
from tests.backends import is_postgres
from tests.conftest import BuiltOnce, copy_built, gate_lines
from tests.publications import publish_store, served_folder
from tests.witnessing import LOG, WITNESS, Served
from tests.witnessing import ORIGIN as WITNESSED_ORIGIN

Run = Callable[..., tuple[int, str, str]]
ORIGIN = "example.org/budget-log"


def _publish_signed_store(folder: Path, store: str) -> None:
    """Into `folder`: a writer key (`writer.key`, its state beside it), 300 signed rows recorded into `store`, and
    their publication (`published/`)."""
    key = generate_signer("writer")
    write_new_signer_key(folder / "writer.key", key)
    with BudgetStore.open(store, signing_key=str(folder / "writer.key"), origin=ORIGIN) as opened:
        opened.record_many([json.loads(line) for line in gate_lines(300)])
    publish_store(store, folder / "published", key.verifier())


@pytest.fixture
def publication(store_target: str, tmp_path: Path, built_once: BuiltOnce) -> Iterator[tuple[str, str, Path]]:
    """(URL, writer verifier key, folder) of a 300-row store published and served (on SQLite, a copy of one built
    once for this module)."""
    if is_postgres(store_target):
        _publish_signed_store(tmp_path, store_target)
    else:
        copy_built(built_once("publication", lambda folder: _publish_signed_store(folder, str(folder / "store.db"))),
                   tmp_path)
    key = load_signer_key(str(tmp_path / "writer.key")).verifier()
    with served_folder(tmp_path / "published") as url:
        yield url, key.format(), tmp_path / "published"


def test_a_receipt_by_seq_and_by_budget_id_verifies_in_both_formats(
    publication: tuple[str, str, Path], run_cli: Run, tmp_path: Path
) -> None:
    url, key, _ = publication
    status, out, err = run_cli("prove", "--tiles", url, "--trusted-key", key, "--seq", "7")
    assert status == 0, err
    bundle = json.loads(out)
    assert (bundle["leaf_index"], bundle["tree_size"], bundle["row"]["seq"]) == (6, 300, 7)
    assert "chain_hash" not in bundle["row"]  # spec 9.6: only the last leaf's is covered
    receipt = tmp_path / "receipt.json"
    receipt.write_text(out)
    status, out, _ = run_cli("verify-proof", str(receipt), "--trusted-key", key, "--origin", ORIGIN)
    assert status == 0
    assert out.startswith("valid: budget_id")
    assert "seq 7" in out
    prefix = bundle["row"]["budget_id"][:10]
    status, out, _ = run_cli("prove", "--tiles", url, "--trusted-key", key, prefix, "--format", "tlog-proof")
    assert status == 0
    receipt.write_text(out)
    status, out, _ = run_cli("verify-proof", str(receipt), "--trusted-key", key)
    assert status == 0
    assert "seq 7" in out
    assert "chain_hash not covered" in out


def test_the_last_row_carries_its_chain_hash_from_the_checkpoint(
    publication: tuple[str, str, Path], run_cli: Run
) -> None:
    url, key, folder = publication
    status, out, _ = run_cli("prove", "--tiles", url, "--trusted-key", key, "--seq", "300")
    assert status == 0
    chain = (folder / "checkpoint").read_text().split("\n")[3].removeprefix("chain ")
    assert json.loads(out)["row"]["chain_hash"] == chain


def test_unknown_rows_are_exit_1_and_usage_errors_exit_2(publication: tuple[str, str, Path], run_cli: Run) -> None:
    url, key, _ = publication
    assert run_cli("prove", "--tiles", url, "--trusted-key", key, "--seq", "301")[0] == 1
    assert run_cli("prove", "--tiles", url, "--trusted-key", key, "ab" * 32)[0] == 1
    assert run_cli("prove", "--tiles", url, "--seq", "3")[0] == 2  # no --trusted-key
    assert run_cli("prove", "--seq", "3")[0] == 2  # no --tiles
    assert run_cli("prove", "--tiles", url, "--trusted-key", key, "--db", "x.db", "--seq", "3")[0] == 2


def test_a_budget_id_that_is_no_hex_is_a_usage_error_before_any_bundle_is_read(
    publication: tuple[str, str, Path], run_cli: Run
) -> None:
    url, key, _ = publication
    for budget_id in ("not-a-hash", "abc1234"):  # no hex / under 8 digits: exit 2 as without --tiles, not a scan
        status, out, err = run_cli("prove", "--tiles", url, "--trusted-key", key, budget_id)
        assert (status, out) == (2, ""), err
        assert f"{budget_id!r} is not a budget_id" in err
        assert len(err.strip().splitlines()) == 1
    assert run_cli("prove", "--db", "unused.db", "not-a-hash")[0] == 2


@pytest.mark.parametrize("location", ["ftp://logs.example.org/budget/", "file:///srv/published", "file:published"])
def test_a_location_that_is_neither_http_nor_a_folder_is_exit_2_in_one_line(
    run_cli: Run, tmp_path: Path, location: str
) -> None:
    (tmp_path / "published").mkdir()  # `file:published` is refused though a folder `published` exists here
    status, out, err = run_cli("prove", "--tiles", location, "--trusted-key", LOG.verifier().format(), "--seq", "1")
    assert (status, out) == (2, "")
    assert f"a {location.split(':')[0]}: URL is not read: give a folder or an http:// or https:// prefix" in err
    assert len(err.strip().splitlines()) == 1


def test_a_folder_that_does_not_exist_is_exit_2_in_one_line(run_cli: Run, tmp_path: Path) -> None:
    missing = tmp_path / "no-publication-here"
    status, out, err = run_cli("prove", "--tiles", str(missing), "--trusted-key", LOG.verifier().format(), "--seq", "1")
    assert (status, out) == (2, "")
    assert f"no such folder: {missing}" in err
    assert len(err.strip().splitlines()) == 1
    assert not missing.exists()


def test_a_checkpoint_by_another_key_or_an_altered_entry_proves_nothing(
    publication: tuple[str, str, Path], run_cli: Run, tmp_path: Path
) -> None:
    url, key, folder = publication
    other = tmp_path / "other.key"
    run_cli("keygen", "other", "--out", str(other))
    status, _, err = run_cli("prove", "--tiles", url, "--trusted-key",
                             load_signer_key(str(other)).verifier().format(), "--seq", "3")
    assert status == 2
    assert "no valid signature by a --trusted-key" in err
    bundle = folder / "tile" / "entries" / "000"
    data = bundle.read_bytes()
    length = int.from_bytes(data[:2], "big")
    edited = data[2 : 2 + length].replace(b'"explanation":"', b'"explanation":"?', 1)
    bundle.write_bytes(len(edited).to_bytes(2, "big") + edited + data[2 + length :])
    status, _, err = run_cli("prove", "--tiles", url, "--trusted-key", key, "--seq", "1")
    assert status == 2
    assert "do not prove row 1" in err


def test_a_tile_that_does_not_hash_to_the_root_proves_nothing(
    publication: tuple[str, str, Path], run_cli: Run
) -> None:
    url, key, folder = publication
    tile = folder / "tile" / "1" / "000.p" / "1"
    data = bytearray(tile.read_bytes())
    data[0] ^= 1
    tile.write_bytes(bytes(data))
    status, out, err = run_cli("prove", "--tiles", url, "--trusted-key", key, "--seq", "3")
    assert (status, out) == (2, "")
    assert "cannot prove row 3" in err
    assert "do not hash to the checkpoint's root" in err


def test_with_witness_keys_the_published_checkpoint_must_carry_their_cosignatures(
    served: Served, run_cli: Run, store_target: str, tmp_path: Path
) -> None:
    key_file = tmp_path / "log.key"
    key_file.write_text(LOG.format() + "\n")
    key_file.chmod(0o600)
    gates = tmp_path / "gates.jsonl"
    gates.write_text("\n".join(gate_lines(5)) + "\n")
    witness = f"http://127.0.0.1:{served.port}={WITNESS.verifier().format()}"
    recorded = run_cli("record", str(gates), "--db", store_target, "--signing-key", str(key_file), "--origin",
                       WITNESSED_ORIGIN, "--witness", witness)
    assert recorded[0] == 0, recorded[2]
    cosigned = publish_store(store_target, tmp_path / "cosigned", LOG.verifier(), witness_keys=(WITNESS.verifier(),))
    bare = publish_store(store_target, tmp_path / "bare", LOG.verifier())  # the cosignature left out
    options = ("--trusted-key", LOG.verifier().format(), "--witness-key", WITNESS.verifier().format(), "--seq", "2")
    status, out, err = run_cli("prove", "--tiles", str(cosigned), *options)
    assert status == 0, err
    receipt = tmp_path / "receipt.json"
    receipt.write_text(out)
    verified = run_cli("verify-proof", str(receipt), "--trusted-key", LOG.verifier().format(), "--witness-key",
                       WITNESS.verifier().format())
    assert verified[0] == 0, verified[1] + verified[2]
    status, out, err = run_cli("prove", "--tiles", str(bare), *options)
    assert (status, out) == (2, "")
    assert "carries 0 of 1 cosignatures by --witness-key keys" in err
