"""The destinations API: validation names the field, secrets are write-only and sealed at rest."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest

from forwarder.app import Daemon
from forwarder.clock import FakeClock
from forwarder.config import config_from_dict
from forwarder.delivery.netguard import StaticResolver
from tests.unit.api.conftest import Api

HOOK = {"type": "webhook", "name": "n", "config": {"url": "http://hook.test:9/in"}}


async def call(api: Api, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    async with api.session.request(method, api.url(path), json=body, headers=api.auth(api.read_write)) as resp:
        return resp.status, (await resp.json() if resp.status != 204 else None)


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({**HOOK, "type": "carrier-pigeon"}, "type", "must be one of"),
        ({**HOOK, "name": ""}, "name", "at least 1"),
        ({**HOOK, "colour": "red"}, "colour", "unknown field"),
        ({**HOOK, "Colour": "red"}, "Colour", "unknown field"),  # however it is spelled
        ({**HOOK, "full-colour": "red"}, "full-colour", "unknown field"),
        ({**HOOK, "config": {"url": "http://hook.test/", "URL": 1}}, "config.URL", "unknown field"),
        ({**HOOK, "config": {}}, "config.url", "required"),
        ({**HOOK, "config": {"url": "http://hook.test/", "verb": "PUT"}}, "config.verb", "unknown field"),
        ({**HOOK, "config": {"url": "ftp://hook.test/"}}, "config.url", "http"),
        ({**HOOK, "config": {"url": "http://user:pw@hook.test/"}}, "config.url", ""),
        ({**HOOK, "config": {"url": "http://10.0.0.5/"}}, "config.url", ""),
        ({**HOOK, "config": {"url": "http://169.254.169.254/latest/meta-data/"}}, "config.url", ""),
        ({**HOOK, "config": {"url": "http://private.test/"}}, "config.url", ""),
        ({**HOOK, "config": {"url": "http://nowhere.test/"}}, "config.url", "does not resolve"),
        ({**HOOK, "config": {"url": "http://2130706433/"}}, "config.url", ""),
        ({**HOOK, "filter": {"kinds": ["fatal"]}}, "filter.kinds", "unknown kind"),
        ({**HOOK, "filter": {"database_ids": ["nope"]}}, "filter.database_ids", "no database"),
        ({**HOOK, "filter": {"kinds": ["errors"], "tags": []}}, "filter.tags", "unknown field"),
        ({**HOOK, "secret": ""}, "secret", "at least 1"),
        ({**HOOK, "enabled": "yes"}, "enabled", "boolean"),
    ],
)
async def test_bad_destinations_are_400_naming_the_field(api: Api, body: dict[str, Any], field: str, says: str) -> None:
    status, data = await call(api, "POST", "/v1/log-destinations", body)
    assert status == 400, data
    assert data["error"]["field"] == field and says in data["error"]["message"]
    assert "pw" not in data["error"]["message"]  # credentials in a refused URL are never echoed


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"enabled": "false"}, "enabled", "boolean"),  # not "enabled.bool": the union's tag is no field
        ({"enabled": 1}, "enabled", "boolean"),
        ({"Name": "x"}, "Name", "unknown field"),
    ],
)
async def test_a_bad_change_is_400_naming_the_field(api: Api, body: dict[str, Any], field: str, says: str) -> None:
    _, created = await call(api, "POST", "/v1/log-destinations", HOOK)
    status, data = await call(api, "PATCH", f"/v1/log-destinations/{created['id']}", body)
    assert status == 400, data
    assert data["error"]["field"] == field and data["error"]["message"].startswith(f"{field}: ")
    assert says in data["error"]["message"]


async def test_secrets_are_write_only_and_sealed_at_rest(api: Api, tmp_path: Path) -> None:
    status, created = await call(api, "POST", "/v1/log-destinations", {**HOOK, "secret": "s3cr3t-signing-key-123"})
    assert status == 201 and created["secret"] == "s3cr3t-signing-key-123" and created["has_secret"] is True
    dest = created["id"]
    status, changed = await call(api, "PATCH", f"/v1/log-destinations/{dest}", {"secret": "n3w-s3cr3t-456"})
    assert status == 200 and "secret" not in changed
    for path in ("/v1/log-destinations", f"/v1/log-destinations/{dest}"):
        _, shown = await call(api, "GET", path)
        assert "s3cr3t" not in str(shown)
    rows = sqlite3.connect(tmp_path / "store.db").execute("SELECT * FROM destinations").fetchall()
    assert b"s3cr3t" not in repr(rows).encode() and "s3cr3t" not in repr(rows)
    audit = await api.daemon.store.audit_records()
    assert "s3cr3t" not in repr(audit)
    assert {"fields": ["secret"]} in [r["details"] for r in audit if r["action"] == "destinations.changed"]
    assert stat.S_IMODE((tmp_path / "secrets.key").stat().st_mode) == 0o600


async def test_change_and_delete(api: Api) -> None:
    _, created = await call(api, "POST", "/v1/log-destinations", HOOK)
    dest = created["id"]
    assert created["delivery"]["cursor"] == "0" and created["enabled"] is True
    status, changed = await call(
        api, "PATCH", f"/v1/log-destinations/{dest}", {"enabled": False, "filter": {"kinds": ["errors"]}}
    )
    assert status == 200 and changed["enabled"] is False and changed["filter"]["kinds"] == ["errors"]
    assert api.daemon.delivery is not None and api.daemon.delivery.state(dest) is None  # its loop stopped
    nulls = [({field: None}, field) for field in ("name", "enabled", "config", "filter", "secret")]
    for body, field in [({}, None), ({"type": "loki"}, "type"), *nulls]:
        status, data = await call(api, "PATCH", f"/v1/log-destinations/{dest}", body)
        assert status == 400 and data["error"].get("field") == field, body  # null is no silent "keep it"
    _, shown = await call(api, "GET", f"/v1/log-destinations/{dest}")
    assert shown["name"] == created["name"] and shown["enabled"] is False
    status, _ = await call(api, "DELETE", f"/v1/log-destinations/{dest}")
    assert status == 204
    status, data = await call(api, "GET", f"/v1/log-destinations/{dest}")
    assert status == 404 and data["error"]["code"] == "not_found"


async def test_loopback_is_refused_unless_the_operator_allows_it(tmp_path: Path) -> None:
    import aiohttp

    config = config_from_dict(
        {
            "server": {"port": 0},
            "store": {"path": str(tmp_path / "s.db")},
            "security": {"secrets_key_file": str(tmp_path / "k")},
        }
    )
    daemon = Daemon(config, clock=FakeClock(), resolver=StaticResolver({"hook.test": ["127.0.0.1"]}))
    await daemon.start()
    try:
        _, key = await daemon.store.create_key("rw", "read-write")
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}"}) as s:
            for url in ("http://127.0.0.1:9/", "http://hook.test:9/", "http://[::1]:9/", "http://localhost:9/"):
                async with s.post(
                    f"http://127.0.0.1:{daemon.port}/v1/log-destinations", json={**HOOK, "config": {"url": url}}
                ) as resp:
                    assert resp.status == 400, url
                    assert (await resp.json())["error"]["field"] == "config.url"
    finally:
        await daemon.aclose()


async def test_a_body_over_the_limit_is_a_json_413_that_says_the_limit(api: Api) -> None:
    status, data = await call(api, "POST", "/v1/log-destinations", {**HOOK, "name": "x" * (1 << 20)})
    assert status == 413 and data["error"]["code"] == "body_too_large"
    assert data["error"]["message"] == "a request body is at most 1024 KiB"
