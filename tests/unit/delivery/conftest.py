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
