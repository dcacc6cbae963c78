"""Small pieces every kind of test uses: a free loopback port, waiting for a condition, a store
made full (a disk that has no room left), and a source's status as each of its batches is stored.

`wait_until` is for a condition another task of the same event loop brings about (it wakes on an
event, no polling); `poll_until` is for one another process or thread brings about, which can only
be looked at again and again.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from forwarder.sources.follower import Follower, SourceStatus
from forwarder.store import LineQuery, Store

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it; another process may
    take it before the caller binds it, so a caller that can retry should)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


async def wait_until(arrived: asyncio.Event, done: Callable[[], bool], timeout: float) -> None:
    """Until `done()` holds, looked at again each time `arrived` is set (the sender is another task).

    Raises TimeoutError after `timeout` seconds.
    """
    async with asyncio.timeout(timeout):
        while not done():
            arrived.clear()
            await arrived.wait()


def poll_until(check: Callable[[], bool], timeout: float = 30, what: str = "condition", interval: float = 0.05) -> None:
    """Until `check()` holds, looked at every `interval` seconds; fails the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(interval)


async def limit_pages(store: Store, pages: int) -> None:
    """SQLite's own SQLITE_FULL: the writer may not grow the database past `pages` (at least its
    current size; sqlite.org/pragma.html#pragma_max_page_count)."""

    def _set() -> None:
        assert store._writer is not None
        store._writer.execute(f"PRAGMA max_page_count = {pages}")

    await asyncio.get_running_loop().run_in_executor(store._writer_pool, _set)


async def all_messages(store: Store) -> list[str]:
    """Every message stored for the first database, oldest first (paging through the Logs API's query)."""
    out: list[str] = []
    before = None
    while True:
        page = await store.list_lines(1, LineQuery(limit=500, before=before))
        docs = [orjson.loads(d) for d in page.docs]
        out.extend(d["message"] for d in docs)
        if not page.has_more:
            return list(reversed(out))
        before = int(docs[-1]["id"])


def statuses_at_each_write(follower: Follower, store: Store, monkeypatch: pytest.MonkeyPatch) -> list[SourceStatus]:
    """The follower's status as each of its batches is handed to the store, in a list that grows."""
    seen: list[SourceStatus] = []
    real_append = store.append_rows

    async def recording(*args: Any) -> int:
        seen.append(follower.status)
        return await real_append(*args)

    monkeypatch.setattr(store, "append_rows", recording)
    return seen
