"""The one audit over a publication (`AuditRequest(target=PublicationTarget(...))`, spec 10.2): what each damaged
file of a publication served over loopback HTTP gives, a finding or one clear line, and `--jobs` giving the one
process report. Each test names the first affected seq."""

from __future__ import annotations

import base64
import functools
import http.server
import re
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from compute_budget.auditor import ranges
from compute_budget.auditor.key_states import configured_states
from compute_budget.auditor.report import AuditReport
from compute_budget.auditor.request import AuditRequest
from compute_budget.auditor.scan import run_audit
from compute_budget.core.log.note import SignerKey, format_checkpoint, sign_note
from compute_budget.errors import PublicationUnavailable
from compute_budget.publication_reader.snapshot import Publication, PublicationTarget
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
        PublicationTarget(location, timeout=5.0), trusted_keys=(writer.verifier(),),
        **{"jobs": 1, "expected_origin": ORIGIN, **options},  # type: ignore[arg-type]
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
    # Spec 11.3: the tile is judged on its own (the level-0 tiles below it give the root, it does not).
    assert _kinds(report) == [("published_mismatch", 1)]
    assert report.findings[0].detail.startswith("tile/1/000.p/2 was edited: it does not hash to its value in the "
                                                "checkpoint's root (rows 1..512)")


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


# -- spec 11.2: the signature first -------------------------------------------------------------------------------


def _forge(folder: Path, line: int, value: str) -> None:
    """Change line `line` of the published checkpoint (1: its size, 2: its root) under its signature."""
    lines = (folder / "checkpoint").read_text().split("\n")
    lines[line] = value
    (folder / "checkpoint").write_text("\n".join(lines))


@pytest.mark.parametrize(("line", "value", "seq"), [
    (1, "100000", 100_000), (1, "7", 7), (2, base64.b64encode(bytes(32)).decode(), ROWS),
])
def test_a_forged_checkpoint_is_bad_signature_before_any_tile_is_read(
    folder: Path, writer: SignerKey, line: int, value: str, seq: int
) -> None:
    _forge(folder, line, value)
    shutil.rmtree(folder / "tile")  # any read of a tile or bundle would be exit 2 (missing), not a finding
    report = _audit(str(folder), writer)
    assert _kinds(report) == [("bad_signature", seq)]
    assert "does not verify" in report.findings[0].detail
    assert report.rows_checked == 0


def test_a_checkpoint_of_another_log_is_checkpoint_mismatch_before_any_tile_is_read(
    folder: Path, writer: SignerKey
) -> None:
    shutil.rmtree(folder / "tile")
    report = _audit(str(folder), writer, expected_origin="example.org/another-log")
    assert _kinds(report) == [("checkpoint_mismatch", ROWS)]
    assert "another log is published in its place" in report.findings[0].detail


def test_a_checkpoint_no_trusted_key_signed_is_bad_signature_naming_its_signer(folder: Path) -> None:
    shutil.rmtree(folder / "tile")
    stranger = SignerKey.from_seed("stranger", bytes(32))
    report = _audit(str(folder), stranger)
    assert _kinds(report) == [("bad_signature", ROWS)]
    assert f"(signed by writer (key ID {WRITER.verifier().key_hash:08x}), unverified)" in report.findings[0].detail


def test_a_missing_tile_of_a_checkpoint_that_verified_stays_exit_2(folder: Path, writer: SignerKey) -> None:
    (folder / "tile" / "0" / "000").unlink()
    with pytest.raises(PublicationUnavailable, match=r"tile/0/000 is missing from the publication; it holds rows"):
        _audit(str(folder), writer)


# -- spec 11.3: the whole tree, every night -----------------------------------------------------------------------


def _edit_tile(folder: Path, path: str) -> None:
    tile = folder / path
    data = bytearray(tile.read_bytes())
    data[70] ^= 1
    tile.write_bytes(bytes(data))


def _published_note(folder: Path) -> str:
    return (folder / "checkpoint").read_text()


@pytest.mark.parametrize("since", [False, True])
def test_an_edited_level_0_tile_is_named_as_the_tile_with_or_without_since(
    folder: Path, writer: SignerKey, since: bool
) -> None:
    options: dict[str, object] = {"since": _published_note(folder), "look_back": 7, "look_back_day": 1} if since else {}
    _edit_tile(folder, "tile/0/000")  # below --since, outside look-back slice 1 of 7: its entries are not read
    report = _audit(str(folder), writer, **options)
    assert _kinds(report) == [("published_mismatch", 1)]
    assert report.findings[0].detail.startswith("tile/0/000 was edited: it does not hash to its value in "
                                                "tile/1/000.p/2 (rows 1..256)")


def test_an_edited_bundle_under_a_tile_that_holds_is_named_as_the_bundle(folder: Path, writer: SignerKey) -> None:
    bundle = folder / "tile" / "entries" / "001"
    data = bytearray(bundle.read_bytes())
    data[40] ^= 1  # an entry of row 257
    bundle.write_bytes(bytes(data))
    report = _audit(str(folder), writer)
    assert _kinds(report)[0] == ("published_mismatch", 257)
    assert "the entry bundle was edited" in report.findings[0].detail
    assert not any(finding.detail.startswith("tile/") for finding in report.findings)


def test_unattested_rows_never_start_below_the_size_the_since_note_vouches_for(folder: Path) -> None:
    # Spec 11.6. A stale mirror at ROWS, its checkpoint signed by WRITER, which the auditor knows was revoked at a
    # size the mirror does not reach: the publication cannot prove WRITER's note, so no row is vouched for by it.
    # The kept --since note, at 256, signed by the log's other writer key, still vouches for rows 1..256.
    other = SignerKey.from_seed("other-writer", bytes(range(1, 33)))
    with Publication(PublicationTarget(str(folder))) as publication, publication.snapshot() as snapshot:
        root, chain = snapshot.frontier(256).root(), snapshot.chain_at(256)
    assert chain is not None
    since = sign_note(format_checkpoint(ORIGIN, 256, root, chain), other)
    revoked = f"{WRITER.verifier().format()}@{ROWS + 100}:{base64.b64encode(bytes(32)).decode()}"
    report = run_audit(AuditRequest(
        PublicationTarget(str(folder)), trusted_keys=(WRITER.verifier(), other.verifier()), expected_origin=ORIGIN,
        since=since, key_states=configured_states(revoked=[revoked]),
    ))
    unattested = [finding for finding in report.findings if finding.kind.value == "unattested_rows"]
    assert [finding.seq for finding in unattested] == [257], _kinds(report)
    assert f"rows 257..{ROWS}" in unattested[0].detail
    assert "--since" in unattested[0].detail


def test_an_incremental_audit_names_the_bundles_it_did_not_read(folder: Path, writer: SignerKey) -> None:
    report = _audit(str(folder), writer, since=_published_note(folder), look_back=7, look_back_day=1)
    assert report.clean
    assert [item for item in report.warnings if item.startswith("entries not read")] == [
        "entries not read: 1 entry bundle(s) (rows 1..256), below --since and outside today's --look-back 7 slice; "
        "their hash tiles were read and checked"
    ]
    assert not any("entries not read" in item for item in _audit(str(folder), writer).warnings)


def test_the_tiles_are_counted_on_the_progress_bar_as_they_are_read(folder: Path, writer: SignerKey) -> None:
    seen: list[tuple[int, int]] = []
    _audit(str(folder), writer, since=_published_note(folder), on_progress=lambda *done: seen.append(done))
    assert seen[:3] == [(256, ROWS), (512, ROWS), (ROWS, ROWS)]  # no row is above --since: only the tiles count


# -- spec 11.3 (a deleted partial) and 11.7.6 (an audit racing a publish) ------------------------------------------


def _grown(tmp_path: Path, sizes: tuple[int, ...]) -> tuple[Path, list[str]]:
    """A store published at each of `sizes` in turn into one folder; the checkpoint of each, and the folder with
    every partial tile and bundle but the last publish's removed (C2SP lets a log delete them)."""
    target, folder = str(tmp_path / "store.db"), tmp_path / "published"
    notes: list[str] = []
    with BudgetStore.open(target, origin=ORIGIN, signing_key=WRITER) as store:
        for before, size in zip((0, *sizes), sizes, strict=False):
            store.record_many([make_gate(decision_id=f"row-{index}") for index in range(before, size)])
            publish_store(target, folder, WRITER.verifier())
            notes.append((folder / "checkpoint").read_text())
    for size in sizes[:-1]:
        if size % 256:
            for kind in ("0", "entries"):
                (folder / "tile" / kind / f"{size // 256:03d}.p" / str(size % 256)).unlink(missing_ok=True)
    return folder, notes


@pytest.mark.usefixtures("writer_state_env")
def test_a_deleted_partial_is_read_from_the_full_tile_at_its_position(tmp_path: Path) -> None:
    folder, notes = _grown(tmp_path, (300, 512))  # tile 1 is full at 512: 001.p/44 and its bundle are gone
    (folder / "checkpoint").write_text(notes[0])
    report = _audit(str(folder), WRITER)
    assert report.clean, report.findings
    assert report.rows_checked == 300


@contextmanager
def _racing(folder: Path, notes: list[str]) -> Iterator[str]:
    """`folder` over loopback HTTP, its checkpoint answered with each of `notes` in turn (the last one for good):
    a `publish` that replaces the checkpoint while an audit reads."""
    answers = list(notes)

    class Racing(http.server.SimpleHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/checkpoint":
                return super().do_GET()
            body = (answers.pop(0) if len(answers) > 1 else answers[0]).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return None

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Racing, directory=str(folder)))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.usefixtures("writer_state_env")
def test_an_audit_racing_a_publish_starts_again_once_from_the_new_checkpoint(tmp_path: Path) -> None:
    folder, notes = _grown(tmp_path, (300, 400))  # 001.p/44 gone, 001.p/144 in its place
    with _racing(folder, notes) as url:
        report = _audit(url, WRITER)
    assert report.clean, report.findings
    assert (report.rows_checked, report.checkpoint.seq if report.checkpoint else None) == (400, 400)


@pytest.mark.usefixtures("writer_state_env")
def test_an_audit_that_races_two_publishes_is_exit_2_never_a_finding(tmp_path: Path) -> None:
    folder, notes = _grown(tmp_path, (300, 350, 400))
    with _racing(folder, notes) as url, pytest.raises(
        PublicationUnavailable, match=r"^the publication changed while it was read; run again$"
    ):
        _audit(url, WRITER)
