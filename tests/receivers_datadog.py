"""A strict Datadog logs intake (API v2, "Send logs") on loopback: checks every request's wire format.

Any deviation is recorded in `.errors` (a test asserts it stays empty) and answered 400, as the
intake answers a malformed payload. Well-formed requests are answered by `script` (statuses or
coroutines: Retry-After, hanging past the timeout), then 202 as Datadog does.
"""

from __future__ import annotations

import asyncio
import gzip
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from aiohttp import web

from tests.receivers import RFC3339, SPEC_FIELDS, WireFormatError

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
DDTAGS = re.compile(r"source:service,database:([\w\-:./]*),kind:([a-z_]+)")

Behaviour = int | Callable[[], Any]


def retry_after(status: int, seconds: int) -> Callable[[], Any]:
    """A behaviour: answer `status` with a Retry-After of `seconds`."""

    async def answer() -> web.Response:
        return web.Response(status=status, headers={"Retry-After": str(seconds)}, text="slow down")

    return answer


def hang(held: asyncio.Event | None = None) -> Callable[[], Any]:
    """A behaviour: never answer (the sender must give up at its timeout)."""

    async def answer() -> None:
        if held is not None:
            held.set()
        await asyncio.Event().wait()

    return answer


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
class DatadogReceiver:
    api_key: str = "dd-test-api-key-0123456789abcdef"
    script: list[Behaviour] = field(default_factory=list)
    requests: list[DatadogRequest] = field(default_factory=list)  # every well-formed request, in order
    accepted: list[DatadogRequest] = field(default_factory=list)  # those answered 2xx
    errors: list[str] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0
    _runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # auto_decompress off: the receiver checks the gzip body itself.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5, auto_decompress=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{PATH}"

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def check(self, request: web.Request, raw: bytes) -> DatadogRequest:
        def fail(msg: str) -> WireFormatError:
            self.errors.append(msg)
            return WireFormatError(msg)

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
        try:
            items = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise fail(f"body is not JSON: {exc}") from None
        if not isinstance(items, list) or not 1 <= len(items) <= MAX_ITEMS:
            raise fail(f"not an array of 1..{MAX_ITEMS} logs")
        for item in items:
            self._check_item(item, fail)
        ids = [int(item["postgresql"]["id"]) for item in items]
        if ids != sorted(ids) or len(set(ids)) != len(ids):
            raise fail("ids not increasing within a request")
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
        if m is None or m.group(2) != doc["kind"] or len(f"database:{m.group(1)}") > 200:
            raise fail(f"ddtags {item['ddtags']!r}")
        message = item["message"]
        if not isinstance(message, str) or not message.startswith(f"{doc['severity']}:  "):
            raise fail(f"message {str(message)[:80]!r}")

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            received = self.check(request, raw)
        except WireFormatError as exc:
            return web.Response(status=400, text=str(exc))
        self.requests.append(received)
        self.arrived.set()
        behaviour: Behaviour = self.script.pop(0) if self.script else 202
        if callable(behaviour):
            result = await behaviour()
            if isinstance(result, web.StreamResponse):
                return result
            behaviour = 202
        if 200 <= behaviour < 300:
            self.accepted.append(received)
            self.arrived.set()
            return web.json_response({}, status=behaviour)
        return web.Response(status=behaviour, text="scripted")

    async def wait_for(self, count: int, timeout: float = 10) -> None:
        """Until `count` well-formed requests arrived."""
        async with asyncio.timeout(timeout):
            while len(self.requests) < count:
                self.arrived.clear()
                await self.arrived.wait()

    async def wait_for_lines(self, count: int, timeout: float = 30) -> None:
        """Until the accepted requests carry `count` lines in all."""
        async with asyncio.timeout(timeout):
            while sum(len(r.items) for r in self.accepted) < count:
                self.arrived.clear()
                await self.arrived.wait()
