"""The loki kind end to end in one process: daemon (store, API, delivery), fake clock, strict receiver.

Loopback is reachable only because the operator config allows 127.0.0.0/8 (DEVELOPERS.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from forwarder.app import Daemon
from forwarder.clock import FakeClock
from forwarder.config import config_from_dict
from forwarder.model import LogLine
from tests.linegen import mixed_lines
from tests.receivers_loki import LokiReceiver, Push, out_of_order, recover, retry_after

SECRET = "glc_eyJvIjoiMTIzNDU2NyIsIm4iOiJzdGFjayJ9-very-secret"


@dataclass
class Env:
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

    async def append(self, lines: list[LogLine]) -> None:
        ident = self.daemon.registry.by_id["main"].identity
        await self.daemon.store.append(ident, lines, [], 0)

    async def add_lines(self, n: int, start: int = 0) -> None:
        now_us = int(self.clock.now() * 1_000_000)
        await self.append(
            [
                LogLine(time_us=now_us + i * 1000, severity="ERROR", kind="error", message=f"line {start + i}")
                for i in range(n)
            ]
        )

    async def create(self, receiver: LokiReceiver, secret: str | None = None, **config: Any) -> dict[str, Any]:
        body_in: dict[str, Any] = {"type": "loki", "name": "loki", "config": {"url": receiver.url, **config}}
        if secret is not None:
            body_in["secret"] = secret
        status, body = await self.call("POST", "/v1/log-destinations", body_in)
        assert status == 201, body
        return body  # type: ignore[no-any-return]

    async def shown(self, dest_id: str) -> dict[str, Any]:
        status, body = await self.call("GET", f"/v1/log-destinations/{dest_id}")
        assert status == 200
        return body  # type: ignore[no-any-return]

    async def until_sleeping(self, dest_id: str, attempts: int) -> float:
        """Wait for a sleep on the fake clock after `attempts` failures; seconds until it ends."""
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

    async def stored(self, ids: list[int]) -> dict[int, dict[str, Any]]:
        docs = await self.daemon.store.docs_by_ids(ids)
        return {i: orjson.loads(d) for i, d in docs.items()}

    async def metrics(self) -> str:
        async with self.session.get(self.base + "/metrics") as resp:
            return await resp.text()


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
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
    session = aiohttp.ClientSession()
    yield Env(daemon, clock, session, f"http://127.0.0.1:{daemon.port}", key)
    await session.close()
    await daemon.aclose()


async def started(receiver: LokiReceiver) -> LokiReceiver:
    await receiver.start()
    return receiver


@pytest.fixture
async def receivers() -> AsyncIterator[list[LokiReceiver]]:
    made: list[LokiReceiver] = []
    yield made
    for r in made:
        await r.aclose()


async def make(receivers: list[LokiReceiver], **kwargs: Any) -> LokiReceiver:
    r = LokiReceiver(**kwargs)
    await r.start()
    receivers.append(r)
    return r


async def test_every_line_arrives_once_with_every_field(env: Env, receivers: list[LokiReceiver]) -> None:
    receiver = await make(receivers, user="1234567", secret=SECRET, tenant_id="team-a")
    created = await env.create(receiver, SECRET, user="1234567", tenant_id="team-a")
    assert SECRET not in str(created) and created["has_secret"] is True and "secret" not in created
    await env.append(mixed_lines(10_000, 21))
    await receiver.wait_for_lines(10_000, timeout=120)
    assert receiver.errors == []
    ids = receiver.accepted_ids
    assert sorted(ids) == list(range(1, 10_001))  # every line exactly once
    assert len(receiver.pushes) == len(receiver.accepted) >= 5  # batches of at most 2000 lines, pushes of 1 MiB
    assert all(p.size <= 1024 * 1024 for p in receiver.pushes)
    stored = await env.stored(ids)
    for entry in receiver.accepted_entries():
        assert recover(entry) == stored[entry.id]
        assert set(entry.labels) == {"source", "host", "database", "level", "kind"}
    # The secret is write-only: never shown again, nor in metrics.
    for path in ("/v1/log-destinations", f"/v1/log-destinations/{created['id']}"):
        status, body = await env.call("GET", path)
        assert status == 200 and SECRET not in str(body)
    async with asyncio.timeout(10):
        while (shown := await env.shown(created["id"]))["delivery"]["sent_lines"] < 10_000:
            await asyncio.sleep(0.01)
    assert shown["has_secret"] is True and "secret" not in shown
    assert shown["config"] == {
        "url": receiver.url,
        "user": "1234567",
        "tenant_id": "team-a",
        "structured_metadata": True,
        "max_line_bytes": 262144,
        "max_push_bytes": 1048576,
    }
    assert shown["delivery"]["last_error"] is None and shown["delivery"]["dropped_lines"] == 0
    text = await env.metrics()
    assert f'forwarder_destination_lines_sent_total{{destination_id="{created["id"]}",type="loki"}} 10000.0' in text
    assert SECRET not in text


async def test_bearer_token_and_json_lines(env: Env, receivers: list[LokiReceiver]) -> None:
    receiver = await make(receivers, secret="bearer-token-1", structured_metadata=False)
    await env.create(receiver, "bearer-token-1", structured_metadata=False)
    await env.append(mixed_lines(300, 4))
    await receiver.wait_for_lines(300)
    assert receiver.errors == []
    stored = await env.stored(receiver.accepted_ids)
    assert len(stored) == 300
    for entry in receiver.accepted_entries():
        assert entry.metadata is None
        assert recover(entry, structured=False) == stored[entry.id]


async def test_rate_limits_errors_and_timeouts_are_retried_with_backoff(
    env: Env, receivers: list[LokiReceiver]
) -> None:
    held = asyncio.Event()

    async def hold(push: Push) -> web.StreamResponse:
        held.set()
        await asyncio.Event().wait()  # never answers: the sender gives up after 15 s
        raise AssertionError("unreachable")

    receiver = await make(receivers, script=[retry_after(429, 100), 500, hold])
    created = await env.create(receiver)
    dest_id = created["id"]
    await env.add_lines(50)
    await receiver.wait_for(1)
    assert await env.until_sleeping(dest_id, 1) == pytest.approx(100)  # Retry-After over the 30 s backoff
    assert (await env.shown(dest_id))["delivery"]["last_error"] == "HTTP 429: Ingestion rate limit exceeded"
    env.clock.advance(100)
    await receiver.wait_for(2)
    assert await env.until_sleeping(dest_id, 2) == pytest.approx(60)
    assert (await env.shown(dest_id))["delivery"]["last_error"] == "HTTP 500: scripted"
    env.clock.advance(60)
    await held.wait()
    assert await env.until_sleeping(dest_id, 2) == pytest.approx(15)  # the push's deadline
    env.clock.advance(16)
    assert await env.until_sleeping(dest_id, 3) == pytest.approx(120)
    assert (await env.shown(dest_id))["delivery"]["last_error"] == "no answer: no answer within 15 s"
    env.clock.advance(120)
    await receiver.wait_for_lines(50)
    assert [len(p.entries) for p in receiver.pushes] == [50, 50, 50, 50]
    assert all(p.ids == receiver.pushes[0].ids for p in receiver.pushes)  # the same lines each time
    assert sorted(receiver.accepted_ids) == list(range(1, 51))
    assert receiver.errors == []
    async with asyncio.timeout(10):
        while (d := (await env.shown(dest_id))["delivery"])["sent_lines"] != 50:
            await asyncio.sleep(0.01)
    assert d["dropped_lines"] == 0 and d["in_flight_lines"] == 0


async def test_a_loki_400_is_not_retried_and_its_lines_are_dropped(env: Env, receivers: list[LokiReceiver]) -> None:
    receiver = await make(receivers, script=[out_of_order()])
    created = await env.create(receiver)
    dest_id = created["id"]
    await env.add_lines(30)
    await receiver.wait_for(1)
    async with asyncio.timeout(10):
        while (d := (await env.shown(dest_id))["delivery"])["dropped_lines"] != 30 or d["in_flight_lines"]:
            await asyncio.sleep(0.01)
    assert d["attempts"] == 0 and d["in_flight_lines"] == 0 and d["next_attempt_at"] is None
    assert d["last_error"].startswith("HTTP 400: entry with timestamp ")
    assert "reason: 'entry out of order'" in d["last_error"] and "total ignored: 30 out of 30" in d["last_error"]
    text = await env.metrics()
    assert (
        f'forwarder_destination_lines_dropped_total{{destination_id="{dest_id}",reason="rejected",type="loki"}} 30.0'
        in text
    )
    # The next lines go on, and the refused push is never sent again.
    await env.add_lines(5, start=30)
    await receiver.wait_for_lines(5)
    assert [len(p.entries) for p in receiver.pushes] == [30, 5]
    assert sorted(receiver.accepted_ids) == list(range(31, 36))
    async with asyncio.timeout(10):
        while (d := (await env.shown(dest_id))["delivery"])["sent_lines"] != 5:
            await asyncio.sleep(0.01)
    assert d["dropped_lines"] == 30 and receiver.errors == []


async def test_disallowed_structured_metadata_is_retried_until_the_config_is_fixed(
    env: Env, receivers: list[LokiReceiver]
) -> None:
    receiver = await make(receivers, allow_structured_metadata=False)
    created = await env.create(receiver)
    dest_id = created["id"]
    await env.add_lines(10)
    await receiver.wait_for(1)
    assert await env.until_sleeping(dest_id, 1) == pytest.approx(30)
    assert "structured metadata, but this feature is disallowed" in (await env.shown(dest_id))["delivery"]["last_error"]
    receiver.structured_metadata = False
    status, _ = await env.call(
        "PATCH", f"/v1/log-destinations/{dest_id}", {"config": {"url": receiver.url, "structured_metadata": False}}
    )
    assert status == 200
    assert await env.until_sleeping(dest_id, 1) == pytest.approx(30, abs=1)
    env.clock.advance(30)
    await receiver.wait_for_lines(10)
    assert sorted(receiver.accepted_ids) == list(range(1, 11)) and receiver.errors == []
    assert (await env.shown(dest_id))["delivery"]["dropped_lines"] == 0


async def test_test_endpoint_without_auth(env: Env, receivers: list[LokiReceiver]) -> None:
    receiver = await make(receivers)  # a Loki on a private network: no secret, no Authorization header
    created = await env.create(receiver)
    assert created["has_secret"] is False
    status, body = await env.call("POST", f"/v1/log-destinations/{created['id']}/test")
    assert (status, body) == (200, {"ok": True})
    [push] = receiver.pushes
    [entry] = push.entries
    fields = recover(entry)
    assert fields["id"] == "0" and "test line" in fields["message"] and fields["database_name"] == ""
    assert "Authorization" not in push.headers and "X-Scope-OrgID" not in push.headers
    receiver.script = [500]
    status, body = await env.call("POST", f"/v1/log-destinations/{created['id']}/test")
    assert (status, body) == (200, {"ok": False, "error": "HTTP 500: scripted"})
    receiver.script = [out_of_order()]
    status, body = await env.call("POST", f"/v1/log-destinations/{created['id']}/test")
    assert status == 200 and body["ok"] is False and "entry out of order" in body["error"]
    assert receiver.errors == []


async def test_the_config_is_checked(env: Env, receivers: list[LokiReceiver]) -> None:
    receiver = await make(receivers)
    for config, field in (
        ({"url": "http://10.0.0.1:3100"}, "config.url"),  # not an allowed network
        ({"url": receiver.url + "/?tenant=a"}, "config.url"),
        ({"url": receiver.url, "tenant_id": "a|b"}, "config.tenant_id"),
        ({"url": receiver.url, "max_push_bytes": 10 * 1024 * 1024}, "config.max_push_bytes"),
        ({"url": receiver.url, "labels": {"env": "prod"}}, "config.labels"),
    ):
        status, body = await env.call("POST", "/v1/log-destinations", {"type": "loki", "name": "l", "config": config})
        assert status == 400, (config, body)
        assert field in str(body), (config, body)
