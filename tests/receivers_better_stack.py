"""A strict Better Stack logs source ("Ingesting logs", HTTP REST API) on loopback.

Checks every request's wire format; a deviation is recorded in `.errors` (a test asserts it stays
empty) and answered 406 as Better Stack answers a body it cannot parse. Well-formed requests are
answered by `script` (statuses or coroutines: Retry-After, hanging past the timeout), then 202.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

import orjson
from aiohttp import web

from tests.receivers_base import RFC3339, SPEC_FIELDS, HttpReceiver, WireFormatError
from tests.receivers_datadog import STATUS_OF

PATH = "/"
MAX_BODY_BYTES = 10 * 1024 * 1024  # "10 MiB" per request; sent uncompressed, so counted as sent
MAX_ITEM_BYTES = 10 * 1024 * 1024  # "Each log record is limited to 10 MiB maximum uncompressed size"
MAX_ITEMS = 1000  # the forwarder's own promise (Better Stack documents none)
EVENT_KEYS = [*SPEC_FIELDS, "dt", "level"]
DT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def _micros(text: str) -> int:
    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(when.timestamp()) * 1_000_000 + when.microsecond


@dataclass
class BetterStackRequest:
    events: list[dict[str, Any]]
    headers: dict[str, str]
    body_bytes: int

    @property
    def ids(self) -> list[int]:
        return [int(e["id"]) for e in self.events]


@dataclass
class BetterStackReceiver(HttpReceiver[BetterStackRequest]):
    token: str = "bs-source-token-0123456789"

    URL_PATH: ClassVar[str] = PATH
    SUCCESS: ClassVar[int] = 202
    REFUSED: ClassVar[int] = 406
    AUTO_DECOMPRESS: ClassVar[bool] = False
    LINES_TIMEOUT: ClassVar[float] = 30

    def check(self, request: web.Request, raw: bytes) -> BetterStackRequest:
        fail = self.fail
        if request.method != "POST" or request.path != PATH or request.query:
            raise fail(f"{request.method} {request.path_qs}")
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            raise fail("Authorization is not the source token as a bearer token")
        if request.content_type != "application/json":
            raise fail(f"Content-Type {request.content_type}")
        if "Content-Encoding" in request.headers:
            raise fail(f"Content-Encoding {request.headers['Content-Encoding']!r} (not documented)")
        if len(raw) > MAX_BODY_BYTES:
            raise fail(f"{len(raw)} bytes")
        events = self.json_array(raw, MAX_ITEMS, "events")
        for event in events:
            self._check_event(event, fail)
        self.check_increasing([int(e["id"]) for e in events], "ids within a request")
        return BetterStackRequest(events, dict(request.headers), len(raw))

    @staticmethod
    def _check_event(event: Any, fail: Callable[[str], WireFormatError]) -> None:
        if not isinstance(event, dict) or list(event) != EVENT_KEYS:
            raise fail(f"event keys {list(event) if isinstance(event, dict) else type(event)}")
        if len(orjson.dumps(event)) > MAX_ITEM_BYTES:
            raise fail(f"an event of {len(orjson.dumps(event))} bytes")
        if not isinstance(event["id"], str) or not event["id"].isdigit():
            raise fail(f"id {event['id']!r} is not a decimal string")
        if not isinstance(event["time"], str) or not RFC3339.match(event["time"]):
            raise fail(f"time {event['time']!r}")
        if not isinstance(event["dt"], str) or not DT.fullmatch(event["dt"]):
            raise fail(f"dt {event['dt']!r} is not RFC 3339 UTC with microseconds")
        if _micros(event["dt"]) != _micros(event["time"]):
            raise fail(f"dt {event['dt']!r} is not time {event['time']!r}")
        severity = str(event["severity"]).upper()
        expected = STATUS_OF.get("DEBUG" if severity.startswith("DEBUG") else severity, "info")
        if event["level"] != expected:
            raise fail(f"level {event['level']!r} for {event['severity']!r}")
        if not isinstance(event["message"], str):
            raise fail(f"message {event['message']!r} is not text")
