"""The API port under abuse: a cap on open connections, a deadline for the request head, and
malformed requests logged in one line. An in-process daemon on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from forwarder import metrics
from forwarder.api.server import ConnectionLimits
from forwarder.app import Daemon
from forwarder.clock import FakeClock
from forwarder.config import ServerConfig, config_from_dict

Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]
PROMPT = 1.0  # seconds: a refusal is prompt when it arrives within this


async def make_daemon(tmp_path: Path, **server: object) -> Daemon:
    config = config_from_dict(
        {
            "server": {"host": "127.0.0.1", "port": 0, **server},
            "store": {"path": str(tmp_path / "store.db")},
            "security": {"secrets_key_file": str(tmp_path / "secrets.key")},
        }
    )
    daemon = Daemon(config, clock=FakeClock())
    await daemon.start()
    return daemon


@pytest.fixture
async def conns() -> AsyncIterator[list[Conn]]:
    held: list[Conn] = []
    yield held
    for _, writer in held:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def closed_by_peer(reader: asyncio.StreamReader, within: float) -> bool:
    """True when the server closes (or resets) the connection within `within` seconds."""
    try:
        return await asyncio.wait_for(reader.read(), within) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def sample(metric: str) -> float:
    value = metrics.REGISTRY.get_sample_value(metric)
    return value or 0.0


def test_the_cap_keeps_reserved_descriptors_free() -> None:
    server = ServerConfig(max_connections=1000, reserved_descriptors=256)
    assert ConnectionLimits.of(server, None).max_connections == 1000  # no descriptor limit
    assert ConnectionLimits.of(server, 65_536).max_connections == 1000
    assert ConnectionLimits.of(server, 1024).max_connections == 768
    assert ConnectionLimits.of(server, 100).max_connections == 1  # the API still answers, one at a time


async def test_connections_past_the_cap_are_closed_at_once_counted_and_logged_once(
    tmp_path: Path, conns: list[Conn], caplog: pytest.LogCaptureFixture
) -> None:
    daemon = await make_daemon(tmp_path, max_connections=3, header_timeout_seconds=60)
    try:
        refused_before = sample("forwarder_http_connections_refused_total")
        for _ in range(3):
            conns.append(await asyncio.open_connection("127.0.0.1", daemon.port))
        with caplog.at_level(logging.WARNING, "forwarder.api.server"):
            for _ in range(4):
                reader, writer = await asyncio.open_connection("127.0.0.1", daemon.port)
                conns.append((reader, writer))
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                assert await closed_by_peer(reader, PROMPT)
        assert sample("forwarder_http_connections_refused_total") - refused_before == 4
        # Logged, at a bounded rate: one record for the burst (the fake clock stands still).
        assert [r.getMessage() for r in caplog.records] == ["API connection refused: too many open"]

        # Held connections that go away make room for a normal client.
        for _, writer in conns[:3]:
            writer.close()
        async with aiohttp.ClientSession() as session:
            for _ in range(50):  # the server sees the closes within a few loop turns
                try:
                    async with session.get(f"http://127.0.0.1:{daemon.port}/healthz") as resp:
                        assert resp.status == 200
                        break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.02)
            else:
                pytest.fail("the API did not answer after connections were released")
    finally:
        await daemon.aclose()


async def test_a_connection_without_a_complete_request_head_is_closed_after_the_header_timeout(
    tmp_path: Path, conns: list[Conn]
) -> None:
    daemon = await make_daemon(tmp_path, header_timeout_seconds=0.2, keepalive_timeout_seconds=600)
    try:
        timed_out_before = sample("forwarder_http_connections_timed_out_total")
        silent = await asyncio.open_connection("127.0.0.1", daemon.port)
        slow = await asyncio.open_connection("127.0.0.1", daemon.port)
        conns += [silent, slow]
        slow[1].write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # the head never ends
        assert await closed_by_peer(silent[0], 10)
        assert await closed_by_peer(slow[0], 10)
        assert sample("forwarder_http_connections_timed_out_total") - timed_out_before == 2

        # A client that sends its request in time gets the answer.
        reader, writer = await asyncio.open_connection("127.0.0.1", daemon.port)
        conns.append((reader, writer))
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await asyncio.wait_for(reader.readline(), 10)).startswith(b"HTTP/1.1 200")
    finally:
        await daemon.aclose()


async def test_an_oversized_request_line_is_a_400_logged_in_one_line(
    tmp_path: Path, conns: list[Conn], caplog: pytest.LogCaptureFixture
) -> None:
    daemon = await make_daemon(tmp_path)
    try:
        with caplog.at_level(logging.DEBUG):
            reader, writer = await asyncio.open_connection("127.0.0.1", daemon.port)
            conns.append((reader, writer))
            writer.write(b"GET /v1/databases?" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (await asyncio.wait_for(reader.readline(), 10)).startswith((b"HTTP/1.0 400", b"HTTP/1.1 400"))
            await asyncio.wait_for(reader.read(), 10)  # the rest of the answer, then the server closes
        assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
        assert any(r.getMessage() == "malformed request refused" for r in caplog.records)
    finally:
        await daemon.aclose()
