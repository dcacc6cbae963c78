"""Grafana Loki: the push API (Loki docs, "Loki HTTP API" > "Ingest logs").

POST <url>/loki/api/v1/push, `Content-Type: application/json`, `Content-Encoding: gzip`, body
`{"streams": [{"stream": {labels}, "values": [["<ns>", "<line>", {metadata}], ...]}, ...]}`.

- One stream per combination of the labels `source` ("service", as SPEC 6.2 writes it), `host`,
  `database` (database_name), `level` and `kind`: few values each, as Loki wants labels to be.
- The line is the text PostgreSQL would log (`_encode.line_text`); every other SPEC 2.1 field goes
  in the line's structured metadata, values as strings (or, with `structured_metadata: false`, for
  a Loki without it, in a JSON object that is the line).
- Pushes are cut to fit Loki's default limits (see the constants); a 400 is Loki refusing some
  entries of a push whose others it kept, so it is not retried: those lines are counted as dropped.

docs/destinations.md ("loki") has the field mapping and the limits for users.
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final

import orjson
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator

from forwarder.model import SPEC_FIELDS, parse_time
from forwarder.sinks._encode import TEXT_KEYS, cut_text, fit_json, level, line_text
from forwarder.sinks._http import classify_status, error_outcome
from forwarder.sinks.base import (
    DELIVERED,
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

PUSH_PATH: Final = "/loki/api/v1/push"

# Loki's default limits_config ("Understanding Loki configuration limits", Default ingest limits;
# pkg/validation/limits.go). Sizes there are read by c2h5oh/datasize, where KB = 1024 bytes.
LOKI_MAX_LINE_BYTES: Final = 256 * 1024  # max_line_size "256KB": a longer line is refused (line_too_long)
MAX_LABEL_VALUE_BYTES: Final = 2048  # max_label_value_length: a longer value refuses the stream
MAX_METADATA_BYTES: Final = 64 * 1024  # max_structured_metadata_size "64kb", sum of names and values
MAX_METADATA_ENTRIES: Final = 128  # max_structured_metadata_entries_count (a line has at most 13)
# Each metadata value is cut to this, so 13 of them and their names stay below 64 KiB. PostgreSQL's
# own limits keep them far shorter (names and application_name are at most 63 bytes).
MAX_METADATA_VALUE_BYTES: Final = 4096

# One push's uncompressed JSON body. Default: 1 MiB, promtail's and Alloy's default batch size,
# well below the 4 MiB gRPC message the distributor sends on to an ingester
# (grpc_server_max_recv_msg_size) and below ingestion_burst_size_mb (6 MB): a push larger than the
# burst is refused with 429 on every try, so it must never be sent.
DEFAULT_PUSH_BYTES: Final = 1024 * 1024
MAX_PUSH_BYTES: Final = 4 * 1024 * 1024

# A batch read from the store: its documents are split into pushes by encode.
MAX_LINES: Final = 2000
BATCH_BYTES: Final = 4 * 1024 * 1024
TIMEOUT_SECONDS: Final = 15.0  # per push, connect and TLS included
GZIP_LEVEL: Final = 1  # log text compresses well at level 1, for a fraction of level 6's CPU

SOURCE: Final = "service"  # the `source` label's value, as SPEC 6.2 writes it
TRUNCATED: Final = "truncated"  # metadata key present ("true") when encode cut something to fit
LINE_KEY: Final = "line"  # the text's key in a JSON line (structured_metadata: false)

# The SPEC 2.1 fields a label or the line text does not carry exactly, in SPEC order. `time` is the
# entry's timestamp; host, database_name and kind are labels; the texts are the line.
METADATA_FIELDS: Final = tuple(
    f for f in SPEC_FIELDS if f not in ("time", "host", "database_name", "kind") and f not in TEXT_KEYS
)

# Loki's multi-tenancy docs ("Manage tenant isolation", Restrictions): at most 150 bytes of these.
_TENANT_RE = re.compile(r"^[A-Za-z0-9!\-_.*'()]{1,150}$")


class LokiConfig(BaseModel):
    """`config` of a loki destination."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    url: str = Field(
        min_length=1,
        max_length=2048,
        description="Base URL of Loki (or of its gateway), e.g. https://logs-prod-012.grafana.net; "
        "lines go to <url>/loki/api/v1/push. A URL already ending in /loki/api/v1/push is used as is.",
    )
    username: str | None = Field(
        default=None,
        # `user` is the key this setting had first: stored configs and config files may still use it.
        validation_alias=AliasChoices("username", "user"),
        min_length=1,
        max_length=256,
        description="User name for HTTP basic auth (the secret is its password or token); `user` is accepted too. "
        "Without a user, a secret is sent as `Authorization: Bearer <secret>`; without a secret, no auth.",
    )
    tenant_id: str | None = Field(
        default=None,
        description="Sent as X-Scope-OrgID (a multi-tenant Loki); at most 150 of A-Z a-z 0-9 ! - _ . * ' ( ).",
    )
    structured_metadata: StrictBool = Field(
        default=True,
        description="Put the fields that are neither labels nor the line text in structured metadata "
        "(Loki 3.0 and later). false: for a Loki without it, the line is a JSON object of the text and those fields.",
    )
    max_line_bytes: StrictInt = Field(
        default=LOKI_MAX_LINE_BYTES,
        ge=1024,
        le=MAX_PUSH_BYTES,
        description="Longest line sent, in bytes (Loki's limits_config.max_line_size, 256 KiB by default); "
        "a longer line is cut, ending in '...'.",
    )
    max_push_bytes: StrictInt = Field(
        default=DEFAULT_PUSH_BYTES,
        ge=64 * 1024,
        le=MAX_PUSH_BYTES,
        description="Largest push, in bytes of JSON before compression; a batch is split into pushes of at most this.",
    )

    @field_validator("url")
    @classmethod
    def _url_shape(cls, value: str) -> str:
        if "?" in value or "#" in value:
            raise ValueError("give the base URL without a query or fragment; /loki/api/v1/push is appended")
        return value

    @field_validator("username")
    @classmethod
    def _user_shape(cls, value: str | None) -> str | None:
        # RFC 7617 section 2: a user-id containing a colon cannot be sent in basic auth.
        if value is not None and (":" in value or not value.isprintable()):
            raise ValueError("must not contain ':' or control characters")
        return value

    @field_validator("tenant_id")
    @classmethod
    def _tenant_shape(cls, value: str | None) -> str | None:
        if value is not None and (not _TENANT_RE.match(value) or value in (".", "..")):
            raise ValueError("must be 1-150 of A-Z a-z 0-9 ! - _ . * ' ( ), and not '.' or '..'")
        return value

    @property
    def push_url(self) -> str:
        base = self.url.rstrip("/")
        return base if base.endswith(PUSH_PATH) else base + PUSH_PATH


def authorization(user: str | None, secret: str | None) -> str | None:
    """The Authorization header: basic with a user (RFC 7617), bearer without one (RFC 6750), or none."""
    if user is not None:
        token = base64.b64encode(f"{user}:{secret or ''}".encode()).decode()
        return f"Basic {token}"
    if secret:
        return f"Bearer {secret}"
    return None


# --- encode ---------------------------------------------------------------------------------------

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Entry:
    """One line as a value of its stream: `["<ns>", "<line>", {metadata}]` serialized."""

    line_id: int
    labels: Labels
    ts: int
    data: bytes


def _value_text(value: Any) -> str:
    # Metadata values are strings (push API); numbers and booleans keep their JSON spelling.
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def stream_labels(fields: Mapping[str, Any]) -> tuple[Labels, bool]:
    """The line's stream labels and whether a value was cut to Loki's max_label_value_length.

    An empty value is left out: for Loki (as for Prometheus) a label with an empty value is no label.
    """
    pairs = (
        ("source", SOURCE),
        ("host", str(fields.get("host") or "")),
        ("database", str(fields.get("database_name") or "")),
        ("level", level(fields.get("severity"))),
        ("kind", str(fields.get("kind") or "other")),
    )
    labels = tuple((name, cut_text(value, MAX_LABEL_VALUE_BYTES)) for name, value in pairs if value)
    return labels, labels != tuple((name, value) for name, value in pairs if value)


def metadata(fields: Mapping[str, Any], typed: bool = False) -> tuple[dict[str, Any], bool]:
    """The METADATA_FIELDS that have a value, and whether one was cut to MAX_METADATA_VALUE_BYTES.

    As strings for structured metadata; `typed` keeps numbers and booleans as they are stored (the
    keys of a JSON line, structured_metadata: false). Null and empty values are left out
    (structured metadata are labels to Loki, see stream_labels).
    """
    out: dict[str, Any] = {}
    cut = False
    for key in METADATA_FIELDS:
        value = fields.get(key)
        if value is None or value == "":
            continue
        if typed and not isinstance(value, str):
            out[key] = value
            continue
        text = _value_text(value)
        short = cut_text(text, MAX_METADATA_VALUE_BYTES)
        cut |= short != text
        out[key] = short
    return out, cut


def timestamp_ns(time_text: str, line_id: int) -> int:
    """The entry's timestamp: the line's time (PostgreSQL logs milliseconds), plus the line id modulo
    10^6 as the sub-millisecond nanoseconds.

    Loki keeps one of two entries of a stream with the same timestamp and the same text ("Timestamp
    ordering": an exact duplicate is ignored); repeated PostgreSQL messages within one millisecond
    are common, so the id keeps them apart. A line sent again (a retry) gets the same timestamp and
    text, so Loki still drops that duplicate. The time is the timestamp cut to milliseconds.
    """
    return parse_time(time_text) // 1000 * 1_000_000 + line_id % 1_000_000


_ENVELOPE: Final = len(b'{"streams":[') + len(b"]}")


def stream_head(labels: Labels) -> bytes:
    return b'{"stream":' + orjson.dumps(dict(labels)) + b',"values":['


def stream_cost(labels: Labels) -> int:
    """Bytes a stream adds to a push besides its values: its head, `]}` and a separating comma."""
    return len(stream_head(labels)) + 2 + 1


def _entry_data(ts: int, text: str, extra: Mapping[str, Any], structured: bool) -> bytes:
    """The serialized value: `[ns, text, metadata]`, or `[ns, JSON line]` without structured metadata."""
    if structured:
        return orjson.dumps([str(ts), text, extra])
    return orjson.dumps([str(ts), orjson.dumps({LINE_KEY: text, **extra}).decode()])


def encode_entry(fields: Mapping[str, Any], line_id: int, config: LokiConfig) -> Entry:
    """A line as its stream's value, cut to fit: the line within `max_line_bytes` and the value, in a
    push of its own, within `max_push_bytes` (JSON escapes can make a line's value much longer).

    Only the text is cut (it ends in "..."), and `truncated` (metadata, or a key of a JSON line) says so.
    """
    labels, cut = stream_labels(fields)
    extra, cut_meta = metadata(fields, typed=not config.structured_metadata)
    cut |= cut_meta
    ts = timestamp_ns(str(fields["time"]), line_id)
    text = line_text(fields)
    if len(text) > config.max_line_bytes:  # characters are at least one byte: cut before serializing
        text, cut = cut_text(text, config.max_line_bytes), True
    structured = config.structured_metadata
    marked = {**extra, TRUNCATED: "true" if structured else True}

    def meta(value: Mapping[str, Any]) -> dict[str, Any]:
        return marked if cut or value[LINE_KEY] != text else extra

    def line(value: Mapping[str, Any]) -> bytes:
        return value[LINE_KEY].encode() if structured else orjson.dumps({LINE_KEY: value[LINE_KEY], **meta(value)})

    def entry(value: Mapping[str, Any]) -> bytes:
        return _entry_data(ts, value[LINE_KEY], meta(value), structured)

    keys = (LINE_KEY,)
    fitted = fit_json({LINE_KEY: text}, config.max_line_bytes, line, keys, share="bytes" if structured else "json")
    budget = config.max_push_bytes - _ENVELOPE - stream_cost(labels)
    return Entry(line_id, labels, ts, fit_json(fitted.fields, budget, entry, keys).data)


def split_pushes(entries: Sequence[Entry], max_bytes: int) -> list[list[Entry]]:
    """Entries in order, grouped so each push's body (see push_body) is at most `max_bytes`.

    A push's size is counted as its envelope, each of its streams' cost and each value plus a comma
    (one more than the body has): never less than the body. encode_entry makes one entry fit alone.
    """
    groups: list[list[Entry]] = []
    current: list[Entry] = []
    streams: set[Labels] = set()
    used = _ENVELOPE
    for entry in entries:
        cost = len(entry.data) + 1 + (0 if entry.labels in streams else stream_cost(entry.labels))
        if current and used + cost > max_bytes:
            groups.append(current)
            current, streams, used = [], set(), _ENVELOPE
            cost = len(entry.data) + 1 + stream_cost(entry.labels)
        current.append(entry)
        streams.add(entry.labels)
        used += cost
    if current:
        groups.append(current)
    return groups


def push_body(entries: Sequence[Entry]) -> bytes:
    """The push's JSON: one stream per label set (in order of first appearance), values by time.

    "Ingest logs" takes values in any order since unordered writes (Loki 2.4, the default); sorted,
    a stream's entries also suit a Loki configured with `unordered_writes: false`.
    """
    by_stream: dict[Labels, list[Entry]] = {}
    for entry in entries:
        by_stream.setdefault(entry.labels, []).append(entry)
    streams = [
        stream_head(labels) + b",".join(e.data for e in sorted(group, key=lambda e: e.ts)) + b"]}"
        for labels, group in by_stream.items()
    ]
    return b'{"streams":[' + b",".join(streams) + b"]}"


def encode_pushes(lines: Sequence[OutLine], config: LokiConfig) -> list[tuple[tuple[int, ...], bytes]]:
    """(line ids, uncompressed JSON body) of each push carrying `lines`."""
    entries = [encode_entry(line.fields(), line.id, config) for line in lines]
    return [
        (tuple(e.line_id for e in group), push_body(group)) for group in split_pushes(entries, config.max_push_bytes)
    ]


# --- classify -------------------------------------------------------------------------------------

MAX_REASON_BYTES: Final = 500

# A 400 names entries Loki refused while it kept the push's other entries: out of order or too far
# behind (ingester), too old / too new, line too long, label or metadata limits (distributor,
# pkg/validation/validate.go). Sending the push again would store its kept entries twice and be
# refused the same way, so the push's lines are counted as dropped and the reason shown.
# One 400 refuses every entry for a reason the operator fixes, and nothing is kept: structured
# metadata disallowed (Loki before 3.0, or allow_structured_metadata: false). That one is retried,
# so no line is lost while the config is fixed (structured_metadata: false here, or in Loki).
_RETRIED_400 = ("structured metadata, but this feature is disallowed",)


def _loki_text(body: bytes) -> str:
    """Loki's error text on one line, cut for the destination's `last_error`."""
    return cut_text(" ".join(body.decode("utf-8", "replace").split()), MAX_REASON_BYTES)


def classify_push(response: Response) -> Outcome:
    """2xx delivered (Loki answers 204); 400 rejected (but see _RETRIED_400); anything else retried:
    401/403 (credentials, tenant: fixing them resumes delivery), 413 (a proxy's body limit: lower
    max_push_bytes), 429 (rate or stream limits, Retry-After honoured) and 5xx."""
    if 200 <= response.status < 300:
        return DELIVERED
    if response.status == 400:
        text = _loki_text(response.body)
        reason = "HTTP 400" + (f": {text}" if text else "")
        if any(marker.encode() in response.body for marker in _RETRIED_400):
            return Outcome("retry", reason, "http_4xx")
        return Outcome("rejected", reason, "http_4xx")
    return classify_status(response)


# --- the sink -------------------------------------------------------------------------------------


class LokiSink:
    """Delivers batches to Loki's push API."""

    kind: ClassVar[str] = "loki"
    limits = BatchLimits(MAX_LINES, BATCH_BYTES)
    timeout_seconds = TIMEOUT_SECONDS

    def __init__(self, config: LokiConfig, secret: str | None, http: HttpClient) -> None:
        self.config = config
        self._http = http
        self._authorization = authorization(config.username, secret)
        self._hidden = Hidden.of_destination(config.model_dump(), secret)
        headers = [("Content-Type", "application/json"), ("Content-Encoding", "gzip")]
        if config.tenant_id:
            headers.append(("X-Scope-OrgID", config.tenant_id))
        self._headers = tuple(headers)

    def encode(self, lines: Sequence[OutLine], delivery_id: str, now: float) -> list[Request]:
        # The credential is added by send: requests (which may be logged or kept) never hold it.
        return [
            Request(
                ids,
                gzip.compress(body, compresslevel=GZIP_LEVEL, mtime=0),
                "POST",
                self.config.push_url,
                self._headers,
            )
            for ids, body in encode_pushes(lines, self.config)
        ]

    async def send(self, request: Request) -> Response:
        if self._authorization is not None:
            request = dataclasses.replace(request, headers=(*request.headers, ("Authorization", self._authorization)))
        return await self._http.send(request)

    def classify(self, request: Request, response: Response | None, error: BaseException | None) -> Outcome:
        if response is None:
            return error_outcome(error or RuntimeError("no response"))
        return self._hidden.outcome(classify_push(self._hidden.response(response)))

    async def aclose(self) -> None:
        return None

    def __repr__(self) -> str:
        secret = "<hidden>" if self._authorization else None
        return f"LokiSink(url={masked_url(self.config.push_url)!r}, username={self.config.username!r}, secret={secret})"


def _build(config: LokiConfig, secret: str | None, env: SinkEnv) -> Sink:
    # A Loki on a private network often has no auth: then there is no secret and no Authorization.
    return LokiSink(config, secret, env.http)


register(
    SinkType(
        kind=LokiSink.kind,
        config=LokiConfig,
        build=_build,
        address=lambda c: url_address("url", c.url),
        secret_required=False,
        secret_generated=False,
    )
)
