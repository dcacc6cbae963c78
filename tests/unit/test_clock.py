"""The fake clock that time-based tests drive instead of sleeping."""

from __future__ import annotations

import asyncio

import pytest

from forwarder.clock import FakeClock


async def test_sleepers_wake_only_when_time_reaches_their_deadline() -> None:
    clock = FakeClock()
    woke: list[float] = []

    async def sleeper(seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append(seconds)

    tasks = [asyncio.create_task(sleeper(s)) for s in (20, 10)]
    await asyncio.sleep(0)
    assert clock.next_wake() == 10
    clock.advance(9.5)
    await asyncio.sleep(0)
    assert woke == []
    clock.advance(0.5)
    await asyncio.sleep(0)
    assert woke == [10] and clock.next_wake() == pytest.approx(10)
    clock.advance(10)
    await asyncio.gather(*tasks)
    assert woke == [10, 20]


async def test_until_sleeping_returns_once_something_sleeps_with_the_time_left() -> None:
    clock = FakeClock()
    watcher = asyncio.create_task(clock.until_sleeping())
    await asyncio.sleep(0)
    assert not watcher.done()  # nothing sleeps yet: it waits, time does not move
    sleeper = asyncio.create_task(clock.sleep(42))
    async with asyncio.timeout(5):
        assert await watcher == 42
    assert clock.monotonic() == 0
    assert await clock.until_sleeping() == 42  # at once while a sleep is pending
    clock.advance(42)
    await sleeper
