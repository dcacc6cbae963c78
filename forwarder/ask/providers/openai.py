"""OpenAI chat completions (also OpenRouter and OpenAI-compatible servers) through the `openai` SDK.

One adapter serves three sources; `vendor` only names the source in messages and picks two
request details:

- `openai` sends `max_completion_tokens` (OpenAI's newer models refuse `max_tokens`); OpenRouter
  and the operator's server get `max_tokens`, which every compatible server reads.
- `openai` and `openrouter` ask for the usage chunk (`stream_options.include_usage`, documented by
  both). The operator's server does not: some compatible servers reject unknown options, and
  built-in questions are counted per question, not per token, so usage there is only reported when
  the server sends it anyway.

Vendor error texts are never passed on: OpenAI's 401 body repeats part of the key. Every
`Failed.message` and `KeyCheck.message` is built here from the status and the error's type.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import openai

from forwarder.ask.providers.base import (
    AssistantTurn,
    Delta,
    Failed,
    Finished,
    KeyCheck,
    ModelRequest,
    TextDelta,
    ToolCall,
    ToolResultTurn,
    Turn,
    UserTurn,
    key_verdict,
    status_failure,
    transport_failure,
    unwrapped_failure,
)

_VENDOR_NAMES = {"openai": "OpenAI", "openrouter": "OpenRouter", "builtin": "the model server"}
log = logging.getLogger(__name__)
_IDENTIFIER = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


class OpenAIChatProvider:
    """One model turn over `POST {base_url}/chat/completions` with `stream: true`."""

    def __init__(self, *, api_key: str, base_url: str, timeout_seconds: float, vendor: str = "openai") -> None:
        self._vendor = vendor
        self._client = openai.AsyncOpenAI(api_key=api_key, base_url=base_url, timeout=timeout_seconds, max_retries=0)

    def __repr__(self) -> str:
        return f"OpenAIChatProvider(vendor={self._vendor!r})"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Delta]:
        name = _VENDOR_NAMES.get(self._vendor, self._vendor)
        options: dict[str, Any] = {}
        if request.tools:
            options["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in request.tools
            ]
        if self._vendor == "openai":
            options["max_completion_tokens"] = request.max_output_tokens
        else:
            options["max_tokens"] = request.max_output_tokens
        if self._vendor != "builtin":
            options["stream_options"] = {"include_usage": True}
        try:
            # `options` hides `stream=True` from the SDK's overloads: name the stream's type.
            chunks: openai.AsyncStream[Any] = await self._client.chat.completions.create(  # type: ignore[assignment]
                model=request.model,
                messages=list(_messages(request.system, request.turns)),  # type: ignore[arg-type]
                stream=True,
                **options,
            )
            # `async with` closes the HTTP stream when this generator is closed or its task is
            # cancelled, so a client that goes away stops the model call at once.
            async with chunks:
                turn = _Turn(request.model)
                async for chunk in chunks:
                    for delta in turn.feed(chunk):
                        yield delta
                        if isinstance(delta, Failed):
                            return
            for delta in turn.finish(name):
                yield delta
        except openai.APIError as exc:
            yield _failure(exc, name)
        except ValueError:  # json.JSONDecodeError from the SDK's SSE decoding
            yield Failed("provider_error", f"{name} sent a stream that is not JSON")
        except Exception as exc:  # the SDK lets its HTTP client's errors out mid-stream
            yield unwrapped_failure(exc, name)

    async def aclose(self) -> None:
        await self._client.close()


@dataclass
class _PendingCall:
    id: str = ""
    name: str = ""
    arguments: str = ""


class _Turn:
    """What one stream has said so far: tool-call fragments by index, the finish, the usage."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.calls: dict[int, _PendingCall] = {}
        self.finish_reason: str | None = None
        self.input_tokens = 0
        self.output_tokens = 0

    def feed(self, chunk: Any) -> Iterable[Delta]:
        if getattr(chunk, "model", None):
            self.model = chunk.model
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.input_tokens = usage.prompt_tokens or 0
            self.output_tokens = usage.completion_tokens or 0
        for choice in chunk.choices or ():
            delta = choice.delta
            if delta is not None:
                if getattr(delta, "refusal", None):
                    yield Failed("refused", "the model declined to answer this question")
                    return
                if delta.content:
                    yield TextDelta(delta.content)
                for fragment in delta.tool_calls or ():
                    call = self.calls.setdefault(fragment.index, _PendingCall())
                    call.id = fragment.id or call.id
                    if fragment.function is not None:
                        call.name = fragment.function.name or call.name
                        call.arguments += fragment.function.arguments or ""
            if choice.finish_reason == "content_filter":
                yield Failed("refused", "the model declined to answer this question")
                return
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason

    def finish(self, name: str) -> Iterable[Delta]:
        if self.finish_reason is None:
            yield Failed("provider_unavailable", f"{name} ended the stream before the answer was complete")
            return
        # "length": the answer reached max_tokens mid-sentence; "error" (OpenRouter's normalized
        # reason when the upstream model failed mid-stream). Neither is a finished answer.
        if self.finish_reason == "length":
            yield Failed("provider_error", f"{name} stopped the answer at its length limit")
            return
        if self.finish_reason == "error":
            yield Failed("provider_unavailable", f"{name} stopped the answer with an error")
            return
        calls: list[ToolCall] = []
        for _, call in sorted(self.calls.items()):
            arguments = _arguments(call.arguments)
            if arguments is None or not call.name:
                yield Failed("provider_error", f"{name} sent a tool call whose arguments are not a JSON object")
                return
            calls.append(ToolCall(call.id, call.name, arguments))
        yield from calls
        yield Finished(self.model, self.input_tokens, self.output_tokens)


def _arguments(text: str) -> dict[str, Any] | None:
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _messages(system: str, turns: tuple[Turn, ...]) -> Iterable[dict[str, Any]]:
    """The conversation in chat-completions form. Tool results stay `role: tool` messages (they
    hold log text, untrusted data), each answering the assistant message that called it."""
    if system:
        yield {"role": "system", "content": system}
    for turn in turns:
        if isinstance(turn, UserTurn):
            yield {"role": "user", "content": turn.text}
        elif isinstance(turn, AssistantTurn):
            message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
            if turn.tool_calls:
                message["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                    }
                    for call in turn.tool_calls
                ]
            yield message
        elif isinstance(turn, ToolResultTurn):
            yield {"role": "tool", "tool_call_id": turn.call_id, "content": turn.content}


def _error_kind(body: object) -> str:
    """The vendor's error type or code, when it is a short identifier (never its message)."""
    error = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(error, dict):
        for field in ("code", "type"):
            value = error.get(field)
            if isinstance(value, int):
                return str(value)
            if isinstance(value, str) and _IDENTIFIER.match(value):
                return value
    return ""


def _failure(exc: openai.APIError, name: str) -> Failed:
    if isinstance(exc, openai.APITimeoutError | openai.APIConnectionError):
        return transport_failure(name, timed_out=isinstance(exc, openai.APITimeoutError))
    kind = _error_kind(exc.body)
    if isinstance(exc, openai.APIStatusError) and exc.status_code >= 400:  # an error event mid-stream has 200
        return status_failure(name, exc.status_code, kind)
    # An error object inside the stream (OpenRouter sends one when the upstream model fails).
    if (kind.isdigit() and (int(kind) == 429 or int(kind) >= 500)) or kind in ("server_error", "rate_limit_exceeded"):
        return Failed("provider_unavailable", f"{name} failed during the answer ({kind})")
    return Failed("provider_error", f"{name} failed during the answer{f' ({kind})' if kind else ''}")


async def check_key(*, api_key: str, base_url: str, timeout_seconds: float, vendor: str = "openai") -> KeyCheck:
    """Whether the server accepts `api_key`, at no cost: OpenAI lists the models for a key only;
    OpenRouter lists its models to anyone, so its key is read back from `GET /key`
    (openrouter.ai/docs/api/api-reference/api-keys/get-current-api-key: 401 for a key it lacks)."""
    client = openai.AsyncOpenAI(api_key=api_key, base_url=base_url, timeout=timeout_seconds, max_retries=0)
    try:
        if vendor == "openrouter":
            await client.get("/key", cast_to=object)
        else:
            await client.models.list()
    except openai.APIError as exc:
        status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
        return key_verdict("the provider", status, timed_out=isinstance(exc, openai.APITimeoutError))
    finally:
        await client.close()
    return KeyCheck("ok")
