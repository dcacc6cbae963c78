"""Better Stack Logs: the HTTP REST API of a source (betterstack.com/docs/logs/http-rest-api/, "Ingesting logs").

POST https://<ingesting host>/ with a JSON array of events and `Authorization: Bearer <source token>`.
Each event is the line's SPEC 2.1 document, as stored, plus `dt` (the event time Better Stack
reads) and `level`; `message` is the SPEC message, already text with its values removed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Final, Self

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from forwarder.model import parse_time
from forwarder.sinks._encode import fit_json, json_arrays, level
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

# "Ingesting logs", Request limits: "The maximum allowed size of a single request ... is 10 MiB of
# compressed data" and "Each log record is limited to 10 MiB maximum uncompressed size". The page
# documents no Content-Encoding, so bodies go uncompressed and are held to 10 MiB as sent: below
# the request limit however it is counted, and below the 413 "The body is too large (over 20 MiB)".
MAX_BODY_BYTES: Final = 10 * 1024 * 1024
MAX_ITEM_BYTES: Final = MAX_BODY_BYTES - 2  # alone in a request, between "[" and "]"
# No limit on events per request is documented; 1000 keeps a retry of one request small.
MAX_ITEMS: Final = 1000
# Stored documents grow by `dt` and `level` (about 70 bytes each) on the way out.
BATCH_BYTES: Final = 9 * 1024 * 1024
TIMEOUT_SECONDS: Final = 30.0  # a 10 MiB request with no answer by then is a failure (then retried)

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

# A DNS host name: letters, digits and hyphens in dot-separated labels (RFC 1123 section 2.1).
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOST = re.compile(rf"{_LABEL}(?:\.{_LABEL})+")


class BetterStackConfig(BaseModel):
    """`config` of a better_stack destination: the source's ingesting host, or a full URL."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    host: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        description="The source's ingesting host (Sources > the source > Data ingestion), "
        "e.g. s1234.eu-nbg-2.betterstackdata.com; logs go to https://<host>/.",
    )
    url: str | None = Field(
        default=None,
        min_length=1,
        max_length=2048,
        description="Full URL to POST logs to, instead of https://<host>/ (a proxy); wins over `host`.",
    )

    @field_validator("host")
    @classmethod
    def _host_name(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host = value.lower()
        if not _HOST.fullmatch(host) or len(host) > 253:
            raise ValueError("must be a host name such as s1234.eu-nbg-2.betterstackdata.com (no scheme, port or path)")
        return host

    @model_validator(mode="after")
    def _host_or_url(self) -> Self:
        if self.host is None and self.url is None:
            raise ValueError("give `host` (the source's ingesting host) or `url`")
        return self

    @property
    def endpoint(self) -> str:
        return self.url or f"https://{self.host}/"


# --- encode ---------------------------------------------------------------------------------------


def event_time(time_text: str) -> str:
    """`dt`: RFC 3339 UTC with exactly six fractional digits, e.g. 2026-11-22T04:00:00.123000Z.

    "Ingesting logs", Sending timestamps: `dt` overrides the reception time and may be an RFC 3339
    string (their example: 2022-12-31T13:45:59.123456Z). The stored `time` has milliseconds.
    """
    micros = parse_time(time_text)
    dt = _EPOCH + timedelta(microseconds=micros)
    date = f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}"
    return f"{date}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}.{dt.microsecond:06d}Z"


def extra_fields(fields: Mapping[str, Any]) -> dict[str, str]:
    """What an event adds to the SPEC document: Better Stack's time and a level."""
    return {"dt": event_time(fields["time"]), "level": level(fields.get("severity"))}


def encode_event(doc: bytes, fields: Mapping[str, Any], max_bytes: int = MAX_ITEM_BYTES) -> bytes:
    """An event as JSON: the stored document (bytes as they are) with `dt` and `level` appended.

    One over `max_bytes` has its text cut (the start of each text stays, ending in "...") rather than dropped.
    """
    extra = orjson.dumps(extra_fields(fields))
    data = doc[:-1] + b"," + extra[1:]
    if len(data) <= max_bytes:
        return data
    return fit_json(fields, max_bytes, lambda cut: orjson.dumps({**cut, **extra_fields(cut)})).data


# --- send and classify ----------------------------------------------------------------------------


class BetterStackSink:
    """Delivers batches to a Better Stack source."""

    kind: ClassVar[str] = "better_stack"
    limits = BatchLimits(MAX_ITEMS, BATCH_BYTES)
    timeout_seconds = TIMEOUT_SECONDS

    def __init__(self, config: BetterStackConfig, secret: str, http: HttpClient) -> None:
        self.config = config
        self._token = secret
        self._http = http
        self._hidden = Hidden.of_destination(config.model_dump(), secret)

    def encode(self, lines: Sequence[OutLine], delivery_id: str, now: float) -> list[Request]:
        encoded = [(line.id, encode_event(line.doc, line.fields())) for line in lines]
        headers = (
            ("Content-Type", "application/json"),
            ("Authorization", f"Bearer {self._token}"),
        )
        return [
            Request(ids, body, "POST", self.config.endpoint, headers)
            for ids, body in json_arrays(encoded, MAX_ITEMS, MAX_BODY_BYTES)
        ]

    async def send(self, request: Request) -> Response:
        return await self._http.send(request)

    def classify(self, request: Request, response: Response | None, error: BaseException | None) -> Outcome:
        # "Ingesting logs", responses: 202 logged; 402 "quota or spending limit reached" and 403
        # "invalid source token" are retried like any failure, so the data waits until the plan or the
        # token is fixed (the error is shown on the destination meanwhile).
        if response is None:
            return error_outcome(error or RuntimeError("no response"))
        return self._hidden.outcome(classify_status(self._hidden.response(response)))

    async def aclose(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"BetterStackSink(url={masked_url(self.config.endpoint)!r}, token=<hidden>)"


def _build(config: BetterStackConfig, secret: str | None, env: SinkEnv) -> Sink:
    if not secret:
        raise ValueError("a better_stack destination needs its source token")
    return BetterStackSink(config, secret, env.http)


register(
    SinkType(
        kind=BetterStackSink.kind,
        config=BetterStackConfig,
        build=_build,
        address=lambda c: url_address("url" if c.url else "host", c.endpoint),
        secret_required=True,
        secret_generated=False,
    )
)
