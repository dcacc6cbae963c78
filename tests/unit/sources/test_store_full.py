"""The follower when the store cannot write (a full disk), and the size of what it hands the store."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from forwarder import metrics
from forwarder.clock import FakeClock
from forwarder.config import DatabaseConfig, LogSourceConfig
from forwarder.sources import tail
from forwarder.sources.parsing import ParseWorker
from forwarder.sources.tail import DatabaseFollower
from forwarder.store import LineQuery, Store
from forwarder.store.lines import ROW_DOC, Identity, Row
from forwarder.store.state import SourceFile
from tests.harness import all_messages, limit_pages, statuses_at_each_write

PREFIX = "%m [%p] "


def entry(i: int) -> bytes:
    return f'2026-11-22 10:00:{i % 60:02d}.000 UTC [{100 + i}] ERROR:  relation "t{i}" does not exist\n'.encode()


@pytest.fixture
async def worker() -> AsyncIterator[ParseWorker]:
    w = ParseWorker()
    yield w
    await w.aclose()


async def follower(store: Store, glob: str, clock: FakeClock, worker: ParseWorker | None = None) -> DatabaseFollower:
    db = DatabaseConfig(id="main", name="main", host="h", log=LogSourceConfig(path=glob, line_prefix=PREFIX))
    f = DatabaseFollower(db, await store.register_database(db), store, clock, worker)
    f._known = {(sf.dev, sf.ino): sf for sf in await store.source_files("main")}
    return f


def sample(name: str, labels: dict[str, str] | None = None) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels or {}) or 0.0


async def test_a_full_store_closes_the_dropped_readers_logs_at_a_bounded_rate_and_recovers_without_loss(
    store: Store, clock: FakeClock, worker: ParseWorker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    n = 500  # more than the free space of a new store's pages: the append needs new pages
    (tmp_path / "pg.log").write_bytes(b"".join(entry(i) for i in range(n)))
    f = await follower(store, str(tmp_path / "*.log"), clock, worker)
    full_before = sample("forwarder_store_write_failures_total", {"reason": "disk_full"})
    await limit_pages(store, 1)

    polls = 10
    for _ in range(polls):
        await f.poll_or_start_over()
        # Each failed poll opened a reader in the worker; it is closed when the follower drops it.
        assert await worker.reader_count() == 0
    assert f.status.state == "error"
    assert (f.status.reason or "").startswith("disk full")
    assert store.write_problem is not None and store.write_problem.startswith("disk full")
    assert sample("forwarder_store_writable") == 0
    assert sample("forwarder_store_write_failures_total", {"reason": "disk_full"}) - full_before == polls
    # One report, from the store, with the details and no traceback (SQLite's failure, not a bug):
    # the follower read the log fine and does not report the store's failure as its own.
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in errors] == ["a store write failed"]
    assert errors[0].exc_info is None and "database or disk is full" in errors[0].__dict__["error"]

    clock.advance(61)  # a minute on: one summary line, without a traceback
    await f.poll_or_start_over()
    again = [r for r in caplog.records if r.levelno >= logging.ERROR][1:]
    assert len(again) == 1 and all(r.exc_info is None and r.__dict__["repeats"] == 10 for r in again)
    assert again[0].getMessage() == errors[0].getMessage()  # one message to group by, the count a field

    await limit_pages(store, 1 << 30)  # space is freed
    await f.poll_or_start_over()
    await f.drain()
    assert f.status.state == "reading"
    assert store.write_problem is None and sample("forwarder_store_writable") == 1
    assert await all_messages(store) == [f'relation "t{i}" does not exist' for i in range(n)]
    assert await worker.reader_count() == 0  # drained: closed
    assert "the store writes again" in caplog.messages and "reading the log failed" not in caplog.messages


async def test_the_status_says_reading_again_with_the_first_write_that_works(
    store: Store, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # After a full disk the log has piled up: the poll that finds space again reads it all in
    # batches, and the overview must not say "disk full" until that backlog is stored.
    monkeypatch.setattr(tail, "APPEND_LINES", 100)
    monkeypatch.setattr(tail, "FEED_LINES", 25)
    n = 500
    (tmp_path / "pg.log").write_bytes(b"".join(entry(i) for i in range(n)))
    f = await follower(store, str(tmp_path / "*.log"), clock)
    await limit_pages(store, 1)
    await f.poll_or_start_over()
    assert f.status.state == "error" and (f.status.reason or "").startswith("disk full")

    await limit_pages(store, 1 << 30)  # space is freed
    statuses = statuses_at_each_write(f, store, monkeypatch)  # as each batch of the next poll is stored
    await f.poll_or_start_over()
    seen = [(s.state, s.reason) for s in statuses]
    assert len(seen) >= 4  # the backlog took several batches
    assert seen[0][0] == "error"  # nothing stored yet in this poll
    assert seen[1:] == [("reading", None)] * (len(seen) - 1)
    assert f.status.state == "reading"
    await f.drain()
    assert len(await all_messages(store)) == n


async def test_a_failed_commit_leaves_no_transaction_open(store: Store) -> None:
    """A COMMIT that fails (ENOSPC writing the WAL; here a deferred constraint, which fails the same
    way at COMMIT) is rolled back: the store's next write works instead of failing for good."""

    def violate(c: sqlite3.Connection) -> None:
        c.execute("CREATE TEMP TABLE parent (id INTEGER PRIMARY KEY)")
        c.execute("CREATE TEMP TABLE child (p REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)")
        c.execute("INSERT INTO child VALUES (1)")

    with pytest.raises(sqlite3.IntegrityError):
        await store._write(violate)
    _, key = await store.create_key("after", "read-only")
    assert await store.verify_key(key) is not None  # committed, seen by the readers


async def test_a_flood_of_tiny_lines_is_stored_in_bounded_batches(
    store: Store, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tail, "APPEND_LINES", 1000)
    monkeypatch.setattr(tail, "FEED_LINES", 100)
    monkeypatch.setattr(tail, "APPEND_BYTES", 64 * 1024)
    monkeypatch.setattr(tail, "FEED_BYTES", 8 * 1024)
    n = 60_000  # more than one chunk's read
    (tmp_path / "pg.log").write_bytes(b"word\n" * n)  # each line an entry of kind other
    batches: list[tuple[int, int]] = []
    real_append = store.append_rows

    async def recording(identity: Identity, rows: Sequence[Row], files: Sequence[SourceFile], raw: int) -> int:
        batches.append((len(rows), sum(len(r[ROW_DOC]) for r in rows)))
        return await real_append(identity, rows, files, raw)

    monkeypatch.setattr(store, "append_rows", recording)
    f = await follower(store, str(tmp_path / "*.log"), clock)
    await f.poll()
    await f.drain()
    largest_doc = max(len(d) for d in (await store.list_lines(1, LineQuery(limit=500))).docs)
    assert sum(count for count, _ in batches) == n
    assert max(count for count, _ in batches) <= 1000
    # Stored as soon as it reaches the byte bound: past it by one feed's rows at most.
    assert max(nbytes for _, nbytes in batches) <= 64 * 1024 + 100 * largest_doc
