"""Log destinations (SPEC 4.1 rows 5-9): list, create, change, delete, test. Choices: docs/api.md.

The handlers read and validate bodies; the use cases (forwarder/usecases/destinations.py) decide.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from forwarder.api.auth import PRINCIPAL
from forwarder.api.context import CONTEXT, ApiContext, Destinations
from forwarder.api.errors import ApiError, bad_body, json_response
from forwarder.api.logs import read_json_object, validation_error
from forwarder.model import format_time
from forwarder.store.destinations import DeliveryState, Destination
from forwarder.usecases import destinations as cases

routes = web.RouteTableDef()


class FilterBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kinds: list[str] = Field(default_factory=list, max_length=32)
    database_ids: list[str] = Field(default_factory=list, max_length=256)


class CreateBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: str
    name: str = Field(min_length=1, max_length=200)
    config: dict[str, Any] = Field(default_factory=dict)
    filter: FilterBody = Field(default_factory=FilterBody)
    secret: str | None = Field(default=None, min_length=1, max_length=4096)
    enabled: StrictBool = True


class PatchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, min_length=1, max_length=200)
    enabled: StrictBool | None = None
    config: dict[str, Any] | None = None
    filter: FilterBody | None = None
    secret: str | None = Field(default=None, min_length=1, max_length=4096)


def _control(ctx: ApiContext) -> Destinations:
    if ctx.destinations is None:
        raise ApiError(503, "unavailable", "delivery is not running")
    return ctx.destinations


def _ports(ctx: ApiContext) -> cases.Ports:
    return cases.Ports(ctx.store, ctx.clock, _control(ctx))


def _actor(request: web.Request) -> cases.Actor:
    principal = request[PRINCIPAL]
    return cases.Actor(principal.org, principal.actor)


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


async def view(ctx: ApiContext, dest: Destination, stored: DeliveryState) -> dict[str, Any]:
    """A destination as the API shows it: never its secret."""
    state = ctx.destinations.state(dest.id) if ctx.destinations else None
    if state is None:
        state = stored
    else:
        # Dropped lines are counted in the store (retention adds to them beside the loop): read
        # them after the live state, so they never predate it. Everything else is the live state's.
        again = await ctx.store.destination(dest.id)
        stored = again[1] if again is not None else stored
    count, oldest_us = await ctx.store.lag(state.cursor)
    now = ctx.clock.now()
    return {
        "id": dest.id,
        "type": dest.type,
        "name": dest.name,
        "enabled": dest.enabled,
        "config": dest.config,
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


@routes.get("/v1/log-destinations")
async def list_destinations(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    return json_response({"destinations": [await view(ctx, d, s) for d, s in await ctx.store.destinations()]})


@routes.post("/v1/log-destinations")
async def create_destination(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    ports = _ports(ctx)
    body: CreateBody = await _body(request, CreateBody)
    draft = cases.Draft(body.type, body.name, body.enabled, body.config, _filter(body.filter), body.secret)
    try:
        created = await cases.create(ports, draft, _actor(request), _known_databases(ctx))
    except cases.DestinationError as exc:
        raise api_error(exc) from None
    out = await view(ctx, created.dest, created.state)
    if created.shown_secret is not None:
        out["secret"] = created.shown_secret  # shown this once (SPEC 2.6)
    return json_response(out, status=201)


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
    ports = _ports(ctx)
    try:
        dest = await cases.changeable(ctx.store, request.match_info["id"])
        body: PatchBody = await _body(request, PatchBody)
        if not body.model_fields_set:
            raise bad_body("", "give at least one of `name`, `enabled`, `config`, `filter`, `secret`")
        if "secret" in body.model_fields_set and body.secret is None:
            raise bad_body("secret", "cannot be removed; give a new one")
        changes = cases.Changes(
            name=body.name,
            enabled=body.enabled,
            config=body.config,
            filter=_filter(body.filter) if body.filter is not None else None,
            secret=body.secret,
        )
        await cases.change(ports, dest, changes, _actor(request), _known_databases(ctx))
        found = await cases.found(ctx.store, dest.id)
    except cases.DestinationError as exc:
        raise api_error(exc) from None
    return json_response(await view(ctx, *found))


@routes.delete("/v1/log-destinations/{id}")
async def delete_destination(request: web.Request) -> web.Response:
    ports = _ports(request.app[CONTEXT])
    try:
        await cases.remove(ports, request.match_info["id"], _actor(request))
    except cases.DestinationError as exc:
        raise api_error(exc) from None
    return web.Response(status=204)


@routes.post("/v1/log-destinations/{id}/test")
async def test_destination(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    try:
        dest, _ = await cases.found(ctx.store, request.match_info["id"])
    except cases.DestinationError as exc:
        raise api_error(exc) from None
    ok, error = await _control(ctx).test(dest)
    return json_response({"ok": True} if ok else {"ok": False, "error": error})
