"""The parse worker process stays small: it loads what parsing needs, not the daemon's libraries."""

from __future__ import annotations

import asyncio
import gc
import os
import signal

import pytest

from forwarder import metrics
from forwarder.sources.parsing import ParseWorker, ParseWorkerGone, ReaderSpec, WorkerReader, WorkerStartError
from forwarder.store.lines import Identity

# What the daemon needs and a worker must not pay for (each costs resident memory in every worker).
DAEMON_ONLY = ("prometheus_client", "asyncio", "aiohttp", "pydantic", "forwarder.metrics", "forwarder.store.store")

SPEC = ReaderSpec("stderr", "%m [%p] ", "UTC", Identity(code=1, database_id="main", database_name="main", host="h"))
ENTRY = b'2026-11-22 10:00:00.000 UTC [100] ERROR:  relation "t1" does not exist\n'


async def test_a_worker_parses_entries_into_rows() -> None:
    worker = ParseWorker()
    try:
        reader = await worker.open(SPEC, full_text=False)
        assert isinstance(reader, WorkerReader)
        rows = await reader.feed(ENTRY, 0.0) + await reader.flush()
        assert len(rows) == 1
        assert reader.committed_offset == len(ENTRY)
        await reader.aclose()
        assert await worker.reader_count() == 0
    finally:
        await worker.aclose()


async def test_the_worker_process_holds_nothing_of_the_daemon() -> None:
    """What the worker process has loaded once it parsed: the calls it unpickled and what they
    import (its resident memory counts in the daemon's footprint)."""
    worker = ParseWorker()
    try:
        reader = await worker.open(SPEC, full_text=False)
        assert len(await reader.feed(ENTRY, 0.0) + await reader.flush()) == 1
        loaded: list[str] = await worker.call(eval, "sorted(__import__('sys').modules)")
        assert "forwarder.pglog" in loaded
        assert [m for m in (*DAEMON_ONLY, "multiprocessing", "concurrent.futures") if m in loaded] == []
    finally:
        await worker.aclose()


async def test_a_call_that_fails_in_the_worker_raises_at_the_caller_and_the_worker_goes_on() -> None:
    worker = ParseWorker()
    try:
        with pytest.raises(ValueError, match="invalid literal"):
            await worker.call(int, "not a number")
        await worker.call(print, "a stray print goes to standard error, not into the results")
        assert await worker.call(len, "four") == 4
    finally:
        await worker.aclose()


def worker_exits() -> float:
    return metrics.REGISTRY.get_sample_value("forwarder_parse_worker_exits_total") or 0.0


async def test_a_worker_that_dies_fails_its_callers_and_the_next_call_starts_another() -> None:
    worker = ParseWorker()
    exits = worker_exits()
    try:
        await worker.open(SPEC, full_text=False)
        first = worker.pid
        assert first is not None and await worker.reader_count() == 1
        os.kill(first, signal.SIGKILL)
        with pytest.raises(ParseWorkerGone, match="exited"):
            await worker.reader_count()
        assert await worker.reader_count() == 0  # a new process: the readers died with the old one
        assert worker.pid not in (None, first)
        # Counted: the overview shows the failure only until the next poll, a scrape may miss it.
        assert worker_exits() == exits + 1
    finally:
        await worker.aclose()
    assert worker_exits() == exits + 1  # an exit asked for is not one


async def test_closing_ends_the_worker_process() -> None:
    worker = ParseWorker()
    await worker.open(SPEC, full_text=False)
    pid = worker.pid
    assert pid is not None
    await worker.aclose()
    assert worker.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # exited and reaped


async def test_a_feed_started_ahead_moves_the_counts_only_once_it_is_taken() -> None:
    """The follower stores a batch with the reader's offset: it must be that of the rows taken,
    not of a feed the worker already parsed beside them."""
    entries = [ENTRY.replace(b"t1", f"t{n}".encode()) for n in range(3)]
    worker = ParseWorker()
    try:
        reader = await worker.open(SPEC, full_text=False)
        started = [reader.start_feed(entry, 0.0) for entry in entries]
        await worker.call(len, "")  # sent after the feeds: once it answers, all three are parsed
        taken = []
        for feed in started:
            rows = await feed
            taken.append((len(rows), reader.committed_offset))
        # An entry is complete when the next one begins: the third is still pending.
        assert taken == [(0, 0), (1, len(entries[0])), (1, len(entries[0]) + len(entries[1]))]
    finally:
        await worker.aclose()


async def test_a_feed_started_ahead_and_closed_leaves_no_trace(caplog: pytest.LogCaptureFixture) -> None:
    worker = ParseWorker()
    try:
        reader = await worker.open(SPEC, full_text=False)
        reader.start_feed(ENTRY, 0.0).close()
        pid = worker.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        ahead = reader.start_feed(ENTRY, 0.0)  # the worker died: the result says so, once taken
        with pytest.raises(ParseWorkerGone):
            await ahead
        reader.start_feed(ENTRY, 0.0).close()  # a result never taken is not logged as lost
        await asyncio.sleep(0)
        gc.collect()
        assert "never retrieved" not in caplog.text
    finally:
        await worker.aclose()


async def test_a_worker_that_cannot_start_says_so_not_that_the_log_is_unreadable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The interpreter's directory closed to the daemon's user made exec fail with EACCES, which
    # the follower took for an unreadable log file ("permission_denied") and retried in silence.
    monkeypatch.setattr("sys.executable", "/nonexistent/python3")
    worker = ParseWorker()
    try:
        with pytest.raises(WorkerStartError, match="cannot start a parse worker") as caught:
            await worker.open(SPEC, full_text=False)
        assert not isinstance(caught.value, OSError)
    finally:
        await worker.aclose()


async def test_a_reader_in_the_worker_says_when_it_holds_a_line_whose_rest_still_comes() -> None:
    """A clean stop must not flush it (DatabaseFollower.drain): the worker passes it on."""
    worker = ParseWorker()
    try:
        reader = await worker.open(ReaderSpec("cri", "%m [%p] ", "UTC", SPEC.identity), full_text=False)
        record = b"2026-11-22T10:00:00.5Z stderr %s 2026-11-22 10:00:00.000 UTC [7] LOG:  statement: select 1\n"
        assert await reader.feed(record % b"P", 0.0) == [] and reader.unfinished
        await reader.feed(b"2026-11-22T10:00:00.5Z stderr F ;\n", 0.0)
        assert not reader.unfinished
        assert len(await reader.flush()) == 1
        await reader.aclose()
    finally:
        await worker.aclose()
