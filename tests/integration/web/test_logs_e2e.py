"""The Logs pages on a real server's log: filters by kind and text, a line's page, a message made
of markup shown as text, the live tail showing a line the server just wrote, and groups."""

from __future__ import annotations

import re
import time

from playwright.sync_api import Page, expect

from tests.integration.web.conftest import DB, XSS, Site, look, sign_in


def test_filter_by_kind_and_text_then_open_a_line(page: Page, site: Site) -> None:
    sign_in(page, site.read_only, f"/ui/databases/{DB}/logs")
    look(page, "logs")
    page.get_by_label(re.compile(r"^errors")).check()
    page.get_by_label("Text").fill("division")
    page.get_by_role("button", name="Show lines").click()
    rows = page.locator("table.lines tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first.locator("td.msg")).to_have_text("division by zero")
    expect(page).to_have_url(re.compile(r"kind=errors.*q=division|q=division.*kind=errors"))
    rows.first.get_by_role("link", name=re.compile(r"^Line \d+")).click()
    expect(page.get_by_role("heading", level=1)).to_be_visible()
    expect(page.locator("dl")).to_contain_text("division by zero")
    # The statement, its values removed (the database keeps no values unless full_text is on).
    expect(page.locator("pre").filter(has_text=re.compile(r"SELECT \$1 ?/ ?\$2"))).to_have_count(1)
    look(page, "line")


def test_a_message_made_of_markup_shows_as_text(page: Page, site: Site) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    sign_in(page, site.read_only, f"/ui/databases/{DB}/logs")
    message = page.locator("table.lines td.msg").filter(has_text=XSS)
    expect(message).to_have_count(1)
    expect(message).to_contain_text(f'relation "{XSS}" does not exist')
    assert page.locator("table.lines script").count() == 0
    message.locator("xpath=..").get_by_role("link", name=re.compile(r"^Line \d+")).click()
    expect(page.locator("dl")).to_contain_text(XSS)
    page.goto(f"/ui/databases/{DB}/groups")
    expect(page.locator("table.groups")).to_contain_text(XSS)
    look(page, "groups")
    assert dialogs == []


def test_the_live_tail_shows_a_line_the_server_writes_within_2_seconds(page: Page, site: Site) -> None:
    sign_in(page, site.read_only, f"/ui/databases/{DB}/logs")
    page.get_by_role("button", name="Live tail").click()
    expect(page.locator("#tail-status")).to_contain_text("Following")
    marker = f"tail_marker_{time.monotonic_ns()}"
    started = time.monotonic()
    site.sql(f"SELECT * FROM {marker};")  # ERROR: relation "tail_marker_..." does not exist
    # (psql's disconnection line follows it, so it need not be the top row.)
    expect(page.locator("#tail-rows td.msg").filter(has_text=marker)).to_have_count(1, timeout=2_000)
    assert time.monotonic() - started < 2.0
    # Paused, a new line waits; resumed, it arrives.
    page.get_by_role("button", name="Pause").click()
    paused = f"tail_paused_{time.monotonic_ns()}"
    site.sql(f"SELECT * FROM {paused};")
    site.wait_for_line(paused)
    expect(page.locator("#tail-rows")).not_to_contain_text(paused)
    page.get_by_role("button", name="Resume").click()
    expect(page.locator("#tail-rows td.msg").filter(has_text=paused)).to_have_count(1, timeout=2_000)
    look(page, "tail")
