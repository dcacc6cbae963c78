"""GET /v1/audit: read-write keys only, the caller's organization's records, newest first; every
audited Ask operation is there and none holds the key."""

from __future__ import annotations

from typing import Any

from forwarder.ask.providers.base import KeyCheck
from tests.unit.api.conftest import Api

SECRET = "sk-test-never-shown-0123456789abcdef"


async def call(api: Api, method: str, path: str, key: str, body: object = None) -> tuple[int, Any]:
    async with api.session.request(method, api.url(path), json=body, headers=api.auth(key)) as resp:
        raw = await resp.text()
        return resp.status, (await resp.json() if raw else None)


async def audit(api: Api, key: str, **params: str) -> tuple[int, Any]:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return await call(api, "GET", "/v1/audit" + (f"?{query}" if query else ""), key)


async def test_a_read_only_key_may_not_read_the_audit_log(api: Api) -> None:
    status, body = await audit(api, api.read_only)
    assert (status, body["error"]["code"]) == (403, "forbidden")
    status, body = await audit(api, api.read_write)
    assert status == 200 and isinstance(body["records"], list)


async def test_limit_is_checked(api: Api) -> None:
    for bad in ("0", "501", "x"):
        status, body = await audit(api, api.read_write, limit=bad)
        assert status == 400 and body["error"]["field"] == "limit"


async def test_every_audited_ask_operation_is_recorded_without_the_key(api: Api) -> None:
    ask = api.daemon._ctx.ask  # type: ignore[union-attr]
    assert ask is not None

    async def ok(*a: object) -> KeyCheck:
        return KeyCheck("ok")

    ask.check_key = ok  # type: ignore[assignment]
    rw = api.read_write
    assert (await call(api, "PUT", "/v1/ask/settings", rw, {"enabled": True}))[0] == 200
    assert (await call(api, "PUT", "/v1/ask/settings", rw, {"enabled": False}))[0] == 200
    assert (await call(api, "PUT", "/v1/ask/key", rw, {"provider": "anthropic", "api_key": SECRET}))[0] == 200
    assert (await call(api, "DELETE", "/v1/ask/key", rw))[0] == 204
    assert (await call(api, "DELETE", "/v1/ask/conversations", rw))[0] == 200
    status, body = await audit(api, rw)
    assert status == 200
    actions = [r["action"] for r in body["records"]]
    assert actions == [
        "ask.conversations_deleted",
        "ask.key_removed",
        "ask.key_set",
        "ask.disabled",
        "ask.enabled",
    ]
    key_set = body["records"][2]
    assert key_set["details"]["provider"] == "anthropic" and key_set["org"] == "default"
    assert key_set["actor"].startswith("key:") and key_set["time"].endswith("Z")
    assert SECRET not in str(body) and SECRET[-12:] not in str(body)
    status, body = await audit(api, rw, limit="2")
    assert [r["action"] for r in body["records"]] == actions[:2]


async def test_an_organization_reads_only_its_own_records(api: Api) -> None:
    _, other = await api.daemon.store.create_key("acme-rw", "read-write", org="acme")
    assert (await call(api, "PUT", "/v1/ask/settings", api.read_write, {"enabled": True}))[0] == 200
    for enabled in (True, False):
        assert (await call(api, "PUT", "/v1/ask/settings", other, {"enabled": enabled}))[0] == 200
    _, mine = await audit(api, api.read_write)
    _, theirs = await audit(api, other)
    assert [(r["org"], r["action"]) for r in mine["records"]] == [("default", "ask.enabled")]
    assert [(r["org"], r["action"]) for r in theirs["records"]] == [("acme", "ask.disabled"), ("acme", "ask.enabled")]
