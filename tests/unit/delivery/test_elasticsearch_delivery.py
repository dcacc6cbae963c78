"""The elasticsearch kind end to end: a real daemon (store, API, delivery) with a fake clock and a
strict Bulk API receiver on loopback (reachable only because the operator config allows
127.0.0.0/8, as DEVELOPERS.md requires)."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from forwarder.sinks._encode import level
from forwarder.sinks.elasticsearch import DEFAULT_MAX_REQUEST_BYTES, FILTER_PATH
from tests.daemonenv import DaemonEnv
from tests.linegen import mixed_lines
from tests.receivers_elasticsearch import DEFAULT_INDEX, ElasticsearchReceiver
from tests.unit.delivery.conftest import Started, until_backoff

API_KEY = "VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6dWkybHAyYXhUTm1zeWFrdzl0dk5udw=="


# Started for each test by the `receiver` fixture (conftest.py).
RECEIVER = partial(ElasticsearchReceiver, api_key=API_KEY, max_body_bytes=DEFAULT_MAX_REQUEST_BYTES)


async def create(
    env: DaemonEnv, receiver: ElasticsearchReceiver, secret: str = API_KEY, **config: Any
) -> dict[str, Any]:
    return await env.create_destination("elasticsearch", {"url": receiver.url, **config}, secret, name="es")


def as_stored(doc: dict[str, Any]) -> dict[str, Any]:
    """An indexed document back in the SPEC 2.1 shape of the store."""
    spec = {k: v for k, v in doc.items() if k not in ("@timestamp", "log")}
    return spec


async def test_ten_thousand_mixed_lines_are_stored_once_each_as_stored(
    env: DaemonEnv, receiver: ElasticsearchReceiver
) -> None:
    created = await create(env, receiver)
    assert API_KEY not in str(created) and "secret" not in created and created["has_secret"] is True
    ids = await env.append(mixed_lines(10_000, seed=11))
    await receiver.wait_for_stored(10_000, timeout=60)
    assert receiver.errors == []
    stored = await env.stored(ids)
    indexed = receiver.stored_by_line()
    store_id = env.daemon.store.store_id
    assert sorted(indexed) == ids
    assert set(receiver.stored) == {(DEFAULT_INDEX, f"{store_id}-{i}") for i in ids}
    for line_id in ids:
        doc, expected = indexed[line_id], stored[line_id]
        assert as_stored(doc) == expected
        assert doc["@timestamp"] == expected["time"]
        assert doc["log"] == {"level": level(expected["severity"])}
    assert sum(len(c.ids) for c in receiver.calls) == 10_000  # each sent once: nothing failed
    assert all(c.statuses == [201] * len(c.ids) for c in receiver.calls)
    assert all(len(c.raw) <= DEFAULT_MAX_REQUEST_BYTES for c in receiver.calls)
    assert all(c.query == {"filter_path": FILTER_PATH} for c in receiver.calls)
    d = await env.settled(created["id"])
    assert d["sent_lines"] == 10_000 and d["dropped_lines"] == 0 and d["last_error"] is None
    # The credential is write-only.
    for path in ("/v1/log-destinations", f"/v1/log-destinations/{created['id']}"):
        _, body = await env.call("GET", path)
        assert API_KEY not in str(body)
    assert API_KEY not in await env.metrics()


async def test_a_partial_failure_resends_only_the_busy_items_and_drops_the_refused(
    env: DaemonEnv, receiver: ElasticsearchReceiver
) -> None:
    store_id = env.daemon.store.store_id
    receiver.stored[(DEFAULT_INDEX, f"{store_id}-2")] = {"id": "2"}  # an earlier attempt stored line 2
    receiver.item_script = {4: [429], 5: [429], 9: [503]}
    receiver.item_always = {7: 400}
    created = await create(env, receiver)
    await env.append(mixed_lines(10))
    await receiver.wait_for(1)
    assert receiver.calls[0].statuses == [201, 409, 201, 429, 429, 201, 400, 201, 503, 201]
    assert await until_backoff(env, created["id"], 1) == pytest.approx(30)
    d = await env.delivery(created["id"])
    assert (d["sent_lines"], d["dropped_lines"], d["in_flight_lines"]) == (6, 1, 3)
    assert d["last_error"].startswith("3 of 10 documents to retry (429 es_rejected_execution_exception: ")
    assert (
        "1 of 10 documents refused for good (400 document_parsing_exception: [1:27] failed to parse"
        in (d["last_error"])
    )
    assert len(receiver.calls) == 1  # nothing before the backoff ends
    env.clock.advance(30)
    await receiver.wait_for(2)
    assert receiver.calls[1].ids == [4, 5, 9] and receiver.calls[1].statuses == [201, 201, 201]
    d = await env.settled(created["id"])
    assert (d["sent_lines"], d["dropped_lines"]) == (9, 1)
    assert sorted(receiver.stored_by_line()) == [1, 2, 3, 4, 5, 6, 8, 9, 10]
    assert len(receiver.calls) == 2 and receiver.errors == []
    text = await env.metrics()
    labels = f'destination_id="{created["id"]}",reason="%s",type="elasticsearch"'
    assert f"forwarder_destination_lines_dropped_total{{{labels % 'rejected'}}} 1.0" in text
    assert f"forwarder_destination_failures_total{{{labels % 'item_retry'}}} 1.0" in text
    assert (
        f'forwarder_destination_lines_sent_total{{destination_id="{created["id"]}",type="elasticsearch"}} 9.0' in text
    )


async def test_a_resend_after_a_timeout_gets_409s_that_count_as_delivered(
    env: DaemonEnv, receiver: ElasticsearchReceiver
) -> None:
    receiver.script = ["store_then_hang"]  # stored, but the answer never comes
    created = await create(env, receiver)
    await env.append(mixed_lines(50))
    await receiver.held.wait()
    assert await env.until_sleeping(created["id"], 0) == pytest.approx(20)  # the request's deadline
    env.clock.advance(21)
    assert await until_backoff(env, created["id"], 1) == pytest.approx(30)
    assert (await env.delivery(created["id"]))["last_error"] == "no answer within 20 s"
    env.clock.advance(30)
    await receiver.wait_for(2)
    first, second = receiver.calls
    assert second.ids == first.ids and second.statuses == [409] * 50
    d = await env.settled(created["id"])
    assert (d["sent_lines"], d["dropped_lines"]) == (50, 0)
    assert len(receiver.stored) == 50 and receiver.errors == []


async def test_whole_request_429_and_500_are_retried_after_the_backoff(
    env: DaemonEnv, receiver: ElasticsearchReceiver
) -> None:
    receiver.script = [429, 500]
    created = await create(env, receiver)
    await env.append(mixed_lines(5))
    await receiver.wait_for(1)
    assert await until_backoff(env, created["id"], 1) == pytest.approx(30)
    assert (await env.delivery(created["id"]))["last_error"] == "HTTP 429: es_rejected_execution_exception: scripted"
    env.clock.advance(30)
    await receiver.wait_for(2)
    assert await until_backoff(env, created["id"], 2) == pytest.approx(60)
    assert (await env.delivery(created["id"]))["last_error"] == "HTTP 500: exception: scripted"
    env.clock.advance(60)
    await receiver.wait_for(3)
    d = await env.settled(created["id"])
    assert d["sent_lines"] == 5 and len(receiver.stored) == 5
    assert [c.ids for c in receiver.calls] == [[1, 2, 3, 4, 5]] * 3


async def test_test_endpoint_indexes_one_marked_line(env: DaemonEnv, receiver: ElasticsearchReceiver) -> None:
    created = await create(env, receiver)
    path = f"/v1/log-destinations/{created['id']}/test"
    assert await env.call("POST", path) == (200, {"ok": True})
    [(key, doc)] = receiver.stored.items()
    assert key == (DEFAULT_INDEX, f"{env.daemon.store.store_id}-0")
    assert doc["id"] == "0" and "test line" in doc["message"]
    assert await env.call("POST", path) == (200, {"ok": True})  # already there: 409, still fine
    assert receiver.calls[1].statuses == [409]
    receiver.script = [500]
    assert await env.call("POST", path) == (200, {"ok": False, "error": "HTTP 500: exception: scripted"})
    assert receiver.errors == []


async def test_opensearch_with_basic_auth_an_index_and_a_pipeline(env: DaemonEnv, started: Started) -> None:
    receiver = await started(
        ElasticsearchReceiver(user="forwarder", password="s3cret pass", index="pg-logs", pipeline="geoip")
    )
    created = await create(env, receiver, secret="s3cret pass", username="forwarder", index="pg-logs", pipeline="geoip")
    assert created["config"]["username"] == "forwarder" and "s3cret" not in str(created)
    await env.append(mixed_lines(30))
    await receiver.wait_for_stored(30)
    assert receiver.errors == []
    assert receiver.calls[0].headers["Authorization"].startswith("Basic ")


async def test_wrong_credentials_are_retried_without_showing_them_and_a_new_key_resumes_at_once(
    env: DaemonEnv, receiver: ElasticsearchReceiver
) -> None:
    created = await create(env, receiver, secret="not-the-key-123")
    await env.append(mixed_lines(3))
    for attempt, wait in enumerate([30, 60, 120, 240], start=1):
        assert await until_backoff(env, created["id"], attempt) == pytest.approx(wait)
        env.clock.advance(wait)
    assert await until_backoff(env, created["id"], 5) == pytest.approx(480)
    d = await env.delivery(created["id"])
    assert d["last_error"].startswith("HTTP 401: security_exception: missing authentication credentials")
    assert receiver.errors == ["wrong or missing Authorization"] * 5
    receiver.errors.clear()
    now = env.clock.now()
    status, _ = await env.call("PATCH", f"/v1/log-destinations/{created['id']}", {"secret": API_KEY})
    assert status == 200
    # Fixing the key ends the backoff (docs/destinations.md): the waiting batch is sent with the new
    # key at once, not after the 480 s left, and the clock has not moved.
    await receiver.wait_for_stored(3)
    assert env.clock.now() == now
    d = await env.settled(created["id"])
    assert (d["sent_lines"], d["dropped_lines"], d["attempts"]) == (3, 0, 0)
    assert [c.ids for c in receiver.calls] == [[1, 2, 3]] and receiver.errors == []


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"config": {"url": "http://127.0.0.1:9200", "index": "Logs"}}, "config.index"),
        ({"config": {"url": "http://127.0.0.1:9200/?x=1"}}, "config.url"),
        ({"config": {"url": "http://127.0.0.1:9200", "max_request_bytes": 500 << 20}}, "config.max_request_bytes"),
        ({"config": {"url": "http://127.0.0.1:9200"}, "secret": None}, "secret"),
        ({"config": {"url": "http://10.1.2.3:9200"}}, "config.url"),  # not an allowed network
    ],
)
async def test_create_refuses_a_bad_config(env: DaemonEnv, change: dict[str, Any], field: str) -> None:
    body = {"type": "elasticsearch", "name": "es", "secret": API_KEY} | change
    body = {k: v for k, v in body.items() if v is not None}
    status, answer = await env.call("POST", "/v1/log-destinations", body)
    assert status == 400 and answer["error"]["field"] == field, answer
