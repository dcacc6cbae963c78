"""Syslog: RFC 5424 messages over TLS (RFC 5425), or over plain TCP to a local relay (RFC 6587).

Each line is one SYSLOG-MSG (RFC 5424 section 6), framed by octet counting (RFC 5425 section 4.3):

    MSG-LEN SP <PRI>1 TIMESTAMP HOSTNAME postgresql PROCID MSGID
               [service@32473 database="..." kind="..." sqlstate="..."] MSG

facility local0, severity from PostgreSQL's; MSGID is the line's kind; MSG the line as text (or its
SPEC 2.1 JSON). A batch is one write on a connection kept open between batches; syslog has no
answer, so it counts as delivered once written, drained and acknowledged by the receiver's TCP. A
broken connection fails the batch, which is then sent again whole on a new connection: the receiver
may get some lines twice. Shapes, cuts and the reasons for each choice: docs/destinations.md ("syslog").
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import ssl
import struct
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Final, Literal

import orjson
from cryptography import x509
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator, model_validator

from forwarder.sinks._encode import cut_text, cut_utf8, level, line_text
from forwarder.sinks._http import error_outcome
from forwarder.sinks.base import (
    DELIVERED,
    AddressRefused,
    BatchLimits,
    OpenConnection,
    Outcome,
    OutLine,
    Request,
    Response,
)

DEFAULT_PORT: Final = 6514  # RFC 5425 section 4.1: the port assigned to syslog over TLS
# RFC 5425 section 4.3.1: receivers MUST support messages of 2048 octets and SHOULD support 8192.
MIN_MESSAGE_BYTES: Final = 2048
DEFAULT_MESSAGE_BYTES: Final = 8192
MAX_MESSAGE_BYTES: Final = 1024 * 1024  # for relays configured for large messages (rsyslog maxMessageSize)
MAX_LINES: Final = 500
BATCH_BYTES: Final = 1024 * 1024  # of stored documents; one batch is one write
TIMEOUT_SECONDS: Final = 15.0  # connect, TLS handshake, write and drain of one batch
MAX_PEM_CHARS: Final = 100_000
# How long a new TLS connection waits before its first write (see SyslogSink._connection).
HANDSHAKE_GRACE: Final = (0.1, 1.0)

# --- config ---------------------------------------------------------------------------------------


def _certificates(value: str | None) -> str | None:
    if value is None:
        return None
    if "PRIVATE KEY" in value:
        # The config is shown by the API; a key pasted here would be shown with it.
        raise ValueError("holds a private key: give the private key in the destination's `secret`, not in `config`")
    try:
        x509.load_pem_x509_certificates(value.encode())
    except ValueError:
        raise ValueError("must be one or more PEM certificates (-----BEGIN CERTIFICATE-----)") from None
    return value


class SyslogConfig(BaseModel):
    """`config` of a syslog destination."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    host: str = Field(
        min_length=1,
        max_length=253,
        description="The receiver's host name (the TLS certificate must be valid for it) or IP address.",
    )
    port: StrictInt = Field(
        DEFAULT_PORT, ge=1, le=65535, description="The receiver's TCP port; 6514 is syslog over TLS (RFC 5425)."
    )
    tls: StrictBool = Field(
        True,
        description="Speak TLS (RFC 5425). false sends in clear text over TCP with the same framing (RFC 6587): "
        "only for a relay on the operator's own network.",
    )
    ca_certificate_pem: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_PEM_CHARS,
        description="Extra CA certificate(s), PEM, trusted besides the system's for the receiver's certificate.",
    )
    client_certificate_pem: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_PEM_CHARS,
        description="Client certificate (and chain), PEM, for receivers that authenticate senders; its private "
        "key (PEM, unencrypted) is the destination's `secret`.",
    )
    max_message_bytes: StrictInt = Field(
        DEFAULT_MESSAGE_BYTES,
        ge=MIN_MESSAGE_BYTES,
        le=MAX_MESSAGE_BYTES,
        description="Largest SYSLOG-MSG in bytes (frame length not counted); longer messages are cut. "
        "8192 is what RFC 5425 says receivers should accept; raise it only with the receiver's limit.",
    )
    message_format: Literal["text", "json"] = Field(
        "text",
        description="MSG is the line as text (like PostgreSQL's log) or its SPEC 2.1 JSON document (every field).",
    )

    @field_validator("ca_certificate_pem", "client_certificate_pem")
    @classmethod
    def _pem_certificates(cls, value: str | None) -> str | None:
        return _certificates(value)

    @model_validator(mode="after")
    def _tls_settings_need_tls(self) -> SyslogConfig:
        if not self.tls and (self.ca_certificate_pem or self.client_certificate_pem):
            raise ValueError("ca_certificate_pem and client_certificate_pem need tls: true")
        return self


# --- encode ---------------------------------------------------------------------------------------

FACILITY_LOCAL0: Final = 16  # RFC 5424 section 6.2.1, table 1
# RFC 5424 table 2 codes for the shared level names (_encode.LEVELS), so a line has the same level
# in every destination. PostgreSQL's own syslog output (elog.c, send_message_to_server_log) maps
# one step lower: WARNING -> notice, ERROR -> warning, FATAL -> err, PANIC -> crit; it treats an
# ERROR as a routine query failure. Here ERROR is err(3) and FATAL and PANIC are crit(2), so
# "err and worse" filters on receivers catch failed statements and crashes.
SEVERITY_CODES: Final[Mapping[str, int]] = {
    "critical": 2,
    "error": 3,
    "warning": 4,
    "notice": 5,
    "info": 6,
    "debug": 7,
}
APP_NAME: Final = "postgresql"
SD_ID: Final = "service@32473"  # SPEC 9: private enterprise number 32473 (RFC 5424 section 6.3.2)
LINE_SD_ID: Final = "line@32473"
# SPEC 2.1 fields in neither the header (time, host, pid, kind), SPEC's element (database_name,
# kind, sqlstate) nor the text MSG (severity, message, detail, hint, context, statement).
LINE_SD_KEYS: Final = ("id", "database_id", "user", "database", "application", "client", "duration_ms", "redacted")
NILVALUE: Final = "-"
# RFC 5424 section 6: HOSTNAME 1*255, APP-NAME 1*48, PROCID 1*128, MSGID 1*32 PRINTUSASCII.
HOSTNAME_CHARS: Final = 255
PROCID_CHARS: Final = 128
MSGID_CHARS: Final = 32
# Not an RFC limit: keeps the header small enough that MSG always has room within 2048 bytes.
SD_VALUE_BYTES: Final = 255
TEXT_KEYS: Final = ("message", "detail", "hint", "context", "statement")
_MARKER: Final = "..."

_NOT_PRINTUSASCII = re.compile(r"[^\x21-\x7e]")
# RFC 5424 section 6.3.3: '"', '\' and ']' MUST be escaped inside PARAM-VALUE.
_SD_ESCAPE = str.maketrans({'"': '\\"', "\\": "\\\\", "]": "\\]"})
# RFC 5424 section 6.2.3 (RFC 3339 with the restrictions listed there): upper-case T and Z, at most
# six digits of fraction.
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})")


def priority(severity: str | None) -> int:
    """PRI: facility local0 * 8 + the RFC 5424 severity of a PostgreSQL severity (section 6.2.1)."""
    return FACILITY_LOCAL0 * 8 + SEVERITY_CODES[level(severity)]


def timestamp(time_text: Any) -> str:
    """The line's time as stored (RFC 3339 UTC, PostgreSQL's milliseconds), or NILVALUE if it is not one."""
    if isinstance(time_text, str) and _TIMESTAMP.fullmatch(time_text):
        return time_text
    return NILVALUE


def header_field(value: Any, max_chars: int) -> str:
    """A header field in PRINTUSASCII (33..126; anything else becomes '_'), cut, or NILVALUE when empty."""
    text = "" if value is None else str(value)
    return _NOT_PRINTUSASCII.sub("_", text)[:max_chars] or NILVALUE


def sd_value(value: Any) -> str:
    """A PARAM-VALUE: UTF-8, cut to SD_VALUE_BYTES (never inside a character), then escaped."""
    return cut_text("" if value is None else str(value), SD_VALUE_BYTES).translate(_SD_ESCAPE)


def structured_data(fields: Mapping[str, Any]) -> str:
    """`[service@32473 database=".." kind=".." sqlstate=".."][line@32473 id=".." ...]`.

    The first element is SPEC 6.2's, exactly; sqlstate is left out when the line has none. The
    second carries the SPEC 2.1 fields that neither the header nor the text MSG holds (SPEC 6.2:
    every destination receives every field), above all `id`, by which receivers drop duplicates;
    null values are left out. Booleans and numbers are written as in JSON.
    """
    params = [f'database="{sd_value(fields.get("database_name"))}"', f'kind="{sd_value(fields.get("kind"))}"']
    if fields.get("sqlstate"):
        params.append(f'sqlstate="{sd_value(fields["sqlstate"])}"')
    more = [f'{key}="{sd_value(_sd_text(fields[key]))}"' for key in LINE_SD_KEYS if fields.get(key) is not None]
    line_element = f"[{LINE_SD_ID} {' '.join(more)}]" if more else ""
    return f"[{SD_ID} {' '.join(params)}]{line_element}"


def _sd_text(value: Any) -> str:
    return "true" if value is True else "false" if value is False else str(value)


def header(fields: Mapping[str, Any]) -> str:
    """HEADER SP STRUCTURED-DATA of RFC 5424 section 6 for a line's SPEC 2.1 fields."""
    return " ".join(
        (
            f"<{priority(fields.get('severity'))}>1",
            timestamp(fields.get("time")),
            header_field(fields.get("host"), HOSTNAME_CHARS),
            APP_NAME,
            header_field(fields.get("pid"), PROCID_CHARS),
            header_field(fields.get("kind"), MSGID_CHARS),
            structured_data(fields),
        )
    )


def water_level(sizes: list[int], need: int) -> int:
    """The largest cap that frees `need` bytes when every size above it is cut down to it."""
    ordered = sorted(sizes, reverse=True)
    total = 0
    for j, size in enumerate(ordered, 1):
        total += size
        cap = (total - need) // j
        if cap >= (ordered[j] if j < len(ordered) else 0):
            return max(0, cap)
    return 0


def fit_json(fields: Mapping[str, Any], max_bytes: int) -> bytes:
    """The line's JSON in at most `max_bytes`; it stays JSON: its long texts are cut, ending in "...".

    The longest texts give way first, down to a common length, so a huge statement does not take
    all of the message's room (nor the other way round).
    """
    data = orjson.dumps(fields)
    cut = dict(fields)
    for _ in range(8):  # the first round nearly always fits; escapes can make it a little short
        if len(data) <= max_bytes:
            return data
        texts = {k: str(cut.get(k) or "") for k in TEXT_KEYS}
        room = {k: len(orjson.dumps(t)) - 2 for k, t in texts.items()}  # escapes included
        cap = water_level(list(room.values()), len(data) - max_bytes)
        for key, text in texts.items():
            if room[key] > cap and len(text.encode()) > len(_MARKER):
                size = len(text.encode())
                keep = max(0, cap - len(_MARKER)) * size // room[key]  # escapes scale with the text
                cut[key] = cut_text(text, max(len(_MARKER), min(size - 1, keep)))
        data = orjson.dumps(cut)
    # Not reached for a stored line (its other fields are small): better cut JSON than none.
    return data if len(data) <= max_bytes else cut_utf8(data, max_bytes)


def syslog_message(line: OutLine, max_bytes: int, message_format: str = "text") -> bytes:
    """One SYSLOG-MSG of at most `max_bytes`: the header whole, MSG cut to fit (never inside a character).

    MSG is MSG-ANY without a BOM (RFC 5424 section 6.4 allows it): rsyslog keeps a BOM as the first
    character of the message text, where it would break searches; receivers read MSG as UTF-8 anyway.
    """
    fields = line.fields()
    head = header(fields).encode()
    budget = max_bytes - len(head) - 1  # SP before MSG
    if message_format == "json":
        msg = line.doc if len(line.doc) <= budget else fit_json(fields, budget)
    else:
        msg = cut_text(line_text(fields), budget, _MARKER).encode()
    # RFC 5424 section 6: SYSLOG-MSG = HEADER SP STRUCTURED-DATA [SP MSG]
    return head + b" " + msg if msg else head


def frame(message: bytes) -> bytes:
    """Octet-counting framing, RFC 5425 section 4.3: MSG-LEN SP SYSLOG-MSG (no trailer)."""
    return b"%d %s" % (len(message), message)


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
    if isinstance(error, ssl.SSLCertVerificationError):
        detail = (error.verify_message or "not trusted").rstrip(".")
        return Outcome("retry", f"TLS certificate refused: {detail}", "tls")
    if isinstance(error, ssl.SSLError):
        detail = (error.reason or type(error).__name__).replace("_", " ").lower()
        return Outcome("retry", f"TLS failed: {detail}", "tls")
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
