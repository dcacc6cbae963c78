"""Noticing a client that left, for a handler that waits (a long poll, a stream).

aiohttp tells a handler nothing when its client closes the connection: its handler_cancellation is
off (so that other handlers finish their writes and their stores), and a handler that only waits
would otherwise wait out its whole time for nobody, outside what `max_connections` bounds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Final, TypeVar

from aiohttp import web

DISCONNECT_POLL_SECONDS: Final = 0.2  # how often a waiting handler checks that its client is still there

T = TypeVar("T")


async def client_gone(request: web.Request) -> None:
    """Returns once the request's connection is closed (looked at every DISCONNECT_POLL_SECONDS)."""
    while request.transport is not None and not request.transport.is_closing():  # noqa: ASYNC110
        await asyncio.sleep(DISCONNECT_POLL_SECONDS)


async def unless_client_gone(request: web.Request, work: Awaitable[T]) -> T | None:
    """`work`'s result (or its exception); None, `work` cancelled, when the client leaves first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.create_task(client_gone(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
        await asyncio.gather(task, watcher, return_exceptions=True)
    return None if task.cancelled() else task.result()
