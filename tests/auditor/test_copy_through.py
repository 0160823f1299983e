"""Spec 9.7 (the schema's bookkeeping) and 9.8 (salvage with `copy --through`), issue 19, on both backends."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from compute_budget.core.leaf import row_leaf_hash
from compute_budget.core.log.merkle import MemoryTree
from compute_budget.store.migrations import head_revision
from tests.backends import execute, is_postgres, query, rows, tamper, tamper_all
from tests.conftest import REPO_ROOT, gate_lines

Run = Callable[..., tuple[int, str, str]]
EXAMPLES = str(REPO_ROOT / "examples" / "gates.jsonl")


def _record(run_cli: Run, target: str, folder: Path, count: int, prefix: str, *extra: str) -> None:
    path = folder / f"{prefix}.jsonl"
    path.write_text("\n".join(gate_lines(count, prefix=prefix)) + "\n")
    status, _, err = run_cli("record", str(path), "--db", target, *extra)
    assert status == 0, err


def _kinds(out: str) -> list[str]:
    return [finding["kind"] for finding in json.loads(out)["findings"]]


# -- 9.7 ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("recorded", ["0002", "0001", "zzzz"])
def test_a_revision_record_edited_under_head_tables_is_schema_tampered_and_every_check_still_runs(
    run_cli: Run, store_target: str, tmp_path: Path, recorded: str
) -> None:
    """One UPDATE of alembic_version (issue 19's trial): the audit reports schema_tampered (exit 1) and still
    re-derives every row; a writer refuses; `migrate` repairs the record and the audit is clean again."""
    _record(run_cli, store_target, tmp_path, 6, "a")
    tamper(store_target, f"UPDATE alembic_version SET version_num = '{recorded}'")
    tamper(store_target, "UPDATE compute_budget_decisions SET max_steps = 77 WHERE seq = 2")
    status, out, err = run_cli("audit", "--db", store_target, "--format", "json")
    assert status == 1, err
    kinds = _kinds(out)
    assert "schema_tampered" in kinds
    assert "rederive_mismatch" in kinds  # every other check ran
    detail = next(f["detail"] for f in json.loads(out)["findings"] if f["kind"] == "schema_tampered")
    assert f"'{recorded}'" in detail
    assert "migrate" in detail
    status, _, err = run_cli("record", EXAMPLES, "--db", store_target)
    assert status == 2
    assert "migrate" in err
    status, out, err = run_cli("migrate", "--db", store_target)
    assert status == 1, err  # the repair's full audit finds row 2 (spec 9.9.10)
    assert out.startswith("rows that do not hold after the repair: seq 2\n")
    assert "repaired the schema's bookkeeping" in err
    assert query(store_target, "SELECT version_num FROM alembic_version") == [(head_revision(),)]
    status, out, _ = run_cli("audit", "--db", store_target, "--format", "json")
    assert _kinds(out) == kinds  # the record is repaired; the repair itself waits for its acknowledgement
    detail = next(f["detail"] for f in json.loads(out)["findings"] if f["kind"] == "schema_tampered")
    assert "repaired at seq 6, not acknowledged" in detail


def test_a_store_whose_tables_are_those_of_its_recorded_revision_still_needs_migrate(tmp_path: Path) -> None:
    """Section 5's stop stays for a real older store: the committed revision-0001 store is refused until
    migrated (its tables are its revision's, not head's)."""
    from compute_budget import BudgetStore, SchemaBehindHead

    path = tmp_path / "old.db"
    path.write_bytes((REPO_ROOT / "tests" / "data" / "store_0001.db").read_bytes())
    with pytest.raises(SchemaBehindHead):
        BudgetStore.open(path, readonly=True)


# -- 9.8 ------------------------------------------------------------------------------------------------------


@pytest.fixture
def signed_source(run_cli: Run, tmp_path: Path) -> tuple[str, Path, str]:
    """A SQLite store of 10 signed rows in two appends, and its writer's key file and verifier key."""
    key = tmp_path / "writer.key"
    status, verifier, err = run_cli("keygen", "writer", "--out", str(key))
    assert status == 0, err
    source = str(tmp_path / "source.db")
    _record(run_cli, source, tmp_path, 6, "first", "--signing-key", str(key), "--origin", "example.org/source")
    _record(run_cli, source, tmp_path, 4, "second", "--signing-key", str(key))
    return source, key, verifier.strip()


@pytest.mark.parametrize("destination_kind", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_copy_through_salvages_the_witnessed_rows_into_a_new_origin(
    run_cli: Run, signed_source: tuple[str, Path, str], tmp_path: Path, destination_kind: str,
    request: pytest.FixtureRequest,
) -> None:
    """Rows 1..SEQ exactly as stored, a new origin, no checkpoints, one provenance row (source origin, SEQ, root
    and chain hash at SEQ) the audit prints; the first signed append needs --adopt-unsigned SEQ."""
    source, key, verifier = signed_source
    target = str(tmp_path / "salvaged.db") if destination_kind == "sqlite" else str(request.getfixturevalue("pg_url"))
    status, out, err = run_cli("copy", source, target, "--through", "6", "--origin", "example.org/salvaged")
    assert status == 0, err
    assert out.startswith("copied 6 rows")
    assert "--adopt-unsigned 6" in err
    assert [tuple(row) for row in rows(target)] == [tuple(row) for row in rows(source)[:6]]
    assert query(target, "SELECT origin FROM compute_budget_origin") == [("example.org/salvaged",)]
    assert query(target, "SELECT count(*) FROM compute_budget_checkpoints") == [(0,)]
    tree = MemoryTree(row_leaf_hash(row[:17]) for row in rows(source)[:6])
    expected_root = base64.b64encode(tree.root()).decode("ascii")
    stored = query(target, "SELECT source_origin, through_seq, root, chain_hash FROM compute_budget_provenance")
    assert stored == [("example.org/source", 6, expected_root, rows(source)[5][17])]
    status, out, _ = run_cli("audit", "--db", target)
    assert status == 0
    assert f"salvaged from example.org/source through seq 6 (root {expected_root}" in out
    status, out, _ = run_cli("audit", "--db", target, "--format", "json")
    assert json.loads(out)["provenance"]["through_seq"] == 6
    more = tmp_path / "more.jsonl"
    more.write_text("\n".join(gate_lines(2, prefix="after")) + "\n")
    state = tmp_path / "salvage.state"
    signing = ("--signing-key", str(key), "--writer-state", str(state))
    status, _, err = run_cli("record", str(more), "--db", target, *signing)
    assert status == 2
    assert "rows 1..6 were appended by no trusted writer" in err
    status, _, err = run_cli("record", str(more), "--db", target, *signing, "--adopt-unsigned", "6")
    assert status == 0, err
    assert "adopted 6 rows (seq 1..6)" in err
    status, out, _ = run_cli("audit", "--db", target, "--trusted-key", verifier)
    assert status == 0, out


def test_copy_through_refuses_a_row_that_does_not_hold_and_leaves_nothing(
    run_cli: Run, signed_source: tuple[str, Path, str], tmp_path: Path
) -> None:
    source, _, _ = signed_source
    tamper(source, "UPDATE compute_budget_decisions SET max_steps = 99 WHERE seq = 3")
    target = tmp_path / "salvaged.db"
    status, _, err = run_cli("copy", source, str(target), "--through", "6")
    assert status == 1
    assert "seq 3" in err
    assert not target.exists()
    status, _, err = run_cli("copy", source, str(target), "--through", "2")  # before the damage: fine
    assert status == 0, err
    assert len(rows(str(target))) == 2


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("--through", "11"), "fewer than --through 11"),
        (("--through", "4", "--origin", "example.org/source"), "new origin"),
        (("--origin", "example.org/other"), "--origin goes with --through"),
        (("--through", "4", "--origin", "bad origin"), "invalid origin"),
        (("--through", "-1"), "--through"),
    ],
)
def test_copy_through_arguments_that_cannot_work_are_exit_2(
    run_cli: Run, signed_source: tuple[str, Path, str], tmp_path: Path, arguments: tuple[str, ...], message: str
) -> None:
    source, _, _ = signed_source
    target = tmp_path / "salvaged.db"
    status, out, err = run_cli("copy", source, str(target), *arguments)
    assert (status, out) == (2, "")
    assert message in err
    assert not target.exists()


def test_the_provenance_is_append_only_and_travels_with_a_whole_copy(
    run_cli: Run, signed_source: tuple[str, Path, str], tmp_path: Path
) -> None:
    """The guard covers the new table; a whole copy of a salvaged store carries its provenance; an edited
    provenance row no longer names the stored chain hash and the audit says so."""
    import sqlite3

    source, _, _ = signed_source
    salvaged = str(tmp_path / "salvaged.db")
    assert run_cli("copy", source, salvaged, "--through", "5")[0] == 0
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        execute(salvaged, "UPDATE compute_budget_provenance SET through_seq = 4")
    again = str(tmp_path / "again.db")
    assert run_cli("copy", salvaged, again)[0] == 0
    assert query(again, "SELECT source_origin, through_seq FROM compute_budget_provenance") == [
        ("example.org/source", 5)
    ]
    tamper_all(salvaged, "UPDATE compute_budget_provenance SET chain_hash = '" + "0" * 64 + "'")
    status, out, _ = run_cli("audit", "--db", salvaged, "--format", "json")
    assert status == 1
    assert "checkpoint_mismatch" in _kinds(out)
    assert not is_postgres(salvaged)


def test_a_provenance_row_planted_in_a_store_is_a_finding(run_cli: Run, store_target: str, tmp_path: Path) -> None:
    """An insider's INSERT of a provenance claim (the guard allows a first row) whose root is not the tree's at
    its size: checkpoint_mismatch, never a clean audit printing a made-up origin of record."""
    _record(run_cli, store_target, tmp_path, 8, "a")
    chain = rows(store_target)[7][17]
    execute(store_target, (
        "INSERT INTO compute_budget_provenance (id, source_origin, through_seq, root, chain_hash, recorded_at) "
        "VALUES (1, 'example.org/fake', 8, :root, :chain, 'x')",
        {"root": base64.b64encode(bytes(32)).decode(), "chain": chain},
    ))
    status, out, _ = run_cli("audit", "--db", store_target, "--format", "json")
    assert status == 1
    findings = json.loads(out)["findings"]
    assert [(item["kind"], item["seq"]) for item in findings] == [("checkpoint_mismatch", 8)]
    assert "not written by `copy --through`" in findings[0]["detail"]
