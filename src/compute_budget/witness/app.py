"""The witness's HTTP face (Starlette): `POST /add-checkpoint` and `GET /latest`, behind a Host allow-list and a
64 KiB body cap. The state's transaction runs in a worker thread, one request at a time."""

from __future__ import annotations

import threading

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from compute_budget.errors import ClientGone
from compute_budget.serving import allowed_hosts, answer_client_gone, host_of, read_body
from compute_budget.witness.protocol import MAX_BODY_BYTES, TEXT, Answer, Witness

__all__ = ["HostGuard", "allowed_hosts", "create_witness_app"]

class HostGuard:
    """Answer 421 to a request whose Host is not one the witness serves (DNS rebinding reaches nothing)."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str]) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and host_of(scope) not in self.hosts:
            response = Response("421 Misdirected Request: unexpected Host header\n", 421, media_type=TEXT)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def create_witness_app(witness: Witness, hosts: frozenset[str]) -> ASGIApp:
    """The ASGI app of `witness`, answering only to `hosts`."""
    lock = threading.Lock()  # one state transaction at a time in this process (BEGIN IMMEDIATE orders processes)

    def locked_add(body: bytes) -> Answer:
        with lock:
            return witness.add_checkpoint(body)

    def locked_latest(origin: str) -> Answer:
        with lock:
            return witness.latest(origin)

    async def add_checkpoint(request: Request) -> Response:
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
            return _response(Answer(413, f"the body is over {MAX_BODY_BYTES} bytes\n"))
        body = await read_body(request.stream(), MAX_BODY_BYTES)  # ClientGone: see the app's exception handlers
        if body is None:
            return _response(Answer(413, f"the body is over {MAX_BODY_BYTES} bytes\n"))
        return _response(await run_in_threadpool(locked_add, body))

    async def latest(request: Request) -> Response:
        origin = request.query_params.get("origin")
        if not origin:
            return _response(Answer(400, "give the log's origin: /latest?origin=ORIGIN\n"))
        return _response(await run_in_threadpool(locked_latest, origin))

    app = Starlette(
        routes=[
            Route("/add-checkpoint", add_checkpoint, methods=["POST"]),
            Route("/latest", latest, methods=["GET"]),
        ],
        # A submitter gone before its body arrived: nothing checked or stored, nobody to answer.
        exception_handlers={ClientGone: answer_client_gone},
    )
    return HostGuard(app, hosts)


def _response(answer: Answer) -> Response:
    # The content type exactly as the protocol names it (Starlette would add a charset to text/x.tlog.size).
    return Response(answer.body.encode("utf-8"), answer.status, headers={"content-type": answer.content_type})
