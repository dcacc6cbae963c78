"""Elasticsearch and OpenSearch: the Bulk API (Elasticsearch reference "Bulk API"; OpenSearch
"Document APIs > Bulk"). Both products speak the same protocol for what is used here.

POST {url}/_bulk?filter_path=... with `Content-Type: application/x-ndjson` and, per line, a
`{"create":{"_index":<index>,"_id":"<store_id>-<line id>"}}` action and the document, every line
ending in "\\n". The `_id` is fixed per line, so a resend (after a timeout, a crash, a partial
failure) answers 409 for what is already stored, and that counts as delivered: no duplicates.

The document is the line's SPEC 2.1 fields plus `@timestamp` and `log.level`, `host` kept a string
as SPEC 2.1 gives it (see `document` for why not ECS's `host.name`). Auth: `Authorization: ApiKey
<secret>` (Elasticsearch API keys), or HTTP basic `<username>:<secret>` when `username` is set
(OpenSearch has no API keys: its security plugin authenticates internal users with basic auth;
Elasticsearch accepts both).
"""

from __future__ import annotations

import base64
import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final
from urllib.parse import urlencode, urlsplit

import orjson
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StrictInt, field_validator

from forwarder.sinks._encode import TEXT_KEYS, cut_text, fit_json, level, pack
from forwarder.sinks._http import classify_status, error_outcome
from forwarder.sinks.base import (
    DELIVERED,
    BatchLimits,
    HttpClient,
    Outcome,
    OutcomeStatus,
    OutLine,
    Request,
    Response,
    Sink,
    SinkEnv,
    url_address,
)
from forwarder.sinks.credentials import Hidden
from forwarder.sinks.registry import SinkType, register

DEFAULT_INDEX: Final = "logs-postgresql-default"
# Both products refuse a request body over `http.max_content_length`, 100mb by default (HTTP
# settings), with 413. Managed services set less: Amazon OpenSearch Service allows 10 MiB on its
# smallest instance types. 5 MiB stays under both, and Elastic's "Tune for indexing speed" advises
# bulk requests of a few megabytes to a few tens of megabytes.
DEFAULT_MAX_REQUEST_BYTES: Final = 5 * 1024 * 1024
MIN_MAX_REQUEST_BYTES: Final = 64 * 1024  # room for a cut document (see fit_document)
MAX_MAX_REQUEST_BYTES: Final = 100 * 1024 * 1024  # the http.max_content_length default
MAX_BATCH_LINES: Final = 2000
TIMEOUT_SECONDS: Final = 20.0  # per bulk request, connect and TLS included

# "Response filtering" (Elasticsearch common options; OpenSearch common REST parameters):
# `filter_path` keeps the answer to what classify reads, so a 2xx body has a known bound. Every
# item keeps `_id` and `status`, so no item is dropped from `items` by the filter (an item
# with none of the listed fields would be: see the Bulk API's filter_path example).
FILTER_PATH: Final = "errors,items.*._id,items.*.status,items.*.error.type,items.*.error.reason"
RESPONSE_BASE_BYTES: Final = 64 * 1024
RESPONSE_ITEM_BYTES: Final = 1024
REASON_BYTES: Final = 200

# Text fields cut (largest first) when one document alone is over the request limit.
CUT_FIELDS: Final = TEXT_KEYS
MIN_CUT_BYTES: Final = 64

# Index names ("Create index API", path parameters): lowercase only; none of \ / * ? " < > | space
# , # (nor `:` since 7.0); not starting with - _ +; not . or ..; at most 255 bytes. Names starting
# with `.` are hidden or system indices: refused here too.
_INDEX_FORBIDDEN: Final = frozenset('\\/*?"<>| ,#:')
MAX_INDEX_BYTES: Final = 255
# Ingest pipeline ids as Elasticsearch and OpenSearch name them (`logs@custom`, `my-pipeline.v2`).
_PIPELINE_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,254}")


def index_problem(name: str) -> str | None:
    """Why `name` is not a valid index or data stream name, or None."""
    if name in (".", ".."):
        return "cannot be . or .."
    if name.startswith("."):
        return "cannot start with . (hidden and system indices)"
    if name[:1] in ("-", "_", "+"):
        return "cannot start with -, _ or +"
    if name != name.lower():
        return "must be lowercase"
    bad = sorted({c for c in name if c in _INDEX_FORBIDDEN or not c.isprintable()})
    if bad:
        return "cannot contain " + " ".join(repr(c) for c in bad)
    if len(name.encode()) > MAX_INDEX_BYTES:
        return f"is longer than {MAX_INDEX_BYTES} bytes"
    return None


class ElasticsearchConfig(BaseModel):
    """`config` of an elasticsearch destination (Elasticsearch or OpenSearch)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    url: str = Field(
        min_length=1,
        max_length=2048,
        description="Base URL of the cluster (http(s)://host:port, with a path prefix behind a proxy); "
        "documents go to <url>/_bulk.",
    )
    index: str = Field(
        default=DEFAULT_INDEX,
        min_length=1,
        description="Data stream, index or alias to write to. The default follows Elastic's data stream "
        "naming scheme (<type>-<dataset>-<namespace>), which Elasticsearch's built-in logs-*-* template "
        "turns into a logs data stream.",
    )
    username: str | None = Field(
        default=None,
        # `user` is the key this setting had first: stored configs and config files may still use it.
        validation_alias=AliasChoices("username", "user"),
        min_length=1,
        max_length=256,
        description="With a user name: HTTP basic auth as <username>:<secret> (OpenSearch, or an Elasticsearch "
        "user); `user` is accepted too. "
        "Without: the secret is an Elasticsearch API key, sent as `Authorization: ApiKey <secret>`.",
    )
    pipeline: str | None = Field(
        default=None,
        description="Ingest pipeline to run on every document (the Bulk API's `pipeline` parameter).",
    )
    max_request_bytes: StrictInt = Field(
        default=DEFAULT_MAX_REQUEST_BYTES,
        ge=MIN_MAX_REQUEST_BYTES,
        le=MAX_MAX_REQUEST_BYTES,
        description="Largest bulk request body, in bytes; keep it at or under the cluster's "
        "http.max_content_length (100 MB by default, 10 MiB on small Amazon OpenSearch instances).",
    )

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
            raise ValueError("must be an http(s) URL such as https://es.example.com:9200")
        if parts.query or parts.fragment or "?" in url or "#" in url:
            raise ValueError("must not have a query or fragment; give the cluster's base URL")
        return url

    @field_validator("index")
    @classmethod
    def _index(cls, name: str) -> str:
        problem = index_problem(name)
        if problem:
            raise ValueError(f"index name {problem}")
        return name

    @field_validator("username")
    @classmethod
    def _user(cls, user: str | None) -> str | None:
        # RFC 7617 section 2: the user-id of basic auth cannot contain a colon.
        if user is not None and (":" in user or not user.isprintable()):
            raise ValueError("must not contain ':' or control characters")
        return user

    @field_validator("pipeline")
    @classmethod
    def _pipeline(cls, name: str | None) -> str | None:
        if name is not None and not _PIPELINE_RE.fullmatch(name):
            raise ValueError("must be a pipeline id: letters, digits, '.', '_', '@', '-' (at most 255)")
        return name

    @property
    def bulk_url(self) -> str:
        params = {"filter_path": FILTER_PATH}
        if self.pipeline:
            params["pipeline"] = self.pipeline
        return self.url.rstrip("/") + "/_bulk?" + urlencode(params, safe=",*@")


def authorization(user: str | None, secret: str) -> str:
    """The Authorization header value."""
    if user is not None:
        return "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()
    # "Create API key" answers `id`, `api_key` and `encoded` (base64 of "id:api_key"), and
    # `ApiKey <encoded>` is the header. base64 has no ':', so an "id:api_key" pair is encoded here.
    if ":" in secret:
        secret = base64.b64encode(secret.encode()).decode()
    return "ApiKey " + secret


# --- encode ---------------------------------------------------------------------------------------


def document_id(store_id: str, line_id: int) -> str:
    """`_id` of a line: the store's identity and the line id. The same line always gets the same
    `_id`, so the `create` of a resend fails with 409 instead of indexing a duplicate; the store id
    keeps two forwarders (or a store made anew) from colliding on line ids."""
    return f"{store_id}-{line_id}"


def action_line(index: str, doc_id: str) -> bytes:
    # `create`, not `index`: "Data streams support only the create action" (Bulk API,
    # prerequisites), and `create` "fails if a document with the same ID already exists".
    return orjson.dumps({"create": {"_index": index, "_id": doc_id}})


def document(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The indexed document for a line's SPEC 2.1 fields (as stored).

    - `@timestamp` (PostgreSQL's time of the entry): data streams require it ("Data streams",
      requirements) and ECS makes it mandatory ("Guidelines": the document MUST have it).
    - Every SPEC 2.1 field keeps its SPEC shape, `host` a string included (SPEC 6.2: every
      destination receives the same fields). ECS would make it `host.name`; a logsdb data stream of
      Elasticsearch 8.16/8.17 maps `host.name` for its sort and then refuses a string `host`
      (docs/destinations.md says to use another index there).
    - `log.level` is written as the nested object `{"log": {"level": ...}}`: ECS "Guidelines for
      field names" asks that documents sent through the API use nested objects, not names with
      dots. Its value is the level name of `_encode.level` (error, warning, critical, ...), not the
      raw severity: ECS calls log.level the original level, but that is kept verbatim in
      `severity`, and the normalized names are the ones Kibana colours and facets across sources.
    """
    doc: dict[str, Any] = {"@timestamp": fields["time"]}
    doc.update(fields)
    doc["log"] = {"level": level(fields.get("severity"))}
    return doc


def fit_document(doc: Mapping[str, Any], budget: int) -> bytes:
    """The document serialized in at most `budget` bytes: its longest texts are cut to one common
    length in bytes (ending in "...") until it fits. A line over the request limit is sent cut, not dropped."""
    return fit_json(doc, budget, keys=CUT_FIELDS, share="bytes", floor=MIN_CUT_BYTES).data


def bulk_entries(
    lines: Sequence[OutLine], index: str, store_id: str, max_request_bytes: int
) -> list[tuple[tuple[int, bytes], int]]:
    """((line id, action + document), exact size) per line, each within `max_request_bytes`."""
    entries: list[tuple[tuple[int, bytes], int]] = []
    for line in lines:
        action = action_line(index, document_id(store_id, line.id))
        doc = fit_document(document(line.fields()), max_request_bytes - len(action) - 2)
        entry = b"%s\n%s\n" % (action, doc)
        entries.append(((line.id, entry), len(entry)))
    return entries


def bulk_bodies(
    lines: Sequence[OutLine], index: str, store_id: str, max_request_bytes: int
) -> list[tuple[tuple[int, ...], bytes]]:
    """(line ids, NDJSON body) per request, in line order, each body at most `max_request_bytes`."""
    entries = bulk_entries(lines, index, store_id, max_request_bytes)
    groups = pack(entries, max(1, len(entries)), max_request_bytes)
    return [(tuple(i for i, _ in group), b"".join(e for _, e in group)) for group in groups]


# --- classify -------------------------------------------------------------------------------------

# Item statuses (Bulk API, response body: each item has its `status` and, on failure, an `error`
# with `type` and `reason`; "The failure of a single action does not affect the remaining actions").
# 409 to a `create` is version_conflict_engine_exception: the `_id` is already stored, by an earlier
# attempt of this line, so it counts as delivered. 429 (es_rejected_execution_exception, circuit
# breakers, the flood-stage disk block) and 5xx (unavailable shards) are the cluster being busy or
# broken: those lines are retried alone. 401, 403, 404 and 408 (no privilege on the index, a
# read-only block, no such index with auto-create off, a timeout) are the destination's setup, not
# the document: retried too, so fixing the cluster loses nothing. Any other status (400
# document_parsing_exception, mapper_parsing_exception, illegal_argument_exception: a document the
# mapping cannot take) would fail again on every attempt: those lines are dropped, counted and shown.
RETRY_ITEM_STATUSES: Final = frozenset({401, 403, 404, 408, 429})
# Some setup problems come back per item as a 400 all the same: a closed index (an operator or ILM
# closed it: IndexClosedException is BAD_REQUEST), a `pipeline` setting naming no ingest pipeline,
# an alias without a write index. Fixing the cluster or the setting makes the same documents
# welcome: retried, like the statuses above.
SETUP_ERROR_TYPES: Final = frozenset({"index_closed_exception"})
SETUP_ERROR_REASONS: Final = (
    re.compile(r"pipeline with id \[.*\] does not exist"),
    re.compile(r"no write index is defined for alias"),
)


def item_retried(status: int, error: object = None) -> bool:
    """An item failure that is the destination's setup or load, not the document (see above)."""
    if status in RETRY_ITEM_STATUSES or status >= 500:
        return True
    if not isinstance(error, Mapping):
        return False
    if error.get("type") in SETUP_ERROR_TYPES:
        return True
    reason = error.get("reason")
    return isinstance(reason, str) and any(p.search(reason) for p in SETUP_ERROR_REASONS)


def error_text(error: Any) -> str:
    """`type: reason` of an Elasticsearch error object (or its string form), cut to REASON_BYTES."""
    if isinstance(error, Mapping):
        kind, why = error.get("type"), error.get("reason")
        text = ": ".join(str(part) for part in (kind, why) if part)
    else:
        text = str(error or "")
    return cut_text(" ".join(text.split()), REASON_BYTES)


def _bad_response(why: str) -> Outcome:
    return Outcome("retry", f"unusable bulk answer: {why}", "bad_response")


def judge_bulk(line_ids: Sequence[int], doc_ids: Sequence[str], body: bytes) -> Outcome:
    """The outcome of a 2xx bulk answer for a request carrying `line_ids` (with these `_id`s)."""
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _bad_response("not JSON (or cut)")
    items = answer.get("items") if isinstance(answer, dict) else None
    if not isinstance(items, list):
        return _bad_response("no items")
    if len(items) != len(line_ids):
        return _bad_response(f"{len(items)} items for {len(line_ids)} documents")
    retry: list[int] = []
    rejected: list[int] = []
    first_retry = first_rejected = ""
    for item, line_id, doc_id in zip(items, line_ids, doc_ids, strict=True):
        result = item.get("create") if isinstance(item, dict) else None
        status = result.get("status") if isinstance(result, dict) else None
        if not isinstance(result, dict) or not isinstance(status, int) or isinstance(status, bool):
            return _bad_response("an item without a create status")
        if result.get("_id", doc_id) != doc_id:
            return _bad_response("items out of order")  # "in the same order as the actions"
        if 200 <= status < 300 or status == 409:
            continue
        described = f"{status} {error_text(result.get('error'))}".strip()
        if item_retried(status, result.get("error")):
            retry.append(line_id)
            first_retry = first_retry or described
        else:
            rejected.append(line_id)
            first_rejected = first_rejected or described
    n = len(line_ids)
    parts = []
    if retry:
        parts.append(f"{len(retry)} of {n} documents to retry ({first_retry})")
    if rejected:
        parts.append(f"{len(rejected)} of {n} documents refused for good ({first_rejected})")
    reason = "; ".join(parts)
    if retry:
        return Outcome("retry", reason, "item_retry", None, tuple(retry), tuple(rejected))
    if rejected:
        settled: OutcomeStatus = "rejected" if len(rejected) == n else "delivered"
        return Outcome(settled, reason, "item_rejected", rejected_ids=tuple(rejected))
    return DELIVERED


def judge_status(response: Response, body_bytes: int) -> Outcome:
    """A whole request answered with something else than 2xx: retried (classify_status), with
    Elasticsearch's own `type: reason` shown when the body carries one."""
    outcome = classify_status(response)
    status = response.status
    if 300 <= status < 400:
        return outcome
    try:
        answer = orjson.loads(response.body)
    except orjson.JSONDecodeError:
        answer = None
    detail = error_text(answer.get("error")) if isinstance(answer, dict) and answer.get("error") else ""
    reason = f"HTTP {status}: {detail}" if detail else outcome.reason
    if status == 413:
        reason += (
            f" (a request of {body_bytes} bytes is over the cluster's http.max_content_length:"
            " lower config.max_request_bytes)"
        )
    return dataclasses.replace(outcome, reason=reason)


# --- the sink -------------------------------------------------------------------------------------


class ElasticsearchSink:
    """Delivers batches to Elasticsearch or OpenSearch through the Bulk API."""

    kind: ClassVar[str] = "elasticsearch"
    timeout_seconds = TIMEOUT_SECONDS

    def __init__(self, config: ElasticsearchConfig, secret: str, http: HttpClient, store_id: str) -> None:
        self.config = config
        self._http = http
        self._store_id = store_id
        self._auth = authorization(config.username, secret)
        self._hidden = Hidden.of_destination(config.model_dump(), secret)
        self._url = config.bulk_url
        # A batch is read by stored bytes; encoding adds the action and a few fields per line, so
        # two thirds of the request limit makes most batches one request (encode splits the rest).
        self.limits = BatchLimits(MAX_BATCH_LINES, config.max_request_bytes * 2 // 3)

    def encode(self, lines: Sequence[OutLine], delivery_id: str, now: float) -> list[Request]:
        headers = (
            ("Content-Type", "application/x-ndjson"),
            ("Accept", "application/json"),
            ("Authorization", self._auth),
        )
        requests = []
        for ids, body in bulk_bodies(lines, self.config.index, self._store_id, self.config.max_request_bytes):
            answer_bytes = RESPONSE_BASE_BYTES + RESPONSE_ITEM_BYTES * len(ids) + len(body)
            requests.append(Request(ids, body, "POST", self._url, headers, success_body_bytes=answer_bytes))
        return requests

    async def send(self, request: Request) -> Response:
        return await self._http.send(request)

    def classify(self, request: Request, response: Response | None, error: BaseException | None) -> Outcome:
        if response is None:
            outcome = error_outcome(error or RuntimeError("no response"))
        elif 200 <= response.status < 300:
            doc_ids = [document_id(self._store_id, i) for i in request.line_ids]
            outcome = judge_bulk(request.line_ids, doc_ids, response.body)
        else:
            outcome = judge_status(self._hidden.response(response), len(request.body))
        return self._hidden.outcome(outcome)

    async def aclose(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"ElasticsearchSink(url={self.config.url!r}, index={self.config.index!r}, secret=<hidden>)"


def _build(config: ElasticsearchConfig, secret: str | None, env: SinkEnv) -> Sink:
    if not secret:
        raise ValueError("an elasticsearch destination needs its API key or password")
    return ElasticsearchSink(config, secret, env.http, env.store_id)


register(
    SinkType(
        kind=ElasticsearchSink.kind,
        config=ElasticsearchConfig,
        build=_build,
        address=lambda c: url_address("url", c.url),
        secret_required=True,
        secret_generated=False,
    )
)
