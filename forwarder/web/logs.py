"""The Logs pages: lines with filters, one line, the live tail, and groups.

The filters are the API's (`GET /v1/databases/{ref}/logs`), read by the same model and run by the
same store query; the page adds only what a browser form sends: empty fields mean "no filter" and
a `datetime-local` value (no offset) is a UTC time, as the form's labels say.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Coroutine
from dataclasses import replace
from typing import Any, Final, TypeVar

import orjson
from aiohttp import web
from multidict import MultiDict, MultiMapping
from pydantic import BaseModel
from yarl import URL

from forwarder.api.context import CONTEXT
from forwarder.api.errors import ApiError, bad_parameter
from forwarder.api.logs import (
    GroupsQuery,
    LogLineModel,
    LogsQuery,
    database_of,
    groups_of,
    line_query,
    parse_line_id,
    parse_params,
)
from forwarder.model import KIND_ALIASES, KINDS, format_time, group_id
from forwarder.store.lines import TEXT_FIELDS
from forwarder.web.render import page

routes = web.RouteTableDef()

PAGE_SIZE: Final = 50
# The filters a Logs page takes (the API's names); the tail takes `after` instead of `before`.
FILTERS: Final = ("kind", "q", "group", "from", "to")
PAGE_PARAMS: Final = frozenset({*FILTERS, "before"})
TAIL_PARAMS: Final = frozenset({*FILTERS, "after"})
# Lines sent per look, and how long the tail waits for one before a heartbeat comment (which also
# tells a connection the browser has dropped).
TAIL_BATCH: Final = 200
HEARTBEAT_SECONDS: Final = 15
# What <input type="datetime-local"> sends: a time without an offset (seconds optional).
LOCAL_TIME: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?")
# Shown as preformatted text on a line's page: the multi-line fields besides the message.
PREFORMATTED: Final = frozenset(TEXT_FIELDS) - {"message"}
STOPPING: Final = web.AppKey("logs_tails_stopping", asyncio.Event)

Q = TypeVar("Q", bound=BaseModel)
T = TypeVar("T")


def setup(app: web.Application) -> None:
    """Let live tails end when the daemon shuts down (aiohttp would otherwise wait for them)."""
    app[STOPPING] = asyncio.Event()

    async def stop_tails(app: web.Application) -> None:
        app[STOPPING].set()

    app.on_shutdown.append(stop_tails)


def _form_params(query: MultiMapping[str], allowed: frozenset[str], model: type[Q]) -> Q:
    """A page's query string through the API's `model`; a 400 (ApiError with `field`) names the culprit."""
    data: MultiDict[str] = MultiDict()
    for name, value in query.items():
        if name not in allowed:
            raise bad_parameter(name, f"unknown filter; use {', '.join(sorted(allowed))}")
        if value == "":  # an empty form field is no filter
            continue
        if name in ("from", "to") and (local := LOCAL_TIME.fullmatch(value)):
            # The browser leaves out zero seconds ("valid normalized local date and time string");
            # RFC 3339, which the API reads, has them always.
            value += ("" if local.group(1) else ":00") + "Z"
        data.add(name, value)
    return parse_params(data, model)


def _local(time_us: int | None) -> str:
    """A time as a datetime-local input shows it (UTC)."""
    return "" if time_us is None else format_time(time_us)[:19]


def _filters_of(query: MultiMapping[str]) -> list[tuple[str, str]]:
    """The non-empty filters of the query string, as given (for links that keep them)."""
    return [(k, v) for k, v in query.items() if k in FILTERS and v != ""]


def _kind_options() -> list[dict[str, str]]:
    aliases = [
        {"value": a, "label": f"{a} ({', '.join(k for k in KINDS if k in kinds)})"} for a, kinds in KIND_ALIASES.items()
    ]
    return aliases + [{"value": k, "label": k.replace("_", " ")} for k in KINDS]


@routes.get("/ui/databases/{ref}/logs")
async def logs(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    db = database_of(request)
    base = f"/ui/databases/{db.config.id}/logs"
    chosen = {k.strip() for v in request.query.getall("kind", []) for k in v.split(",")}
    context: dict[str, Any] = {
        "title": f"{db.config.name}: logs",
        "section": "databases",
        "db": db.config,
        "kind_options": _kind_options(),
        "chosen": chosen,
        "q": request.query.get("q", ""),
        "group": request.query.get("group", ""),
        "from_value": request.query.get("from", ""),
        "to_value": request.query.get("to", ""),
        "errors": {},
        "lines": [],
        "older": None,
        "newest": None,
        "tail_url": "",
        "base": base,
    }
    try:
        params = _form_params(request.query, PAGE_PARAMS, LogsQuery)
    except ApiError as exc:
        field = exc.field if exc.field in ("kind", "q", "from", "to") else "form"
        context["errors"] = {field: exc.message}
        return page(request, "logs.html", context, status=exc.status)
    result = await ctx.store.list_lines(db.identity.code, replace(line_query(params), limit=PAGE_SIZE))
    lines = [orjson.loads(doc) for doc in result.docs]
    filters = _filters_of(request.query)
    if result.has_more and lines:
        context["older"] = str(URL(base).with_query([*filters, ("before", lines[-1]["id"])]))
    if params.before is not None:
        context["newest"] = str(URL(base).with_query(filters))
    tail_filters = [(k, v) for k, v in filters if k not in ("from", "to")]
    tail_filters += [(k, _local(t) + "Z") for k, t in (("from", params.from_), ("to", params.to)) if t is not None]
    context.update(
        lines=lines,
        from_value=_local(params.from_) or context["from_value"],
        to_value=_local(params.to) or context["to_value"],
        # The tail starts after the newest line stored now: everything older is on this page or past it.
        tail_url=str(URL(base + "/tail").with_query([*tail_filters, ("after", str(ctx.store.head_id))])),
    )
    return page(request, "logs.html", context)


@routes.get(r"/ui/databases/{ref}/logs/{line_id:[0-9]+}")
async def line(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    db = database_of(request)
    raw = request.match_info["line_id"]
    try:
        line_no = parse_line_id(raw)
    except ValueError:
        line_no = None
    found = None if line_no is None else await ctx.store.line(db.identity.code, line_no)
    if found is None:
        raise ApiError(404, "not_found", f"no line {raw[:40]} in {db.config.name}")
    doc, key = found
    values = orjson.loads(doc)
    # The API's line fields, in its order, with its descriptions.
    fields = [
        {"name": name, "description": f.description or "", "value": values.get(name), "pre": name in PREFORMATTED}
        for name, f in LogLineModel.model_fields.items()
    ]
    context = {
        "title": f"{db.config.name}: line {raw}",
        "section": "databases",
        "db": db.config,
        "line": values,
        "fields": fields,
        "group_url": str(URL(f"/ui/databases/{db.config.id}/logs").with_query(group=group_id(key))),
    }
    return page(request, "line.html", context)


async def _unless(stopping: asyncio.Event, work: Coroutine[Any, Any, T]) -> T | None:
    """`work`'s result, or None once `stopping` is set first (then `work` is cancelled and awaited)."""
    task = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (task, stop):
            if not t.done():
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await t
    if stopping.is_set() or task.cancelled():
        return None
    return task.result()


@routes.get("/ui/databases/{ref}/logs/tail")
async def tail(request: web.Request) -> web.StreamResponse:
    """Server-sent events: each new matching line as JSON (event id = line id, so a reconnecting
    EventSource resumes after the last line it got), and a comment while idle."""
    ctx = request.app[CONTEXT]
    db = database_of(request)
    params = _form_params(request.query, TAIL_PARAMS, LogsQuery)
    after = params.after
    last_event = request.headers.get("Last-Event-ID", "")
    if last_event:
        try:
            after = parse_line_id(last_event)
        except ValueError:
            raise bad_parameter("Last-Event-ID", "must be a line id") from None
    query = replace(line_query(params), after=ctx.store.head_id if after is None else after, limit=TAIL_BATCH)
    stopping = request.app[STOPPING]
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "X-Accel-Buffering": "no"})
    await response.prepare(request)
    try:
        await response.write(b"retry: 1000\n\n")
        while not stopping.is_set() and request.transport is not None and not request.transport.is_closing():
            result = await _unless(stopping, ctx.store.tail_lines(db.identity.code, query, HEARTBEAT_SECONDS))
            if result is None:
                break
            if result.docs:
                # Oldest first, so the last event id is the newest line sent.
                events = [b"id: %d\ndata: %s\n\n" % (int(orjson.loads(d)["id"]), d) for d in reversed(result.docs)]
                await response.write(b"".join(events))
            else:
                await response.write(b": idle\n\n")
            if result.next_after is not None:
                query = replace(query, after=result.next_after)
    except ConnectionResetError:
        pass  # the browser went away
    return response


@routes.get("/ui/databases/{ref}/groups")
async def groups(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    db = database_of(request)
    params = _form_params(request.query, frozenset({"from", "limit"}), GroupsQuery)
    from_us, found = await groups_of(ctx, db, params)
    rows = [
        {
            "id": group_id(g.key),
            "kind": g.kind,
            "count": g.count,
            "first_us": g.first_us,
            "last_us": g.last_us,
            "line": orjson.loads(g.newest_doc),
        }
        for g in found
    ]
    context = {
        "title": f"{db.config.name}: groups",
        "section": "databases",
        "db": db.config,
        "from_us": from_us,
        "rows": rows,
    }
    return page(request, "groups.html", context)
