"""Byte handling shared by the line-oriented formats: lines, offsets, the pending entry, flushing.

A format subclass implements `_line(raw, start, cut)` for each complete physical line and uses
`_begin` / `_emit_pending` to manage the one pending entry. This class owns the `EntryReader`
contract of `forwarder.pglog`: `committed_offset`, partial lines, idle flush and end-of-file flush.

A format whose records may span physical lines (csvlog's quoted newlines) sets `_record_start`
while a record is open, so that `committed_offset` stays at the record's start, and may override
`_dropped` to see the bytes of an over-long line that are not kept (to count its quotes).

When an entry is complete without waiting (`flush_written`): the logging collector writes a
message through a line-buffered stdio stream (syslogger.c write_syslogger_file, `_IOLBF`). One that
fits the stream's buffer (the file's block size, at least 4096 bytes) reaches the file in ONE
write(2); a longer one is written as a buffer-full (mid-line), whole buffers, then line by line
(seen with strace on PostgreSQL 15 and glibc), so between those writes the file can end with a
newline in the middle of the entry. Hence an entry is taken as complete at the end of the data
only when it is shorter than WHOLE_WRITE_BYTES; a longer one waits for the next entry or for
quiet. Without the collector a backend writes each message with one write(2) (elog.c
write_console), so the same rule holds.

Why at most one pending entry: PostgreSQL's logging collector (syslogger.c) writes each message
(primary line plus its DETAIL/HINT/CONTEXT/STATEMENT lines) to the file in one piece, so messages
of different processes never interleave in a file, and an entry is complete when the next primary
line starts. Without the collector (stderr redirected by a service manager) long messages can
interleave; they then come out as separate entries or orphan lines, never lost.
"""

from __future__ import annotations

import codecs
from abc import ABC, abstractmethod
from typing import Final

from forwarder.model import LogLine
from forwarder.pglog.entry import MAX_ENTRY_BYTES as MAX_ENTRY_BYTES  # re-exported: the readers take it from here
from forwarder.pglog.entry import Entry
from forwarder.pglog.times import TimeCounts, TimeParser

# Mirrors of forwarder.pglog's constants (defined there, the seam); kept here to avoid an import
# cycle with the package __init__ (MAX_ENTRY_BYTES: entry.py's). A test checks they agree.
IDLE_FLUSH_SECONDS = 1.0
WHOLE_WRITE_BYTES = 4096

# How the readers decode the log: UTF-8, and each byte that is not part of a UTF-8 sequence as the
# Latin-1 character of that value. A database whose encoding is not UTF-8 (LATIN1, WIN1252,
# EUC_JP, SJIS...) has its statements and names written to the server log in that encoding
# (PostgreSQL converts nothing there): LATIN1 text then reads right, and any other keeps every
# byte, reversibly, where a replacement character would lose it.
TEXT_ERRORS: Final = "forwarder-latin1"


def _latin1(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    return exc.object[exc.start : exc.end].decode("latin-1"), exc.end


codecs.register_error(TEXT_ERRORS, _latin1)


class LineReader(ABC):
    """Splits fed bytes into physical lines and keeps the offsets of the `EntryReader` contract."""

    def __init__(self, *, full_text: bool) -> None:
        self.full_text = full_text
        self._consumed = 0  # offset just past the last complete line handed to `_line`
        self._partial: list[bytes] = []  # a line without its newline yet, its first bytes only
        self._partial_len = 0  # its full length (bytes past the cap are counted, not kept)
        self._partial_kept = 0
        self._pending: Entry | None = None
        self._pending_start = 0
        self._last_data: float | None = None
        self._out: list[LogLine] = []
        self.lines_matched = 0  # physical lines in the configured format (see EntryReader)
        self.lines_other = 0  # physical lines of other programs, skipped (see EntryReader)
        self._record_start = -1  # start of a record still open across physical lines, or -1
        # The format's parser of log times, if it has one (its zone counts go into `time_counts`),
        # and the entries stamped with the time of reading because their own time was unreadable.
        self.time_parser: TimeParser | None = None
        self.read_time_entries = 0

    @property
    def time_counts(self) -> TimeCounts:
        """How well the log's own times could be read so far (see `TimeCounts`)."""
        p = self.time_parser
        if p is None:
            return TimeCounts(read_time=self.read_time_entries)
        return TimeCounts(p.zone_mismatches, p.foreign_zone, p.foreign_zone_known, self.read_time_entries)

    @property
    def committed_offset(self) -> int:
        """Bytes since the reader's start that belong to entries already returned."""
        # A partial line always starts at `_consumed`, and a pending entry starts at or before it;
        # so does a record still open across physical lines (`_record_start`).
        start = self._pending_start if self._pending is not None else self._consumed
        return start if self._record_start < 0 else min(start, self._record_start)

    @property
    def unfinished(self) -> bool:
        """Whether data fed is known to be only part of what the writer is writing: a line without
        its newline, a record open across lines (csvlog's quotes), an envelope's line or message
        whose rest still comes (a CRI partial record, a syslog message). `flush()` would cut it in
        two; a stop that leaves it unstored lets the next run read it whole from `committed_offset`."""
        return self._partial_len > 0 or self._record_start >= 0

    def feed(self, data: bytes, now: float) -> list[LogLine]:
        """Take the next bytes of the file; return the entries they complete.

        `now` is a monotonic time, used only to decide idleness in `flush_idle`.
        """
        out: list[LogLine] = []
        if not data:
            return out
        if b"\x00" in data:
            # PostgreSQL never writes a NUL (its messages are C strings), but a file system can:
            # after a power loss, the blocks a log file had been given and not written read as
            # zeros, and the restarted server appends its lines after them. Each NUL is read as
            # a line end (the same length: offsets stay exact), so the next line is read as one.
            data = data.replace(b"\x00", b"\n")
        self._out = out
        self._last_data = now
        start = 0
        if self._partial_len:
            nl = data.find(b"\n")
            if nl < 0:
                self._hold(data)
                return out
            self._hold(data[:nl])
            self._take_partial(1)
            start = nl + 1
        last = data.rfind(b"\n")
        if last >= start:
            line = self._line
            off = self._consumed
            for raw in data[start:last].split(b"\n"):
                n = len(raw)
                if n > MAX_ENTRY_BYTES:
                    self._dropped(raw[MAX_ENTRY_BYTES:])
                    line(raw[:MAX_ENTRY_BYTES], off, True)
                else:
                    line(raw, off, False)
                off += n + 1
            self._consumed = off
            start = last + 1
        if start < len(data):
            self._hold(data[start:])
        return out

    def flush_idle(self, now: float) -> list[LogLine]:
        """Return the pending entry if no byte arrived for >= IDLE_FLUSH_SECONDS; a partial line stays."""
        out: list[LogLine] = []
        if self._pending is not None and self._last_data is not None and now - self._last_data >= IDLE_FLUSH_SECONDS:
            self._out = out
            self._emit_pending()
        return out

    def flush_written(self) -> list[LogLine]:
        """The bytes fed so far are all the file holds now: return the pending entry if it is whole.

        It is whole when the data ends with a newline (no partial line) and the entry is shorter
        than WHOLE_WRITE_BYTES: PostgreSQL wrote it in one write (see the module docstring), so no
        line of it can come later. Anything else waits for the next entry or `flush_idle`.
        """
        out: list[LogLine] = []
        if (
            self._pending is not None
            and not self._partial_len
            and self._record_start < 0
            and self._consumed - self._pending_start < WHOLE_WRITE_BYTES
        ):
            self._out = out
            self._emit_pending()
        return out

    def flush(self) -> list[LogLine]:
        """End of the file for good: a partial line counts as complete, everything pending comes out."""
        out: list[LogLine] = []
        self._out = out
        if self._partial_len:
            self._take_partial(0)
        self._end_of_lines()
        self._emit_pending()
        return out

    # -- for subclasses -------------------------------------------------------------------------

    @abstractmethod
    def _line(self, raw: bytes, start: int, cut: bool) -> None:
        """Handle one physical line (without newline) starting at byte `start`.

        `cut` says the line was longer than MAX_ENTRY_BYTES and `raw` holds only its beginning.
        """

    def _end_of_lines(self) -> None:
        """No line follows (`flush`): a format that holds lines back reads them now."""
        return

    def _dropped(self, data: bytes) -> None:
        """Bytes of an over-long line past MAX_ENTRY_BYTES, not kept; seen before `_line` gets the line."""
        return  # most formats have no use for them

    def _begin(self, entry: Entry, start: int) -> None:
        """Emit the pending entry and make `entry` (starting at byte `start`) the pending one."""
        if self._pending is not None:
            self._out.append(self._pending.finish(self.full_text))
        self._pending = entry
        self._pending_start = start

    def _emit_pending(self) -> None:
        if self._pending is not None:
            self._out.append(self._pending.finish(self.full_text))
            self._pending = None

    # -- internals --------------------------------------------------------------------------------

    def _hold(self, data: bytes) -> None:
        room = MAX_ENTRY_BYTES - self._partial_kept
        if room > 0:
            kept = data[:room]
            self._partial.append(kept)
            self._partial_kept += len(kept)
            if len(data) > room:
                self._dropped(data[room:])
        else:
            self._dropped(data)
        self._partial_len += len(data)

    def _take_partial(self, newline: int) -> None:
        raw = b"".join(self._partial)
        total = self._partial_len
        self._partial.clear()
        self._partial_len = self._partial_kept = 0
        start = self._consumed
        self._line(raw, start, total > len(raw))
        self._consumed = start + total + newline
