"""Ask's endpoints and pages are imported on their first request, not at the daemon's start, and
answer as if their routes had been added one by one (forwarder/api/lazyroutes.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from forwarder import metrics
from tests.unit.api.conftest import Api

ROOT = Path(__file__).resolve().parents[3]
ASK_MODULES = ("forwarder.ask", "forwarder.usecases.ask", "forwarder.api.ask", "forwarder.web.ask")

# A started daemon in a fresh interpreter: which of Ask's modules it holds at start, after a
# request elsewhere, and after its first Ask request (and what that request answered).
STARTED = """
import asyncio, json, sys
import aiohttp
from forwarder.app import Daemon
from forwarder.config import config_from_dict

def ask_modules():
    return sorted(m for m in sys.modules if m in {modules} or m.startswith("forwarder.ask."))

async def main():
    config = config_from_dict({{
        "server": {{"host": "127.0.0.1", "port": 0}},
        "store": {{"path": sys.argv[1] + "/store.db"}},
        "security": {{"secrets_key_file": sys.argv[1] + "/secrets.key"}},
        "insights": {{"enabled": False}},
    }})
    daemon = Daemon(config)
    await daemon.start()
    try:
        _, key = await daemon.store.create_key("ro", "read-only")
        seen = {{"started": ask_modules()}}
        auth = {{"Authorization": "Bearer " + key}}
        async with aiohttp.ClientSession(f"http://127.0.0.1:{{daemon.port}}", headers=auth) as http:
            async with http.get("/v1/databases") as resp:
                seen["other"] = [resp.status, ask_modules()]
            async with http.get("/v1/ask/settings") as resp:
                seen["ask"] = [resp.status, sorted(await resp.json()), ask_modules()]
    finally:
        await daemon.aclose()
    print(json.dumps(seen))

asyncio.run(main())
"""


def test_the_daemon_starts_without_ask_and_loads_it_on_the_first_ask_request(tmp_path: Path) -> None:
    code = STARTED.format(modules=repr(set(ASK_MODULES)))
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60, cwd=ROOT, check=True
    )
    seen = json.loads(out.stdout)
    assert seen["started"] == [] and seen["other"] == [200, []]
    status, keys, loaded = seen["ask"]
    assert status == 200 and "enabled" in keys
    assert {"forwarder.api.ask", "forwarder.usecases.ask"} <= set(loaded)


async def test_a_lazy_route_answers_as_an_added_one(api: Api) -> None:
    auth = api.auth(api.read_write)
    async with api.session.get(api.url("/v1/ask"), headers=auth) as resp:
        assert resp.status == 405 and resp.headers["Allow"] == "POST"
        assert (await resp.json())["error"]["code"] == "method_not_allowed"
    for path in ("/v1/askx", "/v1/ask/nothing-here", "/v1/ask/conversations/x/y"):
        async with api.session.get(api.url(path), headers=auth) as resp:
            assert resp.status == 404 and (await resp.json())["error"]["code"] == "not_found", path
    # Counted by the route's own template, never the prefix nor the raw path.
    labels = {"route": "/v1/ask/conversations/{conversation_id}", "method": "GET", "status": "404"}
    before = metrics.REGISTRY.get_sample_value("forwarder_http_requests_total", labels) or 0.0
    async with api.session.get(api.url("/v1/ask/conversations/c_none"), headers=auth) as resp:
        assert resp.status == 404
    assert metrics.REGISTRY.get_sample_value("forwarder_http_requests_total", labels) == before + 1
