"""A store that cannot write (a full disk): /readyz, the overview and /metrics say so, until it writes again."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from tests.harness import limit_pages
from tests.unit.api.conftest import Api


async def eventually(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 20) -> None:
    """Wait for the daemon's own tasks (the follower polls its files every 0.25 s) to get there."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def readyz(api: Api) -> tuple[int, dict[str, str]]:
    async with api.session.get(api.url("/readyz")) as resp:
        return resp.status, await resp.json()


async def source(api: Api) -> dict[str, str]:
    async with api.session.get(api.url("/v1/databases/main/logs/overview"), headers=api.auth(api.read_only)) as resp:
        assert resp.status == 200
        body: dict[str, dict[str, str]] = await resp.json()
        return body["source"]


async def metrics_text(api: Api) -> str:
    async with api.session.get(api.url("/metrics")) as resp:
        return await resp.text()


async def test_a_full_store_is_not_ready_and_says_disk_full_until_it_writes_again(api: Api, tmp_path: Path) -> None:
    store = api.daemon.store
    assert (await readyz(api))[0] == 200
    await limit_pages(store, 1)
    n = 2000  # more than the free space of the new store's pages
    (tmp_path / "logs").mkdir(exist_ok=True)
    (tmp_path / "logs" / "pg.log").write_bytes(
        b"".join(f"2026-11-22 10:00:00.000 UTC [{i}] LOG:  line {i}\n".encode() for i in range(n))
    )

    async def not_ready() -> bool:
        return (await readyz(api))[0] == 503

    await eventually(not_ready, "/readyz to answer 503")
    status, body = await readyz(api)
    assert status == 503
    assert body["status"] == "store cannot write" and body["reason"].startswith("disk full")
    src = await source(api)
    assert src["state"] == "error" and src["reason"].startswith("disk full")
    text = await metrics_text(api)
    assert "forwarder_store_writable 0.0" in text
    assert 'forwarder_store_write_failures_total{reason="disk_full"}' in text

    await limit_pages(store, 1 << 30)  # space is freed

    async def stored() -> bool:
        # The last line is pending. The source's state comes back once the follower resumes after
        # its first write that works, a moment after the store is writable and the lines are in it.
        return (await readyz(api))[0] == 200 and store.head_id >= n - 1 and (await source(api))["state"] == "reading"

    await eventually(stored, "the lines to be stored, /readyz to answer 200 and the source to read again")
    assert "forwarder_store_writable 1.0" in await metrics_text(api)
