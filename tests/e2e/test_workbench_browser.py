"""The workbench in a real browser: Playwright drives Chromium through the running `compute-budget serve`.

It clicks what a person clicks (list, filter, detail, audit, checkpoints), asserts what they would see, saves a
screenshot of each page to the test's tmp_path, and renders a gate whose id and evidence text are HTML that
would run if it were not escaped, with no dialog firing. The database file is byte-identical afterwards.

Chromium: Debian's `/usr/bin/chromium` (apt-get install chromium), else Playwright's own build when one is
installed. Without either (or without the `playwright` package) the tests skip with a message, except under CI
(`CI` set), where they must run; `.ci/run` installs Chromium.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compute_budget.keys.key_files import load_signer_key
from tests.conftest import make_gate
from tests.web.test_pages import ROWS, XSS_GATE_ID, XSS_SPAN, fill, xss_gate

DEBIAN_CHROMIUM = Path("/usr/bin/chromium")


def _missing(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the browser tests, but {reason}")
    pytest.skip(f"{reason}: install it to run the browser tests (apt-get install chromium; pip install playwright)")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium under Playwright: Debian's build when present, else Playwright's own."""
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        _missing("the playwright package is not installed")
    with sync_playwright() as playwright:
        executable = str(DEBIAN_CHROMIUM) if DEBIAN_CHROMIUM.exists() else None
        try:
            chromium = playwright.chromium.launch(executable_path=executable)
        except Error as error:
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            _missing(f"no Chromium could be started ({first_line})")
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def template_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of ROWS varied decisions and the hostile gate, built once and copied for each test."""
    path = tmp_path_factory.mktemp("browser") / "template.db"
    fill(str(path), extra=[xss_gate(), make_gate(decision_id="gate-last", status="blocked")])
    return path


class Served:
    """`compute-budget serve` running over a store, on a free loopback port."""

    def __init__(self, db: Path | None, *extra: str) -> None:
        self.db = db  # None: a publication (`serve --tiles`, in `extra`)
        source = ["--db", str(db)] if db is not None else []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "compute_budget", "serve", *source, "--port", "0", *extra],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.process.stderr is not None
        line = self.process.stderr.readline()
        match = re.search(r"at (http://127\.0\.0\.1:\d+)/ \(Ctrl-C stops it\)", line)
        if match is None:
            self.stop()
            raise AssertionError(f"the workbench did not start: {line}")
        self.url = match.group(1)
        self.stderr = ""

    def stop(self) -> str:
        """Stop it as Ctrl-C does; returns what it printed on stderr after starting."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                _, self.stderr = self.process.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                _, self.stderr = self.process.communicate()
        return self.stderr


@pytest.fixture
def served(template_store: Path, tmp_path: Path) -> Iterator[Served]:
    db = tmp_path / "store.db"
    shutil.copyfile(template_store, db)
    server = Served(db)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page that records console errors (a CSP violation is one) and every dialog."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    new_page = context.new_page()
    new_page.errors = []
    new_page.dialogs = []
    new_page.on("console", lambda message: message.type == "error" and new_page.errors.append(message.text))
    new_page.on("pageerror", lambda error: new_page.errors.append(str(error)))

    def on_dialog(dialog: Any) -> None:
        new_page.dialogs.append(dialog.message)
        dialog.dismiss()

    new_page.on("dialog", on_dialog)
    try:
        yield new_page
    finally:
        context.close()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def shot(page: Any, folder: Path, name: str) -> Path:
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def test_a_person_lists_filters_opens_a_detail_and_runs_an_audit(
    served: Served, page: Any, tmp_path: Path
) -> None:
    """List → filter → detail → audit → checkpoints, as clicked in Chromium; the file is unchanged after."""
    from playwright.sync_api import expect

    assert served.db is not None
    before = sha256(served.db)
    page.goto(served.url + "/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Decisions")
    rows = page.locator("table.decisions tbody tr")
    expect(rows).to_have_count(50)
    expect(rows.first.locator("td").first).to_have_text(str(ROWS + 2))
    expect(page.get_by_role("img", name=re.compile("Decisions by status"))).to_be_visible()
    shot(page, tmp_path, "1-list")

    page.get_by_label("Status", exact=True).select_option("budget_blocked")
    page.get_by_role("button", name="Show").click()
    page.wait_for_url(re.compile(r"status=budget_blocked"))
    statuses = page.locator("table.decisions tbody td:nth-child(3)").all_inner_texts()
    assert statuses
    assert set(statuses) == {"budget_blocked"}
    expect(page.get_by_text(re.compile(r"match the filters"))).to_be_visible()
    shot(page, tmp_path, "2-filtered")

    page.get_by_role("link", name="Older →").click()
    page.wait_for_url(re.compile(r"before_seq=\d+"))
    page.get_by_role("link", name="← Newer").click()
    page.wait_for_url(re.compile(r"status=budget_blocked(?!.*before_seq)"))

    page.locator("table.decisions tbody tr").first.locator("a.id").click()
    page.wait_for_url(re.compile(r"/decisions/[0-9a-f]{64}$"))
    expect(page.get_by_role("heading", level=2, name=re.compile("Why"))).to_contain_text("Blocked")
    expect(page.get_by_text("Re-derived from its gate: holds.")).to_be_visible()
    expect(page.get_by_role("table", name=re.compile("Stored limits"))).to_contain_text("status not eligible")
    expect(page.locator("pre.gate-input")).to_contain_text('"decision_id": "gate-last"')
    shot(page, tmp_path, "3-detail")

    page.get_by_role("link", name="seq", exact=False).first.click()  # the previous row in the chain
    page.wait_for_url(re.compile(r"/decisions/[0-9a-f]{64}$"))
    expect(page.locator("h1")).to_contain_text("Decision")

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Audit").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Replay audit")
    page.get_by_role("button", name="Run audit").click()
    # The page refreshes itself (<meta refresh>) until the audit is done: no JavaScript involved.
    expect(page.get_by_text("clean, no findings.")).to_be_visible(timeout=30_000)
    expect(page.get_by_text(f"{ROWS + 2:,} rows checked")).to_be_visible()
    shot(page, tmp_path, "4-audit")

    page.get_by_role("link", name="Checkpoints").click()
    expect(page.get_by_text("No signed checkpoints are stored yet")).to_be_visible()  # recorded without a key
    expect(page.locator("dl.facts dd").first).to_have_text(str(ROWS + 2))
    shot(page, tmp_path, "5-checkpoints")

    assert page.errors == []  # no console error: nothing blocked by the CSP, nothing missing
    assert page.dialogs == []
    stderr = served.stop()
    assert "Traceback" not in stderr
    assert sha256(served.db) == before


def test_hostile_gate_text_is_shown_as_text_and_runs_nothing(served: Served, page: Any, tmp_path: Path) -> None:
    """A gate id `"><img src=x onerror=alert(1)>` and a span `<script>alert(1)</script>` are text on the list,
    the filtered list and the detail: no element is made of them and no dialog fires."""
    from playwright.sync_api import expect

    page.goto(served.url + "/")
    expect(page.get_by_role("link", name=XSS_GATE_ID)).to_be_visible()
    page.goto(served.url + "/?" + urllib.parse.urlencode({"gate": XSS_GATE_ID}))
    expect(page.locator("table.decisions tbody tr")).to_have_count(1)
    expect(page.locator("td.gate")).to_have_text(XSS_GATE_ID)
    expect(page.get_by_label("Gate decision id", exact=True)).to_have_value(XSS_GATE_ID)
    page.locator("a.id").first.click()
    page.wait_for_url(re.compile(r"/decisions/[0-9a-f]{64}$"))
    expect(page.locator("td.span-text")).to_have_text(XSS_SPAN)
    expect(page.locator("dl.facts dd code").first).to_have_text(XSS_GATE_ID)
    shot(page, tmp_path, "hostile-detail")
    assert page.locator("img").count() == 0
    assert page.locator("script").count() == 0
    assert page.evaluate("document.querySelectorAll('[onerror]').length") == 0
    assert page.dialogs == []


def test_keyboard_and_a_narrow_window(served: Served, browser: Any, tmp_path: Path) -> None:
    """On a phone-sized window the page does not scroll sideways (wide tables scroll in their own box), the
    first Tab reaches 'Skip to content', and Enter on a decision's link opens it."""
    from playwright.sync_api import expect

    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    try:
        page.goto(served.url + "/")
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.textContent") == "Skip to content"
        page.keyboard.press("Enter")
        assert page.evaluate("document.activeElement.id") == "main"
        link = page.locator("table.decisions tbody a.id").first
        link.focus()
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(r"/decisions/[0-9a-f]{64}$"))
        expect(page.get_by_text("Re-derived from its gate: holds.")).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        shot(page, tmp_path, "narrow-detail")
    finally:
        context.close()


@pytest.mark.slow
def test_a_tampered_store_shows_its_alarm_first(browser: Any, template_store: Path, tmp_path: Path) -> None:
    """Issue 22, in a real browser: the list marks the changed row, the banner from --audit-report names it, its
    detail page opens with the failure (not a green badge), and at 400 px the page does not scroll sideways."""
    import sqlite3

    from compute_budget import audit
    from compute_budget.cli.audit.render import render

    db = tmp_path / "store.db"
    shutil.copyfile(template_store, db)
    with sqlite3.connect(db) as connection:
        connection.execute("DROP TRIGGER compute_budget_decisions_no_update")
        connection.execute("UPDATE compute_budget_decisions SET max_steps = max_steps + 7 WHERE seq = 3")
    report = tmp_path / "nightly.json"
    report.write_text(render(audit(str(db)), "json"))
    server = Served(db, "--audit-report", str(report))
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        page.goto(server.url + "/?before_seq=6")
        # The guard dropped by hand leads (checked live, issue 28 g); then the night's report naming the row.
        guard, banner = page.locator("p.banner").all_inner_texts()
        assert "The store's append-only guard is broken" in guard
        assert "Rows affected: seq 3." in banner
        row = page.locator("tr", has=page.locator("td.num", has_text=re.compile(r"^3$")))
        assert "does not hold" in row.inner_text()
        row.locator("a.id").click()
        first_heading = page.locator("main h2").first.inner_text()
        assert "This row does not hold" in first_heading
        assert page.locator(".status.allowed").count() == 0
        page.set_viewport_size({"width": 400, "height": 800})
        page.goto(server.url + "/")
        width = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        assert width[0] <= width[1], width
        assert width[1] <= 400
        table_top = page.locator("table").first.bounding_box()
        last_banner = page.locator("p.banner").last.bounding_box()
        assert table_top is not None
        assert last_banner is not None
        # After the alarms that lead every page, the decisions come first, a screen below them at most; the charts
        # follow them.
        assert table_top["y"] - (last_banner["y"] + last_banner["height"]) < 800
    finally:
        context.close()
        server.stop()


@pytest.mark.slow
def test_a_clean_report_nobody_signed_is_grey_not_green(browser: Any, template_store: Path, tmp_path: Path) -> None:
    """Issue 28 h, in a real browser: `{"clean": true}` written over the report file is shown in grey (not the
    green of a verdict), saying that anyone who can write the file could have written it."""
    db = tmp_path / "store.db"
    shutil.copyfile(template_store, db)
    report = tmp_path / "nightly.json"
    report.write_text('{"clean": true}')
    server = Served(db, "--audit-report", str(report))
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        page.goto(server.url + "/")
        banner = page.locator("p.banner")
        assert banner.count() == 1
        assert f"unauthenticated report: anyone who can write {report} could have written it" in banner.inner_text()
        border = banner.evaluate("element => getComputedStyle(element).borderTopColor")
        assert border == "rgb(110, 119, 129)", border  # grey: neither the green of a verdict nor an alarm's red
        shot(page, tmp_path, "unauthenticated-report")
    finally:
        context.close()
        server.stop()


@pytest.mark.slow
def test_the_publication_viewer_shows_authenticated_rows_receipts_and_an_edited_entry(
    browser: Any, tmp_path: Path
) -> None:
    """`serve --tiles` in Chromium: the decisions newest first, a row with its check and both receipts, a decision
    found by a scan, the checkpoint's signers, the audit page running `audit --tiles`; an edited entry shown as
    `does not hold (published_mismatch)`, with no console error (the CSP holds). The viewer changes no file. (A
    rollback's banner needs the minute between re-reads: tests/web/test_publication_viewer.py forces it.)"""
    from playwright.sync_api import expect

    from tests.web.test_publication_viewer import LARGE, ORIGIN, build_publications, edit_row_3

    build_publications(tmp_path)
    served_folder = tmp_path / "served"
    shutil.copytree(tmp_path / "large", served_folder)
    edit_row_3(served_folder)
    files = {path: sha256(path) for path in served_folder.rglob("*") if path.is_file()}
    key = load_signer_key(str(tmp_path / "writer.key")).verifier().format()
    server = Served(None, "--tiles", str(served_folder), "--origin", ORIGIN, "--trusted-key", key)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))
    try:
        page.goto(server.url + "/")
        expect(page.get_by_role("heading", level=1)).to_have_text("Decisions")
        expect(page.locator("table.decisions tbody tr").first.locator("td").first).to_have_text(str(LARGE))
        expect(page.locator("form")).to_have_count(0)  # no filters
        shot(page, tmp_path, "p1-list")
        page.locator("table.decisions tbody tr").nth(2).locator("a.id").click()
        page.wait_for_url(re.compile(rf"/rows/{LARGE - 2}$"))
        expect(page.get_by_text("✓ Authenticated")).to_be_visible()
        expect(page.get_by_label("Proof bundle")).to_contain_text("compute_budget.proof.v1")
        expect(page.get_by_label("tlog-proof")).to_contain_text("c2sp.org/tlog-proof")
        budget_id = page.locator("h1 code").inner_text()
        shot(page, tmp_path, "p2-row")
        page.goto(f"{server.url}/decisions/{budget_id[:12]}")
        expect(page.get_by_text(re.compile("Found by scanning 2 entry bundle"))).to_be_visible()
        page.goto(server.url + "/rows/3")
        expect(page.get_by_role("alert")).to_contain_text("does not hold (published_mismatch)")
        shot(page, tmp_path, "p3-edited")
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Checkpoints").click()
        expect(page.get_by_role("table")).to_contain_text("trusted writer key (active), verified")
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Audit").click()
        page.get_by_role("button", name="Run audit --tiles").click()
        expect(page.get_by_text("published_mismatch").first).to_be_visible(timeout=30_000)
        shot(page, tmp_path, "p4-audit")
        assert errors == []
    finally:
        context.close()
        stderr = server.stop()
    assert "Traceback" not in stderr
    assert {path: sha256(path) for path in served_folder.rglob("*") if path.is_file()} == files
