"""docs/operations.md "Witness policies", run as written: the keys and the policy file made by its first block, four
`witness serve --policy` processes, `record --policy`, the auditor's first night and two nightly `audit --since
--policy` runs, and `verify-proof --policy` (hosts and ports made local, nothing else changed). The four witnesses
start together; the rows of later nights and the receipt the last command verifies are made in this process."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from compute_budget.core.log.witness_policy_file import parse_policy
from tests.backends import query
from tests.conftest import SetUp, gate_lines
from tests.e2e.test_docs import OPERATIONS, commands, fenced, shell
from tests.witnessing import free_port, witness_processes

NAMES = ("ours1", "ours2", "public", "archive")


@pytest.mark.slow
def test_the_witness_policy_recipe_runs_as_written(tmp_path: Path, set_up: SetUp) -> None:
    """The policy the recipe writes parses to "both of ours and the public one, the archive optional"; four
    witnesses serve the log the policy names; the writer's record reaches the quorum and names the optional
    archive; the first night's audit, with the policy's log key as the only writer key, is clean and keeps
    witnessed.note. Two nightly runs follow, rows recorded before each, the policy made stricter before the first of
    them (the archive counted): each is clean and moves witnessed.note.head with witnessed.note (spec 11.5). A
    receipt verifies with nothing but the policy file."""
    setup, recipe = fenced("sh", "Witness policies", doc=OPERATIONS)
    done = shell(setup, tmp_path)
    assert done.returncode == 0, done.stderr
    policy = parse_policy((tmp_path / "policy.txt").read_bytes())
    assert policy.quorum_in_words() == "all of ours, public (ours = all of ours1, ours2)"
    assert policy.optional_witnesses() == ("archive",)
    serve, record, first_night, nightly, verify = commands(recipe)
    assert "mv witnessed.next.head witnessed.note.head && mv witnessed.next witnessed.note" in nightly
    ports = {name: free_port() for name in NAMES}
    text = (tmp_path / "policy.txt").read_text()
    for name, port in ports.items():
        text = text.replace(f"http://{name}.internal:7380", f"http://127.0.0.1:{port}")
    (tmp_path / "policy.txt").write_text(text)
    head = tmp_path / "witnessed.note.head"

    def local(command: str) -> str:
        for name, port in ports.items():
            command = command.replace(f"http://{name}.internal:7380", f"http://127.0.0.1:{port}")
        return command

    served = [(serve.replace("ours1", name).replace("/var/lib/witness/", "")
               .replace(f"--host 10.0.0.3 --allow-host {name}.internal", f"--host 127.0.0.1 --port {port}"), port)
              for name, port in ports.items()]
    with witness_processes(served, tmp_path):
        (tmp_path / "gates.jsonl").write_text("\n".join(gate_lines(5, prefix="night1")) + "\n")
        done = shell(local(record), tmp_path)
        assert done.returncode == 0, done.stderr
        assert "cosigned by 4/4 witnesses" in done.stderr
        assert ("witness policy: quorum met (all of ours, public (ours = all of ours1, ours2)); counted: ours1, ours2, "
                "public; optional, not counted: archive") in done.stderr
        done = shell(local(first_night), tmp_path)
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert "policy        quorum all of ours, public" in done.stdout
        assert "attested      through seq 5" in done.stdout  # the policy's log line is the trusted writer key
        assert (tmp_path / "witnessed.note").read_text().split("\n")[1] == "5"
        sizes = [int(head.read_text().split("\n")[1])]
        for night, rows in ((2, 3), (3, 4)):
            if night == 2:  # a stricter policy: the archive now counts too
                stricter = text.replace("group both all ours public", "group both all ours public archive")
                assert stricter != text
                (tmp_path / "policy.txt").write_text(stricter)
            (tmp_path / "gates.jsonl").write_text("\n".join(gate_lines(rows, prefix=f"night{night}")) + "\n")
            set_up(tmp_path, *shlex.split(local(record))[1:])
            done = shell(local(nightly), tmp_path)
            assert done.returncode == 0, (night, done.stdout, done.stderr)
            assert f"rows checked  {rows} (incremental" in done.stdout
            assert "policy        quorum all of ours, public, archive" in done.stdout
            assert not list(tmp_path.glob("witnessed.next*"))
            sizes.append(int(head.read_text().split("\n")[1]))
            assert (tmp_path / "witnessed.note").read_text().split("\n")[1] == str(sizes[-1])
        assert sizes == [5, 8, 12]  # witnessed.note.head moved with witnessed.note every night
    budget_id = str(query(str(tmp_path / "compute_budget.db"),
                          "SELECT budget_id FROM compute_budget_decisions WHERE seq = 3")[0][0])
    (tmp_path / "policy.txt").write_text(text)
    set_up(tmp_path, "prove", budget_id, "--policy", "policy.txt", stdout="receipt.json")
    done = shell(verify, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"valid: budget_id {budget_id}, seq 3")
    assert "witnessed: 3 cosignature(s) toward the quorum all of ours, public" in done.stdout
    assert "(optional: archive)" in done.stdout
