"""The Ask rate per organization: at most `per_minute` questions accepted in any 60 seconds, and
at most `concurrent` answers streaming at once.

Only accepted questions count: a question refused for any reason (this limit included) takes no
place in the window. Times come from the daemon's clock (a fake one in tests), monotonic, so a
wall-clock step never frees or blocks a slot.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass
from typing import Final

from forwarder.clock import Clock

PER_MINUTE: Final = 10
CONCURRENT: Final = 3
WINDOW_SECONDS: Final = 60.0
BUSY_RETRY_SECONDS: Final = 5  # Retry-After when only the concurrency is at its cap


@dataclass(frozen=True, slots=True)
class RateRefusal:
    """Why a question is refused now, and when to try again (whole seconds, for Retry-After)."""

    message: str
    retry_after_seconds: int


class Slot:
    """An accepted question's place among the streaming answers; `release` once it ends (twice is harmless)."""

    def __init__(self, limiter: AskLimiter, org: str) -> None:
        self._limiter = limiter
        self._org = org
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._limiter._running[self._org] -= 1

    def cancel(self) -> None:
        """Give the place back as if the question had never been accepted (refused after all)."""
        if self._held:
            self.release()
            window = self._limiter._accepted[self._org]
            if window:
                window.pop()


class AskLimiter:
    """Accepts or refuses questions per organization (one instance per daemon)."""

    def __init__(self, clock: Clock, per_minute: int = PER_MINUTE, concurrent: int = CONCURRENT) -> None:
        self._clock = clock
        self.per_minute = per_minute
        self.concurrent = concurrent
        self._accepted: dict[str, collections.deque[float]] = collections.defaultdict(collections.deque)
        self._running: dict[str, int] = collections.defaultdict(int)

    def check(self, org: str) -> RateRefusal | None:
        """The refusal a question of `org` would get now, without taking a place."""
        now = self._clock.monotonic()
        window = self._accepted[org]
        while window and window[0] <= now - WINDOW_SECONDS:
            window.popleft()
        if len(window) >= self.per_minute:
            wait = math.ceil(window[0] + WINDOW_SECONDS - now)
            return RateRefusal(f"at most {self.per_minute} questions a minute; try again in {wait} s", max(1, wait))
        if self._running[org] >= self.concurrent:
            return RateRefusal(
                f"at most {self.concurrent} answers at once; try again when one has finished", BUSY_RETRY_SECONDS
            )
        return None

    def acquire(self, org: str) -> Slot | RateRefusal:
        """Take a place for a question of `org`, or say why not."""
        refusal = self.check(org)
        if refusal is not None:
            return refusal
        self._accepted[org].append(self._clock.monotonic())
        self._running[org] += 1
        return Slot(self, org)

    def running(self, org: str) -> int:
        return self._running[org]
