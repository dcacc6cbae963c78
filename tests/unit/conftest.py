"""Fixtures of the unit tests: a fake clock and a started store on it (a test folder may define
its own `store`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from forwarder.clock import FakeClock
from forwarder.config import StoreConfig
from forwarder.store import Store


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Store]:
    s = Store(StoreConfig(path=tmp_path / "s.db"), clock)
    await s.start()
    yield s
    await s.aclose()
