"""Browser-test fixtures: the real ASGI app under uvicorn in a thread, and Chromium.

* ``asgi_server``: uvicorn serving ``config.asgi:application`` (HTTP, WebSockets,
  static files through WhiteNoise) on a free loopback port, in a background thread of
  this process. The app's lifespan (the embedded push bridge) runs per test, on the
  server's loop, once the test's world is set up (the ``asgi_lifespan`` fixture).
  Sharing the process means it shares pytest-django's test database (SQLite in shared memory; use
  ``django_db(transaction=True)`` so rows are committed and visible to it) and
  the per-test environment (``KAFKA_TOPIC_PREFIX``, ``PINOT_BROKER_URL``), which
  it reads per request.
* ``browser``: Debian's Chromium through async Playwright (async, because sync
  Playwright keeps an event loop in the main thread that breaks the ORM and
  pytest-asyncio). Launched once per session; every test gets a fresh context.

Every context a test opens (``context``, ``page``, or its own ``browser.new_context``)
reports the page's Content-Security-Policy violations, and a test that used the browser
fails on any (:func:`_no_csp_violations`): the pages must run under the policy every answer
carries (``tracker.accounts.security.content_security_policy``), not merely load.

Tests drive the page with ``await`` and reach the ORM through
``database_sync_to_async`` like the other async tests.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from localrun.ports import free_port
from tests.lifespan import Lifespan
from tests.waiting import wait_until, wait_until_async

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/lib/chromium/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
AXE_JS = (
    Path(__file__).resolve().parents[1]
    / "frontend"
    / "static"
    / "vendor"
    / "axe-core"
    / "axe.min.js"
)
SCREENSHOT_DIR = Path(__file__).resolve().parents[1] / "var" / "screenshots"
#: axe-core as the server serves it (from our origin, so the policy lets it run).
AXE_URL = "/static/vendor/axe-core/axe.min.js"

#: Run in every document before its own scripts: each violation becomes a console error.
CSP_REPORTER = """document.addEventListener('securitypolicyviolation', (e) => console.error(
  `CSP violation: ${e.effectiveDirective} refused ${e.blockedURI || 'inline'} `
  + `(${e.sourceFile || e.documentURI}:${e.lineNumber})`));"""
#: The violations reported since the current test started.
CSP_VIOLATIONS: list[str] = []


def _record_csp(message) -> None:
    """A console message that reports a Content-Security-Policy violation, kept."""
    text = message.text
    if message.type == "error" and ("CSP violation" in text or "Content Security Policy" in text):
        CSP_VIOLATIONS.append(text)


@pytest.fixture(autouse=True)
def _no_csp_violations(request) -> Iterator[None]:
    """Fail a test that drove the browser when any page broke the Content-Security-Policy."""
    if "browser" not in request.fixturenames:
        yield
        return
    CSP_VIOLATIONS.clear()
    yield
    found, CSP_VIOLATIONS[:] = list(CSP_VIOLATIONS), []
    if found:
        pytest.fail("Content-Security-Policy violations:\n" + "\n".join(found), pytrace=False)


class ServerThread:
    """uvicorn in a daemon thread; ``url`` once it accepts connections. ``settings`` are
    uvicorn's, over these (a test of uvicorn's own log lines passes ``log_config=None,
    log_level=None``). uvicorn's own lifespan is off: it would run once, at the session's
    start, before any test has set the topics its bridge must follow; :meth:`lifespan`
    runs it for one test on the server's loop instead."""

    def __init__(self, **settings: object) -> None:
        import uvicorn

        class Server(uvicorn.Server):
            loop: asyncio.AbstractEventLoop | None = None

            async def serve(self, sockets: list | None = None) -> None:
                self.loop = asyncio.get_running_loop()  # where its lifespan runs
                await super().serve(sockets)

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            "config.asgi:application",
            **{
                "host": "127.0.0.1",
                "port": self.port,
                "lifespan": "off",
                "log_level": "warning",
                "ws": "websockets-sansio",
                **settings,
            },
        )
        self.server = Server(config)
        self.thread = threading.Thread(target=self.server.run, name="uvicorn-test", daemon=True)

    def start(self, timeout: float = 20.0) -> ServerThread:
        self.thread.start()
        wait_until(self._started, timeout, "uvicorn to start", interval=0.02)
        return self

    def _started(self) -> bool:
        if self.server.started:
            return True
        if not self.thread.is_alive():
            raise RuntimeError("uvicorn stopped before it started (its log says why)")
        return False

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def lifespan(self) -> OnLoop:
        """A run of the served app's lifespan whose calls run on the server's loop."""
        from config.asgi import application

        return OnLoop(Lifespan(application), self.server.loop)


class OnLoop:
    """A :class:`Lifespan` driven from another loop (a test's) on the server's."""

    def __init__(self, lifespan: Lifespan, loop: asyncio.AbstractEventLoop | None) -> None:
        assert loop is not None, "the server has not started"
        self.inner, self.loop = lifespan, loop

    async def startup(self) -> None:
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self.inner.startup(), self.loop))

    async def shutdown(self) -> None:
        await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(self.inner.shutdown(), self.loop)
        )


@pytest.fixture(scope="session")
def asgi_server(django_db_setup, django_db_blocker) -> Iterator[ServerThread]:
    """The real server (HTTP + WebSockets) for the whole session."""
    if not AXE_JS.exists():
        pytest.fail("frontend assets are not vendored: run `bash frontend/vendor.sh`")
    server = ServerThread().start()
    yield server
    server.stop()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def browser() -> AsyncIterator:
    from playwright.async_api import async_playwright

    if not Path(CHROMIUM).exists():
        pytest.skip(f"Chromium not found at {CHROMIUM}")
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        new_context = chromium.new_context

        async def reporting_context(*args, **kwargs):
            ctx = await new_context(*args, **kwargs)
            await ctx.add_init_script(CSP_REPORTER)
            ctx.on("console", _record_csp)
            return ctx

        chromium.new_context = reporting_context  # every context, the tests' own too
        yield chromium
        await chromium.close()


@pytest_asyncio.fixture(loop_scope="session")
async def context(browser, asgi_server) -> AsyncIterator:
    """A fresh browser profile (no cookies) at desktop size."""
    ctx = await browser.new_context(
        base_url=asgi_server.url, viewport={"width": 1280, "height": 900}, locale="en-GB"
    )
    ctx.set_default_timeout(10_000)
    yield ctx
    await ctx.close()


@pytest_asyncio.fixture(loop_scope="session")
async def page(context) -> AsyncIterator:
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.js_errors = errors  # asserted empty by tests that care
    yield page


async def sign_in(page, username: str, password: str, next_url: str = "/") -> None:
    """Sign in through the real form, then land on ``next_url``."""
    await page.goto(f"/accounts/login/?next={next_url}")
    await page.get_by_label("Username").fill(username)
    await page.get_by_label("Password").fill(password)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(f"**{next_url}")


async def order_status_becomes(order_id: int, expected: str, timeout: float = 10.0) -> None:
    """The system of record reaches ``expected`` (the page's request is in flight)."""
    from channels.db import database_sync_to_async

    from tracker.orders.models import Order

    reached = database_sync_to_async(
        lambda: Order.objects.filter(pk=order_id, status=expected).exists()
    )
    await wait_until_async(reached, timeout, f"order {order_id} to be {expected}", interval=0.1)


async def screenshot(page, name: str) -> Path:
    """Save a full-page PNG under var/screenshots/ (for humans to look at)."""
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOT_DIR / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    return path


async def axe_violations(page, *, rules: dict | None = None) -> list[dict]:
    """Run axe-core (vendored from npm) on the page; returns the violations."""
    await page.add_script_tag(url=AXE_URL)
    return await page.evaluate(
        """async (rules) => {
            const result = await axe.run(document, {
              resultTypes: ['violations'],
              rules: rules || {},
            });
            return result.violations.map(v => ({
              id: v.id, impact: v.impact, help: v.help,
              nodes: v.nodes.map(n => n.target.join(' ')).slice(0, 5),
            }));
        }""",
        rules,
    )


#: Interactive elements without an accessible name (computed the way axe-free code can).
UNNAMED_CONTROLS = """() => {
  const sel = 'a[href], button, input:not([type=hidden]), select, textarea, [tabindex]:not([tabindex="-1"]), [role=button]';
  const named = (el) => {
    if (el.getAttribute('aria-label')?.trim()) return true;
    const by = el.getAttribute('aria-labelledby');
    if (by && by.split(/\\s+/).some(id => document.getElementById(id)?.textContent.trim())) return true;
    if (el.labels && [...el.labels].some(l => l.textContent.trim())) return true;
    if (el.textContent.trim()) return true;
    if (el.getAttribute('title')?.trim()) return true;
    if (el.querySelector('img[alt]:not([alt=""])')) return true;
    return false;
  };
  return [...document.querySelectorAll(sel)]
    .filter(el => el.offsetParent !== null && !named(el))
    .map(el => el.outerHTML.slice(0, 120));
}"""


async def unnamed_controls(page) -> list[str]:
    """The page's visible interactive elements that have no accessible name."""
    return await page.evaluate(UNNAMED_CONTROLS)
