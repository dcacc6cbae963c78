"""Ask's conversations expire 30 days after their last message: the daemon's loop, and the check
every read of conversations makes first.

Apart from `usecases/ask` so that the daemon runs the loop from its start without importing the
Ask feature, which it loads on the first Ask request (ApiContext.ask).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final

from forwarder.clock import Clock
from forwarder.store import Store
from forwarder.store import ask as A

log = logging.getLogger(__name__)

CONVERSATION_RETENTION_DAYS: Final = 30
EXPIRY_INTERVAL_SECONDS: Final = 600.0
EXPIRY_CHECK_SECONDS: Final = 60.0


class ConversationExpiry:
    """Deletes every organization's conversations whose last message is over 30 days old."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self.expired_at = float("-inf")  # clock time of the last expiry

    async def run(self) -> None:
        """Expire every EXPIRY_INTERVAL_SECONDS of real time. The loop sleeps on the event loop,
        not the daemon's clock: the cut-off comes from the clock, and every read of conversations
        expires first too (`maybe`), so a test's fake clock needs no sleeper."""
        while True:
            with contextlib.suppress(Exception):  # the store failing now is tried again next time
                await self.maybe()
            await asyncio.sleep(EXPIRY_INTERVAL_SECONDS)

    async def maybe(self) -> int:
        """Expire if the clock moved EXPIRY_CHECK_SECONDS since the last time; how many went."""
        now = self.clock.now()
        if now - self.expired_at < EXPIRY_CHECK_SECONDS:
            return 0
        self.expired_at = now
        return await self.expire()

    async def expire(self) -> int:
        """Expire now; how many conversations went."""
        before_us = int((self.clock.now() - CONVERSATION_RETENTION_DAYS * 86400) * 1_000_000)
        gone: int = await self.store.write(lambda c: A.expire_conversations(c, before_us))
        if gone:
            log.info("Ask conversations expired", extra={"conversations": gone})
        return gone
