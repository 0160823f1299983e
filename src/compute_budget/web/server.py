"""Serving the workbench: uvicorn on a socket this module binds first, so a port in use is one clear error."""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Callable, Sequence

import uvicorn

from compute_budget.errors import ComputeBudgetError
from compute_budget.web.app import create_app, loopback_hosts


class CannotListen(ComputeBudgetError):
    """The workbench cannot listen on the address asked for (the port is in use, or the host is unknown)."""


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port; raises `CannotListen` saying why not."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as error:
        raise CannotListen(f"cannot serve on host {host!r}: {error.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise CannotListen(
                f"port {port} on {host} is already in use: stop what uses it, or pick another with --port"
            ) from None
        raise CannotListen(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    sock.set_inheritable(True)
    return sock


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
