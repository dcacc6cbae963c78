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
import collections
import contextlib
import itertools
import logging
import pickle
import subprocess
import sys
from collections.abc import Coroutine
from typing import Any, Final, Protocol

from forwarder import metrics
from forwarder.model import LogLine
from forwarder.pglog import TimeCounts, make_reader
from forwarder.sources.parse_worker import (
    FRAME_HEADER_BYTES,
    NOTHING_PARSED,
    Parsed,
    ReaderSpec,
    parsed,
    ready_lines,
    w_call,
    w_close,
    w_count,
    w_open,
)
from forwarder.store.lines import Row

log = logging.getLogger(__name__)

__all__ = ["AsyncReader", "LocalReader", "ParseWorker", "ParseWorkerGone", "ReaderSpec", "WorkerReader"]


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
    @property
    def unfinished(self) -> bool:
        """The reader holds data whose rest is still being written (a partial line, a CRI partial
        record, a syslog message): `flush()` would cut it in two (pglog.reader.LineReader.unfinished)."""
        ...

    async def feed(self, data: bytes, now: float) -> list[Row]: ...
    def start_feed(self, data: bytes, now: float) -> Coroutine[Any, Any, list[Row]]:
        """`feed`, started now and awaited later: a feed started after it may be started before
        it is awaited, so a worker parses the next piece while this one's rows are handled.

        Feeds are parsed in the order they are started and must be awaited in that order; the
        counts (`committed_offset`...) move as each is awaited, so they always describe the rows
        taken so far. One not awaited must be closed (`close()`).
        """
        ...

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

    @property
    def unfinished(self) -> bool:
        return self._last.unfinished

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

    def start_feed(self, data: bytes, now: float) -> Coroutine[Any, Any, list[Row]]:
        return self.feed(data, now)  # parsed when awaited: in this process nothing runs beside it

    async def flush_ready(self, now: float, at_end: bool) -> list[Row]:
        self._reader.full_text = self.full_text
        return self._done(ready_lines(self._reader, now, at_end))

    async def flush(self) -> list[Row]:
        self._reader.full_text = self.full_text
        return self._done(self._reader.flush())

    async def aclose(self) -> None:
        return None


# --- in the daemon --------------------------------------------------------------------------


class ParseWorkerGone(RuntimeError):
    """The worker process exited (killed, crashed) with calls unanswered: its readers are gone."""


# The worker: this interpreter on the daemon's module path (whatever the current directory), with
# nothing else to import first. Not multiprocessing: its spawn starts a resource tracker process
# too (~13 MB for the daemon's lifetime) and two threads that feed and read its queues.
_WORKER_CODE: Final = (
    "import sys; sys.path[:] = sys.argv[1:]; from forwarder.sources.parse_worker import serve; serve()"
)
CLOSE_SECONDS: Final = 10.0  # aclose(): how long the worker may take to answer what was sent


class WorkerStartError(RuntimeError):
    """A parse worker process could not be started; the message says why (never log text)."""


class _Process:
    """One live worker process: calls are written to its standard input as they come, and a task
    reads its results, which come in the same order, and hands each to the call waiting first."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self.calls = proc.stdin
        self.waiting: collections.deque[asyncio.Future[Any]] = collections.deque()
        self.closing = False  # set by ParseWorker.aclose: the exit that follows is asked for
        self.results = asyncio.create_task(self._read_results(proc.stdout), name=f"parse-worker:{proc.pid}")

    @classmethod
    async def start(cls) -> _Process:
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", _WORKER_CODE, *sys.path, stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
        except OSError as exc:
            # Not the log's fault (the follower reads a PermissionError as an unreadable log file):
            # the interpreter cannot be run, e.g. its directory is closed to the daemon's user.
            raise WorkerStartError(f"cannot start a parse worker ({sys.executable}): {exc.strerror or exc}") from None
        return cls(proc)

    def send(self, fn: Any, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        """Write the call (whole, before any other: no await in between) and queue its future."""
        payload = pickle.dumps((fn, args), pickle.HIGHEST_PROTOCOL)
        self.calls.writelines((len(payload).to_bytes(FRAME_HEADER_BYTES, "little"), payload))
        result: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting.append(result)
        return result

    async def _read_results(self, results: asyncio.StreamReader) -> None:
        try:
            while True:
                header = await results.readexactly(FRAME_HEADER_BYTES)
                body = await results.readexactly(int.from_bytes(header, "little"))
                waiting = self.waiting.popleft()
                if waiting.cancelled():
                    continue
                try:
                    # Our own child's pipe: nothing else can write into it (its ends are close-on-exec).
                    status, value = pickle.loads(body)  # noqa: S301
                except Exception as exc:  # a result this side cannot load fails that call only
                    waiting.set_exception(RuntimeError(f"the parse worker's result did not load: {exc!r}"))
                    continue
                if status == "ok":
                    waiting.set_result(value)
                else:
                    waiting.set_exception(value)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the worker exited
        finally:
            self.calls.close()
            code = await self.proc.wait()
            if not self.closing:
                # Said once here: every reader in the worker fails with it (a database each).
                metrics.PARSE_WORKER_EXITS.inc()
                log.warning(
                    "the parse worker exited unasked; another starts and reading resumes from the stored offsets",
                    extra={"pid": self.proc.pid, "status": code},
                )
            gone = ParseWorkerGone(f"the parse worker exited (status {code})")
            while self.waiting:
                waiting = self.waiting.popleft()
                if not waiting.done():
                    waiting.set_exception(gone)


def _retrieve(result: asyncio.Future[Any]) -> None:
    if not result.cancelled():
        result.exception()


class ParseWorker:
    """One worker process and the readers that live in it; `aclose()` stops it."""

    def __init__(self) -> None:
        self._process: _Process | None = None
        self._starting = asyncio.Lock()
        self._handles = itertools.count(1)

    def _live(self) -> _Process | None:
        """The worker process, if one runs."""
        process = self._process
        return process if process is not None and not process.results.done() else None

    async def _running(self) -> _Process:
        async with self._starting:
            process = self._live()
            if process is None:
                # None yet, or it died: its readers are gone, and the follower starts over from the
                # stored offsets (DatabaseFollower._start_over) with readers in this new one.
                process = self._process = await _Process.start()
            return process

    async def call(self, fn: Any, *args: Any) -> Any:
        """`fn(*args)` in the worker, started if none runs; ParseWorkerGone if it died before answering."""
        process = self._live() or await self._running()
        result = process.send(fn, args)
        with contextlib.suppress(ConnectionError):  # a dead worker: the result says so
            await process.calls.drain()
        return await result

    def submit(self, fn: Any, *args: Any) -> asyncio.Future[Any]:
        """`fn(*args)` sent to the running worker now, after every call sent before; its result.

        Only for a worker that runs (a reader was opened in it): a worker that died took its
        readers with it, so the result is ParseWorkerGone rather than a new process.
        """
        process = self._live()
        if process is None:
            result: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            result.set_exception(ParseWorkerGone("the parse worker is not running"))
        else:
            result = process.send(fn, args)
        # A result nobody takes (a feed started ahead, then closed) must not be logged as lost.
        result.add_done_callback(_retrieve)
        return result

    async def open(self, spec: ReaderSpec, full_text: bool) -> WorkerReader:
        handle = next(self._handles)
        await self.call(w_open, handle, spec, full_text)
        return WorkerReader(self, handle, full_text, spec.identity.database_id)

    async def reader_count(self) -> int:
        """How many readers live in the worker (each holds a pending entry until closed)."""
        count: int = await self.call(w_count)
        return count

    @property
    def pid(self) -> int | None:
        """The id of the worker process started last (None before the first start and after `aclose`)."""
        return self._process.proc.pid if self._process is not None else None

    async def aclose(self) -> None:
        """Let the worker answer what was sent, then end it (its standard input ends)."""
        process, self._process = self._process, None
        if process is None:
            return
        process.closing = True
        process.calls.close()
        try:
            await asyncio.wait_for(asyncio.shield(process.results), CLOSE_SECONDS)
        except TimeoutError:
            process.proc.kill()
            await process.results


class WorkerReader(_Counts):
    """A reader living in a ParseWorker."""

    def __init__(self, worker: ParseWorker, handle: int, full_text: bool, database_id: str) -> None:
        super().__init__(database_id)
        self._worker = worker
        self._handle = handle
        self.full_text = full_text

    def _send(self, op: str, data: bytes = b"", now: float = 0.0) -> Coroutine[Any, Any, list[Row]]:
        """Send a step of this reader now (submit: a reader dies with its worker); its rows once awaited."""
        return self._take(self._worker.submit(w_call, self._handle, op, self.full_text, data, now))

    async def _take(self, step: asyncio.Future[Parsed]) -> list[Row]:
        return self._took(await step)

    async def feed(self, data: bytes, now: float) -> list[Row]:
        return await self._send("feed", data, now)

    def start_feed(self, data: bytes, now: float) -> Coroutine[Any, Any, list[Row]]:
        return self._send("feed", data, now)

    async def flush_ready(self, now: float, at_end: bool) -> list[Row]:
        return await self._send("ready" if at_end else "idle", b"", now)

    async def flush(self) -> list[Row]:
        return await self._send("flush")

    async def aclose(self) -> None:
        with contextlib.suppress(ParseWorkerGone):
            await self._worker.submit(w_close, self._handle)
