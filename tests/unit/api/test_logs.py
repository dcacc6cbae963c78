"""The Logs API as a client sees it: shapes, filters, paging, live tail, settings and errors."""

from __future__ import annotations

import asyncio

import pytest

from forwarder.model import KINDS, LogLine
from tests.unit.api.conftest import T0_S, Api

T0 = T0_S * 1_000_000


async def add(api: Api, lines: list[LogLine], db: str = "main") -> None:
    ident = api.daemon.registry.by_id[db].identity
    await api.daemon.store.append(ident, lines, [], 0)


def mk(i: int, kind: str = "other", message: str = "", **kw: object) -> LogLine:
    return LogLine(time_us=T0 + i * 1_000_000, severity="LOG", kind=kind, message=message or f"m{i}", **kw)  # type: ignore[arg-type]


async def get(api: Api, path: str, **params: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    async with api.session.get(api.url(path), params=params, headers=api.auth(api.read_only)) as resp:
        return resp.status, await resp.json()


async def test_list_returns_spec_lines_newest_first(api: Api) -> None:
    await add(api, [mk(1, "slow_query", "duration", duration_ms=12.5, pid=42, user="app", statement="SELECT $1")])
    await add(api, [mk(2, "error", "boom", sqlstate="23505")])
    status, body = await get(api, "/v1/databases/main/logs")
    assert status == 200
    assert body["has_more"] is False
    first, second = body["lines"]
    assert first["message"] == "boom" and first["sqlstate"] == "23505"
    assert isinstance(first["id"], str) and int(first["id"]) > int(second["id"])
    assert second == {
        "id": second["id"],
        "time": "2027-01-15T08:00:01.000Z",
        "host": "db1",
        "database_id": "main",
        "database_name": "Main DB",
        "severity": "LOG",
        "kind": "slow_query",
        "sqlstate": None,
        "message": "duration",
        "detail": None,
        "hint": None,
        "context": None,
        "statement": "SELECT $1",
        "user": "app",
        "database": None,
        "application": None,
        "client": None,
        "pid": 42,
        "duration_ms": 12.5,
        "redacted": False,
    }


async def test_ref_may_be_the_database_name(api: Api) -> None:
    await add(api, [mk(1)])
    status, body = await get(api, "/v1/databases/Main%20DB/logs")
    assert status == 200 and len(body["lines"]) == 1


async def test_filters_combine(api: Api) -> None:
    await add(api, [mk(i, KINDS[i % len(KINDS)], f"text {KINDS[i % len(KINDS)]} {i}") for i in range(60)])
    _, body = await get(api, "/v1/databases/main/logs", kind="errors", q="text", limit="500")
    assert {x["kind"] for x in body["lines"]} == {"error", "deadlock", "auth_failure", "too_many_connections"}
    _, body = await get(api, "/v1/databases/main/logs", kind="deadlock,checkpoint")
    assert {x["kind"] for x in body["lines"]} == {"deadlock", "checkpoint"}
    _, body = await get(
        api, "/v1/databases/main/logs", **{"from": "2027-01-15T08:00:10Z", "to": "2027-01-15T08:00:20Z"}
    )
    assert [x["message"].split()[-1] for x in body["lines"]] == [str(i) for i in range(19, 9, -1)]
    _, body = await get(
        api, "/v1/databases/main/logs", **{"from": "2027-01-15T08:00:20Z", "to": "2027-01-15T08:00:10Z"}
    )
    assert body["lines"] == []  # an inverted window is empty, not an error
    _, body = await get(api, "/v1/databases/main/logs", limit="7")
    assert len(body["lines"]) == 7 and body["has_more"] is True


async def test_live_tail_waits_for_the_next_line(api: Api) -> None:
    await add(api, [mk(1)])
    _, body = await get(api, "/v1/databases/main/logs")
    newest = body["lines"][0]["id"]
    waiting = asyncio.create_task(get(api, "/v1/databases/main/logs", after=newest, wait_seconds="30"))
    await asyncio.sleep(0.05)  # let the request reach its wait (this is not waiting on time-based logic)
    assert not waiting.done()
    await add(api, [mk(2, message="fresh")])
    status, body = await asyncio.wait_for(waiting, 5)
    assert status == 200 and [x["message"] for x in body["lines"]] == ["fresh"]


async def test_groups_cover_the_last_24_hours_by_default(api: Api) -> None:
    # The fake clock stands one hour after T0: a line 25 hours earlier is outside the window.
    await add(api, [mk(-25 * 3600, "error", "old one")])
    await add(api, [mk(i, "error", "same thing") for i in range(3)])
    status, body = await get(api, "/v1/databases/main/logs/groups")
    assert status == 200
    [group] = body["groups"]
    assert group["count"] == 3 and group["kind"] == "error"
    assert group["first_time"] == "2027-01-15T08:00:00.000Z" and group["last_time"] == "2027-01-15T08:00:02.000Z"
    assert group["line"]["message"] == "same thing"
    _, body = await get(api, "/v1/databases/main/logs/groups", **{"from": "2027-01-01T00:00:00Z"})
    assert sorted(g["count"] for g in body["groups"]) == [1, 3]
    _, lines = await get(api, "/v1/databases/main/logs", group=group["group"])
    assert len(lines["lines"]) == 3


async def test_overview(api: Api) -> None:
    await add(api, [mk(1, "error"), mk(2, "error"), mk(3, "connection")])
    status, body = await get(api, "/v1/databases/main/logs/overview")
    assert status == 200
    assert body["database"] == {"id": "main", "name": "Main DB", "host": "db1"}
    assert body["settings"] == {"enabled": True, "full_text": False}
    assert body["source"]["state"] == "no_file" and "no file matches" in body["source"]["reason"]
    assert body["counts_24h"]["error"] == 2 and body["counts_24h"]["connection"] == 1
    assert set(body["counts_24h"]) == set(KINDS)
    assert body["retention"]["days"] == 7 and body["retention"]["oldest_time"] == "2027-01-15T08:00:01.000Z"
    assert body["usage_today"]["lines"] == 3


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "501"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"kind": "fatal"}, "kind"),
        ({"from": "yesterday"}, "from"),
        ({"to": "2026-11-22"}, "to"),
        ({"before": "-1"}, "before"),
        ({"after": "1e3"}, "after"),
        ({"after": "99999999999999999999"}, "after"),
        ({"group": "xyz"}, "group"),
        ({"group": "+123456789abcdef"}, "group"),
        ({"q": ""}, "q"),
        ({"wait_seconds": "5"}, "wait_seconds"),
        ({"after": "1", "wait_seconds": "31"}, "wait_seconds"),
        ({"colour": "red"}, "colour"),
    ],
)
async def test_bad_parameters_are_400_naming_the_parameter(api: Api, params: dict[str, str], field: str) -> None:
    status, body = await get(api, "/v1/databases/main/logs", **params)
    assert status == 400
    assert body["error"]["code"] == "invalid_parameter" and body["error"]["field"] == field
    assert body["error"]["message"].startswith(f"{field}:")


async def patch(
    api: Api, body: object, *, raw: bytes | None = None, ctype: str = "application/json"
) -> tuple[int, dict]:  # type: ignore[type-arg]
    data = raw if raw is not None else __import__("json").dumps(body).encode()
    async with api.session.patch(
        api.url("/v1/databases/main/logs/settings"),
        data=data,
        headers={**api.auth(api.read_write), "Content-Type": ctype},
    ) as resp:
        return resp.status, await resp.json()


async def test_settings_change_applies_to_the_reader_and_persists(api: Api) -> None:
    status, body = await patch(api, {"enabled": False})
    assert (status, body) == (200, {"enabled": False, "full_text": False})
    follower = api.daemon.registry.by_id["main"].follower
    assert follower.enabled is False
    status, body = await patch(api, {"full_text": True})
    assert body == {"enabled": False, "full_text": True} and follower.full_text is True
    _, dbs = await get(api, "/v1/databases")
    assert {"id": "main", "name": "Main DB", "host": "db1", "enabled": False, "full_text": True} in dbs["databases"]
    [record, _] = await api.daemon.store.audit_records()
    assert record["action"] == "logs.settings_changed" and record["target"] == "main"


@pytest.mark.parametrize(
    ("body", "raw", "field"),
    [
        ({"enabled": "yes"}, None, "enabled"),
        ({"full_text": 1}, None, "full_text"),
        ({"enabled": None, "full_text": True}, None, "enabled"),
        ({"enabled": True, "retention": 3}, None, "retention"),
        ({}, None, None),
        ([True], None, None),
        (None, b"{not json", None),
    ],
)
async def test_bad_settings_bodies_are_400_naming_the_field(
    api: Api, body: object, raw: bytes | None, field: str | None
) -> None:
    status, data = await patch(api, body, raw=raw)
    assert status == 400 and data["error"]["code"] == "invalid_body"
    assert data["error"].get("field") == field


async def test_settings_need_a_json_body(api: Api) -> None:
    status, data = await patch(api, None, raw=b"enabled=false", ctype="application/x-www-form-urlencoded")
    assert status == 415 and data["error"]["code"] == "unsupported_media_type"


async def test_unknown_paths_and_methods_answer_json(api: Api) -> None:
    async with api.session.get(api.url("/v1/nope"), headers=api.auth(api.read_only)) as resp:
        assert resp.status == 404 and (await resp.json())["error"]["code"] == "not_found"
    async with api.session.delete(api.url("/v1/databases/main/logs"), headers=api.auth(api.read_write)) as resp:
        assert resp.status == 405 and (await resp.json())["error"]["code"] == "method_not_allowed"
