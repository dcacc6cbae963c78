"""The OpenAPI 3.1 document served at /v1/openapi.json, derived from the API's pydantic models.

Bodies, answers and query parameters are the models the handlers use (limits, descriptions and
kinds live there, once); this module only says which model goes where. `python -m
forwarder.api.openapi` prints the document as YAML: forwarder/api/openapi.yaml is that output,
committed, and a test fails when it differs. The choices behind the API are in docs/api.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from typing import Annotated, Any, Final, Literal, Union

from pydantic import BaseModel, Field, RootModel, ValidationError, create_model
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue, models_json_schema

from forwarder.api.alerts import AlertList, AlertsQuery, AlertView
from forwarder.api.ask import (
    AskEvent,
    AskSettingsView,
    ConversationDetail,
    ConversationList,
    DeletedCount,
    FeedbackBody,
    FeedbackStored,
    KeyBody,
    QuestionRequest,
    SettingsBody,
    SuggestionList,
    SuggestionsQuery,
)
from forwarder.api.audit import AuditList, AuditQuery
from forwarder.api.destinations import (
    CreateBody,
    CreatedView,
    DestinationList,
    DestinationView,
    PatchBody,
    TestResult,
)
from forwarder.api.errors import Error
from forwarder.api.fixes import FixApplied, FixBody, FixNotApplied
from forwarder.api.insights import (
    FindingList,
    FindingsQuery,
    FindingView,
    QueriesQuery,
    QueryDetail,
    QueryList,
    QueryWindow,
)
from forwarder.api.logs import (
    DatabaseList,
    GroupsQuery,
    LogGroups,
    LogOverview,
    LogPage,
    LogSettings,
    LogsQuery,
    SettingsPatch,
)
from forwarder.sinks import SINK_TYPES

REF_TEMPLATE: Final = "#/components/schemas/{model}"
# Component names for models whose class name reads as the handler's, not the API's.
COMPONENT_NAMES: Final = {"FilterBody": "DestinationFilter"}
PATH_PARAMETERS: Final = {
    "ref": "The database's id or name.",
    "id": "The destination's id.",
    "finding_id": "The finding's id (16 hex digits).",
    "query_id": "The query's id, its fingerprint (16 hex digits).",
    "alert_id": "The alert's id (16 hex digits).",
    "conversation_id": "The conversation's id.",
    "message_id": "The id of an answer (the `message_id` of its stream's `start` event).",
}
ERROR_TEXTS: Final = {
    400: "A parameter or the body is invalid; `error.field` names it.",
    401: "No key, or an unknown or revoked key.",
    402: "`no_model`: no built-in questions and no own key; `limit_reached`: this month's built-in questions are"
    " used up.",
    403: "A read-only key on a write; `not_enabled`: Ask is off for the organization.",
    404: "No database, destination, finding, fix, query, alert, conversation or message with that id (or name).",
    409: "The destination is declared in the config file (`managed_by: config`), or `key_invalid`: the provider"
    " refused the stored Ask key; store one again.",
    422: "`key_refused`: the provider refused the key; nothing was stored.",
    429: "`rate_limited`: more than 10 questions a minute or 3 at once for the organization; see `Retry-After`.",
    415: "The body is not JSON.",
    413: "`body_too_large`: the body is larger than 1 MiB.",
    502: "The database's server could not be reached or refused the fix, or (`provider_unreachable`) the model"
    " provider could not be asked; `error.message` says why.",
    503: "Delivery is not running, or insights are turned off (`[insights] enabled = false`).",
}


class Status(BaseModel):
    """How the daemon is."""

    status: str
    reason: str | None = Field(None, description="Why it is not ready, when it says (the store cannot write).")


class _Schemas(GenerateJsonSchema):
    def normalize_name(self, name: str) -> str:
        return COMPONENT_NAMES.get(name, super().normalize_name(name))

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False  # a property's title repeats its name

    def default_schema(self, schema: Any) -> JsonSchemaValue:
        result = super().default_schema(schema)
        # A field left out is None in the model; where null is not a value, the default says nothing.
        if "default" in result and result["default"] is None and not _allows_null(result):
            del result["default"]
        return result


def _allows_null(schema: dict[str, Any]) -> bool:
    kinds = schema.get("type")
    return (
        kinds == "null"
        or (isinstance(kinds, list) and "null" in kinds)
        or any(_allows_null(s) for s in [*schema.get("anyOf", []), *schema.get("oneOf", [])])
    )


# --- one model per destination kind, each with its own `config` ------------------------------


def _camel(kind: str) -> str:
    return "".join(part.capitalize() for part in kind.split("_"))


def _accepts_empty(config: type[BaseModel]) -> bool:
    try:
        config.model_validate({})
    except ValidationError:
        return False
    return True


def _one_of(name: str, doc: str, variants: list[type[BaseModel]]) -> type[BaseModel]:
    """A model that is one of `variants`, told apart by their `type`."""
    root: Any = variants[0]
    if len(variants) > 1:
        root = Annotated[Union[tuple(variants)], Field(discriminator="type")]  # noqa: UP007 - built at run time
    model: type[BaseModel] = create_model(name, __base__=RootModel[root], __doc__=doc)
    return model


def _per_kind(base: type[BaseModel], suffix: str, *, body: bool) -> list[type[BaseModel]]:
    described = base.model_fields["config"].description
    variants = []
    for kind, sink_type in SINK_TYPES.items():
        tag: Any = Literal[kind]
        # A body may leave out a config the kind can do without (all defaults), as the handler allows.
        optional = body and _accepts_empty(sink_type.config)
        config = Field(default_factory=dict, description=described) if optional else Field(description=described)
        variants.append(
            create_model(
                f"{_camel(kind)}{suffix}",
                __base__=base,
                __doc__=f"{base.__doc__} ({kind})",
                type=(tag, Field(description=base.model_fields["type"].description)),
                config=(sink_type.config, config),
            )
        )
    return variants


@dataclass(frozen=True, slots=True)
class Documented:
    """The destination models as the document shows them: `config` is the kind's own."""

    create: type[BaseModel]
    patch: type[BaseModel]
    view: type[BaseModel]
    created: type[BaseModel]
    views: type[BaseModel]


@cache
def destination_models() -> Documented:
    any_config: Any = Union[tuple(t.config for t in SINK_TYPES.values())] | None  # noqa: UP007 - built at run time
    view: Any = _one_of(
        "Destination", DestinationView.__doc__ or "", _per_kind(DestinationView, "Destination", body=False)
    )
    config_field = PatchBody.model_fields["config"]
    return Documented(
        create=_one_of("DestinationCreate", CreateBody.__doc__ or "", _per_kind(CreateBody, "Create", body=True)),
        patch=create_model(
            "DestinationPatch",
            __base__=PatchBody,
            __doc__=PatchBody.__doc__,
            config=(any_config, Field(None, description=config_field.description)),
        ),
        view=view,
        created=_one_of("DestinationCreated", CreatedView.__doc__ or "", _per_kind(CreatedView, "Created", body=False)),
        views=create_model(
            "DestinationList", __base__=DestinationList, __doc__=DestinationList.__doc__, destinations=(list[view], ...)
        ),
    )


# --- operations -------------------------------------------------------------------------------

Method = Literal["get", "post", "put", "patch", "delete"]


@dataclass(frozen=True, slots=True)
class Operation:
    """One route: its models, answers and the error statuses it may give."""

    method: Method
    path: str
    operation_id: str
    summary: str
    answers: dict[int, tuple[type[BaseModel] | None, str]]
    errors: tuple[int, ...] = ()
    query: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    public: bool = False  # no key needed
    media_type: str = "application/json"
    extra: dict[str, Any] = field(default_factory=dict)
    error_texts: dict[int, str] = field(default_factory=dict)  # where an error means more than ERROR_TEXTS says


def operations() -> list[Operation]:
    """Every route of the API (a test checks this against the application's router)."""
    d = destination_models()
    return [
        Operation(
            "get", "/v1/databases", "listDatabases", "The configured databases",
            {200: (DatabaseList, "The databases.")}, (400, 401),
        ),
        Operation(
            "get", "/v1/databases/{ref}/logs", "listLogs", "Log lines, newest first",
            {200: (LogPage, "A page of lines, newest first.")}, (400, 401, 404), query=LogsQuery,
        ),
        Operation(
            "get", "/v1/databases/{ref}/logs/groups", "listLogGroups",
            "Repeated messages (last 24 hours unless `from`)",
            {200: (LogGroups, "Groups, most frequent first.")}, (400, 401, 404), query=GroupsQuery,
        ),
        Operation(
            "get", "/v1/databases/{ref}/logs/overview", "getLogOverview",
            "Settings, reading state, 24-hour counts, retention and today's usage",
            {200: (LogOverview, "The overview.")}, (400, 401, 404),
        ),
        Operation(
            "patch", "/v1/databases/{ref}/logs/settings", "updateLogSettings", "Change the database's log settings",
            {200: (LogSettings, "The settings now in force.")}, (400, 401, 403, 404, 415), body=SettingsPatch,
        ),
        Operation(
            "get", "/v1/databases/{ref}/findings", "listFindings",
            "Findings (open: the current ones), newest first",
            {200: (FindingList, "Findings, newest `last_seen` first.")}, (400, 401, 404, 503), query=FindingsQuery,
        ),
        Operation(
            "get", "/v1/databases/{ref}/findings/{finding_id}", "getFinding", "One finding with its evidence and fixes",
            {200: (FindingView, "The finding.")}, (400, 401, 404, 503),
        ),
        Operation(
            "get", "/v1/databases/{ref}/queries", "listQueries", "Statements by fingerprint, with their numbers",
            {200: (QueryList, "Queries in the order asked for.")}, (400, 401, 404, 503), query=QueriesQuery,
        ),
        Operation(
            "get", "/v1/databases/{ref}/queries/{query_id}", "getQuery", "One query with its 5-minute series",
            {200: (QueryDetail, "The query.")}, (400, 401, 404, 503), query=QueryWindow,
        ),
        Operation(
            "get", "/v1/log-destinations", "listLogDestinations", "Destinations with their delivery state",
            {200: (d.views, "Every destination.")}, (401,),
        ),
        Operation(
            "post", "/v1/log-destinations", "createLogDestination",
            "Add a destination; it receives lines stored from now on",
            {201: (d.created, "The new destination.")}, (400, 401, 403, 415, 503), body=d.create,
        ),
        Operation(
            "get", "/v1/log-destinations/{id}", "getLogDestination", "One destination",
            {200: (d.view, "The destination.")}, (401, 404),
        ),
        Operation(
            "patch", "/v1/log-destinations/{id}", "updateLogDestination",
            "Change a destination; applies at once, its cursor is kept",
            {200: (d.view, "The destination now.")}, (400, 401, 403, 404, 409, 415, 503), body=d.patch,
        ),
        Operation(
            "delete", "/v1/log-destinations/{id}", "deleteLogDestination", "Remove a destination",
            {204: (None, "Removed.")}, (401, 403, 404, 409, 503),
        ),
        Operation(
            "post", "/v1/log-destinations/{id}/test", "testLogDestination",
            'Send one line marked as a test (id "0"); answers within 20 s',
            {200: (TestResult, "Whether the destination accepted it, and its error if not.")}, (401, 403, 404, 503),
        ),
        Operation(
            "post", "/v1/databases/{ref}/fixes", "applyFix",
            "Apply a finding's fix through the database's configured connection",
            {
                200: (FixApplied, "The fix ran: its SQL and the setting before and after."),
                409: (FixNotApplied, "Not applied (no connection, fixes not allowed, needs a restart, done by hand):"
                      " the SQL to run by hand."),
            },
            (400, 401, 403, 404, 415, 502), body=FixBody,
        ),
        Operation(
            "get", "/v1/alerts", "listAlerts", "Alerts of the rules (firing: the current ones), newest first",
            {200: (AlertList, "Alerts, newest `started_at` first.")}, (400, 401), query=AlertsQuery,
        ),
        Operation(
            "get", "/v1/alerts/{alert_id}", "getAlert", "One alert",
            {200: (AlertView, "The alert.")}, (400, 401, 404),
        ),
        Operation(
            "post", "/v1/ask", "ask", "Ask a question; the answer streams as server-sent events",
            {200: (AskEvent, "`text/event-stream`: events named by their `type`, each `data` one JSON object; `start`"
                   " first, exactly one `done` or `error` last; comment lines keep the stream alive.")},
            (400, 401, 402, 403, 404, 409, 415, 429), body=QuestionRequest, media_type="text/event-stream",
        ),
        Operation(
            "get", "/v1/ask/settings", "getAskSettings", "The organization's Ask settings and this month's usage",
            {200: (AskSettingsView, "The settings.")}, (400, 401),
        ),
        Operation(
            "put", "/v1/ask/settings", "putAskSettings", "Turn Ask on or off for the organization",
            {200: (AskSettingsView, "The settings now.")}, (400, 401, 403, 415), body=SettingsBody,
        ),
        Operation(
            "put", "/v1/ask/key", "putAskKey", "Check the organization's own key with the provider, then store it"
            " encrypted", {200: (AskSettingsView, "Stored; the settings now (never the key).")},
            (400, 401, 403, 415, 422, 502), body=KeyBody,
        ),
        Operation(
            "delete", "/v1/ask/key", "deleteAskKey", "Remove the stored key", {204: (None, "Removed.")},
            (401, 403, 404),
        ),
        Operation(
            "get", "/v1/ask/suggestions", "listAskSuggestions", "Up to four questions from open findings and firing"
            " alerts", {200: (SuggestionList, "The suggestions.")}, (400, 401, 404), query=SuggestionsQuery,
        ),
        Operation(
            "get", "/v1/ask/conversations", "listConversations", "The organization's conversations, newest first",
            {200: (ConversationList, "Conversations.")}, (400, 401),
        ),
        Operation(
            "get", "/v1/ask/conversations/{conversation_id}", "getConversation", "One conversation with its messages",
            {200: (ConversationDetail, "The conversation.")}, (400, 401, 404),
        ),
        Operation(
            "delete", "/v1/ask/conversations/{conversation_id}", "deleteConversation", "Delete one conversation",
            {204: (None, "Deleted.")}, (401, 403, 404),
        ),
        Operation(
            "delete", "/v1/ask/conversations", "deleteConversations", "Delete every conversation of the organization",
            {200: (DeletedCount, "How many were deleted.")}, (401, 403),
        ),
        Operation(
            "post", "/v1/ask/messages/{message_id}/feedback", "postFeedback", "Rate an answer (\"\" clears)",
            {200: (FeedbackStored, "Stored.")}, (400, 401, 403, 404, 415), body=FeedbackBody,
        ),
        Operation(
            "get", "/v1/audit", "listAudit",
            "The organization's audit records, newest first (a read-write key only, although it is a GET)",
            {200: (AuditList, "Records, newest first.")}, (400, 401, 403), query=AuditQuery,
            error_texts={403: "A read-only key: the audit log needs a read-write key."},
        ),
        Operation(
            "get", "/v1/openapi.json", "openapi", "This document", {200: (None, "The OpenAPI document.")}, public=True,
            extra={"schema": {"type": "object"}},
        ),
        Operation(
            "get", "/metrics", "metrics", "Prometheus metrics", {200: (None, "Text exposition format.")},
            public=True, media_type="text/plain", extra={"schema": {"type": "string"}},
        ),
        Operation("get", "/healthz", "healthz", "Alive", {200: (Status, "The daemon answers.")}, public=True),
        Operation(
            "get", "/readyz", "readyz", "Ready: store open and API bound",
            {200: (Status, "Ready."), 503: (Status, "Not ready: starting, stopping, or the store cannot write.")},
            public=True,
        ),
    ]  # fmt: skip


# --- the document -----------------------------------------------------------------------------


def _parameters(op: Operation) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "description": PATH_PARAMETERS[name],
            "schema": {"type": "string"},
        }
        for name in re.findall(r"{(\w+)}", op.path)
    ]
    if op.query is None:
        return out
    schema = op.query.model_json_schema(by_alias=True, schema_generator=_Schemas)
    required = set(schema.get("required", ()))
    for name, prop in schema.get("properties", {}).items():
        prop = dict(prop)
        description = prop.pop("description", "")
        out.append(
            {"name": name, "in": "query", "required": name in required, "description": description, "schema": prop}
        )
    return out


def _content(schema: dict[str, Any], media_type: str = "application/json") -> dict[str, Any]:
    return {media_type: {"schema": schema}}


@cache
def openapi_document() -> dict[str, Any]:
    """The document; built once."""
    ops = operations()
    models: set[type[BaseModel]] = {Error}
    for op in ops:
        models |= {m for m, _ in op.answers.values() if m is not None}
        if op.body is not None:
            models.add(op.body)
    refs, defs = models_json_schema(
        [(m, "validation") for m in sorted(models, key=lambda m: m.__name__)],
        ref_template=REF_TEMPLATE,
        schema_generator=_Schemas,
    )

    def ref(model: type[BaseModel]) -> dict[str, Any]:
        return refs[(model, "validation")]

    paths: dict[str, dict[str, Any]] = {}
    for op in ops:
        responses: dict[str, Any] = {}
        for status, (model, description) in op.answers.items():
            answer: dict[str, Any] = {"description": description}
            if model is not None:
                answer["content"] = _content(ref(model), op.media_type)
            elif "schema" in op.extra:
                answer["content"] = _content(op.extra["schema"], op.media_type)
            responses[str(status)] = answer
        # every /v1 route refuses a query parameter it does not take (server.query_middleware),
        # and every request a body over the server's limit (server.MAX_BODY_BYTES)
        errors = op.errors
        if op.path.startswith("/v1/"):
            errors = tuple(sorted({*errors, 400, *((413,) if op.method in ("post", "put", "patch") else ())}))
        for status in errors:
            text = op.error_texts.get(status, ERROR_TEXTS[status])
            responses[str(status)] = {"description": text, "content": _content(ref(Error))}
        operation: dict[str, Any] = {"operationId": op.operation_id, "summary": op.summary}
        if op.public:
            operation["security"] = []
        parameters = _parameters(op)
        if parameters:
            operation["parameters"] = parameters
        if op.body is not None:
            operation["requestBody"] = {"required": True, "content": _content(ref(op.body))}
        operation["responses"] = responses
        paths.setdefault(op.path, {})[op.method] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "forwarder Logs API",
            "version": "1",
            "description": "PostgreSQL log lines: list, search, group, overview and settings; where they are"
            " forwarded to. See docs/api.md.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "An API key."}},
            "schemas": defs.get("$defs", {}),
        },
    }


def openapi_yaml() -> str:
    """The document as forwarder/api/openapi.yaml holds it (JSON is YAML 1.2: no YAML library needed)."""
    header = "# The forwarder Logs API. Generated from the code by `python -m forwarder.api.openapi`: do not edit.\n"
    return header + json.dumps(openapi_document(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    print(openapi_yaml(), end="")
