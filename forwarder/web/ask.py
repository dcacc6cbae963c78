"""The Ask pages: a question streamed with its tool steps, the organization's conversations,
feedback on answers, and the Ask settings with the own key.

Everything goes through the API's own functions (forwarder/api/ask.py) and the use cases
(forwarder/usecases/ask.py): the stream endpoint is the API's `stream_answer`, so a page never
answers differently from `POST /v1/ask`. Answers are Markdown made from log text: the page hands
them to static/ask.js as JSON and renders them there with raw HTML off and only safe links.
"""

from __future__ import annotations

from typing import Any, Final, get_args
from urllib.parse import quote

from aiohttp import web
from pydantic import ValidationError

from forwarder.api.ask import (
    KeyBody,
    accept_question,
    ask_of,
    conversation_view,
    message_view,
    question_body,
    settings_view,
    stream_answer,
)
from forwarder.api.context import CONTEXT
from forwarder.api.errors import ApiError, bad_parameter, json_response
from forwarder.api.logs import read_json_object, validation_error
from forwarder.ask.providers.base import AboutKind, ProviderName
from forwarder.store import ask as A
from forwarder.usecases import ask as cases
from forwarder.usecases.destinations import Actor
from forwarder.web.render import page
from forwarder.web.session import USER

routes = web.RouteTableDef()

ABOUT_KINDS: Final = frozenset(get_args(AboutKind))
PROVIDERS: Final = get_args(ProviderName)
RATINGS: Final = frozenset(get_args(A.Rating))
MAX_ID: Final = 64


def safe_href(href: object) -> str | None:
    """`href` when it is a path of this site (`/...`, not `//host` or `/\\host`), else None: a
    stored source or action is shown as a link only then (the same rule as ask.js's)."""
    if isinstance(href, str) and href.startswith("/") and not href.startswith(("//", "/\\")):
        return href
    return None


def _org(request: web.Request) -> str:
    return request[USER].key.org


def _actor(request: web.Request) -> Actor:
    key = request[USER].key
    return Actor(key.org, f"key:{key.id}")


def _conversation_path(conv_id: str) -> str:
    return "/ui/ask/" + quote(conv_id, safe="")


def _about(request: web.Request, database: str | None) -> dict[str, str | None] | None:
    """The `about` query parameter (`finding:ID`, `query:ID`, `alert:ID`, `database:ID`) as the
    question body's `about`; a 400 page when it is malformed."""
    raw = request.query.get("about")
    if not raw:
        return None
    kind, _, ref = raw.partition(":")
    if kind not in ABOUT_KINDS or not ref or len(ref) > MAX_ID:
        raise bad_parameter("about", "expected finding:ID, query:ID, alert:ID or database:ID")
    if kind in ("finding", "query") and database is None:
        raise bad_parameter("database", f"required with about={kind}:...")
    return {"kind": kind, "id": ref, "database": None if kind == "database" else database}


def _view(m: A.Message) -> dict[str, Any]:
    """A message as the template shows it: the API's view, with only this site's links kept."""
    view = message_view(m).model_dump()
    view["sources"] = [{**s, "href": safe_href(s.get("href"))} for s in view["sources"]]
    actions = []
    for a in view["actions"]:
        href = safe_href(a.get("href"))
        if a.get("kind") == "fix" and href is not None:
            href += "#fix-" + quote(str(a.get("fix_id", "")), safe="")
        actions.append({**a, "href": href})
    view["actions"] = actions
    return view


async def _ask_page(
    request: web.Request,
    *,
    title: str,
    conversation: A.Conversation | None = None,
    messages: list[A.Message] | None = None,
    database: str | None = None,
    about: dict[str, str | None] | None = None,
) -> web.Response:
    ctx = request.app[CONTEXT]
    ask = ask_of(ctx)
    org = _org(request)
    settings = await cases.settings(ask, org)
    conversations = await cases.conversations(ask, org)
    suggestion_db = conversation.database if conversation is not None else database
    try:
        found = await cases.suggestions(ask, suggestion_db)
    except cases.AskRefused:  # the conversation's database left the config: no suggestions then
        found = []
    views = [_view(m) for m in messages or []]
    context = {
        "title": title,
        "section": "ask",
        "settings": settings,
        "conversations": [conversation_view(c) for c in conversations],
        "current": conversation,
        "messages": views,
        "markdown": {v["id"]: v["text"] for v in views if v["role"] == "assistant"},
        "suggestions": found,
        "databases": [d.config for d in ctx.databases.all()],
        "database": database,
        "about": about,
    }
    return page(request, "ask.html", context)


@routes.get("/ui/ask")
async def new_question(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    database = request.query.get("database") or None
    if database is not None:
        db = ctx.databases.find(database)
        if db is None:
            raise ApiError(404, "not_found", f"no database {database[:MAX_ID]!r}")
        database = db.config.id
    about = _about(request, database)
    return await _ask_page(request, title="Ask", database=database, about=about)


@routes.get("/ui/ask/settings")
async def settings_page(request: web.Request) -> web.Response:
    return await _settings_page(request)


async def _settings_page(
    request: web.Request, *, error: str = "", form: dict[str, str] | None = None, status: int = 200
) -> web.Response:
    s = await cases.settings(ask_of(request.app[CONTEXT]), _org(request))
    context = {
        "title": "Ask settings",
        "section": "ask",
        "s": settings_view(s),
        "providers": PROVIDERS,
        "error": error,
        "form": form or {"provider": s.provider or "", "fast_model": "", "deep_model": ""},
    }
    return page(request, "ask_settings.html", context, status=status)


@routes.post("/ui/ask/settings/enabled")
async def post_enabled(request: web.Request) -> web.Response:
    form = await request.post()
    await cases.set_enabled(ask_of(request.app[CONTEXT]), _actor(request), form.get("enabled") == "true")
    raise web.HTTPSeeOther("/ui/ask/settings")


@routes.post("/ui/ask/settings/key")
async def post_key(request: web.Request) -> web.Response:
    form = await request.post()
    fields = {name: str(form.get(name, "")) for name in ("provider", "api_key", "fast_model", "deep_model")}
    shown = {k: v for k, v in fields.items() if k != "api_key"}  # the key is never sent back
    try:
        body = KeyBody.model_validate(fields)
    except ValidationError as exc:
        err = validation_error(exc)
        return await _settings_page(request, error=err.message, form=shown, status=400)
    try:
        await cases.set_key(
            ask_of(request.app[CONTEXT]),
            _actor(request),
            body.provider,
            body.api_key.get_secret_value(),
            body.fast_model,
            body.deep_model,
        )
    except cases.AskRefused as exc:
        return await _settings_page(request, error=exc.message, form=shown, status=exc.status)
    raise web.HTTPSeeOther("/ui/ask/settings")


@routes.post("/ui/ask/settings/key/delete")
async def post_key_delete(request: web.Request) -> web.Response:
    await cases.remove_key(ask_of(request.app[CONTEXT]), _actor(request))
    raise web.HTTPSeeOther("/ui/ask/settings")


@routes.post("/ui/ask/stream")
async def stream(request: web.Request) -> web.StreamResponse:
    """The page's question: the body and the answer of `POST /v1/ask`. A refusal is the API's JSON
    error (ask.js shows its code), not an HTML page."""
    ctx = request.app[CONTEXT]
    try:
        body = question_body(await read_json_object(request))
        question = await accept_question(ctx, _org(request), body)
    except ApiError as exc:
        return exc.response()
    return await stream_answer(request, ask_of(ctx), question)


@routes.post("/ui/ask/messages/{message_id}/feedback")
async def post_feedback(request: web.Request) -> web.Response:
    """Rate an answer (up, down, "" clears). A form post goes back to the conversation; ask.js asks
    for JSON and updates the buttons in place."""
    form = await request.post()
    rating = form.get("rating", "")
    if not isinstance(rating, str) or rating not in RATINGS:
        raise bad_parameter("rating", "expected up, down or empty")
    message_id = request.match_info["message_id"]
    await cases.feedback(ask_of(request.app[CONTEXT]), _org(request), message_id, rating)  # type: ignore[arg-type]
    if "application/json" in request.headers.get("Accept", ""):
        return json_response({"ok": True, "rating": rating})
    conv = form.get("conversation")
    target = _conversation_path(conv) if isinstance(conv, str) and 0 < len(conv) <= MAX_ID else "/ui/ask"
    raise web.HTTPSeeOther(target + "#m-" + quote(message_id, safe=""))


@routes.post("/ui/ask/delete")
async def post_delete_all(request: web.Request) -> web.Response:
    await cases.delete_conversations(ask_of(request.app[CONTEXT]), _actor(request))
    raise web.HTTPSeeOther("/ui/ask")


@routes.post("/ui/ask/{conversation_id}/delete")
async def post_delete(request: web.Request) -> web.Response:
    await cases.delete_conversation(ask_of(request.app[CONTEXT]), _org(request), request.match_info["conversation_id"])
    raise web.HTTPSeeOther("/ui/ask")


# Registered last: `/ui/ask/settings` above is a page, not a conversation id.
@routes.get("/ui/ask/{conversation_id}")
async def conversation_page(request: web.Request) -> web.Response:
    conv, messages = await cases.conversation(
        ask_of(request.app[CONTEXT]), _org(request), request.match_info["conversation_id"]
    )
    return await _ask_page(request, title=conv.title, conversation=conv, messages=messages, database=conv.database)
