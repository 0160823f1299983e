"""The docs cannot rot: every Python block of the README, of docs/*.md and of docs/design/*.md, the quick start,
the command line's shell transcript, the nightly recipe (three nights), the PostgreSQL section and the keys recipe
are run as they stand, in temporary folders (issues 11 and 29)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.backends import query, tamper
from tests.conftest import REPO_ROOT, SetUp, gate_lines
from tests.witnessing import ORIGIN, WITNESS_KEY, WRITER_KEY, Served

# The README, docs/*.md, and the design's pages under docs/design/.
DOC_PATHS = ["README.md", *sorted(str(path.relative_to(REPO_ROOT)) for folder in ("docs", "docs/design")
                                  for path in (REPO_ROOT / folder).glob("*.md"))]
DOCS = {name: (REPO_ROOT / name).read_text(encoding="utf-8") for name in DOC_PATHS}
README = DOCS["README.md"]
OPERATIONS = "docs/operations.md"
BIN = str(Path(sys.executable).parent)  # where this environment's compute-budget script is installed


# The labels that name one language: a block under any of them is found by `fenced` as that language, so it is
# counted by the guards below and run by the tests that run that language's blocks.
SAME_LANGUAGE = {"sh": ("sh", "bash", "shell", "console"), "python": ("python", "py")}
# Blocks shown, not run, each named with its reason; a `text` block not named here fails the guard below.
NOT_RUN = {
    ("docs/operations.md", "Publishing the log", "text"): "AWS CLI uploads to the reader's bucket: no network here",
}
# Every label a doc may use: the runnable ones above, and what the tests read as data or is shown as a format.
KNOWN_LABELS = {*SAME_LANGUAGE["sh"], *SAME_LANGUAGE["python"], "", "text", "json", "sql", "cron", "ini", "yaml"}


def blocks_in(text: str, language: str) -> list[str]:
    """The text of every ```language block of `text` (under any label `SAME_LANGUAGE` gives it), in order."""
    labels = "|".join(re.escape(label) for label in SAME_LANGUAGE.get(language, (language,)))
    return re.findall(rf"^```(?:{labels})\n(.*?)^```$", text, flags=re.DOTALL | re.MULTILINE)


def fenced(language: str, section: str | None = None, doc: str = "README.md") -> list[str]:
    """The text of every ```language block of `doc` (of one `## section`, when given), in order."""
    text = DOCS[doc]
    if section is not None:
        start = text.index(f"\n## {section}\n")
        end = text.find("\n## ", start + 1)
        text = text[start : end if end != -1 else None]
    return blocks_in(text, language)


def commands(block: str) -> list[str]:
    """The commands of a shell block: comments and blank lines dropped, backslash continuations joined."""
    joined = re.sub(r"\\\n\s*", "", block)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def shell(command: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run a command or a whole block with bash under `set -euo pipefail` (so a failing step anywhere fails the
    block, not only its last command), with this environment's compute-budget first on PATH and no
    COMPUTE_BUDGET_DB unless given."""
    environment = {key: value for key, value in os.environ.items() if key != "COMPUTE_BUDGET_DB"}
    environment["PATH"] = BIN + os.pathsep + environment.get("PATH", "")
    environment.update(env)
    return subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + command], cwd=cwd, env=environment, capture_output=True, text=True,
        check=False, timeout=300,
    )


def junit_counts(path: Path) -> tuple[str | None, str | None]:
    """(failures, errors) of a JUnit report's testsuite: both are read, an error is no pass."""
    suite = ElementTree.parse(path).getroot().find("testsuite")
    assert suite is not None, path
    return suite.get("failures"), suite.get("errors")


@pytest.mark.slow
def test_shell_fails_a_block_whose_middle_step_fails(tmp_path: Path) -> None:
    """The runner above cannot pass a block that only ends well (the defect issue 18 found)."""
    assert shell("false\ntrue", tmp_path).returncode != 0
    assert shell("false | true", tmp_path).returncode != 0
    assert shell("echo $UNSET_IN_THIS_TEST", tmp_path).returncode != 0
    assert shell("true\ntrue", tmp_path).returncode == 0


def with_examples(folder: Path) -> Path:
    """`folder` holding a copy of the repository's examples/, as the README's commands expect."""
    shutil.copytree(REPO_ROOT / "examples", folder / "examples")
    return folder


# -- Python ---------------------------------------------------------------------------------------------------


PYTHON_BLOCKS = [(doc, index, block) for doc in DOC_PATHS for index, block in enumerate(fenced("python", doc=doc))]


def _prints_the_count_and_the_proof(stdout: str) -> None:
    assert stdout.splitlines()[-1] == "True 499"
    assert stdout.splitlines()[0].endswith(" 10")


def _prints_the_reads(stdout: str) -> None:
    assert stdout.splitlines()[:5] == ["0 2 True", "1 1 False", "3 3 True", "2 ('residual_ids',)", "1 True"]
    assert stdout.splitlines()[5:7] == ["c2sp.org/tlog-proof@v1", "3"]  # the receipt, and the note flush() signed
    assert "was closed" in stdout


def _prints_the_seal(stdout: str) -> None:
    assert stdout.splitlines() == ["True True True"]


def _prints_the_policy(stdout: str) -> None:
    assert stdout.splitlines() == ["3 ['unwitnessed_rows'] 1 of a, b"]


def _prints_the_interval(stdout: str) -> None:
    assert stdout.splitlines() == ["c2sp.org/tlog-proof@v1 5 None []", "True 5"]


# The values the comments of these blocks promise (README: two; python.md: two signing, one interval), checked on
# the one run of each block below: a block is started once, not once to run and once more to read its output.
PROMISES = dict(zip(
    [*fenced("python"), *fenced("python", "Signing, proving, verifying", doc="docs/python.md"),
     *fenced("python", "The checkpoint interval", doc="docs/python.md")],
    [_prints_the_count_and_the_proof, _prints_the_reads, _prints_the_seal, _prints_the_policy, _prints_the_interval],
    strict=False,
))


def test_the_docs_have_python_blocks() -> None:
    """There is something to run in the README and beyond it (a renamed fence would otherwise make the test below
    vacuous)."""
    assert len(fenced("python")) >= 2
    assert {doc for doc, _, _ in PYTHON_BLOCKS} >= {"README.md", "docs/python.md", "docs/hashing.md"}


@pytest.mark.slow
@pytest.mark.parametrize(("doc", "index", "block"), PYTHON_BLOCKS,
                         ids=[f"{doc}-{index}" for doc, index, _ in PYTHON_BLOCKS])
def test_every_python_block_runs(doc: str, index: int, block: str, tmp_path: Path) -> None:
    """Each python block of every doc runs as it stands, in an empty folder, in a fresh interpreter, and prints
    what its comments promise (`PROMISES`)."""
    done = subprocess.run(
        [sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, check=False, timeout=300,
    )
    assert done.returncode == 0, (doc, index, done.stderr)
    assert "Traceback" not in done.stderr
    if block in PROMISES:
        PROMISES[block](done.stdout)


def test_the_python_blocks_print_what_their_comments_say() -> None:
    """The values the comments promise are the values printed: the README's two blocks, python.md's two signing
    blocks and its interval block each carry their promise, which `test_every_python_block_runs` checks on the
    block's run."""
    first_block, second_block = fenced("python")
    seal_block, policy_block = fenced("python", "Signing, proving, verifying", doc="docs/python.md")
    (interval_block,) = fenced("python", "The checkpoint interval", doc="docs/python.md")
    promised = {first_block: _prints_the_count_and_the_proof, second_block: _prints_the_reads,
                seal_block: _prints_the_seal, policy_block: _prints_the_policy, interval_block: _prints_the_interval}
    assert promised == PROMISES
    assert {block for _, _, block in PYTHON_BLOCKS} >= set(PROMISES)


# -- shell ----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_quick_start_runs(tmp_path: Path) -> None:
    """The quick start's main line (without making a virtual environment: this one is installed) records the
    examples and audits them clean."""
    line = next(command for command in commands(fenced("sh", "Quick start")[0]) if "compute-budget record" in command)
    steps = [step.strip() for step in line.split("&&")]
    steps = [step.replace(".venv/bin/", "") for step in steps if not step.startswith("python3 -m venv")
             and "pip install" not in step]
    assert steps == ["compute-budget record examples/gates.jsonl", "compute-budget audit"]
    done = shell(" && ".join(steps), with_examples(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "recorded 8 gates: 8 new, 0 already present" in done.stdout
    assert "CLEAN" in done.stdout


def test_ci_runs_the_readme_test_command_in_a_fresh_environment() -> None:
    """.ci/run's test step is the README's test command, character for character; nothing touches .venv before it
    (an existing .venv stops the run instead of being reused), and after it only the lint steps run, from that
    environment with ruff added (every other tool they need is in the test extra)."""
    readme_test_command = commands(fenced("sh", "Quick start")[0])[1]
    assert "'.[test]'" in readme_test_command
    script = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    lines = [line.strip() for line in script.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert lines.count(readme_test_command) == 1
    at = lines.index(readme_test_command)
    before, after = "\n".join(lines[:at]), lines[at + 1 :]
    assert ".venv/" not in before  # nothing touches .venv before the README's command
    assert 'if [ -e .venv ]; then' in before
    assert [line for line in after if not line.startswith("echo ")] == [
        ".venv/bin/python -m pip install -q 'ruff>=0.5'",
        ".venv/bin/ruff check src tests benchmarks",
        ".venv/bin/lint-imports",
        ".venv/bin/mypy --strict src",
    ]


def test_the_readme_stays_under_250_lines() -> None:
    """Issue 29: the README is a page a newcomer finishes; the reference lives in docs/."""
    assert len(README.splitlines()) < 250


def test_the_readme_and_operations_give_the_same_nightly_commands() -> None:
    """The nightly recipe is in both places (the README's short version, operations.md's whole section), and the
    test below runs the README's: both must be the same commands."""
    assert fenced("sh", "Nightly audit") == fenced("sh", "Nightly audit", doc=OPERATIONS)


# One name per file across the docs: a pattern of a name no doc may use, and the name the docs use instead.
OTHER_NAMES = {
    r"(?<![\w.])witness\.(note|next)\b": "witnessed.note",  # the note the nightly audit keeps
    r"shared/vectors/": "tests/vectors/",  # the golden vectors, as this repository holds them
}


def test_every_doc_names_each_file_one_way() -> None:
    """One name per file across the docs: the note the nightly audit keeps is `witnessed.note`, the golden vectors
    are under `tests/vectors/`."""
    for pattern, name in OTHER_NAMES.items():
        for doc, text in DOCS.items():
            assert not re.search(pattern, text), (doc, pattern, name)
        assert any(name in text for text in DOCS.values()), name
    assert "witnessed.note" in DOCS[OPERATIONS]


# The shell blocks the tests of this file (and the runbook tests of tests/store/test_repairs.py, the Witnessing test of
# tests/auditor/test_witness_rules.py) run, by doc and section: a block added anywhere else has no test yet.
SHELL_BLOCKS_RUN = {
    ("README.md", "Quick start"): 1, ("README.md", "Nightly audit"): 1,
    ("docs/cli.md", "Common to every command"): 1,
    ("docs/incident.md", "After a repair: `migrate` restored the guard"): 2,
    ("docs/incident.md", "Salvage: `copy --through`"): 1,
    ("docs/incident.md", "A writer key leaked"): 3,  # tests/e2e/test_key_runbooks.py
    ("docs/operations.md", "Nightly audit"): 1, ("docs/operations.md", "PostgreSQL"): 2,
    ("docs/operations.md", "Auditing a publication with no database credentials"): 1,  # tests/cli/test_audit_tiles.py
    ("docs/operations.md", "Day two: the log changes, the auditor stays right"): 6,  # tests/e2e/test_day_two.py
    ("docs/operations.md", "Keys and witnesses"): 2, ("docs/operations.md", "Witnessing"): 1,
    ("docs/operations.md", "Publishing the log"): 1,  # tests/cli/test_publish.py
    ("docs/operations.md", "Rotating a writer key"): 1,  # tests/e2e/test_key_runbooks.py
    ("docs/operations.md", "Witness policies"): 2,  # tests/e2e/test_witness_policy_recipe.py
    ("docs/upgrading.md", "0003: the seal (spec section 8)"): 1,
}


def test_every_shell_block_of_the_docs_is_run_by_a_test() -> None:
    """Every shell block (```sh, bash, shell or console, and the Witnessing recipe's bare one) of the README and
    docs/*.md is one a test runs."""
    found: dict[tuple[str, str], int] = {}
    for doc in DOC_PATHS:
        for section in re.findall(r"^## (.*)$", DOCS[doc], flags=re.MULTILINE):
            count = len(fenced("sh", section, doc=doc))
            if (doc, section) == ("docs/operations.md", "Witnessing"):
                count += len(fenced("", section, doc=doc))
            if count:
                found[(doc, section)] = count
    assert found == SHELL_BLOCKS_RUN


def _slug(heading: str) -> str:
    """The anchor GitHub makes of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_between_the_docs_resolves() -> None:
    """A relative link names a file that exists and, with `#anchor`, a heading in it: moving a section cannot
    leave a link pointing nowhere."""
    for doc in [*DOC_PATHS, "benchmarks/README.md"]:
        text = (REPO_ROOT / doc).read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if "://" in target:
                continue
            path, _, anchor = target.partition("#")
            file = (REPO_ROOT / doc).parent / path if path else REPO_ROOT / doc
            assert file.exists(), (doc, target)
            if anchor:
                headings = re.findall(r"^#+ (.*)$", file.read_text(encoding="utf-8"), flags=re.MULTILINE)
                assert anchor in {_slug(heading) for heading in headings}, (doc, target)


@pytest.mark.slow
def test_the_shell_transcript_matches(tmp_path: Path) -> None:
    """Each `$ command` of the transcript gives the output shown ("…" stands for any text)."""
    block = fenced("sh", "Common to every command", doc="docs/cli.md")[0]
    folder = with_examples(tmp_path)
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
    assert len(steps) >= 3
    for command, expected in steps:
        done = shell(command, folder)
        assert done.returncode == 0, (command, done.stderr)
        pattern = ".*".join(re.escape(piece) for piece in "\n".join(expected).split("…"))
        assert re.fullmatch(pattern, done.stdout.rstrip("\n"), flags=re.DOTALL), (command, expected, done.stdout)


def _recipe() -> dict[str, str]:
    """The nightly recipe's commands: the first-night step, the README's nightly command, and (from
    docs/operations.md) the cron lines, the systemd unit's command and folder, the CI step."""
    first_night, nightly = commands(fenced("sh", "Nightly audit")[0])
    cron = {}
    for line in fenced("cron", "Nightly audit", doc=OPERATIONS)[0].splitlines():
        fields = line.split(None, 6)
        cron["cron_weekday" if fields[4] == "1-6" else "cron_sunday"] = fields[6]
    unit = fenced("ini", "Nightly audit", doc=OPERATIONS)[0]
    executable = re.search(r"^ExecStart=/bin/sh -c '(.*)'$", unit, flags=re.MULTILINE)
    folder = re.search(r"^WorkingDirectory=(.*)$", unit, flags=re.MULTILINE)
    ci = re.search(r"- run: (compute-budget audit .*)$", fenced("yaml", "Nightly audit", doc=OPERATIONS)[0],
                   flags=re.MULTILINE)
    assert executable is not None
    assert folder is not None
    assert ci is not None
    return {"first_night": first_night, "nightly": nightly, **cron, "systemd": executable.group(1),
            "systemd_folder": folder.group(1), "ci": ci.group(1)}


@pytest.mark.slow
def test_the_nightly_recipe_for_three_nights(tmp_path: Path, set_up: SetUp, served: Served, writer: Path) -> None:
    """The README's recipe from its first night: the one-time first-night step, then three clean nights (by the
    cron line, the systemd unit and the shell block) with rows appended in between, the writer taking its key and a
    witness policy before the second (its unsigned rows adopted, spec 11.5): the recipe gives no key, so it keeps
    checkpoint.json alone and leaves no FILE.head behind. A fourth night finds the row tampered with that day (exit
    1, checkpoint kept). A checkpoint deleted later is never a silent pass. The day's gates are recorded in this
    process: only the recipe's own commands run through the shell."""
    recipe = _recipe()
    practice, logs = tmp_path / "practice", tmp_path / "log"
    practice.mkdir()
    logs.mkdir()

    def local(command: str) -> str:
        return command.replace("/var/lib/practice", str(practice)).replace("/var/log/compute-budget", str(logs))

    assert local(recipe["systemd_folder"]) == str(practice)
    database = practice / "compute_budget.db"
    checkpoint = practice / "checkpoint.json"
    policy = tmp_path / "policy.txt"
    policy.write_text(f"log {WRITER_KEY}\nwitness w1 {WITNESS_KEY} http://127.0.0.1:{served.port}\nquorum w1\n")

    def day(name: str, count: int, *signed: str) -> None:
        gates = tmp_path / f"{name}.jsonl"
        gates.write_text("\n".join(gate_lines(count, prefix=name)) + "\n")
        set_up(tmp_path, "record", str(gates), "--db", str(database), *signed)

    def seq_of(path: Path) -> int:
        return int(json.loads(path.read_text())["seq"])

    day("day0", 20, "--origin", ORIGIN)
    done = shell(local(recipe["first_night"]), tmp_path)  # the one-time step, by hand
    assert done.returncode == 0, done.stderr
    assert seq_of(checkpoint) == 20

    day("day1", 15)  # night 1: cron
    done = shell(recipe["cron_weekday"].replace("/var/lib/practice", str(practice)), tmp_path)
    assert done.returncode == 0, done.stderr
    assert seq_of(checkpoint) == 35
    assert junit_counts(practice / "audit.xml") == ("0", "0")

    # night 2: systemd, in its working folder; the writer now signs, and its witness policy cosigns
    day("day2", 15, "--signing-key", str(writer), "--adopt-unsigned", "35", "--policy", str(policy))
    assert query(str(database), "SELECT count(*) FROM compute_budget_cosignatures")[0][0] == 1  # cosigned at 50
    done = shell(recipe["systemd"], practice)
    assert done.returncode == 0, done.stderr
    assert seq_of(checkpoint) == 50
    done = shell(recipe["cron_sunday"].replace("/var/lib/practice", str(practice)), tmp_path)  # the weekly proof
    assert done.returncode == 0, done.stderr
    assert json.loads((practice / "audit-weekly.json").read_text())["clean"] is True
    done = shell(recipe["ci"], practice, COMPUTE_BUDGET_DB=str(database))
    assert done.returncode == 0, done.stderr

    day("day3", 10, "--signing-key", str(writer), "--policy", str(policy))  # night 3: the shell block
    done = shell(local(recipe["nightly"]), tmp_path)
    assert done.returncode == 0, done.stderr
    assert seq_of(checkpoint) == 60
    assert json.loads((logs / "audit.json").read_text())["rows_checked"] == 10
    assert not list(practice.glob("*.head"))  # no key given: no FILE.head written, none left behind

    day("day4", 5, "--signing-key", str(writer), "--policy", str(policy))  # night 4, after a row of the day was edited
    tamper(database, "UPDATE compute_budget_decisions SET max_steps = 99 WHERE seq = 62")
    done = shell(local(recipe["nightly"]), tmp_path)
    assert done.returncode == 1, done.stderr
    assert seq_of(checkpoint) == 60  # last good checkpoint kept
    assert not (practice / "checkpoint.next.json").exists()
    report = json.loads((logs / "audit.json").read_text())
    assert report["clean"] is False
    assert [finding["seq"] for finding in report["findings"] if finding["kind"] == "rederive_mismatch"] == [62]
    assert report["look_back"]["n"] == 7  # the recipe looks back: here the 60 rows below the checkpoint, a partial tile
    assert report["look_back"]["rows"] == 60
    failures, errors = junit_counts(logs / "audit.xml")
    assert failures != "0"
    assert errors == "0"

    checkpoint.unlink()  # a later night without its checkpoint: exit 2, and the report says why
    done = shell(recipe["cron_weekday"].replace("/var/lib/practice", str(practice)), tmp_path)
    assert done.returncode == 2
    assert "does not exist" in done.stderr
    error = ElementTree.parse(practice / "audit.xml").getroot().find("testsuite/testcase/error")
    assert error is not None
    assert "does not exist" in error.get("message", "")


# -- PostgreSQL -----------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.postgres
def test_the_postgresql_section_runs(pg_admin_url: str, tmp_path: Path, set_up: SetUp,
                                     run_cli: Callable[..., tuple[int, str, str]]) -> None:
    """On a throwaway server, every block run with `set -euo pipefail`: the section's roles and database, `copy`
    from SQLite, the auditor role given exactly what `compute-budget grants` prints (through psql, as the README
    says) auditing clean with a JUnit report of no failure and no error, and that role refused when it records.
    The store to copy is made, and the refusal checked, in this process: only the section's blocks run in a shell."""
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    admin = make_url(pg_admin_url)
    suffix = uuid.uuid4().hex[:10]
    names = {"practice": f"practice_{suffix}", "auditor": f"auditor_{suffix}"}
    superuser = admin.set(drivername="postgresql", database=names["practice"]).render_as_string(hide_password=False)

    def local(text: str) -> str:
        text = text.replace("db.example:5432", f"{admin.host}:{admin.port}")
        text = re.sub(r"(?<![-\w])(practice|auditor)\b", lambda match: names[match.group(1)], text)
        return text.replace(f"psql -U postgres -d {names['practice']}", f"psql '{superuser}'")

    def run_sql(block: str, database: str) -> None:
        engine = create_engine(admin.set(database=database), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                for statement in filter(None, (part.strip() for part in local(block).split(";"))):
                    connection.exec_driver_sql(statement)
        finally:
            engine.dispose()

    create, create_auditor = fenced("sql", "PostgreSQL", doc=OPERATIONS)
    writer, reader = fenced("sh", "PostgreSQL", doc=OPERATIONS)
    folder = with_examples(tmp_path)
    set_up(folder, "record", "examples/gates.jsonl")
    set_up(folder, "checkpoint", stdout="checkpoint.json")
    try:
        run_sql(create, str(admin.database))
        done = shell(local(writer), folder)
        assert done.returncode == 0, done.stderr
        assert "copied 8 rows" in done.stdout
        run_sql(create_auditor, names["practice"])
        assert f"psql '{superuser}'" in local(reader)
        done = shell(local(reader), folder)
        assert done.returncode == 0, done.stderr
        assert junit_counts(folder / "audit.xml") == ("0", "0")
        auditor_url = re.search(r"AUDITOR_DB=(\S+)", local(reader))
        assert auditor_url is not None
        status, _, refused = run_cli("record", str(folder / "examples" / "gates.jsonl"), "--db", auditor_url.group(1))
        assert status == 2
        assert f"role '{names['auditor']}' cannot append to table compute_budget_decisions" in refused
        assert len(refused.strip().splitlines()) == 1
    finally:
        cleanup = create_engine(admin, isolation_level="AUTOCOMMIT")
        with cleanup.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{names["practice"]}" WITH (FORCE)')
            for role in (names["auditor"], names["practice"]):
                connection.exec_driver_sql(f'DROP ROLE IF EXISTS "{role}"')
        cleanup.dispose()


# -- keys (docs/operations.md) --------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_keys_recipe_runs_for_three_nights(tmp_path: Path, set_up: SetUp) -> None:
    """The keys recipe as it stands, after the one first night by hand: the writer records signed, the nightly
    audit trusts the writer's key and cosigns with the auditor's, three nights with rows recorded between them, a
    witness added before the second (the writer records with `--witness`, the nightly gains `--witness-key`): every
    night is clean and moves witnessed.note.head with witnessed.note (spec 11.5). Then `consistency --auditor-key`
    checks the auditor's line, and the receipt of the example's first decision verifies with no database. The
    recipe's steps run through the shell; the first night, the rows between nights and the witness (in a thread),
    in this process."""
    from compute_budget.core.log.note import VerifierKey
    from tests.witnessing import WITNESS, WITNESS_KEY, witness_in_thread

    _, recipe = fenced("sh", "Keys and witnesses", doc=OPERATIONS)
    steps = commands(recipe)
    assert len(steps) == 7, steps
    writer_key, auditor_key, record, nightly, consistency, prove, verify = steps
    assert "--since witnessed.note" in nightly
    folder = with_examples(tmp_path)
    shutil.copy(folder / "examples" / "gates.jsonl", folder / "gates.jsonl")
    head = folder / "witnessed.note.head"

    def run(command: str) -> subprocess.CompletedProcess[str]:
        done = shell(command, folder)
        assert done.returncode == 0, (command, done.stderr)
        return done

    for command in (writer_key, auditor_key, record):
        run(command)
    set_up(folder, "audit", "--trusted-key", "writer.pub", "--save-checkpoint", "witnessed.note", "--cosign",
           "auditor.key")
    origin = (folder / "witnessed.note").read_text().split("\n")[0]
    logs = {origin: [VerifierKey.parse((folder / "writer.pub").read_text().strip())]}
    sizes = [int(head.read_text().split("\n")[1])]
    with witness_in_thread(tmp_path / "witness.db", WITNESS, logs) as witness:
        url = f"http://127.0.0.1:{witness.port}={WITNESS_KEY}"
        for night, rows in ((1, 3), (2, 4), (3, 2)):
            (folder / "gates.jsonl").write_text("\n".join(gate_lines(rows, prefix=f"night{night}")) + "\n")
            added = ("--witness", url) if night >= 2 else ()  # the witness is added before the second night
            set_up(folder, "record", "gates.jsonl", "--signing-key", "writer_prod.key", *added)
            kept = (folder / "witnessed.note").read_text()
            tonight = nightly if night == 1 else nightly.replace(
                " --save-checkpoint", f" --witness-key {WITNESS_KEY} --save-checkpoint")
            assert tonight != nightly or night == 1
            assert "CLEAN" in run(tonight).stdout
            assert (folder / "witnessed.note").read_text() != kept  # tonight's note replaced last night's
            assert not list(folder.glob("witnessed.next*"))
            sizes.append(int(head.read_text().split("\n")[1]))
            assert (folder / "witnessed.note").read_text().split("\n")[1] == str(sizes[-1])
    assert sizes == [8, 11, 15, 17]  # witnessed.note.head moved with witnessed.note every night
    assert f"\n\u2014 {WITNESS.name} " in (folder / "witnessed.note").read_text()  # the last nights' note is witnessed
    assert json.loads(run(consistency).stdout)["old_size"] == 17
    run(prove)
    assert run(verify).stdout.startswith("valid: budget_id 1640737b")


@pytest.mark.slow
def test_the_adoption_block_adopts_the_unsigned_rows(tmp_path: Path, set_up: SetUp,
                                                    run_cli: Callable[..., tuple[int, str, str]]) -> None:
    """`Adopting unsigned rows` as it stands: seven rows recorded without a key are listed, then adopted through
    the head by the writer's first signed append, and an audit trusting the writer then finds no unattested row.
    The rows and the key are made, and the audit run, in this process: the block alone runs in a shell."""
    adopt, _ = fenced("sh", "Keys and witnesses", doc=OPERATIONS)
    (tmp_path / "old.jsonl").write_text("\n".join(gate_lines(7, prefix="old")) + "\n")
    (tmp_path / "new.jsonl").write_text("\n".join(gate_lines(2, prefix="new")) + "\n")
    set_up(tmp_path, "record", "old.jsonl")
    set_up(tmp_path, "keygen", "writer/prod", stdout="writer.pub")
    done = shell(adopt, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "adopted 7 rows (seq 1..7)" in done.stderr
    assert "# stderr: adopted 7 rows (seq 1..7)" in adopt
    status, audited, _ = run_cli("audit", "--trusted-key", "writer.pub")
    assert status == 0, audited


# -- docs/incident.md and docs/upgrading.md -------------------------------------------------------------------


@pytest.mark.slow
def test_the_salvage_block_runs_with_its_placeholders_filled(tmp_path: Path, set_up: SetUp) -> None:
    """incident.md's `copy --through` block, S and NEW_VERIFIER_KEY filled in: rows 1..3 of a signed store salvaged
    into a new origin, adopted by the new key's first append, and the new log audits clean with its provenance.
    The keys and the damaged store are made in this process: the block alone runs in a shell."""
    (block,) = fenced("sh", "Salvage: `copy --through`", doc="docs/incident.md")
    filled = re.sub(r"\bS\b", "3", block).replace("NEW_VERIFIER_KEY", '"$(cat new.pub)"')
    assert "NEW_VERIFIER_KEY" in block
    (tmp_path / "gates.jsonl").write_text("\n".join(gate_lines(5)) + "\n")
    (tmp_path / "new.jsonl").write_text("\n".join(gate_lines(2, prefix="new")) + "\n")
    set_up(tmp_path, "keygen", "writer", stdout="writer.pub")
    set_up(tmp_path, "keygen", "new", stdout="new.pub")
    set_up(tmp_path, "record", "gates.jsonl", "--db", "damaged.db", "--signing-key", "writer.key")
    done = shell(filled, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "adopted 3 rows (seq 1..3)" in done.stderr
    assert "CLEAN" in done.stdout
    assert re.search(r"provenance +salvaged from \S+ through seq 3", done.stdout)


@pytest.mark.slow
@pytest.mark.postgres
def test_the_upgrade_to_the_seal_block_runs(pg_url: str, tmp_path: Path, set_up: SetUp) -> None:
    """upgrading.md's 0003 block, either way: each SQLite `migrate` on a store of its own, and on PostgreSQL the
    offline `--sql` script (from a folder laid out as the repository root), applied with psql as it says, then
    `migrate`; the PostgreSQL store then records and audits clean. The block's commands run in a shell; the checks
    after them, in this process."""
    from sqlalchemy.engine import make_url

    (block,) = fenced("sh", "0003: the seal (spec section 8)", doc="docs/upgrading.md")
    sqlite_steps, postgres_steps = (commands(part) for part in block.split("\n\n"))
    assert len(sqlite_steps) == 2
    for index, step in enumerate(sqlite_steps):  # "either of": each alone
        folder = tmp_path / f"sqlite-{index}"
        folder.mkdir()
        done = shell(step, folder)
        assert done.returncode == 0, (step, done.stderr)
        set_up(folder, "checkpoint")
    url = make_url(pg_url).set(drivername="postgresql+psycopg")
    root = with_examples(tmp_path / "root")
    shutil.copy(REPO_ROOT / "alembic.ini", root / "alembic.ini")
    (root / "src").symlink_to(REPO_ROOT / "src")
    script, migrate = (step.replace("postgresql+psycopg://…", url.render_as_string(hide_password=False))
                       for step in postgres_steps)
    done = shell(script, root)
    assert done.returncode == 0, done.stderr
    psql = f"psql '{url.set(drivername='postgresql').render_as_string(hide_password=False)}' -v ON_ERROR_STOP=1 -q"
    done = shell(f"{psql} -f 0003.sql", root)
    assert done.returncode == 0, done.stderr
    done = shell(migrate, root)
    assert done.returncode == 0, done.stderr
    database = url.render_as_string(hide_password=False)
    set_up(root, "record", "examples/gates.jsonl", "--db", database)
    assert "CLEAN" in set_up(root, "audit", "--db", database)


def _labels(text: str) -> list[tuple[str, str]]:
    """(section, label) of every fenced block of `text` that opens, in order (a closing ``` is no block)."""
    found, section, inside = [], "", False
    for line in text.splitlines():
        if not inside and line.startswith("## "):
            section = line[3:]
        if line.startswith("```"):
            if not inside:
                found.append((section, line[3:].strip()))
            inside = not inside
    return found


def test_every_block_is_run_or_named_as_shown_only() -> None:
    """Every fenced block's label is one the tests know; a `text` block is named in `NOT_RUN` with its reason, and
    every name there is still a block of its doc (so nothing runnable hides under `text` or a new label)."""
    shown_only = set()
    for doc in DOC_PATHS:
        for section, label in _labels(DOCS[doc]):
            assert label in KNOWN_LABELS, (doc, section, label)
            if label == "text":
                assert (doc, section, label) in NOT_RUN, (doc, section)
                shown_only.add((doc, section, label))
    assert shown_only == set(NOT_RUN)


def test_a_block_under_another_label_of_its_language_is_found() -> None:
    """```bash, shell and console blocks are found as shell, ```py as Python: each is counted and run (the guards
    above would otherwise miss a block only because of its label)."""
    text = "".join(f"```{label}\necho {label}\n```\n" for label in ("sh", "bash", "shell", "console", "zsh"))
    assert blocks_in(text, "sh") == ["echo sh\n", "echo bash\n", "echo shell\n", "echo console\n"]
    assert blocks_in("```py\nprint(1)\n```\n```python\nprint(2)\n```\n", "python") == ["print(1)\n", "print(2)\n"]
