"""The better_stack kind end to end: the in-process daemon of tests/daemonenv.py and a strict source,
reached through the `url` override of the host (loopback, which the test operator config allows)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.daemonenv import DaemonEnv
from tests.linegen import mixed_lines
from tests.receivers_base import hang, retry_after
from tests.receivers_better_stack import BetterStackReceiver
from tests.unit.delivery.conftest import until_backoff

RECEIVER = BetterStackReceiver  # started for each test by the `receiver` fixture (conftest.py)


async def create(env: DaemonEnv, receiver: BetterStackReceiver) -> dict[str, Any]:
    config = {"host": "s1234.eu-nbg-2.betterstackdata.com", "url": receiver.url}
    return await env.create_destination("better_stack", config, receiver.token)


SPEC_KEYS = 20  # SPEC 2.1 fields; an event adds dt and level


async def test_every_line_arrives_once_with_every_field_as_stored(
    env: DaemonEnv, receiver: BetterStackReceiver
) -> None:
    created = await create(env, receiver)
    assert "secret" not in created and created["has_secret"] is True
    await env.append(mixed_lines(10_000, seed=21))
    await receiver.wait_for_lines(10_000, timeout=60)
    assert receiver.errors == []
    ids = [i for r in receiver.accepted for i in r.ids]
    assert ids == list(range(1, 10_001))
    stored = await env.stored(range(1, 10_001))
    for request in receiver.accepted:
        for event in request.events:
            spec = dict(list(event.items())[:SPEC_KEYS])
            assert spec == stored[int(event["id"])]
    shown = await env.until(created["id"], lambda d: d["sent_lines"] == 10_000)
    assert shown["delivery"]["lag_lines"] == 0 and shown["delivery"]["last_error"] is None
    for path in ("/v1/log-destinations", f"/v1/log-destinations/{created['id']}"):
        status, body = await env.call("GET", path)
        assert status == 200 and receiver.token not in str(body)
    assert receiver.token not in await env.metrics()


async def test_scripted_failures_are_retried_with_backoff_then_delivered(
    env: DaemonEnv, receiver: BetterStackReceiver
) -> None:
    held = asyncio.Event()
    receiver.script = [retry_after(429, 100), 500, hang(held)]
    created = await create(env, receiver)
    dest = created["id"]
    await env.append(mixed_lines(5, seed=22))
    await receiver.wait_for(1)
    assert await until_backoff(env, dest, 1) == pytest.approx(100)
    env.clock.advance(100)
    await receiver.wait_for(2)
    assert await until_backoff(env, dest, 2) == pytest.approx(60)
    assert (await env.shown(dest))["delivery"]["last_error"] == "HTTP 500: scripted"
    env.clock.advance(60)
    await held.wait()
    assert await env.until_sleeping(dest, 2) == pytest.approx(30)
    env.clock.advance(31)
    assert await until_backoff(env, dest, 3) == pytest.approx(120)
    assert (await env.shown(dest))["delivery"]["last_error"] == "no answer within 30 s"
    env.clock.advance(120)
    await receiver.wait_for_lines(5)
    assert [r.ids for r in receiver.requests] == [[1, 2, 3, 4, 5]] * 4
    assert receiver.errors == []
    await env.until(dest, lambda d: d["sent_lines"] == 5 and d["attempts"] == 0)


@pytest.mark.parametrize(("status", "text"), [(402, "HTTP 402: scripted"), (403, "HTTP 403: scripted")])
async def test_quota_and_token_errors_keep_the_lines(
    env: DaemonEnv, receiver: BetterStackReceiver, status: int, text: str
) -> None:
    receiver.script = [status]
    created = await create(env, receiver)
    await env.append(mixed_lines(3, seed=23))
    await receiver.wait_for(1)
    assert await until_backoff(env, created["id"], 1) == pytest.approx(30)
    assert (await env.shown(created["id"]))["delivery"]["last_error"] == text
    env.clock.advance(30)
    await receiver.wait_for_lines(3)
    shown = await env.until(created["id"], lambda d: d["sent_lines"] == 3)
    assert shown["delivery"]["dropped_lines"] == 0 and receiver.errors == []


async def test_test_endpoint_sends_one_line(env: DaemonEnv, receiver: BetterStackReceiver) -> None:
    created = await create(env, receiver)
    status, body = await env.call("POST", f"/v1/log-destinations/{created['id']}/test")
    assert (status, body) == (200, {"ok": True})
    [request] = receiver.accepted
    [event] = request.events
    assert event["id"] == "0" and "test line" in event["message"] and event["level"] == "info"
    receiver.script = [402]
    status, body = await env.call("POST", f"/v1/log-destinations/{created['id']}/test")
    assert (status, body) == (200, {"ok": False, "error": "HTTP 402: scripted"})
    assert receiver.errors == []


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"host": "https://s1.eu-nbg-2.betterstackdata.com"}, "host"),
        ({"host": "s1.eu-nbg-2.betterstackdata.com/x"}, "host"),
        ({}, "config"),
    ],
)
async def test_a_bad_host_is_refused_by_the_api(env: DaemonEnv, config: dict[str, Any], field: str) -> None:
    status, body = await env.call(
        "POST", "/v1/log-destinations", {"type": "better_stack", "name": "bs", "config": config, "secret": "t"}
    )
    assert status == 400 and field in str(body)
