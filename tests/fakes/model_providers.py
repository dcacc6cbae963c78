"""Fake model providers on loopback that speak the vendors' documented wire formats, strictly.

- `FakeOpenAI`: OpenAI's chat completions (platform.openai.com/docs/api-reference/chat-streaming)
  in three flavours: `openai` (base URL `/v1`), `openrouter` (`/api/v1`, keep-alive comments
  `: OPENROUTER PROCESSING`, errors as a chunk with an `error` object; openrouter.ai/docs/api-
  reference/streaming) and `builtin`, an operator's OpenAI-compatible server (`/v1`, like Ollama).
- `FakeAnthropic`: Anthropic's messages API (docs.anthropic.com/en/api/messages-streaming): named
  events `message_start`, `content_block_start|delta|stop`, `message_delta`, `message_stop`, `ping`
  and `error`.

Each checks every request (path, auth headers, JSON body shape, the pairing of tool calls with
their results) and records a broken one in `errors` (answered 400), so a test asserts `errors`
stays empty; a good one is kept in `requests` and answered by the next scripted turn: a list of
`Step`s streamed as the vendor does, or a `Status` answered with the vendor's error JSON.
`stalled` is set once a `Stall` step holds the stream; `disconnected` once the client went away.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from forwarder.ask.providers.anthropic import AnthropicProvider
from forwarder.ask.providers.anthropic import check_key as anthropic_check_key
from forwarder.ask.providers.base import Delta, KeyCheck, ModelRequest, Provider
from forwarder.ask.providers.openai import OpenAIChatProvider
from forwarder.ask.providers.openai import check_key as openai_check_key

LOOPBACK = "127.0.0.1"
CREATED = 1_700_000_000


class WireFormatError(AssertionError):
    """The adapter broke the vendor's documented request format."""


# --- the script ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """A piece of the answer's text (one delta)."""

    text: str


@dataclass(frozen=True)
class Tool:
    """A tool call whose JSON arguments are sent split across `pieces` fragments."""

    id: str
    name: str
    arguments: dict[str, Any]
    pieces: int = 3
    raw: str | None = None  # sent instead of the JSON of `arguments` (e.g. text that is not JSON)

    @property
    def text(self) -> str:
        return self.raw if self.raw is not None else json.dumps(self.arguments)


@dataclass(frozen=True)
class KeepAlive:
    """The vendor's keep-alive: an SSE comment (OpenRouter) or a `ping` event (Anthropic)."""


@dataclass(frozen=True)
class Refusal:
    """The model refuses: OpenAI `refusal` deltas; Anthropic stop_reason `refusal`. Ends the turn."""

    text: str = "I can't help with that."


@dataclass(frozen=True)
class Limit:
    """The answer reached max_tokens: OpenAI finish_reason `length`; Anthropic stop_reason
    `max_tokens`. Ends the turn (the stream itself ends as usual)."""


@dataclass(frozen=True)
class StreamError:
    """An error inside the stream (after HTTP 200), then the stream ends."""

    kind: str = "overloaded"


@dataclass(frozen=True)
class BadJson:
    """A data line that is not JSON."""


@dataclass(frozen=True)
class Cut:
    """End the body here, without the vendor's end of stream (a connection that broke)."""


@dataclass(frozen=True)
class Stall:
    """Hold the stream open without sending anything until the client goes away."""


Step = Text | Tool | KeepAlive | Refusal | Limit | StreamError | BadJson | Cut | Stall


@dataclass(frozen=True)
class Status:
    """Answer the request with this HTTP status and the vendor's error JSON for it."""

    status: int


Turn = list[Step] | Status


def split(text: str, pieces: int) -> list[str]:
    """`text` cut into `pieces` non-empty parts (fewer when it is shorter)."""
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)]


# --- the common server ------------------------------------------------------------------------


@dataclass
class _Base:
    api_key: str
    model: str = "fake-model"
    turns: list[Turn] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stalled: asyncio.Event = field(default_factory=asyncio.Event)
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def origin(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation: a client that goes away cancels its handler, which is how the
        # fake sees a stream closed by the adapter.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, LOOPBACK, 0)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.Server)
        self.port = server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> _Base:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            if request.method == "GET" and request.path == self.models_path:
                if self.models_need_a_key:
                    self.check_auth(request)
                return web.json_response(self.models_body())
            if request.method == "GET" and self.key_path and request.path == self.key_path:
                self.check_auth(request)
                return web.json_response(self.key_body())
            if request.method != "POST" or request.path != self.stream_path:
                raise WireFormatError(f"unexpected {request.method} {request.path}")
            self.check_auth(request)
            if request.content_type != "application/json":
                raise WireFormatError(f"Content-Type {request.content_type!r}")
            body = json.loads(await request.read())
            if not isinstance(body, dict):
                raise WireFormatError("the body is not a JSON object")
            self.check_body(body)
        except _Unauthorized:
            return web.json_response(self.error_body(401), status=401)
        except (WireFormatError, ValueError) as exc:
            self.errors.append(str(exc))
            return web.json_response(self.error_body(400), status=400)
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        if not self.turns:
            self.errors.append("a request came after the last scripted turn")
            return web.json_response(self.error_body(500), status=500)
        turn = self.turns.pop(0)
        if isinstance(turn, Status):
            return web.json_response(self.error_body(turn.status), status=turn.status)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        try:
            async for chunk in self.events(body, turn):
                await response.write(chunk.encode())
        except asyncio.CancelledError:
            self.disconnected.set()
            raise
        except ConnectionError:
            self.disconnected.set()
            return response
        await response.write_eof()
        return response

    async def hold(self) -> None:
        self.stalled.set()
        await asyncio.Event().wait()

    # Filled by each vendor.
    stream_path: str = ""
    models_path: str = ""
    models_need_a_key: bool = True
    key_path: str = ""  # the key's own record, where a vendor has one (OpenRouter)

    def check_auth(self, request: web.Request) -> None:
        raise NotImplementedError

    def check_body(self, body: dict[str, Any]) -> None:
        raise NotImplementedError

    def error_body(self, status: int) -> dict[str, Any]:
        raise NotImplementedError

    def models_body(self) -> dict[str, Any]:
        raise NotImplementedError

    def key_body(self) -> dict[str, Any]:
        raise NotImplementedError

    def events(self, body: dict[str, Any], turn: list[Step]) -> AsyncIterator[str]:
        raise NotImplementedError


class _Unauthorized(Exception):
    pass


def _need(condition: object, what: str) -> None:
    if not condition:
        raise WireFormatError(what)


def _check_schema(schema: object, where: str) -> None:
    _need(isinstance(schema, dict) and schema.get("type") == "object", f"{where} is not a JSON schema of an object")


# --- OpenAI chat completions ---------------------------------------------------------------------

Flavour = Literal["openai", "openrouter", "builtin"]
_PREFIX: dict[Flavour, str] = {"openai": "/v1", "openrouter": "/api/v1", "builtin": "/v1"}


@dataclass
class FakeOpenAI(_Base):
    flavour: Flavour = "openai"
    sent_key: str = ""

    def __post_init__(self) -> None:
        self.stream_path = _PREFIX[self.flavour] + "/chat/completions"
        self.models_path = _PREFIX[self.flavour] + "/models"
        # OpenRouter lists its models to anyone (no key needed); the key's own record, `GET /key`,
        # is what answers 401 for a key it does not know.
        self.models_need_a_key = self.flavour != "openrouter"
        self.key_path = "/api/v1/key" if self.flavour == "openrouter" else ""

    @property
    def base_url(self) -> str:
        return self.origin + _PREFIX[self.flavour]

    def check_auth(self, request: web.Request) -> None:
        self.sent_key = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            raise _Unauthorized

    def check_body(self, body: dict[str, Any]) -> None:
        _need(isinstance(body.get("model"), str) and body["model"], "model must be a non-empty string")
        _need(body.get("stream") is True, "stream must be true")
        if self.flavour == "builtin":
            _need("stream_options" not in body, "stream_options is not sent to the operator's server")
        else:
            _need(body.get("stream_options") == {"include_usage": True}, "stream_options.include_usage missing")
        token_field = "max_completion_tokens" if self.flavour == "openai" else "max_tokens"
        other = "max_tokens" if self.flavour == "openai" else "max_completion_tokens"
        _need(isinstance(body.get(token_field), int) and body[token_field] > 0, f"{token_field} missing")
        _need(other not in body, f"{other} must not be sent")
        for tool in body.get("tools", []):
            _need(tool.get("type") == "function", "a tool's type must be function")
            function = tool.get("function", {})
            _need(isinstance(function.get("name"), str) and function["name"], "a tool needs a name")
            _need(isinstance(function.get("description"), str), "a tool needs a description")
            _check_schema(function.get("parameters"), "a tool's parameters")
        messages = body.get("messages")
        _need(isinstance(messages, list) and messages, "messages must be a non-empty list")
        open_calls: set[str] = set()
        for i, message in enumerate(messages):
            role = message.get("role")
            if role != "tool":
                _need(not open_calls, f"tool calls {sorted(open_calls)} are not answered before message {i}")
            if role == "system":
                _need(i == 0 and isinstance(message.get("content"), str), "one system message, first")
            elif role == "user":
                _need(isinstance(message.get("content"), str), f"user message {i} needs text content")
            elif role == "assistant":
                content = message.get("content")
                _need(content is None or isinstance(content, str), f"assistant message {i} content")
                for call in message.get("tool_calls", []):
                    _need(call.get("type") == "function" and isinstance(call.get("id"), str), "tool call id/type")
                    arguments = json.loads(call["function"]["arguments"])
                    _need(isinstance(arguments, dict), "tool call arguments must be a JSON object text")
                    open_calls.add(call["id"])
                _need(content or message.get("tool_calls"), f"assistant message {i} is empty")
            elif role == "tool":
                call_id = message.get("tool_call_id")
                _need(call_id in open_calls, f"tool message {i} answers no open tool call ({call_id})")
                _need(isinstance(message.get("content"), str), f"tool message {i} needs text content")
                open_calls.discard(call_id)
            else:
                raise WireFormatError(f"unknown role {role!r}")
        _need(not open_calls, f"tool calls {sorted(open_calls)} are never answered")
        _need(messages[-1]["role"] in ("user", "tool"), "the last message must be the user's or a tool's")

    def error_body(self, status: int) -> dict[str, Any]:
        if status == 401:
            # OpenAI repeats (part of) the key it got in this message; the adapter must not pass it on.
            message = f"Incorrect API key provided: {self.sent_key}."
            kind, code = "invalid_request_error", "invalid_api_key"
        elif status == 429:
            message, kind, code = "Rate limit reached.", "requests", "rate_limit_exceeded"
        elif status >= 500:
            message, kind, code = "The server had an error while processing your request.", "server_error", None
        else:
            message, kind, code = "Invalid request.", "invalid_request_error", None
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}

    def models_body(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.model, "object": "model", "created": CREATED, "owned_by": "x"}]}

    def key_body(self) -> dict[str, Any]:
        return {"data": {"label": "sk-or-v1-abc...xyz", "usage": 0, "limit": None, "is_free_tier": False}}

    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> str:
        chunk = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": self.model,
            "system_fingerprint": "fp_fake",
            "choices": choices,
            **extra,
        }
        return f"data: {json.dumps(chunk)}\n\n"

    def _delta(self, delta: dict[str, Any], finish_reason: str | None = None) -> str:
        return self._chunk([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}])

    async def events(self, body: dict[str, Any], turn: list[Step]) -> AsyncIterator[str]:
        yield self._delta({"role": "assistant", "content": "", "refusal": None})
        finish = "stop"
        index = 0
        for step in turn:
            if isinstance(step, Text):
                yield self._delta({"content": step.text})
            elif isinstance(step, Tool):
                finish = "tool_calls"
                head = {"index": index, "id": step.id, "type": "function", "function": {"name": step.name}}
                yield self._delta({"tool_calls": [{**head, "function": {"name": step.name, "arguments": ""}}]})
                for piece in split(step.text, step.pieces):
                    yield self._delta({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                index += 1
            elif isinstance(step, KeepAlive):
                yield ": OPENROUTER PROCESSING\n\n"
            elif isinstance(step, Refusal):
                for piece in split(step.text, 2):
                    yield self._delta({"refusal": piece})
                break
            elif isinstance(step, Limit):
                finish = "length"
                break
            elif isinstance(step, StreamError):
                error = {"code": "server_error" if step.kind == "overloaded" else step.kind, "message": "upstream"}
                choice = {"index": 0, "delta": {"content": ""}, "finish_reason": "error"}
                yield self._chunk([choice], provider="fake", error=error)
                return
            elif isinstance(step, BadJson):
                yield "data: {not json\n\n"
                return
            elif isinstance(step, Cut):
                return
            elif isinstance(step, Stall):
                yield ""
                await self.hold()
        yield self._delta({}, finish)
        if "stream_options" in body:
            usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
            yield self._chunk([], usage=usage)
        yield "data: [DONE]\n\n"


# --- Anthropic messages ---------------------------------------------------------------------------

_VERSION = re.compile(r"^\d{4}-\d\d-\d\d$")


@dataclass
class FakeAnthropic(_Base):
    def __post_init__(self) -> None:
        self.stream_path = "/v1/messages"
        self.models_path = "/v1/models"

    @property
    def base_url(self) -> str:
        return self.origin

    def check_auth(self, request: web.Request) -> None:
        version = request.headers.get("anthropic-version", "")
        if not _VERSION.match(version):
            self.errors.append(f"anthropic-version header {version!r}")
        # The key goes in `x-api-key` (the SDK before 2.x) or `Authorization: Bearer` (the SDK from
        # 2.x on, the version installed here); one of the two, never both.
        keys = [request.headers.get("x-api-key")]
        bearer = request.headers.get("Authorization", "")
        keys.append(bearer.removeprefix("Bearer ") if bearer.startswith("Bearer ") else None)
        sent = [key for key in keys if key is not None]
        if len(sent) != 1:
            self.errors.append(f"{len(sent)} API keys sent (x-api-key and Authorization)")
        if sent != [self.api_key]:
            raise _Unauthorized

    def check_body(self, body: dict[str, Any]) -> None:
        _need(isinstance(body.get("model"), str) and body["model"], "model must be a non-empty string")
        _need(body.get("stream") is True, "stream must be true")
        _need(isinstance(body.get("max_tokens"), int) and body["max_tokens"] > 0, "max_tokens is required")
        _need(isinstance(body.get("system", ""), str), "system must be a string")
        for tool in body.get("tools", []):
            _need(isinstance(tool.get("name"), str) and tool["name"], "a tool needs a name")
            _need(isinstance(tool.get("description"), str), "a tool needs a description")
            _check_schema(tool.get("input_schema"), "a tool's input_schema")
            _need(set(tool) <= {"name", "description", "input_schema"}, f"unknown tool fields {sorted(tool)}")
        messages = body.get("messages")
        _need(isinstance(messages, list) and messages, "messages must be a non-empty list")
        open_calls: set[str] = set()
        for i, message in enumerate(messages):
            role = message.get("role")
            _need(role == ("user" if i % 2 == 0 else "assistant"), f"message {i}: roles must alternate from user")
            content = message.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            _need(isinstance(blocks, list) and blocks, f"message {i} has no content")
            if role == "user":
                results = [b for b in blocks if b.get("type") == "tool_result"]
                _need({b.get("tool_use_id") for b in results} == open_calls, f"message {i} must answer {open_calls}")
                _need(blocks[: len(results)] == results, f"message {i}: tool results must come first")
                for block in blocks:
                    _need(block.get("type") in ("text", "tool_result"), f"message {i}: block {block.get('type')}")
                    if block["type"] == "tool_result":
                        _need(isinstance(block.get("content"), str), "a tool result's content")
                        _need(set(block) <= {"type", "tool_use_id", "content", "is_error"}, "tool result fields")
                    else:
                        # "text content blocks must contain non-whitespace text" (400)
                        _need(isinstance(block.get("text"), str) and block["text"].strip(), "a text block needs text")
                open_calls = set()
            else:
                for block in blocks:
                    if block.get("type") == "tool_use":
                        _need(isinstance(block.get("id"), str) and isinstance(block.get("name"), str), "tool_use")
                        _need(isinstance(block.get("input"), dict), "tool_use input must be an object")
                        open_calls.add(block["id"])
                    else:
                        text = block.get("text")
                        _need(
                            block.get("type") == "text" and isinstance(text, str) and text.strip(),
                            f"message {i}: a blank text block",
                        )
        _need(messages[-1]["role"] == "user", "the last message must be the user's")

    def error_body(self, status: int) -> dict[str, Any]:
        kind, message = {
            400: ("invalid_request_error", "Invalid request"),
            401: ("authentication_error", "invalid x-api-key"),
            403: ("permission_error", "Your API key does not have permission"),
            429: ("rate_limit_error", "Number of requests has exceeded your rate limit"),
            529: ("overloaded_error", "Overloaded"),
        }.get(status, ("api_error", "Internal server error"))
        return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_fake"}

    def models_body(self) -> dict[str, Any]:
        model = {"type": "model", "id": self.model, "display_name": "Fake", "created_at": "2025-02-19T00:00:00Z"}
        return {"data": [model], "has_more": False, "first_id": self.model, "last_id": self.model}

    @staticmethod
    def _event(name: str, **fields: Any) -> str:
        """One named SSE event whose data's `type` is its name, as Anthropic sends them."""
        return f"event: {name}\ndata: {json.dumps({'type': name, **fields})}\n\n"

    async def events(self, body: dict[str, Any], turn: list[Step]) -> AsyncIterator[str]:
        message = {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self.model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 11, "output_tokens": 1},
        }
        yield self._event("message_start", message=message)
        index = -1
        text_open = False
        stop_reason = "end_turn"

        def close_text() -> str:
            nonlocal text_open
            text_open = False
            return self._event("content_block_stop", index=index)

        for step in turn:
            if isinstance(step, Text):
                if not text_open:
                    index += 1
                    text_open = True
                    block = {"type": "text", "text": ""}
                    yield self._event("content_block_start", index=index, content_block=block)
                delta = {"type": "text_delta", "text": step.text}
                yield self._event("content_block_delta", index=index, delta=delta)
                continue
            if text_open:
                yield close_text()
            if isinstance(step, Tool):
                stop_reason = "tool_use"
                index += 1
                block = {"type": "tool_use", "id": step.id, "name": step.name, "input": {}}
                yield self._event("content_block_start", index=index, content_block=block)
                for piece in split(step.text, step.pieces):
                    delta = {"type": "input_json_delta", "partial_json": piece}
                    yield self._event("content_block_delta", index=index, delta=delta)
                yield self._event("content_block_stop", index=index)
            elif isinstance(step, KeepAlive):
                yield self._event("ping")
            elif isinstance(step, Refusal):
                stop_reason = "refusal"
                break
            elif isinstance(step, Limit):
                stop_reason = "max_tokens"
                break
            elif isinstance(step, StreamError):
                kind = "overloaded_error" if step.kind == "overloaded" else step.kind
                yield self._event("error", error={"type": kind, "message": "Overloaded"})
                return
            elif isinstance(step, BadJson):
                yield "event: content_block_delta\ndata: {not json\n\n"
                return
            elif isinstance(step, Cut):
                return
            elif isinstance(step, Stall):
                yield ""
                await self.hold()
        if text_open:
            yield close_text()
        delta = {"stop_reason": stop_reason, "stop_sequence": None}
        yield self._event("message_delta", delta=delta, usage={"output_tokens": 7})
        yield self._event("message_stop")


@contextlib.asynccontextmanager
async def running(fake: _Base) -> AsyncIterator[_Base]:
    """`fake`, serving on loopback for the block."""
    await fake.start()
    try:
        yield fake
    finally:
        await fake.close()


# --- an adapter wired to its fake -------------------------------------------------------------

Vendor = Literal["openai", "openrouter", "builtin", "anthropic"]
VENDORS: tuple[Vendor, ...] = ("openai", "openrouter", "builtin", "anthropic")
# Looks like a real key, so that a leak of it anywhere is unmistakable.
SECRET_KEY = "sk-proj-FAKE-7d3c1e9a0b4f-do-not-leak"


def fake_for(vendor: Vendor, api_key: str = SECRET_KEY, model: str = "fake-model") -> FakeOpenAI | FakeAnthropic:
    if vendor == "anthropic":
        return FakeAnthropic(api_key=api_key, model=model)
    return FakeOpenAI(api_key=api_key, model=model, flavour=vendor)


def provider_for(vendor: Vendor, base_url: str, api_key: str = SECRET_KEY, timeout_seconds: float = 30) -> Provider:
    """The adapter the daemon uses for `vendor`, pointed at `base_url`."""
    if vendor == "anthropic":
        return AnthropicProvider(api_key=api_key, base_url=base_url, timeout_seconds=timeout_seconds)
    return OpenAIChatProvider(api_key=api_key, base_url=base_url, timeout_seconds=timeout_seconds, vendor=vendor)


async def check_key_with(vendor: Vendor, base_url: str, api_key: str, timeout_seconds: float = 30) -> KeyCheck:
    if vendor == "anthropic":
        return await anthropic_check_key(api_key=api_key, base_url=base_url, timeout_seconds=timeout_seconds)
    return await openai_check_key(api_key=api_key, base_url=base_url, timeout_seconds=timeout_seconds, vendor=vendor)


@dataclass
class Rig:
    """One vendor's adapter talking to its fake."""

    vendor: Vendor
    fake: FakeOpenAI | FakeAnthropic
    provider: Provider

    async def answer(self, request: ModelRequest, *turns: Turn) -> list[Delta]:
        """Script `turns`, run one model turn of `request`, and return every delta it gave."""
        self.fake.turns.extend(turns)
        return [delta async for delta in self.provider.stream(request)]


@contextlib.asynccontextmanager
async def rig_for(vendor: Vendor) -> AsyncIterator[Rig]:
    fake = fake_for(vendor)
    async with running(fake):
        provider = provider_for(vendor, fake.base_url)
        try:
            yield Rig(vendor, fake, provider)
        finally:
            await provider.aclose()
