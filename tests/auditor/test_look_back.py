"""`audit --since FILE --look-back N` (spec 9.9.7): below its checkpoint the nightly audit re-derives and re-hashes
the full tiles due on its UTC day and the partial last tile, so an edit made with the guard dropped and put back is
found within N nights, not only by the weekly full audit."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from compute_budget import BudgetStore
from compute_budget.auditor.scan import AuditReport, FindingKind, audit
from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.tree import TILE_SIZE, due_tiles
from compute_budget.errors import ArgumentTypeError
from tests.backends import tamper, tamper_all
from tests.conftest import gate_lines

N = 7
FULL_TILES = 7
PARTIAL = 40
BELOW = FULL_TILES * TILE_SIZE + PARTIAL  # rows at or below the --since checkpoint
NEW = 10  # rows after it
DAY = 20_432  # a Monday's UTC day number (2025-12-08); any whole number works: only d mod N matters
EDITED_TILE = 3
EDITED_SEQ = EDITED_TILE * TILE_SIZE + 17  # a row of tile 3


@pytest.fixture
def store(store_target: str) -> tuple[str, Checkpoint]:
    """A store of 7 full tiles and a partial one, its checkpoint at that size, then a night's new rows."""
    with BudgetStore.open(store_target) as opened:
        opened.record_many(gate_lines(BELOW))
        checkpoint = opened.checkpoint()
        opened.record_many(gate_lines(NEW, prefix="night"))
    return store_target, checkpoint


def night(target: str, since: Checkpoint, day: int, **options: object) -> AuditReport:
    return audit(target, since=since, look_back=N, look_back_day=day, **options)  # type: ignore[arg-type]


def test_n_consecutive_days_cover_every_full_tile() -> None:
    """For N = 7, the tiles due on 7 consecutive days are every full tile, each once; any start day."""
    for start in (0, DAY, DAY + 3):
        due = [tile for day in range(start, start + N) for tile in due_tiles(BELOW, N, day)]
        assert sorted(due) == list(range(FULL_TILES))


def test_seven_nights_find_an_edit_in_every_full_tile(store: tuple[str, Checkpoint]) -> None:
    """One row edited in each of the 7 full tiles (guard dropped and put back): each of 7 consecutive nights' look-back
    re-derives exactly its own tile's row (t mod 7 == d mod 7), and together they find all seven."""
    from compute_budget.auditor.look_back import look_below

    target, since = store
    edited = {tile: tile * TILE_SIZE + 1 + (tile * 37) % TILE_SIZE for tile in range(FULL_TILES)}
    tamper(target, *(f"UPDATE compute_budget_decisions SET max_steps = 99 WHERE seq = {seq}"
                     for seq in edited.values()))
    found: set[int] = set()
    with BudgetStore.open(target, readonly=True) as opened, opened.snapshot() as snapshot:
        for day in range(DAY, DAY + N):
            summary, findings, _ = look_below(snapshot, since, N, day, snapshot.max_seq())
            rows = {finding.seq for finding in findings if finding.kind is FindingKind.REDERIVE_MISMATCH}
            assert rows == {edited[day % N]}
            assert summary.tiles == 2  # its full tile and the partial one
            found |= rows
    assert found == set(edited.values())


def test_each_night_rechecks_its_slice_and_the_partial_tile(store: tuple[str, Checkpoint]) -> None:
    """Every night: one full tile (7 tiles, N = 7) and the partial last tile, clean; rows_checked counts only the
    new rows; the slice is the day number mod N."""
    target, since = store
    for day in range(DAY, DAY + N):
        report = night(target, since, day)
        assert report.clean, report.findings
        assert report.rows_checked == NEW
        assert report.look_back is not None
        assert report.look_back.to_dict() | {"seconds": 0} == {
            "n": N, "slice": day % N, "tiles": 2, "rows": TILE_SIZE + PARTIAL, "seconds": 0, "findings": 0,
        }


def test_an_edit_below_the_checkpoint_is_found_the_night_its_tile_is_due(store: tuple[str, Checkpoint]) -> None:
    """Guard dropped, row edited, guard put back: the --since audit alone stays clean every night; with the
    look-back, the nights its tile is not due stay clean and the night it is due finds the row (and checks every row,
    as for a --since checkpoint that no longer holds)."""
    target, since = store
    tamper(target, f"UPDATE compute_budget_decisions SET max_steps = 99 WHERE seq = {EDITED_SEQ}")
    assert audit(target, since=since).clean  # the hole this closes
    found_on = []
    for day in range(DAY, DAY + N):
        report = night(target, since, day)
        if report.clean:
            continue
        found_on.append(day)
        assert report.escalated
        assert EDITED_SEQ in report.affected_rows
        assert FindingKind.REDERIVE_MISMATCH in {finding.kind for finding in report.findings}
        assert report.look_back is not None
        assert report.look_back.findings > 0
    assert found_on == [day for day in range(DAY, DAY + N) if day % N == EDITED_TILE]


def test_an_edit_in_the_partial_tile_is_found_every_night(store: tuple[str, Checkpoint]) -> None:
    """The partial last tile below the checkpoint is re-checked every night."""
    target, since = store
    seq = FULL_TILES * TILE_SIZE + 5
    tamper(target, f"UPDATE compute_budget_decisions SET max_steps = 99 WHERE seq = {seq}")
    for day in range(DAY, DAY + 2):
        report = night(target, since, day)
        assert seq in report.affected_rows


def test_a_stored_tile_hash_that_differs_from_its_rows_is_named(store: tuple[str, Checkpoint]) -> None:
    """The stored tree edited (tile 2's node): the look-back's root no longer matches the checkpoint's on any
    night, and on the night tile 2 is due the finding names the tile."""
    target, since = store
    tamper_all(target, f"UPDATE compute_budget_tree_nodes SET hash = '{'ab' * 32}' WHERE level = 8 AND idx = 2")
    due_day = next(day for day in range(DAY, DAY + N) if day % N == 2)
    other_day = due_day + 1
    from compute_budget.auditor.look_back import look_below

    with BudgetStore.open(target, readonly=True) as opened, opened.snapshot() as snapshot:
        _, on_due, _ = look_below(snapshot, since, N, due_day, snapshot.max_seq())
        _, on_other, _ = look_below(snapshot, since, N, other_day, snapshot.max_seq())
    assert [finding.kind for finding in on_due] == [FindingKind.CHECKPOINT_MISMATCH]
    assert "tile 2 (rows 513..768)" in on_due[0].detail
    assert [(finding.kind, finding.seq) for finding in on_other] == [(FindingKind.CHECKPOINT_MISMATCH, BELOW)]
    assert "give root" in on_other[0].detail
    assert not night(target, since, other_day).clean


@pytest.mark.postgres_smoke
@pytest.mark.slow
def test_look_back_with_jobs_gives_the_one_process_report(
    store: tuple[str, Checkpoint], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --jobs 2 (ranges split at a few rows here) the look-back runs in the auditing process beside the
    worker: the same findings as one process."""
    from compute_budget.auditor import ranges

    monkeypatch.setattr(ranges, "MIN_ROWS_PER_JOB", 2)
    target, since = store
    tamper(target, f"UPDATE compute_budget_decisions SET max_steps = 99 WHERE seq = {EDITED_SEQ}")
    day = next(day for day in range(DAY, DAY + N) if day % N == EDITED_TILE)
    one, two = night(target, since, day), night(target, since, day, jobs=2)
    assert two.jobs == 2
    assert [finding.to_dict() for finding in two.findings] == [finding.to_dict() for finding in one.findings]
    assert EDITED_SEQ in two.affected_rows
    clean_day = day + 1
    assert night(target, since, clean_day, jobs=2).clean


def test_look_back_needs_since(store: tuple[str, Checkpoint]) -> None:
    target, _ = store
    with pytest.raises(ArgumentTypeError, match="since"):
        audit(target, look_back=N)
    with pytest.raises(ArgumentTypeError, match="whole number"):
        audit(target, since=store[1], look_back=-1)


def test_cli_look_back_reports_its_cost(
    store: tuple[str, Checkpoint], tmp_path: Path, run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    """The command line: JSON `look_back` (n, slice, tiles, rows) with today's slice, the text report's line; without
    --since, --look-back is a usage error (exit 2)."""
    target, since = store
    kept = tmp_path / "checkpoint.json"
    kept.write_text(since.to_json() + "\n")
    today = int(time.time() // 86_400)
    code, out, err = run_cli("audit", "--db", target, "--since", str(kept), "--look-back", "7", "--format", "json")
    assert code == 0, err
    document = json.loads(out)
    assert document["rows_checked"] == NEW
    assert {key: document["look_back"][key] for key in ("n", "slice", "tiles", "rows")} in [
        {"n": 7, "slice": day % 7, "tiles": 2, "rows": TILE_SIZE + PARTIAL} for day in (today, today + 1)
    ]
    code, out, err = run_cli("audit", "--db", target, "--since", str(kept), "--look-back", "7")
    assert code == 0, err
    assert f"rows below seq {BELOW} re-derived and re-hashed in" in out
    code, _, err = run_cli("audit", "--db", target, "--look-back", "7")
    assert code == 2
    assert "--look-back re-checks rows below a --since checkpoint" in err
    code, out, _ = run_cli("audit", "--db", target, "--format", "json")
    assert json.loads(out)["look_back"] is None
