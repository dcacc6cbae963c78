"""Malformed query parameters and request lines: a 400 naming the parameter, never a 500 or a traceback."""

from __future__ import annotations

import logging

import pytest

from tests.unit.api.conftest import Api

HUGE = "9" * 5_000  # past Python's 4,300-digit limit of int(str)
LOGS = "/v1/databases/main/logs"
GROUPS = "/v1/databases/main/logs/groups"


INT_LIMIT = "must be an integer from 1 to 500"
LINE_ID = "must be a line id"
TIME = "must be an RFC 3339 time"


@pytest.mark.parametrize(
    ("path", "params", "field", "says"),
    [
        (LOGS, {"limit": HUGE}, "limit", INT_LIMIT),
        (LOGS, {"limit": "0" * 5_000 + "501"}, "limit", INT_LIMIT),
        (LOGS, {"after": "1", "wait_seconds": HUGE}, "wait_seconds", "must be an integer from 0 to 30"),
        (LOGS, {"before": HUGE}, "before", LINE_ID),
        (LOGS, {"after": HUGE}, "after", LINE_ID),
        (LOGS, {"limit": "\u0663"}, "limit", INT_LIMIT),  # an Arabic-Indic digit: isdigit(), not ASCII
        (LOGS, {"limit": "\u00b2"}, "limit", INT_LIMIT),  # superscript two: isdigit(), but int() refuses it
        (LOGS, {"limit": " 5"}, "limit", INT_LIMIT),
        (LOGS, {"limit": "5\x00"}, "limit", INT_LIMIT),
        (LOGS, {"limit": "-1"}, "limit", INT_LIMIT),
        (LOGS, {"from": HUGE}, "from", TIME),
        (LOGS, {"from": "9999-12-31T23:59:60Z"}, "from", TIME),
        (LOGS, {"to": "0000-01-01T00:00:00Z"}, "to", TIME),
        # ISO 8601 forms that are not RFC 3339 (section 5.6): no seconds, no colon in the offset,
        # an empty fraction, a comma
        (LOGS, {"from": "2026-01-01T00:00Z"}, "from", TIME),
        (LOGS, {"from": "2026-01-01T00:00:00+0000"}, "from", TIME),
        (LOGS, {"from": "2026-01-01T00:00:00.Z"}, "from", TIME),
        (LOGS, {"from": "2026-01-01T00:00:00,5Z"}, "from", TIME),
        (LOGS, {"from": "2026-01-01T00:00:0\u0665Z"}, "from", TIME),  # a digit, not an ASCII one
        # digits after the seconds without a point; offset minutes past 59, hours past 23
        (LOGS, {"from": "2026-01-01T00:00:00123Z"}, "from", TIME),
        (LOGS, {"from": "2026-01-01T00:00:00+05:99"}, "from", TIME),
        (LOGS, {"from": "2026-01-01T00:00:00+05:60"}, "from", TIME),
        (LOGS, {"from": "2026-01-01T00:00:00+24:00"}, "from", TIME),
        # RFC 3339 times whose instant is before year 1 or after year 9999 in UTC
        (LOGS, {"from": "0001-01-01T00:00:00+01:00"}, "from", TIME),
        (LOGS, {"to": "9999-12-31T23:59:59-23:59"}, "to", TIME),
        (GROUPS, {"from": "0001-01-01T00:00:00+01:00"}, "from", TIME),
        (GROUPS, {"from": "9999-12-31T23:59:59-23:59"}, "from", TIME),
        (LOGS, {"group": "f" * 5_000}, "group", "must be a group id"),
        (LOGS, {"q": "x" * 5_000}, "q", "must be 1 to 500 characters"),
        # every word of q must occur: past 16 different ones it is refused, never cut silently
        (LOGS, {"q": " ".join(f"w{i}" for i in range(17))}, "q", "at most 16 different words"),
        (LOGS, {"kind": "x" * 5_000}, "kind", "unknown kind"),
        (GROUPS, {"limit": HUGE}, "limit", INT_LIMIT),
        (GROUPS, {"limit": "0" * 5_000}, "limit", INT_LIMIT),
        (GROUPS, {"from": HUGE}, "from", TIME),
    ],
)
async def test_malformed_parameters_are_400_naming_them(
    api: Api, caplog: pytest.LogCaptureFixture, path: str, params: dict[str, str], field: str, says: str
) -> None:
    async with api.session.get(api.url(path), params=params, headers=api.auth(api.read_only)) as resp:
        status, body = resp.status, await resp.json()
    assert (status, body["error"]["code"], body["error"]["field"]) == (400, "invalid_parameter", field)
    assert body["error"]["message"].startswith(f"{field}: ") and says in body["error"]["message"]
    assert len(body["error"]["message"]) < 300  # says what is wrong without echoing a long value
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.parametrize(
    ("given", "read_as"),
    [
        ("2016-12-31T23:59:60Z", "2017-01-01T00:00:00.000Z"),  # RFC 3339 5.7: the next second's first instant
        ("2026-01-01T10:00:00.123456789Z", "2026-01-01T10:00:00.123Z"),  # digits past microseconds dropped
        ("0001-01-01T00:00:00Z", "0001-01-01T00:00:00.000Z"),
        ("9999-12-31T23:59:59.999Z", "9999-12-31T23:59:59.999Z"),
        ("2026-01-01T10:00:00+23:59", "2025-12-31T10:01:00.000Z"),
    ],
)
async def test_the_edges_of_rfc_3339_are_times(api: Api, given: str, read_as: str) -> None:
    async with api.session.get(api.url(GROUPS), params={"from": given}, headers=api.auth(api.read_only)) as resp:
        assert resp.status == 200 and (await resp.json())["from"] == read_as


async def test_a_word_repeated_in_q_counts_once(api: Api) -> None:
    params = {"q": "deadlock " * 40 + "detected"}
    async with api.session.get(api.url(LOGS), params=params, headers=api.auth(api.read_only)) as resp:
        assert resp.status == 200


async def test_a_leap_second_is_a_time(api: Api) -> None:
    # RFC 3339 section 5.7 allows second 60: it is read as the next second's first instant.
    async with api.session.get(
        api.url(LOGS), params={"from": "2016-12-31T23:59:60Z"}, headers=api.auth(api.read_only)
    ) as resp:
        assert resp.status == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/log-destinations"),
        ("GET", "/v1/databases"),
        ("GET", "/v1/databases/main/logs/overview"),
        ("PATCH", "/v1/databases/main/logs/settings"),
        ("DELETE", "/v1/ask/conversations"),
        ("HEAD", "/v1/log-destinations"),
    ],
)
async def test_an_endpoint_without_query_parameters_refuses_one_before_acting(api: Api, method: str, path: str) -> None:
    """`DELETE /v1/ask/conversations?confirm=no` must not delete anything: a query parameter an
    endpoint does not take is a 400 naming it, as on the listings, before the handler runs."""
    headers = api.auth(api.read_write)
    async with api.session.request(method, api.url(path), params={"confirm": "no"}, headers=headers, json={}) as resp:
        status = resp.status
        body = await resp.json() if method != "HEAD" else None
    assert status == 400
    if body is not None:
        assert (body["error"]["code"], body["error"]["field"]) == ("invalid_parameter", "confirm")
    # an unknown path is still a 404
    async with api.session.get(api.url("/v1/nowhere"), params={"x": "1"}, headers=headers) as resp:
        assert resp.status == 404


def test_the_handlers_that_read_query_parameters_are_the_documented_ones() -> None:
    from typing import cast

    from forwarder.api.context import ApiContext
    from forwarder.api.openapi import operations
    from forwarder.api.server import build_app

    app = build_app(cast(ApiContext, None), pages=False)
    handlers = {(r.method.lower(), r.resource.canonical): r.handler for r in app.router.routes() if r.resource}
    documented = {(op.method, op.path): op.query is not None for op in operations()}
    marked = {key: getattr(handlers[key], "reads_query", False) for key in documented}
    assert marked == documented
