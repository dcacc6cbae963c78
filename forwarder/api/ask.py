"""The Ask API: a question answered as a server-sent-event stream, the organization's settings
and own key, conversations, feedback and suggestions (docs/ask.md).

Everything here is scoped to the caller's organization (the key's): another organization's
conversation or message is a 404, as if it did not exist. The use cases are usecases/ask.py;
this module validates bodies, maps refusals to the error shape and writes the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated, Any, Final, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, RootModel, SecretStr, StrictBool, ValidationError, field_validator
from pydantic.json_schema import SkipJsonSchema

from forwarder import metrics
from forwarder.api.auth import PRINCIPAL, Principal
from forwarder.api.context import CONTEXT, ApiContext
from forwarder.api.disconnect import client_gone
from forwarder.api.errors import ApiError, bad_body
from forwarder.api.logs import Time, _send, parse_query, read_body, read_json_object, reads_query, validation_error
from forwarder.ask import events as E
from forwarder.ask.engine import Question
from forwarder.ask.providers.base import About, AboutKind, ProviderName
from forwarder.model import format_time
from forwarder.store import ask as A
from forwarder.usecases import ask as cases
from forwarder.usecases.destinations import Actor

routes = web.RouteTableDef()

SSE_HEADERS: Final = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache, no-transform",  # no-transform: proxies must not compress/buffer it
    "X-Accel-Buffering": "no",  # nginx: pass each event on at once
}
Id = Annotated[str, Field(min_length=1, max_length=64)]


# --- bodies ---------------------------------------------------------------------------------------


class AboutBody(BaseModel):
    """What a question is about. `database` is required with `finding` and `query`."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={
            "if": {"properties": {"kind": {"enum": ["finding", "query"]}}},
            "then": {"required": ["database"]},
        },
    )
    kind: AboutKind = Field(description="finding, alert, query or database.")
    id: Id = Field(description="The finding's, alert's or query's id; the database's id or name.")
    database: Id | SkipJsonSchema[None] = Field(None, description="The database (id or name) of a finding or a query.")


class QuestionRequest(BaseModel):
    """A question."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    question: str = Field(
        min_length=1,
        max_length=2000,
        description="The question, 1 to 2,000 characters, not only spaces.",
        json_schema_extra={"pattern": "[^ \t\n\r\f\v]"},  # checked by _not_blank; a pattern matches anywhere
    )
    database: Id | SkipJsonSchema[None] = Field(None, description="A database (name or id) the question is about.")
    conversation_id: Id | SkipJsonSchema[None] = Field(
        None, description="Continue this conversation; it keeps its database."
    )
    deep: StrictBool = Field(False, description="Use the stronger (deep) model.")
    about: AboutBody | SkipJsonSchema[None] = Field(None, description="A finding, alert, query or database.")

    @field_validator("question")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip(" \t\n\r\f\v"):
            raise ValueError("a question needs more than spaces")
        return value


class SettingsBody(BaseModel):
    """Turn Ask on or off for the organization."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    enabled: StrictBool


class KeyBody(BaseModel):
    """The organization's own key for a model provider. It is checked with the provider, then
    stored encrypted, and never shown again."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    provider: ProviderName = Field(description="openai, anthropic or openrouter.")
    api_key: SecretStr = Field(
        min_length=1,
        max_length=500,
        description="The provider's API key (write-only): printable ASCII without spaces.",
        json_schema_extra={"pattern": "^[!-~]+$"},  # checked by _key_is_a_token (SecretStr takes no pattern)
    )
    fast_model: str = Field("", max_length=200, description="Model for questions; empty: the provider's default.")
    deep_model: str = Field("", max_length=200, description="Model for `deep` questions; empty: the default.")

    @field_validator("api_key")
    @classmethod
    def _key_is_a_token(cls, value: SecretStr) -> SecretStr:
        # Providers' keys are printable ASCII without spaces (sk-..., sk-ant-...); anything else
        # cannot go in an HTTP header, so it is refused here, not sent (the message never
        # repeats the key).
        if not all("!" <= c <= "~" for c in value.get_secret_value()):
            raise ValueError("a key is printable ASCII without spaces, as the provider gave it")
        return value


class FeedbackBody(BaseModel):
    """A rating of an answer; the empty string clears it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    rating: Literal["up", "down", ""]


class SuggestionsQuery(BaseModel):
    """Query of `GET /v1/ask/suggestions`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    database: str | SkipJsonSchema[None] = Field(None, description="Only this database's (name or id).")


# --- answers --------------------------------------------------------------------------------------


class UsageView(BaseModel):
    month: str = Field(description="The UTC calendar month, YYYY-MM.")
    builtin_used: int = Field(ge=0, description="Built-in questions accepted this month.")
    builtin_allowance: int = Field(ge=0, description="Built-in questions per month (the config's).")
    builtin_remaining: int = Field(ge=0)


class HandlerView(BaseModel):
    kind: Literal["analyst", "operator_model", "provider", "none"] = Field(
        description="Who answers a question now: the built-in analyst, the operator's model server, the provider"
        " of the own key, or nobody."
    )
    text: str = Field(description="The same, in words.")


class AskSettingsView(BaseModel):
    """The organization's Ask settings (the key itself is never shown)."""

    enabled: bool = Field(description="Off until a read-write key turns it on.")
    source: Literal["builtin", "own_key", "none"] = Field(description="Where answers come from.")
    provider: ProviderName | None = Field(description="The own key's provider; null without one.")
    key_usable: bool | None = Field(description="false once the provider refused the stored key; null without one.")
    fast_model: str | None
    deep_model: str | None
    usage: UsageView
    handled_by: HandlerView


class SuggestionView(BaseModel):
    question: str
    database: str | None = Field(description="The database's id it is about.")
    about: AboutBody | None = Field(description="Ask it with this `about`.")


class SuggestionList(BaseModel):
    """At most four questions, from the open findings and the firing alerts."""

    suggestions: list[SuggestionView]


class ConversationView(BaseModel):
    id: str
    database: str | None = Field(description="The database's id; a conversation keeps it.")
    title: str = Field(description="Its first question, on one line.")
    created_at: Time
    updated_at: Time = Field(description="Its last message; it is deleted 30 days after.")
    message_count: int = Field(ge=0)


class ConversationList(BaseModel):
    """Newest (last message) first."""

    conversations: list[ConversationView]


class MessageView(BaseModel):
    id: str
    role: Literal["user", "assistant"]
    text: str = Field(description="The question, or the answer's Markdown (made from log text: render it escaped).")
    status: Literal["complete", "streaming", "partial", "failed"] = Field(
        description="`partial`: the client left before the end; `failed`: it ended with an error event."
    )
    created_at: Time
    model: str | None
    error: dict[str, str] | None = Field(description="`{code, message}` of a failed answer.")
    about: dict[str, Any] | None = Field(description="The question's `about`.")
    deep: bool
    tools: list[dict[str, str]] = Field(description="The tool steps: `{id, name, label, status}`.")
    sources: list[dict[str, str]] = Field(description="`{label, href}`.")
    actions: list[dict[str, Any]] = Field(description="As in the stream's `action` events.")
    rating: Literal["up", "down", ""]


class ConversationDetail(ConversationView):
    messages: list[MessageView]


class FeedbackStored(BaseModel):
    ok: bool
    rating: Literal["up", "down", ""] = Field(description="The rating now stored.")


class DeletedCount(BaseModel):
    deleted: int = Field(ge=0, description="How many conversations were deleted.")


# --- helpers --------------------------------------------------------------------------------------


def ask_of(ctx: ApiContext) -> cases.AskService:
    if ctx.ask is None:  # pragma: no cover - the daemon always sets it
        raise ApiError(503, "ask_unavailable", "Ask is not running")
    return ctx.ask


def actor_of(principal: Principal) -> Actor:
    return Actor(principal.org, principal.actor)


def settings_view(s: cases.Settings) -> AskSettingsView:
    return AskSettingsView(
        enabled=s.enabled,
        source=s.source,
        provider=s.provider,
        key_usable=s.key_usable,
        fast_model=s.fast_model,
        deep_model=s.deep_model,
        usage=UsageView(
            month=s.month,
            builtin_used=s.builtin_used,
            builtin_allowance=s.builtin_allowance,
            builtin_remaining=s.builtin_remaining,
        ),
        handled_by=HandlerView(kind=s.handled_by, text=s.handled_by_text),
    )


def conversation_view(c: A.Conversation) -> ConversationView:
    return ConversationView(
        id=c.id,
        database=c.database,
        title=c.title,
        created_at=format_time(c.created_at),
        updated_at=format_time(c.updated_at),
        message_count=c.messages,
    )


def message_view(m: A.Message) -> MessageView:
    return MessageView(
        id=m.id,
        role=m.role,
        text=m.text,
        status=m.status,
        created_at=format_time(m.created_at),
        model=m.model,
        error=m.error,
        about=m.about,
        deep=m.deep,
        tools=list(m.tools),
        sources=list(m.sources),
        actions=list(m.actions),
        rating=m.rating,
    )


def question_body(data: dict[str, object]) -> cases.QuestionBody:
    """A question request checked (400 naming the field)."""
    try:
        body = QuestionRequest.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None
    if body.about is not None and body.about.kind in ("finding", "query") and body.about.database is None:
        raise bad_body("about.database", f"required when `about.kind` is {body.about.kind}")
    about = None if body.about is None else About(body.about.kind, body.about.id, body.about.database)
    return cases.QuestionBody(body.question, body.database, body.conversation_id, body.deep, about)


async def accept_question(ctx: ApiContext, org: str, body: cases.QuestionBody) -> Question:
    """Accept `body` or raise the refusal as an ApiError (the pages and the API share it)."""
    try:
        return await cases.accept(ask_of(ctx), org, body)
    except cases.AskRefused as exc:
        metrics.ASK_REFUSALS.labels(exc.code).inc()
        raise


async def stream_answer(request: web.Request, ask: cases.AskService, question: Question) -> web.StreamResponse:
    """Write `question`'s answer as server-sent events. Before `start`, a failure is a JSON error;
    after it, an `error` event. A client that goes away cancels the answer within
    DISCONNECT_POLL_SECONDS."""
    events = ask.engine.answer(
        question, timeout_seconds=ask.config.answer_timeout_seconds, keepalive_seconds=ask.keepalive_seconds
    )
    try:
        first = await anext(events)
        while first is None:
            first = await anext(events)
    except BaseException:
        await events.aclose()
        raise
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)

    async def pump() -> None:
        await response.write(E.sse(first))
        async for event in events:
            await response.write(E.KEEPALIVE if event is None else E.sse(event))

    writer = asyncio.create_task(pump())
    watcher = asyncio.create_task(client_gone(request))
    try:
        await asyncio.wait({writer, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (writer, watcher):
            task.cancel()
        await asyncio.gather(writer, watcher, return_exceptions=True)
        await events.aclose()
    with contextlib.suppress(ConnectionError):
        await response.write_eof()
    return response


# --- handlers -------------------------------------------------------------------------------------


@routes.post("/v1/ask")
async def ask_question(request: web.Request) -> web.StreamResponse:
    """Ask a question; the answer streams as server-sent events (docs/ask.md)."""
    ctx = request.app[CONTEXT]
    body = question_body(await read_json_object(request))
    question = await accept_question(ctx, request[PRINCIPAL].org, body)
    return await stream_answer(request, ask_of(ctx), question)


@routes.get("/v1/ask/settings")
async def get_settings(request: web.Request) -> web.Response:
    """The organization's Ask settings."""
    ctx = request.app[CONTEXT]
    return _send(settings_view(await cases.settings(ask_of(ctx), request[PRINCIPAL].org)))


@routes.put("/v1/ask/settings")
async def put_settings(request: web.Request) -> web.Response:
    """Turn Ask on or off (audited as ask.enabled / ask.disabled)."""
    ctx = request.app[CONTEXT]
    body = await read_body(request, SettingsBody)
    s = await cases.set_enabled(ask_of(ctx), actor_of(request[PRINCIPAL]), body.enabled)
    return _send(settings_view(s))


@routes.put("/v1/ask/key")
async def put_key(request: web.Request) -> web.Response:
    """Check the own key with its provider, then store it encrypted (audited as ask.key_set, without it)."""
    ctx = request.app[CONTEXT]
    body = await read_body(request, KeyBody)
    s = await cases.set_key(
        ask_of(ctx),
        actor_of(request[PRINCIPAL]),
        body.provider,
        body.api_key.get_secret_value(),
        body.fast_model,
        body.deep_model,
    )
    return _send(settings_view(s))


@routes.delete("/v1/ask/key")
async def delete_key(request: web.Request) -> web.Response:
    """Remove the stored key (audited as ask.key_removed)."""
    ctx = request.app[CONTEXT]
    if not await cases.remove_key(ask_of(ctx), actor_of(request[PRINCIPAL])):
        raise ApiError(404, "not_found", "no own key is stored")
    return web.Response(status=204)


@routes.get("/v1/ask/suggestions")
@reads_query
async def get_suggestions(request: web.Request) -> web.Response:
    """Up to four questions from the open findings and firing alerts."""
    params = parse_query(request, SuggestionsQuery)
    ctx = request.app[CONTEXT]
    found = await cases.suggestions(ask_of(ctx), params.database)
    return _send(
        SuggestionList(
            suggestions=[
                SuggestionView(
                    question=s.question,
                    database=s.database,
                    about=None
                    if s.about is None
                    else AboutBody(kind=s.about.kind, id=s.about.id, database=s.about.database),
                )
                for s in found
            ]
        )
    )


@routes.get("/v1/ask/conversations")
async def list_conversations(request: web.Request) -> web.Response:
    """The organization's conversations, newest first."""
    found = await cases.conversations(ask_of(request.app[CONTEXT]), request[PRINCIPAL].org)
    return _send(ConversationList(conversations=[conversation_view(c) for c in found]))


@routes.get("/v1/ask/conversations/{conversation_id}")
async def get_conversation(request: web.Request) -> web.Response:
    """One conversation with its messages."""
    conv, messages = await cases.conversation(
        ask_of(request.app[CONTEXT]), request[PRINCIPAL].org, request.match_info["conversation_id"]
    )
    return _send(
        ConversationDetail(**conversation_view(conv).model_dump(), messages=[message_view(m) for m in messages])
    )


@routes.delete("/v1/ask/conversations/{conversation_id}")
async def delete_conversation(request: web.Request) -> web.Response:
    await cases.delete_conversation(
        ask_of(request.app[CONTEXT]), request[PRINCIPAL].org, request.match_info["conversation_id"]
    )
    return web.Response(status=204)


@routes.delete("/v1/ask/conversations")
async def delete_conversations(request: web.Request) -> web.Response:
    """Delete every conversation of the organization (audited as ask.conversations_deleted)."""
    count = await cases.delete_conversations(ask_of(request.app[CONTEXT]), actor_of(request[PRINCIPAL]))
    return _send(DeletedCount(deleted=count))


@routes.post("/v1/ask/messages/{message_id}/feedback")
async def post_feedback(request: web.Request) -> web.Response:
    """Rate an answer: up, down, or "" to clear."""
    ctx = request.app[CONTEXT]
    body = await read_body(request, FeedbackBody)
    await cases.feedback(ask_of(ctx), request[PRINCIPAL].org, request.match_info["message_id"], body.rating)
    return _send(FeedbackStored(ok=True, rating=body.rating))


# --- the stream's events, as the OpenAPI document shows them (tests check every event against them) ---


class ToolStepView(BaseModel):
    id: str
    name: str
    label: str
    status: Literal["running", "done", "error"]


class SourceView(BaseModel):
    label: str
    href: str = Field(description="A path of this daemon's pages.")


class FixActionView(BaseModel):
    kind: Literal["fix"]
    database: str
    finding_id: str
    fix_id: str
    label: str
    href: str = Field(description="The finding's page, where the fix is reviewed and applied.")


class LinkActionView(BaseModel):
    kind: Literal["link"]
    href: str
    label: str


class DoneView(BaseModel):
    model: str
    remaining: int = Field(ge=-1, description="Built-in questions left this month; -1 when the own key answered.")


class ErrorView(BaseModel):
    code: str
    message: str


class StartEvent(BaseModel):
    """First, before any model call."""

    type: Literal["start"]
    conversation_id: str
    message_id: str = Field(description="The answer's message id (for feedback).")


class ToolEvent(BaseModel):
    """A tool step: `running`, then `done` or `error` with the same id."""

    type: Literal["tool"]
    tool: ToolStepView


class TextEvent(BaseModel):
    """The next piece of the answer, Markdown."""

    type: Literal["text"]
    text: str


class SourceEvent(BaseModel):
    """Data the answer rests on."""

    type: Literal["source"]
    source: SourceView


class ActionEvent(BaseModel):
    """A suggestion: a finding's fix (applied only through POST /v1/databases/{ref}/fixes) or a link."""

    type: Literal["action"]
    action: Annotated[FixActionView | LinkActionView, Field(discriminator="kind")]


class DoneEvent(BaseModel):
    """The answer is complete; nothing follows."""

    type: Literal["done"]
    done: DoneView


class ErrorEvent(BaseModel):
    """The answer failed; nothing follows."""

    type: Literal["error"]
    error: ErrorView


class AskEvent(
    RootModel[
        Annotated[
            StartEvent | ToolEvent | TextEvent | SourceEvent | ActionEvent | DoneEvent | ErrorEvent,
            Field(discriminator="type"),
        ]
    ]
):
    """One server-sent event's data; the event's name equals `type`."""
