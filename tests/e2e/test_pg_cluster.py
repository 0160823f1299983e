"""The throwaway PostgreSQL cluster's helper removes only what it made."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import pg_cluster


def test_stop_never_removes_the_current_directory_or_a_folder_it_did_not_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`stop ""` is `stop .`: it once removed a whole working copy. It is refused; a folder without a cluster's
    `data` is left as it is unless empty (the folder of a start that failed early)."""
    monkeypatch.chdir(tmp_path)
    kept = tmp_path / "work.txt"
    kept.write_text("precious")
    for given in ("", ".", str(tmp_path)):
        with pytest.raises(SystemExit, match="refusing to remove"):
            pg_cluster.stop(Path(given))
    assert kept.read_text() == "precious"
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    pg_cluster.stop(other)
    assert (other / "notes.txt").read_text() == "mine"
    empty = tmp_path / "empty"
    empty.mkdir()
    pg_cluster.stop(empty)
    assert not empty.exists()
