"""Test receivers that check the documented wire format strictly (not "accept anything" stubs)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import stripe
from aiohttp import web

SPEC_FIELDS = [
    "id",
    "time",
    "host",
    "database_id",
    "database_name",
    "severity",
    "kind",
    "sqlstate",
    "message",
    "detail",
    "hint",
    "context",
    "statement",
    "user",
    "database",
    "application",
    "client",
    "pid",
    "duration_ms",
    "redacted",
]
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


class WireFormatError(AssertionError):
    """The sender broke the documented format."""


@dataclass
class Delivery:
    """One webhook request that passed every check."""

    delivery_id: str
    t: int
    body: dict[str, Any]
    raw: bytes
    headers: dict[str, str]

    @property
    def ids(self) -> list[int]:
        return [int(e["id"]) for e in self.body["entries"]]


# A behaviour answers one request: a status, or a coroutine that holds the response (timeouts).
Behaviour = int | Callable[[], Any]


@dataclass
class WebhookReceiver:
    """Checks SPEC 2.2 / 5.3 / 6.1 on every request; answers by a script, then 200.

    `tolerance` is passed to stripe's verify_header (None skips its age check: fake-clock tests).
    """

    secret: str = ""
    script: list[Behaviour] = field(default_factory=list)
    tolerance: int | None = 300
    deliveries: list[Delivery] = field(default_factory=list)  # every well-formed request, in order
    accepted: list[Delivery] = field(default_factory=list)  # those answered 2xx
    errors: list[str] = field(default_factory=list)  # format violations (a test fails on any)
    other_paths: list[str] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0
    _runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/hook", self._hook)
        app.router.add_route("*", "/{tail:.*}", self._elsewhere)
        # Held responses (timeout tests) are not waited for at shutdown.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _elsewhere(self, request: web.Request) -> web.Response:
        self.other_paths.append(request.path)
        return web.Response(status=200)

    def _check(self, request: web.Request, raw: bytes) -> Delivery:
        def fail(msg: str) -> WireFormatError:
            self.errors.append(msg)
            return WireFormatError(msg)

        if request.content_type != "application/json":
            raise fail(f"Content-Type {request.content_type}")
        if request.headers.get("X-Service-Event") != "logs":
            raise fail("X-Service-Event is not logs")
        header = request.headers.get("X-Service-Signature", "")
        try:
            stripe.WebhookSignature.verify_header(raw.decode(), header, self.secret, self.tolerance)
        except stripe.SignatureVerificationError as exc:
            raise fail(f"signature: {exc}") from None
        m = re.fullmatch(r"t=(\d+),v1=([0-9a-f]{64})", header)
        if not m:
            raise fail(f"signature header shape {header!r}")
        body = orjson.loads(raw)
        if list(body) != ["version", "event", "delivery_id", "sent_at", "entries"]:
            raise fail(f"body keys {list(body)}")
        if body["version"] != 1 or body["event"] != "logs":
            raise fail("version/event")
        if not re.fullmatch(r"dlv_[A-Za-z0-9_-]{8,}", body["delivery_id"]):
            raise fail(f"delivery_id {body['delivery_id']!r}")
        if request.headers.get("X-Service-Delivery") != body["delivery_id"]:
            raise fail("X-Service-Delivery differs from the body's delivery_id")
        if not RFC3339.match(body["sent_at"]):
            raise fail(f"sent_at {body['sent_at']!r}")
        entries = body["entries"]
        if not 1 <= len(entries) <= 500:
            raise fail(f"{len(entries)} entries")
        for e in entries:
            if list(e) != SPEC_FIELDS:
                raise fail(f"entry fields {list(e)}")
            if not isinstance(e["id"], str) or not e["id"].isdigit():
                raise fail(f"entry id {e['id']!r} is not a decimal string")
            if not RFC3339.match(e["time"]):
                raise fail(f"entry time {e['time']!r}")
        ids = [int(e["id"]) for e in entries]
        if ids != sorted(ids) or len(set(ids)) != len(ids):
            raise fail("entry ids not increasing")
        return Delivery(body["delivery_id"], int(m.group(1)), body, raw, dict(request.headers))

    async def _hook(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            delivery = self._check(request, raw)
        except WireFormatError as exc:
            return web.Response(status=400, text=str(exc))
        self.deliveries.append(delivery)
        self.arrived.set()
        behaviour: Behaviour = self.script.pop(0) if self.script else 200
        if callable(behaviour):
            result = await behaviour()
            if isinstance(result, web.StreamResponse):
                return result
            behaviour = 200
        if 200 <= behaviour < 300:
            self.accepted.append(delivery)
        if 300 <= behaviour < 400:
            raise web.HTTPFound(location=f"http://127.0.0.1:{self.port}/target")
        return web.Response(status=behaviour, text="scripted")

    async def wait_for_lines(self, count: int, timeout: float = 10) -> None:
        """Until the accepted requests carry `count` lines in all."""
        async with asyncio.timeout(timeout):
            while sum(len(d.ids) for d in self.accepted) < count:
                self.arrived.clear()
                await self.arrived.wait()

    async def wait_for(self, count: int, timeout: float = 10) -> None:
        """Until `count` well-formed requests arrived (the sender is another task)."""
        async with asyncio.timeout(timeout):
            while len(self.deliveries) < count:
                self.arrived.clear()
                await self.arrived.wait()
