"""Log destinations (SPEC 4.1 rows 5-9): list, create, change, delete, test. Choices: docs/api.md."""

from __future__ import annotations

import secrets
from typing import Annotated, Any, Final

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, WithJsonSchema
from pydantic.json_schema import SkipJsonSchema

from forwarder.api.auth import PRINCIPAL
from forwarder.api.context import CONTEXT, ApiContext, Destinations
from forwarder.api.errors import ApiError, bad_body, json_response
from forwarder.api.logs import LINE_ID_PATTERN, Time, read_json_object, validation_error
from forwarder.model import KIND_ALIASES, KINDS, expand_kinds, format_time
from forwarder.sinks import SINK_TYPES, sink_address, validated_config
from forwarder.store.destinations import DeliveryState, Destination, LineFilter, ManagedBy

routes = web.RouteTableDef()

ID_PREFIX: Final = "dst_"
SECRET_PREFIX: Final = "whsec_"  # noqa: S105 - a prefix, the secret is random


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


class CreateBody(BaseModel):
    """Body of POST /v1/log-destinations (its `config` is checked against the kind's model)."""

    model_config = ConfigDict(extra="forbid")
    type: str = Field(description="The kind of destination.")
    name: str = Field(min_length=1, max_length=200, description="Display name.")
    config: dict[str, Any] = Field(default_factory=dict, description="Settings of the kind.")
    filter: FilterBody = Field(default_factory=FilterBody)
    secret: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_CREDENTIAL,
        description=CREDENTIAL,
        json_schema_extra=WRITE_ONLY,
    )
    enabled: StrictBool = True


class PatchBody(BaseModel):
    """Body of PATCH /v1/log-destinations/{id}: any of its fields, at least one."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})
    name: str | None = Field(default=None, min_length=1, max_length=200, description="Display name.")
    enabled: StrictBool | None = None
    config: dict[str, Any] | None = Field(default=None, description="Settings of the kind, replaced whole.")
    filter: FilterBody | None = None
    secret: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_CREDENTIAL,
        description=CREDENTIAL,
        json_schema_extra=WRITE_ONLY,
    )


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


def _config(kind: str, config: dict[str, Any]) -> dict[str, Any]:
    try:
        return validated_config(kind, config)
    except ValidationError as exc:
        raise validation_error(exc, within="config") from None


def _filter(ctx: ApiContext, body: FilterBody) -> LineFilter:
    try:
        expand_kinds(body.kinds)
    except ValueError as exc:
        raise bad_body("filter.kinds", f"{exc}; use {', '.join(KINDS)}, errors, locks or maintenance") from None
    known = {d.config.id for d in ctx.databases.all()}
    for db_id in body.database_ids:
        if db_id not in known:
            raise bad_body("filter.database_ids", f"no database with id {db_id!r}")
    return LineFilter.of(body.kinds, body.database_ids)


async def _check_address(control: Destinations, kind: str, config: dict[str, Any]) -> None:
    address = sink_address(kind, SINK_TYPES[kind].config.model_validate(config))
    if address is not None:
        problem = await control.check_address(address)
        if problem:
            raise bad_body(f"config.{address.field}", problem)


async def _found(ctx: ApiContext, dest_id: str) -> tuple[Destination, DeliveryState]:
    found = await ctx.store.destination(dest_id)
    if found is None:
        raise ApiError(404, "not_found", f"no destination {dest_id!r}")
    return found


async def _found_changeable(ctx: ApiContext, dest_id: str) -> tuple[Destination, DeliveryState]:
    found = await _found(ctx, dest_id)
    if found[0].managed_by == "config":
        raise ApiError(
            409,
            "managed_by_config",
            f"destination {dest_id!r} is declared in the config file; change it there and reload (SIGHUP)",
        )
    return found


@routes.get("/v1/log-destinations")
async def list_destinations(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    return json_response({"destinations": [await view(ctx, d, s) for d, s in await ctx.store.destinations()]})


@routes.post("/v1/log-destinations")
async def create_destination(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    control = _control(ctx)
    body: CreateBody = await _body(request, CreateBody)
    kind = SINK_TYPES.get(body.type)
    if kind is None:
        raise bad_body("type", f"must be one of {', '.join(sorted(SINK_TYPES))}")
    config = _config(body.type, body.config)
    line_filter = _filter(ctx, body.filter)
    await _check_address(control, body.type, config)
    secret = body.secret
    if secret is None and kind.secret_generated:
        secret = SECRET_PREFIX + secrets.token_urlsafe(32)  # 32 random bytes
    if secret is None and kind.secret_required:
        raise bad_body("secret", f"a {body.type} destination needs its credential in `secret`")
    dest_id = ID_PREFIX + secrets.token_hex(8)
    now = ctx.clock.now()
    dest = Destination(
        id=dest_id,
        type=body.type,
        name=body.name,
        enabled=body.enabled,
        config=config,
        filter=line_filter,
        sealed_secret=control.seal_secret(secret, dest_id) if secret is not None else None,
        created_at=now,
        updated_at=now,
    )
    principal = request[PRINCIPAL]
    state = await ctx.store.add_destination(dest, org=principal.org, actor=principal.actor)
    await control.apply(dest_id)
    out = await view(ctx, dest, state)
    if kind.secret_generated:
        out["secret"] = secret  # shown this once (SPEC 2.6)
    return json_response(out, status=201)


@routes.get("/v1/log-destinations/{id}")
async def get_destination(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    return json_response(await view(ctx, *await _found(ctx, request.match_info["id"])))


@routes.patch("/v1/log-destinations/{id}")
async def change_destination(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    control = _control(ctx)
    dest, _ = await _found_changeable(ctx, request.match_info["id"])
    body: PatchBody = await _body(request, PatchBody)
    given = sorted(body.model_fields_set)
    if not given:
        raise bad_body("", "give at least one of `name`, `enabled`, `config`, `filter`, `secret`")
    changes: dict[str, Any] = {"updated_at": ctx.clock.now()}
    if body.name is not None:
        changes["name"] = body.name
    if body.enabled is not None:
        changes["enabled"] = body.enabled
    if body.config is not None:
        # `config` is replaced whole (its keys are few and depend on each other).
        changes["config"] = _config(dest.type, body.config)
        await _check_address(control, dest.type, changes["config"])
    if body.filter is not None:
        changes["filter"] = _filter(ctx, body.filter)
    if "secret" in body.model_fields_set:
        if body.secret is None:
            raise bad_body("secret", "cannot be removed; give a new one")
        changes["secret"] = control.seal_secret(body.secret, dest.id)
    new = Destination(
        id=dest.id,
        type=dest.type,
        name=changes.get("name", dest.name),
        enabled=changes.get("enabled", dest.enabled),
        config=changes.get("config", dest.config),
        filter=changes.get("filter", dest.filter),
        sealed_secret=changes.get("secret", dest.sealed_secret),
        created_at=dest.created_at,
        updated_at=changes["updated_at"],
    )
    principal = request[PRINCIPAL]
    await ctx.store.change_destination(new, org=principal.org, actor=principal.actor, fields=given)
    await control.apply(dest.id)
    return json_response(await view(ctx, *await _found(ctx, dest.id)))


@routes.delete("/v1/log-destinations/{id}")
async def delete_destination(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    control = _control(ctx)
    dest, _ = await _found_changeable(ctx, request.match_info["id"])
    principal = request[PRINCIPAL]
    await control.remove(dest)
    await ctx.store.remove_destination(dest.id, org=principal.org, actor=principal.actor)
    return web.Response(status=204)


@routes.post("/v1/log-destinations/{id}/test")
async def test_destination(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    dest, _ = await _found(ctx, request.match_info["id"])
    ok, error = await _control(ctx).test(dest)
    return json_response({"ok": True} if ok else {"ok": False, "error": error})
