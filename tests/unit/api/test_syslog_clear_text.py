"""Syslog in clear text is the operator's choice (the config file), never an API caller's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from forwarder.config import config_from_dict
from tests.daemonenv import DaemonEnv, operator_config
from tests.unit.api.conftest import Api
from tests.unit.api.test_destinations import call

SYSLOG = {"type": "syslog", "name": "relay", "config": {"host": "public.test"}}


async def test_the_api_refuses_tls_false_naming_config_tls(api: Api) -> None:
    status, data = await call(
        api, "POST", "/v1/log-destinations", {**SYSLOG, "config": {"host": "public.test", "tls": False}}
    )
    assert status == 400, data
    assert data["error"]["field"] == "config.tls"
    assert "config file" in data["error"]["message"] and "SPEC" not in data["error"]["message"]
    _, listed = await call(api, "GET", "/v1/log-destinations")
    assert listed["destinations"] == []


async def test_a_patch_keeps_an_api_destination_on_tls(api: Api) -> None:
    status, created = await call(api, "POST", "/v1/log-destinations", SYSLOG)
    assert status == 201 and created["config"]["tls"] is True
    path = f"/v1/log-destinations/{created['id']}"
    status, data = await call(api, "PATCH", path, {"config": {"host": "public.test", "tls": False}})
    assert status == 400 and data["error"]["field"] == "config.tls"
    status, changed = await call(api, "PATCH", path, {"config": {"host": "public.test", "port": 6515, "tls": True}})
    assert status == 200 and changed["config"]["tls"] is True and changed["config"]["port"] == 6515


class PlainRelay:
    """A syslog relay on plain TCP that collects octet-counted frames (RFC 6587 section 3.4.1)."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.arrived = asyncio.Event()
        self.server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                length = int(await reader.readuntil(b" "))
                self.frames.append(await reader.readexactly(length))
                self.arrived.set()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def wait_for(self, n: int) -> None:
        async with asyncio.timeout(10):
            while len(self.frames) < n:
                self.arrived.clear()
                await self.arrived.wait()

    async def aclose(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


@pytest.fixture
async def relay() -> AsyncIterator[PlainRelay]:
    r = PlainRelay()
    await r.start()
    yield r
    await r.aclose()


async def test_the_config_file_may_send_to_a_relay_in_clear_text(tmp_path: Path, relay: PlainRelay) -> None:
    declared = {"id": "relay", "type": "syslog", "config": {"host": "127.0.0.1", "port": relay.port, "tls": False}}
    env = await DaemonEnv.launch(config_from_dict(operator_config(tmp_path, destinations=[declared])))
    try:
        shown = await env.shown("relay")
        assert shown["managed_by"] == "config" and shown["config"]["tls"] is False
        await env.add_lines(2)
        await relay.wait_for(2)
        assert [f.split(b" ", 7)[2:4] for f in relay.frames] == [[b"db1", b"postgresql"]] * 2  # HOSTNAME APP-NAME
        assert [f.rsplit(b"ERROR:  ", 1)[1] for f in relay.frames] == [b"line 0", b"line 1"]
        # Only the file changes it: an API caller cannot, clear text or not.
        status, body = await env.call("PATCH", "/v1/log-destinations/relay", {"name": "x"})
        assert status == 409 and body["error"]["code"] == "managed_by_config"
    finally:
        await env.aclose()
