"""Ask in the browser: a question about a real finding answered by the built-in analyst streams
into the page and stays after a reload; hostile Markdown in an answer runs nothing and shows as
text; a read-only key reads but cannot ask."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import Dialog, Page, expect

from tests.integration.web.conftest import Site, look, sign_in
from tests.integration.web.test_findings_e2e import open_the_finding

HOSTILE = (
    '# Title\n\n<img src=x onerror="window.pwned=1"> <script>window.pwned=2</script>\n\n'
    "[click](javascript:window.pwned=3) [data](data:text/html,hi) [far](//evil.test/x) [near](/ui/alerts)"
    " [out](https://example.test/a) ![pic](/ui/static/app.css) <javascript:window.pwned=4>\n"
)


def enable_ask(site: Site) -> None:
    assert site.daemon.send("PUT", "/v1/ask/settings", {"enabled": True})["enabled"] is True


def test_ask_about_a_finding_streams_the_answer_and_a_reload_shows_it(page: Page, site: Site) -> None:
    enable_ask(site)
    sign_in(page, site.read_write)
    open_the_finding(page)
    page.get_by_role("link", name="Ask about this").click()
    expect(page).to_have_url(re.compile(r"/ui/ask\?about=finding%3A[0-9a-f]+&database=main$"))
    expect(page.locator("#ask-about")).to_contain_text("About the finding")
    look(page, "ask")

    question = "Why? <b>not bold</b>"
    page.locator("#question").fill(question)
    page.get_by_role("button", name="Ask", exact=True).click()
    answer = page.locator("article.msg-answer").last
    expect(answer).to_contain_text("built-in questions left this month", timeout=20_000)
    expect(page.get_by_role("status")).to_have_text("Done.")
    expect(answer.locator(".answer")).not_to_be_empty()
    expect(answer.locator("li.tool-running")).to_have_count(0)  # every step ended
    expect(page.locator("article.msg-user").last).to_have_text(question)  # markup in a question is text
    expect(page).to_have_url(re.compile(r"/ui/ask/conv_[A-Za-z0-9_-]+$"))

    page.reload()
    expect(page.locator("article.msg-user")).to_have_text(question)
    expect(page.locator("article.msg-answer .answer")).not_to_be_empty()
    expect(page.get_by_role("button", name="Yes")).to_have_attribute("aria-pressed", "false")
    page.get_by_role("button", name="Yes").click()
    expect(page.get_by_role("button", name="Yes")).to_have_attribute("aria-pressed", "true")
    look(page, "ask-conversation")
    page.goto("/ui/ask/settings")
    look(page, "ask-settings")

    # a query's page asks about the query
    page.goto("/ui/databases/main/queries")
    page.get_by_role("link", name=re.compile(r"generate_series")).first.click()
    page.get_by_role("link", name="Ask about this").click()
    expect(page).to_have_url(re.compile(r"/ui/ask\?about=query%3A[0-9a-f]{16}&database=main$"))
    expect(page.locator("#ask-about")).to_contain_text("About the query")


def test_hostile_markdown_in_an_answer_runs_nothing_and_shows_as_text(page: Page, site: Site) -> None:
    dialogs: list[str] = []

    def on_dialog(d: Dialog) -> None:
        dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", on_dialog)
    sign_in(page, site.read_only, "/ui/ask")
    found: dict[str, Any] = page.evaluate(
        """(text) => {
          const box = document.getElementById("ask-thread");
          const md = window.askRender(text);
          box.appendChild(md);
          return {
            html: md.innerHTML,
            text: md.textContent,
            scripts: md.querySelectorAll("script, img, iframe, object").length,
            hrefs: Array.from(md.querySelectorAll("a")).map((a) => a.getAttribute("href")),
            heading: md.querySelector("h1") ? md.querySelector("h1").textContent : null,
          };
        }""",
        HOSTILE,
    )
    assert page.evaluate("window.pwned") is None and dialogs == []
    assert found["scripts"] == 0 and found["heading"] == "Title"
    # an image is not loaded: it stays "!" and a link
    assert found["hrefs"] == ["/ui/alerts", "https://example.test/a", "/ui/static/app.css"]
    assert '<img src=x onerror="window.pwned=1">' in found["text"]
    assert "<script>window.pwned=2</script>" in found["text"]
    assert "[click](javascript:window.pwned=3)" in found["text"]
    assert "[far](//evil.test/x)" in found["text"]
    # a read-only key reads, but the form says why it cannot ask
    expect(page.get_by_text("This API key is read-only")).to_be_visible()
    expect(page.locator("#question")).to_be_disabled()
