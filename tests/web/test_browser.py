"""The dashboard as a person uses it: headless Chromium (Debian's) driven by Playwright,
over a real server (`WebThread`) and a SQLite file with real jobs.

It opens the queues, follows a failed job to its traceback, signs in, retries the job from
the page, and watches a job published meanwhile appear without reloading. Screenshots go
to the test's folder, or to LANNER_SCREENSHOTS (docs/images: `scripts/screenshots`).
Under CI a missing browser is a failure (`.ci/run` installs it), elsewhere a skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lanner import Engine
from lanner.job import JobState
from lanner.web import WebThread

from .conftest import TOKEN, populate, until

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if CHROMIUM is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed: .ci/run installs Debian's chromium")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("LANNER_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_a_failure_found_read_and_retried_from_the_browser(
    browser: object, sqlite_engine: Engine, served: WebThread, shots: Path
) -> None:
    from playwright.sync_api import Browser, expect

    assert isinstance(browser, Browser)
    jids = populate(sqlite_engine)
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text)
            if message.type == "error" else None)  # fmt: skip
    page.goto(served.url + "/")
    expect(page.locator('tr[data-queue="emails"]')).to_be_visible()
    expect(page.locator('tr[data-queue="reports"] td.waiting')).to_have_text("1")
    expect(page.locator("#live-status")).to_have_class("live on")

    # Live: a job published now shows up in the table without a reload.
    sqlite_engine.put("reports", "job-live", "tasks.report", "{}")
    expect(page.locator('tr[data-queue="reports"] td.waiting')).to_have_text("2")
    expect(page.locator("#feed")).to_contain_text("put queue=reports jid=job-live")
    page.screenshot(path=str(shots / "web-overview.png"), full_page=True)

    # A failure: its group, then the job and its traceback.
    page.click("text=1 failed job in 1 group")
    page.click("text=tasks.send-ValueError")
    page.click(f"a.jid:text-is('{jids['failed']}')")
    expect(page.locator("#traceback")).to_contain_text("ValueError: no such address")
    assert page.locator("button[data-action=retry-job]").count() == 0  # not signed in
    page.screenshot(path=str(shots / "web-failed-job.png"), full_page=True)

    # Sign in, then retry it from its page.
    page.click("text=Sign in")
    page.fill("input[name=token]", TOKEN)
    page.click("button:text-is('Sign in')")
    expect(page.locator(".flash")).to_have_text("signed in")
    expect(page.locator("#traceback")).to_be_visible()  # back on the job's page
    page.click("button[data-action=retry-job]")
    expect(page.locator(".flash")).to_contain_text(f"retried {jids['failed']} into emails")
    job = sqlite_engine.get(jids["failed"])
    assert job is not None
    assert job.state is JobState.WAITING

    page.goto(served.url + "/queues/emails")
    expect(page.locator("svg.chart")).to_have_count(4)
    page.screenshot(path=str(shots / "web-queue.png"), full_page=True)
    assert errors == []  # no script errors, no CSP violations


def test_a_page_of_another_site_cannot_act(
    browser: object, sqlite_engine: Engine, served: WebThread, tmp_path: Path
) -> None:
    """A signed-in browser that opens a hostile page posting to the dashboard: refused."""
    from playwright.sync_api import Browser

    assert isinstance(browser, Browser)
    populate(sqlite_engine)
    context = browser.new_context()
    page = context.new_page()
    page.goto(served.url + "/login")
    page.fill("input[name=token]", TOKEN)
    page.click("button:text-is('Sign in')")
    hostile = tmp_path / "hostile.html"
    hostile.write_text(
        f'<form id="f" method="post" action="{served.url}/act/pause">'
        '<input name="queue" value="emails"><input name="csrf" value="guessed"></form>'
        "<script>document.getElementById('f').submit()</script>"
    )
    page.goto(hostile.as_uri())
    until(lambda: page.url.startswith(served.url))
    assert not sqlite_engine.queue_counts("emails").paused
    context.close()


def test_a_running_demo_seen_live(browser: object, tmp_path: Path, shots: Path) -> None:
    """`lanner demo --db FILE` at work, watched by the dashboard as its queues drain."""
    from playwright.sync_api import Browser, expect

    import lanner

    assert isinstance(browser, Browser)
    database = tmp_path / "demo.db"
    demo = subprocess.Popen(
        [sys.executable, "-m", "lanner", "demo", "--db", str(database)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        until(database.exists, timeout=60)
        with lanner.open_engine(f"sqlite:///{database}") as engine:
            until(lambda: len(engine.queues()) == 3, timeout=60)
            with WebThread(engine, token=TOKEN) as web:
                page = browser.new_page(viewport={"width": 1280, "height": 720})
                page.goto(web.url + "/")
                expect(page.locator('tr[data-queue="low_priority"]')).to_be_visible()
                expect(page.locator("#feed li:not(.empty)").nth(4)).to_be_attached(timeout=30_000)
                page.screenshot(path=str(shots / "web-demo.png"))
                assert demo.wait(timeout=120) == 0
                done = page.locator('tr[data-queue="low_priority"] td.done')
                expect(done).to_have_text("50", timeout=15_000)  # the table follows to the end
    finally:
        demo.kill()
        stderr = demo.communicate()[1]
    assert "Traceback" not in stderr


def test_a_workflow_seen_from_a_job_page_follows_its_jobs(
    browser: object, sqlite_engine: Engine, served: WebThread, shots: Path
) -> None:
    """A chord's callback page: the graph drawn, a parent's progress and completion seen
    live, and a click on a parent's box opens that parent's page."""
    from playwright.sync_api import Browser, expect

    from .test_workflow_pages import put_workflow

    assert isinstance(browser, Browser)
    jids = put_workflow(sqlite_engine)
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text)
            if message.type == "error" else None)  # fmt: skip
    page.goto(served.url + f"/job?jid={jids[2]}")
    graph = page.locator("#workflow-graph svg.workflow")
    expect(graph).to_be_visible()
    expect(graph.locator("g.node")).to_have_count(3)
    expect(graph.locator("line.edge")).to_have_count(2)
    expect(page.locator("#live-status")).to_have_class("live on")

    # Live: a parent runs, reports progress and completes; the callback's page follows.
    [popped] = sqlite_engine.pop("wf", "w1")
    sqlite_engine.log(popped.jid, "progress", {"fraction": 0.5, "message": "half"})
    expect(graph.locator(f'g.node.running[data-jid="{popped.jid}"]')).to_be_visible()
    sqlite_engine.complete(popped.jid, "w1", "wf")
    expect(
        page.locator(f'#workflow-graph g.node.complete[data-jid="{popped.jid}"]')
    ).to_be_visible()
    page.screenshot(path=str(shots / "web-workflow.png"), full_page=True)

    # The other parent's box opens its page, with the same graph.
    other = jids[1] if popped.jid == jids[0] else jids[0]
    page.click(f'#workflow-graph g.node[data-jid="{other}"]')
    expect(page.locator(f'h1[data-jid="{other}"]')).to_be_visible()
    expect(page.locator(f'#workflow-graph g.node.focus[data-jid="{other}"]')).to_be_visible()

    # A running job's progress, on its own page.
    [running] = sqlite_engine.pop("wf", "w1")
    sqlite_engine.log(running.jid, "progress", {"fraction": 0.25, "message": "a quarter"})
    expect(page.locator("#job-progress")).to_contain_text("25% a quarter")
    assert errors == []
