"""The store is handed its witness submitter (`compute_budget.submitter.WitnessSubmitter`): it plans what each
witness is sent and keeps what comes back; whoever opens it chooses how the checkpoint travels. Without one, the
package root's default is `witness.client`'s HTTP submitter."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from pathlib import Path

from compute_budget import BudgetStore
from compute_budget.core.log.note import parse_checkpoint, parse_note
from compute_budget.submitter import (
    Keep,
    Plan,
    Submitted,
    WitnessSubmitter,
    WitnessTarget,
    default_submitter,
)
from compute_budget.witness.client import HttpSubmitter
from tests.backends import query
from tests.conftest import gate_lines
from tests.witnessing import LOG, ORIGIN, WITNESS_KEY


class _Recording:
    """A submitter that speaks to no witness: it asks the store's plan, keeps nothing and says so."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, tuple[WitnessTarget, ...], list[tuple[int, int]]]] = []

    def submit(
        self, note: str, size: int, targets: Sequence[WitnessTarget], *, plan: Plan, keep: Keep,
        plan_deadline: float, deadline: float, failures: tuple[type[Exception], ...],
    ) -> list[Submitted]:
        assert parse_checkpoint(parse_note(note)[0]).size == size
        assert plan_deadline <= deadline
        planned = plan(dict.fromkeys(targets), plan_deadline)
        keep([])
        self.calls.append((size, tuple(targets), [(item.old, len(item.proof)) for item in planned]))
        return [Submitted(target, False, "kept offline") for target in targets]


def _open(path: Path, submitter: WitnessSubmitter | None, *witnesses: str) -> BudgetStore:
    return BudgetStore.open(
        str(path / "store.db"), origin=ORIGIN, signing_key=LOG, writer_state=str(path / "writer.state"),
        witnesses=witnesses, submitter=submitter,
    )


def test_a_store_sends_through_the_submitter_it_is_handed(tmp_path: Path) -> None:
    """Each signed append goes to the handed submitter (no HTTP): its answers are the record's warnings and
    count; `submit_to_witnesses` takes one per call too."""
    handed = _Recording()
    target = f"http://127.0.0.1:1={WITNESS_KEY}"  # nothing listens there: only the submitter is asked
    with _open(tmp_path, handed, target) as store:
        batch = store.record_many(gate_lines(3))
        assert batch.witnessed == (0, 1)
        assert len(batch.witness_warnings) == 1
        assert "kept offline" in batch.witness_warnings[0]
        other = _Recording()
        submitted = store.submit_to_witnesses([target], submitter=other)
    assert [item.reason for item in submitted] == ["kept offline"]
    parsed = WitnessTarget.parse(target)
    assert handed.calls == [(3, (parsed,), [(0, 0)])]
    assert other.calls == [(3, (parsed,), [(0, 0)])]
    assert query(str(tmp_path / "store.db"), "SELECT count(*) FROM compute_budget_cosignatures") == [(0,)]


def test_without_a_submitter_the_store_uses_the_http_client(tmp_path: Path) -> None:
    """The package root installs `witness.client`'s submitter as the default: a Python caller passing witnesses
    and no submitter is sent over HTTP as before (`test_witness_submit` holds the exchange itself)."""
    assert isinstance(default_submitter(), HttpSubmitter)
    with socket.socket() as probe:  # a port nothing listens on: the HTTP client's own "unreachable"
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with _open(tmp_path, None, f"http://127.0.0.1:{port}={WITNESS_KEY}") as store:
        batch = store.record_many(gate_lines(1))
    assert batch.witnessed == (0, 1)
    assert "unreachable (" in batch.witness_warnings[0]
