"""The one audit over a publication (`AuditRequest(target=PublicationTarget(...))`, spec 10.2): what each damaged
file of a publication served over loopback HTTP gives, a finding or one clear line, and `--jobs` giving the one
process report. Each test names the first affected seq."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from compute_budget.auditor import ranges
from compute_budget.auditor.report import AuditReport
from compute_budget.auditor.request import AuditRequest
from compute_budget.auditor.scan import run_audit
from compute_budget.core.log.note import SignerKey
from compute_budget.errors import PublicationUnavailable
from compute_budget.publication_reader.snapshot import PublicationTarget
from compute_budget.store import BudgetStore
from tests.backends import is_postgres
from tests.conftest import BuiltOnce, copy_built, make_gate
from tests.publications import publish_store, served_folder

ORIGIN = "example.org/budget-log"
ROWS = 600


# One writer for the module: the publication below is built once and copied, so every test must trust its key.
WRITER = SignerKey.from_seed("writer", bytes(range(32)))


@pytest.fixture
def writer() -> SignerKey:
    return WRITER


def _publish_signed_store(folder: Path, store: str) -> None:
    """`ROWS` rows signed by `WRITER` into `store` (its writer state in `folder`), published into `published/`."""
    with BudgetStore.open(store, origin=ORIGIN, signing_key=WRITER, writer_state=folder / "writer.state") as opened:
        opened.record_many([make_gate(decision_id=f"row-{index}") for index in range(ROWS)])
    publish_store(store, folder / "published", WRITER.verifier())


@pytest.fixture
def folder(store_target: str, tmp_path: Path, built_once: BuiltOnce) -> Path:
    """A signed store of `ROWS` rows on each backend, published (on SQLite, a copy of one built once per module)."""
    if is_postgres(store_target):
        _publish_signed_store(tmp_path, store_target)
    else:
        copy_built(built_once("published", lambda built: _publish_signed_store(built, str(built / "store.db"))),
                   tmp_path)
    return tmp_path / "published"


@pytest.fixture
def url(folder: Path) -> Iterator[str]:
    with served_folder(folder) as served:
        yield served


def _audit(location: str, writer: SignerKey, **options: object) -> AuditReport:
    request = AuditRequest(
        PublicationTarget(location, timeout=5.0), trusted_keys=(writer.verifier(),), expected_origin=ORIGIN,
        **{"jobs": 1, **options},  # type: ignore[arg-type]
    )
    return run_audit(request)


def _kinds(report: AuditReport) -> list[tuple[str, int | None]]:
    return [(finding.kind.value, finding.seq) for finding in report.findings]


def test_a_clean_publication_over_http(url: str, writer: SignerKey) -> None:
    report = _audit(url, writer)
    assert report.clean
    assert report.rows_checked == ROWS
    assert report.attested_size == ROWS


@pytest.mark.parametrize(("tile", "rows"), [("1/000.p/2", "1..512"), ("0/002.p/88", "513..600")])
def test_a_missing_tile_is_one_clear_line_naming_its_rows(
    folder: Path, url: str, writer: SignerKey, tile: str, rows: str
) -> None:
    (folder / "tile" / tile).unlink()
    said = rf"tile/{re.escape(tile)} is missing from the publication \(404\); it holds rows {re.escape(rows)}$"
    with pytest.raises(PublicationUnavailable, match=said):
        _audit(url, writer)


def test_a_tile_of_the_wrong_length_is_one_clear_line(folder: Path, url: str, writer: SignerKey) -> None:
    tile = folder / "tile" / "0" / "001"
    tile.write_bytes(tile.read_bytes()[:-1])
    with pytest.raises(PublicationUnavailable, match=r"tile/0/001: is 8191 bytes, a tile of width 256 is 8192"):
        _audit(url, writer)


def test_a_tile_that_does_not_hash_to_its_parent_is_a_finding(folder: Path, url: str, writer: SignerKey) -> None:
    tile = folder / "tile" / "1" / "000.p" / "2"
    data = bytearray(tile.read_bytes())
    data[40] ^= 1  # the hash of level-0 tile 1 (rows 257..512)
    tile.write_bytes(bytes(data))
    report = _audit(url, writer)
    assert _kinds(report)[0] == ("checkpoint_mismatch", 512)
    assert "level 8, index 1, over rows 257..512" in report.findings[0].detail


def test_an_entry_bundle_with_a_wrong_length_prefix_is_one_clear_line(
    folder: Path, url: str, writer: SignerKey
) -> None:
    bundle = folder / "tile" / "entries" / "000"
    data = bundle.read_bytes()
    bundle.write_bytes(data[:-10])  # the last entry's prefix now says 10 bytes more than the bundle holds
    with pytest.raises(PublicationUnavailable, match=r"tile/entries/000: entry 255: length prefix \d+ runs past"):
        _audit(url, writer)


def test_an_entry_bundle_with_too_few_entries_is_one_clear_line(folder: Path, url: str, writer: SignerKey) -> None:
    bundle = folder / "tile" / "entries" / "002.p" / "88"
    data = bundle.read_bytes()
    first = int.from_bytes(data[:2], "big")
    bundle.write_bytes(data[2 + first :])  # row 513 dropped
    with pytest.raises(PublicationUnavailable, match=r"tile/entries/002\.p/88: holds 87 entries, a bundle of width 88"):
        _audit(url, writer)


def test_a_checkpoint_that_does_not_verify_is_bad_signature(folder: Path, url: str, writer: SignerKey) -> None:
    checkpoint = folder / "checkpoint"
    text, signature = checkpoint.read_text().rsplit(" ", 1)
    raw = bytearray(base64.b64decode(signature))
    raw[-1] ^= 1
    checkpoint.write_text(f"{text} {base64.b64encode(bytes(raw)).decode()}\n")
    report = _audit(url, writer)
    assert ("bad_signature", ROWS) in _kinds(report)
    assert not report.clean


def test_a_checkpoint_that_is_no_checkpoint_is_one_clear_line(folder: Path, url: str, writer: SignerKey) -> None:
    (folder / "checkpoint").write_text("not a checkpoint\n")
    with pytest.raises(PublicationUnavailable, match="not a signed checkpoint"):
        _audit(url, writer)


@pytest.mark.slow
def test_jobs_give_the_one_process_report(
    tmp_path: Path, writer: SignerKey, writer_state_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ranges, "MIN_ROWS_PER_JOB", 256)  # split these few rows as a large store would be
    target = str(tmp_path / "store.db")
    with BudgetStore.open(target, origin=ORIGIN, signing_key=writer) as store:
        store.record_many([make_gate(decision_id=f"row-{index}") for index in range(1_500)])
    folder = publish_store(target, tmp_path / "published", writer.verifier())
    entries = folder / "tile" / "entries" / "002"
    data = bytearray(entries.read_bytes())
    data[40] ^= 1  # an entry of row 513 edited
    entries.write_bytes(bytes(data))
    one, three = _audit(str(folder), writer), _audit(str(folder), writer, jobs=3)
    assert three.jobs == 3
    assert sorted(_kinds(three), key=str) == sorted(_kinds(one), key=str)
    assert ("published_mismatch", 513) in _kinds(one)
    assert (one.rows_checked, three.rows_checked) == (1_500, 1_500)
