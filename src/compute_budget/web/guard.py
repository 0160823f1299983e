"""The workbench's outermost ASGI layer, `Guard`: every response, whatever made it (a page, the API, a static file,
a 404, a 405, a 500), passes through it. It answers any method but GET and HEAD with 405 before routing (but the
one POST that starts an audit), checks the Host header when the server is bound to loopback (so a page on another
site cannot read it through DNS rebinding), and sets a strict Content-Security-Policy and the other security
headers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from starlette.datastructures import MutableHeaders
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from compute_budget.serving import host_of


class Served(Protocol):
    """What the server needs of the application behind the guard: where it serves from, and how to stop it."""

    @property
    def display(self) -> str:
        """The store's location as it may be shown (never a password)."""

    def close(self) -> None:
        """Stop a running audit and release the store."""


CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; font-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}


# Starting an audit changes what the audit page shows: it is the one POST the workbench answers (the rest is read-only).
AUDIT_START_PATHS = ("/audit/run", "/api/audit/run")


class Guard:
    """The outermost ASGI layer: GET and HEAD only, the Host check, and the security headers on everything."""

    def __init__(self, app: ASGIApp, workbench: Served, *, allowed_hosts: Sequence[str] | None) -> None:
        self.app = app
        self.workbench = workbench
        self.allowed_hosts = None if allowed_hosts is None else {host.lower() for host in allowed_hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
                if "cache-control" not in headers:
                    headers["cache-control"] = "no-store"
            await send(message)

        starts_audit = scope["method"] == "POST" and scope.get("path") in AUDIT_START_PATHS
        if scope["method"] not in ("GET", "HEAD") and not starts_audit:
            response: Response = PlainTextResponse(
                "405 Method Not Allowed: the workbench is read-only and answers GET only\n",
                status_code=405,
                headers={"Allow": "GET, HEAD"},
            )
            await response(scope, receive, send_guarded)
            return
        if self.allowed_hosts is not None and host_of(scope) not in self.allowed_hosts:
            response = PlainTextResponse(
                "400 Bad Request: unexpected Host header (the workbench answers only to the address it serves)\n",
                status_code=400,
            )
            await response(scope, receive, send_guarded)
            return
        await self.app(scope, receive, send_guarded)
