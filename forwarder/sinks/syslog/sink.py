"""Sending frames over a kept-open TLS (or TCP) connection, and judging how it went."""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import struct
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import ClassVar

from forwarder.sinks._http import error_outcome, tls_outcome
from forwarder.sinks.base import (
    DELIVERED,
    Address,
    AddressRefused,
    BatchLimits,
    OpenConnection,
    Outcome,
    OutLine,
    Request,
    Response,
    Sink,
    SinkEnv,
)
from forwarder.sinks.registry import SinkType, register
from forwarder.sinks.syslog.config import BATCH_BYTES, HANDSHAKE_GRACE, MAX_LINES, TIMEOUT_SECONDS, SyslogConfig
from forwarder.sinks.syslog.message import frame, syslog_message

# --- send -----------------------------------------------------------------------------------------


class SetupError(Exception):
    """The destination's TLS settings cannot be used (its key is missing or does not fit); safe to show."""


class HandshakeRefused(ConnectionError):
    """The receiver ended the connection right after the TLS handshake, before any batch; safe to show."""


def _no_password() -> bytes:
    # Without a callback OpenSSL would prompt on the daemon's terminal for an encrypted key.
    raise SetupError("the private key in `secret` is encrypted; give it unencrypted (PEM)")


@contextlib.contextmanager
def _pem_path(pem: str) -> Iterator[str]:
    """A path holding `pem` while the block runs: ssl reads certificates and keys only from files.

    On Linux the file lives in memory (memfd), so the private key never touches a disk; elsewhere it is
    written to a private temporary directory and removed at once.
    """
    data = pem.encode()
    if hasattr(os, "memfd_create") and Path("/proc/self/fd").is_dir():
        fd = os.memfd_create("forwarder-pem", os.MFD_CLOEXEC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory() as directory:  # mode 0700
        path = Path(directory) / "pem"
        path.touch(mode=0o600)
        path.write_bytes(data)
        yield str(path)


def tls_context(config: SyslogConfig, private_key_pem: str | None) -> ssl.SSLContext:
    """The client TLS context: system CAs plus the configured one, verifying the host name; SetupError if unusable."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    # RFC 9662 (updating RFC 5425): TLS 1.2 or later.
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if config.ca_certificate_pem:
        try:
            context.load_verify_locations(cadata=config.ca_certificate_pem)
        except ssl.SSLError:
            raise SetupError("ca_certificate_pem cannot be used as a CA certificate") from None
    if config.client_certificate_pem:
        if not private_key_pem:
            raise SetupError("client_certificate_pem needs its private key (PEM) in the destination's `secret`")
        with _pem_path(config.client_certificate_pem) as cert_path, _pem_path(private_key_pem) as key_path:
            try:
                context.load_cert_chain(cert_path, key_path, password=_no_password)
            except ssl.SSLError:
                # OpenSSL's own text is left out: it says "PEM lib" or "key values mismatch" at best.
                raise SetupError(
                    "the private key in `secret` is not a PEM private key for client_certificate_pem"
                ) from None
    elif private_key_pem:
        raise SetupError("a private key was given in `secret` but no client_certificate_pem")
    return context


def _usable(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    # A receiver closing an idle connection (rsyslog on restart, a load balancer's idle timeout)
    # shows here once the event loop has seen its FIN; writing a batch onto that connection would
    # "succeed" into a dead socket and lose it.
    return not (writer.is_closing() or reader.at_eof() or reader.exception() is not None)


def _unacknowledged(writer: asyncio.StreamWriter) -> int | None:
    """Bytes the receiver's TCP has not acknowledged yet (Linux SIOCOUTQ), or None where it cannot be known."""
    sock = writer.get_extra_info("socket")
    if sock is None or not sys.platform.startswith("linux"):
        return None
    import fcntl  # here: Unix only
    import termios

    try:
        # SIOCOUTQ (= TIOCOUTQ) on a TCP socket: write_seq - snd_una, the bytes sent or queued but not acked.
        data = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
    except (OSError, ValueError):
        return None
    return int(struct.unpack("i", data)[0])


async def _acknowledged(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Wait until the receiver's TCP has acknowledged every byte written; raises if the connection ends first.

    Syslog has no answer (RFC 5425, RFC 6587), so this is as far as "delivered" can go: the batch
    reached the receiver's host. Without it a receiver that went away (power loss, a cut link: no
    RST) would take batches into the kernel's send buffer, several MB, and lose them unnoticed.
    """
    delay = 0.001
    while True:
        queued = _unacknowledged(writer)
        if queued == 0:
            return
        if not _usable(reader, writer):  # checked before `None`: a closed socket has no queue to ask
            raise reader.exception() or ConnectionResetError("the receiver closed the connection during the batch")
        if queued is None:  # not knowable on this platform: drained is as far as it goes
            return
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.05)


# --- classify -------------------------------------------------------------------------------------


def classify_error(error: BaseException) -> Outcome:
    """A batch that was not written and drained: always retried, with a reason that names no secret."""
    if isinstance(error, TimeoutError):  # before OSError, of which it is a subclass
        return Outcome("retry", f"timed out: {error}", "timeout")
    if isinstance(error, AddressRefused):
        return error_outcome(error)
    if isinstance(error, SetupError):
        return Outcome("retry", str(error), "config")
    if isinstance(error, HandshakeRefused):
        return Outcome("retry", str(error), "tls")
    if isinstance(error, ssl.SSLError):
        return tls_outcome(error)
    if isinstance(error, ConnectionRefusedError):
        return Outcome("retry", "cannot connect: connection refused", "connect")
    if isinstance(error, ConnectionError | asyncio.IncompleteReadError):
        return Outcome("retry", f"connection lost: {type(error).__name__}", "connect")
    if isinstance(error, OSError):
        return Outcome("retry", f"cannot connect: {error.strerror or type(error).__name__}", "connect")
    return Outcome("retry", f"failed: {type(error).__name__}", "error")


class SyslogSink:
    """Delivers batches to a syslog receiver on one long-lived connection."""

    kind: ClassVar[str] = "syslog"
    limits = BatchLimits(MAX_LINES, BATCH_BYTES)
    timeout_seconds = TIMEOUT_SECONDS

    def __init__(self, config: SyslogConfig, secret: str | None, open_connection: OpenConnection) -> None:
        self.config = config
        self._private_key = secret
        self._open = open_connection
        self._context: ssl.SSLContext | None = None
        self._stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._lock = asyncio.Lock()

    def encode(self, lines: Sequence[OutLine], delivery_id: str, now: float) -> list[Request]:
        if not lines:
            return []
        c = self.config
        body = b"".join(frame(syslog_message(line, c.max_message_bytes, c.message_format)) for line in lines)
        return [Request(tuple(line.id for line in lines), body, "WRITE", f"{c.host}:{c.port}")]

    async def send(self, request: Request) -> Response:
        async with self._lock:
            reader, writer = await self._connection()
            try:
                writer.write(request.body)
                await writer.drain()
                await _acknowledged(reader, writer)
            except BaseException:
                # Written in part, or not at all: the connection's state is unknown, so the next
                # attempt starts on a new one and sends the batch whole.
                self._abort()
                raise
        return Response(200, {})  # syslog has no answer: acknowledged by the receiver's TCP is as far as it goes

    def classify(self, request: Request, response: Response | None, error: BaseException | None) -> Outcome:
        if response is None:
            return classify_error(error or RuntimeError("no response"))
        return DELIVERED

    async def aclose(self) -> None:
        stream, self._stream = self._stream, None
        if stream is None:
            return
        writer = stream[1]
        writer.close()  # TLS: sends close_notify, so the receiver sees a clean end
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                await writer.wait_closed()
        writer.transport.abort()

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._stream is not None and _usable(*self._stream):
            return self._stream
        self._abort()
        context = self._tls() if self.config.tls else None
        loop = asyncio.get_running_loop()
        started = loop.time()
        reader, writer = await self._open(self.config.host, self.config.port, context)
        self._stream = (reader, writer)
        if context is not None:
            # In TLS 1.3 the client's handshake ends before the receiver has checked the client's
            # certificate (RFC 8446 section 4.4.2): a receiver that refuses it, or wants one we do
            # not have, says so (an alert, or rsyslog simply closing) after the first batch was
            # written and "delivered". Waiting as long as the handshake took (a round trip at
            # least), within HANDSHAKE_GRACE, lets that arrive first; once per connection.
            shortest, longest = HANDSHAKE_GRACE
            await asyncio.sleep(min(max(loop.time() - started, shortest), longest))
            if not _usable(reader, writer):
                error = reader.exception()
                self._abort()
                if isinstance(error, ssl.SSLError):
                    raise error  # the receiver's alert names the problem
                raise HandshakeRefused(
                    "the receiver ended the connection right after the TLS handshake: "
                    "it may want a client certificate, or not accept this one"
                )
        # drain() then returns only when the transport has handed every byte on (to the kernel, or
        # under TLS to the socket transport), not at the default 64 KiB high-water mark. The TLS
        # transport pauses at size >= high (high=0 would pause an empty buffer for good), the TCP
        # transport at size > high: each gets the mark that means "anything left".
        writer.transport.set_write_buffer_limits(high=1 if context is not None else 0, low=0)
        return self._stream

    def _tls(self) -> ssl.SSLContext:
        if self._context is None:
            self._context = tls_context(self.config, self._private_key)
        return self._context

    def _abort(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream[1].transport.abort()

    def __repr__(self) -> str:
        c = self.config
        key = "<hidden>" if self._private_key else None
        return f"SyslogSink(host={c.host!r}, port={c.port}, tls={c.tls}, private_key={key})"


def _build(config: SyslogConfig, secret: str | None, env: SinkEnv) -> Sink:
    # The secret is the client certificate's private key, needed only with client_certificate_pem.
    return SyslogSink(config, secret, env.open_connection)


register(
    SinkType(
        kind=SyslogSink.kind,
        config=SyslogConfig,
        build=_build,
        address=lambda c: Address("host", host=c.host, port=c.port),
        secret_required=False,
        secret_generated=False,
    )
)
