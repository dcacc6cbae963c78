"""The signed webhook and the delivery loop, end to end in one process with a fake clock.

A real daemon (store, API, delivery) and a strict receiver on loopback; loopback is reachable
only because the operator config allows 127.0.0.0/8, as DEVELOPERS.md requires.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

from forwarder.model import KINDS
from tests.daemonenv import DaemonEnv, main_database, start_daemon_env
from tests.receivers import WebhookReceiver
from tests.unit.delivery.conftest import Started, until_backoff

RECEIVER = WebhookReceiver  # started for each test by the `receiver` fixture (conftest.py)
BACKOFF = [30, 60, 120, 240, 480, 960, 1920, 3600, 3600]


@pytest.fixture
def daemon_options(tmp_path: Path) -> dict[str, Any]:
    """Two databases, for the filter."""
    other = {"id": "other", "name": "other", "log": {"path": str(tmp_path / "none2/*.log")}}
    return {"databases": [main_database(tmp_path), other]}


async def create(env: DaemonEnv, receiver: WebhookReceiver, **extra: Any) -> dict[str, Any]:
    """A webhook to `receiver`, which then checks signatures with its secret (generated or given)."""
    body = await env.create_destination("webhook", {"url": receiver.url}, name="hook", **extra)
    receiver.secret = body.get("secret") or extra.get("secret", "")
    return body


async def test_batches_are_signed_and_shaped_as_documented(env: DaemonEnv, receiver: WebhookReceiver) -> None:
    created = await create(env, receiver)
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
    shown = await env.shown(created["id"])
    assert shown["has_secret"] is True and "secret" not in shown
    assert shown["delivery"]["sent_lines"] == 1200 and shown["delivery"]["lag_lines"] == 0
    assert shown["delivery"]["last_error"] is None and shown["delivery"]["last_success_at"]


async def test_a_given_secret_signs_and_is_echoed_only_on_create(env: DaemonEnv, receiver: WebhookReceiver) -> None:
    created = await create(env, receiver, secret="my-own-signing-secret-0123456789")
    assert created["secret"] == "my-own-signing-secret-0123456789"
    await env.add_lines(3)
    await receiver.wait_for(1)
    assert receiver.errors == []


async def test_retries_follow_the_backoff_with_the_same_batch(env: DaemonEnv, receiver: WebhookReceiver) -> None:
    receiver.tolerance = None  # the fake clock runs hours ahead; the signature itself is still checked
    receiver.script = [500] * 9
    created = await create(env, receiver)
    await env.add_lines(7)
    await receiver.wait_for(1)
    shown_errors = []
    for attempt, wait in enumerate(BACKOFF, start=1):
        assert await until_backoff(env, created["id"], attempt) == pytest.approx(wait)
        d = await env.shown(created["id"])
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
    d = await env.until(created["id"], lambda d: d["attempts"] == 0, timeout=5)
    assert d["delivery"]["sent_lines"] == 7 and d["delivery"]["last_error"] == "HTTP 500: scripted"


async def test_retry_after_raises_the_wait_never_lowers_it(env: DaemonEnv, receiver: WebhookReceiver) -> None:
    from aiohttp import web

    receiver.tolerance = None

    async def busy_long() -> web.Response:
        return web.Response(status=429, headers={"Retry-After": "100"})

    async def busy_short() -> web.Response:
        return web.Response(status=503, headers={"Retry-After": "5"})

    receiver.script = [busy_long, busy_short]
    created = await create(env, receiver)
    await env.add_lines(1)
    await receiver.wait_for(1)
    assert await until_backoff(env, created["id"], 1) == pytest.approx(100)
    env.clock.advance(100)
    await receiver.wait_for(2)
    assert await until_backoff(env, created["id"], 2) == pytest.approx(60)  # the backoff wins over 5 s
    env.clock.advance(60)
    await receiver.wait_for(3)


async def test_a_retry_after_of_non_ascii_digits_is_ignored(env: DaemonEnv, receiver: WebhookReceiver) -> None:
    from aiohttp import web

    receiver.tolerance = None

    async def superscript() -> web.Response:  # "\u00b2".isdigit() is True, float() refuses it
        return web.Response(status=429, headers={"Retry-After": "\u00b2"})

    receiver.script = [superscript] * 2
    created = await create(env, receiver)
    await env.add_lines(2)
    await receiver.wait_for(1)
    assert await until_backoff(env, created["id"], 1) == pytest.approx(30)  # the backoff, shown failing
    assert (await env.shown(created["id"]))["delivery"]["last_error"] == "HTTP 429"
    status, body = await env.call("POST", f"/v1/log-destinations/{created['id']}/test")
    assert (status, body) == (200, {"ok": False, "error": "HTTP 429"})
    env.clock.advance(30)
    await env.until(created["id"], lambda d: d["attempts"] == 0 and d["sent_lines"] == 2)


async def test_a_16_second_response_is_a_timeout(env: DaemonEnv, receiver: WebhookReceiver) -> None:
    receiver.tolerance = None
    held = asyncio.Event()

    async def hold() -> None:
        held.set()
        await asyncio.Event().wait()  # never answers; the sender must give up at 15 s

    receiver.script = [hold]
    created = await create(env, receiver)
    await env.add_lines(2)
    await held.wait()
    assert await env.until_sleeping(created["id"], 0) == pytest.approx(15)  # the request's deadline
    env.clock.advance(16)
    assert await until_backoff(env, created["id"], 1) == pytest.approx(30)
    d = await env.shown(created["id"])
    assert d["delivery"]["last_error"] == "no answer within 15 s"
    env.clock.advance(30)
    await receiver.wait_for(2)
    assert receiver.deliveries[0].delivery_id == receiver.deliveries[1].delivery_id


async def test_a_redirect_is_a_failure_and_never_followed(env: DaemonEnv, receiver: WebhookReceiver) -> None:
    receiver.tolerance = None
    receiver.script = [302]
    created = await create(env, receiver)
    await env.add_lines(1)
    await receiver.wait_for(1)
    assert await until_backoff(env, created["id"], 1) == pytest.approx(30)
    d = await env.shown(created["id"])
    assert d["delivery"]["last_error"] == "HTTP 302: redirects are not followed"
    assert receiver.other_paths == []  # /target was never requested


async def test_a_down_receiver_does_not_delay_another(
    env: DaemonEnv, receiver: WebhookReceiver, started: Started
) -> None:
    hanging = await started(WebhookReceiver())

    async def hold() -> None:
        await asyncio.Event().wait()

    hanging.script = [hold] * 100
    await create(env, hanging)
    await create(env, receiver)
    for batch in range(5):
        await env.add_lines(100, start=batch * 100)
    await receiver.wait_for(1)
    async with asyncio.timeout(10):
        while sum(len(d.ids) for d in receiver.deliveries) < 500:
            await receiver.wait_for(len(receiver.deliveries) + 1)
    assert len(hanging.deliveries) == 1  # still waiting on its first request; the clock never moved


async def test_the_filter_picks_kinds_and_databases(env: DaemonEnv, receiver: WebhookReceiver) -> None:
    await create(env, receiver, filter={"kinds": ["locks"], "database_ids": ["main"]})
    for kind in KINDS:
        await env.add_lines(2, kind=kind)
    await receiver.wait_for_lines(4)
    kinds = {e["kind"] for d in receiver.deliveries for e in d.body["entries"]}
    assert kinds == {"lock_wait", "deadlock"}


async def test_backoff_and_the_batch_survive_a_restart(
    tmp_path: Path, daemon_options: dict[str, Any], receiver: WebhookReceiver
) -> None:
    receiver.tolerance = None
    receiver.script = [503]
    e = await start_daemon_env(tmp_path, **daemon_options)
    created = await create(e, receiver)
    await e.add_lines(5)
    await receiver.wait_for(1)
    assert await until_backoff(e, created["id"], 1) == pytest.approx(30)
    await e.aclose()
    e2 = await start_daemon_env(tmp_path, **daemon_options)
    try:
        e2.clock._now = e.clock.now()  # the same moment, after the restart
        assert await until_backoff(e2, created["id"], 1) == pytest.approx(30, abs=1)
        e2.clock.advance(30)
        await receiver.wait_for(2)
        first, second = receiver.deliveries
        assert first.delivery_id == second.delivery_id and first.ids == second.ids
        d = await e2.shown(created["id"])
        assert d["delivery"]["last_error"] == "HTTP 503: scripted"
    finally:
        await e2.aclose()


async def test_test_endpoint_sends_one_marked_line(env: DaemonEnv, receiver: WebhookReceiver) -> None:
    created = await create(env, receiver)
    status, body = await env.call("POST", f"/v1/log-destinations/{created['id']}/test")
    assert (status, body) == (200, {"ok": True})
    [d] = receiver.deliveries
    [entry] = d.body["entries"]
    assert entry["id"] == "0" and "test line" in entry["message"]
    receiver.script = [500]
    status, body = await env.call("POST", f"/v1/log-destinations/{created['id']}/test")
    assert (status, body) == (200, {"ok": False, "error": "HTTP 500: scripted"})


async def test_lines_passed_by_retention_are_counted_as_dropped(env: DaemonEnv, receiver: WebhookReceiver) -> None:
    receiver.tolerance = None
    receiver.script = [500] * 100
    created = await create(env, receiver)
    await env.add_lines(3)  # the first batch: in flight, failing
    await receiver.wait_for(1)
    await env.add_lines(4)  # behind it, never sent
    await env.until_sleeping(created["id"], 1)
    env.clock._now += 8 * 86400  # the wall clock moves past retention_days = 7 while the loop sleeps
    assert await env.daemon.store.retention_once() == 7
    env.clock.advance(30)  # the retry finds its batch gone
    await env.until(created["id"], lambda d: d["in_flight_lines"] == 0 and d["dropped_lines"] == 7)
    assert len(receiver.deliveries) == 1  # nothing left to retry
    text = await env.metrics()
    dest_id = created["id"]
    labels = f'destination_id="{dest_id}",reason="retention",type="webhook"'
    series = f"forwarder_destination_lines_dropped_total{{{labels}}}"
    assert f"{series} 7.0" in text


async def test_metrics_count_sent_lines_and_never_show_secrets(env: DaemonEnv, receiver: WebhookReceiver) -> None:
    created = await create(env, receiver)
    await env.add_lines(10)
    await receiver.wait_for(1)
    text = await env.metrics()
    assert f'forwarder_destination_lines_sent_total{{destination_id="{created["id"]}",type="webhook"}} 10.0' in text
    assert "forwarder_destination_request_duration_seconds_bucket" in text
    assert created["secret"] not in text
