"""End-to-end tests of the web pages: Debian's `chromium`, headless, driven by Playwright's Python
package (with `executable_path`: its own browser download is not used), against a real daemon
(`forwarder run`) reading the csvlog of a real PostgreSQL 15.

One cluster and one daemon serve the whole directory (`site`); each test gets a fresh browser
context (`page`), which fails the test if the page broke its Content-Security-Policy. `look()`
runs axe-core on a page at 1280 and at 390 px and saves a screenshot of each under
var/screenshots/ (two of them are committed under docs/ for the README).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright

from tests.daemonproc import DaemonProcess
from tests.harness import poll_until
from tests.pgcluster import PgCluster

HERE: Final = Path(__file__).resolve().parent
CHROMIUM: Final = Path("/usr/bin/chromium")
AXE_JS: Final = HERE / "vendor/axe-core-4.14.1/axe.min.js"
SCREENSHOTS: Final = HERE.parents[2] / "var" / "screenshots"
WIDTHS: Final = (1280, 390)
# Chromium as root in a container, on a machine without outside network: no sandbox, no GPU, and
# none of the background connections it would try at start.
CHROMIUM_ARGS: Final = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]
DB: Final = "main"
PASSWORD: Final = "pw-for-the-e2e-fixes"
XSS: Final = "<script>alert(1)</script>"
# Cluster settings: every statement's duration is logged (the queries page has data), and sorts
# spill to disk early and are logged (a temp_files finding with a fix to apply).
SETTINGS: Final = {"log_min_duration_statement": "0", "work_mem": "64kB", "log_temp_files": "0"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.e2e)


@dataclass
class Site:
    """The PostgreSQL server, the daemon reading its log, and the daemon's two keys."""

    cluster: PgCluster
    daemon: DaemonProcess

    @property
    def url(self) -> str:
        return self.daemon.url

    @property
    def read_write(self) -> str:
        return self.daemon.key

    @property
    def read_only(self) -> str:
        return self.daemon.read_only_key

    def sql(self, sql: str) -> None:
        """Run `sql` on the server (errors included: they are what the log should show)."""
        self.cluster.psql(sql)

    def wait_for_line(self, q: str, count: int = 1) -> list[dict[str, Any]]:
        lines = self.daemon.wait_for_line(DB, q, count)
        assert len(lines) >= count, f"no stored line matches {q!r}"
        return lines


@pytest.fixture(scope="session")
def site(pg_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("web")
    with PgCluster(root / "pg", SETTINGS, pg_bin=pg_bin) as cluster:
        cluster.query(f"ALTER ROLE postgres PASSWORD '{PASSWORD}'")
        password_file = root / "pg.password"
        password_file.write_text(PASSWORD + "\n")
        dsn = f"postgresql://postgres@{cluster.host}:{cluster.port}/postgres?sslmode=disable"
        daemon = DaemonProcess(
            root / "fwd",
            [
                {
                    "id": DB,
                    "name": "main",
                    "host": "db1.test",
                    "log": {"path": str(cluster.log_dir / "*.csv"), "format": "csvlog", "poll_interval_seconds": 0.1},
                    "connection": {"dsn": dsn, "password_file": str(password_file), "allow_fixes": True},
                }
            ],
            allowed_networks=("127.0.0.0/8",),
            extra_toml="[insights]\nenabled = true\n",
        )
        try:
            daemon.start()
            site = Site(cluster, daemon)
            # What the pages should show: an error whose message holds markup, a sort that spills
            # to a temporary file (a finding with a fix), and a few statements.
            site.sql(f'SELECT * FROM "{XSS}";')
            site.sql("SELECT count(*) FROM (SELECT g FROM generate_series(1, 100000) g ORDER BY g DESC) s;")
            site.sql("SELECT 1/0;")
            site.wait_for_line("temporary file")
            site.wait_for_line("division by zero")
            yield site
        finally:
            daemon.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (make test installs it; CI must run these tests)")
        pytest.skip("chromium is not installed: run scripts/install-test-deps.sh as root")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Browser, site: Site) -> Iterator[Page]:
    """A new browser context on the daemon; the test fails if a page broke its CSP."""
    context = browser.new_context(base_url=site.url, viewport={"width": WIDTHS[0], "height": 900})
    context.set_default_timeout(10_000)
    p = context.new_page()
    refused: list[str] = []

    def on_console(msg: ConsoleMessage) -> None:
        if "Content Security Policy" in msg.text or "Refused to" in msg.text:
            refused.append(msg.text)

    p.on("console", on_console)
    try:
        yield p
    finally:
        context.close()
    assert not refused, f"the page broke its Content-Security-Policy: {refused}"


def sign_in(page: Page, key: str, next_path: str = "") -> None:
    """Sign in through the sign-in page; ends on `next_path` (or the databases page)."""
    page.goto("/ui/signin" + (f"?next={next_path}" if next_path else ""))
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(re.escape(next_path or "/ui/databases") + r"$"))


_SERIOUS: Final = """
async () => {
  const result = await axe.run(document, {resultTypes: ["violations"]});
  return result.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => ({
      id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" ")),
    }));
}
"""


def serious_violations(page: Page) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page as it is now."""
    if not page.evaluate("typeof axe !== 'undefined'"):
        # Evaluated through the DevTools protocol, which the page's CSP does not govern.
        page.evaluate(AXE_JS.read_text())
    result: list[dict[str, Any]] = page.evaluate(_SERIOUS)
    return result


def look(page: Page, name: str) -> None:
    """At 1280 and 390 px: no serious or critical accessibility violation, and a screenshot."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    try:
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            assert serious_violations(page) == [], f"{name} at {width} px"
            overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 1, f"{name} is {overflow} px wider than a {width} px window"
            page.screenshot(path=str(SCREENSHOTS / f"{name}-{width}.png"), full_page=True)
    finally:
        page.set_viewport_size({"width": WIDTHS[0], "height": 900})


def wait_for(check: Any, what: str, timeout: float = 10) -> None:
    poll_until(check, timeout=timeout, what=what)
