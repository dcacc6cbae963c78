"""The Ask stream's events as values, and their server-sent-event form.

Grammar of one answer (a test walks every path of the engine against it):

    start  (tool(running) tool(done|error))*  text*  source*  action*  (done | error)

with `tool`, `text` and `source` interleaved as the answer goes; `start` is always first, sent
before any model call, and exactly one `done` or `error` is last. The SSE event name equals
`type`; the data is one JSON object carrying `type` and the event's own field.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Literal

import orjson

ToolStatus = Literal["running", "done", "error"]


@dataclass(frozen=True, slots=True)
class Start:
    type: ClassVar[str] = "start"
    conversation_id: str
    message_id: str  # of the answer

    def data(self) -> dict[str, Any]:
        return {"conversation_id": self.conversation_id, "message_id": self.message_id}


@dataclass(frozen=True, slots=True)
class ToolStep:
    type: ClassVar[str] = "tool"
    id: str
    name: str
    label: str
    status: ToolStatus

    def data(self) -> dict[str, Any]:
        return {"tool": {"id": self.id, "name": self.name, "label": self.label, "status": self.status}}


@dataclass(frozen=True, slots=True)
class Text:
    type: ClassVar[str] = "text"
    text: str

    def data(self) -> dict[str, Any]:
        return {"text": self.text}


@dataclass(frozen=True, slots=True)
class Source:
    """Data the answer rests on; `href` is a path of this daemon's pages (never an outside URL)."""

    type: ClassVar[str] = "source"
    label: str
    href: str

    def data(self) -> dict[str, Any]:
        return {"source": {"label": self.label, "href": self.href}}


@dataclass(frozen=True, slots=True)
class FixAction:
    """A suggested fix of a finding; it runs only through POST /v1/databases/{ref}/fixes."""

    kind: ClassVar[str] = "fix"
    database: str
    finding_id: str
    fix_id: str
    label: str
    href: str  # the finding's page, where the fix can be reviewed and applied

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **asdict(self)}


@dataclass(frozen=True, slots=True)
class LinkAction:
    kind: ClassVar[str] = "link"
    href: str
    label: str

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **asdict(self)}


ActionValue = FixAction | LinkAction


@dataclass(frozen=True, slots=True)
class Action:
    type: ClassVar[str] = "action"
    action: ActionValue

    def data(self) -> dict[str, Any]:
        return {"action": self.action.as_dict()}


@dataclass(frozen=True, slots=True)
class Done:
    """`remaining`: built-in questions left this month, -1 when the organization's own key answered."""

    type: ClassVar[str] = "done"
    model: str
    remaining: int

    def data(self) -> dict[str, Any]:
        return {"done": {"model": self.model, "remaining": self.remaining}}


ErrorCode = Literal[
    "key_invalid",  # the provider refused the stored key; it is marked unusable
    "provider_unavailable",  # network failure, timeout or 5xx of the provider
    "provider_error",  # the provider answered with something else unusable
    "refused",  # the model refused to answer
    "timeout",  # the answer took longer than allowed
    "too_many_steps",  # the model kept calling tools
    "internal",  # a defect of ours; the daemon's log has the details
]


@dataclass(frozen=True, slots=True)
class Error:
    type: ClassVar[str] = "error"
    code: str
    message: str

    def data(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message}}


Event = Start | ToolStep | Text | Source | Action | Done | Error
FINAL_TYPES = frozenset({"done", "error"})


def as_json(event: Event) -> dict[str, Any]:
    """The event's data object (with `type`)."""
    return {"type": event.type, **event.data()}


def sse(event: Event) -> bytes:
    """One server-sent event: `event: <type>` and one `data:` line (JSON has no raw newline)."""
    return b"event: " + event.type.encode() + b"\ndata: " + orjson.dumps(as_json(event)) + b"\n\n"


KEEPALIVE = b": keep-alive\n\n"  # a comment line: clients ignore it, proxies see traffic
