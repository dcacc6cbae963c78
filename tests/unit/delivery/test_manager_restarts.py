"""A delivery loop that fails over and over (a full disk fails every save) is restarted every few
seconds, but logged once with its traceback and then once a minute, not at every restart."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from forwarder.clock import FakeClock
from forwarder.delivery.deliverer import Deliverer
from forwarder.delivery.manager import RESTART_SECONDS, DeliveryManager


@dataclass
class FailingLoop:
    """Stands in for a Deliverer: each step raises while `failing`, then stops the loop."""

    failing: bool = True
    steps: int = 0
    stopping: bool = False
    dest: Any = field(default_factory=lambda: type("Dest", (), {"id": "dst_1"})())

    async def step(self) -> None:
        self.steps += 1
        if self.failing:
            raise OSError(28, "No space left on device")
        self.stopping = True


async def test_a_failing_loop_is_logged_once_then_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    manager = DeliveryManager(cast(Any, None), clock, cast(Any, None))
    loop = FailingLoop()
    caplog.set_level(logging.INFO, logger="forwarder.delivery.manager")
    task = asyncio.create_task(manager._run(cast(Deliverer, loop)))
    for _ in range(int(180 / RESTART_SECONDS)):  # failures at 0, 5, ..., 175 s
        assert await clock.until_sleeping() == RESTART_SECONDS
        clock.advance(RESTART_SECONDS)
    assert loop.steps > 30
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    # The first with its traceback, then a summary at 60 and at 120 s; not 36 tracebacks.
    assert [r.exc_info is not None for r in errors] == [True, False, False]
    assert errors[1].getMessage() == errors[0].getMessage() and errors[1].__dict__["repeats"] > 0
    loop.failing = False  # the step the last advance woke it for succeeds, and ends the loop
    await asyncio.wait_for(task, 5)
    assert [r.getMessage() for r in caplog.records][-1] == "delivery loop works again"
