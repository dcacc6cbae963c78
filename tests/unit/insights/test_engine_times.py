"""The engine with the real rules and lines stamped at odd times: old episodes, lines ahead of the
daemon's clock, late lines, backlogs, and what retention deleted."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from forwarder import metrics
from forwarder.clock import FakeClock
from forwarder.config import DatabaseConfig, LogSourceConfig, StoreConfig
from forwarder.insights import findings as F
from forwarder.insights.engine import Insights
from forwarder.insights.model import Finding
from forwarder.store import Identity, Store
from tests.unit.insights.logtext import parse, stamp

T0 = 1_800_000_000.0  # a whole minute
HOUR = 3600.0
DAY = 86_400.0
US = 1_000_000


@dataclass
class World:
    store: Store
    clock: FakeClock
    identity: Identity
    insights: Insights

    async def add(self, text: str, *, full_text: bool = False) -> None:
        await self.store.append(self.identity, parse(text, full_text=full_text), [], 0)
        await self.insights.catch_up()

    async def findings(self, status: str | None = None) -> dict[str, Finding]:
        return {f.rule: f for f, _ in await self.insights.findings(self.identity.code, status, None, 50)}

    async def at(self, time_s: float) -> None:
        """Sweep at `time_s` on the daemon's clock."""
        self.clock.advance(time_s - self.clock.now())
        await self.insights.sweep()


@contextlib.asynccontextmanager
async def world(tmp_path: Path, start: float, retention_days: float = 7) -> AsyncIterator[World]:
    clock = FakeClock(start=start)
    store = Store(StoreConfig(path=tmp_path / "s.db", retention_days=retention_days), clock)
    await store.start()
    try:
        identity = await store.register_database(
            DatabaseConfig(id="main", name="main", host="h", log=LogSourceConfig(path=str(tmp_path / "*.log")))
        )
        insights = Insights(store, clock, retention_days=retention_days, database_ids=["main"])
        yield World(store, clock, identity, insights)
    finally:
        await store.aclose()


def deadlock(t: float, statement_1: str = "SELECT 1", statement_2: str = "SELECT 2") -> str:
    s = stamp(t)
    return (
        f"{s} [10] app@shop/psql ERROR:  deadlock detected\n"
        f"{s} [10] app@shop/psql DETAIL:  Process 10 waits for ShareLock on transaction 750; blocked by process 11.\n"
        "\tProcess 11 waits for ShareLock on transaction 751; blocked by process 10.\n"
        f"\tProcess 10: {statement_1}\n"
        f"\tProcess 11: {statement_2}\n"
        f'{s} [10] app@shop/psql CONTEXT:  while updating tuple (0,1) in relation "accounts"\n'
    )


def auth_failure(t: float) -> str:
    return f'{stamp(t)} [5] app@shop/psql FATAL:  password authentication failed for user "app"\n'


def server_log(t: float, message: str) -> str:
    return f"{stamp(t)} [3] @/ LOG:  {message}\n"


async def test_a_value_of_a_line_retention_deleted_never_shows_in_a_new_finding(tmp_path: Path) -> None:
    async with world(tmp_path, T0 - 10 * DAY) as w:
        s = stamp(T0 - 10 * DAY)
        await w.add(
            f"{s} [5] app@shop/psql ERROR:  database is not accepting commands to avoid wraparound data loss"
            ' in database "shop"\n'
        )
        # Logged while full_text was on: the values are in the statements.
        await w.add(deadlock(T0 - 10 * DAY, "UPDATE accounts SET ssn = '123-45-6789' WHERE id = 1"), full_text=True)
        await w.at(T0 - 8 * DAY)
        await w.at(T0)
        assert await w.store.retention_once() == 2
        # The sweep forgot what the deleted lines were, in its own tables too.
        kept = await w.store.read(lambda c: [str(r[0]) for r in c.execute("SELECT samples FROM insight_subjects")])
        assert not any("123-45-6789" in raw for raw in kept)
        s = stamp(T0)
        await w.add(f'{s} [5] app@shop/psql WARNING:  database "shop" must be vacuumed within 39985967 transactions\n')
        await w.add(deadlock(T0))
        found = await w.findings("open")
        dead, wrap = found["deadlocks"], found["wraparound"]
        assert "123-45-6789" not in dead.summary + str(dead.evidence.facts)
        assert dead.evidence.facts["statements"] == ["SELECT $1"]
        assert "stopped" not in wrap.evidence.facts and "no longer accepts" not in wrap.summary
        assert wrap.evidence.facts["min_xids_left"] == 39985967
        # Only the new lines are the evidence: none of them is gone.
        for f, gone in await w.insights.findings(w.identity.code, "open", None, 50):
            assert len(f.evidence.line_ids) == 1 and gone == set(), f.rule


async def test_evidence_holds_only_the_lines_of_the_window(tmp_path: Path) -> None:
    async with world(tmp_path, T0) as w:
        await w.add(deadlock(T0, "UPDATE old_episode SET x = 1"))
        await w.at(T0 + 2 * HOUR)
        old = (await w.findings())["deadlocks"]
        assert old.status == "resolved"
        await w.add(deadlock(T0 + 2 * HOUR, "UPDATE new_episode SET x = 1"))
        dead = (await w.findings("open"))["deadlocks"]
        assert dead.evidence.count == 1
        assert dead.evidence.facts["statements"] == ["UPDATE new_episode SET x = $1", "SELECT $1"]
        (line_id,) = dead.evidence.line_ids
        assert line_id > max(old.evidence.line_ids)  # the new line's, none of the old episode's
        assert dead.evidence.window_from_us >= int((T0 + HOUR) * US)


async def test_a_line_stamped_ahead_of_the_clock_is_not_resolved_before_it_was_written(tmp_path: Path) -> None:
    async with world(tmp_path, T0) as w:
        await w.add(deadlock(T0 + 300))  # the server's clock is 5 minutes ahead of ours
        await w.at(T0 + 60)
        dead = (await w.findings())["deadlocks"]
        assert dead.status == "open"
        await w.at(T0 + 300 + HOUR + 120)
        dead = (await w.findings())["deadlocks"]
        assert dead.status == "resolved" and dead.resolved_us is not None
        assert dead.resolved_us >= dead.last_seen_us + int(HOUR * US)


async def test_an_older_line_stored_after_newer_ones_does_not_resolve_a_current_finding(tmp_path: Path) -> None:
    async with world(tmp_path, T0 + 30) as w:
        await w.add("".join(auth_failure(T0 + i) for i in range(6)))
        assert (await w.findings())["auth_failures"].status == "open"
        await w.add(auth_failure(T0 - 2 * HOUR))
        auth = (await w.findings())["auth_failures"]
        assert (auth.status, auth.evidence.count, auth.resolved_us) == ("open", 6, None)


async def test_a_backlog_past_its_window_records_the_finding_resolved_when_the_rule_resolves_it(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, T0) as w:
        await w.at(T0)
        await w.add("".join(deadlock(T0 - 25 * HOUR + i) for i in range(12)))
        assert await w.findings("open") == {}  # at once, not at the next sweep
        dead = (await w.findings())["deadlocks"]
        assert (dead.status, dead.evidence.count, dead.severity) == ("resolved", 12, "critical")
        assert dead.resolved_us is not None
        # An hour after the last deadlock, to the minute its window counts in.
        assert dead.last_seen_us + HOUR * US <= dead.resolved_us <= dead.last_seen_us + (HOUR + 60) * US


async def test_last_seen_is_the_newest_line_not_the_last_sweep(tmp_path: Path) -> None:
    # `from` lists findings last seen at or after it: a sweep that found nothing new must not
    # make an hour-old deadlock look current.
    async with world(tmp_path, T0) as w:
        await w.add(deadlock(T0 + 5))
        for minutes in (10, 30, 59):
            await w.at(T0 + minutes * 60)
        dead = (await w.findings())["deadlocks"]
        assert (dead.status, dead.last_seen_us) == ("open", int((T0 + 5) * US))
        recent = await w.insights.findings(w.identity.code, None, int((T0 + 30 * 60) * US), 10)
        assert recent == []


async def test_a_finding_the_daemon_was_stopped_through_resolves_when_the_rule_resolves_it(tmp_path: Path) -> None:
    async with world(tmp_path, T0 + 30) as w:
        await w.add(deadlock(T0 + 10))
        await w.at(T0 + 600)
        assert (await w.findings())["deadlocks"].status == "open"
        w.clock.advance(3 * HOUR)  # stopped for three hours; the first sweep after the start
        fresh = Insights(w.store, w.clock, retention_days=7, database_ids=["main"])
        await fresh.sweep()
        dead = {f.rule: f for f, _ in await fresh.findings(w.identity.code, None, None, 50)}["deadlocks"]
        assert dead.status == "resolved" and dead.resolved_us is not None
        # An hour after the last deadlock, to the minute its window counts in; not the restart.
        assert dead.last_seen_us + HOUR * US <= dead.resolved_us <= dead.last_seen_us + (HOUR + 60) * US


async def test_a_removed_database_gets_no_findings_open_series_again(tmp_path: Path) -> None:
    def series() -> set[tuple[str, str]]:
        return {
            (s.labels["database_id"], s.labels["severity"])
            for fam in metrics.FINDINGS_OPEN.collect()
            for s in fam.samples
        }

    async with world(tmp_path, T0) as w:
        await w.add(deadlock(T0))
        await w.at(T0 + 60)
        assert ("main", "warning") in series()
        w.insights.configure([])  # a reload removed `main`...
        metrics.forget_database("main")  # ...and its series (app.py)
        await w.at(T0 + 120)
        assert not {s for s in series() if s[0] == "main"}


CHECKPOINT_COMPLETE = (
    "checkpoint complete: wrote 10 buffers (0.1%); 0 WAL file(s) added, 0 removed, 0 recycled;"
    " write=0.001 s, sync=0.001 s, total=0.002 s; sync files=2, longest=0.001 s, average=0.001 s;"
    " distance=16384 kB, estimate=16384 kB; lsn=0/1000000, redo lsn=0/1000000"
)


@pytest.mark.parametrize("wal_starting", [True, False])
async def test_a_too_frequently_warning_keeps_the_finding_open_for_its_hour(tmp_path: Path, wal_starting: bool) -> None:
    async with world(tmp_path, T0) as w:
        first = server_log(T0, "checkpoints are occurring too frequently (9 seconds apart)")
        if wal_starting:
            first += server_log(T0, "checkpoint starting: wal")
        await w.add(first + server_log(T0 + 5, CHECKPOINT_COMPLETE))
        # Timed checkpoints every 5 minutes: their "complete" lines must not push the warning out.
        for k in range(1, 12):
            t = T0 + 300 * k
            await w.add(server_log(t, "checkpoint starting: time") + server_log(t + 5, CHECKPOINT_COMPLETE))
            await w.at(t + 10)
            found = (await w.findings())["checkpoints"]
            assert found.status == "open", k
            assert found.evidence.facts["min_seconds_apart"] == 9
        await w.at(T0 + HOUR + 120)
        assert (await w.findings())["checkpoints"].status == "resolved"


async def test_a_subject_stored_before_lines_kept_their_times_is_read_as_of_its_newest_line(tmp_path: Path) -> None:
    async with world(tmp_path, T0) as w:
        code = w.identity.code

        def legacy(c: sqlite3.Connection) -> None:
            c.execute(
                "INSERT INTO insight_subjects (db, rule, subject, line_ids, samples, last_us) VALUES (?,?,?,?,?,?)",
                (code, "deadlocks", "accounts", "[1001, 1002]", '[{"statement_1": "SELECT 1"}]', int(T0 * US)),
            )

        await w.store.write(legacy)
        hist = await w.store.read(
            lambda c: F.history(c, code, "main", "deadlocks", "accounts", int(HOUR * US), int((T0 + 60) * US))
        )
        assert (hist.line_ids, hist.samples) == ((1001, 1002), ({"statement_1": "SELECT 1"},))
        await w.add(deadlock(T0 + 2 * HOUR))  # the old ones are out of the new line's window: dropped
        raw = await w.store.read(lambda c: c.execute("SELECT line_ids FROM insight_subjects").fetchone()[0])
        ((line_id, time_us),) = orjson.loads(raw)
        assert line_id < 1001 and time_us == int((T0 + 2 * HOUR) * US)
