"""Retry waits (SPEC 6.1): 30 s after the first failure, doubling, capped at one hour."""

from __future__ import annotations

from typing import Final

FIRST_SECONDS: Final = 30.0
CAP_SECONDS: Final = 3600.0
# A receiver's Retry-After may lengthen the wait, never shorten it, and never past the hour cap
# (SPEC 8: "capped at one hour"; a receiver asking for two hours is asked again after one).
# Beyond a day it is taken for a wrong header and ignored.
MAX_RETRY_AFTER_SECONDS: Final = 86_400.0


def backoff_seconds(failures: int) -> float:
    """The wait after the `failures`-th failure in a row (1 -> 30 s, 2 -> 60 s, ... capped at 1 h)."""
    if failures <= 0:
        return 0.0
    return min(CAP_SECONDS, FIRST_SECONDS * float(2 ** min(failures - 1, 32)))


def retry_wait(failures: int, retry_after: float | None) -> float:
    """The wait before the next attempt: the backoff, raised (never lowered) by Retry-After, at
    most CAP_SECONDS."""
    wait = backoff_seconds(failures)
    if retry_after is not None and 0 < retry_after <= MAX_RETRY_AFTER_SECONDS:
        wait = max(wait, min(retry_after, CAP_SECONDS))
    return wait
