"""The credential's user is `config.username` for loki and elasticsearch; `user`, the key they took
first, is still accepted (in a request and in a stored config) and shown as `username`."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from tests.unit.api.conftest import Api

SECRET = "s3cr3t-t0ken-for-basic-auth"
# The path each kind posts to below its base URL, and a success answer of the kind's API.
PATHS = {"loki": "/loki/api/v1/push", "elasticsearch": "/_bulk"}


async def call(api: Api, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    async with api.session.request(method, api.url(path), json=body, headers=api.auth(api.read_write)) as resp:
        return resp.status, await resp.json()


@dataclasses.dataclass
class Receiver:
    """A loopback receiver for both kinds that records each request's Authorization header."""

    port: int = 0
    authorizations: list[str] = dataclasses.field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.authorizations.append(request.headers.get("Authorization", ""))
        if request.path == PATHS["loki"]:
            return web.Response(status=204)
        # One created item per action line (the test line is one document): a bulk answer.
        await request.read()
        return web.json_response({"errors": False, "items": [{"create": {"status": 201}}]})

    @property
    def url(self) -> str:
        return f"http://hook.test:{self.port}"  # hook.test resolves to loopback in these tests


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    app = web.Application()
    app.router.add_post(PATHS["loki"], r.handle)
    app.router.add_post(PATHS["elasticsearch"], r.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    r.port = runner.addresses[0][1]
    yield r
    await runner.cleanup()


def basic(user: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{SECRET}".encode()).decode()


@pytest.mark.parametrize("kind", ["loki", "elasticsearch"])
@pytest.mark.parametrize("key", ["username", "user"])
async def test_a_destination_takes_its_user_as_username(api: Api, receiver: Receiver, kind: str, key: str) -> None:
    body = {"type": kind, "name": kind, "config": {"url": receiver.url, key: "fwd-1"}, "secret": SECRET}
    status, created = await call(api, "POST", "/v1/log-destinations", body)
    assert status == 201, created
    assert created["config"]["username"] == "fwd-1" and "user" not in created["config"]
    _, shown = await call(api, "GET", f"/v1/log-destinations/{created['id']}")
    assert shown["config"]["username"] == "fwd-1" and "user" not in shown["config"]
    status, tested = await call(api, "POST", f"/v1/log-destinations/{created['id']}/test")
    assert (status, tested) == (200, {"ok": True})
    assert receiver.authorizations == [basic("fwd-1")]


@pytest.mark.parametrize("kind", ["loki", "elasticsearch"])
async def test_both_keys_at_once_are_refused(api: Api, kind: str) -> None:
    config = {"url": "http://hook.test:9", "username": "a", "user": "b"}
    status, data = await call(api, "POST", "/v1/log-destinations", {"type": kind, "name": "n", "config": config})
    assert status == 400 and data["error"]["field"] == "config.user"


@pytest.mark.parametrize("kind", ["loki", "elasticsearch"])
async def test_a_config_stored_with_user_still_authenticates(api: Api, receiver: Receiver, kind: str) -> None:
    body = {"type": kind, "name": kind, "config": {"url": receiver.url, "username": "old-1"}, "secret": SECRET}
    _, created = await call(api, "POST", "/v1/log-destinations", body)
    found = await api.daemon.store.destination(created["id"])
    assert found is not None
    dest = found[0]
    # As a store written before `username` holds it.
    stored = {("user" if k == "username" else k): v for k, v in dest.config.items()}
    await api.daemon.store.change_destination(
        dataclasses.replace(dest, config=stored), org="default", actor="test", fields=["config"]
    )
    status, tested = await call(api, "POST", f"/v1/log-destinations/{created['id']}/test")
    assert (status, tested) == (200, {"ok": True})
    assert receiver.authorizations == [basic("old-1")]
    _, shown = await call(api, "GET", f"/v1/log-destinations/{created['id']}")
    assert shown["config"]["username"] == "old-1" and "user" not in shown["config"]  # shown as the key is named
