"""Ask's use cases, once, for the API, the pages and the CLI: settings, the own key, accepting a
question (with its refusals), conversations, feedback and suggestions.

Refusals of a question are checked in this order (docs/ask.md), and a refused question counts
toward nothing (neither the rate nor the monthly allowance):

    400 invalid body -> 404 unknown conversation / database / `about` object -> 403 not_enabled
    -> 402 no_model -> 409 key_invalid -> 402 limit_reached -> 429 rate_limited

An accepted built-in question is counted in the month's usage when it is accepted (so `done`
reports what remains), whatever the answer turns out to be.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

from forwarder.api.context import ApiContext
from forwarder.api.errors import ApiError
from forwarder.ask import providers as P
from forwarder.ask.engine import Engine, Question
from forwarder.ask.limits import AskLimiter, RateRefusal, Slot
from forwarder.ask.providers.base import About, KeyCheck, Provider, ProviderName
from forwarder.ask.tools import ToolContext
from forwarder.clock import Clock
from forwarder.config import AskConfig
from forwarder.insights.rules import RULES
from forwarder.secrets import SecretBox
from forwarder.store import ask as A
from forwarder.store import state as S
from forwarder.usecases.conversations import ConversationExpiry
from forwarder.usecases.destinations import Actor

log = logging.getLogger(__name__)

MAX_SUGGESTIONS: Final = 4
DELETE_ALL_AUDIT: Final = "ask.conversations_deleted"

Source = Literal["builtin", "own_key", "none"]
Handler = Literal["analyst", "operator_model", "provider", "none"]


class AskRefused(ApiError):
    """A refusal before any answer, in the API's error shape (`status`, `code`, `message`,
    `field`), with `Retry-After` for 429. The API answers it as it is; the pages show it."""

    def __init__(
        self, status: int, code: str, message: str, *, field: str | None = None, retry_after_seconds: int | None = None
    ) -> None:
        headers = {"Retry-After": str(retry_after_seconds)} if retry_after_seconds is not None else None
        super().__init__(status, code, message, field=field, headers=headers)
        self.retry_after_seconds = retry_after_seconds


def month_of(now: float) -> str:
    """The UTC calendar month the allowance counts in, YYYY-MM."""
    return datetime.fromtimestamp(now, tz=UTC).strftime("%Y-%m")


class AskService:
    """Ask's state in the daemon: config, the sealed keys' box, the limiter, the engine.

    The provider makers and the key check are attributes so a test can put fakes in their place.
    """

    def __init__(
        self, config: AskConfig, ctx: ApiContext, box: SecretBox, clock: Clock, expiry: ConversationExpiry
    ) -> None:
        self.config = config
        self.ctx = ctx
        self.box = box
        self.clock = clock
        self.expiry = expiry  # the daemon's, whose loop runs from its start
        self.limiter = AskLimiter(clock)
        self.engine = Engine(ctx.store, self.tool_context, clock)
        self.keepalive_seconds = 15.0
        self.own_key_provider: Callable[[ProviderName, str, AskConfig], Provider] = P.own_key_provider
        self.builtin_provider: Callable[[AskConfig], tuple[Provider, str, str]] = P.builtin_provider
        self.check_key = P.check_key

    def tool_context(self, org: str, database: str | None) -> ToolContext:
        return ToolContext(self.ctx, org, database)


# --- settings -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Settings:
    """An organization's Ask settings as shown (never the key)."""

    enabled: bool
    source: Source
    provider: ProviderName | None
    key_usable: bool | None  # None without an own key
    fast_model: str | None
    deep_model: str | None
    month: str
    builtin_used: int
    builtin_allowance: int
    builtin_remaining: int
    handled_by: Handler
    handled_by_text: str


def source_of(config: AskConfig, org: A.OrgAsk) -> Source:
    if org.sealed_key is not None:
        return "own_key"
    return "builtin" if config.builtin_monthly_questions > 0 else "none"


async def settings(ask: AskService, org: str) -> Settings:
    month = month_of(ask.clock.now())
    record, used = await ask.ctx.store.read(lambda c: (A.get_org(c, org), A.used(c, org, month)))
    source = source_of(ask.config, record)
    allowance = ask.config.builtin_monthly_questions
    fast: str | None
    deep: str | None
    handler: Handler
    if source == "own_key":
        provider: ProviderName = record.provider  # type: ignore[assignment]
        fast, deep = P.models_of(provider, record.fast_model, record.deep_model)
        handler, text = "provider", f"{provider}, with this organization's own key"
    elif source == "builtin" and ask.config.builtin is not None:
        fast, deep = ask.config.builtin.fast_model, ask.config.builtin.deep_model or ask.config.builtin.fast_model
        handler, text = "operator_model", "the operator's model server"
    elif source == "builtin":
        fast = deep = P.ANALYST_MODEL
        handler, text = "analyst", "the built-in analyst (deterministic, inside the daemon)"
    else:
        fast = deep = None
        handler, text = "none", "nobody: there are no built-in questions and no own key"
    return Settings(
        enabled=record.enabled,
        source=source,
        provider=record.provider if source == "own_key" else None,  # type: ignore[arg-type]
        key_usable=None if record.sealed_key is None else not record.key_invalid,
        fast_model=fast,
        deep_model=deep,
        month=month,
        builtin_used=used,
        builtin_allowance=allowance,
        builtin_remaining=max(0, allowance - used),
        handled_by=handler,
        handled_by_text=text,
    )


async def set_enabled(ask: AskService, actor: Actor, enabled: bool) -> Settings:
    """Turn Ask on or off for the actor's organization; a change is audited (ask.enabled / ask.disabled)."""
    now_us = int(ask.clock.now() * 1_000_000)

    def _txn(c: Any) -> None:
        if A.set_enabled(c, actor.org, enabled, now_us):
            S.audit(c, now_us, org=actor.org, actor=actor.name, action="ask.enabled" if enabled else "ask.disabled")

    await ask.ctx.store.write(_txn)
    return await settings(ask, actor.org)


async def set_key(
    ask: AskService, actor: Actor, provider: ProviderName, api_key: str, fast_model: str, deep_model: str
) -> Settings:
    """Check `api_key` with `provider`, then store it sealed (audited as ask.key_set, without the key).

    AskRefused 422 `key_refused` when the provider refuses it, 502 `provider_unreachable` when the
    provider cannot be asked; nothing is stored then.
    """
    verdict: KeyCheck = await ask.check_key(provider, api_key, ask.config)
    if verdict.verdict == "refused":
        raise AskRefused(422, "key_refused", f"{provider} refused this key", field="api_key")
    if verdict.verdict == "unreachable":
        raise AskRefused(
            502, "provider_unreachable", f"{provider} could not be reached to check the key: {verdict.message}"
        )
    sealed = ask.box.seal(api_key, A.key_owner(actor.org))
    now_us = int(ask.clock.now() * 1_000_000)

    def _txn(c: Any) -> None:
        A.set_key(c, actor.org, provider, sealed, fast_model, deep_model, now_us)
        details: dict[str, object] = {"provider": provider, "fast_model": fast_model, "deep_model": deep_model}
        S.audit(c, now_us, org=actor.org, actor=actor.name, action="ask.key_set", details=details)

    await ask.ctx.store.write(_txn)
    return await settings(ask, actor.org)


async def remove_key(ask: AskService, actor: Actor) -> bool:
    """Forget the organization's own key (audited as ask.key_removed); False when none was stored."""
    now_us = int(ask.clock.now() * 1_000_000)

    def _txn(c: Any) -> bool:
        done = A.remove_key(c, actor.org, now_us)
        if done:
            S.audit(c, now_us, org=actor.org, actor=actor.name, action="ask.key_removed")
        return done

    done: bool = await ask.ctx.store.write(_txn)
    return done


# --- a question -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QuestionBody:
    """A validated question request."""

    question: str
    database: str | None = None
    conversation_id: str | None = None
    deep: bool = False
    about: About | None = None


async def _about_text(ctx: ApiContext, about: About) -> tuple[str, str | None]:
    """What `about` names, in words, and the database id it belongs to; AskRefused 404 when unknown."""
    from forwarder.api.errors import ApiError
    from forwarder.api.insights import finding_detail, query_detail
    from forwarder.insights.alerts import get_instance

    if about.kind == "alert":
        found = await ctx.store.read(lambda c: get_instance(c, about.id))
        if found is None:
            raise AskRefused(404, "not_found", f"about.id: no alert with id {about.id[:40]!r}", field="about.id")
        return f"alert {found.id} (rule {found.rule}, database {found.database_id}, {found.state})", found.database_id
    ref = about.id if about.kind == "database" else about.database
    db = ctx.databases.find(ref or "")
    if db is None:
        name = "about.id" if about.kind == "database" else "about.database"
        raise AskRefused(404, "not_found", f"{name}: no database {str(ref)[:64]!r}", field=name)
    if about.kind == "database":
        return f"database {db.config.name} (id {db.config.id})", db.config.id
    if ctx.insights is None:
        raise AskRefused(503, "insights_off", "insights are turned off in the config ([insights] enabled = false)")
    try:
        if about.kind == "finding":
            f = await finding_detail(ctx.insights, db, about.id)
            return f"finding {f.id} of database {db.config.id} ({finding_topic(f.rule)})", db.config.id
        from forwarder.api.insights import QueryWindow

        q = await query_detail(ctx.insights, db, about.id, QueryWindow())
        return f"query {q.id} of database {db.config.id}", db.config.id
    except ApiError as exc:
        raise AskRefused(404, "not_found", f"about.id: {exc.message}", field="about.id") from None


async def accept(ask: AskService, org: str, body: QuestionBody) -> Question:
    """The question `body` of `org`, accepted (counted, a place taken), or AskRefused in the documented order."""
    ctx = ask.ctx
    conversation: A.Conversation | None = None
    if body.conversation_id is not None:
        await ask.expiry.maybe()
        conv_id = body.conversation_id
        conversation = await ctx.store.read(lambda c: A.conversation(c, org, conv_id))
        if conversation is None:
            raise AskRefused(
                404, "not_found", f"conversation_id: no conversation {conv_id[:64]!r}", field="conversation_id"
            )
    database: str | None = None
    if body.database is not None:
        db = ctx.databases.find(body.database)
        if db is None:
            raise AskRefused(404, "not_found", f"database: no database {body.database[:64]!r}", field="database")
        database = db.config.id
    about_text = ""
    if body.about is not None:
        about_text, about_db = await _about_text(ctx, body.about)
        if database is not None and about_db is not None and about_db != database:
            raise AskRefused(
                400, "invalid_body", "about: it belongs to another database than `database`", field="about"
            )
        database = database or about_db
    if conversation is not None:
        if database is not None and conversation.database is not None and database != conversation.database:
            raise AskRefused(
                400,
                "invalid_body",
                f"database: the conversation keeps its database ({conversation.database})",
                field="database",
            )
        database = conversation.database

    month = month_of(ask.clock.now())
    record, used = await ctx.store.read(lambda c: (A.get_org(c, org), A.used(c, org, month)))
    if not record.enabled:
        raise AskRefused(403, "not_enabled", "Ask is off for this organization; a read-write key turns it on")
    source = source_of(ask.config, record)
    if source == "none":
        raise AskRefused(402, "no_model", "no built-in questions are configured and no own key is stored")
    if source == "own_key" and record.key_invalid:
        raise AskRefused(409, "key_invalid", "the provider refused the stored key; store a key again (PUT /v1/ask/key)")
    allowance = ask.config.builtin_monthly_questions
    if source == "builtin" and used >= allowance:
        raise AskRefused(402, "limit_reached", f"this month's {allowance} built-in questions are used up")
    taken = ask.limiter.acquire(org)
    if isinstance(taken, RateRefusal):
        raise AskRefused(429, "rate_limited", taken.message, retry_after_seconds=taken.retry_after_seconds)
    slot: Slot = taken
    try:
        return await _question(ask, org, body, record, source, month, slot, conversation, database, about_text)
    except BaseException:
        slot.cancel()
        raise


async def _question(
    ask: AskService,
    org: str,
    body: QuestionBody,
    record: A.OrgAsk,
    source: Source,
    month: str,
    slot: Slot,
    conversation: A.Conversation | None,
    database: str | None,
    about_text: str,
) -> Question:
    on_key_refused = None
    if source == "builtin":
        allowance = ask.config.builtin_monthly_questions
        count = await ask.ctx.store.write(lambda c: A.reserve(c, org, month, allowance))
        if count is None:  # another question took the last one meanwhile
            raise AskRefused(402, "limit_reached", f"this month's {allowance} built-in questions are used up")
        remaining = allowance - count
        provider, fast, deep = ask.builtin_provider(ask.config)
    else:
        assert record.sealed_key is not None and record.provider is not None
        name: ProviderName = record.provider  # type: ignore[assignment]
        api_key = ask.box.open(record.sealed_key, A.key_owner(org))
        provider = ask.own_key_provider(name, api_key, ask.config)
        fast, deep = P.models_of(name, record.fast_model, record.deep_model)
        remaining = -1
        sealed = record.sealed_key

        async def on_key_refused() -> None:
            log.warning("the provider refused an organization's own key; it is marked unusable", extra={"org": org})
            now_us = int(ask.clock.now() * 1_000_000)  # when it was refused, not when the question came
            await ask.ctx.store.write(lambda c: A.mark_key_invalid(c, org, sealed, now_us))

    return Question(
        org=org,
        text=body.question,
        deep=body.deep,
        about=body.about,
        database=database,
        conversation=conversation,
        provider=provider,
        model=deep if body.deep else fast,
        remaining=remaining,
        slot=slot,
        source=source,
        on_key_refused=on_key_refused,
        about_text=about_text,
    )


# --- conversations, feedback, suggestions ---------------------------------------------------------


async def conversations(ask: AskService, org: str, limit: int = 100) -> list[A.Conversation]:
    await ask.expiry.maybe()
    found: list[A.Conversation] = await ask.ctx.store.read(lambda c: A.conversations(c, org, limit))
    return found


async def conversation(ask: AskService, org: str, conv_id: str) -> tuple[A.Conversation, list[A.Message]]:
    """A conversation of `org` with its messages; AskRefused 404 when `org` has none with this id."""

    await ask.expiry.maybe()

    def _q(c: Any) -> tuple[A.Conversation | None, list[A.Message]]:
        conv = A.conversation(c, org, conv_id)
        return conv, [] if conv is None else A.messages(c, conv_id)

    conv, messages = await ask.ctx.store.read(_q)
    if conv is None:
        raise AskRefused(404, "not_found", f"no conversation {conv_id[:64]!r}")
    return conv, messages


async def delete_conversation(ask: AskService, org: str, conv_id: str) -> None:
    if not await ask.ctx.store.write(lambda c: A.delete_conversation(c, org, conv_id)):
        raise AskRefused(404, "not_found", f"no conversation {conv_id[:64]!r}")


async def delete_conversations(ask: AskService, actor: Actor) -> int:
    """Delete every conversation of the actor's organization (audited as ask.conversations_deleted)."""
    now_us = int(ask.clock.now() * 1_000_000)

    def _txn(c: Any) -> int:
        count = A.delete_conversations(c, actor.org)
        S.audit(c, now_us, org=actor.org, actor=actor.name, action=DELETE_ALL_AUDIT, details={"conversations": count})
        return count

    count: int = await ask.ctx.store.write(_txn)
    return count


async def feedback(ask: AskService, org: str, message_id: str, rating: A.Rating) -> None:
    """Store `rating` on an answer of `org` ('' clears it); AskRefused 404 / 400 for an unknown message / a question."""
    done = await ask.ctx.store.write(lambda c: A.set_rating(c, org, message_id, rating))
    if done is None:
        raise AskRefused(404, "not_found", f"no message {message_id[:64]!r}")
    if not done:
        raise AskRefused(400, "invalid_body", "feedback is given on answers, not on questions", field="message_id")


@dataclass(frozen=True, slots=True)
class Suggestion:
    question: str
    about: About | None
    database: str | None


async def suggestions(ask: AskService, database: str | None) -> list[Suggestion]:
    """Up to four questions from the open findings (most severe first) and the firing alerts,
    within `database` when given (AskRefused 404 when it is unknown)."""
    from forwarder.api.insights import FindingsQuery, finding_list
    from forwarder.insights.alerts import list_instances

    ctx = ask.ctx
    dbs = ctx.databases.all()
    if database is not None:
        found = ctx.databases.find(database)
        if found is None:
            raise AskRefused(404, "not_found", f"database: no database {database[:64]!r}", field="database")
        dbs = [found]
    out: list[Suggestion] = []
    alerts = await ctx.store.read(lambda c: list_instances(c, "firing", 20))
    ids = {d.config.id for d in dbs}
    for a in alerts:
        if a.database_id in ids:
            out.append(
                Suggestion(f"Why is the alert {a.rule} firing on {a.database_id}?", About("alert", a.id), a.database_id)
            )
    if ctx.insights is not None:
        rank = {"critical": 0, "warning": 1, "info": 2}
        findings = []
        for db in dbs:
            for f in await finding_list(
                ctx.insights, db, FindingsQuery.model_validate({"status": "open", "limit": "20"})
            ):
                findings.append((rank.get(f.severity, 3), f.last_seen, db.config.id, f))
        findings.sort(key=lambda t: (t[0], -_ts(t[1])))
        for _, _, db_id, f in findings:
            question = f"{finding_topic(f.rule)} on {db_id}: why, and what should I do?"
            out.append(Suggestion(question, About("finding", f.id, db_id), db_id))
    unique: dict[str, Suggestion] = {}
    for suggestion in out:  # the first of each question, in order
        unique.setdefault(suggestion.question, suggestion)
    return list(unique.values())[:MAX_SUGGESTIONS]


def finding_topic(rule: str) -> str:
    """A finding's rule in plain words, for a question's text.

    Never the finding's title: a title holds log text (a failed login's user name is whatever
    the client sent, before it authenticated), and a question is the user's own words to the
    model, where log text must not go (docs/ask.md, "Log text is untrusted data"); the model
    reads the title through `get_finding`, as a tool result.
    """
    found = RULES.get(rule)
    return found.topic if found is not None else rule


def _ts(value: object) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    with contextlib.suppress(Exception):
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    return 0.0
