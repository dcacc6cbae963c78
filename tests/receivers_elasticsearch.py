"""A strict Elasticsearch / OpenSearch Bulk API receiver for destination tests.

It checks what a real cluster would refuse (and what our documented shape promises), keeps the
documents by (_index, _id) and answers like Elasticsearch: `create` of an existing `_id` is a 409
version_conflict_engine_exception item, the answer is `{"took", "errors", "items"}` with each item
under `create`, and `filter_path` is applied the way the "Response filtering" option does.
Format problems are recorded in `.errors` (a test fails on any) and answered 400.
"""

from __future__ import annotations

import asyncio
import base64
import fnmatch
import itertools
import re
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import orjson
from aiohttp import web

from forwarder.model import KINDS
from tests.harness import wait_until
from tests.receivers_base import RFC3339, SPEC_FIELDS, HttpReceiver, WireFormatError

DEFAULT_INDEX: Final = "logs-postgresql-default"
DOC_FIELDS: Final = ["@timestamp", *SPEC_FIELDS, "log"]
LEVELS: Final = {"debug", "info", "notice", "warning", "error", "critical"}
MAX_ID_BYTES: Final = 512  # both products refuse a longer _id
# Checked one by one in _check_doc; every other SPEC 2.1 field is a string or null.
_TYPED: Final = {"id", "time", "host", "database_id", "database_name", "severity", "kind", "message"}
_STR_OR_NULL: Final = [f for f in SPEC_FIELDS if f not in _TYPED | {"pid", "duration_ms", "redacted"}]

# A whole-request behaviour: a status (answered with an Elasticsearch error body, nothing stored),
# "hang" (never answers, nothing stored) or "store_then_hang" (stores, then never answers: the
# answer was lost, as when a timeout cuts a request the cluster had processed).
Whole = int | Literal["hang", "store_then_hang"]

_ERRORS: Final = {
    400: (
        "document_parsing_exception",
        "[1:27] failed to parse field [pid] of type [long] in document with id '{id}'.",
    ),
    409: (
        "version_conflict_engine_exception",
        "[{id}]: version conflict, document already exists (current version [1])",
    ),
    429: (
        "es_rejected_execution_exception",
        "rejected execution of coordinating operation [coordinating_and_primary_bytes=0, replica_bytes=0, "
        "all_bytes=0, coordinating_operation_bytes=1, max_coordinating_and_primary_bytes=1]",
    ),
    503: ("unavailable_shards_exception", "[{index}][0] primary shard is not active Timeout: [1m]"),
}


class BodyTooLarge(WireFormatError):
    """A body over http.max_content_length: answered 413, as the cluster does."""


@dataclass
class BulkCall:
    """One well-formed bulk request and how each of its items was answered."""

    ids: list[int]
    doc_ids: list[str]
    docs: list[dict[str, Any]]
    statuses: list[int]
    raw: bytes
    query: dict[str, str]
    headers: dict[str, str]


def filter_response(value: Any, filter_path: str) -> Any:
    """`value` reduced to the paths of `filter_path` (comma-separated, `*` matching one name);
    objects left empty disappear, also from arrays, as Elasticsearch does."""
    patterns = [p.split(".") for p in filter_path.split(",") if p]
    kept = _filter(value, patterns)
    return {} if kept is _MISSING else kept


_MISSING: Final = object()


def _filter(value: Any, patterns: list[list[str]]) -> Any:
    if isinstance(value, list):
        kept = [k for k in (_filter(v, patterns) for v in value) if k is not _MISSING]
        return kept or _MISSING
    if not isinstance(value, dict):
        return _MISSING  # a leaf where a pattern still goes deeper
    out: dict[str, Any] = {}
    for key, sub in value.items():
        whole = False
        deeper = []
        for p in patterns:
            if fnmatch.fnmatchcase(key, p[0]):
                if len(p) == 1:
                    whole = True
                else:
                    deeper.append(p[1:])
        if whole:
            out[key] = sub
        elif deeper:
            kept = _filter(sub, deeper)
            if kept is not _MISSING:
                out[key] = kept
    return out or _MISSING


@dataclass
class ElasticsearchReceiver(HttpReceiver[BulkCall]):
    """`POST /_bulk` checked strictly; answers by `script` (whole requests: `Whole`), `item_script`
    (a line's next attempts, one status each) and `item_always` (every attempt), else stores each
    document."""

    index: str = DEFAULT_INDEX
    api_key: str | None = None  # expects `Authorization: ApiKey <api_key>`
    user: str | None = None  # with `password`: expects basic auth
    password: str | None = None
    pipeline: str | None = None  # the `pipeline` parameter every request must carry
    max_body_bytes: int = 100 * 1024 * 1024  # http.max_content_length
    item_script: dict[int, list[int]] = field(default_factory=dict)
    item_always: dict[int, int] = field(default_factory=dict)
    stored: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    other_paths: list[str] = field(default_factory=list)
    held: asyncio.Event = field(default_factory=asyncio.Event)
    id_prefix: str | None = None  # "<store id>-", learned from the first request
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    @property
    def calls(self) -> list[BulkCall]:
        """Every well-formed request, in order."""
        return self.requests

    def client_max_size(self) -> int:
        return self.max_body_bytes * 2

    def add_routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/_bulk", self.handle)
        app.router.add_route("*", "/{tail:.*}", self._elsewhere)

    def stored_by_line(self) -> dict[int, dict[str, Any]]:
        return {int(doc["id"]): doc for doc in self.stored.values()}

    async def _elsewhere(self, request: web.Request) -> web.Response:
        self.other_paths.append(f"{request.method} {request.path}")
        return _error(404, "no_handler_found_exception", f"no handler found for uri [{request.path}]")

    # --- checks -------------------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        if self.user is not None:
            expected = "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        else:
            expected = f"ApiKey {self.api_key}"
        return header == expected

    def check(self, request: web.Request, raw: bytes) -> BulkCall:
        if len(raw) > self.max_body_bytes:
            msg = f"a body of {len(raw)} bytes is over {self.max_body_bytes}"
            self.errors.append(msg)
            raise BodyTooLarge(msg)
        if request.method != "POST":
            raise self.fail(f"method {request.method}")
        if request.content_type != "application/x-ndjson":
            raise self.fail(f"Content-Type {request.content_type}")
        query = dict(request.query)
        if self.pipeline is not None and query.get("pipeline") != self.pipeline:
            raise self.fail(f"pipeline {query.get('pipeline')!r}")
        if not raw.endswith(b"\n"):
            raise self.fail("the body does not end with a newline")
        lines = raw[:-1].split(b"\n")
        if len(lines) % 2 or not lines:
            raise self.fail(f"{len(lines)} lines: not action/document pairs")
        ids: list[int] = []
        doc_ids: list[str] = []
        docs: list[dict[str, Any]] = []
        for action_raw, doc_raw in zip(lines[0::2], lines[1::2], strict=True):
            doc_id = self._check_action(action_raw)
            doc = self._check_doc(doc_raw)
            prefix = doc_id[: -len(doc["id"])]
            if not doc_id.endswith("-" + doc["id"]) or not re.fullmatch(r"[0-9a-f]{16}-", prefix):
                raise self.fail(f"_id {doc_id!r} is not <store id>-<line id> for line {doc['id']}")
            if self.id_prefix is None:
                self.id_prefix = prefix
            elif prefix != self.id_prefix:
                raise self.fail(f"_id prefix {prefix!r} changed from {self.id_prefix!r}")
            ids.append(int(doc["id"]))
            doc_ids.append(doc_id)
            docs.append(doc)
        return BulkCall(ids, doc_ids, docs, [], raw, query, dict(request.headers))

    def _check_action(self, raw: bytes) -> str:
        try:
            action = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise self.fail(f"action line is not JSON: {raw[:80]!r}") from None
        if not isinstance(action, dict) or list(action) != ["create"]:
            raise self.fail(f"action {raw[:80]!r} is not a create")
        meta = action["create"]
        if not isinstance(meta, dict) or sorted(meta) != ["_id", "_index"]:
            raise self.fail(f"create metadata {meta!r}")
        if meta["_index"] != self.index:
            raise self.fail(f"_index {meta['_index']!r}")
        doc_id = meta["_id"]
        if not isinstance(doc_id, str) or not doc_id or len(doc_id.encode()) > MAX_ID_BYTES:
            raise self.fail(f"_id {doc_id!r}")
        return doc_id

    def _check_doc(self, raw: bytes) -> dict[str, Any]:
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise self.fail(f"document is not JSON: {raw[:80]!r}") from None
        if not isinstance(doc, dict) or list(doc) != DOC_FIELDS:
            raise self.fail(f"document fields {list(doc) if isinstance(doc, dict) else type(doc)}")
        problems = []
        if not isinstance(doc["id"], str) or not doc["id"].isdigit():
            problems.append(f"id {doc['id']!r}")
        if not isinstance(doc["time"], str) or not RFC3339.match(doc["time"]):
            problems.append(f"time {doc['time']!r}")
        if doc["@timestamp"] != doc["time"]:
            problems.append("@timestamp differs from time")
        host = doc["host"]
        if not isinstance(host, str):
            problems.append(f"host {host!r} is not a string (SPEC 2.1)")
        for key in ("database_id", "database_name", "severity", "message"):
            if not isinstance(doc[key], str):
                problems.append(f"{key} {doc[key]!r}")
        if doc["kind"] not in KINDS:
            problems.append(f"kind {doc['kind']!r}")
        for key in _STR_OR_NULL:
            if doc[key] is not None and not isinstance(doc[key], str):
                problems.append(f"{key} {doc[key]!r}")
        if doc["pid"] is not None and (not isinstance(doc["pid"], int) or isinstance(doc["pid"], bool)):
            problems.append(f"pid {doc['pid']!r}")
        duration = doc["duration_ms"]
        if duration is not None and (not isinstance(duration, int | float) or isinstance(duration, bool)):
            problems.append(f"duration_ms {duration!r}")
        if not isinstance(doc["redacted"], bool):
            problems.append(f"redacted {doc['redacted']!r}")
        log = doc["log"]
        if not isinstance(log, dict) or list(log) != ["level"] or log["level"] not in LEVELS:
            problems.append(f"log {log!r}")
        if problems:
            raise self.fail(f"document {doc.get('id')!r}: " + "; ".join(problems))
        return doc

    # --- answering ----------------------------------------------------------------------------

    def _backing(self) -> str:
        return f".ds-{self.index}-2026.01.01-000001" if self.index.startswith("logs-") else self.index

    def _item(self, line_id: int, doc_id: str, doc: dict[str, Any], store: bool) -> tuple[int, dict[str, Any]]:
        key = (self.index, doc_id)
        scripted = self.item_script.get(line_id)
        if line_id in self.item_always:
            status = self.item_always[line_id]
        elif scripted:
            status = scripted.pop(0)
        elif key in self.stored:
            status = 409
        else:
            status = 201
            if store:
                self.stored[key] = doc
        index = self._backing()
        if status == 201:
            item = {
                "_index": index,
                "_id": doc_id,
                "_version": 1,
                "result": "created",
                "_shards": {"total": 2, "successful": 1, "failed": 0},
                "_seq_no": next(self._seq),
                "_primary_term": 1,
                "status": 201,
            }
        else:
            kind, reason = _ERRORS.get(status, ("exception", "scripted"))
            error = {
                "type": kind,
                "reason": reason.format(id=doc_id, index=index),
                "index_uuid": "aAsFqTI0Tc2W0LCWgPNrOA",
                "shard": "0",
                "index": index,
            }
            item = {"_index": index, "_id": doc_id, "status": status, "error": error}
        return status, {"create": item}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request):
            self.errors.append("wrong or missing Authorization")
            resp = _error(401, "security_exception", "missing authentication credentials for REST request [/_bulk]")
            resp.headers["WWW-Authenticate"] = 'ApiKey, Basic realm="security" charset="UTF-8"'
            return resp
        return await super().handle(request)

    def refuse(self, exc: WireFormatError) -> web.StreamResponse:
        if isinstance(exc, BodyTooLarge):
            return web.Response(status=413)
        return _error(400, "illegal_argument_exception", str(exc))

    async def respond(self, call: BulkCall) -> web.StreamResponse:
        behaviour: Whole = self.script.pop(0) if self.script else 200
        if behaviour == "hang" or behaviour == "store_then_hang":
            if behaviour == "store_then_hang":
                for line_id, doc_id, doc in zip(call.ids, call.doc_ids, call.docs, strict=True):
                    call.statuses.append(self._item(line_id, doc_id, doc, store=True)[0])
            self.held.set()
            await asyncio.Event().wait()
        assert isinstance(behaviour, int)
        if behaviour != 200:
            return _error(behaviour, _ERRORS.get(behaviour, ("exception",))[0], "scripted")
        items = []
        for line_id, doc_id, doc in zip(call.ids, call.doc_ids, call.docs, strict=True):
            status, item = self._item(line_id, doc_id, doc, store=True)
            call.statuses.append(status)
            items.append(item)
        answer: dict[str, Any] = {"took": 3, "errors": any(s >= 300 for s in call.statuses), "items": items}
        if "filter_path" in call.query:
            answer = filter_response(answer, call.query["filter_path"])
        return web.json_response(answer, dumps=lambda v: orjson.dumps(v).decode())

    # --- waiting ------------------------------------------------------------------------------

    async def wait_for_stored(self, count: int, timeout: float = 30) -> None:
        await wait_until(self.arrived, lambda: len(self.stored) >= count, timeout)


def _error(status: int, kind: str, reason: str) -> web.Response:
    """An Elasticsearch error answer (`{"error": {...}, "status": ...}`)."""
    error = {"root_cause": [{"type": kind, "reason": reason}], "type": kind, "reason": reason}
    return web.json_response({"error": error, "status": status}, status=status)
