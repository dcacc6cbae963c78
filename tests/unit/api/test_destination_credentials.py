"""Credentials stay hidden from everyone reading the API, the log or the store: a receiver that echoes
the token it was sent, and a URL that carries a token (query parameter) or a password (userinfo)."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from forwarder.model import LogLine
from forwarder.store.destinations import DeliveryState
from tests.unit.api.conftest import T0_S, Api

TOKEN = "bs-T0KEN-echoed-by-the-receiver"
URL_TOKEN = "q-T0KEN-in-the-query-string"


async def call(api: Api, method: str, path: str, body: Any = None, key: str | None = None) -> tuple[int, Any]:
    headers = api.auth(key or api.read_write)
    async with api.session.request(method, api.url(path), json=body, headers=headers) as resp:
        return resp.status, await resp.json()


@dataclasses.dataclass
class Receiver:
    """A loopback receiver that refuses every request, echoing what it was sent (as some do)."""

    port: int = 0
    seen: list[web.Request] = dataclasses.field(default_factory=list)
    queries: list[str] = dataclasses.field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.seen.append(request)
        self.queries.append(request.query_string)
        auth = request.headers.get("Authorization", "")
        user_and_token = base64.b64encode(f"fwd:{TOKEN}".encode()).decode()
        text = f"invalid token: {auth} (as basic: Basic {user_and_token}); you asked for {request.path_qs}"
        return web.Response(status=401, text=text)

    def url(self, query: str = "") -> str:
        return f"http://hook.test:{self.port}/in{query}"  # hook.test resolves to loopback in these tests


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    app = web.Application()
    app.router.add_post("/in", r.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    r.port = runner.addresses[0][1]
    yield r
    await runner.cleanup()


async def failed_delivery(api: Api, dest_id: str) -> DeliveryState:
    """Store a line and wait until the destination's loop has recorded its failure."""
    ident = api.daemon.registry.by_id["main"].identity
    line = LogLine(time_us=T0_S * 1_000_000, severity="LOG", kind="other", message="one line")
    await api.daemon.store.append(ident, [line], [], 0)
    assert api.daemon.delivery is not None
    async with asyncio.timeout(30):
        while True:
            state = api.daemon.delivery.state(dest_id)
            if state is not None and state.last_error is not None:
                return state
            await asyncio.sleep(0.01)  # the loop is another task of this event loop


def store_bytes(tmp_path: Path) -> bytes:
    """Every byte the store has written (its database and write-ahead log)."""
    return b"".join(p.read_bytes() for p in tmp_path.glob("store.db*"))


async def test_a_token_echoed_by_the_receiver_is_shown_nowhere(
    api: Api, receiver: Receiver, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    config = {"url": receiver.url(f"?token={URL_TOKEN}")}
    body = {"type": "better_stack", "name": "echo", "config": config, "secret": TOKEN}
    status, created = await call(api, "POST", "/v1/log-destinations", body)
    assert status == 201, created

    status, tested = await call(api, "POST", f"/v1/log-destinations/{created['id']}/test")
    assert status == 200 and tested["ok"] is False
    assert tested["error"].startswith("HTTP 401: invalid token: Bearer <hidden>")

    state = await failed_delivery(api, created["id"])
    assert receiver.seen[-1].headers["Authorization"] == f"Bearer {TOKEN}"  # it was sent, and echoed
    assert state.last_error is not None and state.last_error.startswith("HTTP 401: invalid token: Bearer <hidden>")
    _, shown = await call(api, "GET", f"/v1/log-destinations/{created['id']}", key=api.read_only)
    assert shown["delivery"]["last_error"] == state.last_error

    # The daemon's log records, with their extra fields (the error is one); the receiver's own access
    # log, in this process too, is left out.
    logged = [str(r.__dict__) for r in caplog.records if r.name.startswith("forwarder")]
    texts = [tested["error"], state.last_error, str(shown), *logged]
    basic = base64.b64encode(f"fwd:{TOKEN}".encode()).decode()
    for secret in (TOKEN, URL_TOKEN, basic):
        assert all(secret not in text for text in texts), secret
    # The secret is sealed at rest and no error holds it; the URL's token is kept, to deliver.
    assert TOKEN.encode() not in store_bytes(tmp_path) and basic.encode() not in store_bytes(tmp_path)
    assert any("<hidden>" in text for text in logged)  # the failure was logged, without the token


async def test_a_token_in_the_url_is_masked_in_every_answer_and_sent_as_given(api: Api, receiver: Receiver) -> None:
    url = receiver.url(f"?region=eu&token={URL_TOKEN}&api_key=k-{URL_TOKEN}")
    masked = receiver.url("?region=eu&token=***&api_key=***")
    body = {"type": "webhook", "name": "query token", "config": {"url": url}}
    status, created = await call(api, "POST", "/v1/log-destinations", body)
    assert status == 201 and created["config"]["url"] == masked

    _, one = await call(api, "GET", f"/v1/log-destinations/{created['id']}", key=api.read_only)
    _, listed = await call(api, "GET", "/v1/log-destinations", key=api.read_only)
    assert one["config"]["url"] == masked
    assert [d["config"]["url"] for d in listed["destinations"]] == [masked]
    status, changed = await call(api, "PATCH", f"/v1/log-destinations/{created['id']}", {"name": "renamed"})
    assert status == 200 and changed["config"]["url"] == masked
    # A client sending back the config it was shown keeps the token it never saw.
    status, changed = await call(api, "PATCH", f"/v1/log-destinations/{created['id']}", {"config": one["config"]})
    assert status == 200 and changed["config"]["url"] == masked, changed

    # Delivery uses the URL as given; the receiver's echo of it is hidden.
    _, tested = await call(api, "POST", f"/v1/log-destinations/{created['id']}/test")
    assert receiver.queries == [f"region=eu&token={URL_TOKEN}&api_key=k-{URL_TOKEN}"]
    assert tested["ok"] is False and URL_TOKEN not in tested["error"] and "<hidden>" in tested["error"]


async def test_a_password_in_a_stored_url_is_masked(api: Api, receiver: Receiver) -> None:
    # The API refuses `user:password@` in a URL; a config file may still hold one.
    body = {"type": "webhook", "name": "userinfo", "config": {"url": receiver.url()}}
    _, created = await call(api, "POST", "/v1/log-destinations", body)
    found = await api.daemon.store.destination(created["id"])
    assert found is not None
    with_password = f"http://fwd:pa55-{URL_TOKEN}@hook.test:{receiver.port}/in"
    await api.daemon.store.change_destination(
        dataclasses.replace(found[0], config={"url": with_password}), org="default", actor="test", fields=["config"]
    )
    _, shown = await call(api, "GET", f"/v1/log-destinations/{created['id']}", key=api.read_only)
    assert shown["config"]["url"] == f"http://***@hook.test:{receiver.port}/in"


async def test_userinfo_is_refused_by_the_api(api: Api) -> None:
    body = {"type": "webhook", "name": "userinfo", "config": {"url": f"http://fwd:{URL_TOKEN}@hook.test:9/in"}}
    status, refused = await call(api, "POST", "/v1/log-destinations", body)
    assert status == 400 and refused["error"]["field"] == "config.url"
    assert URL_TOKEN not in str(refused)
