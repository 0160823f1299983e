"""Serving a witness: its key, logs and state opened first, the socket bound next, then uvicorn with a header
timeout, an idle timeout and a connection limit; Ctrl-C and SIGTERM stop it cleanly (uvicorn's handlers)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

import uvicorn

from compute_budget.core.log.cosignature import WitnessSigner
from compute_budget.core.log.note import VerifierKey
from compute_budget.errors import InputError
from compute_budget.serving import (
    CONNECTION_LIMIT,
    HEADER_TIMEOUT_SECONDS,
    IDLE_TIMEOUT_SECONDS,
    bind,
    header_timeout_protocol,
)
from compute_budget.witness.app import allowed_hosts, create_witness_app
from compute_budget.witness.protocol import Witness
from compute_budget.witness.state import WitnessState


def serve_witness(
    signer: WitnessSigner,
    logs: Mapping[str, Sequence[VerifierKey]],
    state_path: str,
    *,
    host: str,
    port: int,
    allow_hosts: Sequence[str] = (),
    say: Callable[[str], None] = print,
) -> None:
    """Serve the witness until interrupted; a port in use or a state file that cannot be used fails first (the
    port is taken before the state file is opened, so a port in use leaves no new state file behind)."""
    for origin in logs:
        problem = signer.origin_problem(origin)
        if problem is not None:
            raise InputError(f"--log: this witness key cannot cosign that log: {problem}")
    sock = bind(host, port)
    try:
        state = WitnessState(state_path)
        try:
            witness = Witness(signer, logs, state, clock=lambda: int(time.time()))
            app = create_witness_app(witness, allowed_hosts(host, allow_hosts))
            shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
            say(
                f"witness {signer.name} ({signer.type_name}) serving {len(logs)} log(s) at "
                f"http://{shown}:{sock.getsockname()[1]}/ (state {state_path}; Ctrl-C stops it)"
            )
            config = uvicorn.Config(
                app, log_level="warning", access_log=False, lifespan="off", server_header=False,
                http=header_timeout_protocol(HEADER_TIMEOUT_SECONDS), timeout_keep_alive=IDLE_TIMEOUT_SECONDS,
                limit_concurrency=CONNECTION_LIMIT,
            )
            uvicorn.Server(config).run(sockets=[sock])
        finally:
            state.close()
    finally:
        sock.close()
