"""A strict Better Stack logs source ("Ingesting logs", HTTP REST API) on loopback.

Checks every request's wire format; a deviation is recorded in `.errors` (a test asserts it stays
empty) and answered 406 as Better Stack answers a body it cannot parse. Well-formed requests are
answered by `script` (statuses or coroutines: Retry-After, hanging past the timeout), then 202.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from aiohttp import web

from tests.receivers import RFC3339, SPEC_FIELDS, WireFormatError
from tests.receivers_datadog import STATUS_OF, Behaviour

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
class BetterStackReceiver:
    token: str = "bs-source-token-0123456789"
    script: list[Behaviour] = field(default_factory=list)
    requests: list[BetterStackRequest] = field(default_factory=list)
    accepted: list[BetterStackRequest] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0
    _runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/{tail:.*}", self._handle)
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

    def check(self, request: web.Request, raw: bytes) -> BetterStackRequest:
        def fail(msg: str) -> WireFormatError:
            self.errors.append(msg)
            return WireFormatError(msg)

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
        try:
            events = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise fail(f"body is not JSON: {exc}") from None
        if not isinstance(events, list) or not 1 <= len(events) <= MAX_ITEMS:
            raise fail(f"not an array of 1..{MAX_ITEMS} events")
        for event in events:
            self._check_event(event, fail)
        ids = [int(e["id"]) for e in events]
        if ids != sorted(ids) or len(set(ids)) != len(ids):
            raise fail("ids not increasing within a request")
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

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            received = self.check(request, raw)
        except WireFormatError as exc:
            return web.Response(status=406, text=str(exc))
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
            return web.Response(status=behaviour)
        return web.Response(status=behaviour, text="scripted")

    async def wait_for(self, count: int, timeout: float = 10) -> None:
        async with asyncio.timeout(timeout):
            while len(self.requests) < count:
                self.arrived.clear()
                await self.arrived.wait()

    async def wait_for_lines(self, count: int, timeout: float = 30) -> None:
        async with asyncio.timeout(timeout):
            while sum(len(r.events) for r in self.accepted) < count:
                self.arrived.clear()
                await self.arrived.wait()
