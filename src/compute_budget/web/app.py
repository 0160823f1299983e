"""The workbench's routes: a read-only Starlette application over one store, each page with a JSON twin.

Every response, whatever made it (a page, the API, a static file, a 404, a 405, a 500), passes through
`Guard`, which answers any method but GET and HEAD with 405 before routing, checks the Host header when the
server is bound to loopback (so a page on another site cannot read it through DNS rebinding), and sets a
strict Content-Security-Policy and the other security headers. Templates are autoescaped; no template marks
gate data safe.
"""

from __future__ import annotations

import contextlib
import urllib.parse
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.key_states import KeyStates
from compute_budget.core.log.witness_policy import TlogPolicy
from compute_budget.core.policy.types import ComputeBudgetStatus
from compute_budget.errors import BadQuery, ClientGone, ComputeBudgetError
from compute_budget.serving import allowed_hosts, answer_client_gone, read_body
from compute_budget.store import BudgetStore
from compute_budget.store.browse import DecisionFilter, Page
from compute_budget.web import charts, checkpoints, decision, queries, rows, verdicts
from compute_budget.web.audit_runner import AuditKeys, AuditRunner
from compute_budget.web.guard import CONTENT_SECURITY_POLICY, SECURITY_HEADERS, Guard

__all__ = ["CONTENT_SECURITY_POLICY", "SECURITY_HEADERS", "Guard", "Workbench", "create_app", "loopback_hosts"]

HERE = Path(__file__).resolve().parent


class Workbench:
    """The application's state: the store (read-only), the count cache, the audit runner, the live guard check,
    the templates."""

    def __init__(
        self, target: str, trusted_keys: Sequence[str], audit_report: str | None = None, *,
        witness_keys: Sequence[str] = (), witness_quorum: int | None = None, auditor_key: str | None = None,
        key_states: KeyStates | None = None, witness_policy: TlogPolicy | None = None,
    ) -> None:
        from compute_budget.keys.key_files import verifier_key

        self.audit_report = audit_report
        # Read before the store opens: a key that cannot be used is one error before anything is served.
        self.auditor_key = verifier_key(auditor_key, what="auditor key") if auditor_key is not None else None
        self.store = BudgetStore.open(target, readonly=True)
        self.display = self.store.location.display
        self.trusted_keys = tuple(trusted_keys)
        if witness_policy is not None and witness_policy.logs:  # its log keys are writers too, named by the origin
            try:
                logs = witness_policy.store_log_keys(self.store.origin() or "")
            except BaseException:
                self.store.close()  # refused before anything is served: nothing left open
                raise
            self.trusted_keys += tuple(key.format() for key in logs if key.format() not in self.trusted_keys)
        self.key_states = key_states  # each key's state (retired, revoked) on the checkpoints page
        self.counts = charts.CountCache()
        self.audits = AuditRunner(target, AuditKeys(self.trusted_keys, tuple(witness_keys), witness_quorum,
                                                    key_states or KeyStates(), witness_policy))
        self.guard = verdicts.GuardWatch(self.store)
        self.report = verdicts.ReportWatch(audit_report, self.auditor_key, self.store)
        self.templates = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=True,  # every template, every value: gate-supplied text is always escaped
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )

    def close(self) -> None:
        """Stop a running audit and release the store."""
        self.audits.stop()
        self.store.close()

    def render(self, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        """A page from its template, with what every page leads with: a broken guard, then the audit report."""
        html = self.templates.get_template(name).render(store_display=self.display, banners=self.banners(),
                                                        **context)
        return HTMLResponse(html, status_code=status_code)

    def banners(self) -> list[verdicts.Banner]:
        """The banners every page opens with: the guard's (checked live), then the audit report's."""
        guard = verdicts.guard_banner(self.guard.problems(), self.display, self.guard.repair_problems())
        report = self.report.banner()
        if guard is not None and report is not None:
            report = verdicts.under_broken_guard(report)
        return [banner for banner in (guard, report) if banner is not None]

    # -- decisions ---------------------------------------------------------------------------------------

    def _page(self, query: queries.Query) -> tuple[Page, int, Counter[tuple[str, str]]]:
        head_seq, counts = self.counts.get(self.store)
        known = charts.match_count(counts, queries.Query(queries.only_status_reason(query.where), query.limit))
        if known == 0:  # no row has this status or reason: skip a query that would scan the whole table
            return Page([], None, None, False), head_seq, counts
        return self.store.page(query.where, limit=query.limit), head_seq, counts

    def decisions(self, request: Request) -> Response:
        query = self._query(request)
        if isinstance(query, Response):
            return query
        page, head_seq, counts = self._page(query)
        listed = rows.checked(page.rows, self.store, query)
        return self.render(
            "decisions.html",
            nav="decisions",
            query=query,
            rows=listed,
            head_seq=head_seq,
            charts=charts.charts(counts, query),
            chart_images=(
                [(query.href(f"/charts/{which}.svg"), f"Decisions by {which}, under the filters")
                 for which in ("status", "reason")]
                if charts.needs_own_counts(query)
                else None
            ),
            chart_counts=sorted(counts.items()),
            matches=charts.match_count(counts, query),
            statuses=[status.value for status in ComputeBudgetStatus],
            reasons=sorted({reason for _, reason in counts}),
            older_href=query.href(before_seq=page.next_before_seq) if page.next_before_seq is not None else None,
            newer_href=(
                query.href(before_seq=None)
                if page.newer_is_first
                else query.href(before_seq=page.newer_before_seq)
                if page.newer_before_seq is not None
                else None
            ),
            newest_href=query.href(before_seq=None) if query.where.before_seq is not None else None,
            clear_href="/",
        )

    def chart(self, request: Request) -> Response:
        """`/charts/{status,reason}.svg`: a chart counted under every filter of the query (loaded as an image)."""
        which = str(request.path_params["which"])
        query = self._query(request)
        if isinstance(query, Response):
            return query
        if which not in ("status", "reason"):
            return self.not_found()
        where = query.where
        rest = DecisionFilter(
            gate_decision_id=where.gate_decision_id, policy_version=where.policy_version,
            after_seq=where.after_seq, before_seq=where.before_seq,
        )
        counts: Counter[tuple[str, str]] = Counter(self.store.filtered_counts(rest))
        chart = charts.charts(counts, query)[0 if which == "status" else 1]
        return Response(charts.chart_svg(chart), media_type="image/svg+xml")

    def api_decisions(self, request: Request) -> Response:
        query = self._query(request, api=True)
        if isinstance(query, Response):
            return query
        if query.where.after_seq is not None and query.where.before_seq is None:
            return self._api_forward(query)
        page, head_seq, counts = self._page(query)
        return JSONResponse(
            {
                "decisions": rows.with_holds(page.rows, self.store),
                "next_before_seq": page.next_before_seq,
                "head_seq": head_seq,
                "counts": charts.counts_by_column(counts),
                "guard_problems": list(self.guard.problems()),
            }
        )

    def _api_forward(self, query: queries.Query) -> Response:
        """`/api/decisions?after_seq=A&limit=N`: the first N rows after A, oldest first, and `next_after_seq`."""
        found, following = self.store.forward_page(query.where, limit=query.limit)
        return JSONResponse(
            {
                "decisions": rows.with_holds(found, self.store),
                "next_after_seq": following,
                "head_seq": self.store.head_seq(),
                "guard_problems": list(self.guard.problems()),
            }
        )

    def _query(self, request: Request, *, api: bool = False) -> queries.Query | Response:
        try:
            return queries.parse_query(request.query_params)
        except BadQuery as error:
            if api:
                return JSONResponse({"error": str(error)}, status_code=400)
            return self.render("error.html", 400, nav="decisions", title="Bad request", message=str(error))

    def decision(self, request: Request) -> Response:
        budget_id = str(request.path_params["budget_id"])
        found = decision.detail(self.store, budget_id)
        if found is None:
            return self.not_found(f"No decision with budget_id {budget_id} is stored in this store.")
        return self.render("decision.html", nav="decisions", d=found)

    def api_decision(self, request: Request) -> Response:
        budget_id = str(request.path_params["budget_id"])
        found = decision.detail(self.store, budget_id)
        if found is None:
            return JSONResponse({"error": f"no decision with budget_id {budget_id}"}, status_code=404)
        return JSONResponse(
            {
                **found.raw,
                "rederived": found.rederived.to_dict(),
                "chain": {
                    "previous": rows.link_dict(found.previous),
                    "next": rows.link_dict(found.next),
                },
            }
        )

    # -- audit ---------------------------------------------------------------------------------------------

    def audit(self, request: Request) -> Response:
        run = self.audits.latest()
        head_seq = self.store.head_seq()
        return self.render(
            "audit.html",
            nav="audit",
            run=run,
            head_seq=head_seq,
            keys=self.audits.keys,
            refresh=run is not None and not run.finished,
            is_budget_id=queries.is_budget_id,
            detail_href=rows.detail_href,
        )

    def api_audit(self, request: Request) -> Response:
        run = self.audits.latest()
        return JSONResponse({"audit": None if run is None else run.to_dict()})

    def _start_audit(self, request: Request, params: Mapping[str, str]) -> tuple[int, str | None]:
        """Start an audit of the range in `params` (the form's fields): (HTTP status, message or None)."""
        refused = cross_site(request)
        if refused is not None:
            return 403, refused
        head_seq = self.store.head_seq()
        try:
            after = queries.int_param(params, "after_seq", low=0, high=queries.SEQ_LIMIT) or 0
            through = queries.int_param(params, "through_seq", low=0, high=queries.SEQ_LIMIT)
        except BadQuery as error:
            return 400, str(error)
        through = head_seq if through is None else through
        if after > through:
            return 400, f"after_seq {after} is past through_seq {through}: the range holds no row"
        start: Checkpoint | None = None
        if after > 0:
            link = self.store.link_at_seq(after)
            if link is None or not isinstance(link.chain_hash, str) or not queries.is_budget_id(link.chain_hash):
                return 400, f"no readable row at seq {after} to start from: audit from seq 0 instead"
            start = Checkpoint(after, link.chain_hash, link.budget_id if isinstance(link.budget_id, str) else None)
        if self.audits.start(start, through) is None:
            return 409, "an audit is already running: wait for it to finish (its progress is on the audit page)"
        return 202, None

    async def audit_run(self, request: Request) -> Response:
        """POST /audit/run: start an audit from the audit page's form, then show the audit page."""
        status, message = await run_in_threadpool(self._start_audit, request, await _fields(request))
        if message is None:
            return RedirectResponse("/audit", status_code=303)
        title = "An audit is already running" if status == 409 else "Bad request"
        return self.render("error.html", status, nav="audit", title=title, message=message, back="/audit")

    async def api_audit_run(self, request: Request) -> Response:
        """POST /api/audit/run: start an audit (fields in the query or a form body)."""
        status, message = await run_in_threadpool(self._start_audit, request, await _fields(request))
        if message is not None:
            return JSONResponse({"error": message}, status_code=status)
        run = self.audits.latest()
        return JSONResponse({"audit": None if run is None else run.to_dict()}, status_code=202)

    # -- checkpoints ---------------------------------------------------------------------------------------

    def _checkpoints(self) -> checkpoints.Checkpoints:
        return checkpoints.checkpoints(self.store, self.trusted_keys, self.audit_report, self._checked(),
                                       self._withheld(), self.key_states)

    def checkpoints(self, request: Request) -> Response:
        found = self._checkpoints()
        common, notes = checkpoints.said_once(found.signed.items)
        return self.render("checkpoints.html", nav="checkpoints", c=found, policy=self.audits.keys.policy_in_words(),
                           common=common, rows=list(zip(found.signed.items, notes, strict=True)))

    def _withheld(self) -> str | None:
        """Why no checkpoint of the head may be offered to keep now, or None: a broken guard, a head row that does
        not hold (checked live), or rows this server's last audit found not to hold."""
        problems = self.guard.problems()
        if problems:
            return f"the store's append-only guard is broken ({problems[0]})"
        head = self.store.head_seq()
        link = self.store.link_at_seq(head) if head else None
        if link is not None:
            check = self.store.check(link.budget_id) if isinstance(link.budget_id, str) else None
            if check is None or not check.holds:
                kinds = ", ".join(dict.fromkeys(finding.kind.value for finding in check.findings)) if check else ""
                return f"the head row (seq {head}) does not hold ({kinds or 'it cannot be read'})"
        run = self.audits.latest()
        if run is not None and run.report is not None and run.report.affected_rows:
            first = run.report.affected_rows[0]
            return f"this server's audit #{run.number} found rows that do not hold (the first is seq {first})"
        return None

    def _checked(self) -> tuple[int, frozenset[int], str] | None:
        """What the last finished audit of this server from seq 0 says about the stored checkpoints it covered."""
        run = self.audits.latest()
        if run is None or not run.finished or run.report is None or run.after_seq != 0:
            return None
        bad = frozenset(
            finding.seq for finding in run.report.findings
            if finding.kind.value == "checkpoint_mismatch" and finding.seq is not None
        )
        return run.through_seq, bad, f"audit #{run.number} of seq 1..{run.through_seq}"

    def api_checkpoints(self, request: Request) -> Response:
        found = self._checkpoints()
        return JSONResponse(
            {
                "head": found.head.to_dict() if found.head is not None else None,
                "head_problem": found.head_problem,
                "withheld": found.withheld,
                "guard_problems": list(self.guard.problems()),
                "trusted_keys": [key.to_dict() for key in found.trusted_keys],
                "signed_checkpoints": found.signed.to_dict(),
                "witness_policy": self.audits.keys.policy_in_words(),
            }
        )

    # -- errors --------------------------------------------------------------------------------------------

    def not_found(self, message: str = "There is no page at this address.") -> Response:
        return self.render("error.html", 404, nav=None, title="Not found", message=message)


async def _fields(request: Request) -> dict[str, str]:
    """The query's parameters and, for a form post, its fields (the form's win)."""
    fields = dict(request.query_params)
    if request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        body = await read_body(request.stream(), MAX_FORM_BYTES)  # two numbers: larger is not the audit page's
        if body is None:
            return {"after_seq": "too long"}
        try:
            parsed = urllib.parse.parse_qsl(body.decode("utf-8", "replace"), max_num_fields=20)
        except ValueError:
            return {"after_seq": "too many fields"}
        fields.update(dict(parsed))
    return fields


MAX_FORM_BYTES = 4096


def cross_site(request: Request) -> str | None:
    """Why a request that starts an audit is refused as cross-site, or None. Starting an audit replaces the verdict
    shown, so only the workbench's own page may do it: a browser's `Sec-Fetch-Site: same-origin`, or, without that
    header (a script, curl), an `Origin` that is this workbench's own."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        if site == "same-origin":
            return None
        return f"refusing to start an audit from another site (Sec-Fetch-Site: {site[:20]}): use the audit page here"
    served = f"{request.url.scheme}://{request.headers.get('host', '')}".lower()
    if request.headers.get("origin", "").lower() == served:
        return None
    return f"refusing to start an audit without Sec-Fetch-Site: same-origin or Origin: {served}"


def create_app(
    target: str,
    *,
    trusted_keys: Sequence[str] = (),
    allowed_hosts: Sequence[str] | None = None,
    audit_report: str | None = None,
    witness_keys: Sequence[str] = (),
    witness_quorum: int | None = None,
    auditor_key: str | None = None,
    key_states: KeyStates | None = None,
    witness_policy: TlogPolicy | None = None,
) -> Guard:
    """The workbench over the store at `target` (opened read-only now: a missing or unusable store raises
    here, before any server starts). `allowed_hosts`: the Host names to answer (None: any). `audit_report`: a
    JSON audit report (the nightly job's) whose verdict every page shows in a banner, green only when the report
    embeds a checkpoint note signed by `auditor_key` that this store's rows still give. `trusted_keys`,
    `witness_keys` and `witness_quorum` go to the workbench's audit, as `audit` takes them. `key_states`
    (`--retired`, `--revoked`): each trusted key's state on the checkpoints page. `witness_policy` (`--policy`):
    the audit's witnesses and quorum instead of `witness_keys`, shown in words on the audit page."""
    bench = Workbench(target, trusted_keys, audit_report, witness_keys=witness_keys, witness_quorum=witness_quorum,
                      auditor_key=auditor_key, key_states=key_states, witness_policy=witness_policy)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            bench.close()

    app = Starlette(routes=_routes(bench), lifespan=lifespan, exception_handlers=_error_handlers(bench))
    return Guard(app, bench, allowed_hosts=allowed_hosts)


def _routes(bench: Workbench) -> list[Route | Mount]:
    """Every address the workbench answers: the pages, their JSON twins, the charts and the static files."""

    def get(path: str, endpoint: Callable[[Request], Response], name: str) -> Route:
        return Route(path, endpoint, methods=["GET"], name=name)

    return [
        get("/", bench.decisions, "decisions"),
        get("/decisions/{budget_id}", bench.decision, "decision"),
        get("/audit", bench.audit, "audit"),
        Route("/audit/run", bench.audit_run, methods=["POST"], name="audit_run"),
        get("/checkpoints", bench.checkpoints, "checkpoints"),
        get("/api/decisions", bench.api_decisions, "api_decisions"),
        get("/charts/{which}.svg", bench.chart, "chart"),
        get("/api/decisions/{budget_id}", bench.api_decision, "api_decision"),
        get("/api/audit", bench.api_audit, "api_audit"),
        Route("/api/audit/run", bench.api_audit_run, methods=["POST"], name="api_audit_run"),
        get("/api/checkpoints", bench.api_checkpoints, "api_checkpoints"),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]


def _error_handlers(bench: Workbench) -> dict[Any, Callable[[Request, Exception], Awaitable[Response]]]:
    """An HTTP error and a store error as a page (or, under /api/, as JSON)."""

    def is_api(request: Request) -> bool:
        return request.url.path.startswith("/api/")

    async def http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        if is_api(request):
            return JSONResponse({"error": error.detail}, status_code=error.status_code)
        if error.status_code == 404:
            return bench.not_found()
        return bench.render("error.html", error.status_code, nav=None, title=str(error.detail), message="")

    async def store_error(request: Request, error: Exception) -> Response:
        # Store errors carry `location.display`, never a password.
        if is_api(request):
            return JSONResponse({"error": str(error)}, status_code=503)
        return bench.render("error.html", 503, nav=None, title="The store cannot be read", message=str(error))

    # A client gone before its form arrived (`read_body`): no audit starts, nobody to answer.
    return {HTTPException: http_error, ComputeBudgetError: store_error, ClientGone: answer_client_gone}


def loopback_hosts(host: str) -> tuple[str, ...]:
    """The Host names to accept when serving on `host` with no `--allow-host`: the loopback names and `host`."""
    return tuple(sorted(allowed_hosts(host)))
