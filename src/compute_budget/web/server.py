"""Serving the workbench: uvicorn on a socket this module binds first, so a port in use is one clear error."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import uvicorn

from compute_budget.serving import CannotListen, bind, is_loopback
from compute_budget.web.app import create_app, loopback_hosts

__all__ = ["CannotListen", "bind", "is_loopback", "serve"]


def serve(
    target: str | None,
    *,
    host: str,
    port: int,
    trusted_keys: Sequence[str] = (),
    say: Callable[[str], None] = print,
) -> None:
    """Serve the workbench over the store at `target` (None: the default store) until interrupted.

    The store is opened read-only before the socket is bound, and the socket before the server starts, so
    a missing store or a port in use fails at once with one clear error (`ComputeBudgetError`).
    """
    from compute_budget.store.backend import default_target

    app = create_app(
        target if target is not None else default_target(),
        trusted_keys=trusted_keys,
        allowed_hosts=loopback_hosts(host) if is_loopback(host) else None,
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
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", server_header=False)
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        app.workbench.close()
