"""Test receivers that check the documented wire format strictly (not "accept anything" stubs)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson
import stripe
from aiohttp import web

from tests.receivers_base import RFC3339, SPEC_FIELDS, HttpReceiver


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


@dataclass
class WebhookReceiver(HttpReceiver[Delivery]):
    """Checks SPEC 2.2 / 5.3 / 6.1 on every request; answers by a script, then 200.

    `tolerance` is passed to stripe's verify_header (None skips its age check: fake-clock tests).
    """

    secret: str = ""
    tolerance: int | None = 300
    other_paths: list[str] = field(default_factory=list)

    URL_PATH: ClassVar[str] = "/hook"

    @property
    def deliveries(self) -> list[Delivery]:
        """Every well-formed request, in order."""
        return self.requests

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post(self.URL_PATH, self.handle)
        app.router.add_route("*", "/{tail:.*}", self._elsewhere)

    async def _elsewhere(self, request: web.Request) -> web.Response:
        self.other_paths.append(request.path)
        return web.Response(status=200)

    def check(self, request: web.Request, raw: bytes) -> Delivery:
        fail = self.fail
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
        self.check_increasing([int(e["id"]) for e in entries], "entry ids")
        return Delivery(body["delivery_id"], int(m.group(1)), body, raw, dict(request.headers))

    def answer(self, status: int) -> web.StreamResponse:
        if 300 <= status < 400:
            raise web.HTTPFound(location=f"http://127.0.0.1:{self.port}/target")
        return web.Response(status=status, text="scripted")
