"""Fixtures of the source tests: a started store on a fake clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from forwarder.clock import FakeClock
from forwarder.config import StoreConfig
from forwarder.store import Store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = Store(StoreConfig(path=tmp_path / "s.db"), FakeClock())
    await s.start()
    yield s
    await s.aclose()
