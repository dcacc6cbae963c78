"""The Logs pages: filters as the API's, paging, one line, the live tail (server-sent events), groups."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import aiohttp
import orjson

from forwarder.model import KINDS
from tests.unit.api.test_logs import add, get, mk
from tests.unit.web.conftest import Browser, Ui

LOGS = "/ui/databases/main/logs"
LINK = re.compile(r'href="/ui/databases/main/logs/(\d+)">Line')
HOSTILE = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def ids(html: str) -> list[str]:
    return LINK.findall(html)


async def api_ids(ui: Ui, **params: str) -> list[str]:
    status, body = await get(ui.api, "/v1/databases/main/logs", limit="50", **params)
    assert status == 200
    return [x["id"] for x in body["lines"]]


async def page(b: Browser, path: str, params: Any = ()) -> tuple[int, str]:
    """GET with repeatable parameters (a list of pairs, as a form sends them)."""
    async with b.session.get(b.base + path, params=params, allow_redirects=False) as resp:
        return resp.status, await resp.text()


async def test_filters_give_the_same_lines_as_the_api(ui: Ui) -> None:
    await add(ui.api, [mk(i, KINDS[i % len(KINDS)], f"text {KINDS[i % len(KINDS)]} {i}") for i in range(60)])
    await add(ui.api, [mk(60, "error", "duplicate key value")])
    b = await ui.browser("read-only")
    cases: list[tuple[list[tuple[str, str]], dict[str, str]]] = [
        ([("kind", "errors")], {"kind": "errors"}),
        ([("kind", "deadlock"), ("kind", "checkpoint")], {"kind": "deadlock,checkpoint"}),
        ([("q", "duplicate")], {"q": "duplicate"}),
        ([("kind", "locks"), ("q", "text")], {"kind": "locks", "q": "text"}),
        # What a datetime-local input sends (read as UTC), and the API's RFC 3339.
        (
            [("from", "2027-01-15T08:00:10"), ("to", "2027-01-15T08:00:20"), ("q", "")],
            {"from": "2027-01-15T08:00:10Z", "to": "2027-01-15T08:00:20Z"},
        ),
        ([("from", "2027-01-15T08:00:50Z")], {"from": "2027-01-15T08:00:50Z"}),
        # zero seconds, which the browser leaves out
        ([("from", "2027-01-15T08:01")], {"from": "2027-01-15T08:01:00Z"}),
    ]
    for form, api_params in cases:
        status, html = await page(b, LOGS, form)
        expected = await api_ids(ui, **api_params)
        assert status == 200 and expected and ids(html) == expected, form
    _, html = await page(b, LOGS, [("kind", "errors"), ("kind", "locks")])
    assert 'id="kind-errors" name="kind" value="errors" checked' in html
    assert 'value="deadlock" checked' not in html  # the choices as made, not expanded
    _, html = await page(b, LOGS, [("from", "2027-01-15T08:00:10Z")])
    assert 'value="2027-01-15T08:00:10"' in html and "From (UTC)" in html


async def test_pages_of_fifty_with_older_and_newest_links(ui: Ui) -> None:
    await add(ui.api, [mk(i, "connection", f"line {i}") for i in range(120)])
    b = await ui.browser("read-only")
    _, html = await b.get(LOGS)
    first = ids(html)
    assert len(first) == 50 and first == await api_ids(ui)
    assert "Newest lines" not in html
    seen = list(first)
    for expected_count in (50, 20):
        older = re.search(r'<a href="([^"]+)">Older lines</a>', html)
        assert older is not None
        _, html = await b.get(older.group(1).replace("&amp;", "&"))
        got = ids(html)
        assert len(got) == expected_count and int(got[0]) < int(seen[-1])
        assert "Newest lines" in html
        seen += got
    assert "Older lines" not in html
    assert len(set(seen)) == 120


async def test_an_empty_result_says_so(ui: Ui) -> None:
    b = await ui.browser("read-only")
    status, html = await b.get(LOGS, kind="deadlock")
    assert status == 200 and "No line matches these filters." in html


async def test_a_bad_filter_shows_the_form_again_naming_the_field(ui: Ui) -> None:
    b = await ui.browser("read-only")
    for params, field in (
        ({"kind": "nope"}, "kind"),
        ({"from": "yesterday"}, "from"),
        ({"to": "2027-13-45T99:00"}, "to"),
        ({"before": "x"}, "form"),
        ({"wait_seconds": "5"}, "form"),
    ):
        status, html = await b.get(LOGS, **params)
        assert status == 400, params
        assert f'<p class="error field-error" id="problem-{field}">' in html, params
        assert '<form method="get"' in html and "Traceback" not in html
        element_ids = re.findall(r' id="([^"]+)"', html)
        assert len(element_ids) == len(set(element_ids))  # the error's id is no checkbox's
    _, html = await b.get(LOGS, q="needle", kind="nope")
    assert 'value="needle"' in html  # what was typed stays


async def test_a_line_page_shows_every_field_in_the_api_order(ui: Ui) -> None:
    await add(
        ui.api,
        [
            mk(
                1,
                "error",
                "duplicate key value violates unique constraint",
                sqlstate="23505",
                detail="Key (id)=(1) already exists.",
                hint="Try another id.",
                context="SQL function f line 3",
                statement="INSERT INTO t VALUES ($1)",
                user="app",
                database="shop",
            )
        ],
    )
    await add(ui.api, [mk(2, "error", "duplicate key value violates unique constraint")])
    b = await ui.browser("read-only")
    _, body = await get(ui.api, "/v1/databases/main/logs")
    line = body["lines"][1]
    status, html = await b.get(f"{LOGS}/{line['id']}")
    assert status == 200
    shown = ("Key (id)=(1) already exists.", "Try another id.", "SQL function f line 3", "INSERT INTO t VALUES ($1)")
    for text in shown:
        assert f"<pre>{text}</pre>" in html
    names = re.findall(r"<dt [^>]*>([a-z_]+)</dt>", html)
    assert names == list(line)  # the API's fields, in its order
    group = re.search(r'<a href="(/ui/databases/main/logs\?group=[0-9a-f]{16})">Lines of its group', html)
    assert group is not None
    _, html = await b.get(group.group(1))
    assert len(ids(html)) == 2


async def test_an_unknown_line_or_one_of_another_database_is_a_404_page(ui: Ui) -> None:
    await add(ui.api, [mk(1)], db="other")
    _, body = await get(ui.api, "/v1/databases/other/logs")
    other = body["lines"][0]["id"]
    b = await ui.browser("read-only")
    assert (await b.get(f"/ui/databases/other/logs/{other}"))[0] == 200
    for path in (f"{LOGS}/{other}", f"{LOGS}/999", f"{LOGS}/{'9' * 30}", f"{LOGS}/abc", "/ui/databases/nope/logs/1"):
        status, html = await b.get(path)
        assert status == 404 and "Not found" in html and "Traceback" not in html, path


async def test_log_text_is_escaped_on_every_page(ui: Ui) -> None:
    await add(ui.api, [mk(i, "error", HOSTILE, detail=HOSTILE, statement=HOSTILE) for i in range(2)])
    b = await ui.browser("read-only")
    _, html = await b.get(LOGS)
    line_id = ids(html)[0]
    for path in (LOGS, f"{LOGS}/{line_id}", "/ui/databases/main/groups"):
        status, html = await b.get(path)
        assert status == 200 and ESCAPED in html and HOSTILE not in html, path
    _, html = await b.get(LOGS, q=HOSTILE)  # a search text echoed in the form
    assert HOSTILE not in html


async def test_groups_page_counts_and_links_to_the_lines(ui: Ui) -> None:
    await add(ui.api, [mk(i, "error", f"same thing {i}") for i in range(3)])
    await add(ui.api, [mk(5, "checkpoint", "checkpoint starting")])
    b = await ui.browser("read-only")
    status, html = await b.get("/ui/databases/main/groups")
    assert status == 200
    _, api = await get(ui.api, "/v1/databases/main/logs/groups")
    top = api["groups"][0]
    assert f'<a href="/ui/databases/main/logs?group={top["group"]}">3 lines</a>' in html
    assert "same thing 2" in html and "2027-01-15 08:00:00.000 UTC" in html and "2027-01-15 08:00:02.000 UTC" in html
    _, html = await b.get(LOGS, group=top["group"])
    assert len(ids(html)) == 3 and "Only the lines of one group" in html
    assert (await b.get("/ui/databases/main/groups", **{"from": "nope"}))[0] == 400


# --- live tail ------------------------------------------------------------------------------


async def next_event(resp: aiohttp.ClientResponse) -> dict[str, str]:
    """The next server-sent event or comment: its fields (a comment as `comment`)."""
    fields: dict[str, str] = {}
    async with asyncio.timeout(5):  # a bound for a failing test, not a wait for time-based logic
        while True:
            raw = (await resp.content.readline()).decode().rstrip("\n")
            if raw == "":
                if fields:
                    return fields
                continue
            name, _, value = raw.partition(":")
            fields["comment" if name == "" else name] = value.removeprefix(" ")


async def test_the_tail_sends_new_matching_lines_and_resumes_from_last_event_id(ui: Ui) -> None:
    await add(ui.api, [mk(1, "error", "old")])
    b = await ui.browser("read-only")
    _, html = await b.get(LOGS, kind="errors")
    tail = re.search(r'data-tail-url="([^"]+)"', html)
    assert tail is not None and "after=" in tail.group(1)
    url = b.base + tail.group(1).replace("&amp;", "&")
    async with b.session.get(url) as resp:
        assert resp.status == 200 and resp.content_type == "text/event-stream"
        assert (await next_event(resp)) == {"retry": "1000"}
        await add(ui.api, [mk(2, "connection", "not an error")])
        await add(ui.api, [mk(3, "error", HOSTILE)])
        event = await next_event(resp)
        line = orjson.loads(event["data"])
        assert line["message"] == HOSTILE and event["id"] == line["id"]
        first = event["id"]
    # The browser reconnects with the last id it got: nothing stored meanwhile is lost.
    await add(ui.api, [mk(4, "error", "while away"), mk(5, "deadlock", "also while away")])
    async with b.session.get(url, headers={"Last-Event-ID": first}) as resp:
        await next_event(resp)  # retry
        got = [orjson.loads((await next_event(resp))["data"])["message"] for _ in range(2)]
        assert got == ["while away", "also while away"]  # oldest first, each once
        # Idle: a heartbeat comment once the wait is up (on the daemon's clock).
        async with asyncio.timeout(5):
            await ui.api.clock.until_sleeping()
        ui.api.clock.advance(15)
        assert (await next_event(resp)) == {"comment": "idle"}


async def test_the_tail_needs_a_session_and_valid_filters(ui: Ui) -> None:
    anonymous = await ui.browser(None)
    async with anonymous.session.get(anonymous.base + LOGS + "/tail", allow_redirects=False) as resp:
        assert resp.status == 303
    b = await ui.browser("read-only")
    status, _ = await b.get(LOGS + "/tail", kind="nope")
    assert status == 400
    status, _ = await b.get(LOGS + "/tail", before="3")
    assert status == 400


async def test_a_tail_ends_when_the_browser_goes_or_the_daemon_stops(ui: Ui) -> None:
    b = await ui.browser("read-only")
    async with b.session.get(b.base + LOGS + "/tail") as resp:
        await next_event(resp)
    # Gone: the tail notices at its next heartbeat at the latest, and waits no more.
    for _ in range(500):
        if ui.api.clock.next_wake() is None:
            break
        ui.api.clock.advance(15)
        await asyncio.sleep(0.01)  # lets the server see the closed connection (not time-based logic)
    assert ui.api.clock.next_wake() is None
    # Stopping: an open tail ends at once instead of holding the shutdown for its wait.
    async with b.session.get(b.base + LOGS + "/tail") as resp:
        await next_event(resp)
        async with asyncio.timeout(5):
            await ui.api.clock.until_sleeping()
        server = ui.api.daemon.api
        assert server is not None
        async with asyncio.timeout(5):
            await server.aclose()
            assert await resp.content.read() == b""  # the stream ended
