"""The drain at a stop: what the grace (or a forced stop) cuts off is logged, with its destinations
and lines, since those lines are sent again after the restart. A change of a destination lets its
request in flight finish first."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.daemonenv import DaemonEnv
from tests.receivers import WebhookReceiver

RECEIVER = WebhookReceiver  # started for each test by the `receiver` fixture (conftest.py)


async def in_flight(env: DaemonEnv, receiver: WebhookReceiver, lines: int) -> str:
    """A webhook destination with a request of `lines` lines that is never answered; its id."""
    never = asyncio.Event()

    async def held(*_: object) -> None:
        await never.wait()

    receiver.script.append(held)
    body = await env.create_destination("webhook", {"url": receiver.url}, name="hook")
    receiver.secret = body["secret"]
    await env.add_lines(lines)
    await receiver.wait_for(1)
    return str(body["id"])


def cut_off(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith("deliveries in flight cut off")]


async def test_deliveries_cut_off_by_the_grace_are_logged_with_their_lines(
    env: DaemonEnv, receiver: WebhookReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    dest_id = await in_flight(env, receiver, 3)
    assert env.daemon.delivery is not None
    caplog.set_level(logging.INFO, logger="forwarder.delivery.manager")
    await asyncio.wait_for(env.daemon.delivery.drain(0), 10)
    [record] = cut_off(caplog)
    assert record.levelno == logging.WARNING
    assert record.__dict__["destination_ids"] == [dest_id]
    assert record.__dict__["lines_in_flight"] == 3
    assert record.__dict__["reason"] == "grace_expired"
    assert "resent after the restart with the same delivery id" in record.getMessage()


async def test_a_forced_stop_cuts_the_grace_short_and_says_so(
    env: DaemonEnv, receiver: WebhookReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    dest_id = await in_flight(env, receiver, 2)
    assert env.daemon.delivery is not None
    caplog.set_level(logging.INFO, logger="forwarder.delivery.manager")
    cut = asyncio.Event()
    # 30 s of grace on the fake clock, which never moves: only `cut` can end the wait.
    draining = asyncio.create_task(env.daemon.delivery.drain(30, cut=cut))
    while not draining.done() and not any(r.getMessage() == "waiting for deliveries in flight" for r in caplog.records):
        await asyncio.sleep(0)
    assert not draining.done(), draining.exception()
    cut.set()
    await asyncio.wait_for(draining, 10)
    [record] = cut_off(caplog)
    assert record.__dict__["reason"] == "forced" and record.__dict__["destination_ids"] == [dest_id]
    assert record.__dict__["lines_in_flight"] == 2


async def test_a_change_lets_the_request_in_flight_finish_rather_than_send_it_again(
    env: DaemonEnv, receiver: WebhookReceiver
) -> None:
    # Run for real, each reload that changed a destination cut its request off and the new loop
    # sent the batch again: a burst of config edits resent a batch per edit, though the receiver
    # had taken it.
    answer = asyncio.Event()

    async def slow(*_: object) -> None:
        await answer.wait()  # then 200, as unscripted

    receiver.script.append(slow)
    body = await env.create_destination("webhook", {"url": receiver.url}, name="hook")
    receiver.secret = body["secret"]
    await env.add_lines(3)
    await receiver.wait_for(1)
    changing = asyncio.create_task(env.call("PATCH", f"/v1/log-destinations/{body['id']}", {"name": "renamed"}))
    assert env.daemon.delivery is not None
    async with asyncio.timeout(10):  # until the change stops the old loop (its request still held)
        while env.daemon.delivery.state(str(body["id"])) is not None:
            await asyncio.sleep(0.001)
    answer.set()
    status, changed = await asyncio.wait_for(changing, 10)
    assert (status, changed["name"]) == (200, "renamed")
    state = await env.settled(str(body["id"]))
    assert state["sent_lines"] == 3, state
    assert [r.ids for r in receiver.requests] == [[1, 2, 3]]  # sent once
