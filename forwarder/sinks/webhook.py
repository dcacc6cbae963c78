"""The signed log webhook (SPEC 2.2, 5.3, 6.1).

POST {url} with `{"version": 1, "event": "logs", "delivery_id", "sent_at", "entries": [...]}`,
headers X-Service-Event, X-Service-Delivery and X-Service-Signature: `t=<unix seconds>,v1=<hex
HMAC-SHA256 of "<t>.<body>">` keyed with the signing secret. A retry sends the same lines under the
same delivery_id; `t`, `sent_at` and the signature are new on each attempt.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from typing import ClassVar, Final

from pydantic import BaseModel, ConfigDict, Field

from forwarder.model import format_time
from forwarder.sinks._http import classify_status, error_outcome
from forwarder.sinks.base import (
    BatchLimits,
    HttpClient,
    Outcome,
    OutLine,
    Request,
    Response,
    Sink,
    SinkEnv,
    url_address,
)
from forwarder.sinks.credentials import Hidden, masked_url
from forwarder.sinks.registry import SinkType, register

MAX_LINES: Final = 500  # SPEC 8: at most 500 lines per batch
MAX_BYTES: Final = 10 * 1024 * 1024
TIMEOUT_SECONDS: Final = 15.0  # SPEC 6.1: a 2xx within 15 s, connect and TLS included


class WebhookConfig(BaseModel):
    """`config` of a webhook destination."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    url: str = Field(min_length=1, max_length=2048, description="The receiver's http(s) URL.")


def signature_header(secret: str, t: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), b"%d." % t + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


class WebhookSink:
    """Delivers batches to a webhook receiver."""

    kind: ClassVar[str] = "webhook"
    limits = BatchLimits(MAX_LINES, MAX_BYTES)
    timeout_seconds = TIMEOUT_SECONDS

    def __init__(self, config: WebhookConfig, secret: str, http: HttpClient) -> None:
        self.config = config
        self._secret = secret
        self._http = http
        self._hidden = Hidden.of_destination(config.model_dump(), secret)

    def encode(self, lines: Sequence[OutLine], delivery_id: str, now: float) -> list[Request]:
        body = b"".join(
            (
                b'{"version":1,"event":"logs","delivery_id":"',
                delivery_id.encode(),
                b'","sent_at":"',
                format_time(int(now * 1_000_000)).encode(),
                b'","entries":[',
                b",".join(line.doc for line in lines),
                b"]}",
            )
        )
        headers = (
            ("Content-Type", "application/json"),
            ("X-Service-Event", "logs"),
            ("X-Service-Delivery", delivery_id),
            ("X-Service-Signature", signature_header(self._secret, int(now), body)),
        )
        return [Request(tuple(line.id for line in lines), body, "POST", self.config.url, headers)]

    async def send(self, request: Request) -> Response:
        return await self._http.send(request)

    def classify(self, request: Request, response: Response | None, error: BaseException | None) -> Outcome:
        if response is None:
            return error_outcome(error or RuntimeError("no response"))
        return self._hidden.outcome(classify_status(self._hidden.response(response)))

    async def aclose(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"WebhookSink(url={masked_url(self.config.url)!r}, secret=<hidden>)"


def _build(config: WebhookConfig, secret: str | None, env: SinkEnv) -> Sink:
    if not secret:
        raise ValueError("a webhook needs its signing secret")
    return WebhookSink(config, secret, env.http)


register(
    SinkType(
        kind=WebhookSink.kind,
        config=WebhookConfig,
        build=_build,
        address=lambda c: url_address("url", c.url),
        secret_required=True,
        secret_generated=True,
    )
)
