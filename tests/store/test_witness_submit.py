"""Submitting to witnesses (spec 9.5): the writer's checkpoints cosigned and stored; a witness that is stopped, slow
or failing costs one warning and never a record; a 409 gets one retry; `witness submit` catches up."""

from __future__ import annotations

import http.client
import http.server
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from compute_budget import BudgetStore
from compute_budget.core.log.cosignature import valid_cosignatures
from compute_budget.core.log.note import parse_note
from tests.backends import query
from tests.conftest import gate_lines
from tests.witnessing import LOG, ORIGIN, WITNESS, WITNESS_KEY, HandlerFactory, Served

Run = Callable[..., tuple[int, str, str]]


def _open(path: Path, *witnesses: str, timeout: float = 5.0) -> BudgetStore:
    return BudgetStore.open(
        str(path / "store.db"), origin=ORIGIN, signing_key=LOG, writer_state=str(path / "writer.state"),
        witnesses=witnesses, witness_timeout=timeout,
    )


def _stored_cosignatures(path: Path) -> list[tuple[int, str, str]]:
    return [(row[0], row[1], row[2]) for row in query(
        str(path / "store.db"), "SELECT tree_size, checkpoint, line FROM compute_budget_cosignatures ORDER BY id"
    )]


def _sizes(path: Path) -> list[int]:
    return [row[0] for row in query(str(path / "store.db"), "SELECT tree_size FROM compute_budget_witness_sizes")]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class _Answering(http.server.BaseHTTPRequestHandler):
    delay = 0.0
    status = 500

    def do_POST(self) -> None:
        time.sleep(self.delay)
        self.send_response(self.status)
        if self.status == 409:  # a witness that holds size 2 of the log, whatever it is sent
            self.send_header("Content-Type", "text/x.tlog.size")
            self.end_headers()
            self.wfile.write(b"2\n")
            return
        self.end_headers()
        self.wfile.write(b"internal trouble\n")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def misbehaving(http_servers: HandlerFactory) -> Callable[[float, int], str]:
    """Start HTTP servers that answer `status` after `delay` seconds; a factory of their URLs."""

    def start(delay: float, status: int) -> str:
        return http_servers(type("Handler", (_Answering,), {"delay": delay, "status": status}))

    return start


def test_each_signed_append_is_cosigned_and_stored(served: Served, tmp_path: Path) -> None:
    """The checkpoint of every append goes to the witness, from the size it holds with a proof; the cosignature
    verifies and is stored with the checkpoint text it covers; the witness-sizes table is no longer written (spec
    9.9.1: the next `old` comes from the stored cosignature)."""
    url = f"http://127.0.0.1:{served.port}={WITNESS_KEY}"
    with _open(tmp_path, url) as store:
        first = store.record_many(gate_lines(5))
        second = store.record(gate_lines(1, prefix="later")[0])
    assert first.witness_warnings == ()
    assert second.witness_warnings == ()
    stored = _stored_cosignatures(tmp_path)
    assert [size for size, _, _ in stored] == [5, 6]
    for _, text, line in stored:
        assert valid_cosignatures(text + "\n" + line, [WITNESS.verifier()], now=int(time.time()))
    assert _sizes(tmp_path) == []
    assert served.state.latest(ORIGIN).size == 6  # type: ignore[union-attr]


def test_a_stopped_witness_is_one_warning_and_submit_catches_up_later(served: Served, tmp_path: Path) -> None:
    """Witness down: the rows are recorded and the result carries one warning; `submit_to_witnesses` later sends
    the newest checkpoint and stores the cosignature."""
    down = f"http://127.0.0.1:{_closed_port()}={WITNESS_KEY}"
    with _open(tmp_path, down) as store:
        result = store.record_many(gate_lines(4))
    assert result.new == 4
    assert len(result.witness_warnings) == 1
    assert "unreachable" in result.witness_warnings[0]
    assert "the rows are recorded" in result.witness_warnings[0]
    assert _stored_cosignatures(tmp_path) == []
    with BudgetStore.open(str(tmp_path / "store.db"), allow_unsigned=True) as store:
        submitted = store.submit_to_witnesses([f"http://127.0.0.1:{served.port}={WITNESS_KEY}"])
    assert [(item.cosigned, item.warning) for item in submitted] == [(True, None)]
    assert [size for size, _, _ in _stored_cosignatures(tmp_path)] == [4]


def test_a_slow_witness_never_holds_the_loop_past_the_timeout(
    tmp_path: Path, misbehaving: Callable[[float, int], str]
) -> None:
    """A witness that sleeps past the timeout: the record returns within the timeout (plus a little), warned."""
    slow = misbehaving(5.0, 200)
    with _open(tmp_path, f"{slow}={WITNESS_KEY}", timeout=0.5) as store:
        began = time.monotonic()
        result = store.record(gate_lines(1)[0])
        elapsed = time.monotonic() - began
    assert result.new
    assert elapsed < 2.0
    assert len(result.witness_warnings) == 1
    assert "in time" in result.witness_warnings[0] or "timed out" in result.witness_warnings[0]


def test_a_failing_witness_is_one_warning_naming_its_answer(
    tmp_path: Path, misbehaving: Callable[[float, int], str]
) -> None:
    """A witness answering 500: one warning with the status and the first line of its body."""
    failing = misbehaving(0.0, 500)
    with _open(tmp_path, f"{failing}={WITNESS_KEY}") as store:
        result = store.record(gate_lines(1)[0])
    assert result.new
    assert len(result.witness_warnings) == 1
    assert "refused with 500: 'internal trouble'" in result.witness_warnings[0]
    assert _sizes(tmp_path) == []


def test_a_cosignature_is_filed_at_its_checkpoint_size_whatever_another_witness_answered(
    served: Served, tmp_path: Path, misbehaving: Callable[[float, int], str]
) -> None:
    """One witness cosigns size 5 while another keeps answering 409 with size 2. The cosignature was filed under the
    last size any witness reported (2: a loop variable shadowed the checkpoint's size), so the store held a
    cosignature of size 5 filed as size 2's, and the next audit called it bad_signature."""
    from compute_budget import audit

    holding = misbehaving(0.0, 409)
    good = f"http://127.0.0.1:{served.port}={WITNESS_KEY}"
    with _open(tmp_path, good, f"{holding}={WITNESS_KEY}") as store:
        result = store.record_many(gate_lines(5))
    assert len(result.witness_warnings) == 1
    assert "holds size 2" in result.witness_warnings[0]
    assert [size for size, _, _ in _stored_cosignatures(tmp_path)] == [5]
    assert _sizes(tmp_path) == []  # nothing read from a 409 body is stored (spec 9.9.1)
    report = audit(str(tmp_path / "store.db"), trusted_keys=[LOG.verifier()], witness_keys=[WITNESS.verifier()])
    assert report.clean, report.findings
    assert report.witnessed_size == 5


def test_a_cosignature_the_store_cannot_keep_is_no_success(served: Served, tmp_path: Path) -> None:
    """The witness cosigns, but the store swallows the row (a hand-made RAISE(IGNORE) trigger, caught by the
    row count): the result said 'cosigned' and `witness submit` exited 0 with nothing kept. Now it is a warning."""
    from tests.backends import execute

    with _open(tmp_path) as store:
        store.record_many(gate_lines(3))
    execute(str(tmp_path / "store.db"),
            "CREATE TRIGGER swallow BEFORE INSERT ON compute_budget_cosignatures BEGIN SELECT RAISE(IGNORE); END")
    with BudgetStore.open(str(tmp_path / "store.db"), allow_unsigned=True) as store:
        submitted = store.submit_to_witnesses([f"http://127.0.0.1:{served.port}={WITNESS_KEY}"])
    assert [item.cosigned for item in submitted] == [False]
    assert "could not keep it" in (submitted[0].reason or "")
    assert _stored_cosignatures(tmp_path) == []


def test_a_409_gets_one_retry_from_the_size_the_witness_holds(served: Served, tmp_path: Path) -> None:
    """The witness already cosigned size 3 (sent by someone else); the store knows nothing of it, sends old 0, is
    told 3, and retries from 3 with a proof computed from its own tree: cosigned; no size is stored."""
    with _open(tmp_path) as store:
        store.record_many(gate_lines(3))
        note = store.signed_checkpoint([LOG], writer_state=str(tmp_path / "writer.state"))
    connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
    connection.request("POST", "/add-checkpoint", body=f"old 0\n\n{note}".encode())
    assert connection.getresponse().status == 200
    connection.close()
    with _open(tmp_path, f"http://127.0.0.1:{served.port}={WITNESS_KEY}") as store:
        result = store.record_many(gate_lines(2, prefix="more"))
    assert result.witness_warnings == ()
    assert _sizes(tmp_path) == []
    assert [size for size, _, _ in _stored_cosignatures(tmp_path)] == [5]
    assert served.state.latest(ORIGIN).size == 5  # type: ignore[union-attr]


def test_a_witness_without_a_key_or_on_a_reader_is_refused(tmp_path: Path) -> None:
    """Witnesses cosign what this writer signs: no key, a read-only store, a bad URL or key is an InputError."""
    from compute_budget.errors import InputError

    target = f"http://127.0.0.1:1={WITNESS_KEY}"
    with pytest.raises(InputError, match="give a signing key"):
        BudgetStore.open(str(tmp_path / "a.db"), witnesses=[target], allow_unsigned=True)
    with pytest.raises(InputError, match="opened for writing"):
        BudgetStore.open(str(tmp_path / "a.db"), readonly=True, witnesses=[target])
    with pytest.raises(InputError, match="not an http"):
        _open(tmp_path, f"ftp://x={WITNESS_KEY}")
    with pytest.raises(InputError, match=r"note key \(type 0x01\)"):
        _open(tmp_path, f"http://127.0.0.1:1={LOG.verifier().format()}")


def test_record_and_witness_submit_from_the_shell(served: Served, run_cli: Run, tmp_path: Path) -> None:
    """`record --witness` with the witness down: exit 0, one warning line; `witness submit`: exit 1 while it is
    down, 0 once it answers; a missing store is exit 2 saying so, with no file left; no signed checkpoint, exit 2."""
    key = tmp_path / "writer.key"
    key.write_text(LOG.format() + "\n")
    key.chmod(0o600)
    gates = tmp_path / "gates.jsonl"
    gates.write_text("\n".join(gate_lines(3)) + "\n")
    db = str(tmp_path / "cli.db")
    down = f"http://127.0.0.1:{_closed_port()}={WITNESS_KEY}"
    status, out, err = run_cli("record", str(gates), "--db", db, "--signing-key", str(key), "--origin", ORIGIN,
                               "--witness", down, "--witness-timeout", "2")
    assert status == 0, err
    assert "3 new" in out
    assert err.count("warning: witness") == 1
    status, _, err = run_cli("witness", "submit", "--db", db, "--witness", down)
    assert status == 1
    assert "unreachable" in err
    status, out, _ = run_cli("witness", "submit", "--db", db, "--witness", f"http://127.0.0.1:{served.port}={WITNESS_KEY}")
    assert status == 0
    assert out.startswith("cosigned by witness witness.example/w1")
    assert "retry with" not in err  # the writer's advice to run this command is not repeated by it
    missing = tmp_path / "none.db"
    status, _, err = run_cli("witness", "submit", "--db", str(missing), "--witness", down)
    assert status == 2
    assert f"no database at {missing}" in err
    assert not missing.exists()
    empty = tmp_path / "unsigned.db"
    status, _, err = run_cli("record", str(gates), "--db", str(empty), "--unsigned")
    assert status == 0, err
    status, _, err = run_cli("witness", "submit", "--db", str(empty), "--witness", down)
    assert status == 2
    assert "no signed checkpoint" in err
    assert parse_note(served.get("/latest?origin=example.org%2Flog")[1])[0].split("\n")[1] == "3"


def test_copy_keeps_witness_sizes_and_cosignatures_and_salvage_keeps_none(
    served: Served, run_cli: Run, tmp_path: Path
) -> None:
    """A whole copy carries the witness tables as stored (a size row left by an older release included);
    `copy --through` (spec 9.8) starts a new origin with no cosignature and no witness size."""
    from tests.backends import execute

    with _open(tmp_path, f"http://127.0.0.1:{served.port}={WITNESS_KEY}") as store:
        store.record_many(gate_lines(4))
    source = str(tmp_path / "store.db")
    execute(source, "INSERT INTO compute_budget_witness_sizes (witness_name, witness_key_id, tree_size, recorded_at) "
            "VALUES ('witness.example/w1', '00000000', 4, 'then')")
    assert run_cli("copy", source, str(tmp_path / "copy.db"))[0] == 0
    assert query(str(tmp_path / "copy.db"), "SELECT tree_size, line FROM compute_budget_cosignatures") == query(
        source, "SELECT tree_size, line FROM compute_budget_cosignatures"
    )
    copied_sizes = query(str(tmp_path / "copy.db"), "SELECT tree_size FROM compute_budget_witness_sizes")
    assert [row[0] for row in copied_sizes] == [4]
    assert run_cli("copy", source, str(tmp_path / "salvage.db"), "--through", "2")[0] == 0
    assert query(str(tmp_path / "salvage.db"), "SELECT count(*) FROM compute_budget_cosignatures") == [(0,)]
    assert query(str(tmp_path / "salvage.db"), "SELECT count(*) FROM compute_budget_witness_sizes") == [(0,)]


def test_the_witness_tables_are_append_only(served: Served, tmp_path: Path) -> None:
    """The guard covers the new tables: an UPDATE or DELETE of a stored cosignature or size is refused."""
    import sqlite3

    from tests.backends import execute

    with _open(tmp_path, f"http://127.0.0.1:{served.port}={WITNESS_KEY}") as store:
        store.record_many(gate_lines(2))
    execute(str(tmp_path / "store.db"), "INSERT INTO compute_budget_witness_sizes (witness_name, witness_key_id, "
            "tree_size, recorded_at) VALUES ('witness.example/w1', '00000000', 2, 'then')")
    with sqlite3.connect(tmp_path / "store.db") as connection:
        for statement in ("UPDATE compute_budget_cosignatures SET tree_size = 1",
                          "DELETE FROM compute_budget_witness_sizes"):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                connection.execute(statement)


def test_witnessing_works_the_same_on_both_backends(served: Served, store_target: str, tmp_path: Path) -> None:
    """On SQLite and PostgreSQL alike: cosigned and stored; no witness size written (spec 9.9.1)."""
    with BudgetStore.open(
        store_target, origin=ORIGIN, signing_key=LOG, writer_state=str(tmp_path / "writer.state"),
        witnesses=[f"http://127.0.0.1:{served.port}={WITNESS_KEY}"],
    ) as store:
        assert store.record_many(gate_lines(3)).witness_warnings == ()
        assert store.record(gate_lines(1, prefix="one")[0]).witness_warnings == ()
    assert [row[0] for row in query(store_target, "SELECT tree_size FROM compute_budget_cosignatures ORDER BY id")] == [
        3, 4]
    assert query(store_target, "SELECT count(*) FROM compute_budget_witness_sizes") == [(0,)]
