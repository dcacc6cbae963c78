"""A log-scale histogram of durations: percentiles of a query without keeping every duration.

Bin `b` holds durations in [BASE**b, BASE**(b+1)) milliseconds with BASE = 2**(1/16): a bin is
4.4% wide, so a percentile read at the bin's geometric middle is within 2.2% of the true value
(clamped to the observed minimum and maximum, it is exact for a query that always takes the same
time). The same idea as HdrHistogram's or DDSketch's relative-error buckets, small enough to keep
one per query per 5-minute bucket (a row per bin that is used).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

STEPS_PER_DOUBLING: Final = 16
_LOG_BASE: Final = math.log(2) / STEPS_PER_DOUBLING
ZERO_BIN: Final = -10_000  # durations of 0 ms (and below 2**-600 ms, which PostgreSQL never logs)


def bin_of(duration_ms: float) -> int:
    """The bin a duration falls in."""
    if duration_ms <= 0 or not math.isfinite(duration_ms):
        return ZERO_BIN
    return max(ZERO_BIN + 1, math.floor(math.log(duration_ms) / _LOG_BASE))


def bin_middle(b: int) -> float:
    """The geometric middle of bin `b` in milliseconds."""
    if b == ZERO_BIN:
        return 0.0
    return math.exp((b + 0.5) * _LOG_BASE)


def merge(into: dict[int, int], other: Mapping[int, int]) -> None:
    """Add `other`'s counts to `into`."""
    for b, n in other.items():
        into[b] = into.get(b, 0) + n


def percentile(bins: Mapping[int, int], q: float, lo: float, hi: float) -> float | None:
    """The `q` quantile (0..1) of the durations counted in `bins`, clamped to [lo, hi] (the observed
    minimum and maximum); None when nothing was counted. Nearest-rank: the smallest bin by which at
    least q of the durations are counted."""
    total = sum(bins.values())
    if total <= 0:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for b in sorted(bins):
        seen += bins[b]
        if seen >= rank:
            return min(hi, max(lo, bin_middle(b)))
    return hi  # unreachable: the counts add up to total
