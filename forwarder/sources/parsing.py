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
import ctypes
import itertools
import multiprocessing
import os
import signal
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Protocol

from forwarder import metrics
from forwarder.model import LogLine
from forwarder.pglog import EntryReader, Format, make_reader
from forwarder.store.lines import Identity, Row, encode_rows


@dataclass(frozen=True, slots=True)
class ReaderSpec:
    """What a reader of one file needs to know."""

    fmt: Format
    line_prefix: str
    timezone: str
    identity: Identity


Parsed = tuple[list[Row], int, int, int, int]  # rows, committed offset, lines matched, unparsed, truncated


def _rows(identity: Identity, lines: list[LogLine]) -> tuple[list[Row], int, int]:
    """Rows to store, and how many of the lines were not in the format and how many were cut."""
    unparsed = truncated = 0
    for line in lines:
        if line.unparsed:
            unparsed += 1
        if line.truncated:
            truncated += 1
    return encode_rows(identity, lines), unparsed, truncated


def _count(database_id: str, unparsed: int, truncated: int) -> None:
    if unparsed:
        metrics.INGEST_PARSE_FAILURES.labels(database_id).inc(unparsed)
    if truncated:
        metrics.INGEST_TRUNCATED.labels(database_id).inc(truncated)


class AsyncReader(Protocol):
    """An EntryReader whose results are rows, possibly computed in another process."""

    full_text: bool

    @property
    def committed_offset(self) -> int: ...
    @property
    def lines_matched(self) -> int: ...
    async def feed(self, data: bytes, now: float) -> list[Row]: ...
    async def flush_ready(self, now: float, at_end: bool) -> list[Row]:
        """The pending entry if it is complete: written whole with the data read ending at the end
        of the file (`at_end`; EntryReader.flush_written), or quiet long enough (flush_idle)."""
        ...

    async def flush(self) -> list[Row]: ...
    async def aclose(self) -> None: ...


class LocalReader:
    """Parses in this process (tests, `ingest.parse_workers = 0`)."""

    def __init__(self, spec: ReaderSpec, full_text: bool) -> None:
        self._reader = make_reader(spec.fmt, line_prefix=spec.line_prefix, timezone=spec.timezone, full_text=full_text)
        self._identity = spec.identity
        self.full_text = full_text

    @property
    def committed_offset(self) -> int:
        return self._reader.committed_offset

    @property
    def lines_matched(self) -> int:
        return self._reader.lines_matched

    def _done(self, lines: list[LogLine]) -> list[Row]:
        rows, unparsed, truncated = _rows(self._identity, lines)
        _count(self._identity.database_id, unparsed, truncated)
        return rows

    async def feed(self, data: bytes, now: float) -> list[Row]:
        self._reader.full_text = self.full_text
        return self._done(self._reader.feed(data, now))

    async def flush_ready(self, now: float, at_end: bool) -> list[Row]:
        self._reader.full_text = self.full_text
        return self._done(_ready(self._reader, now, at_end))

    async def flush(self) -> list[Row]:
        self._reader.full_text = self.full_text
        return self._done(self._reader.flush())

    async def aclose(self) -> None:
        return None


def _ready(reader: EntryReader, now: float, at_end: bool) -> list[LogLine]:
    lines = reader.flush_written() if at_end else []
    return lines + reader.flush_idle(now)


# --- in the worker process ------------------------------------------------------------------

_READERS: dict[int, tuple[EntryReader, Identity]] = {}


PARENT_CHECK_SECONDS = 0.5
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _w_init(daemon_pid: int) -> None:
    """The daemon decides when the worker stops: Ctrl-C in a terminal (SIGINT to the whole process
    group) or systemd's SIGTERM to every process of the unit must not kill it while the daemon
    still drains pending entries through it. It exits when the daemon closes the pool, or dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _exit_with(daemon_pid)


def _exit_with(daemon_pid: int) -> None:
    """End this process as soon as the daemon is gone, however it went (kill -9, OOM killer).

    Nothing else would end it: it ignores SIGTERM, and it holds both ends of the pool's queue
    pipes, so it never sees EOF. While it lives, multiprocessing's resource tracker (which exits
    on EOF of a pipe the worker also holds) lives too. Two guards:
    - Linux's PR_SET_PDEATHSIG (prctl(2)) sends SIGKILL when the parent exits. It fires when the
      *thread* that forked us exits, which is the daemon's event loop thread here; and a parent
      that died before the call is not covered, hence the getppid() check right after it.
    - A thread that checks every PARENT_CHECK_SECONDS that we were not re-parented (to PID 1 or a
      subreaper), for other systems and for the cases prctl does not cover.
    """
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != daemon_pid:
        os._exit(0)
    threading.Thread(target=_watch_daemon, args=(daemon_pid,), name="watch-daemon", daemon=True).start()


def _watch_daemon(daemon_pid: int) -> None:
    event = threading.Event()
    while not event.wait(PARENT_CHECK_SECONDS):
        if os.getppid() != daemon_pid:
            os._exit(0)  # no cleanup to do: the readers' state is rebuilt from the store's offsets


def _w_open(handle: int, spec: ReaderSpec, full_text: bool) -> None:
    reader = make_reader(spec.fmt, line_prefix=spec.line_prefix, timezone=spec.timezone, full_text=full_text)
    _READERS[handle] = (reader, spec.identity)


def _w_call(handle: int, op: str, full_text: bool, data: bytes, now: float) -> Parsed:
    reader, identity = _READERS[handle]
    reader.full_text = full_text
    if op == "feed":
        lines = reader.feed(data, now)
    elif op == "idle":
        lines = _ready(reader, now, False)
    elif op == "ready":
        lines = _ready(reader, now, True)
    else:
        lines = reader.flush()
    rows, unparsed, truncated = _rows(identity, lines)
    return rows, reader.committed_offset, reader.lines_matched, unparsed, truncated


def _w_close(handle: int) -> None:
    _READERS.pop(handle, None)


def _w_count() -> int:
    return len(_READERS)


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
                initializer=_w_init,
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
        await self.call(_w_open, handle, spec, full_text)
        return WorkerReader(self, handle, full_text, spec.identity.database_id)

    async def reader_count(self) -> int:
        """How many readers live in the worker (each holds a pending entry until closed)."""
        count: int = await self.call(_w_count)
        return count

    async def aclose(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


class WorkerReader:
    """A reader living in a ParseWorker."""

    def __init__(self, worker: ParseWorker, handle: int, full_text: bool, database_id: str) -> None:
        self._worker = worker
        self._database_id = database_id
        self._handle = handle
        self.full_text = full_text
        self._committed = 0
        self._matched = 0

    @property
    def committed_offset(self) -> int:
        return self._committed

    @property
    def lines_matched(self) -> int:
        return self._matched

    async def _call(self, op: str, data: bytes = b"", now: float = 0.0) -> list[Row]:
        parsed: Parsed = await self._worker.call(_w_call, self._handle, op, self.full_text, data, now)
        rows, self._committed, self._matched, unparsed, truncated = parsed
        _count(self._database_id, unparsed, truncated)
        return rows

    async def feed(self, data: bytes, now: float) -> list[Row]:
        return await self._call("feed", data, now)

    async def flush_ready(self, now: float, at_end: bool) -> list[Row]:
        return await self._call("ready" if at_end else "idle", b"", now)

    async def flush(self) -> list[Row]:
        return await self._call("flush")

    async def aclose(self) -> None:
        with contextlib.suppress(BrokenProcessPool):
            await self._worker.call(_w_close, self._handle)
