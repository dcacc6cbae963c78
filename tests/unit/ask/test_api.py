"""The Ask API end to end in an in-process daemon: refusals, the stream's grammar, conversations,
organizations, feedback, audit. Answers come from a scripted provider (the SDK adapters have
their own contract tests against fake vendor servers)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from forwarder.ask.providers.base import Delta, Finished, ModelRequest, TextDelta, ToolCall, ToolResultTurn
from forwarder.config import AskConfig
from tests.unit.api.conftest import Api


class Scripted:
    """A provider that plays one script per model turn and records what it was given."""

    def __init__(self, turns: list[list[Delta]], *, stall: asyncio.Event | None = None) -> None:
        self.turns = list(turns)
        self.requests: list[ModelRequest] = []
        self.stall = stall
        self.cancelled = asyncio.Event()
        self.closed = False

    async def stream(self, request: ModelRequest) -> AsyncIterator[Delta]:
        self.requests.append(request)
        script = self.turns.pop(0) if self.turns else [TextDelta("ok"), Finished("scripted")]
        try:
            for delta in script:
                yield delta
            if self.stall is not None:
                await self.stall.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise

    async def aclose(self) -> None:
        self.closed = True


def use(api: Api, provider: Scripted) -> None:
    ask = api.daemon._ctx.ask  # type: ignore[union-attr]
    assert ask is not None
    ask.builtin_provider = lambda config: (provider, "fast-model", "deep-model")


async def events_of(
    api: Api, body: dict[str, Any], key: str | None = None
) -> tuple[int, list[tuple[str, dict[str, Any]]], Any]:
    """POST /v1/ask: (status, [(event name, data)], headers) for a stream, or the JSON error as the second item."""
    async with api.session.post(api.url("/v1/ask"), json=body, headers=api.auth(key or api.read_write)) as resp:
        raw = await resp.read()
        if resp.content_type != "text/event-stream":
            return resp.status, orjson.loads(raw), resp.headers
        out = []
        for block in raw.decode().split("\n\n"):
            lines = [x for x in block.split("\n") if x and not x.startswith(":")]
            if not lines:
                continue
            name = lines[0].removeprefix("event: ")
            data = orjson.loads(lines[1].removeprefix("data: "))
            assert data["type"] == name
            out.append((name, data))
        return resp.status, out, resp.headers


async def enable(api: Api, key: str | None = None) -> None:
    async with api.session.put(
        api.url("/v1/ask/settings"), json={"enabled": True}, headers=api.auth(key or api.read_write)
    ) as resp:
        assert resp.status == 200, await resp.text()


def grammar_ok(events: list[tuple[str, dict[str, Any]]]) -> None:
    names = [n for n, _ in events]
    assert names[0] == "start" and names[-1] in ("done", "error")
    assert sum(n in ("done", "error") for n in names) == 1
    running: dict[str, str] = {}
    for n, d in events:
        if n == "tool":
            t = d["tool"]
            if t["status"] == "running":
                assert t["id"] not in running
                running[t["id"]] = "running"
            else:
                assert running.get(t["id"]) == "running" and t["status"] in ("done", "error")
                running[t["id"]] = t["status"]
    assert all(v != "running" for v in running.values())


async def test_a_question_streams_tools_text_sources_and_done(api: Api) -> None:
    provider = Scripted(
        [
            [TextDelta("Let me look. "), ToolCall("c1", "list_databases", {}), Finished("m1")],
            [TextDelta("There are **two**"), TextDelta(" databases."), Finished("m1")],
        ]
    )
    use(api, provider)
    await enable(api)
    status, events, headers = await events_of(api, {"question": "which databases?"})
    assert status == 200 and headers["Cache-Control"].startswith("no-cache") and headers["X-Accel-Buffering"] == "no"
    grammar_ok(events)
    names = [n for n, _ in events]
    assert names[:3] == ["start", "text", "tool"]
    assert [d["tool"]["status"] for n, d in events if n == "tool"] == ["running", "done"]
    assert "".join(d["text"] for n, d in events if n == "text") == "Let me look. There are **two** databases."
    assert {d["source"]["href"] for n, d in events if n == "source"} == {"/ui/databases/main", "/ui/databases/other"}
    assert events[-1][1]["done"] == {"model": "m1", "remaining": 99}
    # the tool's result went back to the model as a tool result
    results = [t for t in provider.requests[1].turns if isinstance(t, ToolResultTurn)]
    assert results and "Main DB" in results[0].content
    conv_id = events[0][1]["conversation_id"]
    async with api.session.get(api.url(f"/v1/ask/conversations/{conv_id}"), headers=api.auth(api.read_only)) as resp:
        conv = await resp.json()
    assert [m["role"] for m in conv["messages"]] == ["user", "assistant"]
    answer = conv["messages"][1]
    assert answer["id"] == events[0][1]["message_id"] and answer["status"] == "complete"
    assert answer["text"].endswith("databases.") and len(answer["sources"]) == 2


async def test_refusals_come_in_order_and_count_nothing(api: Api) -> None:
    use(api, Scripted([]))
    status, body, _ = await events_of(api, {"question": "hi"})
    assert (status, body["error"]["code"]) == (403, "not_enabled")
    status, body, _ = await events_of(api, {"question": "hi"}, key=api.read_only)
    assert status == 403
    await enable(api)
    for bad, field in [
        ({"question": ""}, "question"),
        ({"question": "x" * 2001}, "question"),
        ({"question": "x", "about": {"kind": "finding", "id": "ab"}}, "about.database"),
        ({"question": "x", "about": {"kind": "nope", "id": "ab"}}, "about.kind"),
        ({"question": "x", "deep": "yes"}, "deep"),
    ]:
        status, body, _ = await events_of(api, bad)
        assert status == 400 and body["error"]["field"] == field, body
    status, body, _ = await events_of(api, {"question": "x", "conversation_id": "conv_nope"})
    assert (status, body["error"]["code"]) == (404, "not_found")
    status, body, _ = await events_of(api, {"question": "x", "about": {"kind": "alert", "id": "00000000000000aa"}})
    assert status == 404
    async with api.session.get(api.url("/v1/ask/settings"), headers=api.auth(api.read_only)) as resp:
        assert (await resp.json())["usage"]["builtin_used"] == 0


@pytest.fixture
def api_overrides() -> dict[str, Any]:
    return {"insights": {"enabled": False}, "ask": {"builtin_monthly_questions": 100}}


async def test_the_rate_limit_is_exact(api: Api) -> None:
    use(api, Scripted([]))
    await enable(api)
    for _ in range(10):
        status, events, _ = await events_of(api, {"question": "q"})
        assert status == 200 and events[-1][0] == "done"
    status, body, headers = await events_of(api, {"question": "q"})
    assert (status, body["error"]["code"]) == (429, "rate_limited") and int(headers["Retry-After"]) >= 1
    api.clock.advance(60)
    status, _, _ = await events_of(api, {"question": "q"})
    assert status == 200


async def test_the_fourth_concurrent_question_is_refused_while_three_stream(api: Api) -> None:
    stall = asyncio.Event()
    ask = api.daemon._ctx.ask  # type: ignore[union-attr]
    assert ask is not None
    providers: list[Scripted] = []

    def make(config: AskConfig) -> tuple[Scripted, str, str]:
        p = Scripted([[TextDelta("thinking")]], stall=stall)
        providers.append(p)
        return p, "m", "m"

    ask.builtin_provider = make  # type: ignore[assignment]
    await enable(api)
    streams = []
    for _ in range(3):
        resp = await api.session.post(api.url("/v1/ask"), json={"question": "q"}, headers=api.auth(api.read_write))
        assert resp.status == 200
        await resp.content.readuntil(b"\n\n")  # start
        streams.append(resp)
    status, body, _ = await events_of(api, {"question": "q"})
    assert (status, body["error"]["code"]) == (429, "rate_limited")
    # a client that goes away cancels its model call within a second, and frees its place
    streams[0].close()
    await asyncio.wait_for(providers[0].cancelled.wait(), 1.0)
    while ask.limiter.running("default") != 2:
        await asyncio.sleep(0.01)  # the answer's clean-up runs right after the cancel
    first = await conversation_of(api, providers, streams)
    assert first["messages"][1]["status"] == "partial" and first["messages"][1]["text"] == "thinking"
    stall.set()
    for r in streams[1:]:
        await r.read()
        r.close()
    status, events, _ = await events_of(api, {"question": "q"})
    assert status == 200 and events[0][0] == "start"
    grammar_ok(events)  # this script stops without finishing: an error event ends it


async def conversation_of(api: Api, providers: list[Scripted], streams: list[Any]) -> dict[str, Any]:
    async with api.session.get(api.url("/v1/ask/conversations"), headers=api.auth(api.read_only)) as resp:
        convs = (await resp.json())["conversations"]
    oldest = convs[-1]["id"]
    async with api.session.get(api.url(f"/v1/ask/conversations/{oldest}"), headers=api.auth(api.read_only)) as resp:
        data: dict[str, Any] = await resp.json()
        return data
