"""A real daemon on a loopback port with a temporary store, and keys of each role."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from forwarder.app import Daemon
from forwarder.clock import FakeClock
from forwarder.config import config_from_dict
from forwarder.delivery.netguard import StaticResolver

T0_S = 1_800_000_000


@dataclass
class Api:
    daemon: Daemon
    clock: FakeClock
    session: aiohttp.ClientSession
    base: str
    read_only: str
    read_write: str

    def url(self, path: str) -> str:
        return self.base + path

    def auth(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def api_overrides() -> dict[str, Any]:
    """Config sections that replace the fixture's; a test module overrides this fixture to change them.

    Insights are off by default here: their sweep sleeps on the fake clock, and the tests of the
    long poll tell "the poll waits" from the clock having a sleeper. The insights tests turn them on.
    """
    return {"insights": {"enabled": False}}


@pytest.fixture
async def api(tmp_path: Path, api_overrides: dict[str, Any]) -> AsyncIterator[Api]:
    config = config_from_dict(
        {
            "server": {"host": "127.0.0.1", "port": 0},
            "store": {"path": str(tmp_path / "store.db")},
            "security": {
                "secrets_key_file": str(tmp_path / "secrets.key"),
                "allowed_destination_networks": ["127.0.0.0/8"],
            },
            "databases": [
                {"id": "main", "name": "Main DB", "host": "db1", "log": {"path": str(tmp_path / "logs/*.log")}},
                {"id": "other", "name": "other", "host": "db2", "log": {"path": str(tmp_path / "none/*.log")}},
            ],
        }
        | api_overrides
    )
    clock = FakeClock(start=T0_S + 3600)
    # No real DNS in tests: hook.test is a closed loopback port; public.test a public address that
    # nothing is ever sent to (no lines are stored for it in these tests).
    resolver = StaticResolver(
        {"hook.test": ["127.0.0.1"], "public.test": ["93.184.215.14"], "private.test": ["93.184.215.14", "10.1.2.3"]}
    )
    daemon = Daemon(config, clock=clock, resolver=resolver)
    await daemon.start()
    _, ro = await daemon.store.create_key("ro", "read-only")
    _, rw = await daemon.store.create_key("rw", "read-write")
    async with aiohttp.ClientSession() as session:
        yield Api(daemon, clock, session, f"http://127.0.0.1:{daemon.port}", ro, rw)
    await daemon.aclose()
