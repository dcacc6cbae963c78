"""Follow one database's log in the systemd journal and store what it says, exactly once.

A PostgreSQL started by systemd without the logging collector writes its stderr to journald. We
run `journalctl --output=json --follow` (pglog.journal reads its output) with the database's
matches, and keep in the store the cursor of the last record whose entry is stored, written in
the same transaction as the lines (`Store.append_rows(..., journal_cursor=...)`), so a restart,
even after SIGKILL, resumes at the first record whose entry was not stored: no line twice, none
skipped. With no cursor stored, everything the journal holds for the matches is read, as a new
file is read from its start.

A restart runs journalctl with `--cursor` (it starts at the stored cursor's record) and drops the
first record only when it is that record (its `__CURSOR` is the stored one). Not `--after-cursor`:
journalctl seeks to the cursor's place and then steps over one record, the cursor's when the
journal still has it, and otherwise, when rotation or vacuuming dropped it, the first record
after that place, which would be skipped unread (journalctl.c: sd_journal_seek_cursor, then
sd_journal_next_skip(j, 1 + !!arg_after_cursor); systemd 252).

    journalctl stdout -> reader.feed (records -> entries) -> store.append_rows(lines, cursor)

The cursor of each record is taken from its JSON line as it is read, together with the line's
end offset; the reader's `committed_offset` (a byte offset of the same output) says which
records are fully turned into returned entries, so the cursor stored is that of the last such
record. An entry whose records may not all be there yet (its last record is the newest) waits
for the reader's idle flush, as an entry at the end of a file whose write was cut does.

journalctl missing, failing or exiting is shown in the overview and retried with a doubling
delay; the child is killed (and waited for) whenever reading stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from forwarder.clock import Clock
from forwarder.config import DatabaseConfig, LogSourceConfig
from forwarder.logsetup import ThrottledFailureLog
from forwarder.sources.follower import DISABLED, Follower, SourceStatus
from forwarder.sources.parsing import AsyncReader, ParseWorker, ParseWorkerGone, ReaderSpec, WorkerStartError
from forwarder.sources.tail import MISMATCH_LINES
from forwarder.store import Identity, Store
from forwarder.store.lines import Row
from forwarder.store.store import write_failure_reason

log = logging.getLogger(__name__)

CHUNK_BYTES = 256 * 1024  # one read of journalctl's output (~1,000 records): one store transaction
# The fields a record needs (journalctl adds __CURSOR and __REALTIME_TIMESTAMP to JSON output).
OUTPUT_FIELDS = "MESSAGE,_PID,SYSLOG_IDENTIFIER"
RETRY_FIRST_SECONDS = 1.0
RETRY_MAX_SECONDS = 60.0


def retry_waits(planned: float, *, worked: bool) -> tuple[float, float]:
    """The wait before journalctl runs again after a session ended, and the one planned after it.

    The wait doubles at each failure, from RETRY_FIRST_SECONDS up to RETRY_MAX_SECONDS. A session
    that worked (it stored something, ran a long while, or lost its parse worker, which starts again
    at once) starts the doubling over: a recovery is not paid for with the waits of those before.
    """
    wait = RETRY_FIRST_SECONDS if worked else planned
    return wait, min(wait * 2, RETRY_MAX_SECONDS)


EXIT_WAIT_SECONDS = 5.0  # for journalctl to exit once its output ended, before it is killed
STDERR_KEEP = 4096  # bytes of journalctl's last error output shown in the overview
# journalctl prints cursors as s=...;i=...;b=...;m=...;t=...;x=... (no quote, no backslash).
_CURSOR = re.compile(rb'"__CURSOR"\s*:\s*"([^"\\]*)"')


def journalctl_args(log_config: LogSourceConfig, cursor: str | None) -> list[str]:
    """The journalctl command line for a journal source, starting at `cursor`'s record if there is
    one (that record, already stored, is dropped by the reading: see the module docstring).

    `--all` prints messages longer than 4096 bytes too (they would be null); `--no-tail` makes
    `--follow` start at the first matching record instead of the last ten.
    """
    args = [
        log_config.journalctl_path,
        "--output=json",
        f"--output-fields={OUTPUT_FIELDS}",
        "--all",
        "--follow",
        "--no-tail",
        "--no-pager",
        "--quiet",
    ]
    if log_config.journal_directory is not None:
        args.append(f"--directory={log_config.journal_directory}")
    if cursor is not None:
        args.append(f"--cursor={cursor}")
    return args + log_config.journal_matches()


@dataclass
class _Directory:
    """A directory held open, to tell whether its path still names it."""

    path: Path
    fd: int

    @classmethod
    def open(cls, path: Path | None) -> _Directory | None:
        if path is None:
            return None
        try:
            return cls(path, os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        except OSError:
            return None  # journalctl says what is wrong with it

    def replaced(self) -> bool:
        held = os.fstat(self.fd)
        try:
            now = os.stat(self.path)
        except OSError:
            return True
        return held.st_nlink == 0 or (held.st_dev, held.st_ino) != (now.st_dev, now.st_ino)

    def close(self) -> None:
        os.close(self.fd)


class JournalUnavailable(Exception):
    """journalctl could not be run, or stopped; the message says why (shown in the overview)."""


@dataclass(slots=True)
class _Session:
    """One run of journalctl: its output read so far, and the cursors of records not yet stored."""

    reader: AsyncReader
    consumed: int = 0  # bytes of output in whole lines
    partial: bytes = b""
    records: int = 0
    stored: int = 0  # committed offset as of the last store transaction
    marks: deque[tuple[int, str]] = field(default_factory=deque)  # (end offset, cursor) per record
    # The cursor journalctl was started at (`--cursor`): its record, if the output's first, is
    # stored already and is dropped; until the first record is whole, its bytes so far.
    skip: str | None = None
    first: bytes = b""


class JournalFollower(Follower):
    """Reads one database's journal records into the store; `run()` until `stop()`."""

    def __init__(
        self,
        db: DatabaseConfig,
        identity: Identity,
        store: Store,
        clock: Clock,
        worker: ParseWorker | None = None,
    ) -> None:
        super().__init__(db, identity, store, clock, worker, log)
        self._reader: AsyncReader | None = None
        self.where = db.log.source()
        # journalctl missing (journalctl_path) or exiting: its words say why, no traceback
        self._journal_failures = ThrottledFailureLog(log, clock)

    def _open_readers(self) -> list[AsyncReader]:
        return [] if self._reader is None else [self._reader]

    def stop(self) -> None:
        """Ask `run()` to return: what was read and is complete is stored first."""
        self._stopping = True
        self._wake.set()

    async def run(self) -> None:
        """Run journalctl until `stop()`, again after a doubling delay whenever it fails or exits."""
        cursor = await self._store.journal_cursor(self.db.id)
        delay = RETRY_FIRST_SECONDS
        loop = asyncio.get_running_loop()
        while not self._stopping:
            self._wake.clear()
            if not self.enabled:
                self.status = DISABLED
                await self._wake.wait()
                continue
            started = loop.time()
            before = cursor
            worker_gone = False
            try:
                cursor = await self._session(cursor)
            except Exception as exc:  # keep going: the overview shows it
                where = {"database_id": self.db.id}
                if isinstance(exc, ParseWorkerGone):  # logged once by the worker, not by each reader
                    worker_gone = True
                elif isinstance(exc, WorkerStartError):  # its message says why; a traceback only where
                    self._worker_failures.failure(
                        "the parse worker cannot start; reading waits and tries again", exc, where
                    )
                elif isinstance(exc, JournalUnavailable):  # journalctl missing or failing: said in its words
                    self._journal_failures.failure("journalctl fails; reading waits and tries again", exc, where)
                elif not self._store.reported(exc):  # a failed store write was logged by the store
                    self._failures.failure("reading the journal failed", exc, where)
                reason = str(exc) if isinstance(exc, JournalUnavailable | WorkerStartError) else None
                self.status = SourceStatus("error", self.where, reason or write_failure_reason(exc) or repr(exc))
                cursor = await self._store.journal_cursor(self.db.id)  # what is stored is what counts
            else:
                continue  # stopped or disabled
            # Pacing a retry, like the poll interval of files: the event loop's time.
            worked = loop.time() - started > RETRY_MAX_SECONDS or cursor != before or worker_gone
            wait, delay = retry_waits(delay, worked=worked)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)

    async def _session(self, cursor: str | None) -> str | None:
        """Read journalctl's output until stop() or a disable; returns the cursor stored last.

        Raises JournalUnavailable when journalctl cannot run or exits (its records up to there are
        stored; an entry still pending is read again by the next session, from the stored cursor).
        """
        args = journalctl_args(self.db.log, cursor)
        session = _Session(
            await self._new_reader(ReaderSpec("journal", self.db.log.line_prefix, self.db.log.timezone, self.identity)),
            skip=cursor,
        )  # first: a worker that fails leaves no child behind
        self._worker_failures.ok("the parse worker started; reading again", {"database_id": self.db.id})
        try:
            proc = await asyncio.create_subprocess_exec(
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=CHUNK_BYTES,
            )
        except OSError as exc:
            await session.reader.aclose()
            raise JournalUnavailable(f"cannot run {args[0]}: {exc.strerror or exc}") from None
        assert proc.stdout is not None and proc.stderr is not None
        errors = asyncio.create_task(_tail_of(proc.stderr))
        self._reader = session.reader
        # journalctl --follow keeps watching the directory it opened: one removed and made again
        # (a journald set up anew) is never read. At each poll interval the directory held open
        # here must still be the one at its path (an inode number may be reused: a removed
        # directory has no links left).
        directory = _Directory.open(self.db.log.journal_directory)
        self.status = SourceStatus("reading", self.where)
        self._journal_failures.ok("journalctl runs again", {"database_id": self.db.id})
        ended = False
        try:
            while not self._stopping and self.enabled:
                try:
                    chunk = await asyncio.wait_for(proc.stdout.read(CHUNK_BYTES), self.db.log.poll_interval_seconds)
                except TimeoutError:
                    chunk = None
                if chunk == b"":
                    ended = True
                    break
                now = self._clock.monotonic()
                rows = await self._feed(session, chunk, now) if chunk else []
                rows += await session.reader.flush_ready(now, False)
                cursor = await self._commit(session, rows) or cursor
                if session.records >= MISMATCH_LINES and session.reader.lines_matched == 0:
                    self.status = SourceStatus(
                        "format_mismatch",
                        self.where,
                        f"no journal message matches the configured prefix {self.db.log.line_prefix!r}",
                    )
                elif self._status.state != "reading":
                    self.status = SourceStatus("reading", self.where)
                if directory is not None and directory.replaced():
                    raise JournalUnavailable(
                        f"the journal directory {directory.path} was replaced; journalctl runs again"
                    )
        finally:
            self._reader = None
            if directory is not None:
                directory.close()
            if ended:  # its output ended: it is exiting by itself, and its own status says why
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), EXIT_WAIT_SECONDS)
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            code = await proc.wait()
            tail = await errors
            await session.reader.aclose()
        if ended:
            said = tail.decode("utf-8", "replace").strip().splitlines()
            raise JournalUnavailable(f"journalctl exited with status {code}" + (f": {said[-1]}" if said else ""))
        return cursor

    async def _feed(self, session: _Session, chunk: bytes, now: float) -> list[Row]:
        """Give `chunk` to the reader, noting each whole record's end offset and cursor.

        The offsets are of the output the reader is given: without the stored cursor's record.
        """
        self._count_read(len(chunk))
        if session.skip is not None:
            head = session.first + chunk
            nl = head.find(b"\n")
            if nl < 0:
                session.first = head
                return []
            first, chunk = head[: nl + 1], head[nl + 1 :]
            m = _CURSOR.search(first)
            if m is None or m.group(1).decode("ascii", "replace") != session.skip:
                chunk = first + chunk  # that record is gone from the journal: this one is the next
            session.skip, session.first = None, b""
            if not chunk:
                return []
        data = session.partial + chunk
        end = data.rfind(b"\n") + 1
        session.partial = data[end:]
        for line in data[:end].split(b"\n")[:-1]:
            session.consumed += len(line) + 1
            session.records += 1
            if (m := _CURSOR.search(line)) is not None:
                session.marks.append((session.consumed, m.group(1).decode("ascii", "replace")))
        return await session.reader.feed(chunk, now)

    async def _commit(self, session: _Session, rows: list[Row]) -> str | None:
        """Store `rows` and the cursor of the last record they complete, in one transaction."""
        committed = session.reader.committed_offset
        cursor = None
        while session.marks and session.marks[0][0] <= committed:
            cursor = session.marks.popleft()[1]
        if not rows and cursor is None:
            return None
        raw, session.stored = committed - session.stored, committed
        await self._store.append_rows(self.identity, rows, [], raw, journal_cursor=cursor)
        self._count_stored(rows)
        return cursor


async def _tail_of(stream: asyncio.StreamReader) -> bytes:
    """The last STDERR_KEEP bytes a stream gives until its end."""
    kept = b""
    while chunk := await stream.read(STDERR_KEEP):
        kept = (kept + chunk)[-STDERR_KEEP:]
    return kept
