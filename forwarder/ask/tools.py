"""Read-only tools an answer may call: each reads the store or insights through the same
functions as the Logs API and the pages, and says which pages its result rests on.

A tool's result is data for a model: log text inside it is untrusted (it may hold text written
to look like instructions), which the system prompt says and the providers keep in tool-result
turns. No tool writes anything; a fix is only ever suggested (an action), never run.

Times in arguments are RFC 3339, a date (`2026-11-22`), `today` or `yesterday` (UTC days of the
daemon's clock), or a time of day (`14:05`, UTC): today's, or yesterday's when today's is still
ahead. Every result names the window it covers, so an answer can say which one it means.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import orjson
from multidict import MultiDict
from pydantic import BaseModel
from yarl import URL

from forwarder.api.alerts import STATES, AlertView, alert_view
from forwarder.api.context import ApiContext, DatabaseView
from forwarder.api.errors import ApiError
from forwarder.api.insights import (
    FindingsQuery,
    FindingView,
    QueriesQuery,
    QueryWindow,
    finding_detail,
    finding_list,
    query_detail,
    query_href,
    query_list,
)
from forwarder.api.logs import (
    HEX_ID,
    KIND_NAMES,
    GroupsQuery,
    LogsQuery,
    groups_of,
    line_query,
    overview_of,
    parse_params,
)
from forwarder.ask.events import ActionValue, FixAction, Source
from forwarder.ask.providers.base import ToolSpec
from forwarder.insights.alerts import get_instance, list_instances
from forwarder.insights.engine import Insights
from forwarder.insights.queries import SORTS
from forwarder.model import FIRST_TIME_US, KINDS, LAST_TIME_US, format_time, group_id

# A result is read by a model: each stays under this many bytes of JSON (lists are cut, and say so).
MAX_RESULT_BYTES: Final = 20_000
MAX_LIST: Final = 50
TEXT_CLIP: Final = 400  # characters kept of each text field of a line
LINE_FIELDS: Final = (
    "id", "time", "severity", "kind", "sqlstate", "message", "detail", "hint", "context", "statement",
    "user", "application", "client", "duration_ms",
)  # fmt: skip
DAY_US: Final = 86_400 * 1_000_000
MINUTE_US: Final = 60 * 1_000_000
_DIGITS: Final = re.compile(r"[0-9]{1,18}")
SERIES_POINTS: Final = 48  # a query's newest 5-minute buckets (four hours)


class ToolFailed(Exception):
    """The tool could not answer (an unknown database, say); the message goes to the model."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may read: the daemon's state, for one organization, within the conversation's
    database (`database`, a name or id, when the conversation has one)."""

    api: ApiContext
    org: str
    database: str | None

    def find_database(self, ref: str | None) -> DatabaseView:
        """The database `ref` names, else the conversation's; ToolFailed when neither is known."""
        ref = ref or self.database
        if not ref:
            raise ToolFailed("name a database: call list_databases to see them")
        db = self.api.databases.find(ref)
        if db is None:
            raise ToolFailed(f"no database {ref!r}: call list_databases to see them")
        return db

    def now_us(self) -> int:
        return int(self.api.clock.now() * 1_000_000)


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """A tool's result: JSON-able `data` for the model, the pages it rests on, suggested actions."""

    data: Any
    sources: tuple[Source, ...] = ()
    actions: tuple[ActionValue, ...] = ()


Runner = Callable[[ToolContext, dict[str, Any]], Awaitable[ToolOutcome]]


@dataclass(frozen=True, slots=True)
class Tool:
    spec: ToolSpec
    label: Callable[[dict[str, Any]], str]  # the step's label in the stream, from the arguments
    run: Runner


TOOLS: dict[str, Tool] = {}


def tool(
    name: str, description: str, parameters: dict[str, Any], label: Callable[[dict[str, Any]], str]
) -> Callable[[Runner], Runner]:
    """Register `run` as the tool `name`; `parameters` is the JSON schema of its arguments.

    The registered runner refuses (ToolFailed) arguments the schema does not name and missing
    required ones before `run` sees them; `run` checks the values.
    """
    allowed = frozenset(parameters.get("properties", {}))
    required = tuple(parameters.get("required", ()))

    def register(run: Runner) -> Runner:
        async def checked(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
            if not isinstance(args, dict):
                raise ToolFailed("the arguments must be a JSON object")
            for key in args:
                if key not in allowed:
                    listed = ", ".join(sorted(allowed)) or "none"
                    raise ToolFailed(f"unknown argument {str(key)[:40]!r}; allowed: {listed}")
            for key in required:
                if args.get(key) in (None, ""):
                    raise ToolFailed(f"{key}: required")
            return await run(ctx, args)

        TOOLS[name] = Tool(ToolSpec(name, description, parameters), label, checked)
        return run

    return register


def specs() -> tuple[ToolSpec, ...]:
    return tuple(t.spec for t in TOOLS.values())


# --- arguments ---------------------------------------------------------------------------------

_TIME_OF_DAY: Final = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?")
_DATE: Final = re.compile(r"\d{4}-\d{2}-\d{2}")
TIME_HELP: Final = (
    "RFC 3339, a date (2026-11-22), today, yesterday, a UTC time of day (14:05), or a day and a time (yesterday 14:05)"
)


def _text(args: dict[str, Any], name: str, max_len: int = 500) -> str | None:
    value = args.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > max_len:
        raise ToolFailed(f"{name}: must be text of at most {max_len} characters")
    return value


def _int(args: dict[str, Any], name: str, lo: int, hi: int, default: int) -> int:
    value = args.get(name)
    if value is None:
        return default
    # ASCII digits only, and few: str.isdigit() takes "²" and "٣", which int() refuses or reads,
    # and int() refuses more than 4,300 digits (a ValueError, not the model's mistake named).
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ToolFailed(f"{name}: must be an integer from {lo} to {hi}")
    return value


def _choice(args: dict[str, Any], name: str, allowed: tuple[str, ...]) -> str | None:
    value = _text(args, name, 40)
    if value is not None and value not in allowed:
        raise ToolFailed(f"{name}: must be one of {', '.join(allowed)}")
    return value


def _day_start(ctx: ToolContext, offset_days: int = 0) -> int:
    now_us = ctx.now_us()
    return now_us - now_us % DAY_US + offset_days * DAY_US


def _moment(ctx: ToolContext, name: str, raw: str) -> int:
    """A time argument in µs (see the module's docstring for the forms)."""
    word = raw.strip().lower()
    date, _, clock = word.partition(" ")
    if clock and _TIME_OF_DAY.fullmatch(clock):  # "yesterday 14:05", "2026-11-22 14:05"
        if not _DATE.fullmatch(date) and date not in ("today", "yesterday"):
            raise ToolFailed(f"{name}: must be {TIME_HELP}")
        return _moment(ctx, name, date) + _moment(ctx, name, clock) % DAY_US
    if word == "today":
        return _day_start(ctx)
    if word == "yesterday":
        return _day_start(ctx, -1)
    if _DATE.fullmatch(word):
        try:
            day = datetime.strptime(word, "%Y-%m-%d").replace(tzinfo=UTC)
        except ValueError:
            raise ToolFailed(f"{name}: {raw[:40]!r} is no date") from None
        return int(day.timestamp()) * 1_000_000
    if m := _TIME_OF_DAY.fullmatch(word):
        hour, minute, second = int(m[1]), int(m[2]), int(m[3] or 0)
        if hour > 23 or minute > 59 or second > 59:
            raise ToolFailed(f"{name}: {raw[:40]!r} is no time of day")
        at = _day_start(ctx) + ((hour * 60 + minute) * 60 + second) * 1_000_000
        return at - DAY_US if at > ctx.now_us() else at
    try:
        dt = datetime.fromisoformat(raw.replace("z", "Z"))
    except ValueError:
        raise ToolFailed(f"{name}: must be {TIME_HELP}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)  # times without an offset are UTC, as the pages read them
    return (dt - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def _time_arg(ctx: ToolContext, args: dict[str, Any], name: str) -> int | None:
    raw = _text(args, name, 40)
    return None if raw is None else _moment_within(ctx, name, raw)


def _moment_within(ctx: ToolContext, name: str, raw: str) -> int:
    """`_moment`, refused a day's margin from the ends of what `format_time` can write (years
    0001-9999 in UTC), so a window around it or the day from it can be written too."""
    at = _moment(ctx, name, raw)
    if not FIRST_TIME_US + DAY_US <= at <= LAST_TIME_US - DAY_US:
        raise ToolFailed(f"{name}: must be a time between the years 0001 and 9999")
    return at


def _kinds(args: dict[str, Any]) -> list[str]:
    value = args.get("kind")
    if value is None or value == "" or value == []:
        return []
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ToolFailed("kind: must be a kind or alias, or a list of them")
    out = [n.strip() for name in names for n in name.split(",") if n.strip()]
    for n in out:
        if n not in KIND_NAMES:
            raise ToolFailed(f"kind: unknown kind {n[:40]!r}; use one of {', '.join(KIND_NAMES)}")
    return out


def _through(model: type[BaseModel], params: list[tuple[str, str]]) -> Any:
    """Query parameters through the API's own model; its 400 becomes a refusal naming the argument."""
    try:
        return parse_params(MultiDict(params), model)
    except ApiError as exc:
        raise ToolFailed(exc.message) from None


def _insights(ctx: ToolContext) -> Insights:
    if ctx.api.insights is None:
        raise ToolFailed("insights are off in this daemon's config: findings and queries are not available")
    return ctx.api.insights


# --- results -----------------------------------------------------------------------------------


def _clip(value: Any, limit: int = TEXT_CLIP) -> Any:
    """Text cut to `limit` characters, keeping its start and its end (where PostgreSQL puts totals
    such as autovacuum's and checkpoints' elapsed times)."""
    if isinstance(value, str) and len(value) > limit:
        tail = limit // 4
        return value[: limit - tail - 3] + " … " + value[-tail:]
    return value


def _line(doc: bytes | dict[str, Any], database_id: str) -> dict[str, Any]:
    """A stored line trimmed to what an answer uses, with its page."""
    full = orjson.loads(doc) if isinstance(doc, bytes) else doc
    out = {k: _clip(full[k]) for k in LINE_FIELDS if full.get(k) is not None}
    out["href"] = line_href(database_id, str(full["id"]))
    return out


def _fit(data: dict[str, Any], key: str) -> dict[str, Any]:
    """Cut `data[key]` (a list) from its end until the JSON fits MAX_RESULT_BYTES; says so."""
    items = data[key]
    while items and len(orjson.dumps(data)) > MAX_RESULT_BYTES:
        items.pop()
        data["truncated"] = True
    return data


def line_href(database_id: str, line_id: str) -> str:
    return f"/ui/databases/{database_id}/logs/{line_id}"


def database_href(database_id: str) -> str:
    return f"/ui/databases/{database_id}"


def logs_href(database_id: str, params: list[tuple[str, str]]) -> str:
    return str(URL(f"/ui/databases/{database_id}/logs").with_query(params))


def _window(from_us: int | None, to_us: int | None) -> dict[str, str | None]:
    return {
        "from": None if from_us is None else format_time(from_us),
        "to": None if to_us is None else format_time(to_us),
    }


# --- tools -------------------------------------------------------------------------------------

_DATABASE: Final = {"type": "string", "description": "A database id or name; default: the conversation's."}
_TIME: Final = {"type": "string", "description": f"A time: {TIME_HELP}."}
_NO_ARGS: Final[dict[str, Any]] = {"type": "object", "properties": {}, "additionalProperties": False}


def _on(args: dict[str, Any]) -> str:
    db = args.get("database")
    return f" of {db}" if isinstance(db, str) and db else ""


@tool("list_databases", "The monitored databases: id, name, host.", _NO_ARGS, lambda _: "Listing databases")
async def list_databases(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    dbs = [
        {"id": d.config.id, "name": d.config.name, "host": d.config.host, "href": database_href(d.config.id)}
        for d in ctx.api.databases.all()
    ]
    return ToolOutcome({"databases": dbs}, tuple(Source(f"Database {d['name']}", str(d["href"])) for d in dbs))


def _search_label(args: dict[str, Any]) -> str:
    kinds = args.get("kind")
    what = ", ".join(kinds) if isinstance(kinds, list) else str(kinds or "all")
    when = args.get("around") or args.get("day") or args.get("from")
    return f"Searching logs{_on(args)} ({what}{', ' + str(when) if when else ''})"


@tool(
    "search_logs",
    "Log lines of a database, newest first, trimmed to the fields that matter, each with its page."
    " Filter by kind or alias (errors, locks, maintenance), words (q), a window (from/to, a day, or"
    " `around` a time plus or minus `minutes`).",
    {
        "type": "object",
        "properties": {
            "database": _DATABASE,
            "kind": {
                "description": "Kinds or aliases.",
                "anyOf": [
                    {"type": "string", "enum": list(KIND_NAMES)},
                    {"type": "array", "items": {"type": "string", "enum": list(KIND_NAMES)}},
                ],
            },
            "q": {"type": "string", "description": "Words that must all appear (word prefixes)."},
            "from": _TIME,
            "to": {**_TIME, "description": f"End of the window (exclusive): {TIME_HELP}."},
            "day": {"type": "string", "description": "A whole UTC day: today, yesterday or a date."},
            "around": {**_TIME, "description": f"A moment ({TIME_HELP}); the window is `minutes` either side."},
            "minutes": {"type": "integer", "minimum": 1, "maximum": 120, "default": 5},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIST, "default": 20},
        },
        "additionalProperties": False,
    },
    _search_label,
)
async def search_logs(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    db = ctx.find_database(_text(args, "database", 200))
    kinds = _kinds(args)
    q = _text(args, "q")
    limit = _int(args, "limit", 1, MAX_LIST, 20)
    minutes = _int(args, "minutes", 1, 120, 5)
    from_us, to_us = _time_arg(ctx, args, "from"), _time_arg(ctx, args, "to")
    if (day := _text(args, "day", 40)) is not None:
        if day.strip().lower() not in ("today", "yesterday") and not _DATE.fullmatch(day.strip()):
            raise ToolFailed("day: must be today, yesterday or a date such as 2026-11-22")
        from_us = _moment_within(ctx, "day", day)
        to_us = from_us + DAY_US
    if (around := _time_arg(ctx, args, "around")) is not None:
        from_us, to_us = around - minutes * MINUTE_US, around + minutes * MINUTE_US
    params = [("kind", ",".join(kinds))] if kinds else []
    params += [("q", q)] if q else []
    params += [(k, format_time(t)) for k, t in (("from", from_us), ("to", to_us)) if t is not None]
    query = _through(LogsQuery, [*params, ("limit", str(limit))])
    page = await ctx.api.store.list_lines(db.identity.code, line_query(query))
    href = logs_href(db.config.id, params)
    data = {
        "database": db.config.id,
        "filters": dict(params),
        "window": _window(from_us, to_us),
        "count": len(page.docs),
        "has_more": page.has_more,
        "lines": [_line(doc, db.config.id) for doc in page.docs],
        "logs_page": href,
    }
    return ToolOutcome(_fit(data, "lines"), (Source(f"Logs of {db.config.name}", href),))


@tool(
    "log_groups",
    "Repeated messages of a database (lines of one kind with the same text, numbers aside), most"
    " frequent first, over the last 24 hours or since `from`; optionally of some kinds only.",
    {
        "type": "object",
        "properties": {
            "database": _DATABASE,
            "from": _TIME,
            "kind": {"type": "array", "items": {"type": "string", "enum": list(KIND_NAMES)}},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIST, "default": 20},
        },
        "additionalProperties": False,
    },
    lambda args: f"Counting repeated messages{_on(args)}",
)
async def log_groups(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    db = ctx.find_database(_text(args, "database", 200))
    kinds = _kinds(args)
    limit = _int(args, "limit", 1, MAX_LIST, 20)
    from_us = _time_arg(ctx, args, "from")
    window = [("from", format_time(from_us))] if from_us is not None else []
    # Every group of the window is read when some kinds are asked for: the others are left out after.
    query = _through(GroupsQuery, [*window, ("limit", "500" if kinds else str(limit))])
    start_us, groups = await groups_of(ctx.api, db, query)
    wanted = _through(LogsQuery, [("kind", ",".join(kinds))]).kind if kinds else None
    rows = []
    for g in groups:
        if wanted is not None and g.kind not in wanted:
            continue
        gid = group_id(g.key)
        newest = _line(g.newest_doc, db.config.id)
        rows.append(
            {
                "group": gid,
                "kind": g.kind,
                "count": g.count,
                "first_time": format_time(g.first_us),
                "last_time": format_time(g.last_us),
                "message": newest.get("message"),
                "statement": newest.get("statement"),
                "newest_line": newest["href"],
                "logs_page": logs_href(db.config.id, [("group", gid)]),
            }
        )
        if len(rows) == limit:
            break
    href = str(URL(f"/ui/databases/{db.config.id}/groups").with_query(window))
    data = {"database": db.config.id, "window": _window(start_us, None), "groups": rows}
    return ToolOutcome(_fit(data, "groups"), (Source(f"Repeated messages of {db.config.name}", href),))


@tool(
    "overview",
    "A database's overview: whether its log is read (or why not), lines per kind over the last 24"
    " hours, retention, today's usage (its `day` is today's UTC date), and the time now.",
    {"type": "object", "properties": {"database": _DATABASE}, "additionalProperties": False},
    lambda args: f"Reading the overview{_on(args)}",
)
async def overview(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    db = ctx.find_database(_text(args, "database", 200))
    view = (await overview_of(ctx.api, db)).model_dump(mode="json", by_alias=True)
    view["now"] = format_time(ctx.now_us())
    view["href"] = database_href(db.config.id)
    return ToolOutcome(view, (Source(f"Overview of {db.config.name}", view["href"]),))


@tool(
    "count_lines",
    "Lines per kind on each UTC day, today (so far) and the days before it, oldest first: what"
    " changed from one day to the next.",
    {
        "type": "object",
        "properties": {
            "database": _DATABASE,
            "days": {"type": "integer", "minimum": 1, "maximum": 7, "default": 2},
        },
        "additionalProperties": False,
    },
    lambda args: f"Counting lines per day{_on(args)}",
)
async def count_lines(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    db = ctx.find_database(_text(args, "database", 200))
    days = _int(args, "days", 1, 7, 2)
    first_us = _day_start(ctx, 1 - days)
    per_day: dict[int, dict[str, int]] = {first_us + i * DAY_US: dict.fromkeys(KINDS, 0) for i in range(days)}
    for hour_us, kind, count in await ctx.api.store.hourly_counts(db.identity.code, first_us):
        day_us = hour_us - hour_us % DAY_US
        if day_us in per_day:
            per_day[day_us][kind] += count
    data = {
        "database": db.config.id,
        "now": format_time(ctx.now_us()),
        "days": [
            {"day": format_time(d)[:10], "total": sum(c.values()), "counts": c} for d, c in sorted(per_day.items())
        ],
    }
    return ToolOutcome(data, (Source(f"Overview of {db.config.name}", database_href(db.config.id)),))


def _finding_brief(f: FindingView) -> dict[str, Any]:
    return {
        "id": f.id,
        "rule": f.rule,
        "subject": f.subject,
        "severity": f.severity,
        "title": f.title,
        "status": f.status,
        "first_seen": f.first_seen,
        "last_seen": f.last_seen,
        "count": f.evidence.count,
        "fixes": len(f.fixes),
        "summary": _clip(f.summary, 600),
        "href": f.href,
    }


@tool(
    "list_findings",
    "Problems the rules found in a database's log (deadlocks, lock waits, failed logins, connection"
    " limits, checkpoints, autovacuum, temp files, ...), newest first; `open` ones are current.",
    {
        "type": "object",
        "properties": {
            "database": _DATABASE,
            "status": {"type": "string", "enum": ["open", "resolved"]},
            "from": {**_TIME, "description": f"Findings last seen at or after this time: {TIME_HELP}."},
            "rule": {"type": "array", "items": {"type": "string"}, "description": "Only these rules."},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIST, "default": 20},
        },
        "additionalProperties": False,
    },
    lambda args: f"Listing findings{_on(args)}",
)
async def list_findings(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    db = ctx.find_database(_text(args, "database", 200))
    insights = _insights(ctx)
    status = _choice(args, "status", ("open", "resolved"))
    limit = _int(args, "limit", 1, MAX_LIST, 20)
    rules = args.get("rule") or []
    if isinstance(rules, str):
        rules = [rules]
    if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules):
        raise ToolFailed("rule: must be a list of rule names")
    from_us = _time_arg(ctx, args, "from")
    params = [("status", status)] if status else []
    params += [("from", format_time(from_us))] if from_us is not None else []
    # Every finding of the window is read when some rules are asked for: the others are left out after.
    query = _through(FindingsQuery, [*params, ("limit", "500" if rules else str(limit))])
    found = await finding_list(insights, db, query)
    chosen = [f for f in found if not rules or f.rule in rules][:limit]
    href = f"/ui/databases/{db.config.id}/findings"
    data = {
        "database": db.config.id,
        "window": _window(from_us, None),
        "findings": [_finding_brief(f) for f in chosen],
        "findings_page": href,
    }
    return ToolOutcome(_fit(data, "findings"), (Source(f"Findings of {db.config.name}", href),))


def _hex_id(args: dict[str, Any], what: str) -> str:
    value = _text(args, "id", 40)
    if value is None or not HEX_ID.fullmatch(value):
        raise ToolFailed(f"id: must be a {what} id (16 hex digits)")
    return value


@tool(
    "get_finding",
    "One finding with its evidence (counts, statements, relations, the lines it rests on) and its"
    " fixes (SQL, risk); a fix is only suggested here, never applied.",
    {
        "type": "object",
        "properties": {"database": _DATABASE, "id": {"type": "string", "pattern": f"^{HEX_ID.pattern}$"}},
        "required": ["id"],
        "additionalProperties": False,
    },
    lambda args: f"Reading finding {str(args.get('id', ''))[:16]}",
)
async def get_finding(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    db = ctx.find_database(_text(args, "database", 200))
    insights = _insights(ctx)
    fid = _hex_id(args, "finding")
    try:
        f = await finding_detail(insights, db, fid)
    except ApiError as exc:
        raise ToolFailed(exc.message) from None
    data = f.model_dump(mode="json", by_alias=True)
    data["summary"] = _clip(f.summary, 4000)
    data["evidence"]["lines"] = [line_href(db.config.id, i) for i in f.evidence.lines_available]
    label = f"Finding: {f.title}"
    sources = [Source(_clip(label, 120), f.href)]
    sources += [Source(f"Log line {i}", line_href(db.config.id, i)) for i in f.evidence.lines_available[:2]]
    actions = tuple(FixAction(db.config.id, f.id, x.fix_id, x.label, f.href) for x in f.fixes)
    return ToolOutcome(data, tuple(sources), actions)


def _alert_brief(a: AlertView, ctx: ToolContext) -> dict[str, Any]:
    data = a.model_dump(mode="json")
    db = ctx.api.databases.find(a.database_id)
    data["database_name"] = db.config.name if db is not None else None
    return data


@tool(
    "list_alerts",
    "Alerts of the configured alert rules, newest first: `firing` ones are current. Of the"
    " conversation's database (or `database`), else of every database.",
    {
        "type": "object",
        "properties": {
            "database": _DATABASE,
            "state": {"type": "string", "enum": list(STATES)},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIST, "default": 20},
        },
        "additionalProperties": False,
    },
    lambda args: f"Listing {args.get('state') or ''} alerts{_on(args)}".replace("  ", " "),
)
async def list_alerts(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    ref = _text(args, "database", 200) or ctx.database
    db_id = ctx.find_database(ref).config.id if ref else None
    chosen_state = _choice(args, "state", STATES)
    state = next((s for s in STATES if s == chosen_state), None)
    limit = _int(args, "limit", 1, MAX_LIST, 20)
    found = await ctx.api.store.read(lambda c: list_instances(c, state, 500))
    chosen = [a for a in found if db_id is None or a.database_id == db_id][:limit]
    data = {
        "database": db_id,
        "alerts": [_alert_brief(alert_view(a), ctx) for a in chosen],
        "alerts_page": "/ui/alerts",
    }
    return ToolOutcome(_fit(data, "alerts"), (Source("Alerts", "/ui/alerts"),))


@tool(
    "get_alert",
    "One alert: its rule, database, state, the count against the threshold over the window.",
    {
        "type": "object",
        "properties": {"id": {"type": "string", "pattern": f"^{HEX_ID.pattern}$"}},
        "required": ["id"],
        "additionalProperties": False,
    },
    lambda args: f"Reading alert {str(args.get('id', ''))[:16]}",
)
async def get_alert(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    alert_id = _hex_id(args, "alert")
    found = await ctx.api.store.read(lambda c: get_instance(c, alert_id))
    if found is None:
        raise ToolFailed(f"id: no alert with id {alert_id!r}")
    view = alert_view(found)
    return ToolOutcome(_alert_brief(view, ctx), (Source(f"Alert {view.rule}", view.href),))


def _query_brief(q: BaseModel) -> dict[str, Any]:
    data = q.model_dump(mode="json")
    data["text"] = _clip(data["text"], 1000)
    data.pop("database_id", None)
    return data


@tool(
    "list_queries",
    "A database's statements (values removed) with calls, total, mean, p95 and max time in ms and"
    " errors, ordered by `sort`, over a window (default: everything stored).",
    {
        "type": "object",
        "properties": {
            "database": _DATABASE,
            "sort": {"type": "string", "enum": list(SORTS), "default": "total"},
            "from": _TIME,
            "to": _TIME,
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIST, "default": 10},
        },
        "additionalProperties": False,
    },
    lambda args: f"Ranking queries by {args.get('sort') or 'total'} time{_on(args)}".replace(
        "by calls time", "by calls"
    ).replace("by errors time", "by errors"),
)
async def list_queries(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    db = ctx.find_database(_text(args, "database", 200))
    insights = _insights(ctx)
    sort = _choice(args, "sort", tuple(SORTS)) or "total"
    limit = _int(args, "limit", 1, MAX_LIST, 10)
    from_us, to_us = _time_arg(ctx, args, "from"), _time_arg(ctx, args, "to")
    window = [(k, format_time(t)) for k, t in (("from", from_us), ("to", to_us)) if t is not None]
    found = await query_list(insights, db, _through(QueriesQuery, [*window, ("sort", sort), ("limit", str(limit))]))
    href = str(URL(f"/ui/databases/{db.config.id}/queries").with_query([*window, ("sort", sort)]))
    data = {
        "database": db.config.id,
        "sort": sort,
        "window": _window(from_us, to_us),
        "queries": [_query_brief(q) for q in found],
        "queries_page": href,
    }
    return ToolOutcome(_fit(data, "queries"), (Source(f"Queries of {db.config.name}", href),))


@tool(
    "get_query",
    "One statement with its numbers and its 5-minute series (newest buckets).",
    {
        "type": "object",
        "properties": {
            "database": _DATABASE,
            "id": {"type": "string", "pattern": f"^{HEX_ID.pattern}$"},
            "from": _TIME,
            "to": _TIME,
        },
        "required": ["id"],
        "additionalProperties": False,
    },
    lambda args: f"Reading query {str(args.get('id', ''))[:16]}",
)
async def get_query(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    db = ctx.find_database(_text(args, "database", 200))
    insights = _insights(ctx)
    qid = _hex_id(args, "query")
    from_us, to_us = _time_arg(ctx, args, "from"), _time_arg(ctx, args, "to")
    window = [(k, format_time(t)) for k, t in (("from", from_us), ("to", to_us)) if t is not None]
    try:
        detail = await query_detail(insights, db, qid, _through(QueryWindow, window))
    except ApiError as exc:
        raise ToolFailed(exc.message) from None
    data = _query_brief(detail)
    data["series"] = data["series"][-SERIES_POINTS:]
    data["example_line"] = line_href(db.config.id, detail.example_line_id)
    return ToolOutcome(data, (Source(f"Query {_clip(detail.text, 60)}", query_href(db.config.id, qid)),))
