"""A strict Loki push receiver: checks every push as Loki documents it, answers by a script.

What it checks (Loki docs, "Loki HTTP API" > "Ingest logs", and the default limits_config of
"Understanding Loki configuration limits"): POST /loki/api/v1/push, Content-Type application/json,
Content-Encoding gzip (or none), the auth header form, X-Scope-OrgID, the body's shape, the five
labels with valid values, values as [ns string, line string] or [.., .., {string: string}], each
stream's timestamps in order, one stream per label set, the line, label and metadata limits and
the forwarder's push size. A broken push is recorded in `.errors` and answered 400 (as Loki does).

`recover` reads a line's SPEC 2.1 fields back from labels + line + metadata, the mapping of
docs/destinations.md ("loki"), independently of forwarder/sinks/loki.py.
"""

from __future__ import annotations

import base64
import gzip
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

import orjson
from aiohttp import web

from forwarder.model import KINDS, format_time
from tests import receivers_base
from tests.receivers_base import HttpReceiver, WireFormatError

PUSH_PATH = "/loki/api/v1/push"
LABEL_NAMES = ("source", "host", "database", "level", "kind")
OPTIONAL_LABELS = {"host", "database"}  # left out when the value is empty (the test line's database)
LEVELS = {"critical", "error", "warning", "notice", "info", "debug"}
NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
NS_RE = re.compile(r"^[0-9]{1,19}$")

# Loki's defaults (limits_config), and the forwarder's documented push size.
MAX_LINE_BYTES = 256 * 1024
MAX_LABEL_VALUE_BYTES = 2048
MAX_LABEL_NAMES = 15
MAX_METADATA_BYTES = 64 * 1024
MAX_METADATA_ENTRIES = 128
MAX_PUSH_BYTES = 1024 * 1024

TEXT_LABELS = (("detail", "DETAIL"), ("hint", "HINT"), ("context", "CONTEXT"), ("statement", "STATEMENT"))
_PART_RE = re.compile(r"\n(DETAIL|HINT|CONTEXT|STATEMENT):  ")
_PART_KEYS = {label: key for key, label in TEXT_LABELS}


@dataclass
class Entry:
    """One value of a stream."""

    labels: dict[str, str]
    ts: int
    line: str
    metadata: dict[str, str] | None

    @property
    def id(self) -> int:
        if self.metadata is not None:
            return int(self.metadata["id"])
        return int(orjson.loads(self.line)["id"])


@dataclass
class Push:
    """One push that passed every check."""

    headers: dict[str, str]
    size: int  # bytes of JSON before compression
    body: dict[str, Any]
    entries: list[Entry]

    @property
    def ids(self) -> list[int]:
        return [e.id for e in self.entries]


# A behaviour answers one push: a status, or a coroutine given the push (a held answer: timeouts).
Behaviour = int | Callable[[Push], Awaitable[web.StreamResponse | None]]


def out_of_order(ignored: int | None = None) -> Behaviour:
    """A 400 as Loki's ingester writes it when it ignored entries of a push (and kept the others)."""

    async def answer(push: Push) -> web.StreamResponse:
        first = push.entries[0]
        when = datetime.fromtimestamp(first.ts / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S +0000 UTC")
        stream = "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(first.labels.items())) + "}"
        n = len(push.entries) if ignored is None else ignored
        text = (
            f"entry with timestamp {when} ignored, reason: 'entry out of order',\n"
            f"user 'fake', total ignored: {n} out of {len(push.entries)} for stream: {stream}"
        )
        return web.Response(status=400, text=text)

    return answer


def retry_after(status: int, seconds: int) -> Behaviour:
    """A 429 (or `status`) as Loki's distributor answers one over the ingestion rate."""
    return receivers_base.retry_after(status, seconds, "Ingestion rate limit exceeded")


@dataclass
class LokiReceiver(HttpReceiver[Push]):
    """Checks every push; answers by `script`, then 204 (Loki's success)."""

    user: str | None = None
    secret: str | None = None
    tenant_id: str | None = None
    allow_structured_metadata: bool = True  # False: answer 400 as a Loki without structured metadata
    structured_metadata: bool = True  # what the sender is configured to send
    max_push_bytes: int = MAX_PUSH_BYTES
    max_line_bytes: int = MAX_LINE_BYTES
    other_requests: list[str] = field(default_factory=list)

    URL_PATH: ClassVar[str] = ""  # `url` is the base URL: the sender appends /loki/api/v1/push
    SUCCESS: ClassVar[int] = 204
    AUTO_DECOMPRESS: ClassVar[bool] = False  # the body is checked as sent (gzip), not as aiohttp decodes it

    @property
    def pushes(self) -> list[Push]:
        """Every well-formed push, in order."""
        return self.requests

    def add_routes(self, app: web.Application) -> None:
        app.router.add_route("*", PUSH_PATH, self.handle)
        app.router.add_route("*", "/{tail:.*}", self._elsewhere)

    async def _elsewhere(self, request: web.Request) -> web.Response:
        self.other_requests.append(f"{request.method} {request.path}")
        return web.Response(status=404, text="404 page not found")

    @property
    def accepted_ids(self) -> list[int]:
        return [i for p in self.accepted for i in p.ids]

    def accepted_entries(self) -> list[Entry]:
        return [e for p in self.accepted for e in p.entries]

    # --- checks -------------------------------------------------------------------------------

    def _expected_auth(self) -> str | None:
        if self.user is not None:
            return "Basic " + base64.b64encode(f"{self.user}:{self.secret or ''}".encode()).decode()
        return f"Bearer {self.secret}" if self.secret else None

    def check(self, request: web.Request, raw: bytes) -> Push:
        fail = self.fail
        if request.method != "POST" or request.path != PUSH_PATH:
            raise fail(f"{request.method} {request.path}")
        if request.content_type != "application/json":
            raise fail(f"Content-Type {request.content_type}")
        if request.headers.get("Authorization") != self._expected_auth():
            raise fail("Authorization header is not the expected form")
        if request.headers.get("X-Scope-OrgID") != self.tenant_id:
            raise fail(f"X-Scope-OrgID {request.headers.get('X-Scope-OrgID')!r}")
        encoding = request.headers.get("Content-Encoding", "")
        if encoding == "gzip":
            try:
                data = gzip.decompress(raw)
            except (OSError, EOFError) as exc:
                raise fail(f"gzip: {exc}") from None
        elif encoding == "":
            data = raw
        else:
            raise fail(f"Content-Encoding {encoding!r}")
        body, entries = self.check_body(data)
        return Push(dict(request.headers), len(data), body, entries)

    def check_body(self, data: bytes) -> tuple[dict[str, Any], list[Entry]]:
        """The push body's checks (also used without HTTP by the limit tests)."""
        fail = self.fail
        if len(data) > self.max_push_bytes:
            raise fail(f"push of {len(data)} bytes over {self.max_push_bytes}")
        try:
            body = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise fail(f"JSON: {exc}") from None
        if not isinstance(body, dict) or list(body) != ["streams"]:
            raise fail("body is not {'streams': [...]}")
        streams = body["streams"]
        if not isinstance(streams, list) or not streams:
            raise fail("streams is not a non-empty array")
        entries: list[Entry] = []
        seen: set[tuple[tuple[str, str], ...]] = set()
        for s in streams:
            if not isinstance(s, dict) or sorted(s) != ["stream", "values"]:
                raise fail(f"stream keys {list(s) if isinstance(s, dict) else s!r}")
            labels = s["stream"]
            self._check_labels(labels, fail)
            key = tuple(sorted(labels.items()))
            if key in seen:
                raise fail(f"two streams with labels {labels}")
            seen.add(key)
            values = s["values"]
            if not isinstance(values, list) or not values:
                raise fail("values is not a non-empty array")
            last = -1
            for v in values:
                entry = self._check_value(labels, v, fail)
                if entry.ts < last:
                    raise fail(f"stream {labels}: timestamps not in order")
                last = entry.ts
                entries.append(entry)
        return body, entries

    def _check_labels(self, labels: Any, fail: Callable[[str], WireFormatError]) -> None:
        if not isinstance(labels, dict) or not labels:
            raise fail(f"stream labels {labels!r}")
        names = set(labels)
        if not names <= set(LABEL_NAMES) or not set(LABEL_NAMES) - OPTIONAL_LABELS <= names:
            raise fail(f"label names {sorted(names)}")
        if len(names) > MAX_LABEL_NAMES:
            raise fail("too many labels")
        for name, value in labels.items():
            if not NAME_RE.match(name):
                raise fail(f"label name {name!r}")
            if not isinstance(value, str) or not value or len(value.encode()) > MAX_LABEL_VALUE_BYTES:
                raise fail(f"label {name} value {str(value)[:50]!r}")
        if labels["source"] != "service":
            raise fail(f"source label {labels['source']!r}")
        if labels["level"] not in LEVELS:
            raise fail(f"level label {labels['level']!r}")
        if labels["kind"] not in KINDS:
            raise fail(f"kind label {labels['kind']!r}")

    def _check_value(self, labels: dict[str, str], v: Any, fail: Callable[[str], WireFormatError]) -> Entry:
        if not isinstance(v, list) or len(v) not in (2, 3):
            raise fail(f"value is not [ts, line] or [ts, line, {{metadata}}]: {str(v)[:80]}")
        ts, line = v[0], v[1]
        if not isinstance(ts, str) or not NS_RE.match(ts):
            raise fail(f"timestamp {ts!r} is not nanoseconds as a string")
        if not isinstance(line, str):
            raise fail("line is not a string")
        if len(line.encode()) > self.max_line_bytes:
            raise fail(f"line of {len(line.encode())} bytes over max_line_size")
        meta: dict[str, str] | None = None
        if len(v) == 3:
            meta = v[2]
            if not isinstance(meta, dict):
                raise fail("structured metadata is not an object")
            if len(meta) > MAX_METADATA_ENTRIES:
                raise fail("too many structured metadata entries")
            size = 0
            for k, val in meta.items():
                if not NAME_RE.match(k) or not isinstance(val, str):
                    raise fail(f"metadata {k!r}: {val!r} is not a name and a string")
                size += len(k.encode()) + len(val.encode())
            if size > MAX_METADATA_BYTES:
                raise fail(f"structured metadata of {size} bytes")
            if "id" not in meta:
                raise fail("metadata without id")
        elif self.structured_metadata:
            raise fail("no structured metadata")
        if not self.structured_metadata:
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                raise fail("line is not JSON") from None
            if not isinstance(obj, dict) or "line" not in obj or "id" not in obj:
                raise fail("JSON line without line or id")
        return Entry(labels, int(ts), line, meta)

    # --- answering ----------------------------------------------------------------------------

    async def respond(self, push: Push) -> web.StreamResponse:
        if not self.allow_structured_metadata and any(e.metadata for e in push.entries):
            labels = push.entries[0].labels
            return web.Response(
                status=400,
                text=f"stream '{labels}' includes structured metadata, but this feature is disallowed. Please see "
                "`limits_config.allow_structured_metadata` or contact your Loki administrator to enable it.",
            )
        return await super().respond(push)

    async def perform(self, behaviour: Callable[..., Any], push: Push) -> web.StreamResponse | None:
        return await behaviour(push)  # type: ignore[no-any-return]


# --- reading the fields back ----------------------------------------------------------------------


def split_text(text: str, severity: str) -> dict[str, str | None]:
    """message, detail, hint, context and statement from the line text (`SEVERITY:  message`, then
    `\\nDETAIL:  `, `\\nHINT:  `, `\\nCONTEXT:  `, `\\nSTATEMENT:  ` parts, each at most once, in order)."""
    head = f"{severity or 'LOG'}:  "
    if not text.startswith(head):
        raise WireFormatError(f"line does not start with {head!r}")
    pieces = _PART_RE.split(text[len(head) :])
    out: dict[str, str | None] = {
        "message": pieces[0],
        "detail": None,
        "hint": None,
        "context": None,
        "statement": None,
    }
    for label, value in zip(pieces[1::2], pieces[2::2], strict=True):
        out[_PART_KEYS[label]] = value
    return out


def recover(entry: Entry, structured: bool = True) -> dict[str, Any]:
    """The SPEC 2.1 fields of a line, in SPEC order, from its labels, timestamp, line and metadata."""
    if structured:
        assert entry.metadata is not None
        meta: dict[str, Any] = dict(entry.metadata)
        text = entry.line

        def typed(key: str) -> Any:
            return orjson.loads(meta[key]) if key in meta else None

    else:
        meta = orjson.loads(entry.line)
        text = meta.pop("line")

        def typed(key: str) -> Any:
            return meta.get(key)

    severity = meta["severity"]
    parts = split_text(text, severity)
    return {
        "id": meta["id"],
        "time": format_time(entry.ts // 1000),  # nanoseconds -> microseconds; shown in milliseconds
        "host": entry.labels.get("host", ""),
        "database_id": meta.get("database_id", ""),
        "database_name": entry.labels.get("database", ""),
        "severity": severity,
        "kind": entry.labels["kind"],
        "sqlstate": meta.get("sqlstate"),
        "message": parts["message"],
        "detail": parts["detail"],
        "hint": parts["hint"],
        "context": parts["context"],
        "statement": parts["statement"],
        "user": meta.get("user"),
        "database": meta.get("database"),
        "application": meta.get("application"),
        "client": meta.get("client"),
        "pid": typed("pid"),
        "duration_ms": typed("duration_ms"),
        "redacted": typed("redacted"),
    }
