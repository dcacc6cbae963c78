"""The datadog kind end to end: the in-process daemon of tests/daemonenv.py and a strict intake,
reached through the `url` override of the site (loopback, which the test operator config allows)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.daemonenv import DaemonEnv
from tests.linegen import mixed_lines
from tests.receivers_base import hang, retry_after
from tests.receivers_datadog import DatadogReceiver
from tests.unit.delivery.conftest import until_backoff

RECEIVER = DatadogReceiver  # started for each test by the `receiver` fixture (conftest.py)


async def create(env: DaemonEnv, receiver: DatadogReceiver) -> dict[str, Any]:
    return await env.create_destination("datadog", {"site": "datadoghq.eu", "url": receiver.url}, receiver.api_key)


async def test_every_line_arrives_once_with_every_field_as_stored(env: DaemonEnv, receiver: DatadogReceiver) -> None:
    created = await create(env, receiver)
    assert "secret" not in created and created["has_secret"] is True
    assert created["config"] == {"site": "datadoghq.eu", "url": receiver.url}
    await env.append(mixed_lines(10_000, seed=11))
    await receiver.wait_for_lines(10_000, timeout=60)
    assert receiver.errors == []
    ids = [i for r in receiver.accepted for i in r.ids]
    assert ids == list(range(1, 10_001))  # every line exactly once, in order
    stored = await env.stored(range(1, 10_001))
    for request in receiver.accepted:
        for item in request.items:
            assert item["postgresql"] == stored[int(item["postgresql"]["id"])]
    shown = await env.until(created["id"], lambda d: d["sent_lines"] == 10_000)
    assert shown["delivery"]["lag_lines"] == 0 and shown["delivery"]["last_error"] is None
    # The API key is write-only: never shown after creation, nor in metrics.
    for path in ("/v1/log-destinations", f"/v1/log-destinations/{created['id']}"):
        status, body = await env.call("GET", path)
        assert status == 200 and receiver.api_key not in str(body)
    assert receiver.api_key not in await env.metrics()


async def test_scripted_failures_are_retried_with_backoff_then_delivered(
    env: DaemonEnv, receiver: DatadogReceiver
) -> None:
    held = asyncio.Event()
    receiver.script = [retry_after(429, 100), 500, hang(held)]
    created = await create(env, receiver)
    dest = created["id"]
    await env.append(mixed_lines(5, seed=12))
    await receiver.wait_for(1)
    assert await until_backoff(env, dest, 1) == pytest.approx(100)  # Retry-After over the 30 s backoff
    env.clock.advance(100)
    await receiver.wait_for(2)
    assert await until_backoff(env, dest, 2) == pytest.approx(60)
    assert (await env.shown(dest))["delivery"]["last_error"] == "HTTP 500: scripted"
    env.clock.advance(60)
    await held.wait()
    assert await env.until_sleeping(dest, 2) == pytest.approx(30)  # the request's own deadline
    env.clock.advance(31)
    assert await until_backoff(env, dest, 3) == pytest.approx(120)
    assert (await env.shown(dest))["delivery"]["last_error"] == "no answer within 30 s"
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
    assert await until_backoff(env, created["id"], 1) == pytest.approx(30)
    assert (await env.shown(created["id"]))["delivery"]["last_error"] == "HTTP 403: scripted"
    env.clock.advance(30)
    assert await until_backoff(env, created["id"], 2) == pytest.approx(60)
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


async def test_the_shown_error_and_counts_never_lag_a_committed_save(
    env: DaemonEnv, receiver: DatadogReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The save that records the refusal commits, then its loop is held before it resumes: an API
    # read in that moment sees the store's row ahead of the loop's last persisted state.
    committed, release = asyncio.Event(), asyncio.Event()
    save = env.daemon.store.save_delivery_state

    async def held_save(dest_id: str, state: Any, sent: int, dropped: int) -> None:
        await save(dest_id, state, sent, dropped)
        if dropped:
            committed.set()
            await release.wait()

    monkeypatch.setattr(env.daemon.store, "save_delivery_state", held_save)
    receiver.script = [400]
    created = await create(env, receiver)
    await env.append(mixed_lines(3, seed=14))
    await committed.wait()
    shown = (await env.shown(created["id"]))["delivery"]
    release.set()
    assert (shown["dropped_lines"], shown["last_error"], shown["cursor"]) == (3, "HTTP 400: scripted", "3")


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


async def test_the_kinds_own_30_s_deadline_is_not_cut_short_by_the_outbound_session(env: DaemonEnv) -> None:
    """A 5 MB request may take Datadog up to 30 s (docs/destinations.md): the session every
    destination shares must set no deadline of its own, which a wall clock would enforce first
    (it was 20 s). Each request's deadline is its kind's, on the daemon's clock (tested above)."""
    delivery = env.daemon.delivery
    assert delivery is not None and delivery._session is not None
    assert delivery._session.timeout.total is None
