"""The Logs API (SPEC 4.1, the database endpoints). Field names SPEC leaves open: docs/api.md."""

from __future__ import annotations

from typing import Final

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, StrictBool, ValidationError

from forwarder.api.auth import PRINCIPAL
from forwarder.api.context import CONTEXT, DatabaseView
from forwarder.api.errors import ApiError, bad_body, bad_parameter, json_response, raw_json_response
from forwarder.model import KINDS, expand_kinds, format_time, group_id, parse_group_id, parse_time
from forwarder.store import DatabaseSettings, LineQuery
from forwarder.store.store import day_of

MAX_LIMIT: Final = 500
DEFAULT_LIMIT: Final = 100
MAX_WAIT_SECONDS: Final = 30
DAY_US: Final = 86_400 * 1_000_000
MAX_ID: Final = (1 << 63) - 1

routes = web.RouteTableDef()


def _database(request: web.Request) -> DatabaseView:
    ref = request.match_info["ref"]
    db = request.app[CONTEXT].databases.find(ref)
    if db is None:
        raise ApiError(404, "not_found", f"no database with id or name {ref!r}")
    return db


def _check_params(request: web.Request, allowed: frozenset[str]) -> None:
    for name in request.query:
        if name not in allowed:
            raise bad_parameter(name, f"unknown query parameter; allowed: {', '.join(sorted(allowed))}")
    for name in allowed - {"kind"}:
        if len(request.query.getall(name, [])) > 1:
            raise bad_parameter(name, "given more than once")


def _int_param(request: web.Request, name: str, lo: int, hi: int) -> int | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    if not raw.isascii() or not raw.isdigit():
        raise bad_parameter(name, f"must be an integer from {lo} to {hi}")
    value = int(raw)
    if not lo <= value <= hi:
        raise bad_parameter(name, f"must be an integer from {lo} to {hi}")
    return value


def _id_param(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    if not raw.isascii() or not raw.isdigit() or len(raw) > 19 or int(raw) > MAX_ID:
        raise bad_parameter(name, "must be a line id (a decimal integer)")
    return int(raw)


def _time_param(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    try:
        return parse_time(raw)
    except (ValueError, OverflowError):
        raise bad_parameter(name, "must be an RFC 3339 time such as 2026-11-22T10:00:00Z") from None


LIST_PARAMS: Final = frozenset({"kind", "q", "group", "from", "to", "before", "after", "limit", "wait_seconds"})


@routes.get("/v1/databases/{ref}/logs")
async def list_logs(request: web.Request) -> web.Response:
    """Lines newest first; with `after`, the lines right after it (live tail, no gaps)."""
    ctx = request.app[CONTEXT]
    db = _database(request)
    _check_params(request, LIST_PARAMS)
    kinds = None
    kind_values = [k for raw in request.query.getall("kind", []) for k in raw.split(",")]
    if kind_values:
        try:
            kinds = expand_kinds([k.strip() for k in kind_values])
        except ValueError as exc:
            raise bad_parameter("kind", f"{exc}; use one of {', '.join(KINDS)}, errors, locks, maintenance") from None
    q = request.query.get("q")
    if q is not None and not 1 <= len(q) <= 500:
        raise bad_parameter("q", "must be 1 to 500 characters")
    group = None
    if (raw_group := request.query.get("group")) is not None:
        try:
            group = parse_group_id(raw_group)
        except ValueError:
            raise bad_parameter("group", "must be a group id from the groups endpoint (16 hex digits)") from None
    # A window with `from` after `to` is empty, not an error: it holds no line.
    from_us, to_us = _time_param(request, "from"), _time_param(request, "to")
    limit = _int_param(request, "limit", 1, MAX_LIMIT) or DEFAULT_LIMIT
    wait = _int_param(request, "wait_seconds", 0, MAX_WAIT_SECONDS) or 0
    after = _id_param(request, "after")
    if wait and after is None:
        raise bad_parameter("wait_seconds", "only works together with `after`")
    query = LineQuery(
        limit=limit,
        kinds=kinds,
        q=q,
        group=group,
        from_us=from_us,
        to_us=to_us,
        before=_id_param(request, "before"),
        after=after,
    )
    if after is None:
        page = await ctx.store.list_lines(db.identity.code, query)
    else:
        # A live tail: with `wait_seconds`, a long poll that answers once a matching line exists.
        page = await ctx.store.tail_lines(db.identity.code, query, wait)
    body = b'{"lines":[' + b",".join(page.docs) + b'],"has_more":' + (b"true" if page.has_more else b"false")
    if page.next_after is not None:
        body += b',"next_after":"%d"' % page.next_after
    return raw_json_response(body + b"}")


@routes.get("/v1/databases/{ref}/logs/groups")
async def list_groups(request: web.Request) -> web.Response:
    """Repeated messages over the last 24 hours, or since `from`; most frequent first."""
    ctx = request.app[CONTEXT]
    db = _database(request)
    _check_params(request, frozenset({"from", "limit"}))
    now_us = int(ctx.clock.now() * 1_000_000)
    from_us = _time_param(request, "from")
    if from_us is None:
        from_us = now_us - DAY_US
    limit = _int_param(request, "limit", 1, MAX_LIMIT) or DEFAULT_LIMIT
    groups = await ctx.store.groups(db.identity.code, from_us, limit)
    parts = [
        orjson.dumps(
            {
                "group": group_id(g.key),
                "kind": g.kind,
                "count": g.count,
                "first_time": format_time(g.first_us),
                "last_time": format_time(g.last_us),
            }
        )[:-1]
        + b',"line":'
        + g.newest_doc
        + b"}"
        for g in groups
    ]
    head = orjson.dumps({"from": format_time(from_us)})[:-1]
    return raw_json_response(head + b',"groups":[' + b",".join(parts) + b"]}")


@routes.get("/v1/databases/{ref}/logs/overview")
async def overview(request: web.Request) -> web.Response:
    """Settings, where the log is read from (or why not), 24-hour counts, retention, today's usage."""
    ctx = request.app[CONTEXT]
    db = _database(request)
    _check_params(request, frozenset())
    settings = await ctx.store.get_settings(db.config.id) or DatabaseSettings(db.config.enabled, db.config.full_text)
    now = ctx.clock.now()
    now_us = int(now * 1_000_000)
    day = day_of(now)
    numbers = await ctx.store.overview_numbers(db.identity.code, now_us - DAY_US, day)
    source = db.source_status()
    return json_response(
        {
            "database": {"id": db.config.id, "name": db.config.name, "host": db.config.host},
            "settings": {"enabled": settings.enabled, "full_text": settings.full_text},
            "source": {
                "path": db.config.log.path,
                "format": db.config.log.format,
                "state": source.state,
                "file": source.file,
                "reason": source.reason,
            },
            "counts_24h": numbers.counts,
            "retention": {
                "days": ctx.config.store.retention_days,
                "max_bytes": ctx.config.store.max_bytes,
                "store_bytes": numbers.used_bytes,
                "oldest_time": format_time(numbers.oldest_us) if numbers.oldest_us is not None else None,
            },
            "usage_today": {"day": day, "lines": numbers.usage_lines, "bytes": numbers.usage_bytes},
        }
    )


class SettingsPatch(BaseModel):
    """Body of PATCH .../logs/settings: any of the two settings."""

    model_config = ConfigDict(extra="forbid")
    enabled: StrictBool | None = None
    full_text: StrictBool | None = None


async def read_json_object(request: web.Request) -> dict[str, object]:
    """The request body as a JSON object, or a 400 saying what is wrong with it."""
    if request.content_type != "application/json":
        raise ApiError(415, "unsupported_media_type", "the body must be JSON (Content-Type: application/json)")
    raw = await request.read()
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise bad_body("", "the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise bad_body("", "the body must be a JSON object")
    return data


def validation_error(exc: ValidationError, within: str = "") -> ApiError:
    """The first problem of a body, naming its field (`within` prefixes it: `config.url`)."""
    err = exc.errors(include_url=False, include_input=False)[0]
    name = ".".join([*([within] if within else []), *(str(p) for p in err["loc"])])
    message = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
    return bad_body(name, message)


@routes.patch("/v1/databases/{ref}/logs/settings")
async def patch_settings(request: web.Request) -> web.Response:
    """Change `enabled` and/or `full_text`; the reader takes them at once."""
    ctx = request.app[CONTEXT]
    db = _database(request)
    _check_params(request, frozenset())
    data = await read_json_object(request)
    try:
        patch = SettingsPatch.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None
    if patch.enabled is None and patch.full_text is None:
        raise bad_body("", "give at least one of `enabled`, `full_text`")
    current = await ctx.store.get_settings(db.config.id) or DatabaseSettings(db.config.enabled, db.config.full_text)
    new = DatabaseSettings(
        enabled=current.enabled if patch.enabled is None else patch.enabled,
        full_text=current.full_text if patch.full_text is None else patch.full_text,
    )
    principal = request[PRINCIPAL]
    await ctx.store.put_settings(db.config.id, new, org=principal.org, actor=principal.actor)
    ctx.databases.apply_settings(db.config.id, new)
    return json_response({"enabled": new.enabled, "full_text": new.full_text})


@routes.get("/v1/databases")
async def list_databases(request: web.Request) -> web.Response:
    """The configured databases with their settings (an addition to SPEC, for clients)."""
    ctx = request.app[CONTEXT]
    _check_params(request, frozenset())
    out = []
    for db in ctx.databases.all():
        settings = await ctx.store.get_settings(db.config.id)
        s = settings or DatabaseSettings(db.config.enabled, db.config.full_text)
        out.append(
            {
                "id": db.config.id,
                "name": db.config.name,
                "host": db.config.host,
                "enabled": s.enabled,
                "full_text": s.full_text,
            }
        )
    return json_response({"databases": out})
