"""Findings and queries of a database (docs/insights.md says how they are derived).

Read-only routes over `insights/`; applying a fix is `api/fixes.py`. Every object carries `href`,
its path among this daemon's pages, for the pages and Ask.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from forwarder.api.context import CONTEXT, DatabaseView
from forwarder.api.errors import ApiError
from forwarder.api.logs import (
    HEX_ID,
    LINE_ID_PATTERN,
    LimitParam,
    QueryValue,
    Time,
    TimeParam,
    _send,
    database_of,
    hex_path_id,
    parse_query,
    reads_query,
)
from forwarder.insights.engine import Insights
from forwarder.insights.fixsql import render
from forwarder.insights.model import Finding, FindingStatus, Needs, Risk, Severity
from forwarder.insights.queries import BUCKET_US, SORTS, QueryStats, SeriesPoint
from forwarder.model import format_time

routes = web.RouteTableDef()

ID_PATTERN: Final = f"^{HEX_ID.pattern}$"
Status = Annotated[
    FindingStatus,
    QueryValue(lambda raw: _choice(raw, ("open", "resolved")), {"type": "string", "enum": ["open", "resolved"]}),
]
SortParam = Annotated[str, QueryValue(lambda raw: _choice(raw, tuple(SORTS)), {"type": "string", "enum": list(SORTS)})]


def _choice(raw: str, allowed: tuple[str, ...]) -> str:
    if raw not in allowed:
        raise ValueError(f"must be one of {', '.join(allowed)}")
    return raw


class FindingsQuery(BaseModel):
    """Query of `GET /v1/databases/{ref}/findings`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    status: Status | SkipJsonSchema[None] = Field(
        None, description="`open` (current) or `resolved`; both when left out."
    )
    from_: TimeParam | SkipJsonSchema[None] = Field(
        None, alias="from", description="Findings last seen at or after this time."
    )
    limit: LimitParam = Field(100, description="At most this many, newest `last_seen` first.")


class QueriesQuery(BaseModel):
    """Query of `GET /v1/databases/{ref}/queries`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    from_: TimeParam | SkipJsonSchema[None] = Field(
        None, alias="from", description="Start of the window (rounded down to its 5-minute bucket); default: all."
    )
    to: TimeParam | SkipJsonSchema[None] = Field(None, description="End of the window (exclusive); default: now.")
    sort: SortParam = Field("total", description="Order: total time, calls, mean time, max time or errors.")
    limit: LimitParam = Field(100, description="At most this many queries.")


class QueryWindow(BaseModel):
    """Query of `GET /v1/databases/{ref}/queries/{query_id}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    from_: TimeParam | SkipJsonSchema[None] = Field(
        None, alias="from", description="Start of the window (rounded down to its 5-minute bucket); default: all."
    )
    to: TimeParam | SkipJsonSchema[None] = Field(None, description="End of the window (exclusive).")


# --- answers ---------------------------------------------------------------------------------

LineId = Annotated[str, Field(pattern=LINE_ID_PATTERN)]


class FixView(BaseModel):
    """A fix of a finding; apply it with `POST /v1/databases/{ref}/fixes`."""

    fix_id: str
    label: str = Field(description="What it does, in words.")
    sql: str | None = Field(description="The SQL it runs (identifiers and values quoted); null for a manual fix.")
    risk: Risk
    applies_to: str = Field(description='What it changes: "server", "role app in database shop", "table public.t".')
    needs: Needs = Field(description="`reload`: the fix reloads the configuration; `restart`: never applied here.")
    manual: bool = Field(description="Done by hand (a pooler, a restart); the daemon never applies it.")


class EvidenceView(BaseModel):
    """What a finding rests on; kept when retention deletes its lines."""

    model_config = ConfigDict(populate_by_name=True)
    from_: Time = Field(alias="from", description="Start of the window the numbers cover.")
    to: Time
    count: int = Field(ge=0, description="Occurrences in the window.")
    line_ids: list[LineId] = Field(description="Lines it rests on (the first and the newest).")
    lines_available: list[LineId] = Field(description="Those of `line_ids` still stored.")
    lines_deleted: int = Field(ge=0, description="Those of `line_ids` retention deleted (the numbers stay).")
    query_ids: list[str] = Field(description="Queries it concerns (GET .../queries/{query_id}).")
    facts: dict[str, Any] = Field(description="Named numbers and facts (statements, relations, sizes).")


class FindingView(BaseModel):
    """A finding: a problem a rule found in the log, with its numbers and fixes."""

    id: str = Field(pattern=ID_PATTERN, description="Stable: the same database, rule and subject keep it.")
    database_id: str
    rule: str = Field(description="The rule that found it (docs/insights.md).")
    subject: str = Field(description='What it is about: a relation, "client|user", a query id; "" for the server.')
    severity: Severity
    title: str
    summary: str = Field(description="Markdown with the numbers; made from log text, so render it escaped.")
    evidence: EvidenceView
    first_seen: Time
    last_seen: Time
    status: FindingStatus = Field(description="`open` while the rule still sees it, then `resolved`.")
    resolved_at: Time | None
    fixes: list[FixView]
    href: str = Field(description="Its page among this daemon's pages.")


class FindingList(BaseModel):
    """Findings, newest `last_seen` first."""

    findings: list[FindingView]


class QueryView(BaseModel):
    """A statement (values removed) with its numbers over the window."""

    id: str = Field(pattern=ID_PATTERN, description="The statement's fingerprint: stable across restarts.")
    database_id: str
    text: str = Field(description="The normalized statement ($1, $2, ... for values).")
    calls: int = Field(ge=0, description="Executions with a logged duration (simple `statement` or `execute`).")
    total_ms: float
    mean_ms: float | None = Field(description="null without calls.")
    max_ms: float
    p95_ms: float | None = Field(description="95th percentile of the durations (within 2.2%); null without calls.")
    errors: int = Field(ge=0, description="Lines of severity ERROR or worse with this statement.")
    first_seen: Time
    last_seen: Time
    users: list[str]
    applications: list[str]
    example_line_id: LineId = Field(description="Its newest line (it may be gone past retention).")
    href: str


class QueryList(BaseModel):
    """Queries, in the order asked for."""

    queries: list[QueryView]


class SeriesPointView(BaseModel):
    """A query's numbers in one bucket."""

    start: Time
    calls: int
    total_ms: float
    mean_ms: float | None
    max_ms: float
    errors: int


class QueryDetail(QueryView):
    """A query with its time series."""

    bucket_seconds: int
    series: list[SeriesPointView] = Field(description="Buckets with calls or errors, oldest first.")


# --- mapping ---------------------------------------------------------------------------------


def finding_href(database_id: str, finding_id: str) -> str:
    return f"/ui/databases/{database_id}/findings/{finding_id}"


def query_href(database_id: str, query_id: str) -> str:
    return f"/ui/databases/{database_id}/queries/{query_id}"


def finding_view(f: Finding, gone: set[int]) -> FindingView:
    ev = f.evidence
    return FindingView(
        id=f.id,
        database_id=f.database_id,
        rule=f.rule,
        subject=f.subject,
        severity=f.severity,
        title=f.title,
        summary=f.summary,
        evidence=EvidenceView(
            from_=format_time(ev.window_from_us),
            to=format_time(ev.window_to_us),
            count=ev.count,
            line_ids=[str(i) for i in ev.line_ids],
            lines_available=[str(i) for i in ev.line_ids if i not in gone],
            lines_deleted=sum(1 for i in ev.line_ids if i in gone),
            query_ids=list(ev.query_ids),
            facts=dict(ev.facts),
        ),
        first_seen=format_time(f.first_seen_us),
        last_seen=format_time(f.last_seen_us),
        status=f.status,
        resolved_at=None if f.resolved_us is None else format_time(f.resolved_us),
        fixes=[
            FixView(
                fix_id=x.fix_id,
                label=x.label,
                sql=None if x.manual else render(x.statement),
                risk=x.risk,
                applies_to=x.applies_to,
                needs=x.needs,
                manual=x.manual,
            )
            for x in f.fixes
        ],
        href=finding_href(f.database_id, f.id),
    )


def _query_fields(database_id: str, q: QueryStats) -> dict[str, Any]:
    return {
        "id": q.fingerprint,
        "database_id": database_id,
        "text": q.text,
        "calls": q.calls,
        "total_ms": round(q.total_ms, 3),
        "mean_ms": None if q.mean_ms is None else round(q.mean_ms, 3),
        "max_ms": round(q.max_ms, 3),
        "p95_ms": None if q.p95_ms is None else round(q.p95_ms, 3),
        "errors": q.errors,
        "first_seen": format_time(q.first_us),
        "last_seen": format_time(q.last_us),
        "users": list(q.users),
        "applications": list(q.applications),
        "example_line_id": str(q.example_id),
        "href": query_href(database_id, q.fingerprint),
    }


def _point(p: SeriesPoint) -> SeriesPointView:
    return SeriesPointView(
        start=format_time(p.start_us),
        calls=p.calls,
        total_ms=round(p.total_ms, 3),
        mean_ms=round(p.total_ms / p.calls, 3) if p.calls else None,
        max_ms=round(p.max_ms, 3),
        errors=p.errors,
    )


def insights_of(request: web.Request) -> Insights:
    """The insights engine; a 503 when insights are off in the config."""
    insights = request.app[CONTEXT].insights
    if insights is None:
        raise ApiError(503, "insights_off", "insights are turned off in the config ([insights] enabled = false)")
    return insights


async def finding_list(insights: Insights, db: DatabaseView, params: FindingsQuery) -> list[FindingView]:
    """The database's findings as the API lists them (the findings page shows the same)."""
    found = await insights.findings(db.identity.code, params.status, params.from_, params.limit)
    return [finding_view(f, gone) for f, gone in found]


async def finding_detail(insights: Insights, db: DatabaseView, finding_id: str) -> FindingView:
    """One finding; ApiError 404 when the database has none with this id."""
    found = await insights.finding_with_gone(db.identity.code, finding_id)
    if found is None:
        raise ApiError(404, "not_found", f"no finding with id {finding_id!r} on database {db.config.id!r}")
    return finding_view(*found)


async def query_list(insights: Insights, db: DatabaseView, params: QueriesQuery) -> list[QueryView]:
    """The database's queries over the window, in `params.sort` order."""
    found = await insights.queries(db.identity.code, params.from_, params.to, params.sort, params.limit)
    return [QueryView(**_query_fields(db.config.id, q)) for q in found]


async def query_detail(insights: Insights, db: DatabaseView, query_id: str, params: QueryWindow) -> QueryDetail:
    """One query with its time series; ApiError 404 when the database has none with this id."""
    found = await insights.query(db.identity.code, query_id, params.from_, params.to)
    if found is None:
        raise ApiError(404, "not_found", f"no query with id {query_id!r} on database {db.config.id!r}")
    stats, points = found
    return QueryDetail(
        **_query_fields(db.config.id, stats),
        bucket_seconds=BUCKET_US // 1_000_000,
        series=[_point(p) for p in points],
    )


# --- handlers --------------------------------------------------------------------------------


@routes.get("/v1/databases/{ref}/findings")
@reads_query
async def list_findings(request: web.Request) -> web.Response:
    """The database's findings (`status=open`: the current ones), newest `last_seen` first."""
    db = database_of(request)
    params = parse_query(request, FindingsQuery)
    return _send(FindingList(findings=await finding_list(insights_of(request), db, params)))


@routes.get("/v1/databases/{ref}/findings/{finding_id}")
async def get_finding(request: web.Request) -> web.Response:
    """One finding."""
    db = database_of(request)
    fid = hex_path_id(request, "finding_id", "finding")
    return _send(await finding_detail(insights_of(request), db, fid))


@routes.get("/v1/databases/{ref}/queries")
@reads_query
async def list_queries(request: web.Request) -> web.Response:
    """Statements by fingerprint over the window, ordered by `sort`."""
    db = database_of(request)
    params = parse_query(request, QueriesQuery)
    return _send(QueryList(queries=await query_list(insights_of(request), db, params)))


@routes.get("/v1/databases/{ref}/queries/{query_id}")
@reads_query
async def get_query(request: web.Request) -> web.Response:
    """One query with its 5-minute time series."""
    db = database_of(request)
    params = parse_query(request, QueryWindow)
    qid = hex_path_id(request, "query_id", "query")
    return _send(await query_detail(insights_of(request), db, qid, params))
