"""The syslog kind: RFC 5424 messages, RFC 5425 octet counting, TLS, one kept connection.

Tables for the pure parts (PRI, escaping, sanitising, cuts, framing, errors), then deliveries
through a real daemon (fake clock) to an in-test TLS receiver that parses every frame strictly.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trustme
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from pydantic import ValidationError

from forwarder.config import config_from_dict
from forwarder.delivery.netguard import Refused, StaticResolver
from forwarder.model import LogLine
from forwarder.sinks import SINK_TYPES, sink_address
from forwarder.sinks.base import DELIVERED, Address, OutLine, Request, Response
from forwarder.sinks.syslog import (
    HandshakeRefused,
    SetupError,
    SyslogConfig,
    SyslogSink,
    fit_json,
    frame,
    header,
    header_field,
    priority,
    sd_value,
    structured_data,
    syslog_message,
    timestamp,
    tls_context,
    water_level,
)
from forwarder.store.lines import Identity
from tests import sinkhelpers
from tests.daemonenv import DaemonEnv, main_database, operator_config
from tests.linegen import mixed_lines
from tests.receivers_base import wait_until

T0_US = 1_700_000_000_123_000
IDENTITY = Identity(code=1, database_id="main", database_name='shop "eu" \\ [x] ü', host="db-1.example")


def out_line(line_id: int = 7, identity: Identity = IDENTITY, **overrides: Any) -> OutLine:
    values: dict[str, Any] = {
        "time_us": T0_US,
        "severity": "ERROR",
        "kind": "error",
        "message": 'relation "orders" does not exist',
        "sqlstate": "42P01",
        "pid": 4242,
        **overrides,
    }
    return sinkhelpers.out_line(LogLine(**values), line_id, identity)


# --- a strict RFC 5424 / RFC 5425 reader (used by the receiver below) ------------------------------


class WireFormatError(AssertionError):
    """The sender broke RFC 5424 or RFC 5425."""


@dataclass(frozen=True)
class Parsed:
    """A SYSLOG-MSG split into its RFC 5424 parts (SD values unescaped)."""

    pri: int
    timestamp: str
    hostname: str
    app_name: str
    procid: str
    msgid: str
    sd_raw: str
    sd: dict[str, dict[str, str]]
    msg: str


_HEADER = re.compile(r"<(0|[1-9]\d{0,2})>1 ")
_PRINTUSASCII = re.compile(r"[\x21-\x7e]+")
_TIMESTAMP = re.compile(r"-|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?(Z|[+-]\d\d:\d\d)")  # RFC 5424 section 6.2.3
_SD_NAME = r'(?:(?![= \]"])[\x21-\x7e]){1,32}'  # RFC 5424 section 6.3.2: PRINTUSASCII but = SP ] "
_SD_ID = re.compile(_SD_NAME)
_SD_PARAM = re.compile(f'({_SD_NAME})="')


def parse_syslog(data: bytes) -> Parsed:
    """RFC 5424 section 6 read strictly; raises WireFormatError on any deviation."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WireFormatError(f"not UTF-8: {exc}") from None
    m = _HEADER.match(text)
    if not m or int(m.group(1)) > 191:
        raise WireFormatError(f"bad PRI/VERSION: {text[:20]!r}")
    pri = int(m.group(1))
    pos = m.end()
    parts = []
    for limit in (None, 255, 48, 128, 32):  # TIMESTAMP HOSTNAME APP-NAME PROCID MSGID
        end = text.find(" ", pos)
        if end < 0:
            raise WireFormatError("header ends early")
        value = text[pos:end]
        if not _PRINTUSASCII.fullmatch(value) or (limit and len(value) > limit):
            raise WireFormatError(f"bad header field {value!r}")
        parts.append(value)
        pos = end + 1
    sd_start = pos
    sd: dict[str, dict[str, str]] = {}
    if text.startswith("-", pos):
        pos += 1
    else:
        while text.startswith("[", pos):
            pos += 1
            m = _SD_ID.match(text, pos)
            if not m:
                raise WireFormatError("bad SD-ID")
            params = sd.setdefault(m.group(), {})
            pos = m.end()
            while text.startswith(" ", pos):
                m = _SD_PARAM.match(text, pos + 1)
                if not m:
                    raise WireFormatError(f"bad PARAM-NAME at {text[pos : pos + 20]!r}")
                pos = m.end()
                value = []
                while True:
                    if pos >= len(text):
                        raise WireFormatError("PARAM-VALUE not closed")
                    ch = text[pos]
                    if ch == "\\" and pos + 1 < len(text) and text[pos + 1] in '"\\]':
                        value.append(text[pos + 1])
                        pos += 2
                    elif ch == '"':
                        pos += 1
                        break
                    elif ch == "]":
                        raise WireFormatError("unescaped ] in PARAM-VALUE")
                    else:
                        value.append(ch)
                        pos += 1
                params[m.group(1)] = "".join(value)
            if not text.startswith("]", pos):
                raise WireFormatError(f"SD-ELEMENT not closed at {text[pos : pos + 20]!r}")
            pos += 1
        if not sd:
            raise WireFormatError("no STRUCTURED-DATA")
    sd_raw = text[sd_start:pos]
    if pos < len(text):
        if text[pos] != " ":
            raise WireFormatError("no SP before MSG")
        pos += 1
    msg = text[pos:]
    if msg.startswith("\ufeff"):
        raise WireFormatError("MSG starts with a BOM (documented: it does not)")
    ts, hostname, app_name, procid, msgid = parts
    if not _TIMESTAMP.fullmatch(ts):
        raise WireFormatError(f"bad TIMESTAMP {ts!r}")
    return Parsed(pri, ts, hostname, app_name, procid, msgid, sd_raw, sd, msg)


async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """One octet-counted frame (RFC 5425 section 4.3); None at a clean end between frames."""
    digits = b""
    while True:
        ch = await reader.read(1)
        if not ch:
            if digits:
                raise WireFormatError("connection ended inside MSG-LEN")
            return None
        if ch == b" ":
            break
        if not ch.isdigit() or (not digits and ch == b"0") or len(digits) >= 7:
            raise WireFormatError(f"bad MSG-LEN {digits + ch!r}")
        digits += ch
    if not digits:
        raise WireFormatError("empty MSG-LEN")
    return await reader.readexactly(int(digits))


@pytest.mark.parametrize(
    "data",
    [
        b"<192>1 - - - - - -",  # PRI above 191
        b"<013>1 - - - - - -",  # leading zero
        b"<13>2 - - - - - -",  # VERSION
        b"<13>1 2023-11-14 22:13:20Z - - - - -",
        b"<13>1 - h\xc3\xbc - - - -",  # HOSTNAME not PRINTUSASCII
        b"<13>1 - - - - " + b"m" * 33 + b" -",  # MSGID too long
        b'<13>1 - - - - - [id p="a]b"]',  # unescaped ]
        b'<13>1 - - - - - [id p="ab]',  # value not closed
        b"<13>1 - - - - - -msg",  # no SP before MSG
        b"<13>1 - - - - - - \xef\xbb\xbfmsg",  # BOM (we document none)
        b"<13>1 - - - - - - \xff",  # not UTF-8
    ],
)
def test_the_test_reader_is_strict(data: bytes) -> None:
    with pytest.raises(WireFormatError):
        parse_syslog(data)


# --- the pure parts ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("severity", "pri"),
    [
        ("PANIC", 130),  # local0 (16 * 8) + crit (2)
        ("FATAL", 130),
        ("ERROR", 131),  # err
        ("WARNING", 132),
        ("NOTICE", 133),
        ("LOG", 134),  # info
        ("INFO", 134),
        ("STATEMENT", 134),
        ("DEBUG", 135),
        ("DEBUG5", 135),
        ("error", 131),
        ("SOMETHING", 134),  # unknown: info
        (None, 134),
    ],
)
def test_pri_is_local0_and_the_shared_level(severity: str | None, pri: int) -> None:
    assert priority(severity) == pri


@pytest.mark.parametrize(
    ("text", "out"),
    [
        ("2023-11-14T22:13:20.123Z", "2023-11-14T22:13:20.123Z"),
        ("2023-11-14T22:13:20.123456Z", "2023-11-14T22:13:20.123456Z"),
        ("2023-11-14T22:13:20Z", "2023-11-14T22:13:20Z"),
        ("2023-11-14T22:13:20.123+01:00", "2023-11-14T22:13:20.123+01:00"),
        ("2023-11-14T22:13:20.1234567Z", "-"),  # RFC 5424 6.2.3: at most 6 digits
        ("2023-11-14 22:13:20Z", "-"),
        ("2023-11-14t22:13:20z", "-"),  # upper case only
        ("", "-"),
        (None, "-"),
        (1700000000, "-"),
    ],
)
def test_timestamp_is_the_stored_time_or_nil(text: Any, out: str) -> None:
    assert timestamp(text) == out


@pytest.mark.parametrize(
    ("value", "limit", "out"),
    [
        ("db-1.example", 255, "db-1.example"),
        ("db 1", 255, "db_1"),
        ("naïve", 255, "na_ve"),
        ("tab\there\nnl", 255, "tab_here_nl"),
        ("del\x7f", 255, "del_"),
        ("", 255, "-"),
        (None, 128, "-"),
        (4242, 128, "4242"),
        ("h" * 300, 255, "h" * 255),
        ("too_many_connections" * 2, 32, ("too_many_connections" * 2)[:32]),
    ],
)
def test_header_fields_are_printable_ascii_cut_or_nil(value: Any, limit: int, out: str) -> None:
    assert header_field(value, limit) == out


@pytest.mark.parametrize(
    ("value", "out"),
    [
        ("shop", "shop"),
        ('say "hi"', 'say \\"hi\\"'),
        ("C:\\data\\", "C:\\\\data\\\\"),
        ("a]b", "a\\]b"),
        ("[x]", "[x\\]"),  # only the closing bracket is special
        ("naïve 日本 🐘", "naïve 日本 🐘"),  # UTF-8 stays as it is
        ("", ""),
        (None, ""),
        ("ü" * 200, "ü" * 126 + "..."),  # 255 bytes at most, never inside a character
    ],
)
def test_sd_values_are_escaped_and_cut(value: Any, out: str) -> None:
    assert sd_value(value) == out
    assert len(sd_value(value).replace("\\", "").encode()) <= 255


@pytest.mark.parametrize(
    ("fields", "out"),
    [
        (
            {"database_name": "shop", "kind": "error", "sqlstate": "23505"},
            '[service@32473 database="shop" kind="error" sqlstate="23505"]',
        ),
        (
            {"database_name": "shop", "kind": "checkpoint", "sqlstate": None},
            '[service@32473 database="shop" kind="checkpoint"]',
        ),
        ({"database_name": "", "kind": "other"}, '[service@32473 database="" kind="other"]'),
        (
            {
                "database_name": "shop",
                "kind": "slow_query",
                "id": "12",
                "database_id": "main",
                "user": 'o"k',
                "database": "shop",
                "application": "psql [x]",
                "client": "10.0.0.7:5432",
                "duration_ms": 1500.25,
                "redacted": True,
            },
            '[service@32473 database="shop" kind="slow_query"][line@32473 id="12" database_id="main" user="o\\"k" '
            'database="shop" application="psql [x\\]" client="10.0.0.7:5432" duration_ms="1500.25" redacted="true"]',
        ),
        (
            {"database_name": 'a "b" \\ [c]', "kind": "error", "sqlstate": "XX000"},
            '[service@32473 database="a \\"b\\" \\\\ [c\\]" kind="error" sqlstate="XX000"]',
        ),
    ],
)
def test_structured_data(fields: dict[str, Any], out: str) -> None:
    assert structured_data(fields) == out


def test_a_whole_message_exactly() -> None:
    line = out_line(detail="naïve café", hint='try "again"')
    assert (
        syslog_message(line, 8192)
        == (
            "<131>1 2023-11-14T22:13:20.123Z db-1.example postgresql 4242 error "
            '[service@32473 database="shop \\"eu\\" \\\\ [x\\] ü" kind="error" sqlstate="42P01"]'
            '[line@32473 id="7" database_id="main" redacted="false"] '
            'ERROR:  relation "orders" does not exist\nDETAIL:  naïve café\nHINT:  try "again"'
        ).encode()
    )


def test_missing_fields_are_nil() -> None:
    ident = Identity(code=1, database_id="main", database_name="shop", host="")
    line = out_line(identity=ident, pid=None, sqlstate=None, severity="LOG", kind="checkpoint", message="done")
    assert syslog_message(line, 8192) == (
        b'<134>1 2023-11-14T22:13:20.123Z - postgresql - checkpoint [service@32473 database="shop" '
        b'kind="checkpoint"][line@32473 id="7" database_id="main" redacted="false"] LOG:  done'
    )


@pytest.mark.parametrize("max_bytes", [2048, 2049, 2050, 2051, 2052, 4096, 8192])
@pytest.mark.parametrize("unit", ["x", "ü", "日", "🐘"])
def test_long_messages_are_cut_to_fit_never_inside_a_character(max_bytes: int, unit: str) -> None:
    line = out_line(message=unit * 10_000)
    data = syslog_message(line, max_bytes)
    assert max_bytes - 4 < len(data) <= max_bytes  # filled up to the last whole character
    parsed = parse_syslog(data)  # strict UTF-8
    assert parsed.msg.startswith("ERROR:  " + unit) and parsed.msg.endswith(unit + "...")


def test_a_message_that_fits_is_not_cut() -> None:
    line = out_line(message="m" * 1000)
    head = header(line.fields()).encode()
    exact = len(head) + 1 + len("ERROR:  ") + 1000
    assert syslog_message(line, exact).endswith(b"m" * 1000)
    assert syslog_message(line, exact - 1).endswith(b"...")


def test_the_json_format_carries_every_field() -> None:
    line = out_line(user="app", application="psql [x]", duration_ms=12.5)
    data = syslog_message(line, 8192, "json")
    parsed = parse_syslog(data)
    assert json.loads(parsed.msg) == json.loads(line.doc)
    assert parsed.msg.encode() == line.doc  # as stored, not re-serialized


@pytest.mark.parametrize("max_bytes", [2048, 3000, 8192])
def test_a_long_json_message_is_cut_and_stays_json(max_bytes: int) -> None:
    line = out_line(message='"日本"\\' * 3000, statement="S" * 5000, detail="d" * 100)
    data = syslog_message(line, max_bytes, "json")
    assert max_bytes - 16 <= len(data) <= max_bytes  # cut no more than needed
    doc = json.loads(parse_syslog(data).msg)
    assert doc["id"] == "7" and doc["detail"] == "d" * 100
    assert doc["message"].startswith('"日本"\\') and doc["message"].endswith("...")
    assert doc["statement"].endswith("...")
    # Both long texts get about the same room (escapes counted); the short ones stay whole.
    room = [len(json.dumps(doc[k], ensure_ascii=False).encode()) for k in ("message", "statement")]
    assert abs(room[0] - room[1]) < 32


@pytest.mark.parametrize(
    ("sizes", "need", "cap"),
    [
        ([100, 50, 10], 30, 70),
        ([100, 50, 10], 60, 45),
        ([100, 100], 50, 75),
        ([100, 50, 10], 160, 0),
        ([100, 50, 10], 500, 0),
        ([0, 0], 10, 0),
    ],
)
def testwater_level(sizes: list[int], need: int, cap: int) -> None:
    assert water_level(sizes, need) == cap


def test_fit_json_cuts_the_longest_text_first() -> None:
    fields = {"id": "1", "message": "m" * 50, "statement": "s" * 500}
    data = fit_json(fields, 300)
    out = json.loads(data)
    assert out["message"] == "m" * 50 and out["statement"].endswith("...")
    assert 290 <= len(data) <= 300
    assert fit_json(fields, 1000) == json.dumps(fields, separators=(",", ":")).encode()


@pytest.mark.parametrize(
    ("message", "framed"),
    [
        (b"abc", b"3 abc"),
        ("ü".encode(), b"2 \xc3\xbc"),  # octets, not characters
        (b"a\nb", b"3 a\nb"),  # LF is data inside a frame
        (b"x" * 12345, b"12345 " + b"x" * 12345),
    ],
)
def test_frames_count_octets(message: bytes, framed: bytes) -> None:
    assert frame(message) == framed


def sink(config: dict[str, Any] | None = None, secret: str | None = None) -> SyslogSink:
    async def no_connection(*args: Any) -> Any:
        raise AssertionError("no I/O expected")

    return SyslogSink(SyslogConfig.model_validate({"host": "syslog.test", **(config or {})}), secret, no_connection)


async def test_encode_is_one_write_per_batch_with_every_line() -> None:
    lines = [out_line(i, message=m.message, severity=m.severity, pid=m.pid) for i, m in enumerate(mixed_lines(50), 1)]
    [request] = sink().encode(lines, "dlv_x", 0.0)
    assert request.line_ids == tuple(range(1, 51))
    reader = asyncio.StreamReader()
    reader.feed_data(request.body)
    reader.feed_eof()
    got = []
    while (f := await read_frame(reader)) is not None:
        got.append(f)
    assert got == [syslog_message(line, 8192) for line in lines]
    assert sink().encode([], "dlv_x", 0.0) == []


PEM_CA = trustme.CA()


@pytest.mark.parametrize(
    ("config", "field", "text"),
    [
        ({}, "host", "required"),
        ({"host": ""}, "host", "at least 1"),
        ({"host": "h", "port": 0}, "port", "greater than"),
        ({"host": "h", "port": "6514"}, "port", "integer"),
        ({"host": "h", "tls": "yes"}, "tls", "boolean"),
        ({"host": "h", "max_message_bytes": 1024}, "max_message_bytes", "2048"),
        ({"host": "h", "max_message_bytes": 2 * 1024 * 1024}, "max_message_bytes", "1048576"),
        ({"host": "h", "message_format": "xml"}, "message_format", "text"),
        ({"host": "h", "ca_certificate_pem": "not a certificate"}, "ca_certificate_pem", "PEM certificates"),
        (
            {"host": "h", "client_certificate_pem": PEM_CA.cert_pem.bytes().decode() + "-----BEGIN PRIVATE KEY-----"},
            "client_certificate_pem",
            "secret",
        ),
        ({"host": "h", "tls": False, "ca_certificate_pem": PEM_CA.cert_pem.bytes().decode()}, "", "tls: true"),
        ({"host": "h", "facility": "local1"}, "facility", "Extra"),
    ],
)
def test_config_is_checked(config: dict[str, Any], field: str, text: str) -> None:
    with pytest.raises(ValidationError) as info:
        SyslogConfig.model_validate(config)
    err = info.value.errors()[0]
    assert ".".join(str(p) for p in err["loc"]) == field
    assert text in err["msg"]


def test_config_defaults_and_registry() -> None:
    c = SyslogConfig.model_validate({"host": "syslog.test"})
    assert (c.port, c.tls, c.max_message_bytes, c.message_format) == (6514, True, 8192, "text")
    assert c.ca_certificate_pem is None and c.client_certificate_pem is None
    t = SINK_TYPES["syslog"]
    assert t.secret_required is False and t.secret_generated is False
    assert sink_address("syslog", c) == Address("host", host="syslog.test", port=6514)


class _VerifyError(ssl.SSLCertVerificationError):
    def __init__(self, message: str) -> None:
        super().__init__(1, message)
        self.verify_message = message


def _ssl_error(reason: str) -> ssl.SSLError:
    err = ssl.SSLError(1, f"[SSL: {reason}] alert")
    err.reason = reason
    return err


@pytest.mark.parametrize(
    ("error", "reason", "failure"),
    [
        (TimeoutError("no answer within 15 s"), "timed out: no answer within 15 s", "timeout"),
        (
            Refused("syslog.test resolves to a private address"),
            "address refused: syslog.test resolves to a private address",
            "refused_address",
        ),
        (
            _VerifyError("Hostname mismatch, certificate is not valid for 'syslog.test'."),
            "TLS certificate refused: Hostname mismatch, certificate is not valid for 'syslog.test'",
            "tls",
        ),
        (
            _VerifyError("unable to get local issuer certificate"),
            "TLS certificate refused: unable to get local issuer certificate",
            "tls",
        ),
        (_ssl_error("TLSV13_ALERT_CERTIFICATE_REQUIRED"), "TLS failed: tlsv13 alert certificate required", "tls"),
        (ConnectionRefusedError(111, "Connection refused"), "cannot connect: connection refused", "connect"),
        (ConnectionResetError(104, "Connection reset by peer"), "connection lost: ConnectionResetError", "connect"),
        (BrokenPipeError(32, "Broken pipe"), "connection lost: BrokenPipeError", "connect"),
        (OSError(113, "No route to host"), "cannot connect: No route to host", "connect"),
        (HandshakeRefused("the receiver ended the connection"), "the receiver ended the connection", "tls"),
        (
            SetupError("client_certificate_pem needs its private key"),
            "client_certificate_pem needs its private key",
            "config",
        ),
        (RuntimeError("boom"), "failed: RuntimeError", "error"),
    ],
)
def test_classify_errors(error: BaseException, reason: str, failure: str) -> None:
    outcome = sink().classify(Request((1, 2), b""), None, error)
    assert (outcome.status, outcome.reason, outcome.failure) == ("retry", reason, failure)
    assert outcome.retry_ids is None  # the batch whole


def test_classify_a_written_batch_is_delivered() -> None:
    assert sink().classify(Request((1,), b"x"), Response(200, {}), None) == DELIVERED


CLIENT_CA = trustme.CA()
CLIENT_CERT = CLIENT_CA.issue_cert("forwarder.client.test")
CLIENT_CERT_PEM = b"".join(p.bytes() for p in CLIENT_CERT.cert_chain_pems).decode()
CLIENT_KEY_PEM = CLIENT_CERT.private_key_pem.bytes().decode()


def _encrypted_key() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    encrypted = serialization.BestAvailableEncryption(b"pw")
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encrypted).decode()


@pytest.mark.parametrize(
    ("config", "key", "problem"),
    [
        ({"client_certificate_pem": CLIENT_CERT_PEM}, None, "needs its private key"),
        ({"client_certificate_pem": CLIENT_CERT_PEM}, "-----BEGIN PRIVATE KEY-----\nAAAA\n", "not a PEM private key"),
        (
            {"client_certificate_pem": CLIENT_CERT_PEM},
            trustme.CA().issue_cert("x.test").private_key_pem.bytes().decode(),
            "not a PEM private key",
        ),
        ({"client_certificate_pem": CLIENT_CERT_PEM}, _encrypted_key(), "encrypted"),
        ({}, CLIENT_KEY_PEM, "no client_certificate_pem"),
    ],
)
def test_unusable_tls_settings_are_named_without_the_key(config: dict[str, Any], key: str | None, problem: str) -> None:
    with pytest.raises(SetupError) as info:
        tls_context(SyslogConfig.model_validate({"host": "syslog.test", **config}), key)
    assert problem in str(info.value)
    if key:
        assert key.strip().splitlines()[1][:20] not in str(info.value)


def test_tls_context_verifies_and_holds_the_client_certificate() -> None:
    ctx = tls_context(
        SyslogConfig.model_validate(
            {
                "host": "syslog.test",
                "ca_certificate_pem": PEM_CA.cert_pem.bytes().decode(),
                "client_certificate_pem": CLIENT_CERT_PEM,
            }
        ),
        CLIENT_KEY_PEM,
    )
    assert ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert any("Testing CA" in str(c.get("subject")) for c in ctx.get_ca_certs())


def test_repr_hides_the_private_key() -> None:
    s = sink({"client_certificate_pem": CLIENT_CERT_PEM}, CLIENT_KEY_PEM)
    assert "PRIVATE" not in repr(s) and CLIENT_KEY_PEM[40:80] not in repr(s) and "<hidden>" in repr(s)


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
        await wait_until(self.arrived, lambda: len(self.messages) >= n, 10)

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
        assert await env.until_sleeping(created["id"], 1) == pytest.approx(30)
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
        assert await env.until_sleeping(created["id"], 1) == pytest.approx(30)
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
        assert await env.until_sleeping(created["id"], 1) == pytest.approx(30)
        d = await env.delivery(created["id"])
        assert d["last_error"] == reason and d["sent_lines"] == 0 and d["in_flight_lines"] == 3
        if secret:
            assert secret.splitlines()[1][:20] not in d["last_error"]
        assert receiver.messages == []
    finally:
        await receiver.aclose()


async def test_plain_tcp_to_a_relay(env: Env) -> None:
    receiver = SyslogReceiver(None)
    await receiver.start()
    try:
        await env.create(receiver.port, tls=False, ca_certificate_pem=None, message_format="json")
        await env.append(mixed_lines(20))
        await receiver.wait_for(20)
        assert receiver.messages == await env.expected(range(1, 21), message_format="json")
    finally:
        await receiver.aclose()
    assert receiver.errors == []


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
