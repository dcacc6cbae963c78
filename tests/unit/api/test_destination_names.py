"""A destination's name is printed on terminals: control characters are refused, through the API
and in the config file alike, with the error naming `name`."""

from __future__ import annotations

from typing import Any

import pytest

from forwarder.config import ConfigError, config_from_dict
from tests.unit.api.conftest import Api

HOOK = {"type": "webhook", "config": {"url": "http://hook.test:9/in"}}
HOSTILE = [
    "\x1b]0;PWNED\x07\x1b[2J",  # sets the terminal's title, clears the screen
    "ok\rforged",
    "two\nlines",
    "nul\x00",
    "del\x7f",
    "csi\x9b2J",  # the 8-bit form of ESC [
    "a\u202eb",  # right-to-left override: the rest prints reversed
    "a\u2066b",  # left-to-right isolate
    "a\u2028b",  # line separator
    "a\u2029b",  # paragraph separator
]
REFUSED = "must not contain control characters (such as ESC, CR or LF), line separators or bidi controls"


async def call(api: Api, method: str, path: str, body: Any) -> tuple[int, Any]:
    async with api.session.request(method, api.url(path), json=body, headers=api.auth(api.read_write)) as resp:
        return resp.status, await resp.json()


@pytest.mark.parametrize("name", HOSTILE)
async def test_the_api_refuses_control_characters_in_a_name(api: Api, name: str) -> None:
    status, body = await call(api, "POST", "/v1/log-destinations", {**HOOK, "name": name})
    assert (status, body["error"]["field"]) == (400, "name")
    assert body["error"]["message"] == f"name: {REFUSED}"

    status, created = await call(api, "POST", "/v1/log-destinations", {**HOOK, "name": "plain name, ünïcode ok"})
    assert status == 201, created
    status, body = await call(api, "PATCH", f"/v1/log-destinations/{created['id']}", {"name": name})
    assert (status, body["error"]["field"]) == (400, "name")
    status, shown = await call(api, "GET", f"/v1/log-destinations/{created['id']}", None)
    assert shown["name"] == "plain name, ünïcode ok"


@pytest.mark.parametrize("name", HOSTILE)
def test_the_config_file_refuses_control_characters_in_a_name(name: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_dict({"destinations": [{"id": "hook", "name": name, **HOOK}]}, read_secrets=False)
    assert caught.value.problems == [f"destinations[0].name: {REFUSED}"]


@pytest.mark.parametrize("name", ["   ", "\u3000"])
async def test_a_blank_name_is_refused(api: Api, name: str) -> None:
    status, body = await call(api, "POST", "/v1/log-destinations", {**HOOK, "name": name})
    assert (status, body["error"]["field"], body["error"]["message"]) == (400, "name", "name: must not be blank")
