"""The destinations pages: the list with delivery state, a destination's page (enable, disable, send a
test line, delete), and the create and edit forms generated from each kind's config model.

Every write goes through the same functions as the API (forwarder/api/destinations.py), so the
same validation, network guard, audit and one-time secret apply. A secret is rendered only on the
page that answers the creating POST; forms never echo one back.
"""

from __future__ import annotations

import re
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Final, Literal, TypeVar

from aiohttp import web
from multidict import MultiMapping
from pydantic import BaseModel, ValidationError

from forwarder.api.context import CONTEXT, ApiContext
from forwarder.api.destinations import (
    CREDENTIAL,
    CreateBody,
    PatchBody,
    change_from,
    create_from,
    delete_by_id,
    destination_views,
    send_test_line,
    view,
)
from forwarder.api.destinations import (
    api_error as destination_error,
)
from forwarder.api.errors import ApiError
from forwarder.api.logs import validation_error
from forwarder.model import KIND_ALIASES, KINDS
from forwarder.sinks import SINK_TYPES, SinkType
from forwarder.store.destinations import Destination
from forwarder.usecases import destinations as cases
from forwarder.web.databases import principal
from forwarder.web.render import page

routes = web.RouteTableDef()

SECTION: Final = "destinations"
# Failures in a row of the same batch after which a destination shows as failing, not retrying:
# the first retries (30 s, 60 s) are often a receiver restarting.
FAILING_AFTER: Final = 3
# A string setting longer than a URL may be is a multi-line value (PEM certificates): a textarea.
LONG_TEXT: Final = 2048

InputType = Literal["text", "url", "number", "checkbox", "select", "password", "textarea"]
State = Literal["disabled", "up_to_date", "delivering", "retrying", "failing"]


@dataclass(frozen=True, slots=True)
class FormField:
    """One input of a form, derived from a config model's JSON schema.

    `name` is the form field's name and the name an error of the API gives it (`config.url`).
    """

    name: str
    label: str
    input: InputType
    help: str
    required: bool
    default: str | bool | None
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None

    @property
    def id(self) -> str:
        return "f-" + self.name.replace(".", "-")


def _input_type(key: str, shape: Mapping[str, Any]) -> InputType:
    if shape.get("writeOnly"):
        return "password"
    if "enum" in shape or "const" in shape:
        return "select"
    kind = shape.get("type")
    if kind == "boolean":
        return "checkbox"
    if kind in ("integer", "number"):
        return "number"
    if shape.get("maxLength", 0) > LONG_TEXT:
        return "textarea"
    if key == "url" or key.endswith("_url") or shape.get("format") == "uri":
        return "url"
    return "text"


def _form_field(key: str, prop: Mapping[str, Any], required: bool) -> FormField:
    # `X | None` is anyOf [X, null]: the input is X's, and it may be left empty.
    options = [o for o in prop.get("anyOf", [prop]) if o.get("type") != "null"]
    shape = {**prop, **options[0]} if len(options) == 1 else dict(prop)
    kind = _input_type(key, shape)
    choices = tuple(str(c) for c in shape.get("enum", [shape["const"]] if "const" in shape else []))
    default = prop.get("default")
    return FormField(
        name=f"config.{key}",
        label=key.replace("_", " "),
        input=kind,
        help=str(prop.get("description", "")),
        required=required,
        default=default if isinstance(default, bool) else None if default is None else str(default),
        choices=choices,
        minimum=shape.get("minimum"),
        maximum=shape.get("maximum"),
    )


def config_fields(model: type[BaseModel]) -> tuple[FormField, ...]:
    """One input per field of a kind's config model, in the model's order."""
    schema = model.model_json_schema()
    required = set(schema.get("required", ()))
    return tuple(_form_field(key, prop, key in required) for key, prop in schema.get("properties", {}).items())


def secret_field(kind: SinkType[Any], editing: bool) -> FormField:
    """The destination's credential: a password input, never prefilled."""
    if editing:
        note = "Leave empty to keep the current one."
    elif kind.secret_generated:
        note = "Leave empty to have one generated; it is shown once, after creating."
    elif kind.secret_required:
        note = "Required."
    else:
        note = "Optional."
    required = kind.secret_required and not kind.secret_generated and not editing
    return FormField("secret", "secret", "password", f"{CREDENTIAL} {note}", required, None)


def config_from_form(fields: Sequence[FormField], form: MultiMapping[Any]) -> dict[str, Any]:
    """The `config` a submitted form gives: an empty input is left out (its default applies); a
    number that is not one is passed on as typed, for the model to name."""
    out: dict[str, Any] = {}
    for f in fields:
        key = f.name.removeprefix("config.")
        if f.input == "checkbox":
            out[key] = form.get(f.name) == "true"
            continue
        raw = form.get(f.name)
        if not isinstance(raw, str) or not raw.strip():
            continue
        if f.input == "number":
            try:
                out[key] = int(raw) if raw.strip().lstrip("-").isdigit() else float(raw)
            except ValueError:
                out[key] = raw
        elif f.input == "textarea":
            out[key] = raw.replace("\r\n", "\n")  # browsers send a textarea's lines with CRLF
        else:
            out[key] = raw.strip()
    return out


# A PEM block (RFC 7468): its label, and a base64 body (with or without its line breaks).
_PEM_BLOCK: Final = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----([A-Za-z0-9+/=\s]+)-----END \1-----")


def _pem_line(match: re.Match[str]) -> str:
    body = re.sub(r"\s", "", match.group(2))
    lines = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
    return f"-----BEGIN {match.group(1)}-----\n{lines}\n-----END {match.group(1)}-----\n"


def secret_from_form(form: MultiMapping[Any]) -> str | None:
    """The secret typed in the password input, or None when it was left empty.

    A password input drops the line breaks of what is pasted into it (HTML's value sanitization), so
    a PEM private key (syslog's client key) arrives on one line, which OpenSSL cannot read: each PEM
    block of such a value is laid out again, its body in lines of 64 characters (RFC 7468 section 2).
    """
    raw = form.get("secret")
    if not isinstance(raw, str) or not raw:
        return None
    if "\n" in raw or not _PEM_BLOCK.search(raw):
        return raw
    return _PEM_BLOCK.sub(_pem_line, raw.strip())


def _strings(form: MultiMapping[Any], name: str) -> list[str]:
    return [v for v in form.getall(name, []) if isinstance(v, str)]


def typed_values(fields: Sequence[FormField], form: MultiMapping[Any]) -> dict[str, Any]:
    """What the person typed, to show the form again: every field but the secret."""
    values: dict[str, Any] = {"name": form.get("name", ""), "enabled": form.get("enabled") == "true"}
    for f in fields:
        values[f.name] = form.get(f.name) == "true" if f.input == "checkbox" else form.get(f.name, "")
    values["filter.kinds"] = _strings(form, "filter.kinds")
    values["filter.database_ids"] = _strings(form, "filter.database_ids")
    return values


def stored_values(fields: Sequence[FormField], shown: Mapping[str, Any]) -> dict[str, Any]:
    """A destination's view as form values (its URLs masked as the API shows them; no secret)."""
    values: dict[str, Any] = {
        "name": shown["name"],
        "enabled": shown["enabled"],
        "filter.kinds": list(shown["filter"]["kinds"]),
        "filter.database_ids": list(shown["filter"]["database_ids"]),
    }
    for f in fields:
        value = shown["config"].get(f.name.removeprefix("config."))
        values[f.name] = value if isinstance(value, bool) else "" if value is None else str(value)
    return values


def default_values(fields: Sequence[FormField]) -> dict[str, Any]:
    values: dict[str, Any] = {"name": "", "enabled": True, "filter.kinds": [], "filter.database_ids": []}
    for f in fields:
        values[f.name] = f.default if f.default is not None else (False if f.input == "checkbox" else "")
    return values


def delivery_state(shown: Mapping[str, Any]) -> State:
    """How delivery stands, in a word: disabled; failing after FAILING_AFTER failures in a row of
    the same batch (retrying before); delivering while lines wait; else up to date."""
    d = shown["delivery"]
    if not shown["enabled"]:
        return "disabled"
    if d["attempts"] >= FAILING_AFTER:
        return "failing"
    if d["attempts"]:
        return "retrying"
    if d["lag_lines"] or d["in_flight_lines"]:
        return "delivering"
    return "up_to_date"


def duration(seconds: float) -> str:
    """An age such as `45 s`, `12 min`, `3 h 05 min`, `2 d 4 h`."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def _row(shown: dict[str, Any]) -> dict[str, Any]:
    return {
        "d": shown,
        "state": delivery_state(shown),
        "age": duration(shown["delivery"]["oldest_undelivered_age_seconds"]),
    }


class _TestResults:
    """The latest Send-test outcomes for the page a form post without JavaScript is sent back to.

    Kept in memory under a random token, so the URL carries only the token and never the
    receiver's text; the oldest are forgotten beyond `limit`.
    """

    def __init__(self, limit: int = 256) -> None:
        self._limit = limit
        self._results: OrderedDict[str, tuple[str, bool, str | None]] = OrderedDict()

    def put(self, dest_id: str, ok: bool, error: str | None) -> str:
        token = secrets.token_urlsafe(12)
        self._results[token] = (dest_id, ok, error)
        while len(self._results) > self._limit:
            self._results.popitem(last=False)
        return token

    def get(self, token: str, dest_id: str) -> dict[str, Any] | None:
        found = self._results.get(token)
        if found is None or found[0] != dest_id:
            return None
        return {"ok": found[1], "error": found[2]}


TEST_RESULTS: Final = _TestResults()


def _kind(name: str) -> SinkType[Any]:
    kind = SINK_TYPES.get(name)
    if kind is None:
        raise ApiError(404, "not_found", f"no destination kind {name!r}; choose one of {', '.join(sorted(SINK_TYPES))}")
    return kind


@cache
def kind_fields(kind: str) -> tuple[FormField, ...]:
    """The form fields of destination kind `kind` (derived once per kind); a 404 for an unknown kind."""
    return config_fields(_kind(kind).config)


async def _shown(ctx: ApiContext, dest_id: str) -> dict[str, Any]:
    try:
        found = await cases.found(ctx.store, dest_id)
    except cases.DestinationError as exc:
        raise destination_error(exc) from None
    return await view(ctx, *found)


def _body_from_form(fields: Sequence[FormField], form: MultiMapping[Any]) -> dict[str, Any]:
    """The API body a submitted create or edit form stands for (`secret` only when one was typed)."""
    secret = secret_from_form(form)
    return {
        "name": form.get("name", ""),
        "config": config_from_form(fields, form),
        "filter": {"kinds": _strings(form, "filter.kinds"), "database_ids": _strings(form, "filter.database_ids")},
        "enabled": form.get("enabled") == "true",
        **({"secret": secret} if secret is not None else {}),
    }


R = TypeVar("R")


async def _attempt(call: Callable[[], Awaitable[R]]) -> R | ApiError:
    """`call()`'s result, or the 400 the form is shown again with: a body the API's model refuses
    (naming the field) or a 400 of the use case. Other errors propagate."""
    try:
        return await call()
    except ValidationError as exc:
        return validation_error(exc)
    except ApiError as exc:
        if exc.status != 400:
            raise
        return exc


def _form_context(
    ctx: ApiContext, kind: str, values: dict[str, Any], *, editing: dict[str, Any] | None, error: ApiError | None
) -> dict[str, Any]:
    sink_type = _kind(kind)
    what = f"Edit {editing['name']}" if editing else f"New {kind} destination"
    return {
        "title": what,
        "section": SECTION,
        "kind": kind,
        "fields": kind_fields(kind),
        "secret": secret_field(sink_type, editing is not None),
        "values": values,
        "editing": editing,
        "error": error,
        "kind_choices": [*KINDS, *KIND_ALIASES],
        "databases": [(d.config.id, d.config.name) for d in ctx.databases.all()],
        "name_field": FormField("name", "name", "text", str(CreateBody.model_fields["name"].description), True, None),
        "enabled_field": FormField("enabled", "enabled", "checkbox", "Deliver lines to it.", False, True),
    }


@routes.get("/ui/destinations")
async def destinations(request: web.Request) -> web.Response:
    rows = [_row(shown) for shown in await destination_views(request.app[CONTEXT])]
    return page(request, "destinations.html", {"title": "Destinations", "section": SECTION, "rows": rows})


@routes.get("/ui/destinations/new")
async def new_destination(request: web.Request) -> web.Response:
    kind = request.query.get("kind")
    if not kind:
        kinds = [(name, t) for name, t in sorted(SINK_TYPES.items())]
        return page(request, "destination_kinds.html", {"title": "New destination", "section": SECTION, "kinds": kinds})
    fields = kind_fields(kind)
    context = _form_context(request.app[CONTEXT], kind, default_values(fields), editing=None, error=None)
    return page(request, "destination_form.html", context)


@routes.post("/ui/destinations/new")
async def create_destination(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    form = await request.post()
    kind = form.get("type")
    if not isinstance(kind, str):
        raise web.HTTPBadRequest(reason="choose the kind of destination")
    fields = kind_fields(kind)
    data = {"type": kind, **_body_from_form(fields, form)}
    result = await _attempt(lambda: create_from(ctx, CreateBody.model_validate(data), principal(request)))
    if not isinstance(result, ApiError):
        context = {"title": f"Created {result['name']}", "section": SECTION, "d": result}
        return page(request, "destination_created.html", context)
    context = _form_context(ctx, kind, typed_values(fields, form), editing=None, error=result)
    return page(request, "destination_form.html", context, status=400)


@routes.get("/ui/destinations/{id}")
async def destination(request: web.Request) -> web.Response:
    shown = await _shown(request.app[CONTEXT], request.match_info["id"])
    token = request.query.get("test")
    context = {
        "title": shown["name"],
        "section": SECTION,
        "row": _row(shown),
        "d": shown,
        "fields": kind_fields(shown["type"]),
        "test": TEST_RESULTS.get(token, shown["id"]) if token else None,
    }
    return page(request, "destination.html", context)


async def _changeable(ctx: ApiContext, dest_id: str) -> Destination:
    try:
        return await cases.changeable(ctx.store, dest_id)
    except cases.DestinationError as exc:
        raise destination_error(exc) from None


@routes.post("/ui/destinations/{id}/enabled")
async def set_enabled(request: web.Request) -> web.Response:
    """Enable (`value` true) or disable (false) the destination."""
    ctx = request.app[CONTEXT]
    dest = await _changeable(ctx, request.match_info["id"])
    value = (await request.post()).get("value")
    if value not in ("true", "false"):
        raise web.HTTPBadRequest(reason="value must be true or false")
    await change_from(ctx, dest, PatchBody(enabled=value == "true"), principal(request))
    raise web.HTTPSeeOther(f"/ui/destinations/{dest.id}")


@routes.post("/ui/destinations/{id}/test")
async def send_test(request: web.Request) -> web.Response:
    """Send the test line: the result area's fragment for htmx, else back to the page showing it."""
    dest_id = request.match_info["id"]
    ok, error = await send_test_line(request.app[CONTEXT], dest_id)
    if request.headers.get("HX-Request") == "true":
        return page(request, "destination_test.html", {"test": {"ok": ok, "error": error}})
    token = TEST_RESULTS.put(dest_id, ok, error)
    raise web.HTTPSeeOther(f"/ui/destinations/{dest_id}?test={token}#test-result")


@routes.get("/ui/destinations/{id}/edit")
async def edit_destination(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    dest = await _changeable(ctx, request.match_info["id"])
    shown = await _shown(ctx, dest.id)
    values = stored_values(kind_fields(dest.type), shown)
    return page(request, "destination_form.html", _form_context(ctx, dest.type, values, editing=shown, error=None))


@routes.post("/ui/destinations/{id}/edit")
async def change_destination(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    dest = await _changeable(ctx, request.match_info["id"])
    form = await request.post()
    fields = kind_fields(dest.type)
    # An empty secret input is no `secret` at all: the current one is kept.
    body = _body_from_form(fields, form)
    result = await _attempt(lambda: change_from(ctx, dest, PatchBody.model_validate(body), principal(request)))
    if not isinstance(result, ApiError):
        raise web.HTTPSeeOther(f"/ui/destinations/{dest.id}")
    shown = await _shown(ctx, dest.id)
    context = _form_context(ctx, dest.type, typed_values(fields, form), editing=shown, error=result)
    return page(request, "destination_form.html", context, status=400)


@routes.get("/ui/destinations/{id}/delete")
async def confirm_delete(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    dest = await _changeable(ctx, request.match_info["id"])
    context = {"title": f"Delete {dest.name}", "section": SECTION, "d": await _shown(ctx, dest.id)}
    return page(request, "destination_delete.html", context)


@routes.post("/ui/destinations/{id}/delete")
async def delete_destination(request: web.Request) -> web.Response:
    await delete_by_id(request.app[CONTEXT], request.match_info["id"], principal(request))
    raise web.HTTPSeeOther("/ui/destinations")
