"""query_regression: a query whose mean time doubled against its own history opens a finding."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from forwarder.clock import FakeClock
from forwarder.config import DatabaseConfig, LogSourceConfig, StoreConfig
from forwarder.insights import engine
from forwarder.insights.engine import Insights
from forwarder.store import Identity, Store
from tests.unit.insights.logtext import parse, stamp

T0 = 1_800_000_000.0
HOUR = 3600.0
SQL = "SELECT * FROM orders WHERE customer_id = {}"


class World:
    def __init__(self, store: Store, clock: FakeClock, insights: Insights, identity: Identity) -> None:
        self.store, self.clock, self.insights, self.identity = store, clock, insights, identity

    async def calls(self, at: list[float], ms: float, sql: str = SQL) -> None:
        text = "".join(
            f"{stamp(t)} [7] app@shop/web LOG:  duration: {ms:.3f} ms  statement: {sql.format(i)}\n"
            for i, t in enumerate(at)
        )
        await self.store.append(self.identity, parse(text), [], 0)
        await self.insights.catch_up()

    async def regressions(self, status: str | None = None) -> list[tuple[str, str, dict[str, object]]]:
        found = await self.insights.findings(self.identity.code, status, None, 100)
        return [(f.status, f.severity, f.evidence.facts) for f, _ in found if f.rule == "query_regression"]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    clock = FakeClock(start=T0)
    store = Store(StoreConfig(path=tmp_path / "s.db"), clock)
    await store.start()
    identity = await store.register_database(
        DatabaseConfig(id="main", name="main", host="h", log=LogSourceConfig(path=str(tmp_path / "*.log")))
    )
    yield World(store, clock, Insights(store, clock), identity)
    await store.aclose()


def spread(n: int, start: float, end: float) -> list[float]:
    return [start + (end - start) * i / n for i in range(n)]


@pytest.mark.parametrize("remembered", [20_000, 1])  # 1: more queries between sweeps than are remembered
async def test_a_query_twice_as_slow_as_its_history_opens_a_finding_then_resolves(
    world: World, remembered: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "PENDING_MAX", remembered)
    await world.calls([T0 - 3 * HOUR], 1.0, "SELECT 1")  # another query seen first
    await world.calls(spread(60, T0 - 20 * HOUR, T0 - 2 * HOUR), 2.0)
    await world.calls(spread(12, T0 - 0.5 * HOUR, T0 - 60), 5.0)
    await world.insights.sweep()
    [(status, severity, facts)] = await world.regressions()
    assert status == "open" and severity == "warning"
    assert facts["history_mean_ms"] == 2.0 and facts["recent_mean_ms"] == 5.0 and facts["ratio"] == 2.5
    assert facts["recent_calls"] == 12 and facts["history_calls"] == 60
    # Back to normal: the hour up to its newest call is fast again.
    await world.calls(spread(200, T0 + 1.1 * HOUR, T0 + 2 * HOUR), 2.0)
    world.clock.advance(2 * HOUR)
    await world.insights.sweep()
    [(status, _, _)] = await world.regressions()
    assert status == "resolved"


@pytest.mark.parametrize(
    ("history_calls", "recent_calls", "recent_ms"),
    [
        (60, 12, 3.9),  # less than twice as slow
        (20, 12, 5.0),  # too little history to compare with
        (60, 5, 5.0),  # too few recent calls
    ],
)
async def test_no_finding_without_enough_calls_or_slowdown(
    world: World, history_calls: int, recent_calls: int, recent_ms: float
) -> None:
    await world.calls(spread(history_calls, T0 - 20 * HOUR, T0 - 2 * HOUR), 2.0)
    await world.calls(spread(recent_calls, T0 - 0.5 * HOUR, T0 - 60), recent_ms)
    await world.insights.sweep()
    assert await world.regressions() == []


@pytest.mark.parametrize(("before_ms", "after_ms"), [(1.1, 2.2), (1.7, 3.4), (1.3, 2.6), (2.0, 4.0)])
async def test_a_query_exactly_twice_as_slow_is_a_regression(world: World, before_ms: float, after_ms: float) -> None:
    # Sums of durations are not exact in binary (30 x 1.1 ms is 33.000000000000004): "at least
    # twice its mean" must not depend on how they round.
    await world.calls(spread(30, T0 - 20 * HOUR, T0 - 2 * HOUR), before_ms)
    await world.calls(spread(10, T0 - 0.5 * HOUR, T0 - 60), after_ms)
    await world.insights.sweep()
    [(status, _, facts)] = await world.regressions()
    assert status == "open" and facts["ratio"] == 2.0


async def test_a_tiny_query_that_doubled_is_no_news(world: World) -> None:
    await world.calls(spread(60, T0 - 20 * HOUR, T0 - 2 * HOUR), 0.02)
    await world.calls(spread(12, T0 - 0.5 * HOUR, T0 - 60), 0.5)
    await world.insights.sweep()
    assert await world.regressions() == []
