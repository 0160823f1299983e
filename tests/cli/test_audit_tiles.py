"""`compute-budget audit --tiles LOCATION` (spec 10.2) over real HTTP on loopback: the same verdict and exit status
as `audit --db` of the store a publication was made from, and what a publication altered after publishing gives.
Each test names the first affected seq."""

from __future__ import annotations

import http.server
import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

import pytest

from compute_budget.core.leaf import leaf_input
from compute_budget.core.log.note import SignerKey, generate_signer
from compute_budget.keys.key_files import load_signer_key, write_new_signer_key
from compute_budget.store import BudgetStore
from tests.backends import is_postgres, tamper
from tests.conftest import BuiltOnce, copy_built, gate_lines
from tests.e2e.test_docs import OPERATIONS, commands, fenced, shell
from tests.publications import publish_store, served_folder, write_publication, write_tiles
from tests.witnessing import LOG, WITNESS, HandlerFactory, Served, WitnessFactory, late_clock
from tests.witnessing import ORIGIN as WITNESSED_ORIGIN

Run = Callable[..., tuple[int, str, str]]
ORIGIN = "example.org/budget-log"
ROWS = 600  # two full level-0 tiles and a partial one


@dataclass(frozen=True, slots=True)
class Published:
    """A store, its writer key and its publication, served over HTTP."""

    store: str
    key_file: Path
    key: SignerKey
    folder: Path
    url: str

    def audit(self, run_cli: Run, *extra: str, location: str | None = None) -> tuple[int, dict, str]:  # type: ignore[type-arg]
        status, out, err = run_cli(
            "audit", "--tiles", location or self.url, "--origin", ORIGIN, "--trusted-key",
            self.key.verifier().format(), "--format", "json", "--jobs", "1", *extra,
        )
        return status, json.loads(out) if out.strip() else {}, err


def _record(run_cli: Run, store: str, key_file: Path, count: int, prefix: str, *extra: str) -> None:
    gates = key_file.with_name(f"{prefix}.jsonl")
    gates.write_text("\n".join(gate_lines(count, prefix=prefix)) + "\n")
    status, _, err = run_cli("record", str(gates), "--db", store, "--signing-key", str(key_file), *extra)
    assert status == 0, err


def _publish_signed_store(folder: Path, store: str) -> None:
    """Into `folder`: a writer key (`writer.key`, its state beside it), `ROWS` signed rows recorded into `store`,
    and their publication (`published/`)."""
    key = generate_signer("writer")
    write_new_signer_key(folder / "writer.key", key)
    gates = [json.loads(line) for line in gate_lines(ROWS, prefix="night")]
    with BudgetStore.open(store, signing_key=str(folder / "writer.key"), origin=ORIGIN) as opened:
        opened.record_many(gates)
    publish_store(store, folder / "published", key.verifier())


@pytest.fixture
def published(store_target: str, tmp_path: Path, built_once: BuiltOnce) -> Iterator[Published]:
    """A signed store of `ROWS` rows on each backend, published into a folder served on loopback (on SQLite, a copy
    of one built once for this module)."""
    if is_postgres(store_target):
        _publish_signed_store(tmp_path, store_target)
    else:
        built = built_once("published", lambda folder: _publish_signed_store(folder, str(folder / "store.db")))
        copy_built(built, tmp_path)
        assert Path(store_target) == tmp_path / "store.db"
    key_file = tmp_path / "writer.key"
    key = load_signer_key(str(key_file))
    with served_folder(tmp_path / "published") as url:
        yield Published(store_target, key_file, key, tmp_path / "published", url)


def _kinds(report: dict) -> list[tuple[str, int | None]]:  # type: ignore[type-arg]
    return [(item["kind"], item["seq"]) for item in report["findings"]]


def _action(report: dict, kind: str) -> str:  # type: ignore[type-arg]
    return str(next(item["action"] for item in report["findings"] if item["kind"] == kind))


def _edit_entry(folder: Path, seq: int, old: bytes, new: bytes) -> list[bytes]:
    """Edit the entry of row `seq` in its bundle (lengths kept right); returns every entry, edited."""
    entries = _entries(folder)
    assert old in entries[seq - 1]
    entries[seq - 1] = entries[seq - 1].replace(old, new, 1)
    bundle = folder / "tile" / "entries" / f"{(seq - 1) // 256:03d}"
    chunk = entries[(seq - 1) // 256 * 256 : (seq - 1) // 256 * 256 + 256]
    bundle.write_bytes(b"".join(len(item).to_bytes(2, "big") + item for item in chunk))
    return entries


def _entries(folder: Path) -> list[bytes]:
    found: list[bytes] = []
    for path in sorted((folder / "tile" / "entries").rglob("*")):
        if path.is_file():
            data, offset = path.read_bytes(), 0
            while offset < len(data):
                length = int.from_bytes(data[offset : offset + 2], "big")
                found.append(data[offset + 2 : offset + 2 + length])
                offset += 2 + length
    return found


def test_a_clean_publication_audits_as_its_store_does(published: Published, run_cli: Run) -> None:
    status, report, err = published.audit(run_cli)
    db_status, db_out, _ = run_cli("audit", "--db", published.store, "--format", "json", "--trusted-key",
                                   published.key.verifier().format())
    assert (status, report["clean"]) == (db_status, json.loads(db_out)["clean"]) == (0, True)
    assert report["rows_checked"] == json.loads(db_out)["rows_checked"] == ROWS
    assert "freshness not checked: a stale mirror would pass" in err
    assert any("freshness not checked" in item for item in report["warnings"])
    assert (report["freshness_checked"], json.loads(db_out)["freshness_checked"]) == (False, None)
    text = run_cli("audit", "--tiles", published.url, "--origin", ORIGIN, "--trusted-key",
                   published.key.verifier().format())[1]
    assert "  freshness     not checked: a stale mirror would pass (give --witness-url URL=KEY)" in text.splitlines()


def test_a_store_with_findings_gives_the_same_verdict_published(
    run_cli: Run, store_target: str, tmp_path: Path
) -> None:
    key_file = tmp_path / "writer.key"
    run_cli("keygen", "writer", "--out", str(key_file))
    _record(run_cli, store_target, key_file, 300, "night", "--origin", ORIGIN)
    tamper(store_target, "UPDATE compute_budget_decisions SET max_candidates = 99 WHERE seq = 17")
    # `publish` refuses a store with findings (spec 10.1 rule 1): the stand-in writes what it would have published
    folder = write_publication(store_target, tmp_path / "published")
    key = load_signer_key(str(key_file)).verifier().format()
    db_status, db_out, _ = run_cli("audit", "--db", store_target, "--format", "json", "--trusted-key", key)
    with served_folder(folder) as url:
        status, out, _ = run_cli("audit", "--tiles", url, "--origin", ORIGIN, "--trusted-key", key, "--format", "json")
    assert status == db_status == 1
    tiles, database = json.loads(out), json.loads(db_out)
    assert tiles["clean"] is database["clean"] is False
    assert ("rederive_mismatch", 17) in _kinds(tiles)
    assert ("rederive_mismatch", 17) in _kinds(database)
    assert ("checkpoint_mismatch", 300) in _kinds(tiles)  # the signed root no longer matches the rows
    # the database's owner is told to salvage with `copy`; the publication's reader has no database (spec 11.4)
    assert "copy --through" in _action(database, "rederive_mismatch")
    assert "copy" not in _action(tiles, "rederive_mismatch").replace("keep a copy of", "")
    # the chain break at the last row is no entry's: only row 17's entry is wrong
    assert (tiles["affected_rows"]["seqs"], database["affected_rows"]["seqs"]) == ([17], [17])


def test_an_edited_entry_is_published_mismatch_at_its_seq(published: Published, run_cli: Run) -> None:
    _edit_entry(published.folder, 300, b'"explanation":"', b'"explanation":"!')
    status, report, err = published.audit(run_cli)
    assert status == 1, err
    assert _kinds(report)[0] == ("published_mismatch", 300)
    # the chain no longer reaches the checkpoint's `chain` line, because of entry 300: the break is said there, not
    # at the innocent last row (spec 11.4)
    assert ("chain_break", 300) in _kinds(report)
    assert ("chain_break", ROWS) not in _kinds(report)


def test_an_entry_edited_with_its_tiles_rewritten_is_checkpoint_mismatch(published: Published, run_cli: Run) -> None:
    entries = _edit_entry(published.folder, 42, b'"explanation":"', b'"explanation":"!')
    write_tiles(published.folder, entries)  # every hash tile made to match the edited entry
    status, report, _ = published.audit(run_cli)
    assert status == 1
    kinds = _kinds(report)
    assert "published_mismatch" not in [kind for kind, _ in kinds]
    assert ("checkpoint_mismatch", ROWS) in kinds
    assert ("chain_break", ROWS) in kinds
    # no entry differs from its tile, so no row can be named: the entry at the end may well be intact (spec 11.4)
    assert report["affected_rows"]["seqs"] == []
    chain_break = next(item for item in report["findings"] if item["kind"] == "chain_break")
    assert chain_break["cause_seq"] is None


def test_a_removed_bundle_is_exit_2_in_one_line(published: Published, run_cli: Run) -> None:
    (published.folder / "tile" / "entries" / "001").unlink()
    status, _, err = published.audit(run_cli)
    assert status == 2
    # the bundle of rows 257..512: the first row no audit can check is 257
    assert "tile/entries/001 is missing from the publication (404); it holds rows 257..512" in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_another_stores_publication_signed_by_the_same_key_is_refused_by_its_origin(
    published: Published, run_cli: Run, tmp_path: Path
) -> None:
    other = str(tmp_path / "other.db")
    other_state = tmp_path / "other.state"
    _record(run_cli, other, published.key_file, 300, "other", "--origin", "example.org/other-log",
            "--writer-state", str(other_state))
    folder = publish_store(other, tmp_path / "other-published", published.key.verifier())
    with served_folder(folder) as url:  # served in the place of this store's publication
        status, report, err = published.audit(run_cli, location=url)
    assert status == 1, err
    # the writer's signature verifies (the same key), so only the origin tells the logs apart; the finding names
    # the size of the checkpoint read, as the audit's other checkpoint findings do
    assert ("checkpoint_mismatch", 300) in _kinds(report)
    origin = next(item for item in report["findings"] if item["kind"] == "checkpoint_mismatch" and item["seq"] == 300)
    assert origin["detail"] == (f"the publication's checkpoint is of log example.org/other-log, not {ORIGIN}: "
                                "another log is published in its place")


def test_a_wrong_origin_is_said_of_the_publication_not_of_a_store(published: Published, run_cli: Run) -> None:
    status, out, err = run_cli("audit", "--tiles", published.url, "--origin", "example.org/not-this-log",
                               "--trusted-key", published.key.verifier().format(), "--format", "json")
    assert status == 1, err
    report = json.loads(out)
    assert _kinds(report) == [("checkpoint_mismatch", ROWS)]
    detail = report["findings"][0]["detail"]
    assert detail.startswith(f"the publication's checkpoint is of log {ORIGIN}, not example.org/not-this-log")
    assert "store" not in detail


def test_the_usage_rules_of_tiles_are_exit_2(published: Published, run_cli: Run) -> None:
    key = published.key.verifier().format()
    with_db = run_cli("audit", "--tiles", published.url, "--db", published.store, "--origin", ORIGIN,
                      "--trusted-key", key)
    no_origin = run_cli("audit", "--tiles", published.url, "--trusted-key", key)
    no_key = run_cli("audit", "--tiles", published.url, "--origin", ORIGIN)
    assert [item[0] for item in (with_db, no_origin, no_key)] == [2, 2, 2]
    assert "--db" in with_db[2]
    assert "--origin" in no_origin[2]
    assert "--trusted-key" in no_key[2]


@pytest.mark.parametrize("location", ["ftp://logs.example.org/budget/", "file:///srv/published", "file:published"])
def test_a_location_that_is_neither_http_nor_a_folder_is_exit_2_in_one_line(
    run_cli: Run, tmp_path: Path, location: str
) -> None:
    (tmp_path / "published").mkdir()  # `file:published` is refused though a folder `published` exists here
    status, out, err = run_cli("audit", "--tiles", location, "--origin", ORIGIN, "--trusted-key",
                               LOG.verifier().format())
    assert (status, out) == (2, "")
    assert f"a {location.split(':')[0]}: URL is not read: give a folder or an http:// or https:// prefix" in err
    assert len(err.strip().splitlines()) == 1


def test_a_folder_that_does_not_exist_or_is_a_file_is_exit_2_in_one_line(run_cli: Run, tmp_path: Path) -> None:
    missing, a_file = tmp_path / "no-publication-here", tmp_path / "checkpoint"
    a_file.write_text("not a folder\n")
    for location, said in ((missing, f"no such folder: {missing}"), (a_file, f"{a_file} is not a folder")):
        status, out, err = run_cli("audit", "--tiles", str(location), "--origin", ORIGIN, "--trusted-key",
                                   LOG.verifier().format())
        assert (status, out) == (2, "")
        assert said in err
        assert len(err.strip().splitlines()) == 1
    assert not missing.exists()


def test_since_saved_from_a_publication_then_a_rolled_back_publication_is_checkpoint_mismatch(
    published: Published, run_cli: Run, tmp_path: Path
) -> None:
    kept = tmp_path / "kept.note"
    old = shutil.copytree(published.folder, tmp_path / "old-publication")
    status, _, err = published.audit(run_cli, "--save-checkpoint", str(kept))
    assert status == 0, err
    _record(run_cli, published.store, published.key_file, 100, "next")
    publish_store(published.store, published.folder, published.key.verifier())
    status, report, err = published.audit(run_cli, "--since", str(kept), "--look-back", "7")
    assert status == 0, err
    assert report["rows_checked"] == 100
    publish_store(published.store, published.folder, published.key.verifier())
    kept_newer = tmp_path / "kept-newer.note"
    assert published.audit(run_cli, "--save-checkpoint", str(kept_newer))[0] == 0
    status, report, _ = published.audit(run_cli, "--since", str(kept_newer), location=str(old))  # rolled back
    assert status == 1
    assert ("checkpoint_mismatch", ROWS + 100) in _kinds(report)


def test_a_frozen_publication_is_checked_against_the_since_root(published: Published, run_cli: Run) -> None:
    with BudgetStore.open(published.store, readonly=True) as store, store.snapshot() as snapshot:
        first = leaf_input(next(iter(snapshot.rows_between(0, 1)))[0][:17])
    assert first.startswith(b"{")
    kept = published.folder.parent / "kept.note"
    assert published.audit(run_cli, "--save-checkpoint", str(kept))[0] == 0
    status, report, _ = published.audit(run_cli, "--since", str(kept))
    assert (status, report["rows_checked"]) == (0, 0)  # frozen, and nothing said: only a witness can tell


@pytest.mark.slow
def test_the_progress_bar_on_a_terminal_follows_an_audit_of_tiles(
    tmp_path: Path, writer_state_env: Path
) -> None:
    """On a terminal `audit --tiles` draws the audit's progress bar on stderr, as over a database (issue 30), and
    the report on stdout is the same; off a terminal every other test here shows stderr stays clean of it."""
    import os
    import subprocess
    import sys

    from compute_budget.core.log.note import generate_signer

    writer = generate_signer("writer")
    target = tmp_path / "three-thousand.db"
    with BudgetStore.open(target, origin=ORIGIN, signing_key=writer) as store:
        store.record_many(gate_lines(3_000))
    folder = publish_store(target, tmp_path / "published", writer.verifier())
    parent_end, terminal = os.openpty()
    try:
        with served_folder(folder) as url:  # served from this process while the audit runs in its own
            done = subprocess.run(
                [sys.executable, "-m", "compute_budget", "audit", "--tiles", url, "--origin", ORIGIN,
                 "--trusted-key", writer.verifier().format(), "--format", "json"],
                stdout=subprocess.PIPE, stderr=terminal, timeout=120, check=False,
                env={**os.environ, "COLUMNS": "100", "TERM": "xterm"},
            )
        os.close(terminal)
        terminal = -1
        drawn = b""
        while True:
            try:
                chunk = os.read(parent_end, 65536)
            except OSError:  # the terminal's other end is closed: all of it is read
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        if terminal != -1:
            os.close(terminal)
        os.close(parent_end)
    report = json.loads(done.stdout)
    assert done.returncode == 0, drawn
    assert (report["clean"], report["rows_checked"]) == (True, 3_000)
    assert b"auditing" in drawn
    assert b"3000/3000" in drawn  # the bar reached every published row
    assert b"Traceback" not in drawn


# -- freshness: --witness-url (spec 10.2) -----------------------------------------------------------------------


@pytest.fixture
def log_key(tmp_path: Path) -> Path:
    """The key file of the log the `served` witness knows (tests.witnessing.LOG, origin ORIGIN there)."""
    key = tmp_path / "log.key"
    key.write_text(LOG.format() + "\n")
    key.chmod(0o600)
    return key


def _witnessed_audit(run_cli: Run, location: str, served: Served, *extra: str) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    status, out, err = run_cli(
        "audit", "--tiles", location, "--origin", WITNESSED_ORIGIN, "--trusted-key", LOG.verifier().format(),
        "--witness-url", f"http://127.0.0.1:{served.port}={WITNESS.verifier().format()}", "--format", "json", *extra,
    )
    return status, json.loads(out) if out.strip() else {}, err


def test_a_frozen_publication_is_unpublished_rows_once_its_cosignature_is_too_old(
    witness_servers: WitnessFactory, run_cli: Run, store_target: str, log_key: Path, tmp_path: Path
) -> None:
    """The witness's clock runs late: its word is fresh by the default maximum age, and already over 0 s old."""
    served = witness_servers(WITNESS, clock=late_clock)
    witness = f"http://127.0.0.1:{served.port}={WITNESS.verifier().format()}"
    _record(run_cli, store_target, log_key, 5, "seen", "--origin", WITNESSED_ORIGIN, "--witness", witness)
    folder = publish_store(store_target, tmp_path / "published", LOG.verifier(), witness_keys=(WITNESS.verifier(),))
    status, report, err = _witnessed_audit(run_cli, str(folder), served)
    assert status == 0, err
    assert "freshness not checked" not in err
    assert report["freshness_checked"] is True
    _record(run_cli, store_target, log_key, 3, "unpublished", "--witness", witness)  # the mirror stays at 5
    status, report, err = _witnessed_audit(run_cli, str(folder), served)
    assert status == 0, err  # the published checkpoint's cosignature is fresh: the mirror may lag that long
    status, report, _ = _witnessed_audit(run_cli, str(folder), served, "--max-witness-age", "0")
    assert status == 1
    assert _kinds(report) == [("unpublished_rows", 6)]
    assert "rows 6..8 (3 rows)" in report["findings"][0]["detail"]


def test_a_publication_beyond_what_the_witness_saw_is_checkpoint_mismatch(
    served: Served, run_cli: Run, store_target: str, log_key: Path, tmp_path: Path
) -> None:
    witness = f"http://127.0.0.1:{served.port}={WITNESS.verifier().format()}"
    _record(run_cli, store_target, log_key, 5, "seen", "--origin", WITNESSED_ORIGIN, "--witness", witness)
    _record(run_cli, store_target, log_key, 2, "unseen")  # never shown to the witness, yet published
    folder = publish_store(store_target, tmp_path / "published", LOG.verifier())
    status, report, _ = _witnessed_audit(run_cli, str(folder), served)
    assert status == 1
    assert ("checkpoint_mismatch", 7) in _kinds(report)
    assert "cosigned at most 5 rows, the publication names 7" in json.dumps(report)


# -- the recipe of docs/operations.md, "Auditing a publication with no database credentials" ----------------------

RECIPE_SECTION = "Auditing a publication with no database credentials"


def _recipe_commands(url: str, witness: str, folder: Path) -> tuple[list[str], str, str]:
    """(the three assignments filled in, the first night's command, the nightly command) of the recipe."""
    lines = commands(fenced("sh", RECIPE_SECTION, doc=OPERATIONS)[0])
    assert [line.split("=", 1)[0] for line in lines[:3]] == ["LOG", "WRITER", "WITNESS"]
    assigned = [f"LOG='{WITNESSED_ORIGIN}'", f"WRITER='{LOG.verifier().format()}'", f"WITNESS='{witness}'"]

    def local(command: str) -> str:
        return (command.replace("https://logs.example.org/budget/", url)
                .replace("/var/lib/auditor/", f"{folder}/").replace("/var/log/auditor/", f"{folder}/"))

    return assigned, local(lines[3]), local(lines[4])


@pytest.mark.slow
def test_the_recipe_for_an_auditor_in_another_organisation_runs_for_three_nights(
    served: Served, run_cli: Run, log_key: Path, tmp_path: Path
) -> None:
    """The recipe as written: its first night, then two nightly runs, rows published between them; before the second,
    the publisher adds a witness policy (`publish --policy` over the unwitnessed publication) and the auditor gives
    the nightly the same file (`--policy`). Every night is clean and FILE.head moves with FILE (spec 11.5); a fourth
    night, an entry below the kept note edited, is red and keeps the last good pair. The rows and the publication
    are made in this process; the recipe's commands run through the shell."""
    store, kept = str(tmp_path / "store.db"), tmp_path / "published.note"
    head = Path(f"{kept}.head")
    witness = f"http://127.0.0.1:{served.port}={WITNESS.verifier().format()}"
    policy = tmp_path / "policy.txt"
    policy.write_text(f"log {LOG.verifier().format()}\nwitness w1 {WITNESS.verifier().format()} "
                      f"http://127.0.0.1:{served.port}\nquorum w1\n")
    _record(run_cli, store, log_key, 300, "night1", "--origin", WITNESSED_ORIGIN, "--witness", witness)
    folder = publish_store(store, tmp_path / "published", LOG.verifier())  # no witness policy yet
    assert "\n\u2014 witness.example/w1 " not in (folder / "checkpoint").read_text()
    with served_folder(folder) as url:
        assigned, first, nightly = _recipe_commands(url, witness, tmp_path)
        with_policy = nightly.replace(" --since ", f" --policy {policy} --since ")
        assert with_policy != nightly

        def night(command: str) -> subprocess.CompletedProcess[str]:
            return shell("\n".join([*assigned, command]), tmp_path)

        done = night(first)
        assert done.returncode == 0, done.stderr
        assert kept.read_text() == (folder / "checkpoint").read_text()
        sizes = [int(head.read_text().split("\n")[1])]
        for rows in (50, 10):
            _record(run_cli, store, log_key, rows, f"night{len(sizes) + 1}", "--policy", str(policy))
            status, _, err = run_cli("publish", str(folder), "--db", store, "--policy", str(policy))
            assert status == 0, err
            done = night(with_policy)
            assert done.returncode == 0, done.stderr
            report = json.loads((tmp_path / "audit.json").read_text())
            assert (report["rows_checked"], report["witness_policy"]["quorum"]) == (rows, "a cosignature by w1")
            assert kept.read_text() == (folder / "checkpoint").read_text()
            assert "\n\u2014 witness.example/w1 " in kept.read_text()  # the publication now carries the quorum
            assert head.read_text().split("\n")[1] == kept.read_text().split("\n")[1]  # FILE.head moved with FILE
            assert not list(tmp_path.glob("published.next.note*"))
            sizes.append(int(head.read_text().split("\n")[1]))
        assert sizes == [300, 350, 360]  # FILE.head moved every night
        kept_pair = (kept.read_text(), head.read_text())
        _record(run_cli, store, log_key, 10, "night4", "--policy", str(policy))
        assert run_cli("publish", str(folder), "--db", store, "--policy", str(policy))[0] == 0
        _edit_entry(folder, 200, b'"explanation":"', b'"explanation":"!')  # below the kept note: the look-back
        done = night(with_policy.replace("--look-back 7", "--look-back 1"))
        assert done.returncode == 1, done.stderr
        assert ("published_mismatch", 200) in _kinds(json.loads((tmp_path / "audit.json").read_text()))
        assert (kept.read_text(), head.read_text()) == kept_pair  # a red night keeps last night's pair


def test_a_publication_rewritten_below_the_since_checkpoint_is_checkpoint_mismatch(
    published: Published, run_cli: Run
) -> None:
    kept = published.folder.parent / "kept.note"
    assert published.audit(run_cli, "--save-checkpoint", str(kept))[0] == 0
    entries = _edit_entry(published.folder, 42, b'"explanation":"', b'"explanation":"!')
    write_tiles(published.folder, entries)  # entries and tiles rewritten together, the checkpoint kept
    status, report, _ = published.audit(run_cli, "--since", str(kept))
    assert status == 1
    assert ("checkpoint_mismatch", ROWS) in _kinds(report)  # the tiles do not reproduce the --since root
    assert report["escalated"] is True  # then every entry was checked from the genesis
    assert ("chain_break", ROWS) in _kinds(report)  # an edited explanation re-derives, but breaks the chain


def test_with_witness_keys_the_kept_checkpoint_is_the_witnessed_one_and_the_next_night_holds(
    served: Served, run_cli: Run, store_target: str, log_key: Path, tmp_path: Path
) -> None:
    witness = f"http://127.0.0.1:{served.port}={WITNESS.verifier().format()}"
    _record(run_cli, store_target, log_key, 5, "night1", "--origin", WITNESSED_ORIGIN, "--witness", witness)
    witnessed = (WITNESS.verifier(),)
    folder = publish_store(store_target, tmp_path / "published", LOG.verifier(), witness_keys=witnessed)
    kept = tmp_path / "witnessed.note"
    keys = ("--witness-key", WITNESS.verifier().format())
    status, _, err = _witnessed_audit(run_cli, str(folder), served, *keys, "--save-checkpoint", str(kept))
    assert status == 0, err
    assert kept.read_text().startswith(f"{WITNESSED_ORIGIN}\n5\n")
    assert Path(f"{kept}.head").exists()
    _record(run_cli, store_target, log_key, 4, "night2", "--witness", witness)
    publish_store(store_target, folder, LOG.verifier(), witness_keys=witnessed)
    status, report, err = _witnessed_audit(run_cli, str(folder), served, *keys, "--since", str(kept))
    assert status == 0, err
    assert (report["rows_checked"], report["witnessed_size"]) == (4, 9)


def test_the_junit_report_skips_unpublished_rows_without_a_witness(published: Published, run_cli: Run) -> None:
    status, out, _ = run_cli("audit", "--tiles", published.url, "--origin", ORIGIN, "--trusted-key",
                             published.key.verifier().format(), "--format", "junit")
    assert status == 0
    cases = {case.get("name"): case for case in ElementTree.fromstring(out).iter("testcase")}
    skipped = cases["unpublished_rows"].find("skipped")
    assert skipped is not None
    assert skipped.get("message", "").startswith("freshness not checked: a stale mirror would pass")
    assert cases["published_mismatch"].find("skipped") is None


# -- findings said to the reader of a publication (spec 11.4) ------------------------------------------------------

# A command that needs the database, named in any form ("keep a copy of the files" is the reader's own copy).
DATABASE_COMMAND = re.compile(r"\b(show|list|migrate|rotate|record)\b|\bcopy\b(?! of )")


def test_a_red_tiles_audit_speaks_to_the_reader_causes_first_in_every_format(
    published: Published, run_cli: Run, tmp_path: Path
) -> None:
    _edit_entry(published.folder, 300, b'"explanation":"', b'"explanation":"!')
    json_file, junit_file = tmp_path / "audit.json", tmp_path / "audit.xml"
    status, text, err = run_cli(
        "audit", "--tiles", published.url, "--origin", ORIGIN, "--trusted-key", published.key.verifier().format(),
        "--report", f"json:{json_file}", "--report", f"junit:{junit_file}",
    )
    assert status == 1, err
    report, junit = json.loads(json_file.read_text()), junit_file.read_text()
    for rendered in (text, json_file.read_text(), junit):
        assert DATABASE_COMMAND.search(rendered) is None, DATABASE_COMMAND.search(rendered)
    for item in report["findings"]:  # what the reader does: keep the files, tell the publisher, audit again
        assert "keep a copy of the publication's files" in item["action"], item
        assert "tell the publisher" in item["action"], item
        assert "audit again after they republish" in item["action"], item
    kinds = [kind for kind, _ in _kinds(report)]
    # JSON: the cause first, then the chain break and the checkpoint mismatches it causes
    assert _kinds(report)[:2] == [("published_mismatch", 300), ("chain_break", 300)]
    assert set(kinds[2:]) == {"checkpoint_mismatch"}
    assert (report["affected_rows"]["seqs"], report["summary"]["rows_affected"]) == ([300], [300])
    assert all(item["cause_seq"] == 300 for item in report["findings"])
    # text: the kinds in the same order, and the first screen names entry 300 and what the reader does
    lines = text.splitlines()
    assert lines[1].startswith("1 rows affected: seq 300;")
    assert lines[2].startswith("  what now      keep a copy of the publication's files")
    headings = [line.strip() for line in lines if re.fullmatch(r"  [a-z_]+ \(\d+\)", line)]
    assert headings == ["published_mismatch (1)", "chain_break (1)", "checkpoint_mismatch (1)"]
    # JUnit: the row case names row 300 alone; the kind cases put the causes first
    suite = ElementTree.fromstring(junit).find("testsuite")
    assert suite is not None
    rows = [case.get("name") for case in suite.iter("testcase") if case.get("classname") == "compute_budget.audit.rows"]
    assert rows == ["row 300"]
    failing = [case.get("name") for case in suite.iter("testcase")
               if case.get("classname") == "compute_budget.audit" and case.find("failure") is not None]
    assert failing == ["published_mismatch", "chain_break", "checkpoint_mismatch"]


def test_the_database_audit_of_the_same_damage_still_tells_its_owner_the_commands(
    run_cli: Run, store_target: str, tmp_path: Path
) -> None:
    """The owner of the database keeps the actions that name its commands (`copy --through`, `show`)."""
    key_file = tmp_path / "writer.key"
    run_cli("keygen", "writer", "--out", str(key_file))
    _record(run_cli, store_target, key_file, 20, "night", "--origin", ORIGIN)
    tamper(store_target, "UPDATE compute_budget_decisions SET max_candidates = 99 WHERE seq = 7")
    status, text, _ = run_cli("audit", "--db", store_target)
    assert status == 1
    assert "what to do: the stored decision or its gate was edited: keep the evidence, then salvage the rows " \
           "before it into a new log (copy --through; docs/incident.md)" in text
    assert "`compute-budget show` each row" in text
    assert re.search(r"`compute-budget copy \S+ NEW --through 6`", text)


def test_a_forged_size_is_bad_signature_exit_1_with_no_tile_read(published: Published, run_cli: Run) -> None:
    lines = (published.folder / "checkpoint").read_text().split("\n")
    lines[1] = str(ROWS * 10)  # the size line edited under the signature
    (published.folder / "checkpoint").write_text("\n".join(lines))
    shutil.rmtree(published.folder / "tile")  # a tile read would be "missing from the publication (404)", exit 2
    status, report, err = published.audit(run_cli)
    assert status == 1, err
    assert _kinds(report) == [("bad_signature", ROWS * 10)]
    assert report["findings"][0]["detail"].startswith("the published checkpoint carries a signature by ")
    assert report["findings"][0]["detail"].endswith(" that does not verify: no tile was read")
    assert "missing from the publication" not in err
    assert report["head_read"] is False
    # The text report says the checkpoint did not verify and no head was read: never "holds", never a seq 0 head.
    status, text, _ = run_cli("audit", "--tiles", published.url, "--origin", ORIGIN, "--trusted-key",
                              published.key.verifier().format())
    assert status == 1
    lines = text.splitlines()
    assert "  head          not read: the audit stopped at the published checkpoint (no tile or entry was read)" \
        in lines
    checkpoint = next(line for line in lines if line.startswith("  checkpoint "))
    assert checkpoint.startswith(f"  checkpoint    seq {ROWS * 10}, chain_hash ")
    assert checkpoint.endswith(": DOES NOT VERIFY (bad_signature)")
    assert not [line for line in lines if line.endswith(": holds") or line.startswith("  head          seq")]


@pytest.mark.parametrize(("edited", "named", "failing"), [
    ("tile/0/001", "tile/0/001 was edited", range(257, 513)),  # the level-0 tile, not its bundle (spec 11.3)
    ("tile/entries/001", "the entry bundle was edited", range(257, 258)),  # row 257's entry
])
def test_without_since_prove_and_audit_agree_on_every_row(
    published: Published, run_cli: Run, edited: str, named: str, failing: range
) -> None:
    path = published.folder / edited
    data = bytearray(path.read_bytes())
    data[70] ^= 1
    path.write_bytes(bytes(data))
    status, report, _ = published.audit(run_cli)
    assert status == 1
    assert _kinds(report)[0] == ("published_mismatch", 257)
    assert named in report["findings"][0]["detail"]
    key = published.key.verifier().format()
    for seq in (1, 256, 257, 300, 512, 513, ROWS):
        status = run_cli("prove", "--tiles", published.url, "--trusted-key", key, "--seq", str(seq))[0]
        assert (status != 0) == (seq in failing), seq  # no receipt exactly where the audit names the damage


def _redirector(http_servers: HandlerFactory, to: Callable[[str], str]) -> str:
    """A server answering every GET with a redirect to `to(path)`."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(307)
            self.send_header("Location", to(self.path))
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return None

    return http_servers(Handler)


def test_a_publication_read_through_a_redirect_says_so_and_a_redirect_loop_is_exit_2(
    published: Published, run_cli: Run, http_servers: HandlerFactory
) -> None:
    moved = _redirector(http_servers, lambda path: published.url.rstrip("/") + path)
    location = moved.replace("http://", "http://alice:secret@") + "/"
    status, report, err = published.audit(run_cli, location=location)
    assert (status, report["clean"]) == (0, True)
    said = [item for item in report["warnings"] if "redirect" in item]
    assert len(said) == 1
    assert f"***@{moved.removeprefix('http://')}/checkpoint -> {published.url}checkpoint" in said[0]
    assert "secret" not in json.dumps(report) + err
    looping = _redirector(http_servers, lambda path: path + "x")
    status, _, err = published.audit(run_cli, location=looping)
    assert status == 2
    assert "more than 3 redirects" in err
    assert len(err.strip().splitlines()) == 1


# -- witnesses added later (spec 11.5): FILE.head kept with --tiles too ------------------------------------------


def test_witnesses_added_on_a_later_night_need_no_new_baseline(
    served: Served, run_cli: Run, log_key: Path, tmp_path: Path
) -> None:
    """Night 1 audits an unwitnessed publication with only --trusted-key and keeps FILE and FILE.head (the published
    note, signed: no warning about JSON); night 2 adds a witness key, --since FILE; night 3 again. Every night is
    clean and FILE.head moves with FILE. (The publisher's side of a witness added later is not this test's: night 2
    publishes afresh, with the witness.)"""
    store, folder = str(tmp_path / "store.db"), tmp_path / "published"
    kept, fresh = tmp_path / "published.note", tmp_path / "published.next.note"
    witness = f"http://127.0.0.1:{served.port}={WITNESS.verifier().format()}"
    writer = ("--tiles", str(folder), "--origin", WITNESSED_ORIGIN, "--trusted-key", LOG.verifier().format())
    _record(run_cli, store, log_key, 5, "night1", "--origin", WITNESSED_ORIGIN)
    publish_store(store, folder, LOG.verifier())
    status, _, err = run_cli("audit", *writer, "--save-checkpoint", str(kept))
    assert status == 0, err
    assert "unsigned JSON checkpoint" not in err
    assert kept.read_text() == (folder / "checkpoint").read_text()
    heads = [Path(f"{kept}.head").read_text()]
    for night, rows in ((2, 4), (3, 3)):
        _record(run_cli, store, log_key, rows, f"night{night}", "--witness", witness)
        if night == 2:
            shutil.rmtree(folder)
        publish_store(store, folder, LOG.verifier(), witness_keys=(WITNESS.verifier(),))
        status, out, err = run_cli("audit", *writer, "--witness-key", WITNESS.verifier().format(), "--since",
                                   str(kept), "--save-checkpoint", str(fresh), "--format", "json")
        assert status == 0, out + err
        assert json.loads(out)["rows_checked"] == rows
        assert "unsigned JSON checkpoint" not in err
        Path(f"{fresh}.head").replace(f"{kept}.head")
        fresh.replace(kept)
        heads.append(Path(f"{kept}.head").read_text())
    assert [text.split("\n")[1] for text in heads] == ["5", "9", "12"]  # FILE.head moved every night


def test_a_missing_file_head_names_its_cause_and_the_command_that_keeps_both_afresh(
    served: Served, run_cli: Run, log_key: Path, tmp_path: Path
) -> None:
    store, folder, kept = str(tmp_path / "store.db"), tmp_path / "published", tmp_path / "published.note"
    witness = f"http://127.0.0.1:{served.port}={WITNESS.verifier().format()}"
    _record(run_cli, store, log_key, 3, "night1", "--origin", WITNESSED_ORIGIN, "--witness", witness)
    publish_store(store, folder, LOG.verifier(), witness_keys=(WITNESS.verifier(),))
    writer = ("--tiles", str(folder), "--origin", WITNESSED_ORIGIN, "--trusted-key", LOG.verifier().format())
    assert run_cli("audit", *writer, "--save-checkpoint", str(kept))[0] == 0
    Path(f"{kept}.head").unlink()  # not moved with FILE
    nightly = (*writer, "--witness-key", WITNESS.verifier().format(), "--since", str(kept))
    status, out, err = run_cli("audit", *nightly)
    assert (status, out) == (2, "")
    assert err.count("\n") == 1
    assert f"{kept}.head does not exist" in err
    assert "had no trusted key" in err
    assert f"{kept}.head was not moved with {kept}" in err
    assert "upgrad" not in err
    fix = err.split("`")[-2]
    assert fix == shlex.join(["compute-budget", "audit", *writer, "--witness-key", WITNESS.verifier().format(),
                              "--save-checkpoint", str(kept)])
    status, _, err = run_cli(*shlex.split(fix)[1:])  # the command it names keeps both
    assert status == 0, err
    assert Path(f"{kept}.head").exists()
    assert run_cli("audit", *nightly)[0] == 0
