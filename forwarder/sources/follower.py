"""What every log source of a database shares, whatever it reads (files: tail.py, the journal:
journal.py): its status for the overview and the ingest metrics, its settings, its readers.

A source reads in `run()` until `stop()`; `apply_settings` takes effect at once (a disabled
database stops reading, its position kept; `full_text` reaches the readers already open).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from forwarder import metrics
from forwarder.clock import Clock
from forwarder.config import DatabaseConfig
from forwarder.logsetup import RepeatedFailureLog, ThrottledFailureLog
from forwarder.model import KINDS
from forwarder.pglog import TimeCounts
from forwarder.sources.parsing import AsyncReader, LocalReader, ParseWorker, ReaderSpec
from forwarder.store import Identity, Store
from forwarder.store.lines import Row

SourceState = Literal["starting", "reading", "disabled", "no_file", "permission_denied", "format_mismatch", "error"]
# Reading states that mean the log cannot be read (forwarder_ingest_source_up = 0).
DOWN: Final[frozenset[SourceState]] = frozenset({"no_file", "permission_denied", "error"})
NO_TIME_COUNTS: Final = TimeCounts()


@dataclass(frozen=True, slots=True)
class Skipped:
    """An entry matching the glob that is not read, and why (in words)."""

    path: str
    why: str


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """What the overview shows about a database's log reading."""

    state: SourceState = "starting"
    file: str | None = None
    reason: str | None = None
    skipped: tuple[Skipped, ...] = ()  # entries matching the glob that are not read
    # How well the log's own times were read (see pglog.TimeCounts), and that in words.
    times: TimeCounts = NO_TIME_COUNTS
    time_note: str | None = None


DISABLED: Final = SourceStatus("disabled", None, "log reading is disabled in the settings")


class Follower:
    """The shared part of a database's log source; a subclass reads (`run`, `stop`)."""

    def __init__(
        self,
        db: DatabaseConfig,
        identity: Identity,
        store: Store,
        clock: Clock,
        worker: ParseWorker | None,
        log: logging.Logger,
    ) -> None:
        self.db = db
        self.identity = identity
        self._store = store
        self._clock = clock
        self._worker = worker  # None: parse in this process
        self._status = SourceStatus()
        self.enabled = True
        self._full_text = False
        self._stopping = False
        self._wake = asyncio.Event()  # a setting changed, or stop(), or (files) a change to read
        self._failures = RepeatedFailureLog(log, clock)
        self._unreadable = RepeatedFailureLog(log, clock)  # a log the daemon may not read (a status, not an error)
        # A parse worker that cannot start (WorkerStartError): its message says why, a traceback
        # would only show where; retried with a backoff, so it repeats in the log once a minute.
        self._worker_failures = ThrottledFailureLog(log, clock)
        self._source_up = metrics.SOURCE_UP.labels(db.id)
        self._read_bytes = metrics.INGEST_BYTES.labels(db.id)
        self._last_read = metrics.LAST_READ.labels(db.id)
        self._lines_by_kind = [metrics.INGEST_LINES.labels(db.id, kind) for kind in KINDS]
        metrics.init_database_series(db.id)  # at 0 from the start: the alerts' increase() needs it

    @property
    def status(self) -> SourceStatus:
        # Disabled from the moment the setting says so: a read that was under way when the source
        # was disabled still ends by recording what it read, and must not show "reading" meanwhile.
        return DISABLED if not self.enabled else self._status

    @status.setter
    def status(self, value: SourceStatus) -> None:
        self._status = value
        self._source_up.set(0 if value.state in DOWN else 1)

    @property
    def full_text(self) -> bool:
        return self._full_text

    def apply_settings(self, enabled: bool, full_text: bool) -> None:
        """Take new settings now: a disabled database stops reading (its position kept)."""
        if enabled and not self.enabled and self._status.state == "disabled":
            # Reading resumes at the next poll, which may first read all that was written while it
            # was off: "starting" until it stores a line of it, not "disabled" until it ends.
            self.status = SourceStatus()
        self.enabled = enabled
        self._full_text = full_text
        for reader in self._open_readers():
            reader.full_text = full_text
        self._wake.set()

    def _open_readers(self) -> Iterable[AsyncReader]:
        """The readers open now (each gets a new `full_text` setting at once)."""
        return ()

    async def _new_reader(self, spec: ReaderSpec) -> AsyncReader:
        if self._worker is None:
            return LocalReader(spec, self._full_text)
        return await self._worker.open(spec, self._full_text)

    def _count_read(self, nbytes: int) -> None:
        self._read_bytes.inc(nbytes)
        self._last_read.set(self._clock.now())

    def _count_stored(self, rows: list[Row]) -> None:
        for kind, n in Counter(row[2] for row in rows).items():
            self._lines_by_kind[kind].inc(n)
