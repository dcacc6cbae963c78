"""The async face of the store: one writer thread, a small pool of reader threads.

SQLite allows one writer at a time; funnelling every write through one thread keeps
transactions short and ordered, while WAL lets readers (the API) run beside it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import fcntl
import logging
import os
import sqlite3
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from forwarder import metrics
from forwarder.clock import Clock, with_timeout
from forwarder.config import DatabaseConfig, StoreConfig
from forwarder.logsetup import ThrottledFailureLog
from forwarder.model import Kind, LogLine
from forwarder.store import destinations as D
from forwarder.store import lines as L
from forwarder.store import schema
from forwarder.store import state as S

T = TypeVar("T")
log = logging.getLogger(__name__)

# Lines retention deletes per write transaction: appends wait for each one. Deleting a line costs
# ~30 µs (four indexes, its full-text entries from its recomputed text): 5,000 held the writer
# ~110-150 ms at a million lines, 2,000 ~60 ms. Deleting a day at 2 million lines on a loaded
# 2-core machine, the longest append took 225-385 ms with 2,000, 155-185 ms with 500.
RETENTION_CHUNK = 500
SIZE_TARGET = 0.95  # size retention aims at this fraction of max_bytes
FTS_QUIET_SECONDS = 0.2  # the index waits for appends to pause this long...
# ...unless this many lines are not indexed yet: a search for a word no line has scans them all
# (~4-7 µs a line), so this bounds it to ~70 ms (137 ms measured with 20,000). It was 1,000,000:
# while a backlog was stored, such a search took ~10 s at a million lines.
FTS_MAX_TAIL = 10_000
FTS_BATCH = 5000
# While appends arrive, the index takes only what is past FTS_MAX_TAIL, and at least this many
# lines: an append waits for the index transaction under way, and under a steady stream 5,000
# lines held it ~100-200 ms (fresh daemon, 5,000 lines/s: write -> webhook p99 254-314 ms with
# 5,000 lines a transaction, 190-221 ms with this; `index_batch`). Under a backlog the excess is an
# append's worth of lines, so the index keeps up as with whole batches (a fixed 1,000 did not).
FTS_BUSY_MIN_BATCH = 1000
# Texts of stored lines not indexed yet, kept for the index (Row's text) up to this many: the
# unindexed tail is at most FTS_MAX_TAIL lines while a backlog is stored, and a batch more.
# ~300 bytes each; past it the index makes a line's text from its document, as after a restart.
FTS_TEXTS_MAX = FTS_MAX_TAIL + FTS_BATCH
# Pages of the full-text index's segments merged per write transaction (migration 8: FTS5 no
# longer merges inside the transaction that wrote them). ~5-15 ms each here.
FTS_MERGE_PAGES = 100
# After each chunk retention deletes, at most this many such steps in the parts it wrote to
# (Store._merge_deleted_parts): a part a backlog left unmerged is merged within its first chunks.
FTS_MERGE_STEPS_AFTER_DELETE = 10
# The WAL is copied into the database file (checkpointed) by a thread of its own, at most this
# often while writes come in: a checkpoint run by the writer's COMMIT (SQLite's automatic one,
# every 10,000 pages) held appends ~100-500 ms while retention deleted a day at 2 million lines.
CHECKPOINT_SECONDS = 0.5
WAL_KEEP_BYTES = schema.WAL_LIMIT_BYTES  # the size the WAL file is cut back to when it starts over
# The writer still checkpoints past this many WAL pages (the size it is cut to). Under writes
# that never pause (retention deleting a day while readers poll) the checkpoint thread copies the
# frames but SQLite starts the WAL over only after a checkpoint no write came between, so this is
# how it does. With 100,000 pages (~400 MiB) that checkpoint and the cut after it held the
# writer 250-420 ms every ~7 s (10 million lines, retention of a day); at this size 110-190 ms.
WRITER_CHECKPOINT_PAGES = WAL_KEEP_BYTES // 4096
# A WAL file past WAL_IDLE_BYTES is cut to nothing by the checkpoint thread once no write came
# for this long. Cutting takes the write lock and syncs the database file: done while retention
# deleted (every half second), it held appends up to 530 ms. While writes go on, SQLite keeps the
# file at up to WAL_KEEP_BYTES (journal_size_limit) to write over; a store at rest needs none of
# it (64 MiB was ~40% of the store of a 170 MB log), and the few pages an idle daemon's occasional
# writes leave (a sweep of the insights) are not worth a sync each.
WAL_CUT_QUIET_SECONDS = 2.0
WAL_CUT_RECHECK_SECONDS = 0.25  # how soon a cut put off by a checkpoint in progress looks again
WAL_IDLE_BYTES = 4 << 20
WAL_TRUNCATE_WAIT_MS = 20  # how long cutting it may wait for readers, holding writers back
WRITE_RETRY_SECONDS = 5.0  # background work waits this long after the store failed to write
APPEND_RATE_SECONDS = 2.0  # the window of Store.append_rate


@dataclass(frozen=True, slots=True)
class OverviewNumbers:
    """What the overview reads from the store in one snapshot."""

    counts: dict[str, int]  # lines per kind (every kind) in the window
    usage_lines: int  # stored today
    usage_bytes: int  # of server log read today
    oldest_us: int | None  # the database's oldest line
    used_bytes: int  # of the whole store


DISK_FULL = "disk full"


def is_disk_full(exc: BaseException) -> bool:
    """SQLite's SQLITE_FULL (it maps a write's ENOSPC to it), or ENOSPC itself."""
    if isinstance(exc, sqlite3.Error):
        # The extended code's low byte is the primary code (sqlite.org/rescode.html).
        return (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF == sqlite3.SQLITE_FULL
    return isinstance(exc, OSError) and exc.errno == errno.ENOSPC


def write_failure_reason(exc: BaseException) -> str | None:
    """Why the store could not write, in words, or None when `exc` is not the store failing
    (a bug in a caller, a cancel)."""
    if is_disk_full(exc):
        return f"{DISK_FULL}: the store cannot write ({exc})"
    # SQLite reports its own I/O failures as OperationalError (SQLITE_IOERR, SQLITE_READONLY...);
    # an OSError is a caller's (reading a log file), not the store's.
    if isinstance(exc, sqlite3.OperationalError | sqlite3.DatabaseError) and not isinstance(
        exc, sqlite3.IntegrityError | sqlite3.ProgrammingError
    ):
        return f"the store cannot write: {type(exc).__name__}: {exc}"
    return None


class StoreLocked(RuntimeError):
    """Another process holds the store (`Store(..., exclusive=True)`): a second daemon on one store
    would store every line again under new ids and deliver it again."""

    def __init__(self, path: Path, pid: int | None) -> None:
        self.path = path
        self.pid = pid
        holder = f"process {pid}" if pid is not None else "another process"
        super().__init__(
            f"the store {path} is in use by {holder} (its lock {lock_path(path)} is held): "
            "only one forwarder may run on a store"
        )


def lock_path(store_path: Path) -> Path:
    """The file the daemon's lock on the store is taken on: beside the store, never deleted (a lock
    file removed while a process waits on it would let two holders lock two different files)."""
    return store_path.with_name(store_path.name + ".lock")


def _lock_exclusively(store_path: Path) -> int:
    """Take the exclusive lock on the store at once (StoreLocked if another process has it) and
    write this process's id into the lock file; returns the descriptor that holds it.

    flock(2), not fcntl's record locks: it belongs to the open file description, so the kernel
    drops it when the process dies however it dies (SIGKILL included), and a second open of the
    file (even in this process) conflicts. O_CLOEXEC keeps it out of the parse workers and
    journalctl: a child outliving the daemon must not hold the store.
    """
    path = lock_path(store_path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, schema.STORE_FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _holder_pid(fd)
        os.close(fd)
        raise StoreLocked(store_path, pid) from None
    except BaseException:
        os.close(fd)
        raise
    # For the message a second daemon gives; the lock itself is what counts, not this content.
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _holder_pid(fd: int) -> int | None:
    """The process id the holder wrote into the lock file, if it did (it may be writing it now)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def day_of(now: float) -> str:
    """UTC date used for daily usage."""
    return datetime.fromtimestamp(now, tz=UTC).strftime("%Y-%m-%d")


class Store:
    """The embedded SQLite store; `start()` opens it, `aclose()` closes it."""

    def __init__(self, config: StoreConfig, clock: Clock, *, exclusive: bool = False) -> None:
        """`exclusive`: `start()` takes the store's lock (StoreLocked if another process holds it),
        kept until `aclose()`. The daemon's; the CLI's brief opens (keys) go beside it."""
        self.config = config
        self.path = Path(config.path)
        self._clock = clock
        self._exclusive = exclusive
        self._lock_fd: int | None = None
        self._writer_pool = ThreadPoolExecutor(1, thread_name_prefix="store-writer")
        self._reader_pool = ThreadPoolExecutor(2, thread_name_prefix="store-reader")
        # Searches that read every line's document (L.scans_documents: seconds at millions of lines)
        # queue on a thread of their own: a few at once must not hold every reader while the API's
        # other reads, the overview and the delivery's lag wait behind them.
        self._scan_pool = ThreadPoolExecutor(1, thread_name_prefix="store-scan")
        self._checkpoint_pool = ThreadPoolExecutor(1, thread_name_prefix="store-checkpoint")
        self._checkpointer: sqlite3.Connection | None = None
        self._checkpoint: asyncio.Future[bool] | None = None  # the one in progress
        self._last_checkpoint = 0.0  # event-loop time the last one started
        self._last_write = 0.0  # event-loop time the last write transaction ended
        self._unchecked_writes = False  # writes since the last checkpoint started
        self._later: asyncio.TimerHandle | None = None  # a checkpoint scheduled for those writes
        self._cut: asyncio.TimerHandle | None = None  # the WAL file's cut, scheduled for a pause
        self._checkpointer_open = True  # False once closing: nothing more is scheduled
        self._local = threading.local()
        self._writer: sqlite3.Connection | None = None
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._new_lines = asyncio.Event()
        self.head_id = 0
        self.store_id = ""  # random, made when the store is created: names this store to receivers
        self._last_append = 0.0  # event-loop time of the last append
        self._fts_merge_due = True  # the index may have segments to merge (a store just opened may)
        self._recent_appends: collections.deque[tuple[float, int]] = collections.deque()  # (time, lines)
        # id -> Row text of committed lines not indexed yet (a cache: the documents hold the same)
        self._fts_texts: dict[int, str] = {}
        self.write_problem: str | None = None  # why the last write failed; None once one succeeds
        self._write_failures = ThrottledFailureLog(log, clock)
        self._checkpoint_failures = ThrottledFailureLog(log, clock)
        # Failures of writes this store logged: a caller (a log reader) does not log them again.
        self._reported: weakref.WeakSet[BaseException] = weakref.WeakSet()
        metrics.STORE_WRITABLE.set(1)

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Open (creating if needed) and migrate the store; with `exclusive`, take its lock first,
        before anything is written to it (StoreLocked if another process holds it)."""
        if self._exclusive and self._lock_fd is None:
            self._lock_fd = _lock_exclusively(self.path)
        try:
            await self._open()
        except BaseException:
            self._unlock()  # the daemon exits on this; a caller that retries must find it free
            raise

    async def _open(self) -> None:
        schema.create_private(self.path)

        def _connect() -> tuple[int, str]:
            try:
                conn = schema.connect(str(self.path))
                schema.migrate(conn)
                conn.execute(f"PRAGMA wal_autocheckpoint = {WRITER_CHECKPOINT_PAGES}")
            except sqlite3.DatabaseError as exc:
                # "file is not a database", "database disk image is malformed": say which file
                # (store.path), or the operator is left to guess.
                raise type(exc)(f"the store {self.path}: {exc}") from exc
            self._writer = conn
            return L.head_id(conn), S.store_id(conn)

        self.head_id, self.store_id = await asyncio.get_running_loop().run_in_executor(self._writer_pool, _connect)

    async def aclose(self) -> None:
        """Close every connection; pending operations finish first."""

        def _close_writer() -> None:
            conn, self._writer = self._writer, None
            if conn is None:
                return
            # Upkeep, not needed for the data: `optimize` may run ANALYZE, and the last copy into
            # the database file makes a store closed cleanly whole without its -wal, even when
            # another process holds it open (SQLite's own copy at close happens only in the last
            # connection). Both write: on a full disk they fail, and the committed writes stay in
            # the WAL, where the next open finds them. Closing goes on regardless.
            failed: list[str] = []
            try:
                for upkeep in ("PRAGMA optimize", "PRAGMA wal_checkpoint(PASSIVE)"):
                    try:
                        conn.execute(upkeep).fetchall()
                    except sqlite3.Error as exc:
                        failed.append(f"{upkeep}: {type(exc).__name__}: {exc}")
            finally:
                conn.close()
            if failed:
                log.warning(
                    "the store's upkeep at close failed; nothing is lost (its last writes are in its "
                    "-wal file, read at the next start)",
                    extra={"errors": failed},
                )

        self._checkpointer_open = False
        for timer in (self._later, self._cut):
            if timer is not None:
                timer.cancel()
        self._later = self._cut = None
        # Each step runs whatever the one before raised: a writer left open (or a pool not shut
        # down) kept the daemon from exiting cleanly on SIGTERM with a full disk.
        try:
            await self.checkpoint_finished()
            await asyncio.get_running_loop().run_in_executor(self._writer_pool, _close_writer)
        finally:
            try:
                self._writer_pool.shutdown(wait=True)
                self._checkpoint_pool.shutdown(wait=True)
                if self._checkpointer is not None:
                    self._checkpointer.close()
                    self._checkpointer = None
                self._reader_pool.shutdown(wait=True)
                self._scan_pool.shutdown(wait=True)
                with self._readers_lock:
                    for conn in self._readers:
                        conn.close()
                    self._readers.clear()
            finally:
                self._unlock()

    def _unlock(self) -> None:
        """Give the store's lock back (closing the descriptor releases the flock)."""
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)

    @property
    def is_open(self) -> bool:
        return self._writer is not None

    # --- plumbing -----------------------------------------------------------------------------

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` in one IMMEDIATE transaction on the writer thread."""

        def _txn() -> T:
            conn = self._writer
            if conn is None:
                raise RuntimeError("store is not open")
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn)
                conn.execute("COMMIT")
            except BaseException:
                # A failed COMMIT (SQLITE_FULL, SQLITE_BUSY) leaves the transaction open, while some
                # errors (SQLITE_FULL in a statement) already rolled it back (sqlite.org/lang_transaction.html).
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return result

        try:
            result = await asyncio.get_running_loop().run_in_executor(self._writer_pool, _txn)
        except Exception as exc:
            if (reason := write_failure_reason(exc)) is not None:
                self._write_failed(reason, exc)
            raise
        if self.write_problem is not None:
            self.write_problem = None
            metrics.STORE_WRITABLE.set(1)
            self._write_failures.ok("the store writes again")
        self._last_write = asyncio.get_running_loop().time()
        self._maybe_checkpoint()
        return result

    def _maybe_checkpoint(self) -> None:
        """Start a passive checkpoint on the checkpoint thread unless one runs or one started
        less than CHECKPOINT_SECONDS ago. A passive checkpoint takes no lock a writer or a reader
        waits for (sqlite.org/c3ref/wal_checkpoint_v2.html): appends go on meanwhile."""
        loop = asyncio.get_running_loop()
        self._unchecked_writes = True
        if self._checkpoint is not None or loop.time() - self._last_checkpoint < CHECKPOINT_SECONDS:
            # The writes since are copied by a later one: the next write's, or the one that the
            # end of this one schedules (the last writes of a burst must not wait for more writes).
            if self._checkpoint is None and self._later is None:
                wait = CHECKPOINT_SECONDS - (loop.time() - self._last_checkpoint)
                self._later = loop.call_later(wait, self._checkpoint_later)
            return
        self._checkpoint_writes()

    def _checkpoint_writes(self) -> None:
        """Start a checkpoint for the writes so far (none may be in progress)."""
        self._unchecked_writes = False
        self._last_checkpoint = asyncio.get_running_loop().time()
        self._start_checkpoint(cut_wal=False)

    def _start_checkpoint(self, cut_wal: bool) -> None:
        loop = asyncio.get_running_loop()
        self._checkpoint = loop.run_in_executor(self._checkpoint_pool, self._run_checkpoint, cut_wal)
        self._checkpoint.add_done_callback(self._checkpoint_done)

    async def checkpoint_finished(self) -> None:
        """Return once the checkpoint in progress, if any, has ended (a failed one was logged) and
        its done callback has run: `_checkpoint` is then None or a checkpoint started since."""
        if (running := self._checkpoint) is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(running)
            if self._checkpoint is running:  # it had ended already: its callback is still queued
                await asyncio.sleep(0)

    def _run_checkpoint(self, cut_wal: bool) -> bool:
        """A passive checkpoint, then, with `cut_wal`, cutting a WAL file past WAL_IDLE_BYTES once
        all of it is copied. Returns whether such a file is left to cut (still)."""
        if self._checkpointer is None:
            self._checkpointer = schema.connect(str(self.path))
            self._checkpointer.execute("PRAGMA cache_size = -256")  # it copies pages, keeps none
        conn = self._checkpointer
        busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        try:
            oversized = os.stat(str(self.path) + "-wal").st_size > WAL_IDLE_BYTES
        except FileNotFoundError:
            return False
        if not (oversized and cut_wal) or busy or frames <= 0 or copied < frames:
            return oversized
        # All of the WAL is in the database file. After a burst its file stays as large as the
        # burst made it until a write starts it over; past WAL_IDLE_BYTES, cut it now. TRUNCATE
        # waits for readers on older snapshots while holding writers back, so it gets only
        # WAL_TRUNCATE_WAIT_MS; a reader still on the WAL past that holds it up, and the file is
        # left to cut: the caller tries again at the next pause.
        conn.execute(f"PRAGMA busy_timeout = {WAL_TRUNCATE_WAIT_MS}")
        try:
            (held_up, _, _) = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            conn.execute("PRAGMA busy_timeout = 30000")
        return bool(held_up)

    def _checkpoint_later(self) -> None:
        self._later = None
        if self._unchecked_writes and self._checkpointer_open:
            self._maybe_checkpoint()

    def _checkpoint_done(self, done: asyncio.Future[bool]) -> None:
        self._checkpoint = None
        loop = asyncio.get_running_loop()
        if self._unchecked_writes and self._later is None and self._checkpointer_open:
            self._later = loop.call_later(CHECKPOINT_SECONDS, self._checkpoint_later)
        if done.cancelled():
            return
        if (exc := done.exception()) is not None:
            # The next write tries again; the writer's own checkpoint bounds the WAL meanwhile.
            # A store failure (a full disk) is known; anything else gets its traceback.
            self._checkpoint_failures.failure(
                "a checkpoint of the store failed", exc, traceback=write_failure_reason(exc) is None
            )
            return
        self._checkpoint_failures.ok("the store's checkpoints work again")
        if done.result() and self._cut is None and self._checkpointer_open:
            self._cut = loop.call_later(WAL_CUT_QUIET_SECONDS, self._cut_when_quiet)

    def _cut_when_quiet(self) -> None:
        """Cut the WAL file once no write came for WAL_CUT_QUIET_SECONDS: now, or when that many
        seconds have passed since the last write (a checkpoint in progress ends first)."""
        self._cut = None
        if not self._checkpointer_open:
            return
        loop = asyncio.get_running_loop()
        quiet_for = loop.time() - self._last_write
        if self._checkpoint is None and quiet_for >= WAL_CUT_QUIET_SECONDS:
            self._start_checkpoint(cut_wal=True)
            return
        # Not yet: look again when the pause would be long enough. This must reschedule itself:
        # the checkpoint after the last writes schedules no cut while this one is pending.
        wait = max(WAL_CUT_QUIET_SECONDS - quiet_for, WAL_CUT_RECHECK_SECONDS)
        self._cut = loop.call_later(wait, self._cut_when_quiet)

    def _write_failed(self, reason: str, exc: Exception) -> None:
        self.write_problem = reason
        metrics.STORE_WRITABLE.set(0)
        metrics.STORE_WRITE_FAILURES.labels("disk_full" if is_disk_full(exc) else "other").inc()
        # `reason` says it all (SQLite's own failure, no bug of ours): no traceback.
        self._write_failures.failure("a store write failed", exc, {"reason": reason})
        self._reported.add(exc)

    def reported(self, exc: BaseException) -> bool:
        """Whether `exc` is a failed write this store logged (a caller need not log it again)."""
        return exc in self._reported

    def _reader(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = schema.connect(str(self.path), readonly=True)
            L.register_functions(conn)
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    async def _read(self, fn: Callable[[sqlite3.Connection], T], pool: ThreadPoolExecutor | None = None) -> T:
        """Run `fn` on a reader thread (of `pool`, else the readers'), in one read transaction (a
        consistent snapshot)."""

        def _snap() -> T:
            conn = self._reader()
            conn.execute("BEGIN")
            try:
                return fn(conn)
            finally:
                conn.execute("COMMIT")

        return await asyncio.get_running_loop().run_in_executor(pool or self._reader_pool, _snap)

    def _now_us(self) -> int:
        return int(self._clock.now() * 1_000_000)

    # --- ingest -------------------------------------------------------------------------------

    async def register_database(self, db: DatabaseConfig) -> L.Identity:
        """The identity stamped on this database's lines; seeds its settings on first sight."""
        now_us = self._now_us()
        code = await self._write(lambda c: S.ensure_database(c, db.id, db.enabled, db.full_text, now_us))
        return L.Identity(code=code, database_id=db.id, database_name=db.name, host=db.host)

    async def append(
        self, identity: L.Identity, lines: Sequence[LogLine], files: Sequence[S.SourceFile], raw_bytes: int
    ) -> int:
        """Store lines and the file offsets they came from in ONE transaction; returns the head id."""
        return await self.append_rows(identity, L.encode_rows(identity, lines), files, raw_bytes)

    async def append_rows(
        self,
        identity: L.Identity,
        rows: Sequence[L.Row],
        files: Sequence[S.SourceFile],
        raw_bytes: int,
        journal_cursor: str | None = None,
    ) -> int:
        """`append` for lines already encoded (by a parse worker); `journal_cursor`, when given, is
        stored in the same transaction (a journal source's position, as `files` are a file's)."""
        now_us = self._now_us()
        day = day_of(self._clock.now())

        def _txn(conn: sqlite3.Connection) -> int:
            first, last = L.append_rows(conn, rows)
            # Here, on the writer thread, before the commit: no index transaction comes between
            # the lines and their texts. The ids of a transaction that rolls back are given again
            # to the next append's lines, so whatever it left under them is replaced or removed.
            ids = range(first, last + 1) if last else range(0)
            if len(self._fts_texts) < FTS_TEXTS_MAX:
                self._fts_texts.update(zip(ids, (r[L.ROW_TEXT] for r in rows), strict=True))
            elif self._fts_texts:
                for line_id in ids:
                    self._fts_texts.pop(line_id, None)
            for sf in files:
                S.put_source_file(conn, identity.database_id, sf, now_us)
            if journal_cursor is not None:
                S.put_journal_cursor(conn, identity.database_id, journal_cursor, now_us)
            if rows or raw_bytes:
                S.add_usage(conn, identity.code, day, len(rows), raw_bytes)
            return last

        last = await self._write(_txn)
        self._last_append = asyncio.get_running_loop().time()
        self._recent_appends.append((self._last_append, len(rows)))
        while self._recent_appends[0][0] < self._last_append - APPEND_RATE_SECONDS:
            self._recent_appends.popleft()
        if last:
            self.head_id = max(self.head_id, last)
            self._new_lines.set()
            self._new_lines = asyncio.Event()
        return self.head_id

    async def source_files(self, db_id: str) -> list[S.SourceFile]:
        return await self._read(lambda c: S.source_files(c, db_id))

    async def journal_cursor(self, db_id: str) -> str | None:
        return await self._read(lambda c: S.journal_cursor(c, db_id))

    async def forget_source_files(self, db_id: str, keep: list[tuple[int, int]]) -> None:
        await self._write(lambda c: S.forget_source_files(c, db_id, keep))

    async def wait_for_lines(self, after_id: int, wait_seconds: float) -> bool:
        """Wait until the store has a line newer than `after_id`, at most `wait_seconds`."""
        try:
            await asyncio.wait_for(self.stored_after(after_id), wait_seconds)
        except TimeoutError:
            return self.head_id > after_id
        return True

    async def stored_after(self, line_id: int) -> None:
        """Return once a line newer than `line_id` is stored (each append sets a fresh event)."""
        while self.head_id <= line_id:
            await self._new_lines.wait()

    # --- reads --------------------------------------------------------------------------------

    async def list_lines(self, db_code: int, query: L.LineQuery) -> L.Page:
        pool = self._scan_pool if L.scans_documents(query) else None
        return await self._read(lambda c: L.list_lines(c, db_code, query), pool)

    async def line(self, db_code: int, line_id: int) -> tuple[bytes, int] | None:
        """One line of a database: its document (id spliced in) and group key; None if absent."""
        return await self._read(lambda c: L.line_by_id(c, db_code, line_id))

    async def tail_lines(self, db_code: int, query: L.LineQuery, wait_seconds: float) -> L.Page:
        """`list_lines` with `query.after` (a live tail) that, while nothing matches, waits up to
        `wait_seconds` (on the store's clock) for a matching line.

        Lines stored meanwhile that do not match keep it waiting: each append is looked at once
        (only the lines past the last look), and the page's `next_after` tells the client how far
        that went, so it does not ask about them again.
        """
        if query.after is None:
            raise ValueError("a tail needs `after`")
        page = await self.list_lines(db_code, query)
        deadline = self._clock.monotonic() + wait_seconds
        # With `before`, no line stored later can match: the window is closed once it is looked at.
        last = None if query.before is None else query.before - 1
        while not page.docs and page.next_after is not None and (last is None or page.next_after < last):
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                break
            try:
                await with_timeout(self._clock, self.stored_after(page.next_after), remaining)
            except TimeoutError:
                break
            page = await self.list_lines(db_code, replace(query, after=page.next_after))
        return page

    async def groups(self, db_code: int, from_us: int, limit: int) -> list[L.Group]:
        return await self._read(lambda c: L.groups(c, db_code, from_us, limit))

    async def overview_numbers(self, db_code: int, since_us: int, day: str) -> OverviewNumbers:
        """Counts per kind since `since_us`, the day's usage, the oldest line and the store size."""

        def _q(c: sqlite3.Connection) -> OverviewNumbers:
            lines, nbytes = S.usage(c, db_code, day)
            return OverviewNumbers(
                counts=L.counts_by_kind(c, db_code, since_us),
                usage_lines=lines,
                usage_bytes=nbytes,
                oldest_us=L.oldest_time(c, db_code),
                used_bytes=L.used_bytes(c),
            )

        return await self._read(_q)

    # --- settings, keys, audit ----------------------------------------------------------------

    async def get_settings(self, db_id: str) -> S.DatabaseSettings | None:
        return await self._read(lambda c: S.get_settings(c, db_id))

    async def put_settings(
        self, db_id: str, settings: S.DatabaseSettings, *, org: str, actor: str
    ) -> S.DatabaseSettings:
        now_us = self._now_us()

        def _txn(c: sqlite3.Connection) -> S.DatabaseSettings:
            before = S.get_settings(c, db_id)
            S.put_settings(c, db_id, settings, now_us)
            S.audit(
                c,
                now_us,
                org=org,
                actor=actor,
                action="logs.settings_changed",
                target=db_id,
                details={
                    "before": {"enabled": before.enabled, "full_text": before.full_text} if before else None,
                    "after": {"enabled": settings.enabled, "full_text": settings.full_text},
                },
            )
            return settings

        return await self._write(_txn)

    async def verify_key(self, presented: str) -> S.ApiKey | None:
        return await self._read(lambda c: S.verify_key(c, presented))

    async def create_key(self, name: str, role: S.Role, org: str = S.DEFAULT_ORG) -> tuple[S.ApiKey, str]:
        now_us = self._now_us()
        return await self._write(lambda c: S.create_key(c, name, role, now_us, org))

    async def create_session(self, key_id: str, ttl_seconds: float) -> tuple[str, str]:
        """A web session for a live key: (cookie token, CSRF token)."""
        now_us = self._now_us()
        return await self._write(lambda c: S.create_session(c, key_id, now_us, int(ttl_seconds * 1_000_000)))

    async def web_session(self, token: str) -> S.WebSession | None:
        now_us = self._now_us()
        return await self._read(lambda c: S.web_session(c, token, now_us))

    async def end_session(self, token: str) -> None:
        await self._write(lambda c: S.end_session(c, token))

    async def hourly_counts(self, db_code: int, since_us: int) -> list[tuple[int, Kind, int]]:
        """Lines per hour and kind since `since_us` (the overview page's chart)."""
        return await self._read(lambda c: L.hourly_counts_by_kind(c, db_code, since_us))

    async def audit(
        self, *, org: str, actor: str, action: str, target: str | None, details: dict[str, object] | None
    ) -> None:
        """Record an operation done outside the store (a fix applied to a server); `details` never holds a secret."""
        now_us = self._now_us()
        await self._write(
            lambda c: S.audit(c, now_us, org=org, actor=actor, action=action, target=target, details=details)
        )

    async def audit_records(self, limit: int = 100, org: str | None = None) -> list[dict[str, object]]:
        return await self._read(lambda c: S.audit_records(c, limit, org))

    # --- destinations -------------------------------------------------------------------------

    async def destinations(self) -> list[tuple[D.Destination, D.DeliveryState]]:
        return await self._read(D.list_all)

    async def destination(self, dest_id: str) -> tuple[D.Destination, D.DeliveryState] | None:
        return await self._read(lambda c: D.get(c, dest_id))

    async def add_destination(self, dest: D.Destination, *, org: str, actor: str) -> D.DeliveryState:
        """A new destination starts at the head: it receives lines stored from now on."""
        now_us = self._now_us()

        def _txn(c: sqlite3.Connection) -> D.DeliveryState:
            head = L.head_id(c)
            D.insert(c, dest, head)
            S.audit(
                c,
                now_us,
                org=org,
                actor=actor,
                action="destinations.created",
                target=dest.id,
                details={"type": dest.type, "name": dest.name},
            )
            return D.DeliveryState(cursor=head)

        return await self._write(_txn)

    async def change_destination(self, dest: D.Destination, *, org: str, actor: str, fields: list[str]) -> None:
        now_us = self._now_us()

        def _txn(c: sqlite3.Connection) -> None:
            D.update(c, dest)
            # Field names only: a changed secret is recorded as changed, never with its value.
            S.audit(
                c,
                now_us,
                org=org,
                actor=actor,
                action="destinations.changed",
                target=dest.id,
                details={"fields": sorted(fields)},
            )

        await self._write(_txn)

    async def remove_destination(self, dest_id: str, *, org: str, actor: str) -> bool:
        now_us = self._now_us()

        def _txn(c: sqlite3.Connection) -> bool:
            done = D.delete(c, dest_id)
            if done:
                S.audit(c, now_us, org=org, actor=actor, action="destinations.deleted", target=dest_id)
            return done

        return await self._write(_txn)

    async def next_batch(
        self, cursor: int, match: Callable[[int, int], bool], max_lines: int, max_bytes: int
    ) -> D.Batch | None:
        return await self._read(lambda c: D.next_batch(c, cursor, match, max_lines, max_bytes))

    async def docs_by_ids(self, ids: Sequence[int]) -> dict[int, bytes]:
        return await self._read(lambda c: D.docs_by_ids(c, ids))

    async def save_delivery_state(self, dest_id: str, state: D.DeliveryState, sent: int, dropped: int) -> None:
        await self._write(lambda c: D.save_state(c, dest_id, state, sent, dropped))

    async def start_batch(self, dest_id: str, state: D.DeliveryState, sent: int, dropped: int) -> D.DeliveryState:
        """Persist a batch just read as in flight, less the lines retention deleted since (D.start_batch)."""
        return await self._write(lambda c: D.start_batch(c, dest_id, state, sent, dropped))

    async def end_backoff(self, dest_id: str) -> None:
        """The destination's next attempt is due now (attempts 0); the batch in flight stays."""
        await self._write(lambda c: D.end_backoff(c, dest_id))

    async def lag(self, cursor: int) -> tuple[int, int | None]:
        return await self._read(lambda c: D.lag(c, cursor))

    async def database_codes(self) -> dict[str, int]:
        return await self._read(lambda c: {i: code for code, i in c.execute("SELECT code, id FROM databases")})

    # --- for consumers that keep tables of their own (insights, alerts) ----------------------

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` in one read snapshot on a reader thread (insights reads lines and its tables)."""
        return await self._read(fn)

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` in one write transaction on the writer thread. For `insights/`, which writes only
        its own tables (schema migration 4): never lines, destinations or settings."""
        return await self._write(fn)

    def append_rate(self) -> float:
        """Lines appended per second over the last APPEND_RATE_SECONDS (event-loop time): a backlog
        being stored shows as a high rate, and background work (insights) then yields to it."""
        since = asyncio.get_running_loop().time() - APPEND_RATE_SECONDS
        return sum(n for t, n in self._recent_appends if t >= since) / APPEND_RATE_SECONDS

    # --- background work ----------------------------------------------------------------------

    async def index_once(self, batch: int = 2000) -> int:
        """Add the next lines to the full-text index; returns how many."""
        return await self._write(lambda c: L.index_fts(c, batch, self._fts_texts))

    async def merge_fts_once(self) -> bool:
        """Merge a few pages of the full-text index's segments; False when nothing was left to merge."""
        self._fts_merge_due = await self._write(lambda c: L.merge_fts(c, FTS_MERGE_PAGES))
        return self._fts_merge_due

    async def _merge_deleted_parts(self, parts: frozenset[int]) -> None:
        """Merge the parts retention just wrote deletion entries to, until they have nothing left
        to merge or FTS_MERGE_STEPS_AFTER_DELETE steps (a transaction each) were taken.

        Each chunk adds a segment of deletions to its part; FTS5 merges a level of a part that
        reaches 16 segments at once, inside the COMMIT that made the 16th (`crisismerge`). A part
        left unmerged by a backlog (indexed faster than merged) has levels near that: retention's
        segments then made one COMMIT merge most of the part, ~540 ms at a million lines. Merged
        as they come, a part's levels stay far from it."""
        for _ in range(FTS_MERGE_STEPS_AFTER_DELETE):
            if not parts or not await self._write(lambda c: L.merge_fts(c, FTS_MERGE_PAGES, parts)):
                return
            self._fts_merge_due = True

    async def retention_once(self) -> int:
        """Delete lines past `retention_days`, then the oldest while over `max_bytes`."""
        cutoff_us = self._now_us() - int(self.config.retention_days * 86400 * 1_000_000)
        deleted = 0
        # Parts of the full-text index this pass empties: their entries go with the part, not line
        # by line (no deletion entries to write, then merge; lines.delete_lines).
        emptying = frozenset(await self._read(lambda c: L.parts_older_than(c, cutoff_us)))
        while True:
            await self._checkpoint_caught_up()
            rows = await self._write(lambda c: self._delete(c, L.older_than(c, cutoff_us, RETENTION_CHUNK), emptying))
            deleted += len(rows)
            # Each chunk adds a segment of deletions to its parts: merge as they come.
            await self._merge_deleted_parts(L.parts_of(rows) - emptying)
            if len(rows) < RETENTION_CHUNK:
                break
        by_age = deleted
        if by_age:
            metrics.RETENTION_DELETED.labels("age").inc(by_age)
        # Over the size cap: delete the oldest lines in proportion to the excess (aiming a little
        # below the cap so the next append does not trigger it again), measuring after each chunk.
        while (used := await self._read(L.used_bytes)) > self.config.max_bytes:
            count = await self._read(L.line_count)
            target = self.config.max_bytes * SIZE_TARGET
            want = min(RETENTION_CHUNK, max(1, int(count * (used - target) / used)))
            await self._checkpoint_caught_up()
            rows = await self._write(lambda c, w=want: self._delete(c, L.oldest(c, w)))  # type: ignore[misc]
            if not rows:
                break
            deleted += len(rows)
            metrics.RETENTION_DELETED.labels("size").inc(len(rows))
            await self._merge_deleted_parts(L.parts_of(rows))
        if deleted:
            await self._write(L.forget_spans)
            log.info("retention deleted lines", extra={"deleted": deleted, "by_age": by_age})
        await self._refresh_gauges()
        return deleted

    async def _checkpoint_caught_up(self) -> None:
        """Wait for the checkpoint in progress, then start one for the writes since (retention,
        before each chunk). Deleting writes the WAL fast (~64 MiB a second at 10 million lines);
        copied twice a second, it reached WRITER_CHECKPOINT_PAGES between two checkpoints and the
        COMMIT that crossed it copied the rest, holding appends 60-110 ms each time (timed per
        transaction, deleting a day). Paced so, the checkpoint thread stays about one chunk
        behind and that COMMIT copies only what is left: 30-50 ms. Retention's longest append gap
        was then set by single merge steps of the one full-text index (~100-130 ms); with the
        index in parts, it is ~20-40 ms over the gap without retention (README)."""
        while self._checkpoint is not None:  # the one awaited may be followed by one its timer started
            await self.checkpoint_finished()
        if self._unchecked_writes and self._checkpointer_open:
            self._checkpoint_writes()

    async def _refresh_gauges(self) -> None:
        """The store's size and line count for /metrics (each retention pass: a count is not free)."""
        used, count = await self._read(lambda c: (L.used_bytes(c), L.line_count(c)))
        metrics.STORE_SIZE.set(used)
        metrics.STORE_LINES.set(count)
        metrics.STORE_MAX.set(self.config.max_bytes)

    def _delete(
        self, conn: sqlite3.Connection, rows: list[tuple[int, int, int]], emptying: frozenset[int] = frozenset()
    ) -> list[tuple[int, int, int]]:
        """Delete lines, first counting them as dropped for each destination that had not sent
        them; returns the lines deleted."""
        for (dest_id, dest_type), n in D.account_retention(conn, rows).items():
            metrics.LINES_DROPPED.labels(dest_id, dest_type, "retention").inc(n)
        for line_id, _, _ in rows:  # deleted before they were indexed: nothing will ask
            self._fts_texts.pop(line_id, None)
        L.delete_lines(conn, rows, emptying)
        return rows

    async def run(self) -> None:
        """Keep the full-text index behind the head and apply retention, until cancelled.

        Indexing yields to appends: while lines are arriving in bulk (a backlog) the writer thread
        stores them first, and the index catches up in the pauses. Searches stay exact meanwhile
        (the unindexed tail is scanned); past FTS_MAX_TAIL unindexed lines it indexes regardless.
        A store that cannot write (a full disk) pauses this work instead of ending it.
        """
        next_retention = self._clock.monotonic()
        while True:
            try:
                if self._clock.monotonic() >= next_retention:
                    await self.retention_once()
                    next_retention = self._clock.monotonic() + self.config.retention_interval_seconds
                watermark = await self._read(L.fts_watermark)
                busy = asyncio.get_running_loop().time() - self._last_append < FTS_QUIET_SECONDS
                if batch := index_batch(self.head_id - watermark, busy):
                    await self.index_once(batch)
                    self._fts_merge_due = True
                    continue
                # One merge step at a time: appends wait for no more than one of them.
                if self._fts_merge_due and await self.merge_fts_once() and not busy:
                    continue
            except Exception as exc:
                if write_failure_reason(exc) is None:
                    raise
                # The disk is full (logged by _write): indexing and retention resume once it has room.
                await self._clock.sleep(WRITE_RETRY_SECONDS)
                continue
            if busy:
                await asyncio.sleep(FTS_QUIET_SECONDS)
            else:
                await self.wait_for_lines(watermark, 1.0)


def index_batch(unindexed: int, appending: bool) -> int:
    """How many lines the full-text index takes in its next transaction (0: none for now), with
    `unindexed` lines past its watermark and appends arriving (`appending`) or not."""
    if unindexed <= 0 or (appending and unindexed <= FTS_MAX_TAIL):
        return 0
    if not appending:
        return FTS_BATCH
    return min(FTS_BATCH, max(FTS_BUSY_MIN_BATCH, unindexed - FTS_MAX_TAIL))


def open_sync(path: str | Path) -> sqlite3.Connection:
    """A migrated connection for the CLI's offline commands (keys); the daemon may run beside it."""
    schema.create_private(Path(path))
    conn = schema.connect(str(path))
    schema.migrate(conn)
    return conn
