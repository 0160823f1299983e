"""What the store says about a witness is a claim (spec 9.9.1): the submitter's `old` comes from the stored
cosignatures it can verify and that the store extends, never from the witness-sizes table; a 409's size is used
for one retry only when the store can prove from it, and nothing of a 409 body is stored. Also spec 9.9.6's URL
user information (never shown, sent as Basic authentication), `witness submit --trusted-key`, and `record`'s
`cosigned by N/M witnesses`. Every witness is real HTTP on 127.0.0.1: the real one (`served`), behind a relay that
records what it is sent, or an impostor."""

from __future__ import annotations

import base64
import http.client
import http.server
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from compute_budget import BudgetStore
from compute_budget.core.log.note import SignerKey, parse_note, sign_note
from tests.backends import execute, query
from tests.conftest import gate_lines
from tests.witnessing import FORK, LOG, ORIGIN, OTHER, WITNESS, WITNESS_KEY, HandlerFactory, Served

Run = Callable[..., tuple[int, str, str]]
WITNESS_ID = f"{WITNESS.key_id:08x}"
PLANT_SIZE = (
    "INSERT INTO compute_budget_witness_sizes (witness_name, witness_key_id, tree_size, recorded_at) "
    "VALUES (:name, :key_id, :size, 'planted')"
)
PLANT_COSIGNATURE = (
    "INSERT INTO compute_budget_cosignatures (tree_size, witness_name, witness_key_id, timestamp, checkpoint, line, "
    "recorded_at) VALUES (:size, :name, :key_id, 0, :checkpoint, :line, 'planted')"
)


@dataclass
class Relay:
    """An HTTP server in front of the real witness: what each request carried (`old` line, Authorization)."""

    url: str
    olds: list[str] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)


@dataclass
class Impostor:
    """An HTTP server on the witness's URL that answers every checkpoint 409 with the size it `claims`."""

    url: str
    requests: list[str] = field(default_factory=list)


@pytest.fixture
def relay(served: Served, http_servers: HandlerFactory) -> Relay:
    """The real witness behind a recording relay."""
    seen = Relay("")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            seen.olds.append(body.split(b"\n", 1)[0].decode())
            seen.authorizations.append(self.headers.get("Authorization"))
            connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
            connection.request("POST", self.path, body=body)
            answer = connection.getresponse()
            data = answer.read()
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.getheader("Content-Type", "text/plain"))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            connection.close()

        def log_message(self, *args: object) -> None:
            pass

    seen.url = http_servers(Handler)
    return seen


def _impostor(http_servers: HandlerFactory, claims: str) -> Impostor:
    seen = Impostor("")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            seen.requests.append(body.split(b"\n", 1)[0].decode())
            self.send_response(409)
            self.send_header("Content-Type", "text/x.tlog.size")
            self.end_headers()
            self.wfile.write(claims.encode() + b"\n")

        def log_message(self, *args: object) -> None:
            pass

    seen.url = http_servers(Handler)
    return seen


def _open(target: str, tmp_path: Path, *witnesses: str) -> BudgetStore:
    return BudgetStore.open(target, origin=ORIGIN, signing_key=LOG, writer_state=str(tmp_path / "writer.state"),
                            witnesses=witnesses)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _cosigned_sizes(target: str) -> list[int]:
    return [row[0] for row in query(target, "SELECT tree_size FROM compute_budget_cosignatures ORDER BY id")]


def _key_file(tmp_path: Path) -> Path:
    key = tmp_path / "writer.key"
    key.write_text(LOG.format() + "\n")
    key.chmod(0o600)
    return key


# -- a: the witness-sizes table is not read ---------------------------------------------------------------------


def test_a_planted_witness_size_neither_stops_nor_steers_the_submitter(
    served: Served, relay: Relay, store_target: str, tmp_path: Path
) -> None:
    """A row of size 999999 planted in the witness-sizes table stopped every later `record --witness` and `witness
    submit` from contacting the witness ('it has cosigned size 999999'). Now `old` is the size of the stored
    cosignature (3, then 5), the witness cosigns each time, and no size row is written."""
    target = f"{relay.url}={WITNESS_KEY}"
    with _open(store_target, tmp_path, target) as store:
        assert store.record_many(gate_lines(3)).witness_warnings == ()
    execute(store_target, (PLANT_SIZE, {"name": WITNESS.name, "key_id": WITNESS_ID, "size": 999999}))
    with _open(store_target, tmp_path, target) as store:
        assert store.record_many(gate_lines(2, prefix="next")).witness_warnings == ()
    with _open(store_target, tmp_path) as store:
        store.record_many(gate_lines(1, prefix="unwitnessed"))
        submitted = store.submit_to_witnesses([target])
    assert [(item.cosigned, item.warning) for item in submitted] == [(True, None)]
    assert relay.olds == ["old 0", "old 3", "old 5"]  # each time straight from the store's own cosignature: no 409
    assert served.state.latest(ORIGIN).size == 6  # type: ignore[union-attr]
    assert _cosigned_sizes(store_target) == [3, 5, 6]
    assert [row[0] for row in query(store_target, "SELECT tree_size FROM compute_budget_witness_sizes")] == [999999]



def test_the_audit_warns_of_each_stored_witness_size_no_valid_cosignature_backs(
    served: Served, run_cli: Run, store_target: str, tmp_path: Path
) -> None:
    """Red team on issue 28 a: a planted size row left the audit clean and silent. With the witness's key, each
    stored size with no valid stored cosignature of that witness at exactly that size is a warning in the report
    (the audit stays clean: the submitter no longer reads them), another witness's size with no cosignature too; a
    size the witness's cosignature backs is not."""
    with _open(store_target, tmp_path, f"http://127.0.0.1:{served.port}={WITNESS_KEY}") as store:
        assert store.record_many(gate_lines(3)).witness_warnings == ()
    for name, key_id, size in [(WITNESS.name, WITNESS_ID, 999999), (WITNESS.name, WITNESS_ID, 3),
                               (WITNESS.name, WITNESS_ID, 2), (WITNESS.name, WITNESS_ID, 999999),
                               ("someone.else/w", "0badc0de", 7)]:
        execute(store_target, (PLANT_SIZE, {"name": name, "key_id": key_id, "size": size}))
    status, out, err = run_cli("audit", "--db", store_target, "--witness-key", WITNESS_KEY, "--format", "json")
    assert status == 0, out + err
    claims = [item for item in json.loads(out)["warnings"] if "but no valid stored cosignature" in item]
    said = {(name, size) for name, size in [(WITNESS.name, 2), (WITNESS.name, 999999), ("someone.else/w", 7)]
            if any(f"witness {name} " in item and f"cosigned size {size}," in item for item in claims)}
    assert said == {(WITNESS.name, 2), (WITNESS.name, 999999), ("someone.else/w", 7)}
    assert not any("cosigned size 3," in item for item in claims)  # the witness's own cosignature backs size 3
    status, out, err = run_cli("audit", "--db", store_target, "--witness-key", WITNESS_KEY)
    assert status == 0
    assert f"warning: the store says witness {WITNESS.name}" in out + err


def test_old_is_the_largest_cosignature_that_verifies_and_that_the_store_extends(
    served: Served, relay: Relay, store_target: str, tmp_path: Path
) -> None:
    """Planted above the real cosignature of size 3: a line that does not verify (size 5), the real one copied under
    size 5, the witness's valid cosignature of a fork of this log (size 4: the store does not extend it), and of
    another log's checkpoint filed at size 4. None of them is `old`: the next append sends `old 3` and is cosigned
    at once."""
    from compute_budget.core.log.merkle import root_from_reader
    from compute_budget.core.log.note import format_checkpoint

    target = f"{relay.url}={WITNESS_KEY}"
    with _open(store_target, tmp_path, target) as store:
        store.record_many(gate_lines(3))
    now = int(time.time())
    fork = format_checkpoint(ORIGIN, 4, root_from_reader(FORK, 4), "ab" * 32)
    other = format_checkpoint("example.org/other", 4, root_from_reader(FORK, 4), "ab" * 32)
    genuine_text, genuine_line = query(store_target, "SELECT checkpoint, line FROM compute_budget_cosignatures")[0]
    bogus = genuine_line[: -12] + ("A" if genuine_line[-12] != "A" else "B") + genuine_line[-11:]
    execute(store_target, *[
        (PLANT_COSIGNATURE, {"size": size, "name": WITNESS.name, "key_id": WITNESS_ID, "checkpoint": text,
                             "line": line})
        for size, text, line in (
            (5, genuine_text, bogus),
            (5, genuine_text, genuine_line),
            (4, fork, WITNESS.cosign(fork, now).line()),
            (4, other, WITNESS.cosign(other, now).line()),
        )
    ])
    with _open(store_target, tmp_path, target) as store:
        assert store.record_many(gate_lines(2, prefix="next")).witness_warnings == ()
    assert relay.olds == ["old 0", "old 3"]
    assert served.state.latest(ORIGIN).size == 5  # type: ignore[union-attr]


def test_a_flood_of_planted_cosignatures_neither_holds_the_writer_nor_stops_witnessing(
    relay: Relay, store_target: str, tmp_path: Path
) -> None:
    """Thousands of distinct lines planted under the witness's name and key ID, none of which verifies. Checking
    them took the whole `witness_timeout` and the witness was never asked again (red team on issue 28 a: the table
    is append-only, so the store could never be witnessed again). Now the check gets half the timeout; past it
    `old` is 0, the witness's 409 names its size, and the one retry from there (the store's tree proves it) is
    cosigned: the writer is held no longer than the timeout, and the rows stay witnessed."""
    with _open(store_target, tmp_path, f"{relay.url}={WITNESS_KEY}") as store:
        assert store.record_many(gate_lines(3)).witnessed == (1, 1)
    text = parse_note(query(store_target, "SELECT note FROM compute_budget_checkpoints")[0][0])[0]
    now = int(time.time())
    signed = WITNESS.cosign(text, now).signature[8:]  # after the timestamp: the Ed25519 signature
    key_id = WITNESS.key_id.to_bytes(4, "big")
    lines = [  # each dated a second earlier: distinct, well formed, and each costs a verification that fails
        f"— {WITNESS.name} {base64.b64encode(key_id + (now - i).to_bytes(8, 'big') + signed).decode()}\n"
        for i in range(1, 16001)
    ]
    execute(store_target, *[
        (PLANT_COSIGNATURE, {"size": 3, "name": WITNESS.name, "key_id": WITNESS_ID, "checkpoint": text, "line": line})
        for line in lines
    ])
    relay.olds.clear()
    store = BudgetStore.open(store_target, origin=ORIGIN, signing_key=LOG, writer_state=str(tmp_path / "writer.state"),
                             witnesses=[f"{relay.url}={WITNESS_KEY}"], witness_timeout=0.6)
    with store:
        began = time.monotonic()
        result = store.record_many(gate_lines(1, prefix="more"))
        elapsed = time.monotonic() - began
    assert result.new == 1
    assert elapsed < 2.5
    assert result.witness_warnings == ()
    assert result.witnessed == (1, 1)
    assert relay.olds == ["old 0", "old 3"]  # the check gave way; the 409's size, at most the head, drove the retry


def test_an_answer_that_is_not_http_is_a_warning_not_a_thread_traceback(tmp_path: Path) -> None:
    """A server on the witness's URL that answers with no HTTP status line: the request thread died with a
    traceback (BadStatusLine) and the writer waited for the whole timeout. Now it is one warning at once."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)

    def answer() -> None:
        connection, _ = listener.accept()
        connection.recv(65536)
        connection.sendall(b"garbage\r\n\r\n")
        connection.close()

    threading.Thread(target=answer, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}={WITNESS_KEY}"
        with _open(str(tmp_path / "store.db"), tmp_path, url) as store:
            began = time.monotonic()
            result = store.record_many(gate_lines(2))
            elapsed = time.monotonic() - began
    finally:
        listener.close()
    assert result.new == 2
    assert len(result.witness_warnings) == 1
    assert "unreachable (" in result.witness_warnings[0]
    assert elapsed < 3.0


# -- b: a 409 is a claim ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("claims", ["999999", "9" * 5000])
def test_an_impostors_409_is_not_stored_and_the_real_witness_is_asked_next_time(
    served: Served,
    relay: Relay,
    store_target: str,
    tmp_path: Path,
    http_servers: HandlerFactory,
    claims: str,
) -> None:
    """An impostor on the witness's URL (plain HTTP) answers 409 with a size far above the store's head: it was
    stored, and the real witness was never asked again (a 5,000-digit size crashed the writer after its commit).
    Now the warning names the size it claims, there is no retry, nothing is stored, and the next append reaches
    the real witness from old 0."""
    impostor = _impostor(http_servers, claims)
    with _open(store_target, tmp_path, f"{impostor.url}={WITNESS_KEY}") as store:
        result = store.record_many(gate_lines(3))
    assert result.new == 3
    assert len(result.witness_warnings) == 1
    assert f"claims size {claims[:20]}" in result.witness_warnings[0]
    assert "above the checkpoint sent (3)" in result.witness_warnings[0]
    assert impostor.requests == ["old 0"]  # no retry from a size the store cannot prove from
    assert query(store_target, "SELECT count(*) FROM compute_budget_witness_sizes") == [(0,)]
    assert _cosigned_sizes(store_target) == []
    with _open(store_target, tmp_path, f"{relay.url}={WITNESS_KEY}") as store:
        assert store.record_many(gate_lines(2, prefix="next")).witness_warnings == ()
    assert relay.olds == ["old 0"]
    assert served.state.latest(ORIGIN).size == 5  # type: ignore[union-attr]


# -- n: a URL's user information is never shown -----------------------------------------------------------------


def test_a_url_password_is_sent_as_basic_auth_and_never_shown(relay: Relay, tmp_path: Path) -> None:
    """`http://user:s3cret@host` broke every request (the user information was taken for part of the port) and was
    printed whole. Now it is sent as HTTP Basic authentication and messages, results and reprs show `***@`."""
    from compute_budget.errors import InputError
    from compute_budget.witness.client import WitnessTarget

    host = relay.url.removeprefix("http://")
    store_path = str(tmp_path / "store.db")
    with _open(store_path, tmp_path, f"http://user:s3cret@{host}={WITNESS_KEY}") as store:
        assert store.record_many(gate_lines(3)).witness_warnings == ()
    assert relay.authorizations == ["Basic " + base64.b64encode(b"user:s3cret").decode()]
    down = f"http://user:s3cret@127.0.0.1:{_closed_port()}"
    with _open(store_path, tmp_path, f"{down}={WITNESS_KEY}") as store:
        result = store.record_many(gate_lines(1, prefix="later"))
    assert len(result.witness_warnings) == 1
    assert "http://***@127.0.0.1:" in result.witness_warnings[0]
    assert "s3cret" not in result.witness_warnings[0]
    parsed = WitnessTarget.parse(f"{down}={WITNESS_KEY}")
    assert "s3cret" not in repr(parsed)
    assert "s3cret" not in parsed.label
    assert "***@" in repr(parsed)
    for typed in (f"user:s3cret@127.0.0.1={WITNESS_KEY}", "http://user:s3cret@127.0.0.1",
                  f"ftp://user:s3cret@127.0.0.1={WITNESS_KEY}"):
        with pytest.raises(InputError) as refused:
            WitnessTarget.parse(typed)
        assert "s3cret" not in str(refused.value)
        assert "***@127.0.0.1" in str(refused.value)
    assert all("s3cret" not in str(row) for row in query(store_path, "SELECT * FROM compute_budget_cosignatures"))


def test_no_command_prints_or_reports_a_url_password(run_cli: Run, store_target: str, tmp_path: Path) -> None:
    """`record --witness`, `witness submit --witness`, `audit --witness-url` (its error line and its JSON report)
    and a malformed URL: the password is shown as `***@`, never in clear."""
    gates = tmp_path / "gates.jsonl"
    gates.write_text("\n".join(gate_lines(2)) + "\n")
    db = store_target
    down = f"http://user:s3cret@127.0.0.1:{_closed_port()}={WITNESS_KEY}"
    report = tmp_path / "report.json"
    runs = [
        ("record", str(gates), "--db", db, "--signing-key", str(_key_file(tmp_path)), "--origin", ORIGIN,
         "--witness", down, "--witness-timeout", "2"),
        ("witness", "submit", "--db", db, "--witness", down, "--trusted-key", LOG.verifier().format()),
        ("audit", "--db", db, "--witness-url", down, "--report", f"json:{report}"),
        ("witness", "submit", "--db", db, "--witness", f"http://user:s3cret@127.0.0.1:abc={WITNESS_KEY}"),
    ]
    statuses = []
    for argv in runs:
        status, out, err = run_cli(*argv)
        statuses.append(status)
        assert "s3cret" not in out + err, argv[0]
        assert "***@127.0.0.1:" in err, (argv[0], err)
    assert statuses == [0, 1, 2, 2]
    assert "s3cret" not in report.read_text()
    assert "***@127.0.0.1:" in json.loads(report.read_text())["error"]



@pytest.mark.parametrize("password", ["s3c/ret", "s3c#ret", "s3c?ret"])
def test_a_url_password_holding_a_delimiter_is_never_shown(password: str) -> None:
    """A password typed raw with `/`, `#` or `?` in it ends the URL's authority early, so `urlsplit` finds no
    user information: the typed URL, with the password in clear, was printed whole in the error line (and the
    parser's own message quoted its first part as a port). Anything up to the last `@` is hidden now."""
    from compute_budget.errors import InputError
    from compute_budget.witness.client import WitnessTarget

    with pytest.raises(InputError) as refused:
        WitnessTarget.parse(f"http://alice:{password}@127.0.0.1:7380={WITNESS_KEY}")
    assert "s3c" not in str(refused.value)
    assert "ret@" not in str(refused.value)
    assert "***@127.0.0.1:7380" in str(refused.value)

# -- r: witness submit sends a note a trusted writer signed -----------------------------------------------------


def test_witness_submit_with_trusted_keys_skips_a_planted_newer_note(
    served: Served, run_cli: Run, store_target: str, tmp_path: Path
) -> None:
    """A note planted after the writer's (same size, signed by another key) was the one `witness submit` sent: the
    witness refused it (403) and catch-up stalled. With `--trusted-key` the writer's note is sent and cosigned;
    without, one stderr line says the note is unverified; keys nothing verifies under: exit 2, nothing sent."""
    gates = tmp_path / "gates.jsonl"
    gates.write_text("\n".join(gate_lines(3)) + "\n")
    status, _, err = run_cli("record", str(gates), "--db", store_target, "--signing-key", str(_key_file(tmp_path)),
                             "--origin", ORIGIN)
    assert status == 0, err
    text = parse_note(query(store_target, "SELECT note FROM compute_budget_checkpoints")[0][0])[0]
    execute(store_target, (
        "INSERT INTO compute_budget_checkpoints (tree_size, key_name, key_hash, note, recorded_at) "
        "VALUES (3, :name, :hash, :note, 'planted')",
        {"name": OTHER.name, "hash": f"{OTHER.key_hash:08x}", "note": sign_note(text, OTHER)},
    ))
    witness = f"http://127.0.0.1:{served.port}={WITNESS_KEY}"
    status, _, err = run_cli("witness", "submit", "--db", store_target, "--witness", witness)
    assert status == 1
    assert "refused with 403" in err
    assert err.count("unverified") == 1
    nobody = SignerKey.from_seed("example.org/nobody", bytes([7]) * 32).verifier().format()
    status, _, err = run_cli("witness", "submit", "--db", store_target, "--witness", witness, "--trusted-key", nobody)
    assert status == 2
    assert "no checkpoint that verifies under the trusted keys (example.org/nobody)" in err
    assert err.count("\n") == 1  # the error alone: nothing was sent, so no word of an unverified note
    status, out, err = run_cli("witness", "submit", "--db", store_target, "--witness", witness,
                               "--trusted-key", LOG.verifier().format())
    assert status == 0, err
    assert out.startswith("cosigned by witness witness.example/w1")
    assert "unverified" not in err
    assert served.state.latest(ORIGIN).size == 3  # type: ignore[union-attr]
    assert _cosigned_sizes(store_target) == [3]


# -- 12: record says how many witnesses cosigned ----------------------------------------------------------------


def test_record_says_how_many_witnesses_cosigned(
    served: Served, run_cli: Run, store_target: str, tmp_path: Path
) -> None:
    """A successful `record --witness` said nothing about the witness; now `cosigned by 1/1 witnesses` on stderr,
    and `1/2` when one of two is down (after its warning). Nothing new: nothing sent, nothing said."""
    gates = tmp_path / "gates.jsonl"
    gates.write_text("\n".join(gate_lines(2)) + "\n")
    key = str(_key_file(tmp_path))
    db = store_target
    up = f"http://127.0.0.1:{served.port}={WITNESS_KEY}"
    status, _, err = run_cli("record", str(gates), "--db", db, "--signing-key", key, "--origin", ORIGIN,
                             "--witness", up)
    assert status == 0, err
    assert err.splitlines()[-1] == "compute-budget: cosigned by 1/1 witnesses"
    more = tmp_path / "more.jsonl"
    more.write_text("\n".join(gate_lines(1, prefix="more")) + "\n")
    down = f"http://127.0.0.1:{_closed_port()}={WITNESS_KEY}"
    status, _, err = run_cli("record", str(more), "--db", db, "--signing-key", key, "--witness", up,
                             "--witness", down, "--witness-timeout", "2")
    assert status == 0, err
    assert err.count("warning: witness") == 1
    assert err.splitlines()[-1] == "compute-budget: cosigned by 1/2 witnesses"
    status, _, err = run_cli("record", str(more), "--db", db, "--signing-key", key, "--witness", up)
    assert status == 0, err
    assert "cosigned by" not in err
