"""Serving the workbench: uvicorn on a socket this module binds first, so a port in use is one clear error."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import uvicorn

from compute_budget.core.log.key_states import KeyStates
from compute_budget.core.log.witness_policy import TlogPolicy
from compute_budget.serving import (
    CONNECTION_LIMIT,
    HEADER_TIMEOUT_SECONDS,
    IDLE_TIMEOUT_SECONDS,
    allowed_hosts,
    bind,
    header_timeout_protocol,
    is_loopback,
)
from compute_budget.web.app import create_app

__all__ = ["bind", "is_loopback", "serve", "server_config"]


def server_config(app: Any, *, header_timeout: float = HEADER_TIMEOUT_SECONDS) -> uvicorn.Config:
    """uvicorn's configuration for the workbench: a header timeout, an idle timeout and a connection limit, so
    slow or silent clients cannot hold its sockets."""
    return uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="on", server_header=False,
        http=header_timeout_protocol(header_timeout), timeout_keep_alive=IDLE_TIMEOUT_SECONDS,
        limit_concurrency=CONNECTION_LIMIT,
    )


def serve(
    target: str | None,
    *,
    host: str,
    port: int,
    trusted_keys: Sequence[str] = (),
    allow_hosts: Sequence[str] = (),
    audit_report: str | None = None,
    witness_keys: Sequence[str] = (),
    witness_quorum: int | None = None,
    auditor_key: str | None = None,
    say: Callable[[str], None] = print,
    key_states: KeyStates | None = None,
    witness_policy: TlogPolicy | None = None,
) -> None:
    """Serve the workbench over the store at `target` (None: the default store) until interrupted.

    The store is opened read-only before the socket is bound, and the socket before the server starts, so
    a missing store or a port in use fails at once with one clear error (`ComputeBudgetError`).
    """
    from compute_budget.store.engine import default_target

    app = create_app(
        target if target is not None else default_target(),
        trusted_keys=trusted_keys,
        allowed_hosts=tuple(allowed_hosts(host, allow_hosts)),
        audit_report=audit_report,
        witness_keys=witness_keys,
        witness_quorum=witness_quorum,
        auditor_key=auditor_key,
        key_states=key_states,
        witness_policy=witness_policy,
    )
    try:
        sock = bind(host, port)
    except BaseException:
        app.workbench.close()
        raise
    shown_host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    actual_port = sock.getsockname()[1]
    say(
        f"serving {app.workbench.display} read-only at http://{shown_host}:{actual_port}/ (Ctrl-C stops it)"
    )
    server = uvicorn.Server(server_config(app))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        app.workbench.close()
