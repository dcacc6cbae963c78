"""The Ask commands of the CLI against the in-process daemon: a streamed answer as a terminal shows
it, refusals and error events, settings, the own key (never from argv), conversations, audit, and
`keys create --org`."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest

from forwarder import cli
from forwarder.ask import tools as T
from forwarder.ask.events import FixAction, LinkAction
from forwarder.ask.providers.base import Finished, KeyCheck, TextDelta, ToolCall, ToolSpec
from forwarder.client_ask import sse_events
from tests.unit.api.conftest import Api
from tests.unit.ask.test_api import Scripted, enable, use

HOSTILE = "\x1b]0;pwned\x07\x1b[2J"
SECRET = "sk-ant-never-in-argv-0123456789"


@pytest.fixture
def api_overrides() -> dict[str, Any]:
    return {"insights": {"enabled": False}, "ask": {"builtin_monthly_questions": 5}}


async def run(api: Api, *argv: str, key: str | None = None) -> int:
    """`forwarder ARGV --url … --key …` in a thread, as a user runs it (the daemon keeps serving)."""
    args = [*argv, "--url", api.base, "--key", key or api.read_write]
    code: int = await asyncio.to_thread(cli.main, args)
    return code


async def suggest_a_fix(ctx: T.ToolContext, args: dict[str, Any]) -> T.ToolOutcome:
    return T.ToolOutcome(
        {"finding": "deadlocks"},
        actions=(
            FixAction("main", "00000000000000f1", "deadlock_timeout", f"Raise deadlock_timeout{HOSTILE}", "/ui/f/1"),
            LinkAction("/ui/databases/main/logs?kind=errors", "The errors"),
        ),
    )


async def test_an_answer_streams_with_steps_text_sources_actions_and_what_is_left(
    api: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(
        T.TOOLS,
        "suggest_fix",
        T.Tool(ToolSpec("suggest_fix", "test", {"type": "object"}), lambda _: "Reading\nthe finding", suggest_a_fix),
    )
    use(
        api,
        Scripted(
            [
                [ToolCall("c1", "list_databases", {}), ToolCall("c2", "suggest_fix", {}), Finished("m1")],
                [TextDelta("Two **databases**"), TextDelta(f" and a deadlock {HOSTILE}.\n"), Finished("m1")],
            ]
        ),
    )
    await enable(api)
    assert await run(api, "ask", "why the deadlocks?", "--database", "main") == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\\x1b]0;pwned\\x07" in out
    lines = out.splitlines()
    assert lines[:2] == ["… Listing databases ✓", "… Reading\\nthe finding ✓"]
    assert "Two **databases** and a deadlock" in lines[2]
    assert f"  Database Main DB: {api.base}/ui/databases/main" in lines
    assert f"  link: The errors: {api.base}/ui/databases/main/logs?kind=errors" in lines
    fix = lines.index("  fix: Raise deadlock_timeout\\x1b]0;pwned\\x07\\x1b[2J")
    body = '{"finding_id": "00000000000000f1", "fix_id": "deadlock_timeout"}'
    assert lines[fix + 1] == "    database main, finding 00000000000000f1, fix deadlock_timeout"
    assert lines[fix + 2] == f"    apply: POST {api.base}/v1/databases/main/fixes {body}"
    assert f"-d '{body}' {api.base}/v1/databases/main/fixes" in lines[fix + 3]
    assert lines[-1] == "(m1, 4 built-in questions left)"


async def test_json_prints_each_event_as_a_line(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    use(api, Scripted([[TextDelta("hello"), Finished("m1")]]))
    await enable(api)
    assert await run(api, "ask", "hi", "--json") == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["type"] for e in events] == ["start", "text", "done"]
    assert events[1]["text"] == "hello" and events[2]["done"] == {"model": "m1", "remaining": 4}


async def test_a_conversation_continues(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    provider = Scripted([[TextDelta("first"), Finished("m1")], [TextDelta("second"), Finished("m1")]])
    use(api, provider)
    await enable(api)
    assert await run(api, "ask", "one", "--json") == 0
    conv = json.loads(capsys.readouterr().out.splitlines()[0])["conversation_id"]
    assert await run(api, "ask", "two", "--conversation", conv) == 0
    assert "second" in capsys.readouterr().out
    assert await run(api, "conversations", "list") == 0
    [listed] = capsys.readouterr().out.splitlines()
    assert listed.startswith(conv) and "4 messages" in listed and listed.endswith("one")


async def test_refusals_and_error_events_go_to_stderr_with_exit_1(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    use(api, Scripted([[TextDelta("half an answer")]]))  # ends without finishing: an error event
    assert await run(api, "ask", "hi") == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("forwarder ask: 403 not_enabled: ")
    await enable(api)
    assert await run(api, "ask", "hi") == 1
    out, err = capsys.readouterr()
    assert out == "half an answer\n" and err.startswith("forwarder ask: provider_error: ")
    assert await run(api, "ask", "hi", key=api.read_only) == 1
    assert "403 forbidden" in capsys.readouterr().err


async def test_usage_mistakes_exit_2_before_asking(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    assert await run(api, "ask", "hi", "--about", "finding:00000000000000f1") == 2
    assert "--about finding:ID needs --database" in capsys.readouterr().err
    assert await run(api, "ask", "hi", "--about", "table:x") == 2
    assert "KIND:ID" in capsys.readouterr().err


async def test_settings_on_off_and_the_own_key_from_the_environment_only(
    api: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ask = api.daemon._ctx.ask  # type: ignore[union-attr]
    assert ask is not None
    given: list[tuple[str, str]] = []

    async def ok(provider: str, api_key: str, *a: object) -> KeyCheck:
        given.append((provider, api_key))
        return KeyCheck("ok")

    ask.check_key = ok  # type: ignore[assignment]
    assert await run(api, "ask-settings", "--enable") == 0
    out = capsys.readouterr().out
    assert "Ask:          on" in out and "0 of 5 built-in questions used, 5 left" in out
    with pytest.raises(SystemExit):  # there is no option that takes the key
        cli.build_parser().parse_args(["ask-key", "set", "--provider", "anthropic", "--api-key", SECRET])
    capsys.readouterr()
    monkeypatch.setenv("FORWARDER_ASK_KEY", SECRET)
    assert await run(api, "ask-key", "set", "--provider", "anthropic", "--deep-model", "claude-opus-4-1") == 0
    out = capsys.readouterr().out
    assert given == [("anthropic", SECRET)] and SECRET not in out
    assert "own key:      anthropic (usable)" in out and "deep claude-opus-4-1" in out
    monkeypatch.delenv("FORWARDER_ASK_KEY")
    monkeypatch.setattr("sys.stdin", io.StringIO(SECRET + "2\n"))
    assert await run(api, "ask-key", "set", "--provider", "openai") == 0
    assert given[-1] == ("openai", SECRET + "2")
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert await run(api, "ask-key", "set", "--provider", "openai") == 2
    assert "never on the command line" in capsys.readouterr().err
    assert await run(api, "ask-key", "remove") == 0
    assert await run(api, "ask-key", "remove") == 1
    assert await run(api, "ask-settings", "--disable", "--json") == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["enabled"] is False
    assert await run(api, "audit", "--limit", "3") == 0
    out = capsys.readouterr().out
    assert [line.split()[2] for line in out.splitlines()] == ["ask.disabled", "ask.key_removed", "ask.key_set"]
    assert SECRET not in out
    assert await run(api, "audit", key=api.read_only) == 1
    assert "403 forbidden" in capsys.readouterr().err


async def test_conversations_show_rate_delete_and_delete_all(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    use(api, Scripted([]))
    await enable(api)
    for question in ("first?", "second?"):
        assert await run(api, "ask", question, "--json") == 0
    starts = [json.loads(x) for x in capsys.readouterr().out.splitlines() if '"start"' in x]
    conv, message = starts[0]["conversation_id"], starts[0]["message_id"]
    assert await run(api, "conversations", "rate", message, "up") == 0
    assert await run(api, "conversations", "show", conv) == 0
    out = capsys.readouterr().out
    assert "> first?" in out and f"(message {message}, complete, scripted, rated up)" in out
    assert await run(api, "conversations", "delete", conv) == 0
    assert await run(api, "conversations", "show", conv) == 1
    assert "404 not_found" in capsys.readouterr().err
    assert await run(api, "conversations", "delete-all") == 2
    assert "--yes" in capsys.readouterr().err
    assert await run(api, "conversations", "delete-all", "--yes") == 0
    assert "1 conversation(s) deleted" in capsys.readouterr().out
    assert await run(api, "conversations", "list") == 0
    assert capsys.readouterr().out == "no conversations\n"


def test_keep_alives_and_split_data_are_read_as_one_event() -> None:
    stream = [b": keep-alive\n", b"\n", b"event: text\n", b'data: {"type":"text",\n', b'data: "text":"a"}\n', b"\n"]
    # A JSON object split over two data lines is joined (SSE joins them with a newline).
    assert list(sse_events(iter(stream))) == [("text", {"type": "text", "text": "a"})]


def test_keys_belong_to_an_organization(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path / "s.db"}"\n')
    assert cli.main(["keys", "create", "--role", "read-write", "--org", "acme", "--config", str(cfg)]) == 0
    assert "organization acme" in capsys.readouterr().err
    assert cli.main(["keys", "create", "--role", "read-only", "--config", str(cfg)]) == 0
    for bad in ("", "Acme", "_x", "a" * 64, "a b", "a\n", "a\x1b"):
        assert cli.main(["keys", "create", "--role", "read-only", "--org", bad, "--config", str(cfg)]) == 2
        err = capsys.readouterr().err
        assert "--org" in err and "1 to 63" in err and "\x1b" not in err
    assert cli.main(["keys", "list", "--json", "--config", str(cfg)]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(k["org"], k["role"]) for k in listed] == [("acme", "read-write"), ("default", "read-only")]
    assert cli.main(["keys", "list", "--config", str(cfg)]) == 0
    assert [line.split()[3] for line in capsys.readouterr().out.splitlines()] == ["acme", "default"]
    assert cli.main(["keys", "revoke", listed[0]["id"], "--config", str(cfg)]) == 0
    from forwarder.store import open_sync
    from forwarder.store import state as S

    conn = open_sync(str(tmp_path / "s.db"))
    try:
        records = S.audit_records(conn)
    finally:
        conn.close()
    created = [r for r in reversed(records) if r["action"] == "keys.created"]
    assert [(r["org"], r["details"]["org"]) for r in created] == [  # type: ignore[index]
        ("acme", "acme"),
        ("default", "default"),
    ]
    assert (records[0]["action"], records[0]["org"]) == ("keys.revoked", "acme")


async def test_suggestions_without_findings_or_alerts_say_so(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    assert await run(api, "ask-suggestions", "--database", "main", key=api.read_only) == 0
    assert capsys.readouterr().out == "no suggestions: no open findings and no firing alerts\n"
    assert await run(api, "ask-suggestions", "--database", "nope") == 1
    assert "404 not_found" in capsys.readouterr().err
