"""The better_stack kind's pure parts: config, encode (shape, dt, limits, truncation) and classify, as tables."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from forwarder.model import LogLine
from forwarder.sinks import SINK_TYPES, sink_address
from forwarder.sinks.base import Request, Response
from forwarder.sinks.better_stack import (
    MAX_BODY_BYTES,
    MAX_ITEM_BYTES,
    MAX_ITEMS,
    BetterStackConfig,
    BetterStackSink,
    encode_event,
    event_time,
)
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

TOKEN = "bs-token-0123456789abcdefghij"
HOST = "s1234.eu-nbg-2.betterstackdata.com"


def sink(**config: Any) -> BetterStackSink:
    model = BetterStackConfig.model_validate(config or {"host": HOST})
    return BetterStackSink(model, TOKEN, NoHttp())  # encode/classify only


def events_of(request: Request) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = orjson.loads(request.body)
    return result


def one_event(line: LogLine) -> dict[str, Any]:
    [request] = sink().encode(out_lines([line]), "dlv_x", 0)
    [event] = events_of(request)
    return event


# --- config ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "url", "field"),
    [
        ({"host": HOST}, f"https://{HOST}/", "host"),
        ({"host": "S1234.EU-NBG-2.betterstackdata.com"}, f"https://{HOST}/", "host"),
        ({"host": "in.logs.betterstack.com"}, "https://in.logs.betterstack.com/", "host"),
        ({"url": "https://proxy.example/bs"}, "https://proxy.example/bs", "url"),
        ({"host": HOST, "url": "https://proxy.example/bs"}, "https://proxy.example/bs", "url"),
    ],
)
def test_the_endpoint_comes_from_the_host_or_the_override(config: dict[str, Any], url: str, field: str) -> None:
    model = BetterStackConfig.model_validate(config)
    assert model.endpoint == url
    [request] = BetterStackSink(model, TOKEN, NoHttp()).encode(out_lines(mixed_lines(1)), "d", 0)
    assert request.url == url and request.method == "POST"
    address = sink_address("better_stack", model)
    assert address is not None and (address.field, address.url) == (field, url)


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"host": f"https://{HOST}"},
        {"host": f"{HOST}/"},
        {"host": f"{HOST}/ingest"},
        {"host": f"{HOST}:443"},
        {"host": "localhost"},  # not a dotted host name
        {"host": "a b.example.com"},
        {"host": "-x.example.com"},
        {"host": "x..example.com"},
        {"host": "x_y.example.com"},
        {"host": ("a" * 64) + ".example.com"},
        {"host": ""},
        {"url": ""},
        {"host": HOST, "token": "x"},
    ],
)
def test_bad_configs_are_refused(config: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        BetterStackConfig.model_validate(config)


def test_the_kind_is_registered_with_a_required_given_secret() -> None:
    kind = SINK_TYPES["better_stack"]
    assert kind.config is BetterStackConfig and kind.secret_required and not kind.secret_generated
    assert TOKEN not in repr(sink()) and "hidden" in repr(sink())


# --- encode ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("time", "dt"),
    [
        ("2026-11-22T04:00:00.123Z", "2026-11-22T04:00:00.123000Z"),
        ("2026-11-22T04:00:00Z", "2026-11-22T04:00:00.000000Z"),
        ("2026-11-22T04:00:00.123456Z", "2026-11-22T04:00:00.123456Z"),
        ("2026-11-22T05:00:00.5+01:00", "2026-11-22T04:00:00.500000Z"),
        ("1970-01-01T00:00:00.000Z", "1970-01-01T00:00:00.000000Z"),
    ],
)
def test_dt_is_rfc3339_utc_with_six_digits(time: str, dt: str) -> None:
    assert event_time(time) == dt


@pytest.mark.parametrize(("severity", "level"), SEVERITY_LEVELS)
def test_level_follows_the_severity(severity: str, level: str) -> None:
    assert one_event(LogLine(time_us=T0, severity=severity, kind="other", message="m"))["level"] == level


def test_an_event_is_the_stored_document_plus_dt_and_level() -> None:
    lines = mixed_lines(50, seed=4)
    outs = out_lines(lines)
    [request] = sink().encode(outs, "dlv_x", 0)
    for out, event in zip(outs, events_of(request), strict=True):
        doc = orjson.loads(out.doc)
        assert event == {**doc, "dt": event_time(doc["time"]), "level": event["level"]}
        assert list(event) == [*doc, "dt", "level"]
        assert event["message"] == doc["message"]  # the SPEC message, already text
    assert request.body.startswith(b"[" + outs[0].doc[:-1] + b',"dt":"')  # the stored bytes, not re-encoded


def test_the_request_is_json_with_the_bearer_token() -> None:
    [request] = sink().encode(out_lines(mixed_lines(3)), "dlv_x", 0)
    assert dict(request.headers) == {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
    assert len(events_of(request)) == 3 and request.line_ids == (1, 2, 3)


@pytest.mark.parametrize(
    ("field", "text"),
    [
        ("message", "m" * 12_000_000),
        ("message", "日本語のログ🐘" * 600_000),  # 13 MB of multi-byte text: bytes count, not characters
        ("detail", 'quote " and backslash \\ ' * 500_000),
        ("statement", "\x01" * 2_000_000),  # escaped as \u0001: six bytes a character
    ],
)
def test_an_event_over_10_mib_is_cut_to_fit_not_dropped(field: str, text: str) -> None:
    line = LogLine(time_us=T0, severity="ERROR", kind="error", message="head")._replace(**{field: text})
    [request] = sink().encode(out_lines([line]), "dlv_x", 0)
    assert len(request.body) <= MAX_BODY_BYTES
    [event] = events_of(request)
    assert MAX_ITEM_BYTES - 1_000_000 < len(orjson.dumps(event)) <= MAX_ITEM_BYTES
    kept = event[field]
    assert kept.endswith("...") and text.startswith(kept[:-3])
    assert event["id"] == "1" and event["dt"] == event_time(event["time"])


def test_an_event_within_the_limit_is_sent_whole() -> None:
    line = LogLine(time_us=T0, severity="LOG", kind="other", message="ü" * 1_000_000)
    [out] = out_lines([line])
    assert orjson.loads(encode_event(out.doc, out.fields()))["message"] == "ü" * 1_000_000


@pytest.mark.parametrize("seed", [1, 2])
def test_requests_keep_the_limits_and_carry_every_line_once(seed: int) -> None:
    outs = out_lines(limit_lines(10_000, seed, every=40))  # 10 MiB requests: more long lines
    requests = sink().encode(outs, "dlv_x", 0)
    seen: list[int] = []
    for request in requests:
        events = events_of(request)
        assert 1 <= len(events) <= MAX_ITEMS and len(request.body) <= MAX_BODY_BYTES
        assert [int(e["id"]) for e in events] == list(request.line_ids)
        seen += request.line_ids
    assert seen == [out.id for out in outs]
    assert len(requests) > 10_000 // MAX_ITEMS  # the long lines forced byte splits too


def test_a_batch_of_small_lines_is_one_request() -> None:
    outs = out_lines(mixed_lines(1000, 5))
    [request] = sink().encode(outs, "d", 0)
    assert request.line_ids == tuple(range(1, 1001))
    assert IDENT.host == events_of(request)[0]["host"]


# --- classify -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "status", "failure", "retry_after", "reason"),
    [
        (response(202), "delivered", "", None, ""),
        (response(200), "delivered", "", None, ""),
        (response(402, b"Quota exceeded"), "retry", "http_4xx", None, "HTTP 402: Quota exceeded"),
        (response(403, b"Unauthorized"), "retry", "http_4xx", None, "HTTP 403: Unauthorized"),
        (response(401), "retry", "http_4xx", None, "HTTP 401"),
        (response(400), "retry", "http_4xx", None, "HTTP 400"),
        (
            response(406, b"Couldn't parse JSON content."),
            "retry",
            "http_4xx",
            None,
            "HTTP 406: Couldn't parse JSON content.",
        ),
        (
            response(413, b"payload reached size limit"),
            "retry",
            "http_4xx",
            None,
            "HTTP 413: payload reached size limit",
        ),
        (response(429, Retry_After="30"), "retry", "http_4xx", 30.0, "HTTP 429"),
        (response(500, b"oops"), "retry", "http_5xx", None, "HTTP 500: oops"),
        (response(502), "retry", "http_5xx", None, "HTTP 502"),
        (response(301), "retry", "redirect", None, "HTTP 301: redirects are not followed"),
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


@pytest.mark.parametrize(("error", "failure", "reason"), TRANSPORT_ERRORS)
def test_classify_errors_keep_the_data(error: BaseException, failure: str, reason: str) -> None:
    outcome = classified(sink(), None, error, lines=1)
    assert (outcome.status, outcome.failure, outcome.reason) == ("retry", failure, reason)
    assert TOKEN not in outcome.reason
