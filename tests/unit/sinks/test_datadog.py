"""The datadog kind's pure parts: config, encode (shape, limits, truncation) and classify, as tables."""

from __future__ import annotations

import gzip
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from forwarder.model import LogLine
from forwarder.sinks import SINK_TYPES, sink_address
from forwarder.sinks._encode import line_text
from forwarder.sinks.base import Request, Response
from forwarder.sinks.datadog import (
    MAX_BODY_BYTES,
    MAX_ITEM_BYTES,
    MAX_ITEMS,
    DatadogConfig,
    DatadogSink,
    ddtags,
    encode_item,
)
from forwarder.store.lines import Identity
from tests.linegen import mixed_lines
from tests.sinkhelpers import (
    IDENT,
    SEVERITY_LEVELS,
    T0,
    TRANSPORT_ERRORS,
    NoHttp,
    classified,
    limit_lines,
    out_lines,
    response,
)

KEY = "dd-api-key-0123456789abcdef0123456789"


def sink(**config: Any) -> DatadogSink:
    return DatadogSink(DatadogConfig(**config), KEY, NoHttp())  # encode/classify only


def items_of(request: Request) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = orjson.loads(gzip.decompress(request.body))
    return result


def one_item(line: LogLine, ident: Identity = IDENT) -> dict[str, Any]:
    [request] = sink().encode(out_lines([line], ident=ident), "dlv_x", 0)
    [item] = items_of(request)
    return item


# --- config ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "url", "field"),
    [
        ({}, "https://http-intake.logs.datadoghq.com/api/v2/logs", "site"),
        ({"site": "datadoghq.eu"}, "https://http-intake.logs.datadoghq.eu/api/v2/logs", "site"),
        ({"site": "us3.datadoghq.com"}, "https://http-intake.logs.us3.datadoghq.com/api/v2/logs", "site"),
        ({"site": "ap2.datadoghq.com"}, "https://http-intake.logs.ap2.datadoghq.com/api/v2/logs", "site"),
        ({"site": "uk1.datadoghq.com"}, "https://http-intake.logs.uk1.datadoghq.com/api/v2/logs", "site"),
        ({"site": "us2.ddog-gov.com"}, "https://http-intake.logs.us2.ddog-gov.com/api/v2/logs", "site"),
        ({"site": "datadoghq.eu", "url": "https://proxy.example/dd"}, "https://proxy.example/dd", "url"),
    ],
)
def test_the_intake_url_comes_from_the_site_or_the_override(config: dict[str, Any], url: str, field: str) -> None:
    model = DatadogConfig.model_validate(config)
    assert model.intake_url == url
    [request] = DatadogSink(model, KEY, NoHttp()).encode(out_lines(mixed_lines(1)), "d", 0)
    assert request.url == url and request.method == "POST"
    address = sink_address("datadog", model)
    assert address is not None and (address.field, address.url) == (field, url)


@pytest.mark.parametrize(
    "config",
    [{"site": "datadoghq.org"}, {"site": "app.datadoghq.com"}, {"url": ""}, {"api_key": "x"}, {"site": None}],
)
def test_bad_configs_are_refused(config: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        DatadogConfig.model_validate(config)


def test_the_kind_is_registered_with_a_required_given_secret() -> None:
    kind = SINK_TYPES["datadog"]
    assert kind.config is DatadogConfig and kind.secret_required and not kind.secret_generated
    assert KEY not in repr(sink()) and "hidden" in repr(sink())


# --- encode: one item -----------------------------------------------------------------------------


@pytest.mark.parametrize(("severity", "status"), [*SEVERITY_LEVELS, ("STATEMENT", "info"), ("DEBUG", "debug")])
def test_status_follows_the_severity(severity: str, status: str) -> None:
    line = LogLine(time_us=T0, severity=severity, kind="error", message="m")
    assert one_item(line)["status"] == status


@pytest.mark.parametrize(
    ("database_name", "kind", "tags"),
    [
        ("main", "error", "source:service,database:main,kind:error"),
        ("Shop DB", "slow_query", "source:service,database:shop_db,kind:slow_query"),
        ("a,b", "lock_wait", "source:service,database:a_b,kind:lock_wait"),  # a comma never splits the tags
        ("eu/prod-1.main:x", "checkpoint", "source:service,database:eu/prod-1.main:x,kind:checkpoint"),
        ("Café 日本", "other", "source:service,database:café_日本,kind:other"),
        ("x" * 300, "error", "source:service,database:" + "x" * 191 + ",kind:error"),  # 200 characters a tag
        ('My,DB "x" \u00dcn', "other", "source:service,database:my_db_x_\u00fcn,kind:other"),  # one _ a run
        ("prod (eu)", "other", "source:service,database:prod_eu,kind:other"),  # no trailing _
        ("", "other", "source:service,kind:other"),  # never "database:" (the test line has no database)
        ("!!!", "other", "source:service,kind:other"),
    ],
)
def test_ddtags_name_the_source_database_and_kind(database_name: str, kind: str, tags: str) -> None:
    assert ddtags({"database_name": database_name, "kind": kind}) == tags
    ident = Identity(code=1, database_id="main", database_name=database_name, host="db1")
    item = one_item(LogLine(time_us=T0, severity="LOG", kind=kind, message="m"), ident)  # type: ignore[arg-type]
    assert item["ddtags"] == tags


@pytest.mark.parametrize(
    ("time_us", "timestamp"),
    [
        (1_700_000_000_000_000, 1_700_000_000_000),
        (1_700_000_000_123_456, 1_700_000_000_123),  # the stored time has milliseconds
        (1_700_000_000_999_999, 1_700_000_000_999),
        (0, 0),
    ],
)
def test_timestamp_is_the_postgresql_time_in_epoch_milliseconds(time_us: int, timestamp: int) -> None:
    item = one_item(LogLine(time_us=time_us, severity="LOG", kind="other", message="m"))
    assert item["timestamp"] == timestamp and isinstance(item["timestamp"], int)


def test_an_item_carries_the_reserved_attributes_and_every_spec_field_nested() -> None:
    lines = mixed_lines(50, seed=3)
    requests = sink().encode(out_lines(lines), "dlv_x", 0)
    items = [item for r in requests for item in items_of(r)]
    for out, item in zip(out_lines(lines), items, strict=True):
        doc = orjson.loads(out.doc)
        assert list(item) == [
            "ddsource",
            "service",
            "hostname",
            "status",
            "timestamp",
            "ddtags",
            "message",
            "postgresql",
        ]
        assert item["ddsource"] == "postgresql" and item["service"] == "postgresql"
        assert item["hostname"] == "db1" == doc["host"]
        assert item["postgresql"] == doc  # the SPEC 2.1 document as stored, id as a decimal string
        assert item["message"] == line_text(doc)


def test_the_message_reads_like_the_postgresql_entry() -> None:
    line = LogLine(
        time_us=T0, severity="ERROR", kind="error", message='relation "t" does not exist', statement="SELECT 1"
    )
    assert one_item(line)["message"] == 'ERROR:  relation "t" does not exist\nSTATEMENT:  SELECT 1'


def test_the_request_is_gzip_json_with_the_api_key_and_no_query() -> None:
    [request] = sink().encode(out_lines(mixed_lines(3)), "dlv_x", 0)
    headers = dict(request.headers)
    assert headers == {"Content-Type": "application/json", "Content-Encoding": "gzip", "DD-API-KEY": KEY}
    assert request.body[:2] == b"\x1f\x8b" and len(items_of(request)) == 3
    assert "?" not in request.url and request.line_ids == (1, 2, 3)


# --- encode: limits -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "text"),
    [
        ("message", "m" * 3_000_000),
        ("message", "日本語のログ🐘" * 200_000),  # 4.4 MB of multi-byte text: bytes count, not characters
        ("detail", 'quote " and backslash \\ ' * 120_000),  # JSON escapes make it longer still
        ("statement", "SELECT 1; " * 150_000),
        ("context", "\x01" * 400_000),  # escaped as \u0001: six bytes a character
    ],
)
def test_a_log_over_1_mb_is_cut_to_fit_not_dropped(field: str, text: str) -> None:
    line = LogLine(time_us=T0, severity="ERROR", kind="error", message="head")._replace(**{field: text})
    [request] = sink().encode(out_lines([line]), "dlv_x", 0)
    [item] = items_of(request)
    assert len(orjson.dumps(item)) <= MAX_ITEM_BYTES
    assert len(orjson.dumps(item)) > MAX_ITEM_BYTES - 100_000  # cut to fit, not to nothing
    kept = item["postgresql"][field]
    assert kept.endswith("...") and text.startswith(kept[:-3])
    assert item["message"].startswith("ERROR:  ")
    assert item["postgresql"]["id"] == "1" and request.line_ids == (1,)


def test_a_log_within_1_mb_is_sent_whole() -> None:
    line = LogLine(time_us=T0, severity="LOG", kind="other", message="ü" * 240_000)  # 480 KB, twice in the log
    data = encode_item(orjson.loads(out_lines([line])[0].doc))
    assert len(data) <= MAX_ITEM_BYTES and orjson.loads(data)["postgresql"]["message"] == "ü" * 240_000


@pytest.mark.parametrize("seed", [1, 2])
def test_requests_keep_the_documented_limits_and_carry_every_line_once(seed: int) -> None:
    lines = limit_lines(10_000, seed)
    outs = out_lines(lines)
    requests = sink().encode(outs, "dlv_x", 0)
    seen: list[int] = []
    for request in requests:
        body = gzip.decompress(request.body)
        items = orjson.loads(body)
        assert 1 <= len(items) <= MAX_ITEMS and len(body) <= MAX_BODY_BYTES
        assert all(len(orjson.dumps(item)) <= MAX_ITEM_BYTES for item in items)
        assert [int(item["postgresql"]["id"]) for item in items] == list(request.line_ids)
        seen += request.line_ids
    assert seen == [out.id for out in outs]  # every line exactly once, in order
    assert len(requests) > 10_000 // MAX_ITEMS  # the long lines forced byte splits too


# --- classify -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "status", "failure", "retry_after", "reason"),
    [
        (response(202, b"{}"), "delivered", "", None, ""),
        (response(200), "delivered", "", None, ""),
        (response(400, b'{"errors":["bad"]}'), "rejected", "http_4xx", None, 'HTTP 400: {"errors":["bad"]}'),
        (response(413, b"too large"), "rejected", "http_4xx", None, "HTTP 413: too large"),
        (response(401, b"Unauthorized"), "retry", "http_4xx", None, "HTTP 401: Unauthorized"),
        (response(403, b"Forbidden"), "retry", "http_4xx", None, "HTTP 403: Forbidden"),
        (response(402), "retry", "http_4xx", None, "HTTP 402"),
        (response(408), "retry", "http_4xx", None, "HTTP 408"),
        (response(429, b"slow", Retry_After="7"), "retry", "http_4xx", 7.0, "HTTP 429: slow"),
        (response(400, b"bad", Retry_After="7"), "rejected", "http_4xx", None, "HTTP 400: bad"),
        (response(500, b"oops"), "retry", "http_5xx", None, "HTTP 500: oops"),
        (response(503, Retry_After="120"), "retry", "http_5xx", 120.0, "HTTP 503"),
        (response(302), "retry", "redirect", None, "HTTP 302: redirects are not followed"),
    ],
)
def test_classify_statuses(answer: Response, status: str, failure: str, retry_after: float | None, reason: str) -> None:
    outcome = classified(sink(), answer)
    assert (outcome.status, outcome.failure, outcome.retry_after, outcome.reason) == (
        status,
        failure,
        retry_after,
        reason,
    )
    assert outcome.retry_ids is None and outcome.rejected_ids == ()  # the whole request either way


@pytest.mark.parametrize(("error", "failure", "reason"), TRANSPORT_ERRORS)
def test_classify_errors_keep_the_data(error: BaseException, failure: str, reason: str) -> None:
    outcome = classified(sink(), None, error, lines=1)
    assert (outcome.status, outcome.failure, outcome.reason) == ("retry", failure, reason)
    assert KEY not in outcome.reason


def test_neither_the_sink_nor_its_requests_show_the_key() -> None:
    s = sink()
    [request] = s.encode(out_lines(mixed_lines(3, 1)), "dlv_x", 0)
    assert ("DD-API-KEY", KEY) in request.headers  # it is sent...
    assert KEY not in repr(request) and KEY not in repr(s) and KEY not in str(request)  # ...never shown
