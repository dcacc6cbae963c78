"""Contract tests: questions asked through `POST /v1/ask` of an in-process daemon whose model is a
fake vendor server on loopback, reached through the real SDK adapters.

For each source (an own OpenAI, OpenRouter or Anthropic key, set through `PUT /v1/ask/key` and
checked with the fake; and the operator's OpenAI-compatible server of `[ask.builtin]`), every
path keeps the stream's grammar: `start` first, `tool` running then done|error, exactly one `done`
or `error` last. The key never shows in a response, a log record or the metrics.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.model_providers import (
    SECRET_KEY,
    VENDORS,
    FakeAnthropic,
    FakeOpenAI,
    KeepAlive,
    Refusal,
    Status,
    Text,
    Tool,
    Vendor,
    fake_for,
    running,
)
from tests.unit.api.conftest import Api
from tests.unit.ask.test_api import enable, events_of, grammar_ok

Events = list[tuple[str, dict[str, Any]]]


@pytest.fixture(params=VENDORS)
def vendor(request: pytest.FixtureRequest) -> Vendor:
    vendor: Vendor = request.param
    return vendor


@pytest.fixture
async def fake(vendor: Vendor) -> AsyncIterator[FakeOpenAI | FakeAnthropic]:
    async with running(fake_for(vendor)) as fake:
        assert isinstance(fake, FakeOpenAI | FakeAnthropic)
        yield fake
    assert fake.errors == []  # every request the adapters sent had the vendor's documented shape


@pytest.fixture
def api_overrides(vendor: Vendor, fake: FakeOpenAI | FakeAnthropic, tmp_path: Path) -> dict[str, Any]:
    """The daemon's config: the vendor's base URL is the fake's (only the config file can say so)."""
    if vendor == "builtin":
        key_file = tmp_path / "model-server.key"
        key_file.write_text(SECRET_KEY + "\n")
        ask: dict[str, Any] = {
            "builtin": {"base_url": fake.base_url, "fast_model": "fake-model", "api_key_file": str(key_file)}
        }
    else:
        ask = {"provider_urls": {vendor: fake.base_url}}
    return {"insights": {"enabled": False}, "ask": ask}


async def ready(api: Api, vendor: Vendor) -> None:
    """Ask turned on and, for a vendor of own keys, the key stored (checked with the fake)."""
    await enable(api)
    if vendor != "builtin":
        body = {"provider": vendor, "api_key": SECRET_KEY, "fast_model": "fake-model"}
        async with api.session.put(api.url("/v1/ask/key"), json=body, headers=api.auth(api.read_write)) as resp:
            assert resp.status == 200, await resp.text()
            assert SECRET_KEY not in await resp.text()


def remaining(vendor: Vendor) -> int:
    return 99 if vendor == "builtin" else -1  # of the default 100 built-in questions a month


def names(events: Events) -> list[str]:
    return [name for name, _ in events]


async def test_a_text_answer_streams_its_pieces_then_done(api: Api, vendor: Vendor, fake: FakeOpenAI) -> None:
    await ready(api, vendor)
    fake.turns.append([Text("Autovacuum "), KeepAlive(), Text("keeps up.")])

    status, events, _ = await events_of(api, {"question": "Is autovacuum keeping up?"})

    assert status == 200
    grammar_ok(events)
    assert names(events) == ["start", "text", "text", "done"]
    assert "".join(d["text"] for n, d in events if n == "text") == "Autovacuum keeps up."
    assert events[-1][1]["done"] == {"model": "fake-model", "remaining": remaining(vendor)}
    assert fake.requests[0]["model"] == "fake-model"


async def test_tool_calls_run_and_their_results_go_back_to_the_model(
    api: Api, vendor: Vendor, fake: FakeOpenAI | FakeAnthropic
) -> None:
    await ready(api, vendor)
    fake.turns += [
        [Text("Let me look. "), Tool("call_1", "list_databases", {}, pieces=2)],
        [Text("There are **two** databases.")],
    ]

    status, events, _ = await events_of(api, {"question": "Which databases are there?"})

    assert status == 200
    grammar_ok(events)
    assert [d["tool"]["status"] for n, d in events if n == "tool"] == ["running", "done"]
    assert {d["source"]["href"] for n, d in events if n == "source"} == {"/ui/databases/main", "/ui/databases/other"}
    assert names(events)[-1] == "done"
    second = fake.requests[1]["messages"]
    if vendor == "anthropic":
        result = second[-1]["content"][0]
        assert (result["type"], result["tool_use_id"]) == ("tool_result", "call_1")
    else:
        result = second[-1]
        assert (result["role"], result["tool_call_id"]) == ("tool", "call_1")
    assert "Main DB" in result["content"]


async def test_a_refusal_mid_stream_ends_with_an_error_event(api: Api, vendor: Vendor, fake: FakeOpenAI) -> None:
    await ready(api, vendor)
    fake.turns.append([Text("Well, "), Refusal()])

    _, events, _ = await events_of(api, {"question": "Write me a poem instead"})

    grammar_ok(events)
    assert events[-1][0] == "error" and events[-1][1]["error"]["code"] == "refused"


async def test_a_server_error_ends_with_provider_unavailable(api: Api, vendor: Vendor, fake: FakeOpenAI) -> None:
    await ready(api, vendor)
    fake.turns.append(Status(500))

    _, events, _ = await events_of(api, {"question": "What happened at 14:05?"})

    grammar_ok(events)
    assert names(events) == ["start", "error"]
    assert events[-1][1]["error"]["code"] == "provider_unavailable"


async def test_a_refused_key_ends_the_answer_and_the_next_question_gets_key_invalid(
    api: Api, vendor: Vendor, fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await ready(api, vendor)
    fake.turns += [Status(401), [Text("fine again")]]

    _, first, _ = await events_of(api, {"question": "Why did connections fail?"})
    status, second, _ = await events_of(api, {"question": "And now?"})

    grammar_ok(first)
    assert names(first) == ["start", "error"] and first[-1][1]["error"]["code"] == "key_invalid"
    if vendor == "builtin":  # the operator's server: nothing of the organization's is marked
        assert status == 200 and names(second)[-1] == "done"  # type: ignore[arg-type]
    else:
        assert (status, second["error"]["code"]) == (409, "key_invalid")  # type: ignore[call-overload]
        async with api.session.get(api.url("/v1/ask/settings"), headers=api.auth(api.read_only)) as resp:
            settings = await resp.json()
        assert settings["key_usable"] is False
    # Scan what a user or an operator can see for the key.
    async with api.session.get(api.url("/metrics")) as resp:
        metrics = await resp.text()
    async with api.session.get(api.url("/v1/audit"), headers=api.auth(api.read_write)) as resp:
        audit = await resp.text()
    seen = [repr(first), repr(second), metrics, audit] + [
        f"{r.msg} {r.args} {r.getMessage()} {getattr(r, '__dict__', '')}" for r in caplog.records
    ]
    assert caplog.records  # the scan looked at the log
    assert [text for text in seen if SECRET_KEY in text] == []


@pytest.mark.parametrize("vendor", ["openai", "openrouter", "anthropic"])
async def test_a_key_is_checked_with_the_provider_before_it_is_stored(
    api: Api, vendor: Vendor, fake: FakeOpenAI
) -> None:
    await enable(api)
    put = {"provider": vendor, "api_key": "sk-wrong-key", "fast_model": "", "deep_model": ""}

    async with api.session.put(api.url("/v1/ask/key"), json=put, headers=api.auth(api.read_write)) as resp:
        refused = (resp.status, (await resp.json())["error"]["code"])
    await fake.close()
    put["api_key"] = SECRET_KEY
    async with api.session.put(api.url("/v1/ask/key"), json=put, headers=api.auth(api.read_write)) as resp:
        unreachable = (resp.status, (await resp.json())["error"]["code"])
        assert SECRET_KEY not in await resp.text()
    async with api.session.get(api.url("/v1/ask/settings"), headers=api.auth(api.read_only)) as resp:
        settings = await resp.json()

    assert refused == (422, "key_refused")
    assert unreachable == (502, "provider_unreachable")
    assert settings["provider"] is None  # nothing was stored
