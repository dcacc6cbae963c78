"""A strict Datadog logs intake (API v2, "Send logs") on loopback: checks every request's wire format.

Any deviation is recorded in `.errors` (a test asserts it stays empty) and answered 400, as the
intake answers a malformed payload. Well-formed requests are answered by `script` (statuses or
coroutines: Retry-After, hanging past the timeout), then 202 as Datadog does.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

import orjson
from aiohttp import web

from tests.receivers_base import RFC3339, SPEC_FIELDS, HttpReceiver, WireFormatError

PATH = "/api/v2/logs"
MAX_ITEMS = 1000
MAX_BODY_BYTES = 5_000_000
MAX_ITEM_BYTES = 1_000_000
ITEM_KEYS = {"ddsource", "service", "hostname", "status", "timestamp", "ddtags", "message", "postgresql"}
# Written out here (not imported) so the receiver checks the mapping the docs promise.
STATUS_OF = {
    "DEBUG": "debug",
    "LOG": "info",
    "INFO": "info",
    "NOTICE": "notice",
    "WARNING": "warning",
    "ERROR": "error",
    "FATAL": "critical",
    "PANIC": "critical",
}
# "A tag cannot end with a colon" (Getting Started with Tags): a database tag has a value or is absent.
DDTAGS = re.compile(r"source:service,(?:database:([\w\-:./]*[^\W_]|[\w\-:./]*[\-:./]),)?kind:([a-z_]+)")


@dataclass
class DatadogRequest:
    """One well-formed request: its logs, headers and sizes."""

    items: list[dict[str, Any]]
    headers: dict[str, str]
    body_bytes: int  # uncompressed

    @property
    def ids(self) -> list[int]:
        return [int(item["postgresql"]["id"]) for item in self.items]


@dataclass
class DatadogReceiver(HttpReceiver[DatadogRequest]):
    api_key: str = "dd-test-api-key-0123456789abcdef"

    URL_PATH: ClassVar[str] = PATH
    SUCCESS: ClassVar[int] = 202
    AUTO_DECOMPRESS: ClassVar[bool] = False  # the receiver checks the gzip body itself
    LINES_TIMEOUT: ClassVar[float] = 30

    def check(self, request: web.Request, raw: bytes) -> DatadogRequest:
        fail = self.fail
        if request.method != "POST" or request.path != PATH:
            raise fail(f"{request.method} {request.path}")
        if request.query:
            raise fail(f"query string {request.query_string!r} (ddtags belong in each log)")
        if request.headers.get("DD-API-KEY") != self.api_key:
            raise fail("DD-API-KEY missing or wrong")
        if request.content_type != "application/json":
            raise fail(f"Content-Type {request.content_type}")
        if request.headers.get("Content-Encoding") != "gzip":
            raise fail(f"Content-Encoding {request.headers.get('Content-Encoding')!r}")
        try:
            body = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise fail(f"body is not gzip: {exc}") from None
        if len(body) > MAX_BODY_BYTES:
            raise fail(f"{len(body)} bytes uncompressed")
        items = self.json_array(body, MAX_ITEMS, "logs")
        for item in items:
            self._check_item(item, fail)
        self.check_increasing([int(item["postgresql"]["id"]) for item in items], "ids within a request")
        return DatadogRequest(items, dict(request.headers), len(body))

    @staticmethod
    def _check_item(item: Any, fail: Callable[[str], WireFormatError]) -> None:
        if not isinstance(item, dict) or set(item) != ITEM_KEYS:
            raise fail(f"log keys {sorted(item) if isinstance(item, dict) else type(item)}")
        if len(orjson.dumps(item)) > MAX_ITEM_BYTES:
            raise fail(f"a log of {len(orjson.dumps(item))} bytes")
        if item["ddsource"] != "postgresql" or item["service"] != "postgresql":
            raise fail(f"ddsource/service {item['ddsource']!r}/{item['service']!r}")
        doc = item["postgresql"]
        if not isinstance(doc, dict) or list(doc) != SPEC_FIELDS:
            raise fail(f"nested fields {list(doc) if isinstance(doc, dict) else type(doc)}")
        if not isinstance(doc["id"], str) or not doc["id"].isdigit():
            raise fail(f"id {doc['id']!r} is not a decimal string")
        if not isinstance(doc["time"], str) or not RFC3339.match(doc["time"]):
            raise fail(f"time {doc['time']!r}")
        if not isinstance(item["hostname"], str) or item["hostname"] != doc["host"]:
            raise fail(f"hostname {item['hostname']!r}")
        severity = str(doc["severity"]).upper()
        expected = STATUS_OF.get("DEBUG" if severity.startswith("DEBUG") else severity, "info")
        if item["status"] != expected:
            raise fail(f"status {item['status']!r} for {doc['severity']!r}")
        ts = item["timestamp"]
        when = datetime.fromisoformat(doc["time"].replace("Z", "+00:00"))
        if not isinstance(ts, int) or isinstance(ts, bool) or ts != round(when.timestamp() * 1000):
            raise fail(f"timestamp {ts!r} for time {doc['time']!r}")
        m = DDTAGS.fullmatch(item["ddtags"]) if isinstance(item["ddtags"], str) else None
        if m is None or m.group(2) != doc["kind"] or len(f"database:{m.group(1)}") > 200 or "__" in (m.group(1) or ""):
            raise fail(f"ddtags {item['ddtags']!r}")
        message = item["message"]
        if not isinstance(message, str) or not message.startswith(f"{doc['severity']}:  "):
            raise fail(f"message {str(message)[:80]!r}")

    def answer(self, status: int) -> web.StreamResponse:
        if 200 <= status < 300:
            return web.json_response({}, status=status)
        return super().answer(status)
