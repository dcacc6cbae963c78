"""The pages over HTTP, in-process: the API test daemon plus signed-in browser-like sessions, and
the same pages in Debian's chromium (`chromium`) for what only a browser shows."""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import aiohttp
import pytest
from playwright.async_api import Browser as PwBrowser
from playwright.async_api import Page, async_playwright

from tests.integration.web.conftest import AXE_JS, CHROMIUM, CHROMIUM_ARGS
from tests.unit.api.conftest import Api, api, api_overrides  # noqa: F401 - fixtures used by this package

Role = Literal["read-only", "read-write"]
CSRF_FIELD = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class Browser:
    """One signed-in cookie jar: GETs pages, POSTs forms with the page's CSRF token and our Origin."""

    base: str
    session: aiohttp.ClientSession
    csrf: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    async def get(self, path: str, **params: Any) -> tuple[int, str]:
        async with self.session.get(self.base + path, params=params, allow_redirects=False) as resp:
            text = await resp.text()
            if found := CSRF_FIELD.search(text):
                self.csrf = found.group(1)
            return resp.status, text

    async def post(
        self, path: str, data: dict[str, str], *, csrf: bool = True, origin: str | None = None
    ) -> tuple[int, str, str | None]:
        """(status, body, Location); the CSRF token of the last page seen unless csrf=False."""
        form = {**data, **({"csrf": self.csrf} if csrf else {})}
        headers = {"Origin": origin or self.base}
        async with self.session.post(self.base + path, data=form, headers=headers, allow_redirects=False) as resp:
            return resp.status, await resp.text(), resp.headers.get("Location")


@dataclass
class Ui:
    api: Api
    opened: list[aiohttp.ClientSession] = field(default_factory=list)

    async def browser(self, role: Role | None = "read-write") -> Browser:
        """A cookie jar signed in with a key of `role` (None: not signed in)."""
        # unsafe=True: keep cookies for an IP address host (127.0.0.1), as a browser does.
        session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
        self.opened.append(session)
        b = Browser(self.api.base, session)
        if role is not None:
            key = self.api.read_write if role == "read-write" else self.api.read_only
            status, _, location = await b.post("/ui/signin", {"key": key, "next": "/ui/databases"}, csrf=False)
            assert status == 303 and location == "/ui/databases", (status, location)
            await b.get("/ui/databases")  # picks up the session's CSRF token
        return b


@pytest.fixture
async def ui(api: Api) -> AsyncIterator[Ui]:  # noqa: F811 - the imported fixture
    u = Ui(api)
    yield u
    for s in u.opened:
        await s.close()


# --- the pages in Debian's chromium ------------------------------------------------------------
# What only a browser shows (layout, bidi, the `hidden` attribute, scripts, axe-core's checks),
# tested against the same in-process daemon as above, through Playwright's async API (the daemon
# answers on this test's event loop). The flags, the binary and axe-core are the end-to-end tests'.


@dataclass
class Tab:
    """A page of its own browser context, and what it logged that a page never should."""

    page: Page
    problems: list[str] = field(default_factory=list)


@dataclass
class Chromium:
    """Signed-in chromium pages on the test daemon; each test's tabs must log no error."""

    ui: Ui
    browser: PwBrowser
    tabs: list[Tab] = field(default_factory=list)

    async def tab(self, role: Role | None = "read-write", *, javascript: bool = True, path: str = "") -> Tab:
        """A new browser context signed in with a key of `role` (None: not signed in), at `path`."""
        context = await self.browser.new_context(
            base_url=self.ui.api.base, java_script_enabled=javascript, viewport={"width": 1280, "height": 900}
        )
        context.set_default_timeout(10_000)
        page = await context.new_page()
        tab = Tab(page)
        self.tabs.append(tab)
        page.on("console", lambda msg: tab.problems.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: tab.problems.append(str(exc)))
        if role is not None:
            key = self.ui.api.read_write if role == "read-write" else self.ui.api.read_only
            await page.goto("/ui/signin?next=/ui/databases")
            await page.locator("#key").fill(key)
            async with page.expect_navigation(url="**/ui/databases"):
                await page.get_by_role("button", name="Sign in").click()
        if path:
            await page.goto(path)
        return tab


@pytest.fixture
async def chromium(ui: Ui) -> AsyncIterator[Chromium]:
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (make test installs it; CI must run these tests)")
        pytest.skip("chromium is not installed: run scripts/install-test-deps.sh as root")
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        c = Chromium(ui, browser)
        try:
            yield c
        finally:
            await browser.close()
    problems = [p for tab in c.tabs for p in tab.problems]
    assert not problems, f"a page logged errors: {problems}"


_VIOLATIONS: Final = """
async () => {
  const result = await axe.run(document, {resultTypes: ["violations"]});
  return result.violations.map((v) => ({
    id: v.id, impact: v.impact, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" ")),
  }));
}
"""


async def axe_violations(page: Page) -> list[dict[str, Any]]:
    """Every violation axe-core finds on the page as it is now, whatever its impact."""
    if not await page.evaluate("typeof axe !== 'undefined'"):
        # Evaluated through the DevTools protocol, which the page's CSP does not govern.
        await page.evaluate(AXE_JS.read_text())
    result: list[dict[str, Any]] = await page.evaluate(_VIOLATIONS)
    return result
