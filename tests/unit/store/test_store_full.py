"""The store's background work (full-text index, retention) on a full disk: it pauses, then resumes."""

from __future__ import annotations

import asyncio
import errno
import sqlite3

import orjson
import pytest

from forwarder.clock import FakeClock
from forwarder.config import DatabaseConfig, LogSourceConfig
from forwarder.model import LogLine
from forwarder.store import Store
from forwarder.store import lines as L
from forwarder.store import state as S
from forwarder.store import store as store_module
from forwarder.store.store import (
    FTS_BATCH,
    FTS_BUSY_MIN_BATCH,
    FTS_MAX_TAIL,
    WRITE_RETRY_SECONDS,
    index_batch,
    write_failure_reason,
)
from tests.harness import limit_pages


async def test_indexing_pauses_while_the_disk_is_full_and_catches_up_after(store: Store, clock: FakeClock) -> None:
    db = DatabaseConfig(id="main", name="main", host="h", log=LogSourceConfig(path="/nonexistent/*.log"))
    ident = await store.register_database(db)
    now_us = int(clock.now() * 1_000_000)
    lines = [LogLine(time_us=now_us, severity="LOG", kind="other", message=f"message {i} " * 8) for i in range(3000)]
    await store.append(ident, lines, [], 0)
    await limit_pages(store, 1)  # the index needs pages it cannot have
    run = asyncio.create_task(store.run())
    try:
        async with asyncio.timeout(20):
            await clock.until_sleeping()  # the index write failed: waiting on the clock, not ended
        assert not run.done()
        assert (store.write_problem or "").startswith("disk full")
        assert await store._read(L.fts_watermark) == 0

        await limit_pages(store, 1 << 30)
        clock.advance(WRITE_RETRY_SECONDS)
        async with asyncio.timeout(20):
            # The index catches up in the store's own task; the write that got through clears the
            # problem once its coroutine resumes, which may be just after the index is readable.
            while await store._read(L.fts_watermark) < store.head_id or store.write_problem is not None:
                await asyncio.sleep(0.01)
        assert store.write_problem is None
    finally:
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), "disk full: the store cannot write"),
        (sqlite3.OperationalError("attempt to write a readonly database"), "the store cannot write: OperationalError"),
        (OSError(errno.ELOOP, "Too many levels of symbolic links"), None),  # a log file's, not the store's
        (sqlite3.IntegrityError("UNIQUE constraint failed"), None),  # a bug, not the disk
        (ValueError("x"), None),
    ],
)
def test_what_counts_as_the_store_failing_to_write(exc: BaseException, reason: str | None) -> None:
    got = write_failure_reason(exc)
    assert got == reason if reason is None else (got or "").startswith(reason)


async def test_the_index_keeps_up_while_lines_keep_arriving(store: Store, clock: FakeClock) -> None:
    # A search scans the lines not indexed yet: while a backlog is stored without a pause, the index
    # still follows the head closely enough for that scan to stay short.
    db = DatabaseConfig(id="main", name="main", host="h", log=LogSourceConfig(path="/nonexistent/*.log"))
    ident = await store.register_database(db)
    now_us = int(clock.now() * 1_000_000)
    batch = [LogLine(time_us=now_us, severity="LOG", kind="other", message=f"word{i}") for i in range(2000)]
    run = asyncio.create_task(store.run())
    try:
        async with asyncio.timeout(60):  # until the index is near the head, lines arriving all along
            while store.head_id < 3 * FTS_MAX_TAIL or (
                store.head_id - await store._read(L.fts_watermark) > FTS_MAX_TAIL + FTS_BATCH
            ):
                await store.append(ident, batch, [], 0)  # never a pause
    finally:
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run


@pytest.mark.parametrize("texts_max", [100_000, 3])
async def test_an_append_that_rolled_back_leaves_no_text_for_the_index(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, texts_max: int
) -> None:
    # The index takes a line's text from memory when the append left it there. An append that
    # fails after inserting its lines is rolled back and its ids go to the next append's lines:
    # those must be found by their own words, with room for texts in memory or none.
    monkeypatch.setattr(store_module, "FTS_TEXTS_MAX", texts_max)
    db = DatabaseConfig(id="main", name="main", host="h", log=LogSourceConfig(path="/nonexistent/*.log"))
    ident = await store.register_database(db)
    now_us = int(clock.now() * 1_000_000)

    def lines(word: str, n: int) -> list[LogLine]:
        return [LogLine(time_us=now_us, severity="LOG", kind="other", message=f"{word}{i}") for i in range(n)]

    await store.append(ident, lines("first", 2), [], 0)
    real_add_usage = S.add_usage

    def failing(*args: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(S, "add_usage", failing)
    with pytest.raises(sqlite3.OperationalError):
        await store.append(ident, lines("lost", 5), [], 0)
    monkeypatch.setattr(S, "add_usage", real_add_usage)
    await store.append(ident, lines("kept", 5), [], 0)
    while await store.index_once():
        pass
    assert await store._read(L.fts_watermark) == store.head_id  # all indexed: no text is read from documents

    page = await store.list_lines(ident.code, L.LineQuery(q="kept"))
    assert sorted(orjson.loads(d)["message"] for d in page.docs) == [f"kept{i}" for i in range(5)]
    assert (await store.list_lines(ident.code, L.LineQuery(q="lost"))).docs == []


@pytest.mark.parametrize(
    ("unindexed", "appending", "batch"),
    [
        (0, False, 0),
        (1, False, FTS_BATCH),  # quiet: whole batches
        (FTS_MAX_TAIL, True, 0),  # lines arriving: the tail may stay this long
        (FTS_MAX_TAIL + 1, True, FTS_BUSY_MIN_BATCH),  # a steady stream: small transactions
        (FTS_MAX_TAIL + FTS_BUSY_MIN_BATCH + 300, True, FTS_BUSY_MIN_BATCH + 300),  # an append's worth
        (FTS_MAX_TAIL + 10 * FTS_BATCH, True, FTS_BATCH),  # far behind: whole batches
    ],
)
def test_the_index_takes_what_is_past_its_tail_while_lines_arrive(unindexed: int, appending: bool, batch: int) -> None:
    # An append waits for the index transaction under way: under a steady stream the index takes
    # small ones; under a backlog an append's worth, so it keeps up (the test above).
    assert index_batch(unindexed, appending) == batch
