"""Follow one database's log files and store what they say, exactly once.

For each file matched by the database's glob we keep `(dev, inode)`, the file's first bytes
(`head`, to tell a reused inode or a truncated-and-rewritten file) and `offset`: how many bytes
are fully turned into stored lines. Offsets are committed in the same transaction as the lines
they produced, so a restart (even after SIGKILL) resumes at exactly the first byte whose entry
was not stored: no line twice, none skipped.

    poll: glob -> stat -> (new file? truncated? gone?) -> read chunk -> reader.feed
          -> store.append(lines, offsets)    one transaction

Files in the log directory are hostile (whoever can write there is not the daemon): a name is
opened with O_NONBLOCK | O_NOFOLLOW and the descriptor must be a regular file with the inode
that was checked, so a FIFO, a device or a link swapped in cannot block or redirect the reader.
A symbolic link is followed only to a regular file in the link's own directory, never to one of
the daemon's own files; any other entry is skipped and named in the overview. Reads of a regular
file never block on its writer: they come from the page cache in microseconds, and a thread hop
per chunk would cost more than it saves.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fnmatch
import glob
import logging
import mmap
import os
import re
import stat
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO, Final

from forwarder.clock import Clock
from forwarder.config import DatabaseConfig
from forwarder.pglog import TimeCounts, entries_carry_time, uses_line_prefix
from forwarder.sources.follower import DISABLED, NO_TIME_COUNTS, Follower, Skipped, SourceStatus
from forwarder.sources.parsing import AsyncReader, ParseWorker, ParseWorkerGone, ReaderSpec, WorkerStartError
from forwarder.sources.watch import DirectoryWatch, watched_directory
from forwarder.store import Identity, SourceFile, Store
from forwarder.store.lines import ROW_DOC, Row
from forwarder.store.store import write_failure_reason

log = logging.getLogger(__name__)

HEAD_BYTES = 64  # enough to hold a prefix with a millisecond timestamp: unique per file
# The bytes right before the read position (and the stored offset) are kept too: a file truncated
# and written again past that position with the same first bytes (a prefix without a time starts
# every file with the same lines) differs there, and is read from its start, not from the offset.
TAIL_BYTES = 64
CHUNK_BYTES = 256 * 1024  # one read; parsing a chunk keeps the event loop busy for a few ms only
# A batch (one store transaction, and what the parse worker hands back at once) holds at most
# APPEND_LINES entries and about APPEND_BYTES of stored documents: a chunk of one-word lines is
# ~100k entries, and each is a parsed record in the worker and a row here before it is stored.
APPEND_LINES = 5000  # entries per store transaction (fewer commits: each rewrites the hot index pages)
APPEND_BYTES = 4 * 1024 * 1024  # a batch is stored once it reaches this; it passes it by one feed's rows at most
FEED_LINES = APPEND_LINES // 4  # physical lines given to the reader at once (each completes at most one entry)
FEED_BYTES = CHUNK_BYTES
MISMATCH_LINES = 20  # this many physical lines and none in the configured format: say so
RETIRED_HEADS = 64
COMPARE_BYTES = 4096  # of a file with the same head, compared to tell a copy from another file
# A new file that may be a copy still being written (logrotate's copytruncate: the directory's change
# wakes a poll as soon as the copy is created) is read once it has not changed for this long, if it
# does not have a whole head or reach where its original was read to before (_copy_in_progress).
COPY_WAIT_SECONDS = 1.0
SKIP_LOGGED = 256  # skipped entries remembered as already logged
IDLE_CLOSE_SECONDS = 300  # an older file unchanged this long gives its descriptor back
# A file that left the glob is still read through its descriptor until it has not grown for this
# long: with logrotate's `create` the server writes to the renamed file until it reopens its log,
# and those last lines come after the rename (Fluent Bit's tail input waits Rotate_Wait, 5 s).
ROTATE_WAIT_SECONDS = 5.0
# A parse worker that cannot start (WorkerStartError: its interpreter cannot be run) is tried again
# after this long, doubled at each failure up to the maximum (as the journal's journalctl).
WORKER_RETRY_FIRST_SECONDS = 1.0
WORKER_RETRY_MAX_SECONDS = 60.0
# The kernel makes a write visible page by page (a reader may see the first pages of a long write):
# data read up to a page boundary may be cut there, so its last entry is not taken as whole.
PAGE_BYTES = mmap.PAGESIZE


@dataclass(slots=True)
class _File:
    dev: int
    ino: int
    head: bytes
    path: str
    base: int  # offset the reader started at
    reader: AsyncReader
    committed: int  # offset stored so far
    read_pos: int  # next byte to read
    seen_lines: int = 0  # physical lines read since the reader started
    tail: bytes = b""  # the bytes right before read_pos (up to TAIL_BYTES)
    stored: bool = False  # the store has a row for this file
    fh: BinaryIO | None = None  # held open so a file renamed or deleted under us is read to its end
    mtime_ns: int = 0  # at the last poll
    grown_at: float = 0.0  # the monotonic time it was first followed or last grew
    gone_since: float | None = None  # out of the glob: the monotonic time it last grew (or left)

    @property
    def reader_pending(self) -> bool:
        return self.base + self.reader.committed_offset < self.read_pos

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None


# Never block on a FIFO or device, never follow a link the check did not resolve, never leak the
# descriptor into a child process.
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC

# What open(2) says when the checked regular file was replaced: by a link (O_NOFOLLOW), a socket
# or a device without a driver, a directory, a file with a mandatory lock.
_REPLACED_ERRNOS = frozenset({errno.ELOOP, errno.ENXIO, errno.ENODEV, errno.EISDIR, errno.EWOULDBLOCK})

# Files next to the store that are the store too (WAL mode, a rollback journal if ever used, the
# daemon's lock on it: store.lock_path).
_STORE_SUFFIXES = ("", "-wal", "-shm", "-journal", ".lock")


# The first bytes of the formats logrotate's `compress` (and `compresscmd`) writes: a rotated log
# compressed in place matches a glob like `postgresql-15-main.log*` and is no log text.
_COMPRESSED: Final = (
    (b"\x1f\x8b", "gzip"),  # RFC 1952
    (b"\x28\xb5\x2f\xfd", "zstd"),  # RFC 8878
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x04\x22\x4d\x18", "lz4"),
)
_BZIP2: Final = re.compile(rb"BZh[1-9](?:1AY&SY|\x17rE8P\x90)")  # a block, or the end of an empty stream


def compressed_format(head: bytes) -> str | None:
    """The compression format a file starting with `head` is in, if any (its first 10 bytes tell)."""
    for magic, name in _COMPRESSED:
        if head.startswith(magic):
            return name
    return "bzip2" if _BZIP2.match(head) else None


def _resolve(path: str) -> tuple[str, os.stat_result] | Skipped:
    """The regular file `path` names under the link rule, with its `lstat` (FileNotFoundError: gone).

    A symbolic link counts only when it resolves to a regular file in the link's own directory
    (`postgresql.log -> postgresql-2026-11-23.log`); a loop, a dangling link, a link out of the
    directory and anything not a regular file (FIFO, socket, device, directory) is `Skipped`.
    """
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.path.realpath(path, strict=True)
        except FileNotFoundError:
            return Skipped(path, "a symbolic link to a missing file")
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return Skipped(path, "a symbolic link loop")
            raise
        if os.path.dirname(target) != os.path.realpath(os.path.dirname(path)):
            return Skipped(path, "a symbolic link out of its directory")
        path, st = target, os.lstat(target)
    if not stat.S_ISREG(st.st_mode):
        return Skipped(path, "not a regular file")
    return path, st


def unlistable(pattern: str) -> str | None:
    """The directory of the glob `pattern`, if the daemon may not list it (a glob then matches
    nothing, as if no file were there); None if it can, is itself a glob, or does not exist."""
    directory = os.path.dirname(pattern) or "."
    if glob.has_magic(directory):
        return None
    try:
        with os.scandir(directory):
            return None
    except PermissionError:
        return directory
    except OSError:
        return None


def _bytes_before(fd: int, offset: int, n: int) -> bytes:
    """The (up to) `n` bytes of the file right before `offset`."""
    n = min(n, offset)
    return os.pread(fd, n, offset - n) if n else b""


def _open_regular(path: str, key: tuple[int, int]) -> BinaryIO:
    """Open `path` for reading if it is still the regular file `key` (raises FileNotFoundError if not).

    Opened without following a link and without blocking (a FIFO put in its place answers at once),
    then the descriptor itself is checked: what is read is what was checked.
    """
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno in _REPLACED_ERRNOS:  # something else took the name since the check: looked at next poll
            raise FileNotFoundError(path) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != key:  # replaced since the check
        os.close(fd)
        raise FileNotFoundError(path)
    return os.fdopen(fd, "rb")


class _Batch:
    """The rows of one file being gathered for the store, and the write of the batch before them."""

    def __init__(self, follower: DatabaseFollower, f: _File) -> None:
        self._follower = follower
        self._file = f
        self.lines: list[Row] = []
        self._bytes = 0
        self._writing: asyncio.Future[None] | None = None

    async def take(self, rows: list[Row]) -> None:
        """Add a feed's rows; once the batch is full, write it (after the one before) and start another."""
        self.lines.extend(rows)
        self._bytes += sum(len(row[ROW_DOC]) for row in rows)
        if len(self.lines) >= APPEND_LINES or self._bytes >= APPEND_BYTES:
            batch = self._follower._prepare(self.lines, [self._file])  # offsets as of these rows
            await self.written()
            self._writing = asyncio.ensure_future(self._follower._write(*batch))
            self.lines, self._bytes = [], 0

    async def written(self) -> None:
        """Wait for the batch being written, if any (its failure is raised here)."""
        if self._writing is not None:
            writing, self._writing = self._writing, None
            await writing


class DatabaseFollower(Follower):
    """Reads one database's log files into the store; `run()` until cancelled."""

    def __init__(
        self,
        db: DatabaseConfig,
        identity: Identity,
        store: Store,
        clock: Clock,
        worker: ParseWorker | None = None,
        private: Iterable[Path] = (),
    ) -> None:
        """`private`: the daemon's own files besides the store's (secrets key, config), never read."""
        super().__init__(db, identity, store, clock, worker, log)
        store_path = str(store.config.path)
        self._private = [Path(store_path + suffix) for suffix in _STORE_SUFFIXES] + list(private)
        self._skip_logged: set[Skipped] = set()
        self._files: dict[tuple[int, int], _File] = {}
        # New files not read yet, as they may be copies being written: their size, and since when
        self._undecided: dict[tuple[int, int], tuple[int, float]] = {}
        self._compressed: dict[tuple[int, int], str] = {}  # files never read, and their format
        self._known: dict[tuple[int, int], SourceFile] = {}
        # head -> end offset of files truncated or gone, and (a gone file's) last bytes before it
        self._retired: dict[bytes, tuple[int, bytes, bool]] = {}  # (and whether it is gone, not truncated)
        self._watch: DirectoryWatch | None = None
        self._watch_failure: str | None = None  # the last reason the directory could not be watched, logged once
        self._stopped = asyncio.Event()  # ends the batch window early
        # After a parse worker failed to start: no read before this (clock.monotonic()), and the
        # wait after the next failure. The daemon's clock, like the store's retries after a failed write.
        self._worker_retry_at = float("-inf")
        self._worker_retry_delay = WORKER_RETRY_FIRST_SECONDS
        # Whether the overview's time note may blame the prefix (it has no time escape).
        self._entries_carry_time = entries_carry_time(db.log.format, db.log.line_prefix)

    def _open_readers(self) -> Iterable[AsyncReader]:
        return [f.reader for f in self._files.values()]

    async def _file_reader(self) -> AsyncReader:
        log = self.db.log
        return await self._new_reader(
            ReaderSpec(log.format, log.line_prefix, log.timezone, self.identity, log.syslog_ident)
        )

    def stop(self) -> None:
        """Ask `run()` to return: it stops between chunks, stores what it parsed, then returns.

        Preferred to cancelling the task: a cancel can land while a parse worker holds parsed lines
        whose offsets it has already counted, and those lines would then be skipped.
        """
        self._stopping = True
        self._stopped.set()
        self._wake.set()

    async def run(self) -> None:
        """Poll the files until `stop()` (or a cancel); what was parsed is stored before returning.

        A poll runs every `log.poll_interval_seconds`, and as soon as the log directory reports a
        change (`watch.DirectoryWatch`), at most one per `log.batch_window_seconds`.
        """
        self._known = {(sf.dev, sf.ino): sf for sf in await self._store.source_files(self.db.id)}
        try:
            loop = asyncio.get_running_loop()
            while not self._stopping:
                # Spacing reads is I/O pacing, like the poll interval: the event loop's time, not
                # the daemon's clock (a test's fake clock would hold every read until it moved).
                started = loop.time()
                self._wake.clear()  # before the poll: a write during it makes the next one start at once
                self._keep_watching()
                if self.enabled:
                    await self.poll_or_start_over()
                else:
                    self.status = DISABLED
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.db.log.poll_interval_seconds)
                # Writes come by the thousand per second: polls are spaced so each reads many.
                rest = self.db.log.batch_window_seconds - (loop.time() - started)
                if rest > 0 and not self._stopping:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stopped.wait(), rest)
        finally:
            self._unwatch()
            try:
                await self.drain()
            except Exception as exc:  # e.g. the parse worker is gone: the stored offsets are still right
                log.warning(
                    "could not store the last pending entries; they are read again at the next start",
                    # A failed store write (a full disk) is SQLite's, already logged with its reason.
                    exc_info=not self._store.reported(exc),
                    extra={"database_id": self.db.id, "error": f"{type(exc).__name__}: {exc}"},
                )

    def _keep_watching(self) -> None:
        """Watch the log directory for changes if it is not watched yet (it may appear later)."""
        if self._watch is not None and self._watch.active:
            return
        directory = watched_directory(self.db.log.path)
        if directory is None:
            return
        self._watch = DirectoryWatch(directory, self._wake.set, self._watched_name)
        try:
            self._watch.start()
        except (OSError, AttributeError) as exc:  # AttributeError: a libc without inotify
            self._watch = None
            if self._watch_failure != (reason := f"{type(exc).__name__}: {exc}"):
                self._watch_failure = reason
                log.info(
                    "no change notification for the log directory; checking it at the poll interval",
                    extra={"database_id": self.db.id, "path": directory, "reason": reason},
                )
        else:
            self._watch_failure = None

    def _watched_name(self, name: str) -> bool:
        """Whether a change of the entry `name` of the log directory may be news for the reader: it
        matches the glob, or it is a file being read (the target of a matching symbolic link)."""
        return fnmatch.fnmatchcase(name, os.path.basename(self.db.log.path)) or any(
            os.path.basename(f.path) == name for f in self._files.values()
        )

    def _unwatch(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None

    @property
    def notified(self) -> bool:
        """Whether changes of the log directory wake the reader (else it only polls)."""
        return self._watch is not None and self._watch.active

    async def poll_or_start_over(self) -> None:
        """`poll()`; a failure is shown in the status, and reading starts over from the stored offsets."""
        now = self._clock.monotonic()
        if now < self._worker_retry_at:
            return  # the status still says why: the parse worker could not start
        try:
            await self.poll()
        except WorkerStartError as exc:
            # Not the log's failure, and the same at every poll until the operator acts (a closed
            # interpreter directory): its message says why; tried again with a doubling wait.
            self._worker_failures.failure(
                "the parse worker cannot start; reading waits and tries again",
                exc,
                {"database_id": self.db.id, "retry_seconds": self._worker_retry_delay},
            )
            self._worker_retry_at = now + self._worker_retry_delay
            self._worker_retry_delay = min(self._worker_retry_delay * 2, WORKER_RETRY_MAX_SECONDS)
            self.status = SourceStatus("error", self.status.file, str(exc))
            await self._start_over()
        except Exception as exc:  # keep going: the overview shows it
            # A failed store write (a full disk, every poll until space is freed) was logged by the
            # store, at its bounded rate: the log itself was read fine. A parse worker's end is
            # logged once by the worker (its readers, one a database, all fail with it).
            if not self._store.reported(exc) and not isinstance(exc, ParseWorkerGone):
                self._failures.failure("reading the log failed", exc, {"database_id": self.db.id})
            reason = write_failure_reason(exc) or type(exc).__name__
            self.status = SourceStatus("error", self.status.file, reason)
            await self._start_over()
        else:
            self._worker_retry_delay = WORKER_RETRY_FIRST_SECONDS
            self._worker_failures.ok("the parse worker started; reading again", {"database_id": self.db.id})
            self._failures.ok("reading the log works again", {"database_id": self.db.id})
            # operations.md: an unreadable log is logged once, then at most once a minute.
            where = {"database_id": self.db.id, "path": self.status.file}
            if self.status.state == "permission_denied":
                denied = PermissionError(errno.EACCES, self.status.reason or "permission denied")
                self._unreadable.failure("the log cannot be read", denied, where)
            else:
                self._unreadable.ok("the log can be read again", where)

    async def _start_over(self) -> None:
        """After a failure: forget what is in memory and continue from the offsets in the store."""
        files = list(self._files.values())
        self._files.clear()
        for f in files:
            await self._drop(f)
        self._known = {(sf.dev, sf.ino): sf for sf in await self._store.source_files(self.db.id)}

    async def drain(self) -> None:
        """On the way out: finish the files that left the glob, store the complete entries of each
        file read to its end, and close the files.

        A file out of the glob is read to its end first, whether or not a poll saw it leave (a
        stop in the middle of a backlog that logrotate renamed away): a restart would not find it.
        In a file still in the glob whose reader holds something unfinished (`AsyncReader.unfinished`:
        a line without its newline, a write PostgreSQL has not finished; a container runtime's
        partial record whose line goes on in a later record; a syslog message whose lines may still
        come), the pending entries stay unstored, like the rest of a file not read to its end: the
        offset stays at their start, and the next run reads them whole. A file ending in a newline
        is not enough: a CRI partial record ends in one too.
        """
        found, _, _ = self._scan()
        for key in [k for k, f in self._files.items() if f.gone_since is not None or k not in found]:
            await self._finish(self._files.pop(key))  # out of the glob: a restart would not find it
        lines: list[Row] = []
        for f in self._files.values():
            if f.fh is None or (size := os.fstat(fd := f.fh.fileno()).st_size) != f.read_pos:
                continue
            if (size == 0 or os.pread(fd, 1, size - 1) == b"\n") and not f.reader.unfinished:
                lines.extend(await f.reader.flush())
        await self._commit(lines, list(self._files.values()))
        files = list(self._files.values())
        self._files.clear()
        for f in files:
            await self._drop(f)

    async def _drop(self, f: _File) -> None:
        """Close a file and its reader (in a parse worker, a reader lives until it is closed)."""
        f.close()
        try:
            await f.reader.aclose()
        except Exception:  # the worker is gone, and its readers with it
            log.debug("closing a reader failed", exc_info=True, extra={"database_id": self.db.id})

    def _scan(self) -> tuple[dict[tuple[int, int], tuple[str, os.stat_result]], str | None, list[Skipped]]:
        """The files the glob matches now, by (device, inode): their checked path and stat; the
        last path that could not be read, if any; the paths skipped, with why."""
        found: dict[tuple[int, int], tuple[str, os.stat_result]] = {}
        denied: str | None = None
        skipped: list[Skipped] = []
        compressed: dict[tuple[int, int], str] = {}
        private = self._private_keys()
        for path in sorted(glob.glob(self.db.log.path)):
            try:
                checked = _resolve(path)
            except FileNotFoundError:
                continue
            except PermissionError:
                denied = path
                continue
            if isinstance(checked, Skipped):
                skipped.append(checked)
                continue
            real, st = checked
            key = (st.st_dev, st.st_ino)
            if key in private:
                skipped.append(Skipped(path, "a file of the forwarder itself"))
            elif key in self._compressed:
                compressed[key] = self._compressed[key]
                skipped.append(Skipped(path, f"{compressed[key]}-compressed, not log text"))
            else:
                found[key] = (real, st)  # a link and its target: one file, under the target's name
        self._compressed = compressed  # those still there
        return found, denied, skipped

    async def poll(self) -> None:
        """One pass: pick up new, truncated and gone files, read what is new, store it."""
        found, denied, skipped = self._scan()
        self._log_skipped(skipped)
        note = "skipped " + "; ".join(f"{s.path} ({s.why})" for s in skipped) if skipped else None

        # Files that left the glob (renamed away by logrotate, or deleted): the descriptor we hold
        # still reads them, so their last lines are not lost; complete once they stop growing.
        for key in [k for k in self._files if k not in found]:
            await self._read_gone(key)
        if not found:
            denied = denied or unlistable(self.db.log.path)
            why = f"permission denied: {denied}" if denied else f"no file matches {self.db.log.path}"
            self.status = SourceStatus(
                "permission_denied" if denied else "no_file",
                denied,
                f"{why}; {note}" if note else why,
                tuple(skipped),
            )
            return

        # Oldest first, so lines are stored in the order PostgreSQL wrote them. Two files written in
        # one tick of the file system's clock (logrotate's rename, then the server's new file) have
        # the same mtime: the one already followed is the older.
        order = sorted(found.items(), key=lambda item: (item[1][1].st_mtime_ns, item[0] not in self._files, item[1][0]))
        newest_key, (newest_path, _) = order[-1]
        now = self._clock.monotonic()
        problem: SourceStatus | None = None
        self._undecided = {k: v for k, v in self._undecided.items() if k in found}
        for key, (path, st) in order:
            try:
                f = self._files.get(key) or await self._open(key, path)
                if f is None:  # maybe a copy still being written: looked at again next poll
                    continue
                f.path = path
                f.gone_since = None  # renamed back into the glob
                await self._read_file(f, now)
            except PermissionError:
                problem = SourceStatus("permission_denied", path, f"permission denied: {path}")
                continue
            except FileNotFoundError:
                continue
            if key != newest_key and self._clock.now() - st.st_mtime > IDLE_CLOSE_SECONDS and not f.reader_pending:
                f.close()  # PostgreSQL writes only the newest file; reopened if this one grows
        await self._flush_left_behind(order, now)
        if newest_key in self._compressed:  # found so only now: the newest log is another
            logs = [(key, path) for key, (path, _) in order if key not in self._compressed]
            if logs:
                newest_key, newest_path = logs[-1]
        if problem is None:
            current = self._files.get(newest_key)
            # Lines of other programs (a shared syslog file) say nothing about the format.
            if (
                current is not None
                and current.seen_lines - current.reader.lines_other >= MISMATCH_LINES
                and current.reader.lines_matched == 0
            ):
                problem = SourceStatus(
                    "format_mismatch",
                    newest_path,
                    f"no line matches the configured {self.db.log.format} format"
                    + (f" with prefix {self.db.log.line_prefix!r}" if uses_line_prefix(self.db.log.format) else ""),
                )
        current = self._files.get(newest_key)
        times = current.reader.time_counts if current is not None else NO_TIME_COUNTS
        # A file in another format has no times to speak of: its reason says it all.
        time_note = self._time_note(times) if problem is None or problem.state != "format_mismatch" else None
        status = problem or SourceStatus("reading", newest_path, note, tuple(skipped))
        self.status = replace(status, times=times, time_note=time_note)
        followed = found.keys() | self._files.keys()  # and the files that left the glob, still read
        if any(k not in followed for k in self._known):
            await self._store.forget_source_files(self.db.id, list(followed))
            self._known = {k: v for k, v in self._known.items() if k in followed}

    async def _flush_left_behind(
        self, order: list[tuple[tuple[int, int], tuple[str, os.stat_result]]], now: float
    ) -> None:
        """Store what the reader of a file its writer left holds unfinished.

        A container runtime rotates `0.log` by renaming it within the glob (`0.log.<time>`) and
        writes on in a new `0.log`; it may do so between the pieces (P records) of a line, whose
        last piece then goes to the new file. The old file never grows again, and its reader would
        hold the first pieces (and the other stream's lines behind them) until the file left the
        glob, at the next rotation. A file with something unfinished that has not grown for
        ROTATE_WAIT_SECONDS while a newer file of its directory was written is taken as left: what
        its reader holds is stored as it is (the line cut in two, its rest an entry of the new file).
        """
        newest: dict[str, int] = {}
        for _, (path, st) in order:
            directory = os.path.dirname(path)
            newest[directory] = max(newest.get(directory, 0), st.st_mtime_ns)
        for key, (path, st) in order:
            f = self._files.get(key)
            if (
                f is not None
                and f.reader.unfinished
                and now - f.grown_at >= ROTATE_WAIT_SECONDS
                and st.st_mtime_ns < newest[os.path.dirname(path)]
            ):
                await self._commit(await f.reader.flush(), [f])

    def _time_note(self, times: TimeCounts) -> str | None:
        """What the overview says about the log's times, in words; None when all is well."""
        return times.note(self.db.log.timezone, setting="log.timezone", prefix_has_time=self._entries_carry_time)

    def _private_keys(self) -> set[tuple[int, int]]:
        """(device, inode) of the daemon's own files that exist now (a hard link to one is one too)."""
        keys = set()
        for p in self._private:
            with contextlib.suppress(OSError):
                st = os.stat(p)
                keys.add((st.st_dev, st.st_ino))
        return keys

    def _log_skipped(self, skipped: list[Skipped]) -> None:
        """Say once that an entry is skipped, not at every poll nor each time a race brings it back."""
        for s in set(skipped) - self._skip_logged:
            log.warning(
                "skipping an entry of the log directory",
                extra={"database_id": self.db.id, "path": s.path, "reason": s.why},
            )
            if len(self._skip_logged) >= SKIP_LOGGED:  # bounded: with ever-new names, old ones may be logged again
                self._skip_logged.clear()
            self._skip_logged.add(s)

    async def _open(self, key: tuple[int, int], path: str) -> _File | None:
        """Follow the file `path` from where its stored lines end (None: not yet, see `_follow`)."""
        fh = _open_regular(path, key)  # held across polls, closed by _File.close
        try:
            f = await self._follow(key, path, fh)
        except BaseException:
            # Not in _files: nothing else closes it (a parse worker failing to start leaked one a poll).
            fh.close()
            raise
        if f is None:
            fh.close()
        return f

    async def _follow(self, key: tuple[int, int], path: str, fh: BinaryIO) -> _File | None:
        """A `_File` for `fh`, just opened: where to start reading it, and its reader; None while it
        may be a copy still being written (`_copy_in_progress`)."""
        head = os.pread(fh.fileno(), HEAD_BYTES, 0)
        size = os.fstat(fh.fileno()).st_size
        if (compressed := compressed_format(head)) is not None:
            self._compressed[key] = compressed  # skipped from the next poll on, and said so
            return None
        known = self._known.get(key)
        start = 0
        stored_head = head
        if known is not None and known.head and head[: len(known.head)] == known.head:
            if _bytes_before(fh.fileno(), known.offset, len(known.tail)) == known.tail:
                # Same file as before the restart: resume where the stored lines end.
                start = known.offset
                stored_head = known.head
            # else the same file truncated and written again while we were away, from the same
            # first bytes (a prefix without a time): read from its start. A copy has another inode.
        else:
            # A new inode with the first bytes of a file we read: a copy (logrotate copytruncate
            # with a glob that matches the copies). Its lines up to that file's offset are stored.
            same = self._same_head(head, fh.fileno(), key) if len(head) == HEAD_BYTES else None
            if self._copy_in_progress(key, head, size, same):
                return None
            self._undecided.pop(key, None)
            if same is not None:
                start = min(same[0], size)
        reader = await self._file_reader()
        f = _File(key[0], key[1], stored_head, path, start, reader, start, start, stored=known is not None)
        f.tail = _bytes_before(fh.fileno(), start, TAIL_BYTES)
        f.grown_at = self._clock.monotonic()
        f.fh = fh
        self._files[key] = f
        return f

    def _copy_in_progress(self, key: tuple[int, int], head: bytes, size: int, same: tuple[int, bool] | None) -> bool:
        """Whether a new file (`head`, `size`; `same`: `_same_head`) may be a copy not written
        whole yet, and is better left unread until the next poll.

        logrotate's copytruncate creates the copy, then writes it: a poll in between sees it empty,
        or with part of what it will hold. Read from its start then, the copy would store again what
        its original stored. So a new file waits while it is empty and another file is or was read,
        and, until it has not changed for COPY_WAIT_SECONDS, while its head is shorter than
        HEAD_BYTES and begins another file's head, or it is shorter than where its original was
        read to while that original is not truncated yet (the server may have written more between
        the copy and the truncation: the copy then never gets there, and is taken as it is). Once
        the original is truncated the copy is whole (copytruncate truncates after copying): it is
        taken at once, not kept waiting where a stop would forget the truncated original's offset.
        A copy that holds more than its original was read to waits for that truncation however long
        it takes (logrotate's `copy`, which never truncates: the original holds it all).
        """
        if size == 0:
            waiting = bool(self._files or self._retired or self._known)
        elif same is not None and same[1] and 0 < same[0] <= size:
            # A whole copy of a file not truncated yet: all it holds is in that file too, which is
            # read on (the reader may be behind, a backlog after a restart). Read from both, the
            # bytes past the file's read position would be stored twice. The copy waits, with no
            # time limit, for the file's truncation: then it is read from where the file was.
            self._undecided[key] = (size, self._clock.monotonic())
            return True
        elif same is not None:
            waiting = same[1] and size < same[0]
        elif len(head) < HEAD_BYTES:
            heads = [f.head for f in self._files.values()] + list(self._retired)
            waiting = any(h.startswith(head) for h in heads + [sf.head for sf in self._known.values()])
        else:
            waiting = False
        if not waiting:
            return False
        now = self._clock.monotonic()
        seen = self._undecided.get(key)
        if seen is None or seen[0] != size:
            self._undecided[key] = (size, now)
            return True
        return size == 0 or now - seen[1] < COPY_WAIT_SECONDS

    def _same_head(self, head: bytes, fd: int, key: tuple[int, int]) -> tuple[int, bool] | None:
        """Where a copy (open as `fd`) of a file with this head continues, if we read such a file,
        and whether that file may still be being copied (it is neither truncated nor gone yet).

        A file being read: from what its reader consumed (the reader emits what it holds when the
        file is truncated). A file truncated or gone: from where it ended. Known only from the store
        (after a restart): from its stored offset, as nothing past it was stored.

        Sixty-four equal bytes are not proof enough: a prefix without a time (PostgreSQL's default
        before 10 was none) starts each day's file with the same lines. Where the rest can be
        compared, it must match too: the first COMPARE_BYTES of a file still open and not truncated,
        or the last bytes read of a file that is gone or known from the store; a different file
        (`key` itself, rewritten since the restart, among them) is read from its start.
        """
        size = os.fstat(fd).st_size
        offsets: list[int] = []
        live = False  # a file with the head is as we read it: logrotate may still be copying it
        for f in self._files.values():
            if f.head != head:
                continue
            try:
                other = self._descriptor(f)  # reopened if it was closed as idle
            except OSError:
                other = None  # gone meanwhile: the head is all there is to go by
            # Only a file as we read it can be compared: one truncated (and maybe written again)
            # since, as copytruncate does right after the copy, no longer holds what was copied.
            as_read = (
                other is not None
                and os.pread(other, HEAD_BYTES, 0) == f.head
                and _bytes_before(other, f.read_pos, len(f.tail)) == f.tail
            )
            if f.tail and size >= f.read_pos:
                # A copy holds what was read right before the read position; another file does not.
                if _bytes_before(fd, f.read_pos, len(f.tail)) != f.tail:
                    continue
            elif as_read and other is not None:
                n = min(size, f.read_pos, COMPARE_BYTES)
                if os.fstat(other).st_size >= n and os.pread(other, n, 0) != os.pread(fd, n, 0):
                    continue  # the same start, then other lines: another file
            live = live or as_read
            offsets.append(f.read_pos)
        if offsets:
            # The file followed now with the head is the newest of those that had it: the ones it
            # replaced (truncated before, or known from the store) are older copies' originals.
            return max(offsets), live
        for h, (end, last, gone) in self._retired.items():
            if h != head:
                continue
            # A truncated file's copy may stop short of where the file was read to (the server
            # wrote on between the copy and the truncation); nothing copies a file renamed or
            # deleted away, so a file that starts like one is another unless it holds its end.
            if (size < end and not gone) or (size >= end and os.pread(fd, len(last), end - len(last)) == last):
                offsets.append(end)
        # (the files followed now are stored too: they were judged above). One not looked at yet
        # since a restart may be the original, not truncated yet.
        stored = [
            sf.offset
            for k, sf in self._known.items()
            if sf.head == head
            and k not in self._files
            and k != key
            and (size < sf.offset or _bytes_before(fd, sf.offset, len(sf.tail)) == sf.tail)
        ]
        return (max(offsets + stored), live or bool(stored)) if offsets or stored else None

    def _retire(self, f: _File, last: bytes, *, gone: bool) -> None:
        """Remember where a truncated or vanished (`gone`) file ended and its `last` bytes before
        that, for a copy of it seen later."""
        if len(f.head) == HEAD_BYTES:
            self._retired[f.head] = (f.read_pos, last, gone)
            while len(self._retired) > RETIRED_HEADS:
                del self._retired[next(iter(self._retired))]

    @staticmethod
    def _tail_at(f: _File, offset: int) -> bytes:
        """The bytes of `f` right before `offset`, for the store (empty when they cannot be read)."""
        if offset == f.read_pos:
            return f.tail  # as read
        if f.fh is None:
            return b""  # (not checked after a restart)
        return _bytes_before(f.fh.fileno(), offset, TAIL_BYTES)

    def _descriptor(self, f: _File) -> int:
        """The open descriptor of `f`, reopening by path (checking it is still the same inode)."""
        if f.fh is None:
            f.fh = _open_regular(f.path, (f.dev, f.ino))
        return f.fh.fileno()

    async def _read_file(self, f: _File, now: float) -> None:
        fd = self._descriptor(f)
        st = os.fstat(fd)
        size = st.st_size
        changed = size != f.read_pos or st.st_mtime_ns != f.mtime_ns
        f.mtime_ns = st.st_mtime_ns
        if changed:
            f.grown_at = now
        # Any write since the last poll: the head, and the bytes before the read position, tell
        # whether the file was truncated and written again (even to the very size we had read).
        if size < f.read_pos or (
            changed and (os.pread(fd, len(f.head), 0) != f.head or _bytes_before(fd, f.read_pos, len(f.tail)) != f.tail)
        ):
            # Truncated (log_truncate_on_rotation reusing postgresql-%a.log, copytruncate), maybe
            # already rewritten past our position: what was pending is complete, the file starts over.
            await self._commit(await f.reader.flush(), [f])
            self._retire(f, f.tail, gone=False)
            await f.reader.aclose()
            f.reader = await self._file_reader()
            f.base = f.committed = f.read_pos = f.seen_lines = 0
            f.head = f.tail = b""
        if len(f.head) < HEAD_BYTES and size > len(f.head):
            f.head = os.pread(fd, HEAD_BYTES, 0)
        await self._read_to(f, fd, size, now)
        await self._store_whole(f, size, now)

    async def _store_whole(self, f: _File, size: int, now: float) -> None:
        """Store the entries read from `f` that are complete: followed by another, quiet long
        enough, or last in a file read to its end (`size`), which PostgreSQL writes whole."""
        at_end = f.read_pos == size and size % PAGE_BYTES != 0  # a page boundary may cut a write
        await self._commit(await f.reader.flush_ready(now, at_end), [f])

    async def _read_to(self, f: _File, fd: int, size: int, now: float, *, stoppable: bool = True) -> None:
        """Feed the bytes from the read position to `size`, storing batches of at most APPEND_LINES
        entries and about APPEND_BYTES bytes.

        A `stop()` ends it early when `stoppable` (a file that left the glob is always read to its
        end: after a restart it may no longer be found).

        A feed ends each batch's lines with the reader's offset, so a batch is what whole feeds made:
        each feed gets at most as many physical lines as the batch has room for entries (a line
        completes at most one entry), and at most FEED_LINES lines and FEED_BYTES bytes.

        Three things overlap, each in order:

            store:   write batch k (SQLite in the store's thread, without the GIL)
            here:    take feed n's rows into batch k+1
            worker:  parse feed n+1 (started before feed n's rows were taken)

        A parse worker is thus never idle while its last rows cross the pipe and are handled here.
        The offsets stored with a batch are the reader's as of the feeds taken into it, never of
        the one still being parsed (AsyncReader.start_feed).
        """
        batch = _Batch(self, f)
        ahead: Coroutine[Any, Any, list[Row]] | None = None  # the feed being parsed
        ahead_lines = 0  # its physical lines
        taken: Coroutine[Any, Any, list[Row]] | None
        try:
            while f.read_pos < size and not (self._stopping and stoppable):
                chunk = os.pread(fd, min(CHUNK_BYTES, size - f.read_pos), f.read_pos)
                if not chunk:
                    break
                self._count_read(len(chunk))
                start = 0
                while start < len(chunk):
                    room = min(APPEND_LINES - len(batch.lines) - ahead_lines, FEED_LINES)
                    if room <= 0 and ahead is not None:  # full once the feed being parsed is taken
                        taken, ahead, ahead_lines = ahead, None, 0
                        await batch.take(await taken)
                        continue
                    piece = chunk[start : start + FEED_BYTES]
                    if piece.count(b"\n") > room:
                        # cut right after the room-th newline: the last part of the split is the rest
                        piece = piece[: len(piece) - len(piece.split(b"\n", room)[-1])]
                    start += len(piece)
                    f.read_pos += len(piece)
                    f.tail = (f.tail + piece[-TAIL_BYTES:])[-TAIL_BYTES:]
                    newlines = piece.count(b"\n")
                    f.seen_lines += newlines
                    taken, ahead, ahead_lines = ahead, f.reader.start_feed(piece, now), newlines
                    if taken is not None:
                        await batch.take(await taken)
            if ahead is not None:
                taken, ahead = ahead, None
                await batch.take(await taken)
        finally:
            if ahead is not None:
                ahead.close()  # a failure or a cancellation: the worker's result goes untaken
            await batch.written()
        await self._commit(batch.lines, [f])

    async def _read_gone(self, key: tuple[int, int]) -> None:
        """A file out of the glob: read what was written to it since the last poll, and finish it
        once it has not grown for ROTATE_WAIT_SECONDS (at once if its descriptor is not held)."""
        f = self._files[key]
        now = self._clock.monotonic()
        size = os.fstat(f.fh.fileno()).st_size if f.fh is not None else f.read_pos
        if f.gone_since is None or size > f.read_pos:
            f.gone_since = now
        if f.fh is None or now - f.gone_since >= ROTATE_WAIT_SECONDS:
            await self._finish(self._files.pop(key))
            return
        if size > f.read_pos:
            await self._read_to(f, f.fh.fileno(), size, now, stoppable=False)
        await self._store_whole(f, size, now)

    async def _finish(self, f: _File) -> None:
        """A file that left the glob: read what is left through the held descriptor, then flush."""
        if f.fh is not None:
            fd = f.fh.fileno()
            await self._read_to(f, fd, os.fstat(fd).st_size, self._clock.monotonic(), stoppable=False)
        await self._commit(await f.reader.flush(), [f])
        last = b""
        if f.fh is not None and f.read_pos > 0:
            n = min(f.read_pos, COMPARE_BYTES)
            last = os.pread(f.fh.fileno(), n, f.read_pos - n)
        self._retire(f, last, gone=True)
        await f.reader.aclose()
        f.close()

    def _prepare(self, lines: list[Row], files: list[_File]) -> tuple[list[Row], list[SourceFile], int, str | None]:
        """Snapshot what to store: the lines, each file's offset right after them, the raw bytes
        they took, and the last of `files` whose reader has seen the configured format (or None).

        Taken synchronously, so the offsets match the lines even while the next chunk is parsed;
        `f.committed` moves now (a failed write makes `run` start over from the stored offsets).
        """
        offsets = []
        raw = 0
        in_format = None
        for f in files:
            if f.reader.lines_matched:
                in_format = f.path
            new = f.base + f.reader.committed_offset
            if new != f.committed or not f.stored:
                raw += max(0, new - f.committed)
                sf = SourceFile(f.dev, f.ino, f.head, f.path, new, self._tail_at(f, new))
                offsets.append(sf)
                f.committed = new
                f.stored = True
                self._known[(f.dev, f.ino)] = sf
        return lines, offsets, raw, in_format

    async def _write(self, lines: list[Row], offsets: list[SourceFile], raw: int, in_format: str | None) -> None:
        """Store a snapshot of `_prepare`; the status says "reading" from the first write that works.

        The rest of the status comes at the end of the poll, which may first read a whole backlog
        (minutes for a few GB): after a failed poll (a full disk), what piled up meanwhile; at the
        start, the log as it is. A first poll says "reading" only once a line of the written file
        is in the configured format, so a wrong `line_prefix` never shows as "reading".
        """
        if not lines and not offsets:
            return
        await self._store.append_rows(self.identity, lines, offsets, raw)
        self._count_stored(lines)
        if self.status.state == "error":
            self.status = replace(self.status, state="reading", reason=None)
        elif self.status.state == "starting" and in_format is not None:
            self.status = replace(self.status, state="reading", file=in_format)

    async def _commit(self, lines: list[Row], files: list[_File]) -> None:
        """Store lines and the offsets they take each file to, in one transaction."""
        await self._write(*self._prepare(lines, files))
