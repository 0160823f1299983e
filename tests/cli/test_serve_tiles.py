"""`compute-budget serve --tiles LOCATION --origin NAME --trusted-key KEY` (spec 11.8): the usage rules of
`audit --tiles`, one line and exit 2 each; a checkpoint that does not verify is refused before anything is served."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compute_budget.core.log.note import generate_signer
from compute_budget.keys.key_files import load_signer_key, write_new_signer_key
from compute_budget.store import BudgetStore
from compute_budget.web import server as web_server
from tests.conftest import BuiltOnce, gate_lines
from tests.publications import publish_store

Run = Callable[..., tuple[int, str, str]]
ORIGIN = "example.org/serve-tiles"


def _build(folder: Path) -> None:
    key = generate_signer("writer")
    write_new_signer_key(folder / "writer.key", key)
    with BudgetStore.open(str(folder / "store.db"), signing_key=str(folder / "writer.key"), origin=ORIGIN) as store:
        store.record_many([json.loads(line) for line in gate_lines(3)])
    publish_store(str(folder / "store.db"), folder / "published", key.verifier())


@pytest.fixture
def published(built_once: BuiltOnce) -> tuple[str, str]:
    """(the publication's folder, the writer's verifier key)."""
    folder = built_once("serve-tiles", _build)
    return str(folder / "published"), load_signer_key(str(folder / "writer.key")).verifier().format()


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (("--db", "x.db"), "give one of them"),
        (("--origin", ""), "--tiles needs the log's name"),
        (("--audit-report", "r.json"), "serve --tiles takes none"),
    ],
)
def test_usage_errors_are_one_line_exit_2(run_cli: Run, published: tuple[str, str], extra: tuple[str, ...],
                                          said: str) -> None:
    folder, key = published
    argv = ["serve", "--tiles", folder, "--trusted-key", key, "--origin", ORIGIN, *extra]
    status, out, err = run_cli(*argv)
    assert (status, out) == (2, "")
    assert said in err
    assert len(err.strip().splitlines()) == 1


def test_no_trusted_key_and_origin_without_tiles_are_usage_errors(run_cli: Run, published: tuple[str, str]) -> None:
    folder, _ = published
    status, _, err = run_cli("serve", "--tiles", folder, "--origin", ORIGIN)
    assert status == 2
    assert "--tiles needs the writer's verifier key" in err
    status, _, err = run_cli("serve", "--origin", ORIGIN)
    assert status == 2
    assert "give --tiles LOCATION" in err


def test_an_untrusted_or_foreign_checkpoint_is_refused_before_serving(
    run_cli: Run, published: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, key = published
    started: list[Any] = []
    monkeypatch.setattr(web_server.uvicorn, "Server", lambda config: started.append(config))
    other = generate_signer("writer").verifier().format()
    status, _, err = run_cli("serve", "--tiles", folder, "--trusted-key", other, "--origin", ORIGIN)
    assert status == 2
    assert "untrusted checkpoint" in err
    status, _, err = run_cli("serve", "--tiles", folder, "--trusted-key", key, "--origin", "example.org/other")
    assert status == 2
    assert "checkpoint of another log" in err
    assert started == []


def test_a_trusted_publication_is_served(run_cli: Run, published: tuple[str, str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    folder, key = published
    served: list[Any] = []

    class Server:
        def __init__(self, config: Any) -> None:
            served.append(config)

        def run(self, sockets: Any) -> None:
            return None

    monkeypatch.setattr(web_server.uvicorn, "Server", Server)
    status, _, err = run_cli("serve", "--tiles", folder, "--trusted-key", key, "--origin", ORIGIN, "--port", "0")
    assert status == 0, err
    assert f"serving {folder}/ read-only at http://127.0.0.1:" in err
    assert len(served) == 1
