"""The seam between the engine and a source of answers (a vendor SDK, the operator's server,
the built-in analyst).

A provider never sees the store and the engine never sees vendor JSON: a model turn is a
`ModelRequest` in and an async stream of `Delta`s out, ending in exactly one `Finished` or
`Failed`. Tool calls of a turn come out whole (`ToolCall` with parsed arguments), however the
vendor split them across events.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

ProviderName = Literal["openai", "anthropic", "openrouter"]
PROVIDERS: tuple[ProviderName, ...] = ("openai", "anthropic", "openrouter")
AboutKind = Literal["finding", "alert", "query", "database"]


# --- what a model turn produces ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextDelta:
    """The next piece of the answer's Markdown."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call of one tool; `id` is the vendor's (or the analyst's) and pairs it with its result."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Finished:
    """The turn ended normally; `model` is the model that answered, as the vendor names it."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0


FailureCode = Literal["key_invalid", "provider_unavailable", "provider_error", "refused", "timeout"]


@dataclass(frozen=True, slots=True)
class Failed:
    """The turn failed. `key_refused` says the provider refused the key itself (HTTP 401/403):
    the stored key is then marked unusable. `message` is for people and never holds the key."""

    code: FailureCode
    message: str
    key_refused: bool = False


Delta = TextDelta | ToolCall | Finished | Failed


# --- what a model turn is given ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UserTurn:
    text: str


@dataclass(frozen=True, slots=True)
class AssistantTurn:
    """What the model said in an earlier turn: text and the tools it called."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolResultTurn:
    """A tool's answer to `call_id`: JSON text. It holds log text, which is untrusted data."""

    call_id: str
    name: str
    content: str
    is_error: bool = False


Turn = UserTurn | AssistantTurn | ToolResultTurn


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as a model sees it: a name, what it does, a JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class About:
    """What the question is about (a finding, an alert, a query, a database)."""

    kind: AboutKind
    id: str
    database: str | None = None


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One model turn: the instructions, the conversation so far (ending with the new question
    and any tool results of this answer), the tools it may call and the model to use.

    `question`, `about` and `database` repeat what the turns say, for the built-in analyst,
    which plans from them instead of reading prose.
    """

    system: str
    turns: tuple[Turn, ...]
    tools: tuple[ToolSpec, ...]
    model: str
    question: str
    database: str | None = None
    about: About | None = None
    deep: bool = False
    max_output_tokens: int = 2048
    extra: dict[str, Any] = field(default_factory=dict)


class Provider(Protocol):
    """A source of answers. `stream` is one model turn; it must end in one Finished or Failed and
    must stop promptly when cancelled (closing its HTTP stream)."""

    def stream(self, request: ModelRequest) -> AsyncIterator[Delta]: ...

    async def aclose(self) -> None: ...


# --- checking a key before it is stored -------------------------------------------------------

KeyVerdict = Literal["ok", "refused", "unreachable"]


@dataclass(frozen=True, slots=True)
class KeyCheck:
    """The provider's verdict on a key: accepted, refused (401/403), or not reachable (network,
    timeout, 5xx). `message` names the cause for people, never the key."""

    verdict: KeyVerdict
    message: str = ""


# --- what an HTTP outcome means, the same for every vendor -------------------------------------
# The adapters map their SDK's exceptions to these; messages are built here from the status and
# the error's type only, never from a vendor's text (which may repeat the key).

log = logging.getLogger(__name__)


def status_failure(name: str, status: int, detail: str = "") -> Failed:
    """A turn answered with HTTP `status` (>= 400): the key refused (401/403: it is marked
    unusable), the provider unavailable (429, 5xx), or the request rejected."""
    shown = f"HTTP {status}{f': {detail}' if detail else ''}"
    if status in (401, 403):
        return Failed("key_invalid", f"{name} refused the API key ({shown})", key_refused=True)
    if status == 429 or status >= 500:
        return Failed("provider_unavailable", f"{name} is unavailable ({shown})")
    return Failed("provider_error", f"{name} rejected the request ({shown})")


def transport_failure(name: str, *, timed_out: bool) -> Failed:
    """No HTTP answer: the connection failed or the provider went silent."""
    if timed_out:
        return Failed("provider_unavailable", f"{name} did not answer in time")
    return Failed("provider_unavailable", f"could not connect to {name}")


def unwrapped_failure(exc: Exception, name: str) -> Failed:
    """An error of the SDK's HTTP client that the SDK did not wrap (its read timeout while a
    stream is read): a provider that went silent or away. Only the error's type is logged."""
    log.warning("the stream from %s failed: %s", name, type(exc).__name__)
    return transport_failure(name, timed_out="Timeout" in type(exc).__name__)


def key_verdict(name: str, status: int | None, *, timed_out: bool = False) -> KeyCheck:
    """The verdict of a key check answered with HTTP `status` (None: no answer at all)."""
    if status is None:
        return KeyCheck("unreachable", transport_failure(name, timed_out=timed_out).message)
    if status in (401, 403):
        return KeyCheck("refused", f"{name} refused the API key (HTTP {status})")
    if status == 429 or status >= 500:
        return KeyCheck("unreachable", f"{name} is unavailable (HTTP {status})")
    return KeyCheck("unreachable", f"{name} answered the key check with HTTP {status}")
