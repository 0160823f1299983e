"""Serving the workbench: uvicorn on a socket this module binds first, so a port in use is one clear error."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import uvicorn

from compute_budget.core.log.key_states import KeyStates
from compute_budget.core.log.witness_policy import TlogPolicy
from compute_budget.publication_reader.snapshot import PublicationTarget
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
from compute_budget.web.guard import Guard
from compute_budget.web.publication_app import create_publication_app
from compute_budget.web.publication_watch import Trust

__all__ = ["bind", "is_loopback", "serve", "serve_publication", "server_config"]


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
    _run(app, host, port, say)


def serve_publication(
    target: PublicationTarget, trust: Trust, *, host: str, port: int, allow_hosts: Sequence[str] = (),
    say: Callable[[str], None] = print,
) -> None:
    """Serve the viewer over the publication at `target` (`serve --tiles`) until interrupted: its checkpoint is
    read and verified before the socket is bound (`ComputeBudgetError`: one clear error, nothing served)."""
    app = create_publication_app(target, trust, allowed_hosts=tuple(allowed_hosts(host, allow_hosts)))
    _run(app, host, port, say)


def _run(app: Guard, host: str, port: int, say: Callable[[str], None]) -> None:
    """Bind the socket (a port in use is one clear error), say where, and serve until interrupted."""
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
