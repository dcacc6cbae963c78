"""The signed webhook and the delivery loop, end to end in one process with a fake clock.

A real daemon (store, API, delivery) and a strict receiver on loopback; loopback is reachable
only because the operator config allows 127.0.0.0/8, as DEVELOPERS.md requires.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from forwarder.app import Daemon
from forwarder.clock import FakeClock
from forwarder.config import config_from_dict
from forwarder.model import KINDS, LogLine
from tests.receivers import WebhookReceiver

BACKOFF = [30, 60, 120, 240, 480, 960, 1920, 3600, 3600]


@dataclass
class Env:
    daemon: Daemon
    clock: FakeClock
    session: aiohttp.ClientSession
    base: str
    key: str
    ro_key: str
    tmp: Path

    async def call(self, method: str, path: str, body: Any = None, key: str | None = None) -> tuple[int, Any]:
        async with self.session.request(
            method, self.base + path, json=body, headers={"Authorization": f"Bearer {key or self.key}"}
        ) as resp:
            return resp.status, (await resp.json() if resp.status != 204 else None)

    async def add_lines(self, n: int, kind: str = "error", start: int = 0) -> None:
        ident = self.daemon.registry.by_id["main"].identity
        now_us = int(self.clock.now() * 1_000_000)
        lines = [
            LogLine(time_us=now_us + i, severity="ERROR", kind=kind, message=f"line {start + i}")  # type: ignore[arg-type]
            for i in range(n)
        ]
        await self.daemon.store.append(ident, lines, [], 0)

    async def create(self, receiver: WebhookReceiver, **extra: Any) -> dict[str, Any]:
        body_in = {"type": "webhook", "name": "hook", "config": {"url": receiver.url}, **extra}
        status, body = await self.call("POST", "/v1/log-destinations", body_in)
        assert status == 201, body
        receiver.secret = body.get("secret") or extra.get("secret", "")
        return body  # type: ignore[no-any-return]

    async def until_sleeping(self, dest_id: str | None = None, attempts: int | None = None) -> float:
        """Wait for a sleep on the fake clock (after `attempts` failures, when given); seconds until it ends."""
        delivery = self.daemon.delivery
        assert delivery is not None
        async with asyncio.timeout(10):
            while True:
                state = delivery.state(dest_id) if dest_id else None
                if attempts is None or (state is not None and state.attempts == attempts):
                    wake = self.clock.next_wake()
                    if wake is not None:
                        return wake
                await asyncio.sleep(0.005)


async def start_env(tmp_path: Path, allowed: list[str] | None = None) -> Env:
    config = config_from_dict(
        {
            "server": {"host": "127.0.0.1", "port": 0},
            "store": {"path": str(tmp_path / "s.db")},
            "security": {
                "secrets_key_file": str(tmp_path / "secrets.key"),
                "allowed_destination_networks": ["127.0.0.0/8"] if allowed is None else allowed,
            },
            "databases": [
                {"id": "main", "name": "main", "host": "db1", "log": {"path": str(tmp_path / "none/*.log")}},
                {"id": "other", "name": "other", "log": {"path": str(tmp_path / "none2/*.log")}},
            ],
        }
    )
    clock = FakeClock(start=time.time())  # real epoch: stripe checks the signature's age
    daemon = Daemon(config, clock=clock)
    await daemon.start()
    _, key = await daemon.store.create_key("rw", "read-write")
    _, ro = await daemon.store.create_key("ro", "read-only")
    session = aiohttp.ClientSession()
    return Env(daemon, clock, session, f"http://127.0.0.1:{daemon.port}", key, ro, tmp_path)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    e = await start_env(tmp_path)
    yield e
    await e.session.close()
    await e.daemon.aclose()


@pytest.fixture
async def receiver() -> AsyncIterator[WebhookReceiver]:
    r = WebhookReceiver()
    await r.start()
    yield r
    await r.aclose()


async def test_batches_are_signed_and_shaped_as_documented(env: Env, receiver: WebhookReceiver) -> None:
    created = await env.create(receiver)
    secret = created["secret"]
    assert secret.startswith("whsec_") and len(secret) >= 6 + 43  # 32 random bytes, base64url
    await env.add_lines(1200)
    await receiver.wait_for(3)
    assert [len(d.ids) for d in receiver.deliveries] == [500, 500, 200]
    assert len({d.delivery_id for d in receiver.deliveries}) == 3
    assert [i for d in receiver.deliveries for i in d.ids] == list(range(1, 1201))
    assert receiver.errors == []
    first = receiver.deliveries[0].body["entries"][0]
    assert first["message"] == "line 0" and first["database_id"] == "main" and first["host"] == "db1"
    # The secret is write-only: never shown again.
    for path in ("/v1/log-destinations", f"/v1/log-destinations/{created['id']}"):
        status, body = await env.call("GET", path)
        assert status == 200 and secret not in str(body)
    _, shown = await env.call("GET", f"/v1/log-destinations/{created['id']}")
    assert shown["has_secret"] is True and "secret" not in shown
    assert shown["delivery"]["sent_lines"] == 1200 and shown["delivery"]["lag_lines"] == 0
    assert shown["delivery"]["last_error"] is None and shown["delivery"]["last_success_at"]


async def test_a_given_secret_signs_and_is_echoed_only_on_create(env: Env, receiver: WebhookReceiver) -> None:
    created = await env.create(receiver, secret="my-own-signing-secret-0123456789")
    assert created["secret"] == "my-own-signing-secret-0123456789"
    await env.add_lines(3)
    await receiver.wait_for(1)
    assert receiver.errors == []


async def test_retries_follow_the_backoff_with_the_same_batch(env: Env, receiver: WebhookReceiver) -> None:
    receiver.tolerance = None  # the fake clock runs hours ahead; the signature itself is still checked
    receiver.script = [500] * 9
    created = await env.create(receiver)
    await env.add_lines(7)
    await receiver.wait_for(1)
    shown_errors = []
    for attempt, wait in enumerate(BACKOFF, start=1):
        assert await env.until_sleeping(created["id"], attempt) == pytest.approx(wait)
        _, d = await env.call("GET", f"/v1/log-destinations/{created['id']}")
        shown_errors.append(d["delivery"]["last_error"])
        assert d["delivery"]["attempts"] == attempt and d["delivery"]["next_attempt_at"]
        env.clock.advance(wait)
        await receiver.wait_for(attempt + 1)
    times = [d.t for d in receiver.deliveries]
    assert [b - a for a, b in itertools.pairwise(times)] == BACKOFF
    assert len({d.delivery_id for d in receiver.deliveries}) == 1
    assert all(d.ids == receiver.deliveries[0].ids for d in receiver.deliveries)
    assert shown_errors == ["HTTP 500: scripted"] * 9
    assert len({d.body["sent_at"] for d in receiver.deliveries}) == 10  # a fresh attempt each time
    await asyncio.sleep(0)
    _, d = await env.call("GET", f"/v1/log-destinations/{created['id']}")
    async with asyncio.timeout(5):
        while d["delivery"]["attempts"] != 0:
            _, d = await env.call("GET", f"/v1/log-destinations/{created['id']}")
    assert d["delivery"]["sent_lines"] == 7 and d["delivery"]["last_error"] == "HTTP 500: scripted"


async def test_retry_after_raises_the_wait_never_lowers_it(env: Env, receiver: WebhookReceiver) -> None:
    from aiohttp import web

    receiver.tolerance = None

    async def busy_long() -> web.Response:
        return web.Response(status=429, headers={"Retry-After": "100"})

    async def busy_short() -> web.Response:
        return web.Response(status=503, headers={"Retry-After": "5"})

    receiver.script = [busy_long, busy_short]
    created = await env.create(receiver)
    await env.add_lines(1)
    await receiver.wait_for(1)
    assert await env.until_sleeping(created["id"], 1) == pytest.approx(100)
    env.clock.advance(100)
    await receiver.wait_for(2)
    assert await env.until_sleeping(created["id"], 2) == pytest.approx(60)  # the backoff wins over 5 s
    env.clock.advance(60)
    await receiver.wait_for(3)


async def test_a_16_second_response_is_a_timeout(env: Env, receiver: WebhookReceiver) -> None:
    receiver.tolerance = None
    held = asyncio.Event()

    async def hold() -> None:
        held.set()
        await asyncio.Event().wait()  # never answers; the sender must give up at 15 s

    receiver.script = [hold]
    created = await env.create(receiver)
    await env.add_lines(2)
    await held.wait()
    assert await env.until_sleeping(created["id"], 0) == pytest.approx(15)  # the request's deadline
    env.clock.advance(16)
    assert await env.until_sleeping(created["id"], 1) == pytest.approx(30)
    _, d = await env.call("GET", f"/v1/log-destinations/{created['id']}")
    assert d["delivery"]["last_error"] == "no answer: no answer within 15 s"
    env.clock.advance(30)
    await receiver.wait_for(2)
    assert receiver.deliveries[0].delivery_id == receiver.deliveries[1].delivery_id


async def test_a_redirect_is_a_failure_and_never_followed(env: Env, receiver: WebhookReceiver) -> None:
    receiver.tolerance = None
    receiver.script = [302]
    created = await env.create(receiver)
    await env.add_lines(1)
    await receiver.wait_for(1)
    assert await env.until_sleeping(created["id"], 1) == pytest.approx(30)
    _, d = await env.call("GET", f"/v1/log-destinations/{created['id']}")
    assert d["delivery"]["last_error"] == "HTTP 302: redirects are not followed"
    assert receiver.other_paths == []  # /target was never requested


async def test_a_down_receiver_does_not_delay_another(env: Env, receiver: WebhookReceiver) -> None:
    hanging = WebhookReceiver()
    await hanging.start()

    async def hold() -> None:
        await asyncio.Event().wait()

    hanging.script = [hold] * 100
    try:
        await env.create(hanging)
        await env.create(receiver)
        for batch in range(5):
            await env.add_lines(100, start=batch * 100)
        await receiver.wait_for(1)
        async with asyncio.timeout(10):
            while sum(len(d.ids) for d in receiver.deliveries) < 500:
                await receiver.wait_for(len(receiver.deliveries) + 1)
        assert len(hanging.deliveries) == 1  # still waiting on its first request; the clock never moved
    finally:
        await hanging.aclose()


async def test_the_filter_picks_kinds_and_databases(env: Env, receiver: WebhookReceiver) -> None:
    await env.create(receiver, filter={"kinds": ["locks"], "database_ids": ["main"]})
    for kind in KINDS:
        await env.add_lines(2, kind=kind)
    await receiver.wait_for_lines(4)
    kinds = {e["kind"] for d in receiver.deliveries for e in d.body["entries"]}
    assert kinds == {"lock_wait", "deadlock"}


async def test_backoff_and_the_batch_survive_a_restart(tmp_path: Path, receiver: WebhookReceiver) -> None:
    receiver.tolerance = None
    receiver.script = [503]
    e = await start_env(tmp_path)
    created = await e.create(receiver)
    await e.add_lines(5)
    await receiver.wait_for(1)
    assert await e.until_sleeping(created["id"], 1) == pytest.approx(30)
    await e.session.close()
    await e.daemon.aclose()
    e2 = await start_env(tmp_path)
    try:
        e2.clock._now = e.clock.now()  # the same moment, after the restart
        assert await e2.until_sleeping(created["id"], 1) == pytest.approx(30, abs=1)
        e2.clock.advance(30)
        await receiver.wait_for(2)
        first, second = receiver.deliveries
        assert first.delivery_id == second.delivery_id and first.ids == second.ids
        _, d = await e2.call("GET", f"/v1/log-destinations/{created['id']}")
        assert d["delivery"]["last_error"] == "HTTP 503: scripted"
    finally:
        await e2.session.close()
        await e2.daemon.aclose()


async def test_test_endpoint_sends_one_marked_line(env: Env, receiver: WebhookReceiver) -> None:
    created = await env.create(receiver)
    status, body = await env.call("POST", f"/v1/log-destinations/{created['id']}/test")
    assert (status, body) == (200, {"ok": True})
    [d] = receiver.deliveries
    [entry] = d.body["entries"]
    assert entry["id"] == "0" and "test line" in entry["message"]
    receiver.script = [500]
    status, body = await env.call("POST", f"/v1/log-destinations/{created['id']}/test")
    assert (status, body) == (200, {"ok": False, "error": "HTTP 500: scripted"})


async def test_lines_passed_by_retention_are_counted_as_dropped(env: Env, receiver: WebhookReceiver) -> None:
    receiver.tolerance = None
    receiver.script = [500] * 100
    created = await env.create(receiver)
    await env.add_lines(3)  # the first batch: in flight, failing
    await receiver.wait_for(1)
    await env.add_lines(4)  # behind it, never sent
    await env.until_sleeping(created["id"], 1)
    env.clock._now += 8 * 86400  # the wall clock moves past retention_days = 7 while the loop sleeps
    assert await env.daemon.store.retention_once() == 7
    env.clock.advance(30)  # the retry finds its batch gone
    async with asyncio.timeout(10):
        while True:
            _, d = await env.call("GET", f"/v1/log-destinations/{created['id']}")
            if d["delivery"]["in_flight_lines"] == 0 and d["delivery"]["dropped_lines"] == 7:
                break
            await asyncio.sleep(0.01)
    assert len(receiver.deliveries) == 1  # nothing left to retry
    async with env.session.get(env.base + "/metrics") as resp:
        text = await resp.text()
    dest_id = created["id"]
    labels = f'destination_id="{dest_id}",reason="retention",type="webhook"'
    series = f"forwarder_destination_lines_dropped_total{{{labels}}}"
    assert f"{series} 7.0" in text


async def test_metrics_count_sent_lines_and_never_show_secrets(env: Env, receiver: WebhookReceiver) -> None:
    created = await env.create(receiver)
    await env.add_lines(10)
    await receiver.wait_for(1)
    async with env.session.get(env.base + "/metrics") as resp:
        text = await resp.text()
    assert f'forwarder_destination_lines_sent_total{{destination_id="{created["id"]}",type="webhook"}} 10.0' in text
    assert "forwarder_destination_request_duration_seconds_bucket" in text
    assert created["secret"] not in text
