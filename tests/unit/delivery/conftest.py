"""Fixtures of the destination tests: the in-process daemon, and receivers started by a test."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest

from tests.daemonenv import DaemonEnv, start_daemon_env

R = TypeVar("R", bound=AbstractAsyncContextManager[Any])


class Started(Protocol):
    """The `started` fixture: starts a receiver (an async context manager) until the test ends."""

    async def __call__(self, receiver: R, /) -> R: ...


@pytest.fixture
def daemon_options() -> dict[str, Any]:
    """The keyword arguments of start_daemon_env for `env`: a test module overrides this to change them."""
    return {}


@pytest.fixture
async def env(tmp_path: Path, daemon_options: dict[str, Any]) -> AsyncIterator[DaemonEnv]:
    e = await start_daemon_env(tmp_path, **daemon_options)
    yield e
    await e.aclose()


@pytest.fixture
async def receiver(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """The test module's `RECEIVER()` (a receiver class or factory), started for the test."""
    async with request.module.RECEIVER() as r:
        yield r


@pytest.fixture
async def started() -> AsyncIterator[Started]:
    """`await started(SomeReceiver(...))` starts a receiver; every one is closed after the test."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(receiver: R) -> R:
            await stack.enter_async_context(receiver)
            return receiver

        yield start


async def until_backoff(env: DaemonEnv, dest_id: str, attempts: int) -> float:
    """Seconds until the destination's next attempt, once it has failed `attempts` times and waits.

    Not the clock's next wake: the loop waits out a backoff in slices of LAG_REFRESH_SECONDS,
    refreshing the lag gauges between them (forwarder/delivery/deliverer.py), and retries at the
    next attempt time it saved (tests/unit/delivery/test_deliverer.py checks that it waits exactly
    that long). Advancing the clock by the result makes it retry.
    """
    await env.until_sleeping(dest_id, attempts)
    delivery = env.daemon.delivery
    assert delivery is not None
    state = delivery.state(dest_id)
    assert state is not None and state.next_attempt_at is not None, "not waiting out a backoff"
    return state.next_attempt_at - env.clock.now()
