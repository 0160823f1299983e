"""`--policy FILE` (a C2SP tlog-policy) on every command that asks or counts witnesses, over real HTTP, on both
backends: record and witness submit send to its witnesses (optional ones too), and audit, prove, verify-proof,
consistency and publish judge checkpoints by its groups and thresholds. An optional witness is asked and reported,
never counted; a policy's log keys are trusted writer keys, refused when not named by the store's origin."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from compute_budget import decide
from compute_budget.core.log.cosignature import WitnessSigner
from compute_budget.core.log.note import SignerKey
from tests.conftest import gate_lines
from tests.witnessing import ORIGIN, WRITER_KEY, Served, WitnessFactory

Run = Callable[..., tuple[int, str, str]]
A1, A2, B1, B2, OPT = (WitnessSigner.from_seed(f"witness.example/{name}", bytes([number]) * 32)
                       for number, name in enumerate(("a1", "a2", "b1", "b2", "opt"), start=1))
# "All of group A and 1 of group B"; b2 has no URL (never asked), opt is reached by no group (optional).
TWO_GROUPS = "all of A, B (A = all of a1, a2; B = 1 of b1, b2)"


def _policy(path: Path, urls: dict[str, str], *, quorum: str = "top", log: str | None = WRITER_KEY) -> Path:
    """A policy file: the log (unless `log` is None), the five witnesses (those in `urls` with their URL), groups
    A = all of a1 a2, B = any of b1 b2, top = all of A B, and the quorum."""
    lines = ["# the practice loop's witnesses", ""]
    if log is not None:
        lines.append(f"log {log}")
    for name, signer in zip(("a1", "a2", "b1", "b2", "opt"), (A1, A2, B1, B2, OPT), strict=True):
        url = f" {urls[name]}" if name in urls else ""
        lines.append(f"witness {name} {signer.verifier().format()}{url}")
    lines += ["group A all a1 a2", "group B any b1 b2", "group top all A B", f"quorum {quorum}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def _urls(servers: dict[str, Served], *, down: str | None = None) -> dict[str, str]:
    """Each served witness's URL; `down` gets a port nothing listens on (it cannot be reached)."""
    return {name: f"http://127.0.0.1:{1 if name == down else served.port}" for name, served in servers.items()}


def _serve(witness_servers: WitnessFactory) -> dict[str, Served]:
    return {"a1": witness_servers(A1), "a2": witness_servers(A2), "b1": witness_servers(B1),
            "opt": witness_servers(OPT)}


def _record(run_cli: Run, target: str, writer: Path, count: int, prefix: str, policy: Path) -> tuple[list[str], str]:
    lines = gate_lines(count, prefix=prefix)
    gates = writer.with_name(f"{prefix}.jsonl")
    gates.write_text("\n".join(lines) + "\n")
    status, _, err = run_cli("record", str(gates), "--db", target, "--signing-key", str(writer), "--origin", ORIGIN,
                             "--policy", str(policy), "--witness-timeout", "10")
    assert status == 0, err
    return [decide(json.loads(line)).budget_id for line in lines], err


def _audit(run_cli: Run, target: str, *options: str) -> tuple[int, dict[str, object], str]:
    status, out, err = run_cli("audit", "--db", target, *options, "--format", "json")
    return status, json.loads(out) if out else {}, err


@pytest.mark.parametrize("store_target", ["sqlite", "postgresql"], indirect=True)
def test_a_two_group_policy_accepts_and_refuses_the_right_checkpoints(
    witness_servers: WitnessFactory, run_cli: Run, writer: Path, store_target: str, tmp_path: Path
) -> None:
    """record --policy asks every witness with a URL and says what they come to; the audit counts by the groups:
    a checkpoint a1, a2 and b1 cosigned is witnessed, one without a2 is not, though three other witnesses (the
    optional one among them) cosigned it. The report names the policy by its file's SHA-256 and in words, and the
    policy's log key is the trusted writer key (no --trusted-key)."""
    servers = _serve(witness_servers)
    policy = _policy(tmp_path / "policy.txt", _urls(servers))
    _, err = _record(run_cli, store_target, writer, 4, "night1", policy)
    assert "cosigned by 4/4 witnesses" in err
    assert f"witness policy: quorum met ({TWO_GROUPS}); counted: a1, a2, b1; optional, not counted: opt" in err
    assert "no URL for witness(es) b2: they are not asked" in err
    without_a2 = _policy(tmp_path / "down.txt", _urls(servers, down="a2"))
    _, err = _record(run_cli, store_target, writer, 3, "night2", without_a2)
    assert "cosigned by 3/4 witnesses" in err
    assert "witness policy: quorum NOT met" in err
    status, report, err = _audit(run_cli, store_target, "--policy", str(policy))
    assert status == 0, (report, err)
    assert report["witnessed_size"] == 4  # not 7: a2 is missing there, and opt never stands in for it
    assert report["attested_size"] == 7  # the policy's log line is the writer's key
    assert report["witness_policy"] == {"sha256": hashlib.sha256(policy.read_bytes()).hexdigest(),
                                        "quorum": TWO_GROUPS, "optional": ["opt"]}
    status, out, _ = run_cli("audit", "--db", store_target, "--policy", str(policy))
    assert status == 0
    assert f"policy        quorum {TWO_GROUPS} (SHA-256 " in out
    assert "optional, not counted: opt" in out
    # Only group A's quorum: three cosignatures of size 7 (a1, b1, opt) still do not make it witnessed.
    only_a = _policy(tmp_path / "only-a.txt", _urls(servers), quorum="A")
    assert _audit(run_cli, store_target, "--policy", str(only_a))[1]["witnessed_size"] == 4
    status, _, err = run_cli("witness", "submit", "--db", store_target, "--policy", str(policy),
                             "--trusted-key", WRITER_KEY)
    assert status == 0, err
    assert _audit(run_cli, store_target, "--policy", str(policy))[1]["witnessed_size"] == 7


@pytest.mark.parametrize("store_target", ["sqlite", "postgresql"], indirect=True)
def test_an_optional_witness_is_asked_and_reported_but_never_counted(
    witness_servers: WitnessFactory, run_cli: Run, writer: Path, store_target: str, tmp_path: Path
) -> None:
    """witness submit --policy asks the optional witness and says so; its failure is a warning, not exit 1, while
    a counted witness that cannot be reached is exit 1 with the quorum NOT met."""
    servers = _serve(witness_servers)
    _record(run_cli, store_target, writer, 2, "seed", _policy(tmp_path / "p.txt", _urls(servers)))
    _record_unwitnessed(run_cli, store_target, writer, "second")
    status, out, err = run_cli("witness", "submit", "--db", store_target, "--trusted-key", WRITER_KEY,
                               "--policy", str(_policy(tmp_path / "opt-down.txt", _urls(servers, down="opt"))))
    assert status == 0, err
    assert "(optional: asked, not counted)" in err  # the unreachable optional witness: a warning
    assert "witness policy: quorum met" in out
    _record_unwitnessed(run_cli, store_target, writer, "third")
    status, out, err = run_cli("witness", "submit", "--db", store_target, "--trusted-key", WRITER_KEY,
                               "--policy", str(_policy(tmp_path / "b1-down.txt", _urls(servers, down="b1"))))
    assert status == 1
    assert "witness policy: quorum NOT met" in out
    assert "(optional: asked, not counted)" in out  # opt cosigned, and is named so


def _record_unwitnessed(run_cli: Run, target: str, writer: Path, prefix: str) -> None:
    """One more signed row, sent to no witness (for `witness submit` to send)."""
    gates = writer.with_name(f"{prefix}.jsonl")
    gates.write_text(gate_lines(1, prefix=prefix)[0] + "\n")
    status, _, err = run_cli("record", str(gates), "--db", target, "--signing-key", str(writer))
    assert status == 0, err


@pytest.mark.parametrize("store_target", ["sqlite", "postgresql"], indirect=True)
def test_receipts_consistency_and_publish_judge_by_the_policy(
    witness_servers: WitnessFactory, run_cli: Run, writer: Path, store_target: str, tmp_path: Path
) -> None:
    """prove --policy picks a checkpoint the quorum cosigned; verify-proof --policy accepts it with no
    --trusted-key (the log line) and refuses it under a policy its cosigners do not meet; consistency --policy
    likewise; publish --policy and audit --tiles --policy read the log key and quorum from the file."""
    servers = _serve(witness_servers)
    policy = _policy(tmp_path / "policy.txt", _urls(servers))
    ids, _ = _record(run_cli, store_target, writer, 3, "night1", policy)
    status, receipt, err = run_cli("prove", ids[0], "--db", store_target, "--policy", str(policy))
    assert status == 0, err
    (tmp_path / "r.json").write_text(receipt)
    status, out, err = run_cli("verify-proof", str(tmp_path / "r.json"), "--policy", str(policy))
    assert (status, err) == (0, "")
    assert out.startswith("valid: ")
    assert f"witnessed: 3 cosignature(s) toward the quorum {TWO_GROUPS}" in out
    # A stricter policy: b2 (who never cosigned) must cosign too.
    strict = _policy(tmp_path / "strict.txt", _urls(servers))
    strict.write_text(strict.read_text().replace("group B any b1 b2", "group B all b1 b2"))
    status, out, _ = run_cli("verify-proof", str(tmp_path / "r.json"), "--policy", str(strict))
    assert status == 1
    assert out.startswith("invalid (witness): 3 cosignature(s) toward the quorum all of A, B")
    old = tmp_path / "old.note"
    old.write_text(json.loads(receipt)["checkpoint"])
    _record(run_cli, store_target, writer, 2, "night2", policy)
    assert run_cli("consistency", str(old), "--db", store_target, "--policy", str(policy))[0] == 0
    status, _, err = run_cli("consistency", str(old), "--db", store_target, "--policy", str(strict))
    assert status == 1
    assert "the old checkpoint is untrusted" in err
    folder = tmp_path / "public"
    status, _, err = run_cli("publish", str(folder), "--db", store_target, "--policy", str(policy))
    assert status == 0, err
    status, report, err = run_cli("audit", "--tiles", str(folder), "--origin", ORIGIN, "--policy", str(policy),
                                  "--format", "json")
    assert status == 0, err
    assert json.loads(report)["head"]["seq"] == 5
    status, _, err = run_cli("prove", "--tiles", str(folder), "--seq", "2", "--policy", str(strict))
    assert status == 2
    assert "3 cosignature(s) toward the quorum all of A, B" in err


@pytest.mark.parametrize("new_store_target", ["sqlite", "postgresql"], indirect=True)
def test_a_log_line_not_named_by_the_stores_origin_is_refused_naming_it(
    run_cli: Run, writer: Path, new_store_target: str, tmp_path: Path
) -> None:
    """C2SP names a log key by its log's origin: a policy whose log key has another name is refused on every
    command, one line naming the line and saying to make the writer key with `keygen ORIGIN`; record writes
    nothing."""
    store_target = new_store_target
    other = SignerKey.from_seed("someone.else/log", bytes(range(5, 37))).verifier().format()
    policy = tmp_path / "wrong.txt"
    policy.write_text(f"# another log's key\nlog {other}\nquorum none\n")
    gates = tmp_path / "g.jsonl"
    gates.write_text("\n".join(gate_lines(2)) + "\n")
    status, _, err = run_cli("record", str(gates), "--db", store_target, "--signing-key", str(writer), "--origin",
                             ORIGIN, "--policy", str(policy))
    assert status == 2
    assert err.count("\n") == 1
    assert f"policy file {policy}, line 2: the log key is named someone.else/log" in err
    assert "keygen ORIGIN" in err
    good = _policy(tmp_path / "none.txt", {}, quorum="none")
    assert not Path(store_target).exists() or "://" in store_target  # record wrote nothing, not even a store
    _record(run_cli, store_target, writer, 2, "plain", good)
    for argv in (("audit", "--db", store_target), ("publish", str(tmp_path / "pub"), "--db", store_target)):
        status, _, err = run_cli(*argv, "--policy", str(policy))
        assert status == 2, argv
        assert f"policy file {policy}, line 2:" in err, argv
        assert "keygen ORIGIN" in err, argv


def test_a_bad_policy_file_is_one_line_naming_its_line_on_every_command(run_cli: Run, tmp_path: Path) -> None:
    """A malformed policy is exit 2 with one line naming the file and the line; --policy with --witness-key is a
    usage error; a missing file is one line too."""
    bad = tmp_path / "bad.txt"
    bad.write_text(f"witness w {A1.verifier().format()}\ngroup g 3 w\nquorum g\n")
    receipt = tmp_path / "r.json"
    receipt.write_text("{}")
    commands = [
        ("audit", "--db", str(tmp_path / "s.db")),
        ("record", str(receipt), "--db", str(tmp_path / "s.db")),
        ("witness", "submit", "--db", str(tmp_path / "s.db")),
        ("verify-proof", str(receipt), "--trusted-key", WRITER_KEY),
        ("consistency", str(receipt), "--db", str(tmp_path / "s.db")),
        ("prove", "0" * 64, "--db", str(tmp_path / "s.db")),
        ("publish", str(tmp_path / "pub"), "--db", str(tmp_path / "s.db"), "--trusted-key", WRITER_KEY),
    ]
    for argv in commands:
        status, out, err = run_cli(*argv, "--policy", str(bad))
        assert (status, out) == (2, ""), (argv, err)
        assert err.count("\n") == 1, (argv, err)
        assert f"policy file {bad}, line 2:" in err, (argv, err)
    status, _, err = run_cli("audit", "--db", str(tmp_path / "s.db"), "--policy", str(bad),
                             "--witness-key", A1.verifier().format())
    assert status == 2
    assert "not both" in err
    status, _, err = run_cli("audit", "--db", str(tmp_path / "s.db"), "--policy", str(tmp_path / "missing.txt"))
    assert status == 2
    assert err.count("\n") == 1
    assert "does not exist" in err
    assert not (tmp_path / "s.db").exists()  # no command made a store on the way to its refusal


@pytest.mark.parametrize("store_target", ["sqlite", "postgresql"], indirect=True)
def test_a_policy_of_several_logs_serves_each_and_needs_origin_offline(
    witness_servers: WitnessFactory, run_cli: Run, writer: Path, store_target: str, tmp_path: Path
) -> None:
    """One policy may name every log its witnesses follow: a store takes its own log's key; verify-proof needs
    --origin to know which (exit 2 without), then verifies; witness submit --policy sends only a note the
    policy's log key signed (no 'unverified' warning)."""
    servers = _serve(witness_servers)
    policy = _policy(tmp_path / "policy.txt", _urls(servers))
    other = SignerKey.from_seed("example.org/other", bytes(range(7, 39))).verifier().format()
    policy.write_text(policy.read_text().replace(f"log {WRITER_KEY}\n", f"log {other}\nlog {WRITER_KEY}\n"))
    ids, _ = _record(run_cli, store_target, writer, 2, "night1", policy)
    status, report, err = _audit(run_cli, store_target, "--policy", str(policy))
    assert status == 0, (report, err)
    assert report["witnessed_size"] == 2
    receipt = tmp_path / "r.json"
    receipt.write_text(run_cli("prove", ids[0], "--db", store_target, "--policy", str(policy))[1])
    status, _, err = run_cli("verify-proof", str(receipt), "--policy", str(policy))
    assert status == 2
    assert "the policy names 2 logs: give --origin NAME" in err
    status, out, err = run_cli("verify-proof", str(receipt), "--policy", str(policy), "--origin", ORIGIN)
    assert (status, err) == (0, "")
    assert out.startswith("valid: ")
    _record_unwitnessed(run_cli, store_target, writer, "more")
    status, out, err = run_cli("witness", "submit", "--db", store_target, "--policy", str(policy))
    assert status == 0, err
    assert "unverified" not in err  # the policy's log key chose the note sent
    assert "witness policy: quorum met" in out


def test_a_policy_witness_url_is_taken_whole_and_its_name_never_drives_the_terminal(
    run_cli: Run, tmp_path: Path
) -> None:
    """A witness line's URL may hold `=` (in a password or a path): it is never split there, and its password is
    never shown; a witness name is shown escaped (a C1 control, U+009B, cannot start a terminal sequence)."""
    from compute_budget.cli.group import submit_targets

    policy = tmp_path / "p.txt"
    policy.write_bytes(
        f"witness a {A1.verifier().format()} http://alice:s3cr=et@127.0.0.1:9/path=x\n".encode()
        + f"witness \u009b31mEVIL {A2.verifier().format()}\nquorum a\n".encode()
    )
    targets, _ = submit_targets(str(policy), ())
    assert [(target.url, target.key) for target in targets] == [  # type: ignore[union-attr]
        ("http://alice:s3cr=et@127.0.0.1:9/path=x", A1.verifier())
    ]
    status, out, err = run_cli("witness", "submit", "--db", str(tmp_path / "none.db"), "--policy", str(policy))
    assert (status, out) == (2, "")
    assert "\u009b" not in err
    assert "\\u009b31mEVIL" in err  # named, escaped
    assert "s3cr" not in err
