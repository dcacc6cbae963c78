"""The loki kind's pure parts: config, encode (labels, metadata, lines, cuts, pushes) and classify."""

from __future__ import annotations

import base64
import gzip
from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson
import pytest
from pydantic import ValidationError

from forwarder.delivery.deliverer import combine
from forwarder.model import LogLine
from forwarder.sinks import SINK_TYPES, build_sink, sink_address
from forwarder.sinks._encode import pack
from forwarder.sinks.base import DELIVERED, Outcome, OutLine, Request, Response, SinkEnv
from forwarder.sinks.loki import (
    DEFAULT_PUSH_BYTES,
    LOKI_MAX_LINE_BYTES,
    MAX_LABEL_VALUE_BYTES,
    MAX_METADATA_VALUE_BYTES,
    Entry,
    LokiConfig,
    LokiSink,
    authorization,
    classify_push,
    encode_entry,
    encode_pushes,
    metadata,
    push_body,
    split_pushes,
    stream_labels,
    timestamp_ns,
)
from forwarder.store.lines import Identity
from tests.linegen import mixed_lines
from tests.receivers_base import WireFormatError
from tests.receivers_loki import LokiReceiver, recover
from tests.sinkhelpers import IDENT, FakeHttp, out_line, out_lines

URL = "http://loki.example:3100"


def doc(**changes: Any) -> dict[str, Any]:
    line = LogLine(time_us=1_700_000_000_123_456, severity="ERROR", kind="error", message="boom")._replace(**changes)
    return out_line(line, 7).fields()


def config(**changes: Any) -> LokiConfig:
    return LokiConfig(url=URL, **changes)


# --- config -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "push_url"),
    [
        ("http://loki:3100", "http://loki:3100/loki/api/v1/push"),
        ("http://loki:3100/", "http://loki:3100/loki/api/v1/push"),
        ("https://gw.example/tenant-a/", "https://gw.example/tenant-a/loki/api/v1/push"),
        ("https://gw.example/loki/api/v1/push", "https://gw.example/loki/api/v1/push"),
        ("https://gw.example/loki/api/v1/push/", "https://gw.example/loki/api/v1/push"),
    ],
)
def test_push_url(url: str, push_url: str) -> None:
    assert LokiConfig(url=url).push_url == push_url


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"url": "http://loki/?x=1"}, "url"),
        ({"url": "http://loki/#top"}, "url"),
        ({"url": ""}, "url"),
        ({"user": "a:b"}, "user"),
        ({"user": "a\nb"}, "user"),
        ({"username": "a:b"}, "username"),
        ({"tenant_id": "a b"}, "tenant_id"),
        ({"tenant_id": "a|b"}, "tenant_id"),  # "|" is for multi-tenant queries; a push takes one tenant
        ({"tenant_id": ".."}, "tenant_id"),
        ({"tenant_id": "x" * 151}, "tenant_id"),
        ({"max_line_bytes": 100}, "max_line_bytes"),
        ({"max_push_bytes": 5 * 1024 * 1024}, "max_push_bytes"),
        ({"max_push_bytes": 1000}, "max_push_bytes"),
        ({"labels": {"a": "b"}}, "labels"),
        # a wrong type is refused, not converted ("yes" is no boolean), as for every kind's config
        ({"structured_metadata": "yes"}, "structured_metadata"),
        ({"structured_metadata": 1}, "structured_metadata"),
        ({"max_line_bytes": "70000"}, "max_line_bytes"),
        ({"max_push_bytes": 2_000_000.0}, "max_push_bytes"),
    ],
)
def test_config_refuses(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        LokiConfig.model_validate({"url": URL, **changes})
    assert err.value.errors()[0]["loc"][0] == field


def test_config_defaults_match_loki_defaults() -> None:
    c = LokiConfig(url=URL)
    assert (c.username, c.tenant_id, c.structured_metadata) == (None, None, True)
    assert c.max_line_bytes == LOKI_MAX_LINE_BYTES == 262_144
    assert c.max_push_bytes == DEFAULT_PUSH_BYTES == 1_048_576
    assert LokiConfig(url=URL, tenant_id="team-a_1.(x)*!'").tenant_id == "team-a_1.(x)*!'"


def test_registered_without_a_required_secret() -> None:
    t = SINK_TYPES["loki"]
    assert (t.secret_required, t.secret_generated) == (False, False)
    address = sink_address("loki", LokiConfig(url=URL))
    assert address is not None and (address.field, address.url) == ("url", URL)
    env = SinkEnv(FakeHttp(), None, "store")  # type: ignore[arg-type]
    assert isinstance(build_sink("loki", {"url": URL}, None, env), LokiSink)


@pytest.mark.parametrize(
    ("user", "secret", "header"),
    [
        (None, None, None),
        (None, "", None),
        (None, "tok", "Bearer tok"),
        ("123456", "glc_key", "Basic " + base64.b64encode(b"123456:glc_key").decode()),
        ("ü", "pässword", "Basic " + base64.b64encode("ü:pässword".encode()).decode()),
        ("admin", None, "Basic " + base64.b64encode(b"admin:").decode()),
    ],
)
def test_authorization(user: str | None, secret: str | None, header: str | None) -> None:
    assert authorization(user, secret) == header


# --- encode: labels, metadata, timestamps -------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "ident", "labels"),
    [
        (
            {},
            IDENT,
            {"source": "service", "host": "db1", "database": "main", "level": "error", "kind": "error"},
        ),
        (
            {"severity": "FATAL", "kind": "auth_failure"},
            Identity(1, "x", "Sales DB — ü", "h"),
            {"source": "service", "host": "h", "database": "Sales DB — ü", "level": "critical", "kind": "auth_failure"},
        ),
        (
            {"severity": "DEBUG2", "kind": "other"},
            Identity(0, "", "", "h"),  # the test line: no database, so no `database` label
            {"source": "service", "host": "h", "level": "debug", "kind": "other"},
        ),
        (
            {"severity": "LOG", "kind": "checkpoint"},
            IDENT,
            {"source": "service", "host": "db1", "database": "main", "level": "info", "kind": "checkpoint"},
        ),
    ],
)
def test_stream_labels(changes: dict[str, Any], ident: Identity, labels: dict[str, str]) -> None:
    line = LogLine(time_us=1, severity="ERROR", kind="error", message="m")._replace(**changes)
    fields = out_line(line, 1, ident).fields()
    got, cut = stream_labels(fields)
    assert dict(got) == labels and list(dict(got)) == [
        k for k in ("source", "host", "database", "level", "kind") if k in labels
    ]
    assert cut is False


def test_a_label_value_over_loki_limit_is_cut() -> None:
    fields = out_line(LogLine(1, "LOG", "other", "m"), 1, Identity(1, "a", "d", "ü" * 2000)).fields()
    labels, cut = stream_labels(fields)
    host = dict(labels)["host"]
    assert cut and host.endswith("...") and len(host.encode()) <= MAX_LABEL_VALUE_BYTES
    assert host.startswith("ü" * 1000)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {},
            {"id": "7", "database_id": "main", "severity": "ERROR", "redacted": "false"},
        ),
        (
            {
                "sqlstate": "23505",
                "user": "app_ü",
                "database": "shop",
                "application": "psql [x]",
                "client": "[local]",
                "pid": 4242,
                "duration_ms": 1500.25,
                "redacted": True,
                "detail": "d",  # texts stay in the line, never in metadata
                "statement": "SELECT $1",
            },
            {
                "id": "7",
                "database_id": "main",
                "severity": "ERROR",
                "sqlstate": "23505",
                "user": "app_ü",
                "database": "shop",
                "application": "psql [x]",
                "client": "[local]",
                "pid": "4242",
                "duration_ms": "1500.25",
                "redacted": "true",
            },
        ),
        (
            {"duration_ms": 0.0, "pid": 0},
            {
                "id": "7",
                "database_id": "main",
                "severity": "ERROR",
                "pid": "0",
                "duration_ms": "0.0",
                "redacted": "false",
            },
        ),
        ({"user": ""}, {"id": "7", "database_id": "main", "severity": "ERROR", "redacted": "false"}),
    ],
)
def test_metadata(changes: dict[str, Any], expected: dict[str, str]) -> None:
    got, cut = metadata(doc(**changes))
    assert got == expected and list(got) == list(expected) and cut is False


def test_metadata_typed_for_json_lines() -> None:
    got, _ = metadata(doc(pid=12, duration_ms=2.5, redacted=True), typed=True)
    assert got == {
        "id": "7",
        "database_id": "main",
        "severity": "ERROR",
        "pid": 12,
        "duration_ms": 2.5,
        "redacted": True,
    }


def test_a_metadata_value_is_cut_to_keep_the_line_under_loki_limits() -> None:
    got, cut = metadata(doc(application="日" * 5000))
    assert cut and got["application"].endswith("...")
    assert len(got["application"].encode()) <= MAX_METADATA_VALUE_BYTES


@pytest.mark.parametrize(
    ("time", "line_id", "ns"),
    [
        ("2023-11-14T22:13:20.000Z", 1, "1700000000000000001"),
        ("2023-11-14T22:13:20.123Z", 999_999, "1700000000123999999"),
        ("2023-11-14T22:13:20.123Z", 1_000_000, "1700000000123000000"),  # id modulo 10^6
        ("2023-11-14T22:13:20.999Z", 1_234_567, "1700000000999234567"),
        ("1970-01-01T00:00:00.001Z", 0, "1000000"),  # the test line's id 0
    ],
)
def test_timestamp_ns(time: str, line_id: int, ns: str) -> None:
    assert str(timestamp_ns(time, line_id)) == ns


# --- encode: the entry ----------------------------------------------------------------------------


def test_entry_is_ns_string_line_text_and_metadata() -> None:
    fields = doc(detail="d1", hint="h1", context="c1", statement="SELECT $1", sqlstate="XX000")
    e = encode_entry(fields, 7, config())
    ts, line, meta = orjson.loads(e.data)
    assert ts == str(e.ts) == "1700000000123000007"
    assert line == "ERROR:  boom\nDETAIL:  d1\nHINT:  h1\nCONTEXT:  c1\nSTATEMENT:  SELECT $1"
    assert meta == {"id": "7", "database_id": "main", "severity": "ERROR", "sqlstate": "XX000", "redacted": "false"}


def test_json_line_mode_puts_the_fields_in_the_line() -> None:
    fields = doc(detail="d1", pid=5, duration_ms=1.5, redacted=True)
    e = encode_entry(fields, 7, config(structured_metadata=False))
    value = orjson.loads(e.data)
    assert len(value) == 2  # no structured metadata for a Loki without it
    assert orjson.loads(value[1]) == {
        "line": "ERROR:  boom\nDETAIL:  d1",
        "id": "7",
        "database_id": "main",
        "severity": "ERROR",
        "pid": 5,
        "duration_ms": 1.5,
        "redacted": True,
    }


@pytest.mark.parametrize(
    ("message", "max_line_bytes", "structured"),
    [
        ("é" * 200_000, 262_144, True),  # 2-byte characters
        ("日本語" * 100_000, 262_144, True),  # 3-byte
        ("🐘" * 100_000, 262_144, True),  # 4-byte
        ("a🐘" * 1000, 1024, True),  # odd limit across a 4-byte character
        ("🐘" * 1000, 1027, True),
        ('"\\' * 300_000, 262_144, False),  # each escaped twice in a JSON line
        ("x" * 600_000, 262_144, False),
        ("naïve\n" * 50_000, 4096, False),
    ],
)
def test_long_lines_are_cut_on_a_character(message: str, max_line_bytes: int, structured: bool) -> None:
    c = config(max_line_bytes=max_line_bytes, structured_metadata=structured)
    e = encode_entry(doc(message=message), 7, c)
    value = orjson.loads(e.data)  # valid UTF-8 and JSON
    if structured:
        line, meta = value[1], value[2]
        text = line
    else:
        line = value[1]
        meta = orjson.loads(line)
        text = meta["line"]
    assert len(line.encode()) <= max_line_bytes
    assert len(line.encode()) > max_line_bytes - 200  # cut to the limit, not far below it
    assert text.startswith("ERROR:  " + message[:10]) and text.endswith("...")
    assert (message[: len(text) - 11] in message) and text[8:-3] == message[: len(text) - 11]
    assert meta["truncated"] in ("true", True)


def test_control_characters_cut_to_fit_one_push() -> None:
    # \u0001 takes 6 bytes in JSON (12 in a JSON line inside JSON): the value must still fit a push.
    c = config(max_push_bytes=64 * 1024, structured_metadata=False)
    e = encode_entry(doc(message="\x01" * 200_000), 7, c)
    body = push_body([e])
    assert len(body) <= 64 * 1024 and len(body) > 60 * 1024
    LokiReceiver(structured_metadata=False, max_push_bytes=64 * 1024).check_body(body)


def test_short_lines_are_not_marked() -> None:
    _, _, meta = orjson.loads(encode_entry(doc(message="x" * 1000), 7, config()).data)
    assert "truncated" not in meta


# --- encode: pushes -------------------------------------------------------------------------------


def entry(line_id: int, labels: tuple[tuple[str, str], ...], ts: int) -> Entry:
    return Entry(line_id, labels, ts, orjson.dumps([str(ts), f"line {line_id}", {"id": str(line_id)}]))


A = (("source", "service"), ("host", "h"), ("level", "info"), ("kind", "other"))
B = (("source", "service"), ("host", "h"), ("level", "error"), ("kind", "error"))


@pytest.mark.parametrize(
    ("entries", "streams"),
    [
        ([entry(1, A, 10)], [(dict(A), [1])]),
        ([entry(1, A, 10), entry(2, B, 11), entry(3, A, 12)], [(dict(A), [1, 3]), (dict(B), [2])]),
        # Out of time order in: sorted per stream; equal times keep their order (stable).
        ([entry(1, A, 30), entry(2, A, 10), entry(3, B, 5), entry(4, A, 10), entry(5, A, 20)],
         [(dict(A), [2, 4, 5, 1]), (dict(B), [3])]),
    ],
)  # fmt: skip
def test_push_body_groups_streams_and_sorts_by_time(
    entries: list[Entry], streams: list[tuple[dict[str, str], list[int]]]
) -> None:
    body = orjson.loads(push_body(entries))
    assert list(body) == ["streams"]
    got = [(s["stream"], [int(v[2]["id"]) for v in s["values"]]) for s in body["streams"]]
    assert got == streams


def test_split_pushes_stays_within_the_size() -> None:
    labels = [A, B] * 500
    entries = [entry(i, labels[i], 1000 - i) for i in range(1000)]
    for max_bytes in (200, 1000, 5000, 64 * 1024):
        groups = split_pushes(entries, max_bytes)
        assert [e.line_id for g in groups for e in g] == list(range(1000))
        for g in groups:
            body = push_body(g)
            assert len(body) <= max_bytes or len(g) == 1
        assert len(split_pushes(entries, 10**9)) == 1


def test_sink_encode_gzips_and_carries_no_credential() -> None:
    sink = LokiSink(config(user="u", tenant_id="team-a"), "s3cr3t-token", FakeHttp())
    [request] = sink.encode(out_lines(mixed_lines(20, 3)), "dlv_x", 0.0)
    assert request.method == "POST" and request.url == URL + "/loki/api/v1/push"
    assert dict(request.headers) == {
        "Content-Type": "application/json",
        "Content-Encoding": "gzip",
        "X-Scope-OrgID": "team-a",
    }
    assert request.line_ids == tuple(range(1, 21))
    _, entries = LokiReceiver().check_body(gzip.decompress(request.body))
    assert sorted(e.id for e in entries) == list(range(1, 21))
    assert "s3cr3t-token" not in repr(request) and "s3cr3t-token" not in repr(sink)


@pytest.mark.parametrize(
    ("user", "secret", "header"),
    [
        ("u", "s3cr3t", "Basic dTpzM2NyM3Q="),
        (None, "s3cr3t", "Bearer s3cr3t"),
        (None, None, None),
    ],
)
async def test_send_adds_the_credential(user: str | None, secret: str | None, header: str | None) -> None:
    http = FakeHttp()
    sink = LokiSink(config(user=user), secret, http)
    [request] = sink.encode(out_lines(mixed_lines(1, 3)), "dlv_x", 0.0)
    await sink.send(request)
    assert dict(http.sent[0].headers).get("Authorization") == header
    assert "Authorization" not in dict(request.headers)


@pytest.mark.parametrize("structured", [True, False])
def test_every_field_is_recovered(structured: bool) -> None:
    lines = out_lines(mixed_lines(600, 11))
    c = config(structured_metadata=structured)
    receiver = LokiReceiver(structured_metadata=structured)
    seen: dict[int, dict[str, Any]] = {}
    for _, body in encode_pushes(lines, c):
        _, entries = receiver.check_body(body)
        for e in entries:
            seen[e.id] = recover(e, structured)
    assert len(seen) == 600
    for line in lines:
        stored = line.fields()
        assert seen[line.id] == stored, line.id
        assert list(seen[line.id]) == list(stored)


def test_the_test_line_is_recovered() -> None:
    ident = Identity(0, "", "", "myhost")
    line = LogLine(time_us=1_800_000_000_000_000, severity="LOG", kind="other", message="test line")
    out = out_line(line, 0, ident)
    [(_, body)] = encode_pushes([out], config())
    [e] = LokiReceiver().check_body(body)[1]
    assert e.labels == {"source": "service", "host": "myhost", "level": "info", "kind": "other"}
    assert recover(e) == out.fields()


def test_ten_thousand_long_lines_stay_within_limits() -> None:
    """10,000 mixed lines with texts up to 900 KB, batched as the store does: no push over the
    documented size, no line over Loki's max_line_size, every id exactly once."""
    c = config()
    sink = LokiSink(c, None, FakeHttp())
    receiver = LokiReceiver()
    # Made 500 at a time (4.5 GB of text at once otherwise), each slice with its own seed.
    lines: Iterator[LogLine] = (line for k in range(20) for line in mixed_lines(500, 5 + k, max_text_bytes=900_000))
    ids: list[int] = []
    cut = 0
    batch: list[tuple[OutLine, int]] = []

    def flush() -> None:
        nonlocal cut
        for group in pack(batch, sink.limits.max_lines, sink.limits.max_bytes):
            for request in sink.encode(group, "dlv_x", 0.0):
                data = gzip.decompress(request.body)
                assert len(data) <= c.max_push_bytes
                _, entries = receiver.check_body(data)  # lines, labels and metadata within Loki's limits
                assert sorted(e.id for e in entries) == sorted(request.line_ids)
                ids.extend(request.line_ids)
                for e in entries:
                    assert e.metadata is not None
                    assert len(e.line.encode()) <= LOKI_MAX_LINE_BYTES
                    if e.metadata.get("truncated") == "true":
                        assert e.line.endswith("...")
                        cut += 1
        batch.clear()

    size = 0
    for i, line in enumerate(lines):
        out = out_line(line, i + 1)
        batch.append((out, len(out.doc)))
        size += len(out.doc)
        if size > 4 * sink.limits.max_bytes:
            flush()
            size = 0
    flush()
    assert sorted(ids) == list(range(1, 10_001)) and len(ids) == 10_000
    assert receiver.errors == []
    assert 6_000 < cut < 8_000  # texts are uniform in 0..900 KB: about 71% are over 256 KiB


def test_receiver_refuses_what_loki_would() -> None:
    good = push_body([encode_entry(doc(), 7, config())])
    r = LokiReceiver()
    r.check_body(good)
    for bad in (
        good.replace(b'"source":"service"', b'"source":"postgres"'),
        good.replace(b'"level":"error"', b'"level":"ERROR"'),
        good.replace(b'"1700000000123000007"', b"1700000000123000007"),
        good.replace(b'"redacted":"false"', b'"redacted":false'),
        good.replace(b'"streams"', b'"stream"'),
    ):
        with pytest.raises(WireFormatError):
            r.check_body(bad)
    assert len(r.errors) == 5


# --- classify -------------------------------------------------------------------------------------

OUT_OF_ORDER = (
    b"entry with timestamp 2024-05-06 15:58:50 +0000 UTC ignored, reason: 'entry out of order',\n"
    b'user \'fake\', total ignored: 1 out of 2 for stream: {host="db1", kind="error"}'
)
TOO_OLD = (
    b"entry for stream '{kind=\"error\"}' has timestamp too old: 2020-01-01T00:00:00Z, "
    b"oldest acceptable timestamp is: 2024-05-01T00:00:00Z"
)
TOO_LONG = (
    b"Max entry size '262144' bytes exceeded for stream '{kind=\"error\"}' "
    b"while adding an entry with length '300000' bytes"
)
DISALLOWED = (
    b"stream '{kind=\"error\"}' includes structured metadata, but this feature is disallowed. Please see "
    b"`limits_config.allow_structured_metadata` or contact your Loki administrator to enable it."
)


@pytest.mark.parametrize(
    ("status", "headers", "body", "expected"),
    [
        (204, {}, b"", DELIVERED),
        (200, {}, b"", DELIVERED),
        (
            400,
            {},
            OUT_OF_ORDER,
            Outcome(
                "rejected",
                "HTTP 400: entry with timestamp 2024-05-06 15:58:50 +0000 UTC ignored, reason: 'entry out of order', "
                'user \'fake\', total ignored: 1 out of 2 for stream: {host="db1", kind="error"}',
                "http_4xx",
            ),
        ),
        (400, {}, TOO_OLD, Outcome("rejected", "HTTP 400: " + TOO_OLD.decode(), "http_4xx")),
        (400, {}, TOO_LONG, Outcome("rejected", "HTTP 400: " + TOO_LONG.decode(), "http_4xx")),
        (400, {}, b"", Outcome("rejected", "HTTP 400", "http_4xx")),
        # Nothing kept, fixed by configuration: retried so no line is lost meanwhile.
        (400, {}, DISALLOWED, Outcome("retry", "HTTP 400: " + DISALLOWED.decode(), "http_4xx")),
        (401, {}, b"no org id\n", Outcome("retry", "HTTP 401: no org id", "http_4xx")),
        (403, {}, b"forbidden", Outcome("retry", "HTTP 403: forbidden", "http_4xx")),
        (413, {}, b"", Outcome("retry", "HTTP 413", "http_4xx")),
        (
            429,
            {"Retry-After": "30"},
            b"Ingestion rate limit exceeded",
            Outcome("retry", "HTTP 429: Ingestion rate limit exceeded", "http_4xx", 30.0),
        ),
        (500, {}, b"rpc error", Outcome("retry", "HTTP 500: rpc error", "http_5xx")),
        (503, {"retry-after": "7"}, b"", Outcome("retry", "HTTP 503", "http_5xx", 7.0)),
        (
            302,
            {"Location": "http://elsewhere/"},
            b"",
            Outcome("retry", "HTTP 302: redirects are not followed", "redirect"),
        ),
    ],
)
def test_classify_status(status: int, headers: dict[str, str], body: bytes, expected: Outcome) -> None:
    assert classify_push(Response(status, headers, body)) == expected


def test_a_long_400_text_is_cut() -> None:
    outcome = classify_push(Response(400, {}, b"e" * 5000))
    assert outcome.status == "rejected" and len(outcome.reason.encode()) <= 510 and outcome.reason.endswith("...")


class _OsError(OSError):
    strerror = "Connection refused"


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (TimeoutError("no answer within 15 s"), Outcome("retry", "no answer within 15 s", "timeout")),
        (
            aiohttp.ClientConnectorError(None, ConnectionRefusedError(111, "Connection refused")),  # type: ignore[arg-type]
            Outcome("retry", "cannot connect: Connection refused", "connect"),
        ),
        (ConnectionResetError(), Outcome("retry", "connection failed: ConnectionResetError", "connect")),
        (aiohttp.ServerDisconnectedError(), Outcome("retry", "connection failed: ServerDisconnectedError", "connect")),
    ],
)
def test_classify_errors(error: BaseException, expected: Outcome) -> None:
    sink = LokiSink(config(), "secret-value", FakeHttp())
    request = Request((1,), b"")
    outcome = sink.classify(request, None, error)
    assert outcome == expected and "secret-value" not in outcome.reason


def test_a_rejected_push_drops_its_lines_only() -> None:
    sink = LokiSink(config(), None, FakeHttp())
    one, two = Request((1, 2), b""), Request((3,), b"")
    rejected = sink.classify(one, Response(400, {}, OUT_OF_ORDER), None)
    batch = combine([(one, rejected), (two, DELIVERED)])
    assert (batch.status, batch.rejected_ids, batch.retry_ids) == ("delivered", (1, 2), None)
    assert "entry out of order" in batch.reason
    retried = combine([(one, rejected), (two, sink.classify(two, Response(429, {}, b""), None))])
    assert (retried.status, retried.rejected_ids, retried.retry_ids) == ("retry", (1, 2), (3,))
