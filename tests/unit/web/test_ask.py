"""The Ask pages: a question streamed through the page's endpoint, conversations and their
messages, feedback, the settings with the own key, read-only sessions and organizations."""

from __future__ import annotations

import html as htmllib
import re
from typing import Any

import aiohttp
import orjson
import pytest

from forwarder.ask.providers.base import Finished, KeyCheck, TextDelta, ToolCall
from forwarder.store import ask as A
from forwarder.store import state as S
from tests.unit.ask.test_api import Scripted, enable, use
from tests.unit.insights.logtext import parse, stamp
from tests.unit.web.conftest import CSRF_FIELD, Browser, Ui

HOSTILE = "<img src=x onerror=alert(1)> <script>alert(2)</script> [click](javascript:alert(3))"
OWN_KEY = "sk-test-the-own-key-0123456789abcdef"
RULE = {"id": "deadlocks", "kinds": ["deadlock"], "text": "deadlock", "threshold": 1, "window_seconds": 300}


@pytest.fixture
def api_overrides() -> dict[str, Any]:
    return {"insights": {"enabled": False}, "alerts": [RULE]}


async def ask(b: Browser, body: dict[str, Any], *, csrf: bool = True) -> tuple[int, str, Any]:
    """POST /ui/ask/stream as ask.js does: (status, content type, [(event, data)] or the JSON/HTML body)."""
    headers = {"Origin": b.base, "Content-Type": "application/json"}
    if csrf:
        headers["X-CSRF-Token"] = b.csrf
    async with b.session.post(b.base + "/ui/ask/stream", data=orjson.dumps(body), headers=headers) as resp:
        raw = await resp.read()
        if resp.content_type != "text/event-stream":
            parsed = orjson.loads(raw) if resp.content_type == "application/json" else raw.decode()
            return resp.status, resp.content_type, parsed
        events = []
        for block in raw.decode().split("\n\n"):
            lines = [x for x in block.split("\n") if x.startswith("data: ")]
            if lines:
                data = orjson.loads(lines[0].removeprefix("data: "))
                events.append((data["type"], data))
        return resp.status, resp.content_type, events


async def other_org_browser(ui: Ui) -> Browser:
    """A read-write key of the organization `acme`, signed in."""
    now_us = int(ui.api.clock.now() * 1_000_000)
    _, key = await ui.api.daemon.store.write(lambda c: S.create_key(c, "acme", "read-write", now_us, org="acme"))
    session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
    ui.opened.append(session)
    b = Browser(ui.api.base, session)
    status, _, _ = await b.post("/ui/signin", {"key": key, "next": "/ui/ask"}, csrf=False)
    assert status == 303
    await b.get("/ui/ask")
    return b


async def stored_conversation(ui: Ui, org: str = "default") -> str:
    """A conversation written straight into the store, with a hostile answer, sources and actions."""
    now_us = int(ui.api.clock.now() * 1_000_000)

    def _txn(c: Any) -> None:
        A.create_conversation(c, "conv_stored", org, "main", "what happened?", now_us)
        A.add_message(c, A.Message("msg_q", "conv_stored", "user", "what happened? <b>bold?</b>", "complete", now_us))
        A.add_message(
            c,
            A.Message(
                "msg_a",
                "conv_stored",
                "assistant",
                "## Answer\n" + HOSTILE + "</script>",
                "complete",
                now_us + 1,
                model="m1",
                tools=({"id": "t1", "name": "overview", "label": "Read the overview", "status": "done"},),
                sources=(
                    {"label": "Main DB", "href": "/ui/databases/main"},
                    {"label": "evil", "href": "javascript:alert(4)"},
                    {"label": "elsewhere", "href": "//evil.test/x"},
                ),
                actions=(
                    {
                        "kind": "fix",
                        "database": "main",
                        "finding_id": "f1",
                        "fix_id": "work-mem-role",
                        "label": "Raise work_mem",
                        "href": "/ui/databases/main/findings/f1",
                    },
                ),
            ),
        )

    await ui.api.daemon.store.write(_txn)
    return "conv_stored"


async def test_the_ask_pages_load_on_first_use_and_only_under_their_prefix(ui: Ui) -> None:
    # Served through one resource at /ui/ask (forwarder/api/lazyroutes.py): its own paths only.
    b = await ui.browser("read-only")
    assert (await b.get("/ui/ask"))[0] == 200
    assert (await b.get("/ui/ask/settings"))[0] == 200
    assert (await b.get("/ui/askew"))[0] == 404


async def test_the_ask_page_is_in_the_nav_and_prefills_what_the_question_is_about(ui: Ui) -> None:
    b = await ui.browser("read-write")
    status, html = await b.get("/ui/ask", about="database:main", database="main")
    assert status == 200
    assert 'href="/ui/ask" aria-current="page">Ask' in html
    assert 'name="about_kind" value="database"' in html and 'name="about_id" value="main"' in html
    assert '<option value="main" selected>' in html
    assert "Ask is off for this organization" in html  # off until a read-write key turns it on
    assert 'textarea id="question" name="question"' in html
    # Posted to the stream (never a GET that would put the token and the question in the address),
    # by ask.js only: the page sends the button disabled, and the script enables it.
    assert re.search(r'<form id="ask-form"[^>]* method="post" action="/ui/ask/stream">', html)
    assert '<button type="submit" disabled>Ask</button>' in html
    assert "vendor/markdown-it-15.0.3/markdown-it.min.js" in html and "ask.js" in html

    status, html = await b.get("/ui/ask", about="finding:abc")
    assert status == 400 and "database" in html  # a finding needs its database
    status, html = await b.get("/ui/ask", about="nothing:1")
    assert status == 400
    status, _ = await b.get("/ui/ask", database="nope")
    assert status == 404


async def test_a_question_streams_through_the_page_and_the_conversation_shows_it(ui: Ui) -> None:
    use(
        ui.api, Scripted([[ToolCall("c1", "list_databases", {}), Finished("m1")], [TextDelta(HOSTILE), Finished("m1")]])
    )
    await enable(ui.api)
    b = await ui.browser("read-write")
    status, ctype, events = await ask(b, {"question": "which databases?", "database": "main"})
    assert (status, ctype) == (200, "text/event-stream")
    names = [n for n, _ in events]
    assert names[0] == "start" and names[-1] == "done" and "tool" in names
    assert events[-1][1]["done"]["remaining"] == 99
    conv = events[0][1]["conversation_id"]
    answer_id = events[0][1]["message_id"]

    status, html = await b.get(f"/ui/ask/{conv}")
    assert status == 200
    assert "which databases?" in html and f'id="m-{answer_id}"' in html
    assert "tool-done" in html
    # The answer's Markdown reaches the page as text and as JSON for ask.js; never as markup.
    assert "<img src=x" not in html and "<script>alert" not in html
    data = re.search(r'<script type="application/json" id="ask-markdown">(.*?)</script>', html, re.S)
    assert data is not None
    assert orjson.loads(data.group(1))[answer_id].endswith(HOSTILE)
    # the sidebar lists it; the form continues it
    assert f'href="/ui/ask/{conv}" aria-current="page"' in html
    assert f'name="conversation_id" value="{conv}"' in html

    # the next question continues the conversation
    status, _, events = await ask(b, {"question": "and now?", "conversation_id": conv})
    assert status == 200 and events[0][1]["conversation_id"] == conv


async def test_the_stream_needs_the_csrf_token_and_a_read_write_key(ui: Ui) -> None:
    use(ui.api, Scripted([]))
    rw = await ui.browser("read-write")
    status, _, _ = await ask(rw, {"question": "hi"}, csrf=False)
    assert status == 403
    # a refusal before the stream is the API's JSON error, with its code
    status, ctype, body = await ask(rw, {"question": "hi"})
    assert (status, ctype, body["error"]["code"]) == (403, "application/json", "not_enabled")
    status, _, body = await ask(rw, {"question": ""})
    assert status == 400 and body["error"]["field"] == "question"
    await enable(ui.api)

    ro = await ui.browser("read-only")
    status, _, _ = await ask(ro, {"question": "hi"})
    assert status == 403
    status, html = await ro.get("/ui/ask")
    assert status == 200 and "This API key is read-only" in html
    assert re.search(r'<textarea id="question"[^>]* disabled', html)


async def test_a_stored_answer_keeps_only_this_sites_links(ui: Ui) -> None:
    conv = await stored_conversation(ui)
    b = await ui.browser("read-only")
    status, html = await b.get(f"/ui/ask/{conv}")
    assert status == 200
    assert "what happened? &lt;b&gt;bold?&lt;/b&gt;" in html
    assert '<a href="/ui/databases/main"><bdi>Main DB</bdi></a>' in html
    assert "javascript:" not in html.replace(htmllib.escape("[click](javascript:alert(3))"), "")
    assert 'href="//evil.test' not in html and "<li><bdi>elsewhere</bdi></li>" in html
    assert (
        'href="/ui/databases/main/findings/f1#fix-work-mem-role"' in html
        and "Review the fix: <bdi>Raise work_mem</bdi>" in html
    )
    assert "</script>" not in html.split('id="ask-markdown">', 1)[1].split("</script>", 1)[0]
    # read-only: the rating is shown, no button to change it, no delete buttons
    assert "not rated" in html and 'value="up"' not in html and "/delete" not in html


async def test_feedback_needs_the_csrf_token_and_shows_as_pressed(ui: Ui) -> None:
    conv = await stored_conversation(ui)
    b = await ui.browser("read-write")
    await b.get(f"/ui/ask/{conv}")
    status, _, _ = await b.post("/ui/ask/messages/msg_a/feedback", {"rating": "up", "conversation": conv}, csrf=False)
    assert status == 403
    status, _, location = await b.post("/ui/ask/messages/msg_a/feedback", {"rating": "up", "conversation": conv})
    assert (status, location) == (303, f"/ui/ask/{conv}#m-msg_a")
    _, html = await b.get(f"/ui/ask/{conv}")
    assert 'value="up" class="secondary small" aria-pressed="true"' in html
    # ask.js asks for JSON
    async with b.session.post(
        b.base + "/ui/ask/messages/msg_a/feedback",
        data={"rating": "", "csrf": b.csrf},
        headers={"Origin": b.base, "Accept": "application/json"},
    ) as resp:
        assert resp.status == 200 and await resp.json() == {"ok": True, "rating": ""}
    status, _, _ = await b.post("/ui/ask/messages/msg_q/feedback", {"rating": "up", "conversation": conv})
    assert status == 400  # a question is not rated

    ro = await ui.browser("read-only")
    status, _, _ = await ro.post("/ui/ask/messages/msg_a/feedback", {"rating": "down", "conversation": conv})
    assert status == 403


async def test_another_organizations_conversation_is_a_404_page(ui: Ui) -> None:
    conv = await stored_conversation(ui)
    other = await other_org_browser(ui)
    status, html = await other.get(f"/ui/ask/{conv}")
    assert status == 404 and "what happened?" not in html
    _, html = await other.get("/ui/ask")
    assert "conv_stored" not in html and "No conversation yet" in html
    status, _, _ = await other.post(f"/ui/ask/{conv}/delete", {})
    assert status == 404
    status, _, _ = await other.post("/ui/ask/messages/msg_a/feedback", {"rating": "up", "conversation": conv})
    assert status == 404
    status, _, _ = await other.post("/ui/ask/delete", {})  # deletes acme's (none), not default's
    assert status == 303
    b = await ui.browser("read-only")
    status, _ = await b.get(f"/ui/ask/{conv}")
    assert status == 200


async def test_conversations_are_deleted_one_by_one_or_all(ui: Ui) -> None:
    conv = await stored_conversation(ui)
    use(ui.api, Scripted([]))
    await enable(ui.api)
    b = await ui.browser("read-write")
    ui.api.clock.advance(60)
    _, _, events = await ask(b, {"question": "second one"})
    second = events[0][1]["conversation_id"]
    _, html = await b.get("/ui/ask")
    assert html.index(f'href="/ui/ask/{second}"') < html.index(f'href="/ui/ask/{conv}"')  # newest first
    assert "Delete all 2 conversations" in html
    status, _, location = await b.post(f"/ui/ask/{conv}/delete", {})
    assert (status, location) == (303, "/ui/ask")
    status, _ = await b.get(f"/ui/ask/{conv}")
    assert status == 404
    status, _, _ = await b.post("/ui/ask/delete", {})
    assert status == 303
    _, html = await b.get("/ui/ask")
    assert "No conversation yet" in html


async def test_settings_turn_ask_on_and_the_key_never_shows(ui: Ui) -> None:
    ask_service = ui.api.daemon._ctx.ask  # type: ignore[union-attr]
    assert ask_service is not None
    verdicts = {OWN_KEY: KeyCheck("ok"), "sk-refused": KeyCheck("refused"), "sk-down": KeyCheck("unreachable", "down")}

    async def check(provider: str, api_key: str, config: object) -> KeyCheck:
        return verdicts[api_key]

    ask_service.check_key = check
    b = await ui.browser("read-write")
    status, html = await b.get("/ui/ask/settings")
    assert status == 200 and "Turn Ask on" in html and "the built-in analyst" in html
    status, _, location = await b.post("/ui/ask/settings/enabled", {"enabled": "true"})
    assert (status, location) == (303, "/ui/ask/settings")
    _, html = await b.get("/ui/ask/settings")
    assert "<strong>on</strong>" in html and "Turn Ask off" in html

    form = {"provider": "openai", "fast_model": "gpt-x", "deep_model": ""}
    status, html, _ = await b.post("/ui/ask/settings/key", {**form, "api_key": "sk-refused"})
    assert status == 422 and "openai refused this key" in html and "sk-refused" not in html
    assert 'value="gpt-x"' in html  # the form keeps what was typed, except the key
    status, html, _ = await b.post("/ui/ask/settings/key", {**form, "api_key": "sk-down"})
    assert status == 502 and "could not be reached" in html and "sk-down" not in html
    status, _, location = await b.post("/ui/ask/settings/key", {**form, "api_key": OWN_KEY})
    assert (status, location) == (303, "/ui/ask/settings")
    pages = ["/ui/ask/settings", "/ui/ask", "/ui/databases"]
    for path in pages:
        status, html = await b.get(path)
        assert status == 200 and OWN_KEY not in html, path
    _, html = await b.get("/ui/ask/settings")
    assert "gpt-x" in html and "Remove the openai key" in html
    status, _, _ = await b.post("/ui/ask/settings/key/delete", {})
    assert status == 303
    _, html = await b.get("/ui/ask/settings")
    assert "Remove the openai key" not in html

    ro = await ui.browser("read-only")
    status, html = await ro.get("/ui/ask/settings")
    assert status == 200 and "This API key is read-only" in html and CSRF_FIELD.search(html) is not None
    assert 'action="/ui/ask/settings/key"' not in html
    status, _, _ = await ro.post("/ui/ask/settings/enabled", {"enabled": "false"})
    assert status == 403


async def test_an_alert_page_offers_ask_about_this(ui: Ui) -> None:
    now = ui.api.clock.now()
    text = f"{stamp(now - 5)} [8] app@shop/psql ERROR:  deadlock detected\n"
    await ui.api.daemon.store.append(ui.api.daemon.registry.by_id["main"].identity, parse(text), [], 0)
    assert ui.api.daemon.alerts is not None
    await ui.api.daemon.alerts.evaluate_once()
    async with ui.api.session.get(ui.api.url("/v1/alerts"), headers=ui.api.auth(ui.api.read_only)) as resp:
        (alert,) = (await resp.json())["alerts"]
    b = await ui.browser("read-only")
    _, html = await b.get(f"/ui/alerts/{alert['id']}")
    link = f'href="/ui/ask?about=alert%3A{alert["id"]}&amp;database=main">Ask about this'
    assert link in html
    status, html = await b.get("/ui/ask", about=f"alert:{alert['id']}", database="main")
    assert status == 200 and f'name="about_id" value="{alert["id"]}"' in html
