"""The Logs API (SPEC 4.1, the database endpoints). Field names SPEC leaves open: docs/api.md."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any, Final, TypeVar, get_type_hints

import orjson
from aiohttp import web
from multidict import MultiMapping
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    StrictBool,
    ValidationError,
    WithJsonSchema,
    create_model,
    field_validator,
)
from pydantic.json_schema import JsonSchemaValue, SkipJsonSchema
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from forwarder.api.auth import PRINCIPAL, Principal
from forwarder.api.context import CONTEXT, ApiContext, DatabaseView
from forwarder.api.disconnect import unless_client_gone
from forwarder.api.errors import ApiError, bad_body, bad_parameter, json_response, raw_json_response
from forwarder.config import LogFormat
from forwarder.model import (
    FIELD_DESCRIPTIONS,
    IDENTITY_FIELDS,
    KIND_ALIASES,
    KINDS,
    SPEC_FIELDS,
    Kind,
    LogLine,
    expand_kinds,
    format_time,
    group_id,
    parse_group_id,
    parse_time,
)
from forwarder.sources.follower import SourceState
from forwarder.store import DatabaseSettings, Group, LineQuery
from forwarder.store.lines import MAX_QUERY_TERMS, query_terms
from forwarder.store.store import day_of

MAX_LIMIT: Final = 500
DEFAULT_LIMIT: Final = 100
MAX_WAIT_SECONDS: Final = 30
DAY_US: Final = 86_400 * 1_000_000
MAX_ID: Final = (1 << 63) - 1

routes = web.RouteTableDef()


def hex_path_id(request: web.Request, name: str, what: str) -> str:
    """The path parameter `name`, a 16-hex-digit id; anything else names no `what`: 404."""
    raw = request.match_info[name]
    if not HEX_ID.fullmatch(raw):
        # The text shown is cut: it is the caller's.
        raise ApiError(404, "not_found", f"no {what} with id {raw[:40]!r}")
    return raw


def database_of(request: web.Request) -> DatabaseView:
    ref = request.match_info["ref"]
    db = request.app[CONTEXT].databases.find(ref)
    if db is None:
        raise ApiError(404, "not_found", f"no database with id or name {ref!r}")
    return db


# --- query parameters: one pydantic model per endpoint, also the OpenAPI document's `parameters` ---


@dataclass(frozen=True, slots=True, eq=False)  # hashed by identity: typing hashes Annotated metadata
class QueryValue:
    """How one query parameter is read: `parse` raises ValueError with the text the caller sees,
    `schema` is its JSON Schema in the document. Annotate a field with it: `Annotated[int, QueryValue(...)]`."""

    parse: Callable[[Any], Any]
    schema: dict[str, Any]

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_plain_validator_function(self._validate)

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return dict(self.schema)

    def _validate(self, raw: Any) -> Any:
        try:
            return self.parse(raw)
        except (ValueError, TypeError, OverflowError) as exc:
            raise PydanticCustomError("invalid_parameter", "{reason}", {"reason": str(exc)}) from None


def integer(lo: int, hi: int) -> QueryValue:
    """A decimal integer from `lo` to `hi`."""

    def parse(raw: str) -> int:
        # Leading zeros dropped and the length checked before int(): past 4,300 digits int()
        # raises its own error (Python's integer-string limit), which must not reach the caller.
        digits = raw.lstrip("0") or "0"
        if not raw.isascii() or not raw.isdigit() or len(digits) > len(str(hi)) or not lo <= int(digits) <= hi:
            raise ValueError(f"must be an integer from {lo} to {hi}")
        return int(digits)

    return QueryValue(parse, {"type": "integer", "minimum": lo, "maximum": hi})


def text(lo: int, hi: int) -> QueryValue:
    """Text of `lo` to `hi` characters."""

    def parse(raw: str) -> str:
        if not lo <= len(raw) <= hi:
            raise ValueError(f"must be {lo} to {hi} characters")
        return raw

    return QueryValue(parse, {"type": "string", "minLength": lo, "maxLength": hi})


def parse_line_id(raw: str) -> int:
    """A line id as given in a parameter or header; ValueError when it cannot be one."""
    if not raw.isascii() or not raw.isdigit() or len(raw) > 19 or int(raw) > MAX_ID:
        raise ValueError("must be a line id (a decimal integer)")
    return int(raw)


def _time(raw: str) -> int:
    try:
        return parse_time(raw)
    except (ValueError, OverflowError):
        raise ValueError("must be an RFC 3339 time such as 2026-11-22T10:00:00Z") from None


def _group(raw: str) -> int:
    if not HEX_ID.fullmatch(raw):
        raise ValueError("must be a group id from the groups endpoint (16 hex digits)")
    return parse_group_id(raw)


def _kinds(raw: list[str]) -> frozenset[Kind]:
    names = [k.strip() for value in raw for k in value.split(",")]
    if any(len(name) > MAX_KIND_NAME for name in names):  # not echoed: no kind is that long
        raise ValueError(f"unknown kind; use one of {', '.join(KIND_NAMES)}")
    try:
        return expand_kinds(names)
    except ValueError as exc:
        raise ValueError(f"{exc}; use one of {', '.join(KIND_NAMES)}") from None


KIND_NAMES: Final = (*KINDS, *KIND_ALIASES)
MAX_KIND_NAME: Final = max(map(len, KIND_NAMES))
# Group, finding, query and alert ids: 16 lowercase hex digits (a 64-bit hash).
HEX_ID: Final = re.compile(r"[0-9a-f]{16}")
LineIdParam = Annotated[int, QueryValue(parse_line_id, {"type": "string", "pattern": "^[0-9]{1,19}$"})]
TimeParam = Annotated[int, QueryValue(_time, {"type": "string", "format": "date-time"})]
GroupParam = Annotated[int, QueryValue(_group, {"type": "string", "pattern": f"^{HEX_ID.pattern}$"})]
KindsParam = Annotated[
    frozenset[Kind], QueryValue(_kinds, {"type": "array", "items": {"type": "string", "enum": list(KIND_NAMES)}})
]
LimitParam = Annotated[int, integer(1, MAX_LIMIT)]


def search_words(lo: int, hi: int) -> QueryValue:
    """`q`: text of `lo` to `hi` characters, and at most MAX_QUERY_TERMS different words."""
    length = text(lo, hi)

    def parse(raw: str) -> str:
        value: str = length.parse(raw)
        query_terms(value)  # a ValueError names what is wrong
        return value

    return QueryValue(parse, length.schema)


class LogsQuery(BaseModel):
    """Query of `GET /v1/databases/{ref}/logs`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: KindsParam | SkipJsonSchema[None] = Field(
        None, description="Kinds or aliases (errors, locks, maintenance): repeated, or comma-separated."
    )
    q: Annotated[str, search_words(1, 500)] | SkipJsonSchema[None] = Field(
        None,
        description="Words that must all appear (as word prefixes) in message, detail, hint, context or"
        f" statement, at most {MAX_QUERY_TERMS} different ones; text without letters or digits is matched"
        " as a substring.",
    )
    group: GroupParam | SkipJsonSchema[None] = Field(None, description="A group id from the groups endpoint.")
    from_: TimeParam | SkipJsonSchema[None] = Field(
        None, alias="from", description="Lines written at or after this time."
    )
    to: TimeParam | SkipJsonSchema[None] = Field(None, description="Lines written before this time.")
    before: LineIdParam | SkipJsonSchema[None] = Field(None, description="Lines older than this id.")
    after: LineIdParam | SkipJsonSchema[None] = Field(
        None, description="The lines right after this id (live tail); never skips a line."
    )
    limit: LimitParam = Field(DEFAULT_LIMIT, description="Page size.")
    wait_seconds: Annotated[int, integer(0, MAX_WAIT_SECONDS)] = Field(
        0, description="With `after`: wait up to this long for a matching line before answering empty."
    )


class GroupsQuery(BaseModel):
    """Query of `GET /v1/databases/{ref}/logs/groups`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    from_: TimeParam | SkipJsonSchema[None] = Field(
        None, alias="from", description="Start of the window; default 24 hours ago."
    )
    limit: LimitParam = Field(DEFAULT_LIMIT, description="Groups.")


class NoQuery(BaseModel):
    """An endpoint without query parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


Q = TypeVar("Q", bound=BaseModel)
B = TypeVar("B", bound=BaseModel)


@cache
def _array_params(model: type[BaseModel]) -> frozenset[str]:
    properties = model.model_json_schema(by_alias=True).get("properties", {})
    return frozenset(name for name, p in properties.items() if p.get("type") == "array")


H = TypeVar("H", bound=Callable[[web.Request], Awaitable[web.StreamResponse]])


def reads_query(handler: H) -> H:
    """Mark an API handler that reads query parameters (through `parse_query`); the server refuses
    any query parameter on every other /v1 route (server.query_middleware), before the handler
    runs. A test checks the marks against the OpenAPI document's query models."""
    handler.reads_query = True  # type: ignore[attr-defined]
    return handler


def parse_query(request: web.Request, model: type[Q]) -> Q:
    """The request's query through `model`; a 400 naming the first parameter at fault."""
    return parse_params(request.query, model)


def parse_params(query: MultiMapping[str], model: type[Q]) -> Q:
    """Query parameters through `model` (the API's and the pages'); a 400 naming the first at fault."""
    allowed = {f.alias or name for name, f in model.model_fields.items()}
    arrays = _array_params(model)
    for name in query:
        if name not in allowed:
            listed = ", ".join(sorted(allowed)) or "none"
            raise bad_parameter(name, f"unknown query parameter; allowed: {listed}")
    data: dict[str, object] = {}
    for name in allowed:
        values = query.getall(name, [])
        if len(values) > 1 and name not in arrays:
            raise bad_parameter(name, "given more than once")
        if values:
            data[name] = values if name in arrays else values[0]
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False, include_input=False)[0]
        name = str(err["loc"][0]) if err["loc"] else ""
        raise bad_parameter(name, err["msg"]) from None


# --- answers: what the handlers send, described for the OpenAPI document ---------------------

Time = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
LINE_ID_PATTERN: Final = "^[0-9]+$"


def _line_fields() -> dict[str, Any]:
    # The fields and their order are SPEC_FIELDS; their types are LogLine's (identity: text).
    types = get_type_hints(LogLine)
    special: dict[str, Any] = {
        "id": (str, Field(pattern=LINE_ID_PATTERN, description=FIELD_DESCRIPTIONS["id"])),
        "time": (Time, Field(description=FIELD_DESCRIPTIONS["time"])),
    }
    plain = {
        name: (str if name in IDENTITY_FIELDS else types.get(name), Field(description=FIELD_DESCRIPTIONS[name]))
        for name in SPEC_FIELDS
    }
    return {name: special.get(name, plain[name]) for name in SPEC_FIELDS}


if TYPE_CHECKING:
    LogLineModel = BaseModel
else:
    LogLineModel = create_model(
        "LogLine",
        __doc__="A log line: every field is always present; what the log does not say is null.",
        **_line_fields(),
    )


class LogPage(BaseModel):
    """Lines, newest first."""

    lines: list[LogLineModel] = Field(max_length=MAX_LIMIT)
    has_more: bool = Field(
        description="Without `after`: older lines match (page on with `before`). With `after`: newer ones are"
        " already waiting (poll again at once)."
    )
    next_after: str | SkipJsonSchema[None] = Field(
        None,
        pattern=LINE_ID_PATTERN,
        description="With `after` only: the highest id the server looked at. Every matching line up to it is in"
        " this page or an earlier one: poll next with `after` set to it.",
    )


class LogGroup(BaseModel):
    """A repeated message: lines of one kind with the same text, numbers aside."""

    group: str = Field(pattern=f"^{HEX_ID.pattern}$", description="Pass it as the listing's `group`.")
    kind: Kind
    count: int = Field(ge=1)
    first_time: Time
    last_time: Time
    line: LogLineModel = Field(description="The newest line of the group.")


class LogGroups(BaseModel):
    """Groups, most frequent first."""

    model_config = ConfigDict(populate_by_name=True)
    from_: Time = Field(alias="from", description="Start of the window.")
    groups: list[LogGroup]


class LogSettings(BaseModel):
    """A database's log settings."""

    enabled: bool = Field(description="Whether its log is read.")
    full_text: bool = Field(description="Whether lines keep their values (not removed before storing).")


class DatabaseRef(BaseModel):
    """A configured database."""

    id: str
    name: str
    host: str


class Database(LogSettings, DatabaseRef):  # fields in this order: DatabaseRef's, then LogSettings'
    """A configured database with its log settings."""


class DatabaseList(BaseModel):
    """The configured databases."""

    databases: list[Database]


class SourceStatus(BaseModel):
    """Where the log is read from, or why it cannot be."""

    path: str = Field(
        description="What is read: the configured path (a glob), or for the journal `journal` and journalctl's"
        " matches (`journal _SYSTEMD_UNIT=postgresql@15-main.service`)."
    )
    format: LogFormat
    state: SourceState
    file: str | None = Field(description="The file being read.")
    reason: str | None = Field(description="Why the log cannot be read, in words.")
    time_note: str | None = Field(
        description="Why some of the log's times may not be what the server meant, in words (a time zone"
        " that is not the configured one, entries without a readable time); null when all times were read."
    )
    zone_mismatch_lines: int = Field(
        ge=0,
        description="Lines of the file being read whose time zone abbreviation the configured `timezone` does"
        " not use; they are read with PostgreSQL's default meaning of the abbreviation.",
    )
    log_zone: str | None = Field(
        description="The last such abbreviation (for example `EST`): the server's log_timezone shows it."
    )
    read_time_lines: int = Field(
        ge=0,
        description="Entries of the file being read without a readable time of their own, which carry the"
        " time they were read instead.",
    )


Counts = Annotated[
    dict[str, int],
    WithJsonSchema(
        {
            "type": "object",
            "required": list(KINDS),
            "additionalProperties": False,
            "properties": {k: {"type": "integer", "minimum": 0} for k in KINDS},
        }
    ),
]


class Retention(BaseModel):
    """How long lines are kept, and the store's size."""

    days: float
    max_bytes: int
    store_bytes: int = Field(description="Size of the store (every database's lines).")
    oldest_time: Time | None = Field(description="This database's oldest line.")


class UsageToday(BaseModel):
    """Lines stored and bytes of server log read today (UTC)."""

    day: Annotated[str, WithJsonSchema({"type": "string", "format": "date"})]
    lines: int
    bytes: int


class LogOverview(BaseModel):
    """Settings, where the log is read from, 24-hour counts, retention and today's usage."""

    database: DatabaseRef
    settings: LogSettings
    source: SourceStatus
    counts_24h: Counts = Field(description="Lines per kind (every kind) written in the last 24 hours.")
    retention: Retention
    usage_today: UsageToday


def _send(model: BaseModel, status: int = 200) -> web.Response:
    return json_response(model.model_dump(mode="json", by_alias=True), status)


# --- handlers ---------------------------------------------------------------------------------


def line_query(params: LogsQuery) -> LineQuery:
    """The store's query for the listing's parameters (the API's and the Logs page's)."""
    # A window with `from` after `to` is empty, not an error: it holds no line.
    return LineQuery(
        limit=params.limit,
        kinds=params.kind or None,
        q=params.q,
        group=params.group,
        from_us=params.from_,
        to_us=params.to,
        before=params.before,
        after=params.after,
    )


@routes.get("/v1/databases/{ref}/logs")
@reads_query
async def list_logs(request: web.Request) -> web.Response:
    """Lines newest first; with `after`, the lines right after it (live tail, no gaps)."""
    ctx = request.app[CONTEXT]
    db = database_of(request)
    params = parse_query(request, LogsQuery)
    if params.wait_seconds and params.after is None:
        raise bad_parameter("wait_seconds", "only works together with `after`")
    query = line_query(params)
    if params.after is None:
        page = await ctx.store.list_lines(db.identity.code, query)
    elif not params.wait_seconds:
        page = await ctx.store.tail_lines(db.identity.code, query, 0)
    else:
        # A live tail's long poll, which answers once a matching line exists; it stops waiting
        # when its client leaves (the answer is then written to nobody: 499, nginx's "client
        # closed request", in the request metrics).
        waited = await unless_client_gone(request, ctx.store.tail_lines(db.identity.code, query, params.wait_seconds))
        if waited is None:
            return web.Response(status=499)
        page = waited
    # The stored documents are spliced in as they are (serialized once, when stored).
    body = b'{"lines":[' + b",".join(page.docs) + b'],"has_more":' + (b"true" if page.has_more else b"false")
    if page.next_after is not None:
        body += b',"next_after":"%d"' % page.next_after
    return raw_json_response(body + b"}")


async def groups_of(ctx: ApiContext, db: DatabaseView, params: GroupsQuery) -> tuple[int, list[Group]]:
    """The window's start (µs) and its groups, most frequent first (the API's and the groups page's)."""
    now_us = int(ctx.clock.now() * 1_000_000)
    from_us = now_us - DAY_US if params.from_ is None else params.from_
    return from_us, await ctx.store.groups(db.identity.code, from_us, params.limit)


@routes.get("/v1/databases/{ref}/logs/groups")
@reads_query
async def list_groups(request: web.Request) -> web.Response:
    """Repeated messages over the last 24 hours, or since `from`; most frequent first."""
    ctx = request.app[CONTEXT]
    db = database_of(request)
    params = parse_query(request, GroupsQuery)
    from_us, groups = await groups_of(ctx, db, params)
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


async def settings_of(ctx: ApiContext, db: DatabaseView) -> DatabaseSettings:
    """A database's settings: as last changed through the API or pages, else as configured."""
    return await ctx.store.get_settings(db.config.id) or DatabaseSettings(db.config.enabled, db.config.full_text)


async def overview_of(ctx: ApiContext, db: DatabaseView) -> LogOverview:
    """A database's overview (the API's and the overview page's)."""
    settings = await settings_of(ctx, db)
    now = ctx.clock.now()
    now_us = int(now * 1_000_000)
    day = day_of(now)
    numbers = await ctx.store.overview_numbers(db.identity.code, now_us - DAY_US, day)
    source = db.source_status()
    return LogOverview(
        database=DatabaseRef(id=db.config.id, name=db.config.name, host=db.config.host),
        settings=LogSettings(enabled=settings.enabled, full_text=settings.full_text),
        source=SourceStatus(
            path=db.config.log.source(),
            format=db.config.log.format,
            state=source.state,
            file=source.file,
            reason=source.reason,
            time_note=source.time_note,
            zone_mismatch_lines=source.times.zone_mismatches,
            log_zone=source.times.foreign_zone,
            read_time_lines=source.times.read_time,
        ),
        counts_24h=numbers.counts,
        retention=Retention(
            days=ctx.config.store.retention_days,
            max_bytes=ctx.config.store.max_bytes,
            store_bytes=numbers.used_bytes,
            oldest_time=format_time(numbers.oldest_us) if numbers.oldest_us is not None else None,
        ),
        usage_today=UsageToday(day=day, lines=numbers.usage_lines, bytes=numbers.usage_bytes),
    )


@routes.get("/v1/databases/{ref}/logs/overview")
async def overview(request: web.Request) -> web.Response:
    """Settings, where the log is read from (or why not), 24-hour counts, retention, today's usage."""
    db = database_of(request)
    return _send(await overview_of(request.app[CONTEXT], db))


# Optional, but never null (see SettingsPatch._given); a plain Optional keeps errors at the field's name.
Flag = Annotated[StrictBool | None, WithJsonSchema({"type": "boolean"})]


class SettingsPatch(BaseModel):
    """Any of a database's two log settings; at least one."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})
    enabled: Flag = Field(None, description="Read the database's log (false: stop, keeping the place).")
    full_text: Flag = Field(None, description="Keep values in the lines read from now on instead of removing them.")

    @field_validator("enabled", "full_text", mode="before")
    @classmethod
    def _given(cls, value: object) -> object:
        # Leave a setting out to keep it; null is not a setting.
        if value is None:
            raise ValueError("must be true or false")
        return value


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


async def read_body(request: web.Request, model: type[B]) -> B:
    """The request body as `model`, or a 400 naming the field at fault (415 when it is not JSON)."""
    try:
        return model.model_validate(await read_json_object(request))
    except ValidationError as exc:
        raise validation_error(exc) from None


# pydantic-core's tags of the plain types a union may hold
_TYPE_TAGS: Final = frozenset(
    {"bool", "int", "float", "str", "bytes", "none", "list", "dict", "tuple", "set", "decimal"}
)


def _union_tag(part: str | int) -> bool:
    return isinstance(part, str) and (part[:1].isupper() or "[" in part or "-" in part or part in _TYPE_TAGS)


def validation_error(exc: ValidationError, within: str = "") -> ApiError:
    """The first problem of a body, naming its field (`within` prefixes it: `config.url`)."""
    err = exc.errors(include_url=False, include_input=False)[0]
    loc = err["loc"]
    # A union (an optional nested body, `StrictBool | None`) puts its member's tag in the path
    # ("AboutBody", "function-after[...]", "constrained-str", "bool", "none"); the API's fields are
    # snake_case words that are none of these, so such parts are dropped. The last part of an
    # unknown field is that field, whatever its spelling ("Full_text", "full-text").
    unknown = [str(loc[-1])] if loc and err["type"] == "extra_forbidden" else []
    parts = [str(p) for p in loc[: len(loc) - len(unknown)] if not _union_tag(p)] + unknown
    name = ".".join([*([within] if within else []), *parts])
    if err["type"] == "extra_forbidden":
        message = "unknown field"
    elif err["type"] in ("model_type", "model_attributes_type", "dict_type"):
        message = "must be a JSON object"  # not pydantic's "... or instance of AboutBody"
    else:
        message = err["msg"].removeprefix("Value error, ")
    return bad_body(name, message)


async def change_settings(
    ctx: ApiContext, db: DatabaseView, patch: SettingsPatch, principal: Principal
) -> DatabaseSettings:
    """Change a database's settings (audited); its reader takes them at once. The one use case
    behind the API's PATCH and the overview page's switches."""
    current = await settings_of(ctx, db)
    new = DatabaseSettings(
        enabled=current.enabled if patch.enabled is None else patch.enabled,
        full_text=current.full_text if patch.full_text is None else patch.full_text,
    )
    await ctx.store.put_settings(db.config.id, new, org=principal.org, actor=principal.actor)
    ctx.databases.apply_settings(db.config.id, new)
    return new


@routes.patch("/v1/databases/{ref}/logs/settings")
async def patch_settings(request: web.Request) -> web.Response:
    """Change `enabled` and/or `full_text`; the reader takes them at once."""
    ctx = request.app[CONTEXT]
    db = database_of(request)
    data = await read_json_object(request)
    try:
        patch = SettingsPatch.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None
    if patch.enabled is None and patch.full_text is None:
        raise bad_body("", "give at least one of `enabled`, `full_text`")
    new = await change_settings(ctx, db, patch, request[PRINCIPAL])
    return _send(LogSettings(enabled=new.enabled, full_text=new.full_text))


@routes.get("/v1/databases")
async def list_databases(request: web.Request) -> web.Response:
    """The configured databases with their settings (an addition to SPEC, for clients)."""
    ctx = request.app[CONTEXT]
    out = []
    for db in ctx.databases.all():
        s = await settings_of(ctx, db)
        out.append(
            Database(
                id=db.config.id, name=db.config.name, host=db.config.host, enabled=s.enabled, full_text=s.full_text
            )
        )
    return _send(DatabaseList(databases=out))
