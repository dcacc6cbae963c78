"""Datadog Logs: the HTTP intake, API v2 (docs.datadoghq.com/api/latest/logs/, "Send logs").

POST https://http-intake.logs.<site>/api/v2/logs with a gzip JSON array of logs and the API key in
`DD-API-KEY`. Each log carries Datadog's reserved attributes (ddsource, service, hostname, status,
timestamp, ddtags, message) and every SPEC 2.1 field, as stored, under the one key `postgresql`
(`service` is a reserved attribute and must stay the string "postgresql": see docs/destinations.md).
"""

from __future__ import annotations

import dataclasses
import gzip
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from forwarder.model import parse_time
from forwarder.sinks._encode import fit_json, json_arrays, level, line_text
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

# "Send logs" (API v2), Overview: limits per HTTP request. "5MB" and "1MB" are read as decimal
# megabytes, the smaller reading, so a request never trips the intake's own count.
MAX_ITEMS: Final = 1000  # "Maximum array size if sending multiple logs in an array: 1000 entries"
MAX_BODY_BYTES: Final = 5_000_000  # "Maximum content size per payload (uncompressed): 5MB"
MAX_ITEM_BYTES: Final = 1_000_000  # "Maximum size for a single log: 1MB"
# The store counts a line's SPEC document; the item carries its text twice (`message` and the nested
# fields), so about 2 MB of documents fill one 5 MB request. encode splits whatever it is given.
BATCH_BYTES: Final = 2_000_000
TIMEOUT_SECONDS: Final = 30.0  # a 5 MB request with no answer by then is a failure (then retried)
GZIP_LEVEL: Final = 1  # log text compresses well at level 1, for a fraction of level 6's CPU (as for Loki)

# "Send logs": 400 "Bad request (likely an issue in the payload formatting)" and 413 "Payload too
# large (batch is above 5MB uncompressed)" say the payload itself is refused: sending it again
# cannot succeed, so its lines are dropped (counted, and the error shown), as Vector's
# datadog_logs sink does for these. 401/403 (a missing or wrong key) are retried: fixing the key
# resumes delivery with nothing lost. 408, 429 and 5xx are retried ("should be retried after some time").
REJECTED_STATUSES: Final = frozenset({400, 413})

SOURCE: Final = "postgresql"
SERVICE: Final = "postgresql"
NEST_KEY: Final = "postgresql"

Site = Literal[
    "datadoghq.com",
    "us3.datadoghq.com",
    "us5.datadoghq.com",
    "datadoghq.eu",
    "ap1.datadoghq.com",
    "ap2.datadoghq.com",
    "uk1.datadoghq.com",
    "ddog-gov.com",
    "us2.ddog-gov.com",
]


class DatadogConfig(BaseModel):
    """`config` of a datadog destination."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    site: Site = Field(
        default="datadoghq.com",
        description="The Datadog site of the organization; logs go to https://http-intake.logs.<site>/api/v2/logs.",
    )
    url: str | None = Field(
        default=None,
        min_length=1,
        max_length=2048,
        description="Full URL of the logs intake, instead of the site's (a proxy, or a new site); wins over `site`.",
    )

    @property
    def intake_url(self) -> str:
        return self.url or f"https://http-intake.logs.{self.site}/api/v2/logs"


# --- encode ---------------------------------------------------------------------------------------

# "Getting Started with Tags", Define tags: tags hold letters, digits, `_ - : . /` (anything else is
# converted to underscores), are lowercased and at most 200 characters; the Agent's normalization
# (NormalizeTag) also makes a run of underscores one and drops trailing ones, and "a tag cannot end
# with a colon". Done here so a database name with a comma cannot split `ddtags` into other tags.
_TAG_FORBIDDEN = re.compile(r"[^\w\-:./]+|_{2,}")
MAX_TAG_CHARS: Final = 200


def tag(key: str, value: str) -> str | None:
    """`key:value` as Datadog stores the tag; None when nothing of the value is left."""
    kept = _TAG_FORBIDDEN.sub("_", value.lower())[: MAX_TAG_CHARS - len(key) - 1].rstrip("_")
    return f"{key}:{kept}" if kept else None


def ddtags(fields: Mapping[str, Any]) -> str:
    # `source:service` is written as SPEC issue 5 gives it.
    tags = [tag("database", str(fields.get("database_name") or "")), tag("kind", str(fields.get("kind") or ""))]
    return ",".join(["source:service", *(t for t in tags if t is not None)])


def timestamp_ms(time_text: str) -> int:
    # "Log Date Remapper": `timestamp` is a default date attribute, and "UNIX (the milliseconds EPOCH
    # format)" a recognized format: an integer cannot be misread as another time zone.
    return parse_time(time_text) // 1000


def log_item(fields: Mapping[str, Any]) -> dict[str, Any]:
    """One Datadog log for a line's SPEC 2.1 document (id, time, ... as stored)."""
    return {
        "ddsource": SOURCE,
        "service": SERVICE,
        "hostname": fields.get("host") or "",
        "status": level(fields.get("severity")),
        "timestamp": timestamp_ms(fields["time"]),
        "ddtags": ddtags(fields),
        "message": line_text(fields),
        NEST_KEY: dict(fields),
    }


def encode_item(fields: Mapping[str, Any], max_bytes: int = MAX_ITEM_BYTES) -> bytes:
    """A log as JSON, at most `max_bytes` long: a larger one has its text cut, never dropped.

    "Send logs": a log over 1MB is accepted and truncated by the intake; cutting it here keeps the
    request within 5MB and decides which part stays (the start of each text, ending in "...").
    """
    return fit_json(fields, max_bytes, lambda cut: orjson.dumps(log_item(cut))).data


# --- send and classify ----------------------------------------------------------------------------


class DatadogSink:
    """Delivers batches to the Datadog logs intake."""

    kind: ClassVar[str] = "datadog"
    limits = BatchLimits(MAX_ITEMS, BATCH_BYTES)
    timeout_seconds = TIMEOUT_SECONDS

    def __init__(self, config: DatadogConfig, secret: str, http: HttpClient) -> None:
        self.config = config
        self._api_key = secret
        self._http = http
        self._hidden = Hidden.of_destination(config.model_dump(), secret)

    def encode(self, lines: Sequence[OutLine], delivery_id: str, now: float) -> list[Request]:
        encoded = [(line.id, encode_item(line.fields())) for line in lines]
        headers = (
            ("Content-Type", "application/json"),
            ("Content-Encoding", "gzip"),  # "Send logs": Datadog recommends sending logs compressed
            ("DD-API-KEY", self._api_key),
        )
        return [
            Request(
                ids, gzip.compress(body, compresslevel=GZIP_LEVEL, mtime=0), "POST", self.config.intake_url, headers
            )
            for ids, body in json_arrays(encoded, MAX_ITEMS, MAX_BODY_BYTES)
        ]

    async def send(self, request: Request) -> Response:
        return await self._http.send(request)

    def classify(self, request: Request, response: Response | None, error: BaseException | None) -> Outcome:
        if response is None:
            return error_outcome(error or RuntimeError("no response"))
        outcome = self._hidden.outcome(classify_status(self._hidden.response(response)))
        if response.status in REJECTED_STATUSES:
            return dataclasses.replace(outcome, status="rejected", retry_after=None)
        return outcome

    async def aclose(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"DatadogSink(url={masked_url(self.config.intake_url)!r}, api_key=<hidden>)"


def _build(config: DatadogConfig, secret: str | None, env: SinkEnv) -> Sink:
    if not secret:
        raise ValueError("a datadog destination needs its API key")
    return DatadogSink(config, secret, env.http)


register(
    SinkType(
        kind=DatadogSink.kind,
        config=DatadogConfig,
        build=_build,
        address=lambda c: url_address("url" if c.url else "site", c.intake_url),
        secret_required=True,
        secret_generated=False,
    )
)
