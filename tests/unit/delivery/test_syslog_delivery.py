"""The syslog kind delivered through a real daemon (fake clock) to an in-test TLS receiver that
parses every frame strictly (the reader is tests/unit/sinks/test_syslog.py's)."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trustme

from forwarder.config import config_from_dict
from forwarder.delivery.netguard import StaticResolver
from forwarder.model import LogLine
from forwarder.sinks.base import OutLine
from forwarder.sinks.syslog import (
    syslog_message,
)
from tests.daemonenv import DaemonEnv, main_database, operator_config
from tests.linegen import mixed_lines
from tests.receivers_base import wait_until
from tests.unit.delivery.conftest import until_backoff
from tests.unit.sinks.test_syslog import (
    CLIENT_CA,
    CLIENT_CERT_PEM,
    CLIENT_KEY_PEM,
    IDENTITY,
    T0_US,
    WireFormatError,
    parse_syslog,
    read_frame,
)

# --- deliveries through a daemon to an in-test receiver ---------------------------------------------

Behaviour = Callable[["SyslogReceiver", asyncio.StreamReader, asyncio.StreamWriter, list[bytes]], Awaitable[None]]


async def read_all(
    receiver: SyslogReceiver, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frames: list[bytes]
) -> None:
    """Read frames until the sender ends the connection; each is parsed strictly."""
    while (data := await read_frame(reader)) is not None:
        parse_syslog(data)
        frames.append(data)
        receiver.arrived.set()


async def read_frames(receiver: SyslogReceiver, reader: asyncio.StreamReader, frames: list[bytes], n: int) -> None:
    """Read `n` frames (the sender must not end the connection before), then tell a waiting test."""
    for _ in range(n):
        data = await read_frame(reader)
        assert data is not None
        frames.append(data)
    receiver.arrived.set()


@dataclass
class SyslogReceiver:
    """A syslog receiver over TLS (or plain TCP) that reads RFC 5425 frames strictly.

    Each connection takes the next behaviour of `script` (then `read_all`); `connections` holds the
    frames each connection got, `errors` every format violation (a test fails on any).
    """

    ssl_context: ssl.SSLContext | None
    rcvbuf: int | None = None
    script: list[Behaviour] = field(default_factory=list)
    connections: list[list[bytes]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0
    _server: asyncio.Server | None = None
    _writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if self.rcvbuf:  # inherited by accepted sockets: a sender that outruns the reader blocks soon
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        self._server = await asyncio.start_server(self._handle, sock=sock, ssl=self.ssl_context)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frames: list[bytes] = []
        self.connections.append(frames)
        self._writers.append(writer)
        behaviour = self.script.pop(0) if self.script else read_all
        try:
            await behaviour(self, reader, writer, frames)
        except (WireFormatError, asyncio.IncompleteReadError) as exc:
            self.errors.append(repr(exc))
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.transport.abort()

    @property
    def messages(self) -> list[bytes]:
        return [m for frames in self.connections for m in frames]

    async def wait_for(self, n: int) -> None:
        # 1,200 lines over TLS take ~0.5 s; 30 s leaves room for two loaded cores under faketime
        # (10 s ran out there once).
        await wait_until(self.arrived, lambda: len(self.messages) >= n, 30)

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in self._writers:
                writer.transport.abort()
            await self._server.wait_closed()


SERVER_CA = trustme.CA()


def server_context(name: str = "syslog.test", client_ca: trustme.CA | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    SERVER_CA.issue_cert(name).configure_cert(ctx)
    if client_ca is not None:
        ctx.verify_mode = ssl.CERT_REQUIRED
        client_ca.configure_trust(ctx)
    return ctx


class Env(DaemonEnv):
    """The daemon env with syslog destinations to the in-test receiver and the frames stored lines make."""

    async def create(self, port: int, expect: int = 201, secret: str | None = None, **config: Any) -> dict[str, Any]:
        defaults = {"host": "syslog.test", "port": port, "ca_certificate_pem": SERVER_CA.cert_pem.bytes().decode()}
        return await self.create_destination("syslog", defaults | config, secret, expect=expect)

    add = DaemonEnv.append  # the name tests/integration/test_syslog_rsyslog.py uses

    async def expected(self, ids: range, max_bytes: int = 8192, message_format: str = "text") -> list[bytes]:
        docs = await self.daemon.store.docs_by_ids(list(ids))
        return [syslog_message(OutLine(i, docs[i]), max_bytes, message_format) for i in ids]


async def start_env(tmp_path: Path) -> Env:
    """A daemon for IDENTITY's database whose resolver maps syslog.test and other.test to loopback."""
    database = main_database(tmp_path, name=IDENTITY.database_name, host=IDENTITY.host)
    resolver = StaticResolver({"syslog.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    return await Env.launch(config_from_dict(operator_config(tmp_path, databases=[database])), resolver=resolver)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    e = await start_env(tmp_path)
    yield e
    await e.aclose()


@pytest.fixture
async def receiver() -> AsyncIterator[SyslogReceiver]:
    r = SyslogReceiver(server_context())
    await r.start()
    yield r
    await r.aclose()
    assert r.errors == []


def numbered(n: int, start: int = 0, size: int = 0) -> list[LogLine]:
    return [
        LogLine(time_us=T0_US + i, severity="LOG", kind="other", message=f"line {i}" + " " * size, pid=100 + i)
        for i in range(start, start + n)
    ]


async def test_lines_arrive_as_rfc5424_frames_on_one_kept_connection(env: Env, receiver: SyslogReceiver) -> None:
    created = await env.create(receiver.port)
    await env.append(mixed_lines(1200))
    await receiver.wait_for(1200)
    assert len(receiver.connections) == 1  # three batches, one connection
    assert receiver.messages == await env.expected(range(1, 1201))
    first = parse_syslog(receiver.messages[0])
    assert (first.app_name, first.hostname) == ("postgresql", "db-1.example")
    assert first.sd["service@32473"]["database"] == 'shop "eu" \\ [x] ü'
    d = await env.until_sent(created["id"], 1200)
    assert d["last_error"] is None and d["lag_lines"] == 0


async def test_an_idle_connection_the_receiver_closed_is_not_written_on(env: Env, receiver: SyslogReceiver) -> None:
    close_now = asyncio.Event()

    async def read_one_batch_then_close_when_idle(
        r: SyslogReceiver, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frames: list[bytes]
    ) -> None:
        await read_frames(r, reader, frames, 10)
        await close_now.wait()
        writer.close()  # close_notify and FIN while the sender is idle

    receiver.script = [read_one_batch_then_close_when_idle]
    created = await env.create(receiver.port)
    await env.append(numbered(10))
    await env.until_sent(created["id"], 10)
    close_now.set()
    await asyncio.sleep(0.2)  # the sender's event loop sees the close
    await env.append(numbered(10, start=10))
    await receiver.wait_for(20)
    assert [len(c) for c in receiver.connections] == [10, 10]
    assert receiver.messages == await env.expected(range(1, 21))
    d = await env.until_sent(created["id"], 20)
    assert d["last_error"] is None and d["attempts"] == 0


async def test_a_connection_broken_mid_batch_resends_the_batch_whole(env: Env) -> None:
    """The receiver reads a little of a 1 MB batch, then resets the connection: the retry sends all of it.

    The receiver's small socket buffer keeps most of the batch unacknowledged when it stops, so the
    sender learns of the reset before it counts the batch as delivered.
    """

    async def read_some_then_reset(
        r: SyslogReceiver, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frames: list[bytes]
    ) -> None:
        await read_frames(r, reader, frames, 3)
        # abort() with unread data queued: the kernel answers with RST, the sender's write fails

    receiver = SyslogReceiver(server_context(), rcvbuf=4096, script=[read_some_then_reset])
    await receiver.start()
    try:
        created = await env.create(receiver.port)
        await env.append(numbered(500, size=1700))  # one batch, ~1 MB: more than the receiver buffers
        await receiver.wait_for(3)
        assert await until_backoff(env, created["id"], 1) == pytest.approx(30)
        d = await env.delivery(created["id"])
        assert d["last_error"].startswith("connection lost: ") and d["sent_lines"] == 0
        assert d["in_flight_lines"] == 500
        env.clock.advance(30)
        await receiver.wait_for(503)
        assert [len(c) for c in receiver.connections] == [3, 500]
        assert receiver.connections[1] == await env.expected(range(1, 501))  # whole, in order
        await env.until_sent(created["id"], 500)
    finally:
        await receiver.aclose()
    assert receiver.errors == []


@pytest.mark.parametrize(
    ("cert_name", "extra_ca", "reason"),
    [
        ("other.test", True, "TLS certificate refused: Hostname mismatch, certificate is not valid for 'syslog.test'"),
        ("syslog.test", False, "TLS certificate refused: unable to get local issuer certificate"),
    ],
)
async def test_a_certificate_not_valid_for_the_host_is_refused(
    env: Env, cert_name: str, extra_ca: bool, reason: str
) -> None:
    receiver = SyslogReceiver(server_context(cert_name))
    await receiver.start()
    try:
        config = {} if extra_ca else {"ca_certificate_pem": None}
        created = await env.create(receiver.port, **config)
        await env.append(numbered(5))
        assert await until_backoff(env, created["id"], 1) == pytest.approx(30)
        d = await env.delivery(created["id"])
        assert d["last_error"] == reason and d["sent_lines"] == 0 and d["in_flight_lines"] == 5
        assert receiver.messages == []
    finally:
        await receiver.aclose()


async def test_a_client_certificate_authenticates_the_sender(env: Env) -> None:
    receiver = SyslogReceiver(server_context(client_ca=CLIENT_CA))
    await receiver.start()
    try:
        created = await env.create(receiver.port, secret=CLIENT_KEY_PEM, client_certificate_pem=CLIENT_CERT_PEM)
        assert "secret" not in created and created["has_secret"] is True
        await env.append(numbered(5))
        await receiver.wait_for(5)
        assert receiver.messages == await env.expected(range(1, 6))
        for path in ("/v1/log-destinations", f"/v1/log-destinations/{created['id']}"):
            _, body = await env.call("GET", path)
            assert CLIENT_KEY_PEM[40:80] not in json.dumps(body)
    finally:
        await receiver.aclose()


REFUSED_AFTER_HANDSHAKE = (
    "the receiver ended the connection right after the TLS handshake: "
    "it may want a client certificate, or not accept this one"
)


@pytest.mark.parametrize(
    ("secret", "client_cert", "reason"),
    [
        # TLS 1.3: the receiver's refusal comes after the client's handshake; it must not count as
        # delivered. (asyncio's server drops the connection without sending its alert; rsyslog sends
        # one, and then the alert is shown: "TLS failed: tlsv13 alert certificate required".)
        (None, None, REFUSED_AFTER_HANDSHAKE),
        (None, "stranger", REFUSED_AFTER_HANDSHAKE),
        (None, CLIENT_CERT_PEM, "client_certificate_pem needs its private key (PEM) in the destination's `secret`"),
    ],
)
async def test_a_receiver_that_refuses_the_client_is_a_failure(
    env: Env, secret: str | None, client_cert: str | None, reason: str
) -> None:
    receiver = SyslogReceiver(server_context(client_ca=CLIENT_CA))
    await receiver.start()
    try:
        config: dict[str, Any] = {}
        if client_cert == "stranger":
            stranger = trustme.CA().issue_cert("stranger.test")
            secret = stranger.private_key_pem.bytes().decode()
            config["client_certificate_pem"] = stranger.cert_chain_pems[0].bytes().decode()
        elif client_cert:
            config["client_certificate_pem"] = client_cert
        created = await env.create(receiver.port, secret=secret, **config)
        await env.append(numbered(3))
        assert await until_backoff(env, created["id"], 1) == pytest.approx(30)
        d = await env.delivery(created["id"])
        assert d["last_error"] == reason and d["sent_lines"] == 0 and d["in_flight_lines"] == 3
        if secret:
            assert secret.splitlines()[1][:20] not in d["last_error"]
        assert receiver.messages == []
    finally:
        await receiver.aclose()


async def test_the_test_endpoint_sends_one_line(env: Env, receiver: SyslogReceiver) -> None:
    created = await env.create(receiver.port)
    status, body = await env.call("POST", f"/v1/log-destinations/{created['id']}/test")
    assert (status, body) == (200, {"ok": True})
    await receiver.wait_for(1)
    [message] = receiver.messages
    parsed = parse_syslog(message)
    assert "test line" in parsed.msg and parsed.msgid == "other" and parsed.pri == 134
    await receiver.aclose()
    status, body = await env.call("POST", f"/v1/log-destinations/{created['id']}/test")
    assert (status, body) == (200, {"ok": False, "error": "cannot connect: connection refused"})


@pytest.mark.parametrize(
    ("config", "field", "text"),
    [
        ({"host": "10.0.0.5"}, "config.host", "private"),
        ({"host": "nowhere.test"}, "config.host", "does not resolve"),
        ({"host": "syslog.test", "port": 70000}, "config.port", "less than"),
        (
            {"host": "syslog.test", "tls": False, "ca_certificate_pem": SERVER_CA.cert_pem.bytes().decode()},
            "config",
            "tls: true",
        ),
    ],
)
async def test_the_api_checks_the_config(env: Env, config: dict[str, Any], field: str, text: str) -> None:
    status, body = await env.call("POST", "/v1/log-destinations", {"type": "syslog", "name": "s", "config": config})
    assert status == 400, body
    assert body["error"]["field"] == field and text in body["error"]["message"]
