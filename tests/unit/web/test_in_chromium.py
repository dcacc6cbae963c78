"""What only a browser shows of the pages, in Debian's chromium: log text that cannot reorder the
page around it, what the `hidden` attribute hides, the Ask form without and with its script, the
sidebar after an answer, axe-core's checks (every impact), the evidence list's layout, the icon."""

from __future__ import annotations

import asyncio
import itertools
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page, Response, expect

from forwarder.ask.providers.base import Finished, TextDelta
from forwarder.store import ask as A
from tests.unit.api.test_insights_findings import auth_failures, checkpoints
from tests.unit.api.test_insights_queries import get, store
from tests.unit.api.test_logs import add, mk
from tests.unit.ask.test_api import Scripted, enable, use
from tests.unit.web.conftest import Chromium, axe_violations

pytestmark = pytest.mark.e2e

RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: reverses the text after it, up to the end of its isolate
# An answer as a model may write it: its first heading at level 3, a heading skipping a level, and
# a table whose last column (links) has no header.
ANSWER = (
    "### What happened\n\nSome text.\n\n##### Detail\n\nMore.\n\n"
    "| Kind | Count | |\n|---|---|---|\n| error | 3 | [lines](/ui/databases/main/logs) |\n"
)


@pytest.fixture
def api_overrides(tmp_path: Path) -> dict[str, Any]:
    # Insights on (findings); a database called "main", like the site's "Main" navigation.
    return {"databases": [{"id": "main", "name": "main", "host": "db1", "log": {"path": str(tmp_path / "logs/*.log")}}]}


async def glyph_lefts(page: Page, selector: str, text: str) -> list[float]:
    """The left edge, on screen, of each character of `text` (its first occurrence in the text of
    the first element matching `selector`), in the order the characters are stored."""
    lefts: list[float] | None = await page.evaluate(
        """([selector, text]) => {
          const root = document.querySelector(selector);
          if (!root) return null;
          const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
          const nodes = [];
          let all = "";
          while (walker.nextNode()) { nodes.push([walker.currentNode, all.length]); all += walker.currentNode.data; }
          const start = all.indexOf(text);
          if (start < 0) return null;
          const lefts = [];
          for (let i = start; i < start + text.length; i++) {
            const [node, offset] = nodes.filter(([, o]) => o <= i).pop();
            const range = document.createRange();
            range.setStart(node, i - offset);
            range.setEnd(node, i - offset + 1);
            lefts.push(range.getBoundingClientRect().left);
          }
          return lefts;
        }""",
        [selector, text],
    )
    assert lefts is not None, (selector, text)
    return lefts


async def reads_left_to_right(page: Page, selector: str, text: str) -> bool:
    lefts = await glyph_lefts(page, selector, text)
    return all(a < b for a, b in itertools.pairwise(lefts))


async def finding_of(chromium: Chromium, rule: str) -> dict[str, Any]:
    _, body = await get(chromium.ui.api, "/v1/databases/main/findings")
    return dict(next(f for f in body["findings"] if f["rule"] == rule))


async def test_log_text_cannot_reorder_the_page_text_around_it(chromium: Chromium) -> None:
    api = chromium.ui.api
    await add(api, [mk(1, "error", "boom", user="bob" + RLO, database="shop")])
    await store(api, auth_failures(8, user="eve" + RLO))
    finding = await finding_of(chromium, "auth_failures")
    tab = await chromium.tab("read-only", path="/ui/databases/main/logs")
    page = tab.page

    # The user's U+202E stays inside the user: "@shop" reads as written, not "bobpohs@".
    assert await reads_left_to_right(page, "table.lines tbody td.who", "@shop")
    # ... in a row the live tail adds too.
    await page.get_by_role("button", name="Live tail").click()
    await expect(page.locator("#tail-status")).to_contain_text("Following new lines")
    await add(api, [mk(2, "error", "boom again", user="bob" + RLO, database="shop")])
    await expect(page.locator("#tail-rows td.who")).to_have_count(1)
    assert await reads_left_to_right(page, "#tail-rows td.who", "@shop")

    # A finding's title (a failed login's user name) before its rule, and its summary's code.
    await page.goto("/ui/databases/main/findings")
    assert await reads_left_to_right(page, "table.findings tbody td.msg", "(auth_failures)")
    await page.goto(f"/ui/databases/main/findings/{finding['id']}")
    assert await reads_left_to_right(page, ".summary", "within")


async def test_an_element_with_the_hidden_attribute_is_not_shown(chromium: Chromium) -> None:
    await store(chromium.ui.api, checkpoints(6))
    path = f"/ui/databases/main/findings/{(await finding_of(chromium, 'checkpoints'))['id']}"
    # Without JavaScript, and where the clipboard cannot be written (plain http on another host
    # than loopback), the Copy SQL button stays hidden; with both, the script shows it.
    no_script = await chromium.tab("read-only", javascript=False, path=path)
    await expect(no_script.page.locator("button.copy-sql")).to_be_hidden()
    no_clipboard = await chromium.tab("read-only")
    await no_clipboard.page.add_init_script("Object.defineProperty(navigator, 'clipboard', {value: undefined})")
    await no_clipboard.page.goto(path)
    assert await no_clipboard.page.evaluate("navigator.clipboard === undefined")
    await expect(no_clipboard.page.locator("button.copy-sql")).to_be_hidden()
    full = await chromium.tab("read-only", path=path)
    await expect(full.page.locator("button.copy-sql")).to_be_visible()

    # The live tail's buttons too, before the script shows one.
    logs = await chromium.tab("read-only", javascript=False, path="/ui/databases/main/logs")
    await expect(logs.page.locator("#tail-start")).to_be_hidden()
    await expect(logs.page.locator("#tail-table")).to_be_hidden()


async def test_the_evidence_links_show_no_list_markers(chromium: Chromium) -> None:
    await store(chromium.ui.api, checkpoints(6))
    finding = await finding_of(chromium, "checkpoints")
    tab = await chromium.tab("read-only", path=f"/ui/databases/main/findings/{finding['id']}")
    items = tab.page.locator("ul.evidence-lines li")
    await expect(items).to_have_count(len(finding["evidence"]["lines_available"]))
    # Laid out in a row, where a marker would sit on the link before it ("Line 10• Line 11").
    markers = await items.evaluate_all("(items) => items.map((li) => getComputedStyle(li).listStyleType)")
    assert set(markers) == {"none"}


async def test_the_ask_form_asks_only_through_its_script(chromium: Chromium) -> None:
    # Without JavaScript the button stays disabled: the browser would send a form the stream
    # endpoint refuses, and a GET would have put the CSRF token and the question in the address.
    no_script = await chromium.tab("read-write", javascript=False, path="/ui/ask")
    form = no_script.page.locator("#ask-form")
    assert await form.evaluate("(f) => [f.method, new URL(f.action).pathname]") == ["post", "/ui/ask/stream"]
    await expect(no_script.page.get_by_role("button", name="Ask", exact=True)).to_be_disabled()
    with_script = await chromium.tab("read-write", path="/ui/ask")
    await expect(with_script.page.get_by_role("button", name="Ask", exact=True)).to_be_enabled()
    read_only = await chromium.tab("read-only", path="/ui/ask")
    await expect(read_only.page.get_by_role("button", name="Ask", exact=True)).to_be_disabled()


async def test_a_new_conversation_shows_in_the_sidebar_once_answered(chromium: Chromium) -> None:
    api = chromium.ui.api
    use(api, Scripted([[TextDelta("Nothing is wrong."), Finished("m1")]]))
    await enable(api)
    tab = await chromium.tab("read-write", path="/ui/ask")
    page = tab.page
    await expect(page.locator(".ask-side")).to_contain_text("No conversation yet")
    question = "Why <b>bold</b>?"
    await page.locator("#question").fill(question)
    await page.get_by_role("button", name="Ask", exact=True).click()
    await expect(page.get_by_role("status")).to_have_text("Done.")
    await expect(page).to_have_url(re.compile(r"/ui/ask/conv_[0-9a-f]+$"))  # once the stream has ended
    conversation = page.url.rsplit("/", 1)[1]

    link = page.locator(".ask-side ul.conversations a").first
    await expect(link).to_have_text(question)  # its markup is text
    await expect(link).to_have_attribute("href", f"/ui/ask/{conversation}")
    await expect(link).to_have_attribute("aria-current", "page")
    await expect(page.locator(".ask-side")).not_to_contain_text("No conversation yet")
    await expect(page.locator(".ask-side b")).to_have_count(0)


async def test_pages_have_no_accessibility_violation_of_any_impact(chromium: Chromium) -> None:
    api = chromium.ui.api
    await add(api, [mk(1, "error", "boom", user="bob", database="shop")])
    await store(api, checkpoints(6))
    finding = await finding_of(chromium, "checkpoints")
    now_us = int(api.clock.now() * 1_000_000)

    def conversation(c: Any) -> None:
        A.create_conversation(c, "conv_md", "default", "main", "what happened?", now_us)
        A.add_message(c, A.Message("msg_q", "conv_md", "user", "what happened?", "complete", now_us))
        source = {"label": "main", "href": "/ui/databases/main"}
        A.add_message(
            c, A.Message("msg_a", "conv_md", "assistant", ANSWER, "complete", now_us + 1, model="m1", sources=(source,))
        )

    await api.daemon.store.write(conversation)
    tab = await chromium.tab("read-write")
    for path in (
        "/ui/databases",
        "/ui/databases/main",  # its tabs' navigation is named apart from the site's "Main"
        "/ui/databases/main/logs",
        "/ui/databases/main/findings",
        f"/ui/databases/main/findings/{finding['id']}",
        "/ui/ask",
        "/ui/ask/conv_md",  # an answer's headings and its table's empty header
    ):
        await tab.page.goto(path)
        assert await axe_violations(tab.page) == [], path
    # The answer's headings sit under the answer's own (h2), none skipped.
    headings = tab.page.locator("article.msg-answer").locator("h2, h3, h4, h5, h6")
    levels = await headings.evaluate_all("(hs) => hs.map((h) => h.tagName + ' ' + h.textContent)")
    assert levels == ["H2 Answer", "H3 What happened", "H4 Detail", "H3 Sources"]


async def test_a_page_declares_its_icon_and_logs_no_error(chromium: Chromium) -> None:
    # Without an icon of its own, the browser asks for /favicon.ico: a 404, an error in its console.
    # (That request is the browser's, not the page's: only the console tells of its failure.)
    tab = await chromium.tab(None)
    icons: list[Response] = []
    fetched = asyncio.Event()

    def on_response(response: Response) -> None:
        if "favicon" in response.url:
            icons.append(response)
            fetched.set()

    tab.page.on("response", on_response)
    tab.page.on("console", lambda msg: fetched.set() if msg.type == "error" else None)
    await tab.page.goto("/ui/signin")
    await asyncio.wait_for(fetched.wait(), 10)
    assert tab.problems == []
    assert [r.url.startswith(f"{chromium.ui.api.base}/ui/static/favicon.svg") and r.ok for r in icons] == [True]
