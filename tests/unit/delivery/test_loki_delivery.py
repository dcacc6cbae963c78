"""The loki kind end to end in one process: daemon (store, API, delivery), fake clock, strict receiver.

Loopback is reachable only because the operator config allows 127.0.0.0/8 (DEVELOPERS.md).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.daemonenv import DaemonEnv
from tests.linegen import mixed_lines
from tests.receivers_base import hang
from tests.receivers_loki import LokiReceiver, out_of_order, recover, retry_after
from tests.unit.delivery.conftest import Started, until_backoff

SECRET = "glc_eyJvIjoiMTIzNDU2NyIsIm4iOiJzdGFjayJ9-very-secret"


async def create(env: DaemonEnv, receiver: LokiReceiver, secret: str | None = None, **config: Any) -> dict[str, Any]:
    return await env.create_destination("loki", {"url": receiver.url, **config}, secret)


async def test_every_line_arrives_once_with_every_field(env: DaemonEnv, started: Started) -> None:
    receiver = await started(LokiReceiver(user="1234567", secret=SECRET, tenant_id="team-a"))
    created = await create(env, receiver, SECRET, username="1234567", tenant_id="team-a")
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
    shown = await env.until(created["id"], lambda d: d["sent_lines"] >= 10_000)
    assert shown["has_secret"] is True and "secret" not in shown
    assert shown["config"] == {
        "url": receiver.url,
        "username": "1234567",
        "tenant_id": "team-a",
        "structured_metadata": True,
        "max_line_bytes": 262144,
        "max_push_bytes": 1048576,
    }
    assert shown["delivery"]["last_error"] is None and shown["delivery"]["dropped_lines"] == 0
    text = await env.metrics()
    assert f'forwarder_destination_lines_sent_total{{destination_id="{created["id"]}",type="loki"}} 10000.0' in text
    assert SECRET not in text


async def test_bearer_token_and_json_lines(env: DaemonEnv, started: Started) -> None:
    receiver = await started(LokiReceiver(secret="bearer-token-1", structured_metadata=False))
    await create(env, receiver, "bearer-token-1", structured_metadata=False)
    await env.append(mixed_lines(300, 4))
    await receiver.wait_for_lines(300)
    assert receiver.errors == []
    stored = await env.stored(receiver.accepted_ids)
    assert len(stored) == 300
    for entry in receiver.accepted_entries():
        assert entry.metadata is None
        assert recover(entry, structured=False) == stored[entry.id]


async def test_rate_limits_errors_and_timeouts_are_retried_with_backoff(env: DaemonEnv, started: Started) -> None:
    held = asyncio.Event()

    # The third push is never answered: the sender gives up after 15 s.
    receiver = await started(LokiReceiver(script=[retry_after(429, 100), 500, hang(held)]))
    created = await create(env, receiver)
    dest_id = created["id"]
    await env.add_lines(50, step_us=1000)
    await receiver.wait_for(1)
    assert await until_backoff(env, dest_id, 1) == pytest.approx(100)  # Retry-After over the 30 s backoff
    assert (await env.shown(dest_id))["delivery"]["last_error"] == "HTTP 429: Ingestion rate limit exceeded"
    env.clock.advance(100)
    await receiver.wait_for(2)
    assert await until_backoff(env, dest_id, 2) == pytest.approx(60)
    assert (await env.shown(dest_id))["delivery"]["last_error"] == "HTTP 500: scripted"
    env.clock.advance(60)
    await held.wait()
    assert await env.until_sleeping(dest_id, 2) == pytest.approx(15)  # the push's deadline
    env.clock.advance(16)
    assert await until_backoff(env, dest_id, 3) == pytest.approx(120)
    assert (await env.shown(dest_id))["delivery"]["last_error"] == "no answer within 15 s"
    env.clock.advance(120)
    await receiver.wait_for_lines(50)
    assert [len(p.entries) for p in receiver.pushes] == [50, 50, 50, 50]
    assert all(p.ids == receiver.pushes[0].ids for p in receiver.pushes)  # the same lines each time
    assert sorted(receiver.accepted_ids) == list(range(1, 51))
    assert receiver.errors == []
    d = (await env.until(dest_id, lambda d: d["sent_lines"] == 50))["delivery"]
    assert d["dropped_lines"] == 0 and d["in_flight_lines"] == 0


async def test_a_loki_400_is_not_retried_and_its_lines_are_dropped(env: DaemonEnv, started: Started) -> None:
    receiver = await started(LokiReceiver(script=[out_of_order()]))
    created = await create(env, receiver)
    dest_id = created["id"]
    await env.add_lines(30, step_us=1000)
    await receiver.wait_for(1)
    d = (await env.until(dest_id, lambda d: d["dropped_lines"] == 30 and not d["in_flight_lines"]))["delivery"]
    assert d["attempts"] == 0 and d["in_flight_lines"] == 0 and d["next_attempt_at"] is None
    assert d["last_error"].startswith("HTTP 400: entry with timestamp ")
    assert "reason: 'entry out of order'" in d["last_error"] and "total ignored: 30 out of 30" in d["last_error"]
    text = await env.metrics()
    assert (
        f'forwarder_destination_lines_dropped_total{{destination_id="{dest_id}",reason="rejected",type="loki"}} 30.0'
        in text
    )
    # The next lines go on, and the refused push is never sent again.
    await env.add_lines(5, start=30, step_us=1000)
    await receiver.wait_for_lines(5)
    assert [len(p.entries) for p in receiver.pushes] == [30, 5]
    assert sorted(receiver.accepted_ids) == list(range(31, 36))
    d = (await env.until(dest_id, lambda d: d["sent_lines"] == 5))["delivery"]
    assert d["dropped_lines"] == 30 and receiver.errors == []


async def test_disallowed_structured_metadata_is_retried_until_the_config_is_fixed(
    env: DaemonEnv, started: Started
) -> None:
    receiver = await started(LokiReceiver(allow_structured_metadata=False))
    created = await create(env, receiver)
    dest_id = created["id"]
    await env.add_lines(10, step_us=1000)
    await receiver.wait_for(1)
    assert await until_backoff(env, dest_id, 1) == pytest.approx(30)
    assert "structured metadata, but this feature is disallowed" in (await env.shown(dest_id))["delivery"]["last_error"]
    receiver.structured_metadata = False
    status, _ = await env.call(
        "PATCH", f"/v1/log-destinations/{dest_id}", {"config": {"url": receiver.url, "structured_metadata": False}}
    )
    assert status == 200
    now = env.clock.now()
    await receiver.wait_for_lines(10)  # the fixed config ends the backoff: sent at once
    assert env.clock.now() == now
    assert sorted(receiver.accepted_ids) == list(range(1, 11)) and receiver.errors == []
    assert (await env.shown(dest_id))["delivery"]["dropped_lines"] == 0


async def test_test_endpoint_without_auth(env: DaemonEnv, started: Started) -> None:
    receiver = await started(LokiReceiver())  # a Loki on a private network: no secret, no Authorization header
    created = await create(env, receiver)
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


async def test_the_config_is_checked(env: DaemonEnv, started: Started) -> None:
    receiver = await started(LokiReceiver())
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
