"""The day-two recipe (docs/operations.md, "Day two: the log changes, the auditor stays right") runs as written:
an operator who publishes every night, rotates the writer key and adds a witness policy, and an auditor in another
folder, with no database, who audits the publication over loopback HTTP every night. Every night is clean; the
night the auditor has not yet been told of the rotation is the documented red one; then a tampered tile, a forged
size and a forged handover, on copies of the publication, are each caught with their kind and exit 1. Every
command of the blocks runs through the shell as written, with the recipe's hosts, paths and placeholders made
this test's; a repeated night's operator steps run in this process (`set_up`)."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from compute_budget.core.log.note import add_signature, generate_signer, sign_note
from tests.conftest import SetUp, gate_lines
from tests.e2e.test_docs import OPERATIONS, commands, fenced, shell
from tests.publications import served_folder
from tests.witnessing import free_port, witness_process

Run = Callable[..., tuple[int, str, str]]
SECTION = "Day two: the log changes, the auditor stays right"
URL = "https://logs.example.org/budget/"


class DayTwo:
    """The two roles' folders, the publication's URL, the witness's port, and the recipe's blocks made local."""

    def __init__(self, root: Path, url: str, port: int) -> None:
        self.operator, self.auditor = root / "operator", root / "auditor"
        self.operator.mkdir()
        self.auditor.mkdir()
        self.public, self.url, self.port = self.operator / "public", url, port
        self.values: dict[str, str] = {}  # what the operator tells the auditor, out of band

    def local(self, text: str, url: str | None = None) -> str:
        """`text` with the recipe's hosts and paths made this test's."""
        return (text.replace("/srv/www/budget", str(self.public)).replace(URL, url or self.url)
                .replace("/var/lib/auditor/", f"{self.auditor}/").replace("/var/log/auditor/", f"{self.auditor}/")
                .replace("/etc/auditor/", f"{self.auditor}/").replace("/var/lib/witness/", "")
                .replace("witness.example.org:7380", f"127.0.0.1:{self.port}")
                .replace("--host 10.0.0.2 --allow-host witness.example.org", f"--host 127.0.0.1 --port {self.port}"))

    def told(self, lines: list[str]) -> list[str]:
        """The auditor's assignment lines with the values the operator gave (a placeholder left is a failure)."""
        filled = []
        for line in lines:
            name = line.split("=", 1)[0]
            filled.append(f"{name}='{self.values[name]}'" if name in self.values else line)
        return filled

    def gates(self, night: int) -> None:
        (self.operator / "gates.jsonl").write_text("\n".join(gate_lines(5, prefix=f"night{night}")) + "\n")

    def operate(self, block: str) -> str:
        done = shell(self.local(block), self.operator)
        assert done.returncode == 0, (block, done.stderr)
        return done.stderr

    def audit(self, lines: list[str], url: str | None = None) -> tuple[int, dict, str]:  # type: ignore[type-arg]
        """The auditor's lines run in the auditor's folder: (exit, tonight's JSON report, stdout and stderr)."""
        report = self.auditor / "audit.json"
        report.unlink(missing_ok=True)
        done = shell(self.local("\n".join(lines), url), self.auditor)
        said = json.loads(report.read_text()) if report.exists() else {}
        return done.returncode, said, done.stdout + done.stderr

    def kept(self) -> str:
        return (self.auditor / "published.note").read_text() + (self.auditor / "published.note.head").read_text()


def _kinds(report: dict) -> list[str]:  # type: ignore[type-arg]
    return [finding["kind"] for finding in report["findings"]]


def _split_serve(block: str) -> tuple[str, str, str]:
    """(what runs before the witness service, its command, what runs after it) of the witness block."""
    found = re.search(r"^compute-budget witness serve (?:.*\\\n)*.*\n", block, flags=re.MULTILINE)
    assert found is not None, block
    return block[: found.start()], found.group(0), block[found.end():]


@pytest.mark.slow
def test_the_day_two_recipe_runs_clean_every_night_and_each_forgery_is_found(
    tmp_path: Path, set_up: SetUp, run_cli: Run
) -> None:
    op_first, aud_first, op_rotate, aud_rotate, op_witness, aud_witness = fenced("sh", SECTION, doc=OPERATIONS)
    served = tmp_path / "served"
    served.mkdir()
    with served_folder(served) as root_url:
        day = DayTwo(tmp_path, root_url + "public/", free_port())
        (served / "public").symlink_to(day.public, target_is_directory=True)
        _day_one(day, op_first, aud_first, set_up)
        _rotation(day, op_rotate, aud_first, aud_rotate, set_up, run_cli)
        witness_before, serve, witness_after = _split_serve(op_witness)
        day.gates(4)
        day.operate(witness_before)
        with witness_process(day.local(serve).strip(), day.operator, day.port):
            nightly = _witness_added(day, witness_after, aud_first + aud_rotate, aud_witness)
            _forgeries(day, served, root_url, nightly)
    assert not [path.name for path in day.auditor.iterdir() if path.suffix == ".db"]  # the auditor has no database


def _assignments(block: str) -> list[str]:
    return [line for line in commands(block) if re.match(r"^[A-Z]+=", line)]


def _day_one(day: DayTwo, op_first: str, aud_first: str, set_up: SetUp) -> None:
    """Night 1: the operator's block, the auditor's first night; night 2: rows, a publish, the nightly line."""
    day.gates(1)
    day.operate(op_first)
    day.values["WRITER"] = (day.operator / "writer.pub").read_text().strip()
    assigned = day.told(_assignments(aud_first))
    first, nightly = [line for line in commands(aud_first) if line.startswith("compute-budget")]
    status, _, said = day.audit([*assigned, first])
    assert status == 0, said
    assert (day.auditor / "published.note").read_text() == (day.public / "checkpoint").read_text()
    day.gates(2)
    set_up(day.operator, "record", "gates.jsonl", "--db", "store.db", "--signing-key", "writer.key")
    set_up(day.operator, "publish", str(day.public), "--db", "store.db", "--trusted-key", "writer.pub")
    status, report, said = day.audit([*assigned, nightly])
    assert (status, report["rows_checked"]) == (0, 5), said
    assert (day.auditor / "published.note").read_text().split("\n")[1] == "10"


def _rotation(day: DayTwo, op_rotate: str, aud_first: str, aud_rotate: str, set_up: SetUp, run_cli: Run) -> None:
    """Night 3: the operator rotates; the unchanged publish line is the documented red night of the operator; the
    block's nightly lines record with the new key and publish with the printed arguments. The auditor's unchanged
    line is the documented red night (the kept checkpoint stays); the line with the new key and --retired is
    clean."""
    day.gates(3)
    once = commands(op_rotate)[:2]
    assert [line.split()[1] for line in once] == ["keygen", "rotate"]
    said = day.operate("\n".join(once))
    set_up(day.operator, "record", "gates.jsonl", "--db", "store.db", "--signing-key", "writer-2.key")
    new, old = (day.operator / "writer-2.pub").read_text().strip(), day.values["WRITER"]
    status, out, _ = run_cli("publish", str(day.public), "--db", "store.db", "--trusted-key", "writer.pub")
    assert status == 1
    # said to the operator who rotated: the arguments rotate printed, not "adopt the rows" nor "ask the operator"
    assert (f"give publish the arguments `rotate` printed, --trusted-key <the new verifier key, "
            f"{'+'.join(new.split('+')[:2])}> --retired {old}@10") in out
    assert "unattested_rows" not in out
    assert "adopt" not in out
    day.operate("\n".join(commands(op_rotate)[2:]))  # the new key's record finds tonight's rows already there
    assert f"--trusted-key {new} --retired {old}@10" in said  # what the block's publish line is given
    assert (day.public / "handover" / "10" / old.split("+")[1]).exists()
    kept = day.kept()
    assigned = day.told(_assignments(aud_first))
    status, report, out = day.audit([*assigned, commands(aud_first)[-1]])
    assert (status, _kinds(report)) == (1, ["bad_signature"]), out
    assert f"(key ID {new.split('+')[1]}), unverified" in report["findings"][0]["detail"]
    assert (f"obtain the new verifier key from the log's operator out of band, then add --trusted-key <that key> "
            f"--retired {old}@10") in report["findings"][0]["detail"]  # the handover the --since size finds
    assert new not in out  # never a key it was not given
    assert day.kept() == kept
    day.values.update(NEW=new, H="10")
    status, report, out = day.audit([*assigned, *day.told(commands(aud_rotate))])
    assert (status, report["rows_checked"]) == (0, 5), out
    assert day.kept() != kept


def _witness_added(day: DayTwo, witness_after: str, auditor_before: str, aud_witness: str) -> str:
    """Night 4: the operator's nightly lines with the policy, the auditor's with the policy and the witness's URL;
    night 5: the same lines again (the kept checkpoint is now a witnessed one). Returns the auditor's lines."""
    shutil.copy(day.operator / "policy.txt", day.auditor / "policy.txt")  # from the operator, out of band
    witness = (day.operator / "witness.pub").read_text().strip()
    day.values["WITNESS"] = f"http://127.0.0.1:{day.port}={witness}"
    assigned = day.told([*_assignments(auditor_before), *_assignments(aud_witness)])
    nightly = [line for line in commands(aud_witness) if line.startswith("compute-budget")]
    for night in (4, 5):
        if night == 5:
            day.gates(5)
        said = day.operate(witness_after)
        assert "quorum met" in said
        assert witness.split("+")[0] in (day.public / "checkpoint").read_text()  # the quorum's cosignature
        status, report, out = day.audit([*assigned, *nightly])
        assert (status, report["rows_checked"], report["witnessed_size"]) == (0, 5, 5 * night), out
    return "\n".join([*assigned, *nightly])


def _forgeries(day: DayTwo, served: Path, root_url: str, nightly: str) -> None:
    """Copies of the publication, each served beside it and audited with the auditor's last nightly lines."""
    size = int((day.public / "checkpoint").read_text().split("\n")[1])
    old_id = day.values["WRITER"].split("+")[1]
    kept = day.kept()

    def tile(folder: Path) -> None:
        path = folder / "tile" / "0" / "000.p" / str(size)
        data = bytearray(path.read_bytes())
        data[40] ^= 1
        path.write_bytes(bytes(data))

    def size_forged(folder: Path) -> None:
        lines = (folder / "checkpoint").read_text().split("\n")
        lines[1] = str(size + 1)
        (folder / "checkpoint").write_text("\n".join(lines))

    def handover(folder: Path) -> None:
        path = folder / "handover" / "10" / old_id
        # The honest handover's text, signed by two keys of the forger's, named as the log's writers are.
        body = path.read_text().split("\n\n")[0] + "\n"
        forgers = [generate_signer("example.org/budget-log") for _ in range(2)]
        path.write_text(add_signature(sign_note(body, forgers[0]), forgers[1]))

    new = f"example.org/budget-log+{day.values['NEW'].split('+')[1]}"
    cases = [
        (tile, ["published_mismatch"], f"tile/0/000.p/{size} was edited"),
        # the witness saw another tree at that size too: a consequence, said after the cause
        (size_forged, ["bad_signature", "checkpoint_mismatch"],
         f"the published checkpoint carries a signature by {new} that does not verify: no tile was read"),
        # spec 11.7.3: a published handover whose signatures do not verify is skipped (bad_signature), so the
        # retirement has none (handover missing)
        (handover, ["bad_signature", "checkpoint_mismatch"], f"the published handover/10/{old_id}: it carries no "
                                                             "verifying signature"),
    ]
    for forge, kinds, detail in cases:
        copy = served / forge.__name__
        shutil.copytree(day.public, copy)
        forge(copy)
        status, report, out = day.audit([nightly], url=f"{root_url}{forge.__name__}/")
        assert (status, _kinds(report)) == (1, kinds), (forge.__name__, out)
        assert report["findings"][0]["detail"].startswith(detail), report["findings"][0]
        if forge is handover:  # the file is there: no *valid* handover, its cause named
            assert f"holds no valid handover/10/{old_id} (the file there does not verify" in \
                report["findings"][1]["detail"]
        assert day.kept() == kept  # a red night keeps last night's checkpoint
