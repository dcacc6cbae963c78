"""Log destinations (SPEC 4.1 rows 5-9): list, create, change, delete, test. Choices: docs/api.md.

The handlers read and validate bodies; the use cases (forwarder/usecases/destinations.py) decide.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, WithJsonSchema
from pydantic.json_schema import SkipJsonSchema

from forwarder.api.auth import PRINCIPAL, Principal
from forwarder.api.context import CONTEXT, ApiContext, Destinations
from forwarder.api.errors import ApiError, bad_body, json_response
from forwarder.api.logs import LINE_ID_PATTERN, Time, read_json_object, validation_error
from forwarder.config import DisplayName
from forwarder.model import KIND_ALIASES, KINDS, format_time
from forwarder.sinks import validated_config
from forwarder.sinks.credentials import masked_config
from forwarder.store.destinations import DeliveryState, Destination, ManagedBy
from forwarder.usecases import destinations as cases

routes = web.RouteTableDef()


KindName = Annotated[str, WithJsonSchema({"type": "string", "enum": [*KINDS, *KIND_ALIASES]})]


class FilterBody(BaseModel):
    """Which lines a destination receives; an empty list means every one."""

    model_config = ConfigDict(extra="forbid")
    kinds: list[KindName] = Field(
        default_factory=list, max_length=32, description="Kinds or aliases (errors, locks, maintenance)."
    )
    database_ids: list[str] = Field(default_factory=list, max_length=256, description="Ids of databases.")


MAX_CREDENTIAL: Final = 4096
CREDENTIAL: Final = (
    "The destination's credential (the webhook's signing secret, an API key or token, a password, a client key);"
    " never shown again."
)
WRITE_ONLY: Final[dict[str, Any]] = {"writeOnly": True}
Credential = Annotated[
    str | None, Field(min_length=1, max_length=MAX_CREDENTIAL, description=CREDENTIAL, json_schema_extra=WRITE_ONLY)
]


class CreateBody(BaseModel):
    """Body of POST /v1/log-destinations (its `config` is checked against the kind's model)."""

    model_config = ConfigDict(extra="forbid")
    type: str = Field(description="The kind of destination.")
    name: DisplayName = Field(description="Display name.")
    config: dict[str, Any] = Field(default_factory=dict, description="Settings of the kind.")
    filter: FilterBody = Field(default_factory=FilterBody)
    secret: Credential = None
    enabled: StrictBool = True


class PatchBody(BaseModel):
    """Body of PATCH /v1/log-destinations/{id}: any of its fields, at least one."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})
    # Not nullable: null is not "keep it" (leave the field out for that), and a 400 says so.
    name: DisplayName | SkipJsonSchema[None] = Field(default=None, description="Display name.")
    enabled: StrictBool | SkipJsonSchema[None] = None
    config: dict[str, Any] | SkipJsonSchema[None] = Field(
        default=None, description="Settings of the kind, replaced whole."
    )
    filter: FilterBody | SkipJsonSchema[None] = None
    secret: Credential = None


class DeliveryView(BaseModel):
    """How delivery to a destination stands."""

    cursor: str = Field(
        pattern=LINE_ID_PATTERN, description="The last line id accounted for (sent, filtered out or dropped)."
    )
    lag_lines: int = Field(ge=0, description="Lines stored after the cursor (before the filter).")
    oldest_undelivered_age_seconds: float = Field(ge=0, description="Age of the oldest of them.")
    in_flight_lines: int = Field(ge=0, description="Lines of the batch being sent.")
    attempts: int = Field(ge=0, description="Failures in a row of the batch being sent.")
    next_attempt_at: Time | None = Field(description="When that batch is tried again.")
    last_error: str | None = Field(description="The latest failure, kept after a later success.")
    last_error_at: Time | None
    last_success_at: Time | None
    sent_lines: int = Field(ge=0)
    dropped_lines: int = Field(ge=0, description="Deleted by retention before delivery, or refused for good.")


class DestinationView(BaseModel):
    """A destination as the API shows it: never its secret."""

    id: str
    type: str
    name: str
    enabled: bool
    config: dict[str, Any]
    filter: FilterBody
    has_secret: bool = Field(description="Whether a secret is set.")
    managed_by: ManagedBy = Field(description="config: declared in the config file; PATCH and DELETE answer 409.")
    created_at: Time
    updated_at: Time
    delivery: DeliveryView


class CreatedView(DestinationView):
    """A new destination; a webhook's shows its signing secret, this once."""

    secret: str | SkipJsonSchema[None] = Field(None, description="The generated signing secret, shown once.")


class DestinationList(BaseModel):
    """Every destination."""

    destinations: list[DestinationView]


class TestResult(BaseModel):
    """Whether the destination accepted the test line."""

    __test__ = False  # not a pytest class
    ok: bool
    error: str | SkipJsonSchema[None] = Field(None, description="Why not, when it did not.")


def _control(ctx: ApiContext) -> Destinations:
    if ctx.destinations is None:
        raise ApiError(503, "unavailable", "delivery is not running")
    return ctx.destinations


def _ports(ctx: ApiContext) -> cases.Ports:
    return cases.Ports(ctx.store, ctx.clock, _control(ctx))


def _known_databases(ctx: ApiContext) -> set[str]:
    return {d.config.id for d in ctx.databases.all()}


def api_error(exc: cases.DestinationError) -> ApiError:
    """The API's answer to a use case's refusal."""
    if isinstance(exc, cases.InvalidConfig):
        return validation_error(exc.error, within="config")
    if isinstance(exc, cases.Invalid):
        return bad_body(exc.field, exc.message)
    if isinstance(exc, cases.NotFound):
        return ApiError(404, "not_found", exc.message)
    if isinstance(exc, cases.ManagedByConfig):
        return ApiError(409, "managed_by_config", exc.message)
    raise AssertionError(f"no API error for {type(exc).__name__}")  # a new refusal needs its status here


def _time(seconds: float | None) -> str | None:
    return format_time(int(seconds * 1_000_000)) if seconds is not None else None


def _shown_config(dest: Destination) -> dict[str, Any]:
    """The stored config as its kind's model names its keys today (a store written before a key was
    renamed, such as `user` -> `username`, shows the new name), its URLs' credentials masked."""
    try:
        config = validated_config(dest.type, dest.config)
    except ValidationError:  # a config stored under older, stricter or looser rules: shown as stored
        config = dest.config
    return masked_config(config)


async def view(ctx: ApiContext, dest: Destination, stored: DeliveryState) -> dict[str, Any]:
    """A destination as the API shows it: never its secret."""
    live = ctx.destinations
    if live is None or live.state(dest.id) is None:  # no loop runs: the stored state is all there is
        state = stored
    else:
        # Dropped lines are counted in the store (retention adds to them beside the loop), the rest
        # is the live state's. Read the store first and the live state after it: the live state is
        # then at least as new as the row read, so the dropped lines shown never run ahead of the
        # error and counts that go with them (a save committing between the two reads did).
        again = await ctx.store.destination(dest.id)
        stored = again[1] if again is not None else stored
        state = live.state(dest.id) or stored
    count, oldest_us = await ctx.store.lag(state.cursor)
    now = ctx.clock.now()
    return {
        "id": dest.id,
        "type": dest.type,
        "name": dest.name,
        "enabled": dest.enabled,
        "config": _shown_config(dest),
        "filter": dest.filter.to_json(),
        "has_secret": dest.sealed_secret is not None,
        "managed_by": dest.managed_by,
        "created_at": _time(dest.created_at),
        "updated_at": _time(dest.updated_at),
        "delivery": {
            "cursor": str(state.cursor),
            "lag_lines": count,
            "oldest_undelivered_age_seconds": round(max(0.0, now - oldest_us / 1e6), 3) if oldest_us else 0,
            "in_flight_lines": len(state.inflight_lines or ()),
            "attempts": state.attempts,
            "next_attempt_at": _time(state.next_attempt_at),
            "last_error": state.last_error,
            "last_error_at": _time(state.last_error_at),
            "last_success_at": _time(state.last_success_at),
            "sent_lines": state.sent_lines,
            "dropped_lines": max(stored.dropped_lines, state.dropped_lines),
        },
    }


async def _body(request: web.Request, model: type[BaseModel]) -> Any:
    data = await read_json_object(request)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None


def _filter(body: FilterBody) -> cases.FilterSpec:
    return cases.FilterSpec(body.kinds, body.database_ids)


def actor_of(principal: Principal) -> cases.Actor:
    """Who asks, as the use cases' audit records name them."""
    return cases.Actor(principal.org, principal.actor)


async def destination_views(ctx: ApiContext) -> list[dict[str, Any]]:
    """Every destination as the API lists it (and the destinations page shows it)."""
    return [await view(ctx, d, s) for d, s in await ctx.store.destinations()]


async def create_from(ctx: ApiContext, body: CreateBody, principal: Principal) -> dict[str, Any]:
    """Create a destination (the one path behind POST and the page's form): its view, with a
    generated or given webhook `secret` this once. Raises ApiError."""
    ports = _ports(ctx)
    draft = cases.Draft(body.type, body.name, body.enabled, body.config, _filter(body.filter), body.secret)
    try:
        created = await cases.create(ports, draft, actor_of(principal), _known_databases(ctx))
    except cases.DestinationError as exc:
        raise api_error(exc) from None
    out = await view(ctx, created.dest, created.state)
    if created.shown_secret is not None:
        out["secret"] = created.shown_secret  # shown this once (SPEC 2.6)
    return out


async def change_from(ctx: ApiContext, dest: Destination, body: PatchBody, principal: Principal) -> dict[str, Any]:
    """Apply a change (PATCH semantics: fields not given are kept) to `dest`, as `cases.changeable`
    returned it; its view afterwards. Raises ApiError."""
    ports = _ports(ctx)
    if not body.model_fields_set:
        raise bad_body("", "give at least one of `name`, `enabled`, `config`, `filter`, `secret`")
    if "secret" in body.model_fields_set and body.secret is None:
        raise bad_body("secret", "cannot be removed; give a new one")
    for field in ("name", "enabled", "config", "filter"):
        if field in body.model_fields_set and getattr(body, field) is None:
            raise bad_body(field, "must not be null; leave the field out to keep it")
    changes = cases.Changes(
        name=body.name,
        enabled=body.enabled,
        config=body.config,
        filter=_filter(body.filter) if body.filter is not None else None,
        secret=body.secret,
    )
    try:
        await cases.change(ports, dest, changes, actor_of(principal), _known_databases(ctx))
        found = await cases.found(ctx.store, dest.id)
    except cases.DestinationError as exc:
        raise api_error(exc) from None
    return await view(ctx, *found)


async def send_test_line(ctx: ApiContext, dest_id: str) -> tuple[bool, str | None]:
    """Send the test line: (True, None) or (False, the error, credential-free). Raises ApiError."""
    try:
        dest, _ = await cases.found(ctx.store, dest_id)
    except cases.DestinationError as exc:
        raise api_error(exc) from None
    return await _control(ctx).test(dest)


@routes.get("/v1/log-destinations")
async def list_destinations(request: web.Request) -> web.Response:
    return json_response({"destinations": await destination_views(request.app[CONTEXT])})


@routes.post("/v1/log-destinations")
async def create_destination(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    _control(ctx)  # 503 before the body is read, as before
    body: CreateBody = await _body(request, CreateBody)
    return json_response(await create_from(ctx, body, request[PRINCIPAL]), status=201)


@routes.get("/v1/log-destinations/{id}")
async def get_destination(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    try:
        found = await cases.found(ctx.store, request.match_info["id"])
    except cases.DestinationError as exc:
        raise api_error(exc) from None
    return json_response(await view(ctx, *found))


@routes.patch("/v1/log-destinations/{id}")
async def change_destination(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    _control(ctx)
    try:
        dest = await cases.changeable(ctx.store, request.match_info["id"])
    except cases.DestinationError as exc:
        raise api_error(exc) from None
    body: PatchBody = await _body(request, PatchBody)
    return json_response(await change_from(ctx, dest, body, request[PRINCIPAL]))


@routes.delete("/v1/log-destinations/{id}")
async def delete_destination(request: web.Request) -> web.Response:
    await delete_by_id(request.app[CONTEXT], request.match_info["id"], request[PRINCIPAL])
    return web.Response(status=204)


async def delete_by_id(ctx: ApiContext, dest_id: str, principal: Principal) -> None:
    """Stop and delete a destination created through the API. Raises ApiError."""
    try:
        await cases.remove(_ports(ctx), dest_id, actor_of(principal))
    except cases.DestinationError as exc:
        raise api_error(exc) from None


@routes.post("/v1/log-destinations/{id}/test")
async def test_destination(request: web.Request) -> web.Response:
    ok, error = await send_test_line(request.app[CONTEXT], request.match_info["id"])
    return json_response({"ok": True} if ok else {"ok": False, "error": error})
