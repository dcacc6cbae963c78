"""Anthropic messages through the `anthropic` SDK.

The raw event stream (`messages.create(stream=True)`) is read event by event: text deltas pass
on as they come; a `tool_use` block's `input_json_delta` fragments are joined per content-block
index and parsed when the block stops; `message_delta` carries the stop reason and the output
usage; `message_stop` ends the turn. The SDK skips `ping` events and raises on `error` events.

Vendor error texts are never passed on; every message here is built from the status and the
error's type.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any, Final

import anthropic

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

_NAME = "Anthropic"
log = logging.getLogger(__name__)
_IDENTIFIER = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
# Error types (https://docs.anthropic.com/en/api/errors) that say "try again later".
_UNAVAILABLE_TYPES = frozenset({"api_error", "overloaded_error", "rate_limit_error", "timeout_error"})


class AnthropicProvider:
    """One model turn over `POST {base_url}/v1/messages` with `stream: true`."""

    def __init__(self, *, api_key: str, base_url: str, timeout_seconds: float) -> None:
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, timeout=timeout_seconds, max_retries=0
        )

    def __repr__(self) -> str:
        return "AnthropicProvider()"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Delta]:
        options: dict[str, Any] = {}
        if request.system:
            options["system"] = request.system
        if request.tools:
            options["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in request.tools
            ]
        try:
            # `options` hides `stream=True` from the SDK's overloads: name the stream's type.
            events: anthropic.AsyncStream[Any] = await self._client.messages.create(  # type: ignore[assignment]
                model=request.model,
                max_tokens=request.max_output_tokens,
                messages=_messages(request.turns),  # type: ignore[arg-type]
                stream=True,
                **options,
            )
            # `async with` closes the HTTP stream when this generator is closed or its task is
            # cancelled, so a client that goes away stops the model call at once.
            async with events:
                turn = _Turn(request.model)
                async for event in events:
                    for delta in turn.feed(event):
                        yield delta
                        if isinstance(delta, Failed | Finished):
                            return
            yield Failed("provider_unavailable", f"{_NAME} ended the stream before the answer was complete")
        except anthropic.APIError as exc:
            yield _failure(exc)
        except ValueError:  # json.JSONDecodeError from the SDK's SSE decoding
            yield Failed("provider_error", f"{_NAME} sent a stream that is not JSON")
        except Exception as exc:  # the SDK lets its HTTP client's errors out mid-stream
            yield unwrapped_failure(exc, _NAME)

    async def aclose(self) -> None:
        await self._client.close()


@dataclass
class _Block:
    kind: str
    id: str = ""
    name: str = ""
    partial_json: str = ""
    input: Any = None


# Stop reasons of an answer that did not end (docs.anthropic.com/en/api/handling-stop-reasons):
# `max_tokens` cut it mid-sentence, `model_context_window_exceeded` likewise, and `pause_turn`
# pauses a long turn of the vendor's own server tools, to be sent back to continue (we use none).
_CUT_SHORT: Final = {
    "max_tokens": "stopped the answer at its length limit",
    "model_context_window_exceeded": "stopped the answer at its context window's limit",
    "pause_turn": "paused the answer",
}


class _Turn:
    """What one stream has said so far: its content blocks by index, the stop reason, the usage."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.blocks: dict[int, _Block] = {}
        self.stop_reason: str | None = None
        self.input_tokens = 0
        self.output_tokens = 0

    def feed(self, event: Any) -> Iterable[Delta]:
        kind = getattr(event, "type", None)
        if kind == "message_start":
            message = event.message
            self.model = message.model or self.model
            if message.usage is not None:
                self.input_tokens = message.usage.input_tokens or 0
                self.output_tokens = message.usage.output_tokens or 0
        elif kind == "content_block_start":
            block = event.content_block
            self.blocks[event.index] = _Block(
                block.type, getattr(block, "id", ""), getattr(block, "name", ""), input=getattr(block, "input", None)
            )
            if block.type == "text" and getattr(block, "text", ""):
                yield TextDelta(block.text)
        elif kind == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta" and delta.text:
                yield TextDelta(delta.text)
            elif delta.type == "input_json_delta" and event.index in self.blocks:
                self.blocks[event.index].partial_json += delta.partial_json or ""
        elif kind == "content_block_stop":
            block = self.blocks.get(event.index)
            if block is not None and block.kind == "tool_use":
                arguments = _arguments(block)
                if arguments is None:
                    yield Failed("provider_error", f"{_NAME} sent a tool call whose arguments are not a JSON object")
                    return
                yield ToolCall(block.id, block.name, arguments)
        elif kind == "message_delta":
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            if event.usage is not None:
                self.output_tokens = event.usage.output_tokens or self.output_tokens
            if self.stop_reason == "refusal":
                yield Failed("refused", "the model declined to answer this question")
        elif kind == "message_stop":
            if self.stop_reason in _CUT_SHORT:
                yield Failed("provider_error", f"{_NAME} {_CUT_SHORT[self.stop_reason]} ({self.stop_reason})")
                return
            yield Finished(self.model, self.input_tokens, self.output_tokens)


def _arguments(block: _Block) -> dict[str, Any] | None:
    if not block.partial_json.strip():
        return block.input if isinstance(block.input, dict) else {}
    try:
        value = json.loads(block.partial_json)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _messages(turns: tuple[Turn, ...]) -> list[dict[str, Any]]:
    """The conversation in messages form: an assistant turn is `text` + `tool_use` blocks, and the
    tool results that answer it go back together in ONE user message of `tool_result` blocks (they
    hold log text, untrusted data, and stay tool results).

    The Messages API refuses a text block of whitespace only ("text content blocks must contain
    non-whitespace text", 400): a model may stream "\n\n" before a tool call, and an answer that
    failed early may be stored as just that. Such a block is left out, an assistant turn left with
    nothing goes too, and the user turns it separated become one message, so roles still
    alternate."""
    messages: list[dict[str, Any]] = []

    def to_user(block: dict[str, Any]) -> None:
        last = messages[-1] if messages else None
        if last is None or last["role"] != "user":
            messages.append({"role": "user", "content": [block]})
        elif isinstance(last["content"], str):
            last["content"] = [{"type": "text", "text": last["content"]}, block]
        else:
            last["content"].append(block)

    for turn in turns:
        if isinstance(turn, UserTurn):
            if messages and messages[-1]["role"] == "user":
                to_user({"type": "text", "text": turn.text})
            else:
                messages.append({"role": "user", "content": turn.text})
        elif isinstance(turn, AssistantTurn):
            content: list[dict[str, Any]] = []
            if turn.text.strip():
                content.append({"type": "text", "text": turn.text})
            content.extend(
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in turn.tool_calls
            )
            if content:
                messages.append({"role": "assistant", "content": content})
        elif isinstance(turn, ToolResultTurn):
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": turn.call_id, "content": turn.content}
            if turn.is_error:
                result["is_error"] = True
            to_user(result)
    return messages


def _error_type(body: object) -> str:
    """The vendor's error type, when it is a short identifier (never its message)."""
    error = body.get("error", body) if isinstance(body, dict) else None
    value = error.get("type") if isinstance(error, dict) else None
    return value if isinstance(value, str) and _IDENTIFIER.match(value) else ""


def _failure(exc: anthropic.APIError) -> Failed:
    if isinstance(exc, anthropic.APITimeoutError | anthropic.APIConnectionError):
        return transport_failure(_NAME, timed_out=isinstance(exc, anthropic.APITimeoutError))
    kind = _error_type(exc.body)
    if isinstance(exc, anthropic.APIStatusError) and exc.status_code >= 400:  # an error event mid-stream has 200
        return status_failure(_NAME, exc.status_code, kind)
    # An `error` event inside a stream that began with HTTP 200.
    if kind in ("authentication_error", "permission_error"):
        return Failed("key_invalid", f"{_NAME} refused the API key ({kind})", key_refused=True)
    if kind in _UNAVAILABLE_TYPES:
        return Failed("provider_unavailable", f"{_NAME} failed during the answer ({kind})")
    return Failed("provider_error", f"{_NAME} failed during the answer{f' ({kind})' if kind else ''}")


async def check_key(*, api_key: str, base_url: str, timeout_seconds: float) -> KeyCheck:
    """Whether Anthropic accepts `api_key`: list the models (costs nothing)."""
    client = anthropic.AsyncAnthropic(api_key=api_key, base_url=base_url, timeout=timeout_seconds, max_retries=0)
    try:
        await client.models.list()
    except anthropic.APIError as exc:
        status = exc.status_code if isinstance(exc, anthropic.APIStatusError) else None
        return key_verdict(_NAME, status, timed_out=isinstance(exc, anthropic.APITimeoutError))
    finally:
        await client.close()
    return KeyCheck("ok")
