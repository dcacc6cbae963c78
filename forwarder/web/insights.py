"""The Queries and Findings pages of a database, and applying a finding's fix.

They read through the API's own functions (forwarder/api/insights.py) and apply a fix through the
same use case as `POST /v1/databases/{ref}/fixes`, so a page never shows what the API would not.
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson
from aiohttp import web
from markupsafe import Markup, escape
from yarl import URL

from forwarder.api.context import CONTEXT, DatabaseView
from forwarder.api.errors import ApiError
from forwarder.api.fixes import run_fix
from forwarder.api.insights import (
    FindingsQuery,
    FindingView,
    QueriesQuery,
    QueryDetail,
    QueryWindow,
    finding_detail,
    finding_list,
    insights_of,
    query_detail,
    query_list,
)
from forwarder.api.logs import database_of, hex_path_id, parse_query
from forwarder.insights.queries import SORTS
from forwarder.model import group_id, group_key, parse_time
from forwarder.store.lines import LineQuery
from forwarder.usecases import fixes as cases
from forwarder.web.databases import principal
from forwarder.web.render import page

routes = web.RouteTableDef()

EXAMPLE_LINES: Final = 10
# Sortable columns of the queries table: (sort key, heading); the other columns are not orders.
SORT_COLUMNS: Final = (("calls", "Calls"), ("total", "Total ms"), ("mean", "Mean ms"), ("max", "Max ms"))
SERIES_NAMES: Final = {"calls": "calls", "mean_ms": "mean"}
assert all(key in SORTS for key, _ in SORT_COLUMNS)


def _without_empty(request: web.Request) -> None:
    """A filter form leaves empty fields in the URL: send the browser to the same page without them
    (a clean, bookmarkable address that the API's parameter parsing accepts)."""
    if any(not v for v in request.query.values()):
        kept = [(k, v) for k, v in request.query.items() if v]
        raise web.HTTPSeeOther(str(URL(request.path).with_query(kept)))


def _window(request: web.Request) -> dict[str, str]:
    """The page's time window as given (`from`, `to`), for links that keep it."""
    return {k: v for k in ("from", "to") if (v := request.query.get(k))}


def _db_context(db: DatabaseView, title: str) -> dict[str, Any]:
    return {"title": f"{db.config.name}: {title}", "section": "databases", "db": db.config}


_CODE_SPAN: Final = re.compile(r"(`[^`\n]+`)")
_STRONG: Final = re.compile(r"\*\*(.+?)\*\*")


def summary_markup(text: str) -> Markup:
    """A finding's summary (Markdown made from log text) as HTML: paragraphs, line breaks, `code`
    and **bold** only. Every piece of text goes through Markup's escaping; only those fixed tags are
    added around it, so log text in a summary shows as text."""
    paragraphs = []
    for para in re.split(r"\n\s*\n", text.strip()):
        lines = []
        for line in para.split("\n"):
            pieces: list[Markup] = []
            for part in _CODE_SPAN.split(line):
                if _CODE_SPAN.fullmatch(part):
                    # Log text (the rules put it in code spans); app.css isolates <code>, so a bidi
                    # control in it cannot reorder the sentence around it.
                    pieces.append(Markup("<code>{}</code>").format(part[1:-1]))
                    continue
                # re.split with one group: even items are plain text, odd ones the bold text.
                for i, piece in enumerate(_STRONG.split(part)):
                    pieces.append(Markup("<strong>{}</strong>").format(piece) if i % 2 else escape(piece))
            lines.append(Markup("").join(pieces))
        paragraphs.append(Markup("<p>{}</p>").format(Markup("<br>\n").join(lines)))
    return Markup("\n").join(paragraphs)


# --- queries -----------------------------------------------------------------------------------


@routes.get("/ui/databases/{ref}/queries")
async def queries(request: web.Request) -> web.Response:
    db = database_of(request)
    _without_empty(request)
    params = parse_query(request, QueriesQuery)
    found = await query_list(insights_of(request), db, params)
    window = _window(request)
    sort_links = {key: str(URL(request.path).with_query({**window, "sort": key})) for key in SORTS}
    context = {
        **_db_context(db, "queries"),
        "queries": found,
        "sort": params.sort,
        "sort_columns": SORT_COLUMNS,
        "sort_links": sort_links,
        "window": window,
        "limit": params.limit,
    }
    return page(request, "queries.html", context)


def series_chart(detail: QueryDetail, field: str) -> dict[str, Any]:
    """One number of each 5-minute bucket (`calls` or `mean_ms`) as app.js's chart columns."""
    return {
        "x": [parse_time(p.start) // 1_000_000 for p in detail.series],
        "series": [{"name": SERIES_NAMES[field], "values": [getattr(p, field) for p in detail.series]}],
    }


async def _example_lines(request: web.Request, db: DatabaseView, query_id: str) -> tuple[list[dict[str, Any]], str]:
    """The query's newest timed lines and the group id that lists all of them on the Logs page.

    A statement's duration lines (parse, bind, execute or simple) share one group keyed by its
    fingerprint (forwarder.model.group_key), which the lines table indexes; the Logs listing by that
    group is the same query the API runs.
    """
    group = group_key("slow_query", "", query_id)
    page_ = await request.app[CONTEXT].store.list_lines(db.identity.code, LineQuery(limit=EXAMPLE_LINES, group=group))
    return [orjson.loads(doc) for doc in page_.docs], group_id(group)


@routes.get("/ui/databases/{ref}/queries/{query_id}")
async def query(request: web.Request) -> web.Response:
    db = database_of(request)
    _without_empty(request)
    params = parse_query(request, QueryWindow)
    qid = hex_path_id(request, "query_id", "query")
    detail = await query_detail(insights_of(request), db, qid, params)
    lines, group = await _example_lines(request, db, qid)
    context = {
        **_db_context(db, "query"),
        "q": detail,
        "calls_chart": series_chart(detail, "calls"),
        "mean_chart": series_chart(detail, "mean_ms"),
        "lines": lines,
        "group": group,
        "window": _window(request),
    }
    return page(request, "query.html", context)


# --- findings ----------------------------------------------------------------------------------


@routes.get("/ui/databases/{ref}/findings")
async def findings(request: web.Request) -> web.Response:
    db = database_of(request)
    insights = insights_of(request)
    open_ = await finding_list(insights, db, FindingsQuery.model_validate({"status": "open"}))
    resolved = await finding_list(insights, db, FindingsQuery.model_validate({"status": "resolved"}))
    return page(request, "findings.html", {**_db_context(db, "findings"), "open": open_, "resolved": resolved})


def _finding_page(
    request: web.Request, db: DatabaseView, finding: FindingView, outcome: dict[str, Any] | None, status: int = 200
) -> web.Response:
    facts = [(k, v if isinstance(v, str) else orjson.dumps(v).decode()) for k, v in finding.evidence.facts.items()]
    context = {
        **_db_context(db, finding.title),
        "f": finding,
        "summary": summary_markup(finding.summary),
        "facts": facts,
        "outcome": outcome,
    }
    return page(request, "finding.html", context, status)


@routes.get("/ui/databases/{ref}/findings/{finding_id}")
async def finding(request: web.Request) -> web.Response:
    db = database_of(request)
    fid = hex_path_id(request, "finding_id", "finding")
    return _finding_page(request, db, await finding_detail(insights_of(request), db, fid), None)


@routes.post("/ui/databases/{ref}/findings/{finding_id}/fixes/{fix_id}")
async def apply(request: web.Request) -> web.Response:
    """Apply one fix (the API's use case) and show the finding with what happened.

    The answer is the finding's page itself, not a redirect: the outcome (the setting before and
    after, or the server's error) exists only now. Applying again is harmless: a fix sets a value.
    """
    ctx = request.app[CONTEXT]
    db = database_of(request)
    fid = hex_path_id(request, "finding_id", "finding")
    insights = insights_of(request)
    fix_id = request.match_info["fix_id"]  # the use case answers NotFound for a fix the finding lacks
    outcome: dict[str, Any]
    status = 200
    try:
        done = await run_fix(ctx, db, fid, fix_id, principal(request))
        outcome = {"fix_id": fix_id, "result": "applied", "done": done}
    except cases.NotFound as exc:
        raise ApiError(404, "not_found", exc.message) from None
    except cases.NotApplied as exc:
        outcome = {"fix_id": fix_id, "result": "not_applied", "message": exc.message, "sql": exc.sql}
        status = 409
    except cases.Failed as exc:
        outcome = {"fix_id": fix_id, "result": "failed", "message": exc.message, "ran": list(exc.sql)}
        status = 502
    # The finding again: applying may not change it yet, but a page shows the state after the POST.
    return _finding_page(request, db, await finding_detail(insights, db, fid), outcome, status)
