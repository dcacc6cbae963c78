"""Read-only tools an answer may call: each reads the store or insights through the same
functions as the Logs API and the pages, and says which pages its result rests on.

A tool's result is data for a model: log text inside it is untrusted (it may hold text written
to look like instructions), which the system prompt says and the providers keep in tool-result
turns. No tool writes anything; a fix is only ever suggested (an action), never run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from forwarder.api.context import ApiContext, DatabaseView
from forwarder.ask.events import ActionValue, Source
from forwarder.ask.providers.base import ToolSpec


class ToolFailed(Exception):
    """The tool could not answer (an unknown database, say); the message goes to the model."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may read: the daemon's state, for one organization, within the conversation's
    database (`database`, a name or id, when the conversation has one)."""

    api: ApiContext
    org: str
    database: str | None

    def find_database(self, ref: str | None) -> DatabaseView:
        """The database `ref` names, else the conversation's; ToolFailed when neither is known."""
        ref = ref or self.database
        if not ref:
            raise ToolFailed("name a database: call list_databases to see them")
        db = self.api.databases.find(ref)
        if db is None:
            raise ToolFailed(f"no database {ref!r}: call list_databases to see them")
        return db


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """A tool's result: JSON-able `data` for the model, the pages it rests on, suggested actions."""

    data: Any
    sources: tuple[Source, ...] = ()
    actions: tuple[ActionValue, ...] = ()


Runner = Callable[[ToolContext, dict[str, Any]], Awaitable[ToolOutcome]]


@dataclass(frozen=True, slots=True)
class Tool:
    spec: ToolSpec
    label: Callable[[dict[str, Any]], str]  # the step's label in the stream, from the arguments
    run: Runner


TOOLS: dict[str, Tool] = {}


def tool(
    name: str, description: str, parameters: dict[str, Any], label: Callable[[dict[str, Any]], str]
) -> Callable[[Runner], Runner]:
    """Register `run` as the tool `name`; `parameters` is the JSON schema of its arguments."""

    def register(run: Runner) -> Runner:
        TOOLS[name] = Tool(ToolSpec(name, description, parameters), label, run)
        return run

    return register


def specs() -> tuple[ToolSpec, ...]:
    return tuple(t.spec for t in TOOLS.values())


_NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


@tool("list_databases", "The monitored databases: id, name, host.", _NO_ARGS, lambda _: "Listing databases")
async def list_databases(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    dbs = [
        {"id": d.config.id, "name": d.config.name, "host": d.config.host, "href": f"/ui/databases/{d.config.id}"}
        for d in ctx.api.databases.all()
    ]
    return ToolOutcome(dbs, tuple(Source(f"Database {d['name']}", str(d["href"])) for d in dbs))
