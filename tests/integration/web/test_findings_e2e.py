"""A finding the real server caused (a sort that spilled to a temporary file): its page, its fix
applied through the page by a read-write key and seen changed on the server; no button for a
read-only key. Then the queries page and a query's chart."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.integration.web.conftest import DB, Site, look, sign_in

TITLE = re.compile(r"Temporary files for postgres in postgres")


def open_the_finding(page: Page) -> None:
    page.goto(f"/ui/databases/{DB}/findings")
    link = page.get_by_role("link", name=TITLE)
    expect(link).to_be_visible(timeout=20_000)  # insights follow the stored lines
    link.click()
    expect(page.get_by_role("heading", level=1)).to_have_text(TITLE)


def test_a_read_only_key_sees_the_fix_sql_but_no_apply_button(page: Page, site: Site) -> None:
    sign_in(page, site.read_only)
    open_the_finding(page)
    fix = page.locator("article#fix-work-mem-role")
    expect(fix.locator("pre.sql")).to_contain_text('ALTER ROLE "postgres" IN DATABASE "postgres" SET work_mem')
    expect(fix.get_by_role("button", name="Copy SQL")).to_be_visible()  # JavaScript shows it
    expect(page.get_by_role("button", name="Apply")).to_have_count(0)
    look(page, "finding")
    page.goto(f"/ui/databases/{DB}/findings")
    look(page, "findings")


def test_a_read_write_key_applies_the_fix_and_the_server_changes(page: Page, site: Site) -> None:
    sign_in(page, site.read_write)
    open_the_finding(page)
    page.locator("article#fix-work-mem-role").get_by_role("button", name="Apply").click()
    expect(page.get_by_role("status")).to_contain_text("Applied.")
    settings = site.cluster.query(
        "SELECT array_to_string(setconfig, ',') FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole"
        " WHERE r.rolname = 'postgres'"
    )
    assert re.search(r"work_mem=\d+MB", settings), settings


def test_the_queries_page_and_a_query_chart(page: Page, site: Site) -> None:
    sign_in(page, site.read_only)
    page.goto(f"/ui/databases/{DB}/queries")
    statement = page.get_by_role("link", name=re.compile(r"generate_series"))
    expect(statement.first).to_be_visible(timeout=20_000)
    page.get_by_role("link", name="Calls").click()
    expect(page.get_by_role("link", name="Calls")).to_have_attribute("aria-current", "true")
    look(page, "queries")
    page.get_by_role("link", name=re.compile(r"generate_series")).first.click()
    expect(page.locator('[data-chart="calls-data"] canvas')).to_have_count(1)
    look(page, "query")
