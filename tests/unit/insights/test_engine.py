"""The engine: findings open, update, resolve and reopen from observations, and keep their evidence."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from forwarder import metrics
from forwarder.clock import FakeClock
from forwarder.config import DatabaseConfig, LogSourceConfig, StoreConfig
from forwarder.insights.engine import SWEEP_SECONDS, Insights
from forwarder.insights.model import Evidence, FindingDraft, Observation, SubjectHistory
from forwarder.model import Kind, parse_time
from forwarder.store import Identity, Store, open_sync, schema
from tests.unit.insights.logtext import parse, stamp

T0 = 1_800_000_000.0
WINDOW_US = 300 * 1_000_000


class Bursts:
    """A rule for the test: 3 or more authentication failures of one user within 5 minutes."""

    name: ClassVar[str] = "bursts"
    kinds: ClassVar[frozenset[Kind]] = frozenset({"auth_failure"})
    lookback_seconds: ClassVar[int] = 300

    def observe(self, line_id: int, doc: Mapping[str, Any]) -> Iterable[Observation]:
        if doc.get("user") == "explode":
            raise RuntimeError("a bug in a rule")
        yield Observation(self.name, doc.get("user") or "", line_id, parse_time(doc["time"]), sample={"client": "x"})

    def evaluate(self, history: SubjectHistory) -> FindingDraft | None:
        count, _, _ = history.since(history.now_us - WINDOW_US)
        if count < 3:
            return None
        return FindingDraft(
            severity="warning",
            title=f"{count} failures of {history.subject}",
            summary=f"**{count}** failures",
            evidence=Evidence(history.now_us - WINDOW_US, history.now_us, count, history.line_ids),
        )


class Engine:
    def __init__(self, store: Store, clock: FakeClock, insights: Insights, identity: Identity) -> None:
        self.store, self.clock, self.insights, self.identity = store, clock, insights, identity

    async def fail(self, user: str, *seconds: float) -> None:
        text = "".join(
            f'{stamp(T0 + s)} [5] {user}@shop/app FATAL:  password authentication failed for user "{user}"\n'
            for s in seconds
        )
        await self.store.append(self.identity, parse(text), [], 0)
        await self.insights.catch_up()


@pytest.fixture
async def stored(tmp_path: Path) -> AsyncIterator[tuple[Store, FakeClock, Identity]]:
    """A store with the database `main`, for the engine's own rules."""
    clock = FakeClock(start=T0)
    store = Store(StoreConfig(path=tmp_path / "s.db", retention_days=1), clock)
    await store.start()
    try:
        identity = await store.register_database(
            DatabaseConfig(id="main", name="main", host="h", log=LogSourceConfig(path=str(tmp_path / "*.log")))
        )
        yield store, clock, identity
    finally:
        await store.aclose()


@pytest.fixture
def engine(stored: tuple[Store, FakeClock, Identity]) -> Engine:
    store, clock, identity = stored
    insights = Insights(store, clock, rules={"bursts": Bursts()}, retention_days=1)
    return Engine(store, clock, insights, identity)


async def test_a_finding_opens_at_the_threshold_updates_resolves_and_reopens(engine: Engine) -> None:
    await engine.fail("alice", 0, 10)
    assert await engine.insights.findings(engine.identity.code, None, None, 10) == []
    await engine.fail("alice", 20)
    ((finding, gone),) = await engine.insights.findings(engine.identity.code, None, None, 10)
    assert (finding.rule, finding.subject, finding.status, finding.evidence.count) == ("bursts", "alice", "open", 3)
    assert len(finding.evidence.line_ids) == 3 and gone == set()
    await engine.fail("alice", 30, 40)
    ((updated, _),) = await engine.insights.findings(engine.identity.code, "open", None, 10)
    assert updated.id == finding.id and updated.evidence.count == 5 and updated.title == "5 failures of alice"
    assert updated.first_seen_us < updated.last_seen_us
    # Quiet for longer than the window: the sweep resolves it.
    engine.clock.advance(SWEEP_SECONDS * 10)
    await engine.insights.sweep()
    resolved = await engine.insights.finding("main", finding.id)
    assert resolved is not None and resolved.status == "resolved" and resolved.resolved_us is not None
    assert await engine.insights.findings(engine.identity.code, "open", None, 10) == []
    # The same problem again: the same id, open again.
    await engine.fail("alice", 900, 901, 902)
    again = await engine.insights.finding("main", finding.id)
    assert again is not None and again.status == "open" and again.resolved_us is None
    assert again.first_seen_us == finding.first_seen_us


async def test_evidence_keeps_its_numbers_after_retention_deleted_its_lines(engine: Engine) -> None:
    await engine.fail("bob", 0, 1, 2, 3)
    ((finding, gone),) = await engine.insights.findings(engine.identity.code, None, None, 10)
    assert gone == set()
    engine.clock.advance(2 * 86_400)  # retention is one day
    assert await engine.store.retention_once() == 4
    ((kept, gone),) = await engine.insights.findings(engine.identity.code, None, None, 10)
    assert kept.evidence.count == 4 and gone == set(finding.evidence.line_ids)


async def test_a_failing_rule_costs_its_observation_of_that_line_only(engine: Engine) -> None:
    await engine.fail("explode", 0)
    await engine.fail("carol", 1, 2, 3)
    ((finding, _),) = await engine.insights.findings(engine.identity.code, None, None, 10)
    assert finding.subject == "carol"
    assert engine.insights.cursor == engine.store.head_id


async def test_lines_of_other_kinds_and_databases_are_skipped_and_each_line_is_counted_once(engine: Engine) -> None:
    text = "".join(f"{stamp(T0 + i)} [5] app@shop/app LOG:  connection authorized: user=app\n" for i in range(50))
    await engine.store.append(engine.identity, parse(text), [], 0)
    await engine.fail("dave", 0, 1, 2)
    await engine.insights.catch_up()  # nothing new: counts stay
    ((finding, _),) = await engine.insights.findings(engine.identity.code, None, None, 10)
    assert finding.evidence.count == 3


async def test_sweeps_keep_their_schedule_under_a_steady_stream_of_lines(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweeps: list[float] = []

    async def always_more() -> bool:  # a batch after every batch, as under a steady stream
        await asyncio.sleep(0)
        return True

    async def sweep() -> None:
        sweeps.append(engine.clock.monotonic())

    monkeypatch.setattr(engine.insights, "step", always_more)
    monkeypatch.setattr(engine.insights, "sweep", sweep)
    task = asyncio.create_task(engine.insights.run())
    try:
        for n in (1, 2, 3):
            async with asyncio.timeout(5):
                while len(sweeps) < n:
                    await asyncio.sleep(0)
            engine.clock.advance(SWEEP_SECONDS)
        assert sweeps == [0.0, SWEEP_SECONDS, 2 * SWEEP_SECONDS]  # the fake clock's monotonic time
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_catch_up_beside_the_running_loop_counts_each_line_once(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The loop starts while lines are being stored and a catch-up (the end of a backlog, a test)
    # accounts for them. A read of the saved cursor by the loop that a step can overtake would move
    # the cursor back once it returns, and the loop's next step would count the same lines again.
    # Such a read is held here until the catch-up is done; one made while no step can run passes.
    release, idle = asyncio.Event(), asyncio.Event()
    read, stored_after = engine.store.read, engine.store.stored_after
    loop_task: asyncio.Task[None] | None = None

    async def gated_read(fn: Any) -> Any:
        overtakable = not engine.insights._stepping.locked()
        value = await read(fn)
        if getattr(fn, "__name__", "") == "_cursor" and asyncio.current_task() is loop_task and overtakable:
            await release.wait()  # read, and not yet returned
        return value

    async def waiting(after: int) -> None:  # the loop has accounted for everything and waits
        idle.set()
        await stored_after(after)

    monkeypatch.setattr(engine.store, "read", gated_read)
    monkeypatch.setattr(engine.store, "stored_after", waiting)
    slow = "".join(
        f"{stamp(T0 + s)} [5] app@shop/app LOG:  duration: 12.000 ms  statement: SELECT {s}\n" for s in range(3)
    )
    await engine.store.append(engine.identity, parse(slow), [], 0)
    task = loop_task = asyncio.create_task(engine.insights.run())
    try:
        await asyncio.sleep(0)  # the loop starts
        await engine.insights.catch_up()
        release.set()
        async with asyncio.timeout(5):
            await idle.wait()
        (query,) = await engine.insights.queries(engine.identity.code, None, None, "calls", 10)
        assert query.calls == 3
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def calls(t: float, sql: str, n: int = 1) -> str:
    return "".join(f"{stamp(t + i)} [7] app@shop/psql LOG:  duration: 1.000 ms  statement: {sql}\n" for i in range(n))


async def kept_queries(store: Store) -> dict[str, int]:
    """Each kept query's text and uses; and no time series is left of a query not kept."""

    def _q(c: sqlite3.Connection) -> dict[str, int]:
        kept = dict(c.execute("SELECT text, uses FROM insight_queries").fetchall())
        for table in ("insight_query_buckets", "insight_query_bins"):
            orphans = c.execute(
                f"SELECT count(*) FROM {table} t WHERE NOT EXISTS (SELECT 1 FROM insight_queries q"
                " WHERE q.db = t.db AND q.fingerprint = t.fingerprint)"
            ).fetchone()[0]
            assert orphans == 0, table
        return kept

    return await store.read(_q)


async def test_past_max_queries_the_least_used_are_forgotten_with_their_numbers(
    stored: tuple[Store, FakeClock, Identity],
) -> None:
    # As pg_stat_statements past pg_stat_statements.max: a log of one-off statements keeps the
    # queries used most (then the newest), 5% under the cap, not every statement ever seen.
    store, clock, identity = stored
    insights = Insights(store, clock, max_queries=100)
    frequent = "SELECT * FROM accounts WHERE id = 1"
    await store.append(identity, parse(calls(T0, frequent, 25)), [], 0)
    await insights.catch_up()
    assert await kept_queries(store) == {"SELECT * FROM accounts WHERE id = $1": 25}
    before = metrics.REGISTRY.get_sample_value("forwarder_insights_queries_forgotten_total", {"database_id": "main"})
    one_offs = "".join(calls(T0 + 100 + i, f"SELECT * FROM t{i} WHERE a = 1") for i in range(150))
    await store.append(identity, parse(one_offs + calls(T0 + 30, frequent, 25)), [], 0)  # seen before them all
    await insights.catch_up()
    kept = await kept_queries(store)
    assert len(kept) == 95  # 151 seen, 100 allowed: down to 5% under the cap
    assert kept.pop("SELECT * FROM accounts WHERE id = $1") == 50
    assert sorted(kept) == sorted(f"SELECT * FROM t{i} WHERE a = $1" for i in range(56, 150))
    after = metrics.REGISTRY.get_sample_value("forwarder_insights_queries_forgotten_total", {"database_id": "main"})
    assert (after or 0) - (before or 0) == 56


def test_an_upgraded_store_counts_the_uses_of_the_queries_it_kept(tmp_path: Path) -> None:
    conn = schema.connect(str(tmp_path / "v10.db"))
    for number in range(10):
        for statement in schema._split(schema.MIGRATIONS[number]):
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 10")
    conn.execute("INSERT INTO insight_queries VALUES (1, 'aaaaaaaaaaaaaaaa', 'SELECT $1', 0, 600000000, 1, '[]', '[]')")
    conn.executemany(
        "INSERT INTO insight_query_buckets VALUES (1, 'aaaaaaaaaaaaaaaa', ?, ?, 1.0, 1.0, 1.0, ?)",
        [(0, 3, 1), (300_000_000, 4, 0)],
    )
    conn.close()
    conn = open_sync(tmp_path / "v10.db")
    assert conn.execute("SELECT uses FROM insight_queries").fetchall() == [(8,)]  # calls and errors
    conn.close()


async def test_a_query_counts_its_calls_stored_before_and_after_fingerprints_took_8_bytes(
    stored: tuple[Store, FakeClock, Identity],
) -> None:
    # Stores written before keep a line's fingerprint as its 16 hex digits (text); new lines keep
    # its 8 bytes. The engine reads both as the same query.
    store, clock, identity = stored
    lines = parse(calls(T0, "SELECT * FROM accounts WHERE id = 1", 3))
    await store.append(identity, lines, [], 0)

    def as_before(c: sqlite3.Connection) -> list[object]:
        c.execute("UPDATE lines SET fingerprint = hex(fingerprint) WHERE id % 2 = 1")
        c.execute("UPDATE lines SET fingerprint = lower(fingerprint) WHERE typeof(fingerprint) = 'text'")
        return [t for (t,) in c.execute("SELECT typeof(fingerprint) FROM lines ORDER BY id")]

    assert await store.write(as_before) == ["text", "blob", "text"]
    await Insights(store, clock).catch_up()
    kept = await store.read(lambda c: c.execute("SELECT fingerprint, text, uses FROM insight_queries").fetchall())
    assert kept == [(lines[0].fingerprint, "SELECT * FROM accounts WHERE id = $1", 3)]
