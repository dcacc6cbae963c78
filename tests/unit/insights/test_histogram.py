"""Percentiles from the log-scale histogram are within its stated error of the exact ones."""

from __future__ import annotations

import math
import random

import pytest

from forwarder.insights import histogram


@pytest.mark.parametrize("seed", range(5))
def test_p95_is_within_2_2_percent_of_the_exact_value(seed: int) -> None:
    rng = random.Random(seed)
    durations = [rng.lognormvariate(0, 2) for _ in range(5000)]
    bins: dict[int, int] = {}
    for d in durations:
        b = histogram.bin_of(d)
        bins[b] = bins.get(b, 0) + 1
    exact = sorted(durations)[math.ceil(0.95 * len(durations)) - 1]
    got = histogram.percentile(bins, 0.95, 0.0, max(durations))
    assert got is not None and abs(got - exact) / exact <= 0.022


def test_a_query_that_always_takes_the_same_time_has_that_p95() -> None:
    # Clamped to the observed minimum and maximum, the bin's middle becomes exact.
    bins = {histogram.bin_of(7.5): 100}
    assert histogram.percentile(bins, 0.95, 7.5, 7.5) == 7.5


def test_zero_durations_and_an_empty_histogram() -> None:
    assert histogram.percentile({}, 0.95, 0.0, 0.0) is None
    assert histogram.percentile({histogram.bin_of(0.0): 3}, 0.95, 0.0, 0.0) == 0.0
    merged = {1: 2}
    histogram.merge(merged, {1: 1, 5: 4})
    assert merged == {1: 3, 5: 4}
