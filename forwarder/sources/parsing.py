"""Parsing beside the daemon: PostgreSQL log bytes in, rows for the store out, in a worker process.

The daemon's Python work is mostly parsing (pglog) and storing (SQLite, whose C code runs
without the GIL); in one process they share one core. A parse worker takes the parsing, the
value removal and the serialization of each line onto the second core, and hands back rows that
are ready to insert (store.lines.Row) with the reader's committed offset, so the follower's
exactly-once bookkeeping is the same as in process:

    follower --feed(chunk)--> worker: reader.feed -> encode_rows --> (rows, committed_offset)

A worker keeps the readers' state (pending entries); if it dies, the follower starts over from
the offsets in the store (`DatabaseFollower._start_over`) with new readers in a new worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol

from forwarder import metrics
from forwarder.model import LogLine
from forwarder.pglog import TimeCounts, make_reader
from forwarder.sources.parse_worker import (
    NOTHING_PARSED,
    Parsed,
    ReaderSpec,
    parsed,
    ready_lines,
    w_call,
    w_close,
    w_count,
    w_init,
    w_open,
)
from forwarder.store.lines import Row

__all__ = ["AsyncReader", "LocalReader", "ParseWorker", "ReaderSpec", "WorkerReader"]


def _count(database_id: str, unparsed: int, truncated: int) -> None:
    if unparsed:
        metrics.INGEST_PARSE_FAILURES.labels(database_id).inc(unparsed)
    if truncated:
        metrics.INGEST_TRUNCATED.labels(database_id).inc(truncated)


def _count_times(database_id: str, before: TimeCounts, after: TimeCounts) -> None:
    """The time fallbacks since `before` (a reader's counts only grow) into the metric."""
    if after.zone_mismatches > before.zone_mismatches:
        metrics.INGEST_TIME_FALLBACKS.labels(database_id, "zone_mismatch").inc(
            after.zone_mismatches - before.zone_mismatches
        )
    if after.read_time > before.read_time:
        metrics.INGEST_TIME_FALLBACKS.labels(database_id, "read_time").inc(after.read_time - before.read_time)


class AsyncReader(Protocol):
    """An EntryReader whose results are rows, possibly computed in another process."""

    full_text: bool

    @property
    def committed_offset(self) -> int: ...
    @property
    def lines_matched(self) -> int: ...
    @property
    def lines_other(self) -> int: ...
    @property
    def time_counts(self) -> TimeCounts: ...
    async def feed(self, data: bytes, now: float) -> list[Row]: ...
    async def flush_ready(self, now: float, at_end: bool) -> list[Row]:
        """The pending entry if it is complete: written whole with the data read ending at the end
        of the file (`at_end`; EntryReader.flush_written), or quiet long enough (flush_idle)."""
        ...

    async def flush(self) -> list[Row]: ...
    async def aclose(self) -> None: ...


class _Counts:
    """The counts of the `AsyncReader` protocol, from the last `Parsed` of a reader; metrics of each step."""

    def __init__(self, database_id: str) -> None:
        self._database_id = database_id
        self._last = NOTHING_PARSED

    @property
    def committed_offset(self) -> int:
        return self._last.committed_offset

    @property
    def lines_matched(self) -> int:
        return self._last.lines_matched

    @property
    def lines_other(self) -> int:
        return self._last.lines_other

    @property
    def time_counts(self) -> TimeCounts:
        return self._last.times

    def _took(self, step: Parsed) -> list[Row]:
        _count(self._database_id, step.unparsed, step.truncated)
        _count_times(self._database_id, self._last.times, step.times)
        self._last = step
        return step.rows


class LocalReader(_Counts):
    """Parses in this process (tests, `ingest.parse_workers = 0`)."""

    def __init__(self, spec: ReaderSpec, full_text: bool) -> None:
        super().__init__(spec.identity.database_id)
        self._reader = make_reader(
            spec.fmt,
            line_prefix=spec.line_prefix,
            timezone=spec.timezone,
            full_text=full_text,
            syslog_ident=spec.syslog_ident,
        )
        self._identity = spec.identity
        self.full_text = full_text

    def _done(self, lines: list[LogLine]) -> list[Row]:
        return self._took(parsed(self._reader, self._identity, lines))

    async def feed(self, data: bytes, now: float) -> list[Row]:
        self._reader.full_text = self.full_text
        return self._done(self._reader.feed(data, now))

    async def flush_ready(self, now: float, at_end: bool) -> list[Row]:
        self._reader.full_text = self.full_text
        return self._done(ready_lines(self._reader, now, at_end))

    async def flush(self) -> list[Row]:
        self._reader.full_text = self.full_text
        return self._done(self._reader.flush())

    async def aclose(self) -> None:
        return None


# --- in the daemon --------------------------------------------------------------------------


class ParseWorker:
    """One worker process and the readers that live in it; `aclose()` stops it."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._handles = itertools.count(1)

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # spawn: a fresh interpreter, no copy of the daemon's event loop or open connections.
            self._pool = ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=w_init,
                initargs=(os.getpid(),),
            )
        return self._pool

    async def call(self, fn: Any, *args: Any) -> Any:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor(), fn, *args)
        except BrokenProcessPool:
            # The worker died: its readers are gone. The next call starts a new one; the follower
            # starts over from the stored offsets.
            self._pool = None
            raise

    async def open(self, spec: ReaderSpec, full_text: bool) -> WorkerReader:
        handle = next(self._handles)
        await self.call(w_open, handle, spec, full_text)
        return WorkerReader(self, handle, full_text, spec.identity.database_id)

    async def reader_count(self) -> int:
        """How many readers live in the worker (each holds a pending entry until closed)."""
        count: int = await self.call(w_count)
        return count

    async def aclose(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


class WorkerReader(_Counts):
    """A reader living in a ParseWorker."""

    def __init__(self, worker: ParseWorker, handle: int, full_text: bool, database_id: str) -> None:
        super().__init__(database_id)
        self._worker = worker
        self._handle = handle
        self.full_text = full_text

    async def _call(self, op: str, data: bytes = b"", now: float = 0.0) -> list[Row]:
        step: Parsed = await self._worker.call(w_call, self._handle, op, self.full_text, data, now)
        return self._took(step)

    async def feed(self, data: bytes, now: float) -> list[Row]:
        return await self._call("feed", data, now)

    async def flush_ready(self, now: float, at_end: bool) -> list[Row]:
        return await self._call("ready" if at_end else "idle", b"", now)

    async def flush(self) -> list[Row]:
        return await self._call("flush")

    async def aclose(self) -> None:
        with contextlib.suppress(BrokenProcessPool):
            await self._worker.call(w_close, self._handle)
