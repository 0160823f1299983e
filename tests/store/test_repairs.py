"""After a repair (spec 9.9.10): `migrate` records what it repaired, audits every row and leads with the rows that do
not hold; writers refuse to append until `record --after-repair ID`; the audit reports an unacknowledged repair."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from compute_budget import BudgetStore, InputError, RepairNotAcknowledged, StoreDamaged, StoreUnavailable, audit
from compute_budget.store.copy import copy_store
from tests.backends import execute, is_postgres, query, rows
from tests.conftest import REPO_ROOT, SetUp, gate_lines
from tests.sealing import rewrite_consistently, signer

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def store(store_target: str) -> str:
    """A store of 5 rows, on each backend."""
    with BudgetStore.open(store_target) as opened:
        opened.record_many(gate_lines(5))
    return store_target


def _drop_guard(target: str, *edits: str) -> None:
    """The insider's move: drop the decisions table's guard and leave it dropped, editing rows meanwhile."""
    if is_postgres(target):
        drops = ("DROP TRIGGER compute_budget_decisions_no_update_delete ON compute_budget_decisions",
                 "DROP TRIGGER compute_budget_decisions_no_truncate ON compute_budget_decisions")
    else:
        drops = tuple(f"DROP TRIGGER compute_budget_decisions_{name}" for name in ("no_update", "no_delete",
                                                                                    "no_replace"))
    execute(target, *drops, *edits)


EDIT_ROW_3 = "UPDATE compute_budget_decisions SET explanation = 'approved by the insider' WHERE seq = 3"


def _repairs(target: str) -> list[tuple[object, ...]]:
    return query(target, "SELECT id, kind, head_size FROM compute_budget_repairs ORDER BY id")


def _migrated(target: str) -> int:
    """Migrate (the guard restored, a repair recorded) and return the repair's id."""
    said: list[int] = []
    BudgetStore.migrate(target, on_repair=lambda repair: said.append(repair.id))
    assert len(said) == 1
    return said[0]


def test_the_salvage_command_is_quoted_for_the_shell(tmp_path: Path, run_cli: Run) -> None:
    """The salvage line is meant to be pasted: a store path with `?`, `#` or a space was printed bare, so a shell
    globbed or cut it. It is quoted now, and runs as printed."""
    import shlex

    db = tmp_path / "odd ?#.db"
    with BudgetStore.open(str(db)) as opened:
        opened.record_many(gate_lines(5))
    _drop_guard(str(db), EDIT_ROW_3)
    status, out, _ = run_cli("migrate", "--db", str(db))
    assert status == 1
    (line,) = [text for text in out.splitlines() if text.startswith("salvage: ")]
    assert line == f"salvage: compute-budget copy {shlex.quote(str(db))} NEW_DB --through 2"
    assert shlex.split(line.removeprefix("salvage: "))[2] == str(db)


def test_migrate_after_an_edit_records_the_repair_and_leads_with_the_rows_and_the_salvage(
    store: str, run_cli: Run
) -> None:
    """Before, migrate restored the guard, said `repaired N problem(s)` and exited 0 over an edited row. Now it
    records the repair, audits every row, prints the row that does not hold and the salvage command first, and
    exits 1."""
    _drop_guard(store, EDIT_ROW_3)
    status, out, err = run_cli("migrate", "--db", store)
    assert status == 1, err
    lines = out.splitlines()
    assert lines[0] == "rows that do not hold after the repair: seq 3"
    assert lines[1].startswith("  seq 3 ")
    assert lines[2].startswith("salvage: compute-budget copy ")
    assert lines[2].endswith(" NEW_DB --through 2")
    assert "schema at head revision 0006; repaired" in out
    assert "recorded repair #1 at seq 5" in out
    assert "restored the append-only guard" in err
    assert _repairs(store) == [(1, "repair", 5)]


def test_migrate_after_a_consistent_rewrite_names_the_range_and_salvages_before_it(
    store: str, run_cli: Run, tmp_path: Path
) -> None:
    """Rows rewritten with every later chain hash recomputed re-derive one by one; the stored signed checkpoint
    no longer matches them, and the audit bounds the rewrite: migrate lists that range and salvages before it."""
    key = signer()
    with BudgetStore.open(store, signing_key=key, writer_state=tmp_path / "w.state") as opened:
        opened.record_many([], adopt_unsigned_through=5)
    rewrite_consistently(store, 4)
    _drop_guard(store)
    status, out, err = run_cli("migrate", "--db", store)
    assert status == 1, err
    first, *_ = out.splitlines()
    found = re.fullmatch(r"rows that do not hold after the repair: seq somewhere in (\d+)\.\.5 \(rewritten "
                         r"consistently\)", first)
    assert found is not None, first
    through = int(found.group(1)) - 1
    assert re.search(rf"^salvage: compute-budget copy \S+ NEW_DB --through {through}$", out, re.MULTILINE)


def test_migrate_after_a_repair_over_rows_that_hold_exits_0_and_says_so(store: str, run_cli: Run) -> None:
    """No row changed while the guard was down: the full audit finds nothing else, exit 0, the repair recorded."""
    _drop_guard(store)
    status, out, err = run_cli("migrate", "--db", store)
    assert status == 0, err
    assert out.startswith("schema at head revision 0006; repaired 3 problem(s)" if not is_postgres(store) else
                          "schema at head revision 0006; repaired 2 problem(s)")
    assert "full audit after the repair: every row holds" in out
    assert "`compute-budget record --after-repair 1`" in out
    assert _repairs(store) == [(1, "repair", 5)]
    status, out, err = run_cli("migrate", "--db", store)
    assert (status, err) == (0, "")
    assert out == "schema already at head revision 0006\n"  # nothing repaired: nothing recorded
    assert len(_repairs(store)) == 1


def test_migrate_says_when_its_audit_could_not_run(store: str, run_cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    """The repair is committed before the audit runs: an audit that fails is one line saying it is owed (exit 1),
    and the repair lines and the repair's number are still printed."""
    import compute_budget.auditor.scan

    def unavailable(*_args: object, **_kwargs: object) -> None:
        raise StoreUnavailable("the server went away")

    monkeypatch.setattr(compute_budget.auditor.scan, "audit", unavailable)
    _drop_guard(store)
    status, out, err = run_cli("migrate", "--db", store)
    assert status == 1
    assert out.startswith("the full audit after the repair could not run: the server went away; run `compute-budget")
    assert "recorded repair #1 at seq 5" in out
    assert "restored the append-only guard" in err


def test_the_audit_reports_an_unacknowledged_repair_and_the_acknowledgement_clears_it(
    store: str, run_cli: Run
) -> None:
    """Before, the audit was CLEAN right after migrate restored a dropped guard. Now the repair is schema_tampered
    (`repaired at seq N, not acknowledged`) until a writer acknowledges it; then the audit is clean again."""
    _drop_guard(store)
    repair = _migrated(store)
    findings = audit(store).findings
    assert [finding.kind.value for finding in findings] == ["schema_tampered"]
    assert "repaired at seq 5, not acknowledged" in findings[0].detail
    assert f"--after-repair {repair}" in findings[0].detail
    status, out, _ = run_cli("audit", "--db", store, "--format", "json")
    assert status == 1
    assert "record --after-repair ID" in json.loads(out)["findings"][0]["action"]  # not only "run migrate"
    with BudgetStore.open(store) as opened:
        result = opened.record_many([], after_repair=repair)
    assert result.acknowledged_repair == repair
    assert audit(store).clean
    assert [kind for _, kind, _ in _repairs(store)] == ["repair", "acknowledged"]


def test_a_writer_refuses_to_sign_until_after_repair_and_then_signs(store: str, tmp_path: Path) -> None:
    """Before, a signing writer signed new rows on top of the repaired store. Now it raises
    `RepairNotAcknowledged` naming the repair, writes nothing, and signs once given `after_repair`."""
    key, state = signer(), tmp_path / "writer.state"
    with BudgetStore.open(store, signing_key=key, writer_state=state) as opened:
        opened.record_many([], adopt_unsigned_through=5)  # the writer signs the head it found
    _drop_guard(store)
    repair = _migrated(store)
    with BudgetStore.open(store, signing_key=key, writer_state=state) as opened:
        with pytest.raises(RepairNotAcknowledged, match=f"repair #{repair} at seq 5, not acknowledged") as raised:
            opened.record_many(gate_lines(1, prefix="after"))
        assert raised.value.repair_id == repair
        assert len(rows(store)) == 5
        result = opened.record_many(gate_lines(1, prefix="after"), after_repair=repair)
    assert (result.new, result.acknowledged_repair) == (1, repair)
    assert audit(store, trusted_keys=[key.verifier()]).clean
    with BudgetStore.open(store, signing_key=key, writer_state=state) as opened:
        assert opened.record_many(gate_lines(1, prefix="later")).new == 1  # given once: later appends go on


def test_unsigned_appends_and_checkpoint_signing_are_refused_too(store: str, tmp_path: Path) -> None:
    """The choice documented in docs/design/store.md: every append waits for the acknowledgement, not only a signed one
    (rows appended on an edited row are rows a salvage must re-record); `signed_checkpoint` signs nothing."""
    _drop_guard(store)
    repair = _migrated(store)
    with BudgetStore.open(store) as opened, pytest.raises(RepairNotAcknowledged, match=f"--after-repair {repair}"):
        opened.record(gate_lines(1, prefix="new")[0])
    with BudgetStore.open(store, allow_unsigned=True) as opened, pytest.raises(RepairNotAcknowledged):
        opened.signed_checkpoint([signer()], writer_state=tmp_path / "w.state")
    assert len(rows(store)) == 5


def test_the_cli_writer_exits_2_naming_the_repair_until_after_repair(store: str, run_cli: Run, tmp_path: Path) -> None:
    """`record` exits 2 naming the repair; `record --after-repair ID` (empty input) acknowledges it once."""
    _drop_guard(store)
    run_cli("migrate", "--db", store)
    gates = tmp_path / "gates.jsonl"
    gates.write_text("\n".join(gate_lines(2, prefix="new")) + "\n", encoding="utf-8")
    status, _, err = run_cli("record", str(gates), "--db", store)
    assert status == 2
    assert "repair #1" in err
    assert "--after-repair 1" in err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    status, out, err = run_cli("record", str(empty), "--db", store, "--after-repair", "1")
    assert status == 0, err
    assert "acknowledged repair #1" in err
    status, _, err = run_cli("record", str(gates), "--db", store, "--after-repair", "1")
    assert status == 2  # given once: a second acknowledgement of nothing is refused, nothing written
    assert "no repair waiting" in err
    status, out, err = run_cli("record", str(gates), "--db", store)
    assert status == 0, err
    assert "2 new" in out


def test_after_repair_refuses_while_a_row_does_not_hold(store: str) -> None:
    """The acknowledgement re-derives every row first: over the edited row it is refused and nothing is written."""
    _drop_guard(store, EDIT_ROW_3)
    repair = _migrated(store)
    with BudgetStore.open(store) as opened, pytest.raises(StoreDamaged, match=f"--after-repair {repair} refused: "
                                                                              "row 3 does not hold"):
        opened.record_many(gate_lines(1, prefix="new"), after_repair=repair)
    assert [kind for _, kind, _ in _repairs(store)] == ["repair"]
    assert len(rows(store)) == 5


def test_after_repair_must_name_the_newest_waiting_repair(store: str) -> None:
    """A wrong or stale id is an input error; the newest acknowledges every repair before it."""
    with BudgetStore.open(store) as opened, pytest.raises(InputError, match="no repair waiting"):
        opened.record_many([], after_repair=1)
    _drop_guard(store)
    first = _migrated(store)
    _drop_guard(store)
    second = _migrated(store)
    with BudgetStore.open(store) as opened:
        with pytest.raises(InputError, match=f"is not the newest repair waiting: give --after-repair {second}"):
            opened.record_many([], after_repair=first)
        with pytest.raises(InputError, match="names no repair waiting"):
            opened.record_many([], after_repair=second + 7)
        opened.record_many([], after_repair=second)
    assert audit(store).clean


def test_a_repair_row_cannot_be_edited_or_deleted(store: str) -> None:
    """The repairs table is append-only under the guard like the seal's tables, on each backend."""
    _drop_guard(store)
    _migrated(store)
    for statement in ("UPDATE compute_budget_repairs SET kind = 'acknowledged'", "DELETE FROM compute_budget_repairs"):
        with pytest.raises(Exception, match="compute_budget_repairs is append-only"):
            execute(store, statement)
    if is_postgres(store):
        with pytest.raises(Exception, match="compute_budget_repairs is append-only"):
            execute(store, "TRUNCATE compute_budget_repairs")
    else:
        with pytest.raises(Exception, match="a stored row cannot be replaced"):
            execute(store, "INSERT OR REPLACE INTO compute_budget_repairs VALUES (1, 'acknowledged', 'x', 'y', 5)")
    assert _repairs(store) == [(1, "repair", 5)]


def test_a_dropped_repairs_guard_is_schema_tampered(store: str) -> None:
    """The repairs table's triggers are part of the guard the schema check compares."""
    if is_postgres(store):
        execute(store, "DROP TRIGGER compute_budget_repairs_no_update_delete ON compute_budget_repairs")
    else:
        execute(store, "DROP TRIGGER compute_budget_repairs_no_delete")
    findings = audit(store).findings
    assert [finding.kind.value for finding in findings] == ["schema_tampered"]
    assert "compute_budget_repairs" in findings[0].detail


def test_a_hand_written_acknowledgement_is_schema_tampered(store: str) -> None:
    """An acknowledgement that follows no repair, or was made below the repair's head, is written by hand."""
    execute(store, "INSERT INTO compute_budget_repairs (kind, recorded_at, what, head_size) "
                   "VALUES ('acknowledged', 'now', 'by hand', 5)")
    findings = audit(store).findings
    assert [finding.kind.value for finding in findings] == ["schema_tampered"]
    assert "follows no repair" in findings[0].detail
    _drop_guard(store)
    _migrated(store)
    execute(store, "INSERT INTO compute_budget_repairs (kind, recorded_at, what, head_size) "
                   "VALUES ('acknowledged', 'now', 'by hand', 2)")
    details = [finding.detail for finding in audit(store).findings]
    assert any("below the head (seq 5) of repair #2" in detail for detail in details)


def test_an_unreadable_repairs_row_is_schema_tampered_and_stops_a_whole_copy(tmp_path: Path) -> None:
    """SQLite keeps text in an INTEGER column: such a row is reported, never skipped silently, and a copy that
    would lose it stops instead."""
    target = str(tmp_path / "store.db")
    with BudgetStore.open(target) as opened:
        opened.record_many(gate_lines(2))
    execute(target, "INSERT INTO compute_budget_repairs (kind, recorded_at, what, head_size) "
                    "VALUES ('repair', 'now', 'by hand', 'many')")
    details = [finding.detail for finding in audit(target).findings]
    assert details == ["compute_budget_repairs row 1 cannot be read: it was written by hand"]
    with pytest.raises(StoreDamaged, match="row 1 cannot be read"):
        copy_store(target, tmp_path / "copy.db")
    assert not (tmp_path / "copy.db").exists()


def test_a_whole_copy_carries_the_repairs_and_a_salvage_does_not(store: str, tmp_path: Path) -> None:
    """Copying is no way to launder a repair: the whole copy still waits for the acknowledgement; a salvage copies
    rows that each held into a new log, with none of the source's repairs."""
    _drop_guard(store)
    repair = _migrated(store)
    whole, salvaged = tmp_path / "whole.db", tmp_path / "salvaged.db"
    copy_store(store, whole)
    assert _repairs(str(whole)) == [(1, "repair", 5)]
    assert "not acknowledged" in audit(whole).findings[0].detail
    copy_store(store, salvaged, through=5)
    assert _repairs(str(salvaged)) == []
    assert audit(salvaged).clean
    with BudgetStore.open(store) as opened:
        opened.record_many([], after_repair=repair)
    acknowledged = tmp_path / "acknowledged.db"
    copy_store(store, acknowledged)
    assert [kind for _, kind, _ in _repairs(str(acknowledged))] == ["repair", "acknowledged"]
    assert audit(acknowledged).clean


# -- the runbook (docs/incident.md, "After a repair"), run as written --------------------------------------------

INCIDENT = (REPO_ROOT / "docs" / "incident.md").read_text(encoding="utf-8")


def _runbook_blocks() -> list[list[str]]:
    start = INCIDENT.index("\n## After a repair")
    section = INCIDENT[start : INCIDENT.index("\n## ", start + 1)]
    blocks = re.findall(r"^```sh\n(.*?)^```$", section, flags=re.DOTALL | re.MULTILINE)
    return [[line for line in block.splitlines() if line.strip()] for block in blocks]


def _runbook_store(set_up: SetUp, folder: Path, *edits: str) -> None:
    """store.db in `folder`: 5 signed rows, its guard dropped (and rows edited) by an insider; writer.key and
    writer.pub; new.jsonl, the next batch. Made in this process: only the runbook's blocks run in a shell."""
    set_up(folder, "keygen", "writer", "--out", "writer.key", stdout="writer.pub")
    (folder / "gates.jsonl").write_text("\n".join(gate_lines(5)) + "\n", encoding="utf-8")
    (folder / "new.jsonl").write_text("\n".join(gate_lines(2, prefix="new")) + "\n", encoding="utf-8")
    set_up(folder, "record", "gates.jsonl", "--db", "store.db", "--signing-key", "writer.key")
    _drop_guard(str(folder / "store.db"), *edits)


def _in_shell(command: str, folder: Path) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("COMPUTE_BUDGET_")}
    environment["PATH"] = str(Path(sys.executable).parent) + os.pathsep + environment.get("PATH", "")
    return subprocess.run(["bash", "-c", "set -euo pipefail\n" + command], cwd=folder, env=environment,
                          capture_output=True, text=True, check=False, timeout=120)


@pytest.mark.slow
def test_the_runbook_after_a_clean_repair_runs_as_written(tmp_path: Path, set_up: SetUp) -> None:
    """migrate (exit 0, every row holds), the full audit (exit 1: its one finding is the repair), the
    acknowledgement with the next batch, and a clean audit."""
    clean, _ = _runbook_blocks()
    _runbook_store(set_up, tmp_path)
    done = [_in_shell(command, tmp_path) for command in clean]
    assert [item.returncode for item in done] == [0, 1, 0, 0], [item.stderr for item in done]
    assert "recorded repair #1 at seq 5" in done[0].stdout
    assert "1 FINDING" in done[1].stdout
    assert "repaired at seq 5, not acknowledged" in done[1].stdout
    assert "acknowledged repair #1" in done[2].stderr
    assert "CLEAN" in done[3].stdout


@pytest.mark.slow
def test_the_runbook_after_an_edit_salvages_and_re_records_the_honest_rows(tmp_path: Path, set_up: SetUp) -> None:
    """migrate (exit 1, row 3 and the salvage command), the salvage through 2, the gates after it re-recorded
    under the writer's key, and a clean audit of the new log holding every gate's honest decision."""
    _, salvage = _runbook_blocks()
    _runbook_store(set_up, tmp_path, EDIT_ROW_3)
    done = [_in_shell(command, tmp_path) for command in salvage]
    assert [item.returncode for item in done] == [1, 0, 0, 0, 0], [item.stderr for item in done]
    assert "rows that do not hold after the repair: seq 3" in done[0].stdout
    assert re.search(r"^salvage: compute-budget copy \S*store\.db NEW_DB --through 2$", done[0].stdout, re.MULTILINE)
    assert "CLEAN" in done[4].stdout
    original = [row[1] for row in rows(str(tmp_path / "store.db"))]  # budget_ids: the edit left row 3's own
    assert [row[1] for row in rows(str(tmp_path / "salvaged.db"))] == original
