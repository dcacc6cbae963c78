"""A person's first visit: sign in, the databases, a database's overview with its chart, headers,
a cross-site form, sign out."""

from __future__ import annotations

import signal

from playwright.sync_api import Page, expect

from forwarder.web.render import CSP
from tests.harness import poll_until
from tests.integration.web.conftest import DB, Site, look, sign_in


def test_sign_in_see_the_databases_and_the_overview_chart_then_sign_out(page: Page, site: Site) -> None:
    page.goto("/ui/databases")
    expect(page).to_have_url(f"{site.url}/ui/signin?next=/ui/databases")
    look(page, "signin")
    sign_in(page, site.read_only)
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name="main"))
    expect(row).to_contain_text("reading")
    look(page, "databases")

    row.get_by_role("link", name="main").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("main")
    # uPlot drew the 24-hour chart (a canvas), and the table beside it counts the same lines.
    expect(page.locator(".chart canvas")).to_have_count(1)
    expect(page.get_by_role("table").filter(has_text="Lines in the last 24 hours")).to_contain_text("error")
    # A read-only key sees the settings but no switch.
    expect(page.get_by_text("Read the log:")).to_be_visible()
    expect(page.get_by_role("button", name="Turn off")).to_have_count(0)
    look(page, "overview")

    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(f"{site.url}/ui/signin")
    page.goto(f"/ui/databases/{DB}")
    expect(page).to_have_url(f"{site.url}/ui/signin?next=/ui/databases/{DB}")


def test_every_page_carries_the_csp_and_a_wrong_id_is_a_404_page(page: Page, site: Site) -> None:
    sign_in(page, site.read_only)
    for path in ("/ui/databases", f"/ui/databases/{DB}", "/ui/databases/nope", "/ui/no/such/page"):
        response = page.goto(path)
        assert response is not None
        assert response.headers["content-security-policy"] == CSP
        if "no" in path.split("/")[-1]:
            assert response.status == 404
            expect(page.get_by_role("heading", level=1)).to_have_text("Not found")
    look(page, "not-found")


def test_a_form_on_another_site_cannot_change_a_setting(page: Page, site: Site) -> None:
    sign_in(page, site.read_write)
    # A page of another origin that posts the overview's own switch (with no CSRF token).
    evil = (
        f'<!doctype html><title>x</title><form method="post" action="{site.url}/ui/databases/{DB}/settings">'
        '<input name="setting" value="enabled"><input name="value" value="false">'
        '<button type="submit">Win a prize</button></form>'
    )
    page.route("http://evil.test/**", lambda route: route.fulfill(content_type="text/html", body=evil))
    page.goto("http://evil.test/")
    with page.expect_navigation():
        page.get_by_role("button", name="Win a prize").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Not allowed")
    assert site.daemon.get(f"/v1/databases/{DB}/logs/overview")["settings"]["enabled"] is True


def test_a_read_write_key_switches_full_text_on_and_off(page: Page, site: Site) -> None:
    sign_in(page, site.read_write, f"/ui/databases/{DB}")
    switch = page.locator(".switch").filter(has_text="Full text")
    switch.get_by_role("button", name="Turn on").click()
    expect(switch).to_contain_text("on")
    assert site.daemon.get(f"/v1/databases/{DB}/logs/overview")["settings"]["full_text"] is True
    page.locator(".switch").filter(has_text="Full text").get_by_role("button", name="Turn off").click()
    assert site.daemon.get(f"/v1/databases/{DB}/logs/overview")["settings"]["full_text"] is False


def test_the_alerts_page_and_an_alert(page: Page, site: Site) -> None:
    # A rule the stored errors already reach; a reload (SIGHUP) evaluates the rules at once.
    rule = '[[alerts]]\nid = "any-error"\nkinds = ["errors"]\nthreshold = 1\nwindow_seconds = 3600\n'
    site.daemon.write_config("[insights]\nenabled = true\n" + rule)
    assert site.daemon.proc is not None
    site.daemon.proc.send_signal(signal.SIGHUP)
    poll_until(lambda: bool(site.daemon.get("/v1/alerts")["alerts"]), timeout=20, what="the alert fires")
    sign_in(page, site.read_only, "/ui/alerts")
    expect(page.get_by_role("heading", level=1)).to_have_text("Alerts")
    look(page, "alerts")
    page.locator("a[href^='/ui/alerts/']").first.click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("any-error")
    look(page, "alert")
