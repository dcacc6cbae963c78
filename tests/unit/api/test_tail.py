"""The live tail: a filtered long poll waits for a matching line, and says how far it looked."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from yarl import URL

from forwarder import cli, metrics
from forwarder.store import LineQuery, Page
from tests.unit.api.conftest import Api
from tests.unit.api.test_logs import add, get, mk

ROUTE = "/v1/databases/{ref}/logs"


def answered() -> float:
    """Requests the listing route has answered with 200, so far (the counter is process-wide)."""
    labels = {"route": ROUTE, "method": "GET", "status": "200"}
    return metrics.REGISTRY.get_sample_value("forwarder_http_requests_total", labels) or 0.0


async def eventually(condition: Callable[[], bool], what: str) -> None:
    """Wait for another thread or task to make `condition` true (not for time-based logic)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


async def head(api: Api) -> int:
    _, body = await get(api, "/v1/databases/main/logs", limit="1")
    return int(body["lines"][0]["id"])


async def test_a_page_after_an_id_says_how_far_it_looked(api: Api) -> None:
    await add(api, [mk(i, "connection") for i in range(5)] + [mk(5, "error", "boom")])
    await add(api, [mk(i, "connection") for i in range(6, 11)])
    newest = await head(api)
    _, body = await get(api, "/v1/databases/main/logs", after="0", kind="errors")
    assert [x["message"] for x in body["lines"]] == ["boom"] and body["next_after"] == str(newest)
    # A full page looked no further than its newest line: the next poll starts there.
    _, body = await get(api, "/v1/databases/main/logs", after="0", limit="3")
    assert body["has_more"] is True and body["next_after"] == body["lines"][0]["id"]
    _, rest = await get(api, "/v1/databases/main/logs", after=body["next_after"], limit="500")
    assert len(body["lines"]) + len(rest["lines"]) == 11 and rest["next_after"] == str(newest)
    # A window closed by `before` looked up to it; without `after` there is nothing to continue.
    _, body = await get(api, "/v1/databases/main/logs", after="0", before="3", kind="errors")
    assert body["lines"] == [] and body["next_after"] == "2"
    _, body = await get(api, "/v1/databases/main/logs", kind="errors")
    assert "next_after" not in body


async def test_a_filtered_long_poll_waits_past_lines_that_do_not_match(api: Api) -> None:
    await add(api, [mk(1, "connection")])
    newest = await head(api)
    waiting = asyncio.create_task(
        get(api, "/v1/databases/main/logs", after=str(newest), kind="errors", wait_seconds="5")
    )
    for i in range(3):
        looked = answered()
        await add(api, [mk(10 + i, "connection")])
        await asyncio.sleep(0.05)  # lets the poll look at the new line (not waiting on time-based logic)
        assert not waiting.done() and answered() == looked
    await add(api, [mk(20, "error", "boom")])
    status, body = await asyncio.wait_for(waiting, 5)
    assert status == 200 and [x["message"] for x in body["lines"]] == ["boom"]
    assert body["next_after"] == body["lines"][0]["id"]


async def test_a_long_poll_ends_empty_when_its_time_is_up(api: Api) -> None:
    await add(api, [mk(1, "connection")])
    newest = await head(api)
    waiting = asyncio.create_task(
        get(api, "/v1/databases/main/logs", after=str(newest), kind="errors", wait_seconds="5")
    )
    await add(api, [mk(2, "connection")])
    await eventually(lambda: api.clock.next_wake() is not None, "the poll waits on the clock")
    api.clock.advance(4.9)
    await asyncio.sleep(0.05)
    assert not waiting.done()
    api.clock.advance(0.1)
    status, body = await asyncio.wait_for(waiting, 5)
    assert (status, body) == (200, {"lines": [], "has_more": False, "next_after": str(newest + 1)})


async def test_a_long_poll_stops_waiting_when_its_client_leaves(api: Api) -> None:
    # A client that gives up (a closed tab, curl's timeout) must not leave its poll waiting out
    # its 30 s for nobody, outside what max_connections bounds.
    await add(api, [mk(1, "connection")])
    newest = await head(api)
    gone = {"route": ROUTE, "method": "GET", "status": "499"}
    before = metrics.REGISTRY.get_sample_value("forwarder_http_requests_total", gone) or 0.0
    url = URL(api.base)
    reader, writer = await asyncio.open_connection(url.host, url.port)
    key = api.auth(api.read_only)["Authorization"]
    writer.write(
        f"GET /v1/databases/main/logs?after={newest}&wait_seconds=30 HTTP/1.1\r\n"
        f"Host: {url.host}\r\nAuthorization: {key}\r\n\r\n".encode()
    )
    await writer.drain()
    await eventually(lambda: api.clock.next_wake() is not None, "the poll waits on the clock")
    writer.close()
    await writer.wait_closed()
    await eventually(lambda: api.clock.next_wake() is None, "the poll stopped waiting")

    def counted() -> bool:
        return metrics.REGISTRY.get_sample_value("forwarder_http_requests_total", gone) == before + 1

    await eventually(counted, "the request counted as its client's leaving")
    assert not await reader.read()  # nothing was answered


async def test_cli_tail_with_a_filter_waits_instead_of_asking_again_and_again(
    api: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = api.daemon.store
    await add(api, [mk(i, "connection", "connection received") for i in range(10_000)])
    looks = 0
    list_lines = store.list_lines

    async def counted(db_code: int, query: LineQuery) -> Page:
        nonlocal looks
        page = await list_lines(db_code, query)
        looks += 1
        return page

    monkeypatch.setattr(store, "list_lines", counted)
    before = answered()
    argv = ["logs", "tail", "main", "--url", api.base, "--key", api.read_only, "--kind", "errors", "--json"]
    tail = asyncio.create_task(asyncio.to_thread(cli.main, [*argv, "--wait-seconds", "5", "--max-polls", "10"]))
    # The first listing, then the first poll's first look (it waits after that).
    await eventually(lambda: looks >= 2 or tail.done(), "the first poll")
    for i in range(5):  # lines that do not match keep arriving while the tail polls
        seen = looks
        await add(api, [mk(10_000 + 100 * i + j, "connection", "connection received") for j in range(100)])
        await eventually(lambda seen=seen: looks > seen or tail.done(), "the poll looks at the new lines")
    # No wait period has passed: only the first listing was answered; the poll is still waiting.
    assert answered() - before == 1
    await add(api, [mk(20_000, "error", "duplicate key value violates unique constraint")])
    await eventually(lambda: answered() - before == 2, "the matching line is answered")
    # The remaining nine polls each end when their wait is up.
    for _ in range(1000):
        if tail.done():
            break
        api.clock.advance(5)
        await asyncio.sleep(0.01)
    assert await tail == 0
    assert answered() - before == 11
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 1 and '"duplicate key value violates unique constraint"' in printed[0]
