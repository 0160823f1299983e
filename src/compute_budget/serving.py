"""Listening for the HTTP servers (the Workbench and the witness): a socket bound before the server starts, so
a port in use is one clear error, and the loopback test their Host checks start from."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import re
import socket
from collections.abc import AsyncIterator, Iterable, MutableMapping
from typing import Any

from compute_budget.errors import CannotListen, ClientGone


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


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def allowed_hosts(bound: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The Host names a server answers to (port ignored): the loopback names, the address it is bound to, and
    each name given (`--allow-host`); IPv6 addresses in brackets, as a Host header writes them."""
    names = {*LOOPBACK_NAMES, bound.lower(), *(name.lower() for name in extra)}
    return frozenset(f"[{name}]" if ":" in name and not name.startswith("[") else name for name in names)


_HOST_HEADER = re.compile(r"(\[[0-9a-f:.]+\]|[^\[\]:@/\\\s]+)(?::[0-9]{1,5})?")


def host_of(scope: MutableMapping[str, Any]) -> str | None:
    """The name in an ASGI request's Host header, lowercased, without its port (``[::1]:8765`` gives ``[::1]``);
    None when the header is not one exact name or IP literal with at most ``:port`` after it (spec 9.9.6: so
    ``[::1].attacker.example`` is no ``[::1]``), or is missing."""
    for name, value in scope.get("headers", []):
        if name == b"host":
            found = _HOST_HEADER.fullmatch(value.decode("latin-1").lower())
            return found.group(1) if found else None
    return None


async def answer_client_gone(_request: Any, _error: Exception) -> Any:
    """The exception handler both servers register for `ClientGone`: a bare 400 that nobody reads, and no traceback
    in the log (nothing was done: the body never arrived)."""
    from starlette.responses import Response

    return Response(status_code=400)


async def read_body(receive_stream: AsyncIterator[bytes], limit: int) -> bytes | None:
    """A request body read as it streams in, or None as soon as it is over `limit` bytes (nothing more is read).
    `ClientGone` when the client disconnects before the body is complete."""
    from starlette.requests import ClientDisconnect

    body = bytearray()
    try:
        async for chunk in receive_stream:
            body += chunk
            if len(body) > limit:
                return None
    except ClientDisconnect:
        raise ClientGone() from None
    return bytes(body)


HEADER_TIMEOUT_SECONDS = 10.0
IDLE_TIMEOUT_SECONDS = 5
CONNECTION_LIMIT = 100


def header_timeout_protocol(seconds: float) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with a header timeout: a connection that has not sent a whole request head within
    `seconds` of opening (or of its last response) is closed, so slow or silent clients cannot hold sockets."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutProtocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.cycle is not None and not self.cycle.response_complete and self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline = self.loop.call_later(seconds, self._too_slow)

        def _too_slow(self) -> None:
            waiting = self.cycle is None or self.cycle.response_complete
            if waiting and not self.transport.is_closing():
                self.transport.close()

    return HeaderTimeoutProtocol
