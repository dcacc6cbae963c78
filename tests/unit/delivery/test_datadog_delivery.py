"""The datadog kind end to end: a real daemon in one process with a fake clock, and a strict intake.

The destination's `url` points at the loopback receiver, reachable only because the operator
config allows 127.0.0.0/8 (as in test_webhook_delivery.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from forwarder.app import Daemon
from forwarder.clock import FakeClock
from forwarder.config import config_from_dict
from forwarder.model import LogLine
from tests.linegen import mixed_lines
from tests.receivers_datadog import DatadogReceiver, hang, retry_after


@dataclass
class DaemonEnv:
    """A started daemon with a fake clock, an API key and a session to call it."""

    daemon: Daemon
    clock: FakeClock
    session: aiohttp.ClientSession
    base: str
    key: str

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async with self.session.request(
            method, self.base + path, json=body, headers={"Authorization": f"Bearer {self.key}"}
        ) as resp:
            return resp.status, (await resp.json() if resp.status != 204 else None)

    async def create(self, kind: str, config: dict[str, Any], secret: str) -> dict[str, Any]:
        body_in = {"type": kind, "name": kind, "config": config, "secret": secret}
        status, body = await self.call("POST", "/v1/log-destinations", body_in)
        assert status == 201, body
        return body  # type: ignore[no-any-return]

    async def append(self, lines: list[LogLine]) -> None:
        ident = self.daemon.registry.by_id["main"].identity
        await self.daemon.store.append(ident, lines, [], 0)

    async def stored_docs(self, n: int) -> dict[int, dict[str, Any]]:
        docs = await self.daemon.store.docs_by_ids(list(range(1, n + 1)))
        return {i: orjson.loads(d) for i, d in docs.items()}

    async def shown(self, dest_id: str) -> dict[str, Any]:
        status, body = await self.call("GET", f"/v1/log-destinations/{dest_id}")
        assert status == 200
        return body  # type: ignore[no-any-return]

    async def until(self, dest_id: str, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The destination as shown once `check` holds for its `delivery`."""
        async with asyncio.timeout(10):
            while True:
                shown = await self.shown(dest_id)
                if check(shown["delivery"]):
                    return shown
                await asyncio.sleep(0.01)

    async def until_sleeping(self, dest_id: str, attempts: int) -> float:
        """Seconds until the loop's next wake, once it has failed `attempts` times and sleeps."""
        delivery = self.daemon.delivery
        assert delivery is not None
        async with asyncio.timeout(10):
            while True:
                state = delivery.state(dest_id)
                if state is not None and state.attempts == attempts:
                    wake = self.clock.next_wake()
                    if wake is not None:
                        return wake
                await asyncio.sleep(0.005)


async def start_daemon(tmp_path: Path) -> DaemonEnv:
    config = config_from_dict(
        {
            "server": {"host": "127.0.0.1", "port": 0},
            "store": {"path": str(tmp_path / "s.db")},
            "security": {
                "secrets_key_file": str(tmp_path / "secrets.key"),
                "allowed_destination_networks": ["127.0.0.0/8"],
            },
            "databases": [
                {"id": "main", "name": "main", "host": "db1", "log": {"path": str(tmp_path / "none/*.log")}},
            ],
        }
    )
    clock = FakeClock(start=time.time())
    daemon = Daemon(config, clock=clock)
    await daemon.start()
    _, key = await daemon.store.create_key("rw", "read-write")
    return DaemonEnv(daemon, clock, aiohttp.ClientSession(), f"http://127.0.0.1:{daemon.port}", key)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[DaemonEnv]:
    e = await start_daemon(tmp_path)
    yield e
    await e.session.close()
    await e.daemon.aclose()


@pytest.fixture
async def receiver() -> AsyncIterator[DatadogReceiver]:
    r = DatadogReceiver()
    await r.start()
    yield r
    await r.aclose()


async def create(env: DaemonEnv, receiver: DatadogReceiver) -> dict[str, Any]:
    return await env.create("datadog", {"site": "datadoghq.eu", "url": receiver.url}, receiver.api_key)


async def test_every_line_arrives_once_with_every_field_as_stored(env: DaemonEnv, receiver: DatadogReceiver) -> None:
    created = await create(env, receiver)
    assert "secret" not in created and created["has_secret"] is True
    assert created["config"] == {"site": "datadoghq.eu", "url": receiver.url}
    await env.append(mixed_lines(10_000, seed=11))
    await receiver.wait_for_lines(10_000, timeout=60)
    assert receiver.errors == []
    ids = [i for r in receiver.accepted for i in r.ids]
    assert ids == list(range(1, 10_001))  # every line exactly once, in order
    stored = await env.stored_docs(10_000)
    for request in receiver.accepted:
        for item in request.items:
            assert item["postgresql"] == stored[int(item["postgresql"]["id"])]
    shown = await env.until(created["id"], lambda d: d["sent_lines"] == 10_000)
    assert shown["delivery"]["lag_lines"] == 0 and shown["delivery"]["last_error"] is None
    # The API key is write-only: never shown after creation, nor in metrics.
    for path in ("/v1/log-destinations", f"/v1/log-destinations/{created['id']}"):
        status, body = await env.call("GET", path)
        assert status == 200 and receiver.api_key not in str(body)
    async with env.session.get(env.base + "/metrics") as resp:
        assert receiver.api_key not in await resp.text()


async def test_scripted_failures_are_retried_with_backoff_then_delivered(
    env: DaemonEnv, receiver: DatadogReceiver
) -> None:
    held = asyncio.Event()
    receiver.script = [retry_after(429, 100), 500, hang(held)]
    created = await create(env, receiver)
    dest = created["id"]
    await env.append(mixed_lines(5, seed=12))
    await receiver.wait_for(1)
    assert await env.until_sleeping(dest, 1) == pytest.approx(100)  # Retry-After over the 30 s backoff
    env.clock.advance(100)
    await receiver.wait_for(2)
    assert await env.until_sleeping(dest, 2) == pytest.approx(60)
    assert (await env.shown(dest))["delivery"]["last_error"] == "HTTP 500: scripted"
    env.clock.advance(60)
    await held.wait()
    assert await env.until_sleeping(dest, 2) == pytest.approx(30)  # the request's own deadline
    env.clock.advance(31)
    assert await env.until_sleeping(dest, 3) == pytest.approx(120)
    assert (await env.shown(dest))["delivery"]["last_error"] == "no answer: no answer within 30 s"
    env.clock.advance(120)
    await receiver.wait_for_lines(5)
    assert [r.ids for r in receiver.requests] == [[1, 2, 3, 4, 5]] * 4  # the same lines each time
    assert receiver.errors == []
    shown = await env.until(dest, lambda d: d["sent_lines"] == 5)
    assert shown["delivery"]["attempts"] == 0 and shown["delivery"]["dropped_lines"] == 0


async def test_a_wrong_key_keeps_the_lines_until_it_is_fixed(env: DaemonEnv, receiver: DatadogReceiver) -> None:
    receiver.script = [403, 401]
    created = await create(env, receiver)
    await env.append(mixed_lines(3, seed=13))
    await receiver.wait_for(1)
    assert await env.until_sleeping(created["id"], 1) == pytest.approx(30)
    assert (await env.shown(created["id"]))["delivery"]["last_error"] == "HTTP 403: scripted"
    env.clock.advance(30)
    assert await env.until_sleeping(created["id"], 2) == pytest.approx(60)
    env.clock.advance(60)
    await receiver.wait_for_lines(3)
    shown = await env.until(created["id"], lambda d: d["sent_lines"] == 3)
    assert shown["delivery"]["dropped_lines"] == 0 and receiver.errors == []


async def test_a_refused_payload_is_dropped_and_delivery_goes_on(env: DaemonEnv, receiver: DatadogReceiver) -> None:
    receiver.script = [400]
    created = await create(env, receiver)
    await env.append(mixed_lines(3, seed=14))
    shown = await env.until(created["id"], lambda d: d["dropped_lines"] == 3)
    assert shown["delivery"]["last_error"] == "HTTP 400: scripted" and shown["delivery"]["attempts"] == 0
    await env.append(mixed_lines(2, seed=15))
    await receiver.wait_for_lines(2)
    assert receiver.accepted[0].ids == [4, 5]
    await env.until(created["id"], lambda d: d["sent_lines"] == 2 and d["lag_lines"] == 0)


async def test_test_endpoint_sends_one_line(env: DaemonEnv, receiver: DatadogReceiver) -> None:
    created = await create(env, receiver)
    status, body = await env.call("POST", f"/v1/log-destinations/{created['id']}/test")
    assert (status, body) == (200, {"ok": True})
    [request] = receiver.accepted
    [item] = request.items
    assert item["postgresql"]["id"] == "0" and "test line" in item["message"]
    receiver.script = [403]
    status, body = await env.call("POST", f"/v1/log-destinations/{created['id']}/test")
    assert (status, body) == (200, {"ok": False, "error": "HTTP 403: scripted"})
    assert receiver.errors == []


async def test_a_missing_key_or_a_bad_config_is_refused_by_the_api(env: DaemonEnv, receiver: DatadogReceiver) -> None:
    status, body = await env.call(
        "POST", "/v1/log-destinations", {"type": "datadog", "name": "dd", "config": {"url": receiver.url}}
    )
    assert status == 400 and "secret" in str(body)
    status, body = await env.call(
        "POST",
        "/v1/log-destinations",
        {"type": "datadog", "name": "dd", "config": {"site": "example.com"}, "secret": "k"},
    )
    assert status == 400 and "site" in str(body)
