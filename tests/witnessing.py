"""Shared pieces of the witness tests: a log key, a witness key, two trees that fork after 5 leaves, checkpoint
notes and add-checkpoint bodies, and a witness served over real HTTP on 127.0.0.1 (the `served` fixture)."""

from __future__ import annotations

import base64
import contextlib
import http.client
import http.server
import itertools
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvicorn

from compute_budget.core.log.cosignature import WitnessSigner
from compute_budget.core.log.merkle import MemoryTree, consistency_proof, leaf_hash, root_from_reader
from compute_budget.core.log.note import SignerKey, VerifierKey, format_checkpoint, sign_note
from compute_budget.serving import bind, header_timeout_protocol
from compute_budget.witness.app import allowed_hosts, create_witness_app
from compute_budget.witness.protocol import Witness
from compute_budget.witness.state import WitnessState

ORIGIN = "example.org/log"
LOG = SignerKey.from_seed(ORIGIN, bytes(range(32)))
OTHER = SignerKey.from_seed("example.org/other", bytes(range(1, 33)))
WITNESS = WitnessSigner.from_seed("witness.example/w1", bytes(32))
TREE = MemoryTree(leaf_hash(b"row %d" % index) for index in range(64))
FORK = MemoryTree(leaf_hash(b"row %d" % index if index < 5 else b"forged %d" % index) for index in range(64))
WRITER_KEY = LOG.verifier().format()  # the writer's verifier key, as --trusted-key takes it
WITNESS_KEY = WITNESS.verifier().format()


@pytest.fixture
def writer(tmp_path: Path) -> Path:
    """The writer's key file: the log key (`LOG`) the witnesses trust for ORIGIN (every module gets it through
    conftest)."""
    key = tmp_path / "writer.key"
    key.write_text(LOG.format() + "\n")
    key.chmod(0o600)
    return key


def note(size: int, *, tree: MemoryTree = TREE, origin: str = ORIGIN, signer: SignerKey = LOG) -> str:
    """A checkpoint note of the first `size` leaves of `tree`, signed by `signer`."""
    root = root_from_reader(tree, size)
    return sign_note(format_checkpoint(origin, size, root, "ab" * 32), signer)


def body(old: int, signed: str, *, tree: MemoryTree = TREE, proof: list[bytes] | None = None) -> bytes:
    """An add-checkpoint body from `old` to the note's size, with the consistency proof from `tree`."""
    size = int(signed.split("\n")[1])
    if proof is None:
        proof = consistency_proof(tree, old, size) if 0 < old < size else []
    lines = "".join(base64.b64encode(item).decode() + "\n" for item in proof)
    return f"old {old}\n{lines}\n{signed}".encode()


@dataclass
class Served:
    port: int
    state: WitnessState

    def post(self, payload: bytes, *, host: str | None = None) -> tuple[int, str, str]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        headers = {"Host": host} if host else {}
        connection.request("POST", "/add-checkpoint", body=payload, headers=headers)
        response = connection.getresponse()
        answer = (response.status, response.read().decode(), response.getheader("content-type", ""))
        connection.close()
        return answer

    def get(self, path: str) -> tuple[int, str, str]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        connection.request("GET", path)
        response = connection.getresponse()
        answer = (response.status, response.read().decode(), response.getheader("content-type", ""))
        connection.close()
        return answer


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """A witness of two logs on a free port of 127.0.0.1, served by uvicorn in a thread."""
    with witness_in_thread(tmp_path / "witness.db", WITNESS, LOGS) as witness:
        yield witness


# The logs the witnesses of `served` and `witness_servers` follow: origin -> the writer keys it trusts.
LOGS = {ORIGIN: [LOG.verifier()], "example.org/other": [OTHER.verifier()]}


@contextmanager
def witness_in_thread(
    state_path: Path, signer: WitnessSigner, logs: dict[str, list[VerifierKey]],
    clock: Callable[[], int] = lambda: int(time.time()),
) -> Iterator[Served]:
    """A witness of `logs` keeping its state in `state_path`, served over real HTTP on a free port of 127.0.0.1 by
    uvicorn in a thread (no process to start: a recipe's own witness for a writer key the test made); stopped
    after."""
    state = WitnessState(state_path)
    witness = Witness(signer, logs, state, clock=clock)
    config = uvicorn.Config(
        create_witness_app(witness, allowed_hosts("127.0.0.1", ())), log_level="warning", access_log=False,
        lifespan="off", http=header_timeout_protocol(1.0), timeout_keep_alive=1, limit_concurrency=50,
    )
    try:
        with serving_in_thread(config, "127.0.0.1") as port:
            yield Served(port, state)
    finally:
        state.close()


WitnessFactory = Callable[..., Served]

# How far a late witness's clock runs behind the real time: its word is already this old when it is given, so a test
# of `--max-witness-age 0` needs no sleep for the clock to move, while the default maximum age (a day) still finds
# the same word fresh.
LATE_BY = 5


def late_clock() -> int:
    """A witness's clock `LATE_BY` seconds behind the real time (for `witness_servers`' `start(..., clock=)`)."""
    return int(time.time()) - LATE_BY


@pytest.fixture
def witness_servers(tmp_path: Path) -> Iterator[WitnessFactory]:
    """Start witnesses of the two logs over real HTTP with a given signer key (an ML-DSA-44 one, say) and clock
    (default: the real time); yields a factory of their `Served`, and stops them all after the test."""
    numbers = itertools.count()
    with contextlib.ExitStack() as stack:

        def start(signer: WitnessSigner, clock: Callable[[], int] = lambda: int(time.time())) -> Served:
            state_path = tmp_path / f"witness-{next(numbers)}.db"
            return stack.enter_context(witness_in_thread(state_path, signer, LOGS, clock))

        yield start


@contextmanager
def serving_in_thread(config: uvicorn.Config, host: str) -> Iterator[int]:
    """Serve `config`'s app with uvicorn in a thread on a free port of `host`; yields the port, stops it after."""
    sock = bind(host, 0)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started
    try:
        yield int(sock.getsockname()[1])
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


HandlerFactory = Callable[[type[http.server.BaseHTTPRequestHandler]], str]


class _StandInServer(http.server.ThreadingHTTPServer):
    """A stand-in's server: a client that hangs up on a slow or misbehaving stand-in is what the test wanted, not an
    error to print (its handler thread may wake after the test, when the traceback would land in another test's
    captured stderr)."""

    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        if isinstance(sys.exc_info()[1], BrokenPipeError | ConnectionResetError):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


@pytest.fixture
def http_servers() -> Iterator[HandlerFactory]:
    """Start plain HTTP servers on 127.0.0.1 with a given handler class (stand-ins for a witness: an impostor, a
    relay, one that misbehaves); yields a factory of their URLs, and stops them all after the test."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(handler: type[http.server.BaseHTTPRequestHandler]) -> str:
        server = _StandInServer(("127.0.0.1", 0), handler)
        # a short poll: shutdown() waits for the loop to look (0.5 s by default, in every test's teardown)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    """A loopback port nothing listens on now (for a server the test starts itself)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def witness_process(command: str, cwd: Path, port: int) -> Iterator[None]:
    """One `witness serve` process (`command`, run in `cwd`), started and waited for until `port` answers; stopped
    after."""
    with witness_processes([(command, port)], cwd):
        yield


@contextmanager
def witness_processes(served: Sequence[tuple[str, int]], cwd: Path) -> Iterator[None]:
    """`witness serve` processes, each a (command, port) run in `cwd`: all started first, so that their start-ups
    overlap, then each waited for until its port answers; all stopped after."""
    bin_folder = str(Path(sys.executable).parent)  # this environment's compute-budget script
    environment = {**os.environ, "PATH": bin_folder + os.pathsep + os.environ.get("PATH", "")}
    servers: list[tuple[subprocess.Popen[bytes], int, Path]] = []
    try:
        for command, port in served:
            log = cwd / f"witness-{port}.log"
            with log.open("w") as errors:
                servers.append((subprocess.Popen(["bash", "-c", "exec " + command], cwd=cwd, env=environment,
                                                 stdout=subprocess.DEVNULL, stderr=errors), port, log))
        deadline = time.monotonic() + 30
        for server, port, log in servers:
            while time.monotonic() < deadline:
                with socket.socket() as client:
                    if client.connect_ex(("127.0.0.1", port)) == 0:
                        break
                assert server.poll() is None, log.read_text()
                time.sleep(0.05)
        yield
    finally:
        for server, _, _ in servers:
            server.terminate()
        for server, _, _ in servers:
            server.wait(10)
