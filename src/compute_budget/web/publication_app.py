"""The Workbench over a publication (`serve --tiles`): read-only, with no database, behind the same `Guard` as the
database Workbench (GET and HEAD only but the POST that starts the audit, the Host check, the CSP).

Nothing is shown before it is authenticated: the checkpoint verifies (`publication_watch`), and each row's entry
hashes to its level-0 tile and that tile up to the checkpoint's root (`published_rows`). Rows are addressed by seq
(`/rows/{seq}`); `/decisions/{budget_id}` scans the entry bundles, and says so. No filters and no counts: a
publication has no index to answer them without reading every bundle. The audit page runs `audit --tiles`."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from compute_budget.auditor.report import AuditReport
from compute_budget.auditor.request import AuditRequest
from compute_budget.auditor.scan import run_audit
from compute_budget.errors import BadQuery, ClientGone, ComputeBudgetError
from compute_budget.publication_reader.receipt import scan
from compute_budget.publication_reader.snapshot import Publication, PublicationTarget
from compute_budget.serving import answer_client_gone
from compute_budget.web import published_rows, queries, rows
from compute_budget.web.app import HERE, cross_site
from compute_budget.web.audit_runner import AuditKeys, AuditRunner
from compute_budget.web.guard import Guard
from compute_budget.web.publication_watch import CheckpointWatch, Seen, Trust
from compute_budget.web.verdicts import Banner, Tone

PAGE_ROWS = 50


class PublicationBench:
    """The viewer's state: the checkpoint watch, the audit runner and the templates."""

    def __init__(self, target: PublicationTarget, trust: Trust, *, max_age: float | None = None) -> None:
        self.target = target
        self.watch = (CheckpointWatch(target, trust) if max_age is None
                      else CheckpointWatch(target, trust, max_age=max_age))
        self.display = target.display
        keys = AuditKeys(tuple(key.format() for key in trust.keys), (), None, trust.states, trust.rule)
        self.audits = AuditRunner(self.display, keys, whole=self._audit)
        self.templates = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True,
                                     undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)

    def close(self) -> None:
        """Stop a running audit (there is no store to release)."""
        self.audits.stop()

    def _audit(self, progress: Callable[[int, int], None]) -> AuditReport:
        """`audit --tiles` of the publication as it is published now, with the keys the viewer was given."""
        trust = self.watch.trust
        return run_audit(AuditRequest(
            PublicationTarget(self.target.location, self.target.timeout, self.target.retries),
            on_progress=progress, trusted_keys=trust.keys, expected_origin=trust.origin,
            witness_policy=trust.rule, key_states=trust.states,
        ))

    def seen(self) -> tuple[Seen, Publication]:
        """What is shown now (the checkpoint re-read when due) and the publication pinned at its good tree."""
        seen = self.watch.current()
        return seen, self.watch.publication(seen)

    def render(self, name: str, seen: Seen, status_code: int = 200, **context: Any) -> HTMLResponse:
        """A page from its template, opening with the alarm (and an outage) when there is one."""
        html = self.templates.get_template(name).render(
            store_display=self.display, source_label="Publication", banners=banners(seen), good=seen.good,
            **context)
        return HTMLResponse(html, status_code=status_code)

    def not_found(self, seen: Seen, message: str) -> Response:
        """The 404 page."""
        return self.render("error.html", seen, 404, nav=None, title="Not found", message=message)

    # -- decisions --------------------------------------------------------------------------------------------

    def _newest(self, request: Request) -> tuple[Seen, list[published_rows.PublishedRow], int | None] | str:
        try:
            before = queries.int_param(request.query_params, "before_seq", low=1, high=queries.SEQ_LIMIT)
        except BadQuery as error:
            return str(error)
        seen, publication = self.seen()
        return seen, published_rows.newest(publication, before, PAGE_ROWS), before

    def decisions(self, request: Request) -> Response:
        found = self._newest(request)
        if isinstance(found, str):
            seen = self.watch.current()
            return self.render("error.html", seen, 400, nav="decisions", title="Bad request", message=found)
        seen, listed, before = found
        oldest = listed[-1].seq if listed else None
        newer = None if before is None or before > seen.good.size else before + PAGE_ROWS
        return self.render(
            "publication_decisions.html", seen, nav="decisions", rows=listed, before=before,
            older_href=f"/?before_seq={oldest}" if oldest is not None and oldest > 1 else None,
            newer_href=None if newer is None else ("/" if newer > seen.good.size else f"/?before_seq={newer}"),
            detail=_shown,
        )

    def api_decisions(self, request: Request) -> Response:
        found = self._newest(request)
        if isinstance(found, str):
            return JSONResponse({"error": found}, status_code=400)
        seen, listed, _ = found
        oldest = listed[-1].seq if listed else None
        return JSONResponse({"tree_size": seen.good.size, "alarm": seen.alarm,
                             "decisions": [_row_json(row) for row in listed],
                             "next_before_seq": oldest if oldest is not None and oldest > 1 else None})

    # -- one row ----------------------------------------------------------------------------------------------

    def _row(self, seq_text: str) -> tuple[Seen, Publication, published_rows.PublishedRow | None]:
        seen, publication = self.seen()
        seq = int(seq_text) if seq_text.isdigit() and len(seq_text) <= 19 else 0
        return seen, publication, published_rows.at(publication, seq)

    def row(self, request: Request) -> Response:
        seen, publication, found = self._row(str(request.path_params["seq"]))
        if found is None:
            return self.not_found(seen, f"No row {request.path_params['seq']} in the published tree: it holds rows "
                                        f"1..{seen.good.size}.")
        return self._row_page(seen, publication, found, scanned=None)

    def _row_page(self, seen: Seen, publication: Publication, found: published_rows.PublishedRow,
                  scanned: str | None) -> Response:
        bundle, why = published_rows.receipt(publication, found)
        return self.render(
            "publication_row.html", seen, nav="decisions", row=found, shown=_shown(found), scanned=scanned,
            receipt_json=bundle.to_json() if bundle is not None else None,
            receipt_tlog=published_rows.tlog_proof(bundle) if bundle is not None else None, no_receipt=why,
            last=found.seq == seen.good.size,
        )

    def api_row(self, request: Request) -> Response:
        seen, publication, found = self._row(str(request.path_params["seq"]))
        if found is None:
            return JSONResponse({"error": f"no row {request.path_params['seq']} in the published tree (rows "
                                          f"1..{seen.good.size})"}, status_code=404)
        bundle, why = published_rows.receipt(publication, found)
        return JSONResponse({
            **_row_json(found), "tree_size": seen.good.size, "alarm": seen.alarm,
            "receipt": bundle.to_dict() if bundle is not None else None,
            "tlog_proof": published_rows.tlog_proof(bundle) if bundle is not None else None,
            "no_receipt": why,
        })

    def decision(self, request: Request) -> Response:
        """`/decisions/{budget_id}`: a scan of every entry bundle for the budget_id (or a unique prefix)."""
        wanted = str(request.path_params["budget_id"]).lower()
        seen, publication = self.seen()
        if not published_rows.is_budget_id_prefix(wanted):
            return self.not_found(seen, f"{wanted[:80]!r} is not a budget_id (8 to 64 hex digits).")
        try:
            found, bundles = scan(publication, wanted)
        except ComputeBudgetError as error:
            return self.render("error.html", seen, 503, nav=None, title="The publication cannot be read",
                               message=str(error))
        said = f"found by scanning {bundles} entry bundle(s) of the publication, in order (a publication has no index)"
        if not found:
            return self.not_found(seen, f"No decision with budget_id {wanted} in the published tree of size "
                                        f"{seen.good.size}: scanned all {bundles} entry bundle(s).")
        if len(found) > 1:
            return self.not_found(seen, f"Prefix {wanted} names more than one published decision (rows "
                                        f"{found[0]} and {found[1]}): give more of the budget_id.")
        row = published_rows.at(publication, found[0])
        assert row is not None  # found in this tree
        return self._row_page(seen, publication, row, scanned=said)

    # -- the checkpoint -----------------------------------------------------------------------------------------

    def checkpoints(self, request: Request) -> Response:
        seen = self.watch.current()
        trust = self.watch.trust
        return self.render(
            "publication_checkpoint.html", seen, nav="checkpoints", root=_b64(seen.good.root),
            keys=[(key.format(), trust.states.of_key(key).words()) for key in trust.keys],
            policy=AuditKeys(policy=trust.rule).policy_in_words(), origin=trust.origin,
        )

    def api_checkpoints(self, request: Request) -> Response:
        seen = self.watch.current()
        good = seen.good
        return JSONResponse({
            "origin": good.checkpoint.origin, "tree_size": good.size, "root": _b64(good.root),
            "chain_hash": good.checkpoint.chain_hash, "note": good.note,
            "signers": [signer.to_dict() for signer in good.signers if not signer.cosigner],
            "cosigners": [signer.to_dict() for signer in good.signers if signer.cosigner],
            "alarm": seen.alarm, "unreadable": seen.unreadable,
        })

    # -- audit ------------------------------------------------------------------------------------------------

    def audit(self, request: Request) -> Response:
        seen = self.watch.current()
        run = self.audits.latest()
        return self.render("publication_audit.html", seen, nav="audit", run=run,
                           refresh=run is not None and not run.finished, row_href=_row_href)

    def api_audit(self, request: Request) -> Response:
        run = self.audits.latest()
        return JSONResponse({"audit": None if run is None else run.to_dict()})

    def _start(self, request: Request) -> tuple[int, str | None]:
        refused = cross_site(request)
        if refused is not None:
            return 403, refused
        if self.audits.start(None, self.watch.current().good.size) is None:
            return 409, "an audit is already running: wait for it to finish (its progress is on the audit page)"
        return 202, None

    async def audit_run(self, request: Request) -> Response:
        """POST /audit/run: start `audit --tiles`, then show the audit page."""
        status, message = await run_in_threadpool(self._start, request)
        if message is None:
            return RedirectResponse("/audit", status_code=303)
        title = "An audit is already running" if status == 409 else "Bad request"
        seen = self.watch.current()
        return self.render("error.html", seen, status, nav="audit", title=title, message=message, back="/audit")

    async def api_audit_run(self, request: Request) -> Response:
        """POST /api/audit/run: start `audit --tiles`."""
        status, message = await run_in_threadpool(self._start, request)
        if message is not None:
            return JSONResponse({"error": message}, status_code=status)
        run = self.audits.latest()
        return JSONResponse({"audit": None if run is None else run.to_dict()}, status_code=202)


def banners(seen: Seen) -> list[Banner]:
    """The alarm (red), then a re-read that failed (grey: an outage is not evidence)."""
    found = [Banner(Tone.RED, seen.alarm)] if seen.alarm is not None else []
    if seen.unreadable is not None:
        found.append(Banner(Tone.GREY, f"{seen.unreadable}; showing the checkpoint of size {seen.good.size} "
                                       "verified before."))
    return found


def _shown(row: published_rows.PublishedRow) -> dict[str, Any]:
    """An authenticated row's fields for a page (empty when not shown), with its status's CSS class."""
    fields = row.fields()
    if fields:
        fields["status_class"] = rows.status_class(fields.get("status")) if row.holds else rows.TAMPERED_CLASS
        fields["limits"] = "/".join(str(fields.get(name)) for name in rows.LIMIT_NAMES)
    return fields


def _row_json(row: published_rows.PublishedRow) -> dict[str, Any]:
    return {"seq": row.seq, "shown": row.entry is not None, "holds": row.holds, "problem": row.problem,
            "published_mismatch": row.mismatch, "row": row.fields() or None,
            "differences": [finding.to_dict() for finding in row.findings]}


def _row_href(seq: object) -> str | None:
    return f"/rows/{seq}" if type(seq) is int and seq > 0 else None


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def create_publication_app(
    target: PublicationTarget, trust: Trust, *, allowed_hosts: Sequence[str] | None = None,
    max_age: float | None = None,
) -> Guard:
    """The viewer over the publication at `target` (its checkpoint read and verified now: one that cannot be read
    or does not verify raises here, before any server starts). `allowed_hosts`: the Host names to answer (None:
    any). `max_age`: how often the checkpoint may be re-read (default: every 60 s)."""
    bench = PublicationBench(target, trust, max_age=max_age)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            bench.close()

    app = Starlette(routes=_routes(bench), lifespan=lifespan, exception_handlers=_handlers(bench))
    return Guard(app, bench, allowed_hosts=allowed_hosts)


def _routes(bench: PublicationBench) -> list[Route | Mount]:
    def get(path: str, endpoint: Callable[[Request], Response]) -> Route:
        return Route(path, endpoint, methods=["GET"])

    return [
        get("/", bench.decisions),
        get("/rows/{seq}", bench.row),
        get("/decisions/{budget_id}", bench.decision),
        get("/checkpoints", bench.checkpoints),
        get("/audit", bench.audit),
        Route("/audit/run", bench.audit_run, methods=["POST"]),
        get("/api/decisions", bench.api_decisions),
        get("/api/rows/{seq}", bench.api_row),
        get("/api/checkpoints", bench.api_checkpoints),
        get("/api/audit", bench.api_audit),
        Route("/api/audit/run", bench.api_audit_run, methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=HERE / "static")),
    ]


def _handlers(bench: PublicationBench) -> dict[Any, Callable[[Request, Exception], Any]]:
    """An HTTP error and a publication that cannot be read as a page (or, under /api/, as JSON)."""

    async def http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": error.detail}, status_code=error.status_code)
        seen = bench.watch.current()
        if error.status_code == 404:
            return bench.not_found(seen, "There is no page at this address.")
        return bench.render("error.html", seen, error.status_code, nav=None, title=str(error.detail), message="")

    async def unreadable(request: Request, error: Exception) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": str(error)}, status_code=503)
        return bench.render("error.html", bench.watch.current(), 503, nav=None,
                            title="The publication cannot be read", message=str(error))

    return {HTTPException: http_error, ComputeBudgetError: unreadable, ClientGone: answer_client_gone}
