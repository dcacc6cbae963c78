"""Time for everything time-based, so tests drive it with `FakeClock` instead of sleeping."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import Awaitable
from typing import Protocol, TypeVar

T = TypeVar("T")


class Clock(Protocol):
    """Source of wall time, monotonic time and sleeps."""

    def now(self) -> float:
        """Wall-clock seconds since the Unix epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` on this clock."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class FakeClock:
    """A clock that moves only when `advance` is called; sleepers wake when their time is reached."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._mono = 0.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._watchers: list[asyncio.Future[None]] = []  # until_sleeping() calls waiting for a sleeper

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._mono + seconds, next(self._seq), fut))
        watchers, self._watchers = self._watchers, []
        for watcher in watchers:
            if not watcher.done():
                watcher.set_result(None)
        await fut

    def next_wake(self) -> float | None:
        """Seconds until the earliest pending sleep ends (None when nothing sleeps)."""
        pending = [when for when, _, f in self._sleepers if not f.done()]
        return min(pending) - self._mono if pending else None

    async def until_sleeping(self) -> float:
        """Wait, without moving time, until a task sleeps on this clock; the seconds until the earliest wake.

        Returns at once when a sleep is already pending. Lets a test take a step only once the code
        under test waits on this clock (its work in threads or other tasks done), instead of guessing
        with a real sleep; bound it with `asyncio.timeout` where the code might never sleep.
        """
        while (wake := self.next_wake()) is None:
            watcher: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._watchers.append(watcher)
            await watcher
        return wake

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline has come."""
        self._now += seconds
        self._mono += seconds
        while self._sleepers and self._sleepers[0][0] <= self._mono:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)


async def with_timeout(clock: Clock, awaitable: Awaitable[T], seconds: float) -> T:
    """`awaitable`'s result, or TimeoutError once `seconds` pass on `clock` (a fake clock in tests)."""
    task = asyncio.ensure_future(awaitable)
    timer = asyncio.ensure_future(clock.sleep(seconds))
    try:
        done, _ = await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        timer.cancel()
        raise
    if task in done:
        timer.cancel()
        return task.result()
    task.cancel()
    with contextlib.suppress(BaseException):
        await task
    raise TimeoutError(f"no answer within {seconds:g} s")
