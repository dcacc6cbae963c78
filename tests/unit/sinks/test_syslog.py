"""The syslog kind: RFC 5424 messages, RFC 5425 octet counting, TLS, one kept connection.

Tables for the pure parts (PRI, escaping, sanitising, cuts, framing, errors) and the strict
RFC 5424 / RFC 5425 reader that tests/unit/delivery/test_syslog_delivery.py's receiver uses.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
from dataclasses import dataclass
from typing import Any

import pytest
import trustme
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from pydantic import ValidationError

from forwarder.delivery.netguard import Refused
from forwarder.model import LogLine
from forwarder.sinks import SINK_TYPES, sink_address
from forwarder.sinks._encode import cut_text, water_level
from forwarder.sinks.base import DELIVERED, Address, OutLine, Request, Response
from forwarder.sinks.syslog import (
    HandshakeRefused,
    SetupError,
    SyslogConfig,
    SyslogSink,
    frame,
    header,
    header_field,
    json_message,
    priority,
    sd_value,
    structured_data,
    syslog_message,
    timestamp,
    tls_context,
)
from forwarder.store.lines import Identity
from tests import sinkhelpers
from tests.linegen import mixed_lines

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
        ('"' * 200, '\\"' * 126 + "..."),  # 255 bytes once escaped
        ("a" + '"' * 200, "a" + '\\"' * 125 + "..."),  # never a backslash without its character
    ],
)
def test_sd_values_are_escaped_and_cut(value: Any, out: str) -> None:
    assert sd_value(value) == out
    assert len(sd_value(value).encode()) <= 255


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


HOSTILE_NAMES = {k: '"]\\' * 400 for k in ("user", "database", "application", "client", "database_id")}


@pytest.mark.parametrize("message_format", ["text", "json"])
@pytest.mark.parametrize("max_bytes", [2048, 4096])
def test_long_names_from_a_hostile_log_still_leave_msg_its_room(message_format: str, max_bytes: int) -> None:
    # PostgreSQL's names are at most 63 bytes, but a csvlog or jsonlog file can carry any length:
    # the header's values are cut further, never the message out of the limit or the JSON broken.
    ident = Identity(code=1, database_id=HOSTILE_NAMES["database_id"], database_name="d" * 2000, host="h" * 400)
    fields = {k: v for k, v in HOSTILE_NAMES.items() if k != "database_id"}
    line = out_line(identity=ident, message="m" * 4000, **fields)
    data = syslog_message(line, max_bytes, message_format)
    assert max_bytes - 16 <= len(data) <= max_bytes
    parsed = parse_syslog(data)
    assert len(parsed.msg.encode()) >= 1000
    if message_format == "json":
        doc = json.loads(parsed.msg)
        assert doc["id"] == "7" and doc["message"].startswith("mmm") and doc["user"].endswith("...")
    else:
        assert parsed.msg.startswith("ERROR:  mmm") and parsed.msg.endswith("...")


def test_a_message_that_fits_is_not_cut() -> None:
    line = out_line(message="m" * 2000)
    head = header(line.fields()).encode()
    exact = len(head) + 1 + len("ERROR:  ") + 2000
    assert syslog_message(line, exact).endswith(b"m" * 2000)
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
def test_water_level(sizes: list[int], need: int, cap: int) -> None:
    assert water_level(sizes, need) == cap


@pytest.mark.parametrize(
    ("text", "max_bytes", "out"),
    [
        ("abcdef", 6, "abcdef"),
        ("abcdef", 5, "ab..."),
        ("abcdef", 3, "..."),
        ("abcdef", 2, "ab"),  # no room for the marker: never longer than asked
        ("abcdef", 0, ""),
        ("abcdef", -5, ""),
        ("üü", 3, "..."),
        ("üü", 2, "ü"),
    ],
)
def test_cut_text_never_exceeds_its_bytes(text: str, max_bytes: int, out: str) -> None:
    assert cut_text(text, max_bytes) == out


def test_json_message_cuts_the_longest_text_first() -> None:
    fields = {"id": "1", "message": "m" * 50, "statement": "s" * 500}
    data = json_message(fields, 300)
    out = json.loads(data)
    assert out["message"] == "m" * 50 and out["statement"].endswith("...")
    assert 290 <= len(data) <= 300
    assert json_message(fields, 1000) == json.dumps(fields, separators=(",", ":")).encode()


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
