"""The seal in the store (spec section 8): the maintained tree, the origin, signing on append, and what each attack
on a sealed store runs into, on both backends."""

from __future__ import annotations

import base64
import json
import re
import sqlite3
from pathlib import Path

import pytest

from compute_budget import BudgetStore, StoreDamaged, StoreError, audit
from compute_budget.core.leaf import row_leaf_hash
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.merkle import EMPTY_ROOT, MemoryTree
from compute_budget.core.log.note import verify_note
from compute_budget.errors import CopyVerificationFailed, InputError, UnsignedAppendRefused
from compute_budget.store.copy import copy_store
from compute_budget.store.migrations import head_revision
from tests.backends import execute, insert_sql, is_postgres, query, rows, tamper_all
from tests.conftest import gate_lines
from tests.sealing import forged_row, rewrite_consistently, signer

pytestmark = pytest.mark.usefixtures("writer_state_env")  # SignerKey objects keep their state there


def naive_tree(target: str) -> MemoryTree:
    """The tree of the stored rows, recomputed here from scratch."""
    return MemoryTree(row_leaf_hash(row[:17]) for row in rows(target))


def stored_checkpoints(target: str) -> list[tuple[int, str]]:
    """(tree_size, note) of every stored signed checkpoint, oldest first."""
    found = query(target, "SELECT tree_size, note FROM compute_budget_checkpoints ORDER BY id")
    return [(row[0], row[1]) for row in found]


def writer_state_of(target: str) -> Path:
    """The folder of this test's writer state ($COMPUTE_BUDGET_WRITER_STATE), for a second key's own state."""
    import os

    return Path(os.environ["COMPUTE_BUDGET_WRITER_STATE"]).parent


def kinds(report: object) -> list[str]:
    return [finding.kind.value for finding in report.findings]  # type: ignore[attr-defined]


def test_the_maintained_tree_is_the_merkle_tree_of_the_rows(store_target: str) -> None:
    """At sizes around the stored levels (0, 1, 255, 256, 257, 300, 513) the store's root is the RFC 6962 root of
    its rows, and it keeps exactly the perfect nodes of level 8 and up."""
    key = signer()
    with BudgetStore.open(store_target, signing_key=key) as store:
        assert store.checkpoint().root is None  # no origin before the first append
        sizes = [1, 255, 256, 257, 300, 513]
        done = 0
        for size in sizes:
            store.record_many(gate_lines(size - done, prefix=f"to{size}"))
            done = size
            checkpoint = store.checkpoint()
            assert checkpoint.root == naive_tree(store_target).root()
    tree = naive_tree(store_target)
    nodes = {(level, idx): hash_hex for level, idx, hash_hex in query(
        store_target, "SELECT level, idx, hash FROM compute_budget_tree_nodes")}
    assert nodes == {(8, 0): tree.node(8, 0).hex(), (8, 1): tree.node(8, 1).hex(), (9, 0): tree.node(9, 0).hex()}
    for size, note in stored_checkpoints(store_target):
        assert Checkpoint.from_note(note).root == tree.root(size)
    assert [size for size, _ in stored_checkpoints(store_target)] == sizes


def test_single_records_continue_the_tree_across_processes(db_path: Path) -> None:
    """One store object appending gate by gate (its own frontier) and fresh ones (the stored tree) agree."""
    for index, line in enumerate(gate_lines(270)):
        if index % 100 == 0:
            with BudgetStore.open(db_path) as store:
                store.record(line)
            continue
        if index % 100 == 1:
            opened = BudgetStore.open(db_path)
        opened.record(line)
        if index % 100 == 99:
            opened.close()
    opened.close()
    with BudgetStore.open(db_path, readonly=True) as store:
        assert store.checkpoint().root == naive_tree(str(db_path)).root()
    assert audit(db_path).clean


def test_origin_is_set_by_the_store_once(store_target: str) -> None:
    """No origin until the first append; then `compute-budget/` and 32 random hex digits, never changed."""
    with BudgetStore.open(store_target) as store:
        assert store.origin() is None
        store.record_many(gate_lines(2))
        origin = store.origin()
    assert origin is not None
    assert re.fullmatch(r"compute-budget/[0-9a-f]{32}", origin)
    with BudgetStore.open(store_target) as store:
        store.record_many(gate_lines(2, prefix="more"))
        assert store.origin() == origin
    with pytest.raises(StoreError, match="already"):
        BudgetStore.open(store_target, origin="example.org/other")
    with BudgetStore.open(store_target, origin=origin) as store:
        assert store.origin() == origin


def test_an_origin_can_be_named_and_must_be_valid(tmp_path: Path) -> None:
    """--origin NAME names a new store; a name with a space or a '+' is refused before anything is written."""
    with BudgetStore.open(tmp_path / "named.db", origin="example.org/budgets") as store:
        assert store.origin() == "example.org/budgets"
        store.record_many(gate_lines(1))
        assert store.checkpoint().origin == "example.org/budgets"
    for bad in ("has space", "a+b", "", "x" * 129):
        with pytest.raises(InputError, match="invalid origin"):
            BudgetStore.open(tmp_path / "bad.db", origin=bad)
    assert not (tmp_path / "bad.db").exists()


def test_two_stores_get_different_origins(tmp_path: Path) -> None:
    """Randomness, not the migration, names a store: two new stores never share an origin."""
    origins = set()
    for name in ("a.db", "b.db"):
        with BudgetStore.open(tmp_path / name) as store:
            store.record_many(gate_lines(1))
            origins.add(store.origin())
    assert len(origins) == 2


def test_every_append_transaction_leaves_a_signed_checkpoint(store_target: str) -> None:
    """A batch and each single record leave one checkpoint of their new head, signed, in the same transaction;
    re-recording a stored gate appends nothing and signs nothing."""
    key = signer()
    with BudgetStore.open(store_target, signing_key=key) as store:
        store.record_many(gate_lines(5))
        for line in gate_lines(3, prefix="one"):
            store.record(line)
        store.record(gate_lines(1, prefix="one")[0])  # already present
        origin = store.origin()
        head = store.head()
    stored = stored_checkpoints(store_target)
    assert [size for size, _ in stored] == [5, 6, 7, 8]
    for size, note in stored:
        assert verify_note(note, [key.verifier()]).ok
        assert note.startswith(f"{origin}\n{size}\n")
    assert stored[-1][1].split("\n")[3] == f"chain {head.chain_hash}"
    assert query(store_target, "SELECT DISTINCT key_name, key_hash FROM compute_budget_checkpoints") == [
        (key.name, f"{key.key_hash:08x}")
    ]


def test_the_signing_key_can_come_from_the_environment(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$COMPUTE_BUDGET_SIGNING_KEY names a key file: a writer opened without a key signs with it."""
    key = signer("env-writer")
    path = tmp_path / "writer.key"
    path.write_text(key.format() + "\n")
    path.chmod(0o600)
    monkeypatch.setenv("COMPUTE_BUDGET_SIGNING_KEY", str(path))
    with BudgetStore.open(db_path) as store:
        assert store.signing_key == key.verifier()
        store.record_many(gate_lines(3))
    assert verify_note(stored_checkpoints(str(db_path))[0][1], [key.verifier()]).ok
    monkeypatch.setenv("COMPUTE_BUDGET_SIGNING_KEY", str(tmp_path / "missing.key"))
    with pytest.raises(InputError, match="COMPUTE_BUDGET_SIGNING_KEY"):
        BudgetStore.open(db_path)


def test_a_forged_correctly_chained_append_is_unattested(store_target: str) -> None:
    """Anyone who can INSERT can chain a row correctly; without the writer's key it is `unattested_rows`, named at
    its first row with the range in the detail. Every other check still passes it."""
    key = signer()
    with BudgetStore.open(store_target, signing_key=key) as store:
        store.record_many(gate_lines(10))
    forged = forged_row(store_target)
    execute(store_target, insert_sql(forged))
    with BudgetStore.open(store_target) as store, pytest.raises(UnsignedAppendRefused, match="holds signed"):
        store.record_many(gate_lines(2, prefix="unsigned"))  # spec 9.1: not without saying so
    with BudgetStore.open(store_target, allow_unsigned=True) as store:  # a writer without the key, told to
        store.record_many(gate_lines(2, prefix="unsigned"))
    assert audit(store_target).clean  # without a trusted key the forgery is invisible, as before the seal
    report = audit(store_target, trusted_keys=[key.verifier()])
    assert kinds(report) == ["unattested_rows"]
    finding = report.findings[0]
    assert (finding.seq, finding.budget_id) == (11, forged[1])
    assert "rows 11..13 (3 rows)" in finding.detail
    assert report.attested_size == 10


def test_a_consistent_rewrite_is_caught_by_the_stored_signed_roots(store_target: str) -> None:
    """Rewriting row 3 and re-chaining everything after it leaves no chain break and no re-derivation finding,
    but every stored signed root after it no longer matches: `checkpoint_mismatch`, with no outside file."""
    key = signer()
    with BudgetStore.open(store_target, signing_key=key) as store:
        store.record_many(gate_lines(10))
        store.record_many(gate_lines(10, prefix="second"))
    rewrite_consistently(store_target, 3)
    report = audit(store_target)
    assert kinds(report) == ["checkpoint_mismatch", "checkpoint_mismatch"]
    assert [finding.seq for finding in report.findings] == [10, 20]
    assert "history was rewritten after it was signed" in report.findings[0].detail
    trusted = audit(store_target, trusted_keys=[key.verifier()])
    assert kinds(trusted) == ["checkpoint_mismatch", "checkpoint_mismatch"]  # the signatures themselves verify


def test_a_writer_holding_the_key_refuses_to_sign_a_rewritten_history(store_target: str) -> None:
    """C2SP's rule: the writer never signs a view inconsistent with its newest checkpoint; nothing is written.
    Another key (spec 9.1) finds rows no trusted writer signed: refused too, unless told to adopt them."""
    key = signer()
    with BudgetStore.open(store_target, signing_key=key) as store:
        store.record_many(gate_lines(10))
    rewrite_consistently(store_target, 4)
    before = (rows(store_target), stored_checkpoints(store_target))
    with BudgetStore.open(store_target, signing_key=key) as store, pytest.raises(StoreDamaged, match="rewritten"):
        store.record_many(gate_lines(3, prefix="after"))
    with BudgetStore.open(store_target) as store, pytest.raises(StoreDamaged, match="refusing"):
        store.signed_checkpoint([key])
    assert (rows(store_target), stored_checkpoints(store_target)) == before
    other, other_state = signer("other"), Path(str(writer_state_of(store_target))) / "other.state"
    with BudgetStore.open(store_target, signing_key=other, writer_state=other_state) as store:
        with pytest.raises(StoreDamaged, match=r"rows 1\.\.10 were appended by no trusted writer"):
            store.record_many(gate_lines(1, prefix="other"))
        batch = store.record_many(gate_lines(1, prefix="other"), adopt_unsigned_through=10)
    assert (batch.new, batch.adopted, batch.adopted_after) == (1, 10, 0)


def test_a_forged_checkpoint_row_is_a_bad_signature_and_stops_the_writer(store_target: str) -> None:
    """A checkpoint filed under the writer's key whose signature does not verify: the audit says
    `bad_signature`, and the writer fails closed rather than trust it."""
    key, impostor = signer("writer"), signer("writer")  # same name, another key: the hash differs
    with BudgetStore.open(store_target, signing_key=key) as store:
        store.record_many(gate_lines(5))
    note = stored_checkpoints(store_target)[0][1]
    text = note[: note.index("\n\n") + 1]
    forged = text + "\n" + "\u2014 writer " + base64.b64encode(key.key_hash.to_bytes(4, "big") + b"\x00" * 64).decode()
    execute(
        store_target,
        (
            "INSERT INTO compute_budget_checkpoints (tree_size, key_name, key_hash, note, recorded_at) "
            "VALUES (5, :name, :hash, :note, 'x')",
            {"name": key.name, "hash": f"{key.key_hash:08x}", "note": forged + "\n"},
        ),
    )
    assert impostor.key_hash != key.key_hash
    report = audit(store_target, trusted_keys=[key.verifier()])
    assert kinds(report) == ["bad_signature"]
    assert "does not verify" in report.findings[0].detail
    with BudgetStore.open(store_target, signing_key=key) as store:  # spec 9.1: skipped, never trusted or a block
        assert store.record_many(gate_lines(1, prefix="x")).new == 1
    assert kinds(audit(store_target, trusted_keys=[key.verifier()], all_signatures=True)) == ["bad_signature"]


def test_all_signatures_verifies_the_older_checkpoints_too(store_target: str) -> None:
    """By default only the newest signature of each trusted key is verified; --all-signatures finds a broken older
    one (its note text, and so its root, unchanged)."""
    key = signer()
    with BudgetStore.open(store_target, signing_key=key) as store:
        for index in range(4):
            store.record_many(gate_lines(3, prefix=f"batch{index}"))
    note = stored_checkpoints(store_target)[1][1]
    broken = note[: note.rindex(" ") + 1] + base64.b64encode(key.key_hash.to_bytes(4, "big") + bytes(64)).decode()
    tamper_all(
        store_target,
        ("UPDATE compute_budget_checkpoints SET note = :note WHERE tree_size = 6", {"note": broken + "\n"}),
    )
    assert audit(store_target, trusted_keys=[key.verifier()]).clean
    report = audit(store_target, trusted_keys=[key.verifier()], all_signatures=True)
    assert kinds(report) == ["bad_signature"]
    assert report.findings[0].seq == 6


def test_truncation_below_the_newest_signature_needs_an_outside_checkpoint(store_target: str) -> None:
    """The documented limit: dropping the last rows together with their checkpoints leaves a store that audits
    clean; only a checkpoint kept outside catches it: the note kept by the auditor, and the writer's own state
    file (spec 9.1), which stops the writer from signing under that origin again."""
    key = signer()
    with BudgetStore.open(store_target, signing_key=key) as store:
        store.record_many(gate_lines(10))
        store.record_many(gate_lines(5, prefix="tail"))
        outside = store.signed_checkpoint([key])
    tamper_all(
        store_target,
        "DELETE FROM compute_budget_decisions WHERE seq > 10",
        "DELETE FROM compute_budget_checkpoints WHERE tree_size > 10",
    )
    assert audit(store_target, trusted_keys=[key.verifier()]).clean
    report = audit(store_target, checkpoint=outside)
    assert kinds(report) == ["checkpoint_mismatch"]
    assert "truncated" in report.findings[0].detail
    before = rows(store_target)
    with BudgetStore.open(store_target, signing_key=key) as store:
        with pytest.raises(StoreDamaged, match=r"writer state .*: size 15, root .*truncated"):
            store.record_many(gate_lines(1, prefix="after"))
        with pytest.raises(StoreDamaged, match="size 15"):
            store.signed_checkpoint([key])
    assert rows(store_target) == before


@pytest.mark.parametrize(
    ("table", "statement"),
    [
        ("compute_budget_checkpoints", "UPDATE compute_budget_checkpoints SET note = 'x'"),
        ("compute_budget_checkpoints", "DELETE FROM compute_budget_checkpoints"),
        ("compute_budget_origin", "UPDATE compute_budget_origin SET origin = 'elsewhere'"),
        ("compute_budget_origin", "DELETE FROM compute_budget_origin"),
        ("compute_budget_tree_nodes", "UPDATE compute_budget_tree_nodes SET hash = hash"),
        ("compute_budget_tree_nodes", "DELETE FROM compute_budget_tree_nodes"),
    ],
)
def test_the_seal_tables_are_append_only(store_target: str, table: str, statement: str) -> None:
    """UPDATE and DELETE on the origin, the signed checkpoints and the tree nodes fail from a raw client."""
    with BudgetStore.open(store_target, signing_key=signer()) as store:
        store.record_many(gate_lines(300))
    before = query(store_target, f"SELECT * FROM {table}")
    assert before
    with pytest.raises(Exception, match="append-only"):
        execute(store_target, statement)
    assert query(store_target, f"SELECT * FROM {table}") == before


def test_sqlite_cannot_replace_a_seal_row(db_path: Path) -> None:
    """INSERT OR REPLACE, which deletes without firing DELETE triggers, is refused on the seal tables too."""
    with BudgetStore.open(db_path, signing_key=signer()) as store:
        store.record_many(gate_lines(300))
    for statement in (
        "INSERT OR REPLACE INTO compute_budget_origin (id, origin) VALUES (1, 'elsewhere')",
        "INSERT OR REPLACE INTO compute_budget_tree_nodes SELECT level, idx, hash FROM compute_budget_tree_nodes",
        "REPLACE INTO compute_budget_checkpoints SELECT * FROM compute_budget_checkpoints",
    ):
        with sqlite3.connect(db_path) as connection, pytest.raises(sqlite3.IntegrityError, match="append-only"):
            connection.execute(statement)


@pytest.mark.postgres
def test_postgresql_cannot_truncate_a_seal_table(pg_url: str) -> None:
    """TRUNCATE skips row triggers; a statement trigger stops it on every seal table."""
    with BudgetStore.open(pg_url, signing_key=signer()) as store:
        store.record_many(gate_lines(3))
    for table in ("compute_budget_checkpoints", "compute_budget_origin", "compute_budget_tree_nodes"):
        with pytest.raises(Exception, match="append-only"):
            execute(pg_url, f"TRUNCATE {table}")
    assert len(stored_checkpoints(pg_url)) == 1


@pytest.mark.slow
def test_a_changed_tree_node_is_reported_and_parallel_audits_agree(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stored tree is derived data, recomputed by the audit: a changed node is a `checkpoint_mismatch` naming
    it, and --jobs 3 (ranges starting from the stored, claimed tree) reports exactly what one process does."""
    import compute_budget.auditor.ranges as ranges

    monkeypatch.setattr(ranges, "MIN_ROWS_PER_JOB", 100)
    key = signer()
    with BudgetStore.open(db_path, signing_key=key) as store:
        store.record_many(gate_lines(700))
    single, parallel = audit(db_path, trusted_keys=[key.verifier()]), audit(db_path, jobs=3)
    assert single.clean
    assert parallel.clean
    assert parallel.jobs == 3
    assert single.root == parallel.root == naive_tree(str(db_path)).root()
    tamper_all(db_path, "UPDATE compute_budget_tree_nodes SET hash = '" + "0" * 64 + "' WHERE level = 8 AND idx = 1")
    single, parallel = audit(db_path), audit(db_path, jobs=3)
    assert kinds(single) == ["checkpoint_mismatch"]
    assert "stored tree node (level 8, index 1, over rows 257..512)" in single.findings[0].detail
    assert single.findings == parallel.findings
    rewrite_consistently(db_path, 600)
    single, parallel = audit(db_path), audit(db_path, jobs=3)
    assert single.findings == parallel.findings
    assert {finding.seq for finding in single.findings} == {512, 700}  # the changed node, the signed root at 700


def _forge_node(target: str, level: int, index: object) -> None:
    """A plain INSERT into the tree's table: its guard stops replacing a node, not adding one."""
    execute(
        target,
        (
            "INSERT INTO compute_budget_tree_nodes (level, idx, hash) VALUES (:level, :idx, :hash)",
            {"level": level, "idx": index, "hash": "a" * 64},
        ),
    )


def _misplaced_node_report(target: str, level: int, index: object) -> None:
    with BudgetStore.open(target) as store:
        store.record_many(gate_lines(300))
    assert audit(target).clean
    _forge_node(target, level, index)
    report = audit(target)
    assert kinds(report) == ["checkpoint_mismatch"]
    assert f"stored tree node (level {level!r}, index {index!r}) lies outside the tree of 300 rows" in (
        report.findings[0].detail
    )


@pytest.mark.parametrize(
    ("level", "index"), [(8, 2**56 - 1), (8, 2**63 - 1), (63, 0), (64, 0), (200, 0), (7, 0), (8, 1), (62, 0)]
)
def test_a_stored_tree_node_outside_the_tree_is_reported_whatever_its_position(
    store_target: str, level: int, index: int
) -> None:
    """A node over rows the store does not hold is a `checkpoint_mismatch`, also where the test `(idx + 1) <<
    level > size` would overflow 64 bits and wrap to 0 or below (2**56 - 1 at level 8, level 64)."""
    _misplaced_node_report(store_target, level, index)


@pytest.mark.parametrize("store_target", ["sqlite"], indirect=True)  # PostgreSQL's typed columns hold only integers
@pytest.mark.parametrize(("level", "index"), [(8, "zz"), (8, 0.5), ("eight", 0), (8.5, 0)])
def test_a_stored_tree_node_that_is_not_at_an_integer_position_is_reported(
    store_target: str, level: object, index: object
) -> None:
    """SQLite keeps text and reals in an INTEGER column: such a node is at no position of the tree."""
    _misplaced_node_report(store_target, level, index)  # type: ignore[arg-type]


@pytest.mark.parametrize("store_target", ["sqlite"], indirect=True)  # PostgreSQL's typed columns refuse these
@pytest.mark.parametrize(
    ("values", "columns"),
    [
        ("'abc', 'writer', 'ddded696', 'x', 'x'", "tree_size"),
        ("5, 'writer', 'ddded696', x'41', 'x'", "note"),
        ("5.5, x'00', 'ddded696', 'x', 'x'", "tree_size, key_name"),
    ],
)
def test_a_stored_checkpoint_entry_of_the_wrong_types_is_a_finding_not_a_failed_audit(
    store_target: str, values: str, columns: str
) -> None:
    """SQLite keeps 'abc' in an INTEGER column and a blob in a TEXT one, and the checkpoint table's guard stops
    replacing entries, not adding them: such an entry is reported as `checkpoint_mismatch` in every mode (the
    audit used to stop with exit 2 on it), and writers go on past it."""
    key = signer()
    with BudgetStore.open(store_target, signing_key=key) as store:
        store.record_many(gate_lines(20))
        since = store.signed_checkpoint([key])
    execute(
        store_target,
        "PRAGMA ignore_check_constraints = ON",
        "INSERT INTO compute_budget_checkpoints (tree_size, key_name, key_hash, note, recorded_at) "
        f"VALUES ({values})",
    )
    detail = f"cannot be read ({columns} not of the column's type): no writer stores such an entry"
    for report in (
        audit(store_target),
        audit(store_target, trusted_keys=[key.verifier()]),
        audit(store_target, since=since, trusted_keys=[key.verifier()]),
    ):
        assert kinds(report) == ["checkpoint_mismatch"]
        assert detail in report.findings[0].detail
    with BudgetStore.open(store_target, signing_key=key) as store:
        assert store.record_many(gate_lines(5, prefix="after")).new == 5
    report = audit(store_target, trusted_keys=[key.verifier()])
    assert kinds(report) == ["checkpoint_mismatch"]
    assert report.rows_checked == 25


def test_a_clean_incremental_audit_checks_only_the_new_checkpoints(db_path: Path) -> None:
    """--since a signed checkpoint: the stored tree at its size must give its root; the checkpoints after it are
    held against the tree continued from there."""
    key = signer()
    with BudgetStore.open(db_path, signing_key=key) as store:
        store.record_many(gate_lines(300))
        since = store.signed_checkpoint([key])
        store.record_many(gate_lines(20, prefix="later"))
    report = audit(db_path, since=since, trusted_keys=[key.verifier()])
    assert report.clean
    assert report.rows_checked == 20
    assert report.root == naive_tree(str(db_path)).root()
    rewrite_consistently(db_path, 310)
    assert [f.seq for f in audit(db_path, since=since).findings] == [320]


def test_migration_0003_builds_the_tree_of_an_existing_store(tmp_path: Path) -> None:
    """A store written at revision 0002 (300 rows) migrates to 0003: origin set, tree built, audit clean; a store
    migrated by Alembic alone gets its tree on its first open for writing."""
    from alembic import command

    from compute_budget.store.engine import begin_write, create_store_engine, locate
    from compute_budget.store.migrations import alembic_config

    source = tmp_path / "source.db"
    with BudgetStore.open(source) as store:
        store.record_many(gate_lines(300))
    for name in ("old.db", "alembic-only.db"):
        engine = create_store_engine(locate(tmp_path / name), readonly=False)
        with begin_write(engine) as connection:
            command.upgrade(alembic_config(connection), "0002")
        engine.dispose()
        execute(tmp_path / name, *(insert_sql(row) for row in rows(source)))
    assert BudgetStore.migrate(tmp_path / "old.db") == ("0002", head_revision())
    origin = query(tmp_path / "old.db", "SELECT origin FROM compute_budget_origin")
    assert re.fullmatch(r"compute-budget/[0-9a-f]{32}", origin[0][0])
    assert len(query(tmp_path / "old.db", "SELECT * FROM compute_budget_tree_nodes")) == 1
    assert audit(tmp_path / "old.db").clean

    only = tmp_path / "alembic-only.db"
    engine = create_store_engine(locate(only), readonly=False)
    with begin_write(engine) as connection:
        command.upgrade(alembic_config(connection), "head")
    engine.dispose()
    assert query(only, "SELECT * FROM compute_budget_tree_nodes") == []
    assert query(only, "SELECT * FROM compute_budget_origin") == []
    assert audit(only).clean  # the audit recomputes the tree; an unbuilt one is no finding
    with BudgetStore.open(only) as store:
        assert store.checkpoint().root is None  # still no origin: the first append sets it
        store.record_many(gate_lines(1, prefix="first"))
        assert store.checkpoint().root == naive_tree(str(only)).root()
    assert len(query(only, "SELECT * FROM compute_budget_tree_nodes")) == 1


@pytest.mark.parametrize("destination_kind", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_copy_carries_origin_tree_and_signed_checkpoints(
    tmp_path: Path, request: pytest.FixtureRequest, destination_kind: str
) -> None:
    """The copy has the source's origin, the same tree and every signed checkpoint; it audits clean with the key."""
    key = signer()
    source = str(tmp_path / "source.db")
    with BudgetStore.open(source, signing_key=key, origin="example.org/copied") as store:
        store.record_many(gate_lines(400))
        for line in gate_lines(3, prefix="single"):
            store.record(line)
    destination = str(tmp_path / "copy.db") if destination_kind == "sqlite" else request.getfixturevalue("pg_url")
    BudgetStore.migrate(destination)  # an empty store made beforehand has no origin yet
    copy_store(source, destination)
    with BudgetStore.open(destination, readonly=True) as store:
        assert store.origin() == "example.org/copied"
        assert store.checkpoint().root == naive_tree(source).root()
    assert stored_checkpoints(destination) == stored_checkpoints(source)
    assert query(destination, "SELECT level, idx, hash FROM compute_budget_tree_nodes ORDER BY level, idx") == query(
        source, "SELECT level, idx, hash FROM compute_budget_tree_nodes ORDER BY level, idx"
    )
    report = audit(destination, trusted_keys=[key.verifier()])
    assert report.clean
    assert report.attested_size == 403


def test_copy_refuses_a_source_whose_signed_checkpoints_do_not_hold(tmp_path: Path) -> None:
    """A stored checkpoint the rows no longer match is not carried into a new store: nothing is copied."""
    source = tmp_path / "source.db"
    with BudgetStore.open(source, signing_key=signer()) as store:
        store.record_many(gate_lines(10))
        store.record_many(gate_lines(10, prefix="more"))
    rewrite_consistently(source, 2)
    with pytest.raises(CopyVerificationFailed, match="checkpoint"):
        copy_store(source, tmp_path / "copy.db")
    assert not (tmp_path / "copy.db").exists()  # the failed copy removed the database file it had created


def test_copy_into_a_store_of_another_origin_is_refused(tmp_path: Path) -> None:
    """An empty destination already named otherwise cannot take the source's history."""
    source = tmp_path / "source.db"
    with BudgetStore.open(source) as store:
        store.record_many(gate_lines(2))
    BudgetStore.migrate(tmp_path / "unnamed.db")
    with BudgetStore.open(tmp_path / "unnamed.db") as store:
        assert store.origin() is None  # without --origin, migrate names only a store that holds rows
    BudgetStore.migrate(tmp_path / "named.db", origin="example.org/elsewhere")
    with BudgetStore.open(tmp_path / "named.db") as store:
        assert store.origin() == "example.org/elsewhere"
    from compute_budget.errors import DestinationNotEmpty

    with pytest.raises(DestinationNotEmpty, match="origin"):
        copy_store(source, tmp_path / "named.db")
    copy_store(source, tmp_path / "unnamed.db")


def test_a_checkpoint_of_another_log_is_one_finding_that_says_so(tmp_path: Path) -> None:
    """A checkpoint of another store given to the audit: the finding names the other log, first, and there is no
    "history was rewritten" about it (its chain hash could never match this log's rows)."""
    mine, other = tmp_path / "mine.db", tmp_path / "other.db"
    for path in (mine, other):
        with BudgetStore.open(path) as store:
            store.record_many(gate_lines(30, prefix=path.stem))
    with BudgetStore.open(other, readonly=True) as store:
        theirs = store.checkpoint()
    for report in (audit(mine, checkpoint=theirs), audit(mine, since=theirs)):
        assert report.findings[0].kind.value == "checkpoint_mismatch"
        assert "the checkpoint is of log compute-budget/" in report.findings[0].detail
        assert not any("rewritten" in finding.detail and "checkpoint" in finding.detail for finding in report.findings)
    assert kinds(audit(mine, checkpoint=theirs)) == ["checkpoint_mismatch"]


def test_an_expected_origin_tells_a_store_put_in_the_place_of_another(tmp_path: Path) -> None:
    """Two stores signed by the same key look alike to `--trusted-key` alone: `expected_origin` names the log the
    audit must find, and a store of another origin (or none) in its place is a `checkpoint_mismatch`."""
    from compute_budget.errors import ArgumentTypeError

    key = signer()
    mine, other = tmp_path / "mine.db", tmp_path / "other.db"
    for path in (mine, other):
        with BudgetStore.open(path, signing_key=key) as store:
            store.record_many(gate_lines(20, prefix=path.stem))
    with BudgetStore.open(mine, readonly=True) as store:
        my_origin = store.checkpoint().origin
    assert my_origin is not None
    assert audit(mine, trusted_keys=[key.verifier()], expected_origin=my_origin).clean
    assert audit(other, trusted_keys=[key.verifier()]).clean  # the swap the key alone cannot see
    report = audit(other, trusted_keys=[key.verifier()], expected_origin=my_origin)
    assert kinds(report) == ["checkpoint_mismatch"]
    assert f", not {my_origin}: another store is in its place" in report.findings[0].detail
    with pytest.raises(ArgumentTypeError, match="is not a log origin"):
        audit(mine, expected_origin="has+plus")


def test_checkpoint_json_carries_origin_size_and_root(db_path: Path) -> None:
    """The JSON checkpoint of revision 2: origin, tree_size and the base64 root; old documents still read."""
    with BudgetStore.open(db_path) as store:
        store.record_many(gate_lines(4))
        checkpoint = store.checkpoint()
    document = json.loads(checkpoint.to_json())
    assert document["tree_size"] == document["seq"] == 4
    assert base64.b64decode(document["root"]) == naive_tree(str(db_path)).root()
    assert document["origin"] == checkpoint.origin
    assert Checkpoint.from_json(checkpoint.to_json()) == checkpoint
    old = {key: value for key, value in document.items() if key not in ("origin", "tree_size", "root")}
    assert Checkpoint.from_json(json.dumps(old)).root is None
    assert audit(db_path, checkpoint=old).clean
    assert naive_tree(str(db_path)).root(0) == EMPTY_ROOT
    assert not is_postgres(str(db_path))


def test_a_checkpoint_the_table_drops_is_an_error_not_a_silent_success(tmp_path: Path) -> None:
    """Defence in depth behind the schema check: an INSERT of a signed checkpoint (or tree nodes) that the table
    swallows (a RAISE(IGNORE) trigger) raises StoreDamaged, so the transaction is rolled back and no writer reports
    a signature the store does not hold."""
    from sqlalchemy import create_engine

    from compute_budget.store import seal_tables as sealing
    from compute_budget.store.backends import seal_statements_for

    target = tmp_path / "store.db"
    with BudgetStore.open(target) as opened:
        opened.record_many(gate_lines(2))
    engine = create_engine(f"sqlite:///{target}")
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql(
                "CREATE TRIGGER swallow BEFORE INSERT ON compute_budget_checkpoints BEGIN SELECT RAISE(IGNORE); END"
            )
        with pytest.raises(StoreDamaged, match="kept 0 of the 1 signed checkpoints"), engine.begin() as connection:
            sealing.insert_checkpoint(connection, seal_statements_for("sqlite"), 2, signer(), "note\n", "now")
    finally:
        engine.dispose()
