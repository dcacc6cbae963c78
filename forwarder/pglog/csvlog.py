"""The csvlog format: one CSV record per log entry, possibly spanning physical lines.

PostgreSQL writes (elog.c / csvlog.c write_csvlog) one record per message, the whole message
(DETAIL, HINT, CONTEXT, QUERY, STATEMENT included) in its columns:

    log_time, user_name, database_name, process_id, connection_from, session_id,
    session_line_num, command_tag, session_start_time, virtual_transaction_id, transaction_id,
    error_severity, sql_state_code, message, detail, hint, internal_query, internal_query_pos,
    context, query, query_pos, location, application_name            (23 columns, PG 9.0-12)
    + backend_type                                                    (24 columns, PG 13)
    + leader_pid, query_id                                            (26 columns, PG 14-18)

The column count is read per record, so a file holding both (a server upgraded in place keeps
its log directory) reads fine. Text columns are quoted with `"` doubled inside; a NULL is an empty
unquoted column; newlines inside a value are written as they are, so a record spans physical lines
until its quotes balance (an even count of `"` means no quoted field is open).

- Every record is a complete entry: it is emitted as soon as its last line arrives, nothing waits
  for the next record or for quiet. While a record is open, `committed_offset` stays at its start.
- Mapping: log_time -> time (log.timezone resolves the abbreviation), error_severity ->
  severity, sql_state_code -> sqlstate (`00000` -> None, in `classify`), internal_query ->
  `Entry.query` (shown in context, see entry.py), query -> statement, connection_from
  `host:port` -> client `host` (`[local]` stays, as for stderr's %r), location dropped.
- The message gets ` at character N` (N: query_pos, else internal_query_pos) appended, as the
  stderr format writes it (elog.c send_message_to_server_log), so the formats agree. (csvlog has
  the statement's position only when it also logs the statement; stderr appends it regardless.)
- `\\r\\n` inside a record becomes `\\n`: the stderr reader drops a line's trailing `\\r`, and the
  formats must agree.
- Malformed records (a column count other than 23/24/26, a time that does not parse, an empty
  severity, quotes still open at the end of the file) become kind `other` with their raw text as
  the message (values removed like any unknown message), never dropped. The time is the record's
  own when its first column parses, else the time of reading.
- A line with an odd count of quotes opens a record only if it starts like one
  (`YYYY-MM-DD HH:MM:SS[.fff] ZONE,`): otherwise one stray quote (a log in another format) would
  swallow every following line. An open record that has grown past the 1 MiB entry cap is closed
  (as malformed) by the next line that starts like a record, so a record cut by a crash or a full
  disk costs at most 1 MiB of log, not the rest of the file.
- The cap: a record's bytes past MAX_ENTRY_BYTES are counted (their quotes too) but not kept; the
  kept beginning is parsed leniently (the last value cut) and the entry flagged `truncated`.

Parsing uses the stdlib `csv` module through one persistent reader (C speed, about 4x a hand
parser in Python); a record the module refuses (a value over its field size limit, a stray quote)
goes to a small hand parser, so `csv.field_size_limit` (process-wide) is never changed.
"""

from __future__ import annotations

import csv
import re
import time
from typing import Final

from forwarder.model import LogLine
from forwarder.pglog.entry import Entry
from forwarder.pglog.reader import MAX_ENTRY_BYTES, TEXT_ERRORS, LineReader
from forwarder.pglog.times import TimeParser
from forwarder.pglog.translated import SEVERITY_OF

_COLUMNS: Final = frozenset({23, 24, 26})
_MAX_COLUMNS: Final = 26
_MESSAGE: Final = 13  # index of `message`: a cut record needs at least this many + 1 columns
# The start of a record: log_time and the comma after it.
_HEAD: Final = re.compile(rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? [^,\n]{1,32},").match
_LONG: Final = 1 << 16  # records longer than this skip the csv module (its default field limit is 128 KiB)


# csvlog columns copied to the entry as they are (PostgreSQL docs, "Using CSV-Format Log
# Output"; the same positions in PG13's 24 and PG14+'s 26 columns).
_TEXT_COLUMNS: Final = (
    (12, "sqlstate"),
    (14, "detail"),
    (15, "hint"),
    (16, "query"),
    (18, "context"),
    (19, "statement"),
    (1, "user"),
    (2, "database"),
    (22, "application"),
)


class _OneRecord:
    """The iterable under the persistent `csv.reader`: yields the record set in `text`, then stops."""

    __slots__ = ("text",)

    def __init__(self) -> None:
        self.text: str | None = None

    def __iter__(self) -> _OneRecord:
        return self

    def __next__(self) -> str:
        text = self.text
        if text is None:
            raise StopIteration
        self.text = None
        return text


def split_record(text: str) -> list[str] | None:
    """The columns of one CSV record (hand parser); a quoted value cut by the end is kept as is.

    None when a quoted value is followed by something other than a comma (not CSV).
    """
    out: list[str] = []
    i, n = 0, len(text)
    while True:
        if i < n and text[i] == '"':
            j = i + 1
            parts: list[str] = []
            while True:
                k = text.find('"', j)
                if k < 0:  # cut inside a quoted value
                    parts.append(text[j:])
                    out.append("".join(parts))
                    return out
                if text.startswith('"', k + 1):
                    parts.append(text[j : k + 1])
                    j = k + 2
                    continue
                parts.append(text[j:k])
                i = k + 1
                break
            out.append("".join(parts))
            if i >= n:
                return out
            if text[i] != ",":
                return None
            i += 1
        else:
            k = text.find(",", i)
            if k < 0:
                out.append(text[i:])
                return out
            out.append(text[i:k])
            i = k + 1


def client_of(connection_from: str) -> str | None:
    """`host:port` -> `host`; `[local]` (a Unix socket, no port) stays; empty -> None."""
    if not connection_from:
        return None
    host, colon, port = connection_from.rpartition(":")
    if colon and host and port.isdigit():
        return host
    return connection_from


def wall_time_us() -> int:
    """Time of reading, for records whose own time is unknown (as for stderr orphans)."""
    return int(time.time() * 1_000_000)


def malformed_entry(text: str, nbytes: int, cut: bool, time_us: int | None = None) -> Entry:
    """A record that is not in the format: kind `other`, severity LOG, its raw text as message."""
    entry = Entry(time_us if time_us is not None else wall_time_us(), "LOG", text, nbytes)
    entry.orphan = True
    entry.truncated = cut
    return entry


class CsvlogReader(LineReader):
    """`EntryReader` for the csvlog format (PostgreSQL 13's 24 columns, PG14+'s 26, PG12's 23)."""

    def __init__(self, *, timezone: str, full_text: bool) -> None:
        super().__init__(full_text=full_text)
        self._times = self.time_parser = TimeParser(timezone)
        self._src = _OneRecord()
        self._csv = csv.reader(self._src, strict=True)
        # The open record (a quoted value still open at the end of a line):
        self._rec: list[bytes] = []  # its lines, the first MAX_ENTRY_BYTES bytes only
        self._rec_kept = 0
        self._rec_len = 0  # all its bytes, newlines included
        self._rec_cut = False
        self._dropped_quotes = 0  # quotes in the dropped tail of the next over-long line

    # -- LineReader -----------------------------------------------------------------------------

    def _dropped(self, data: bytes) -> None:
        self._dropped_quotes += data.count(b'"')

    def _line(self, raw: bytes, start: int, cut: bool) -> None:
        quotes = raw.count(b'"')
        if cut:
            quotes += self._dropped_quotes
            self._dropped_quotes = 0
        if self._record_start < 0:
            self._first_line(raw, start, cut, quotes)
            return
        if self._rec_len > MAX_ENTRY_BYTES and _HEAD(raw) is not None:
            # An open record past the cap meets a line that starts like a record: resynchronize.
            self._close_open(balanced=False)
            self._first_line(raw, start, cut, quotes)
            return
        n = len(raw) + 1
        room = MAX_ENTRY_BYTES - self._rec_kept
        if room >= n and not cut:
            self._rec.append(raw)
            self._rec_kept += n
        else:
            self._rec_cut = True
            if room > 0:
                self._rec.append(raw[:room])
                self._rec_kept += room
        self._rec_len += n
        if quotes & 1:
            self._close_open(balanced=True)

    def flush(self) -> list[LogLine]:
        """End of the file: a record whose quotes never balanced comes out as malformed."""
        out = super().flush()
        if self._record_start >= 0:
            self._out = out
            self._close_open(balanced=False)
        return out

    # -- records --------------------------------------------------------------------------------

    def _first_line(self, raw: bytes, start: int, cut: bool, quotes: int) -> None:
        """A line with no record open: a whole record, a malformed line, or a record's first line."""
        if not quotes & 1:
            if cut or (raw and raw != b"\r"):  # an empty line between records carries nothing
                self._record(raw, len(raw) + 1, cut)
            return
        if _HEAD(raw) is None:
            self._malformed(raw, len(raw) + 1, cut)
            return
        self._record_start = start
        self._rec = [raw]
        self._rec_kept = self._rec_len = len(raw) + 1
        self._rec_cut = cut

    def _close_open(self, *, balanced: bool) -> None:
        data = b"\n".join(self._rec)
        nbytes, cut = self._rec_len, self._rec_cut
        self._rec = []
        self._rec_kept = self._rec_len = 0
        self._rec_cut = False
        self._record_start = -1
        if balanced:
            self._record(data, nbytes, cut)
        else:
            self._malformed(data, nbytes, cut)

    def _record(self, data: bytes, nbytes: int, cut: bool) -> None:
        """One whole record (`data` without its final newline; only its beginning when `cut`)."""
        text = data.decode("utf-8", TEXT_ERRORS)
        if "\r" in text:
            text = text.replace("\r\n", "\n").removesuffix("\r")
        row: list[str] | None
        if cut or len(text) > _LONG:
            row = split_record(text)
        else:
            self._src.text = text
            try:
                row = next(self._csv)
            except (csv.Error, StopIteration):
                row = split_record(text)
        if row is None:
            self._malformed_text(text, nbytes, cut)
            return
        n = len(row)
        if n not in _COLUMNS:
            if not cut or n <= _MESSAGE:
                self._malformed_text(text, nbytes, cut)
                return
            row += [""] * (_MAX_COLUMNS - n)  # a cut record: the columns after the cut are empty
        time_us = self._times.parse(row[0])
        severity = row[11]
        if time_us is None or not severity:
            self._malformed_text(text, nbytes, cut)
            return
        self.lines_matched += 1
        message = row[13]
        pos = row[20] or row[17]  # query_pos, else internal_query_pos: see the module docstring
        if pos.isdigit():
            message = f"{message} at character {pos}"
        # A translated server writes its own word (csvlog.c: _(error_severity(...))); question
        # marks only: translated.ascii_degraded, which one cannot be told
        english = SEVERITY_OF.get(severity)
        if english is None:
            english = "LOG" if severity.strip("?") == "" else severity
        entry = Entry(time_us, english, message, nbytes)
        # Entry's fields default to None: only non-empty columns are set.
        for column, name in _TEXT_COLUMNS:
            v = row[column]
            if v:
                setattr(entry, name, v)
        v = row[4]
        if v:
            entry.client = client_of(v)
        v = row[3]
        if v.isdigit():
            entry.pid = int(v)
        if cut:
            entry.truncated = True
        self._out.append(entry.finish(self.full_text))

    def _malformed(self, data: bytes, nbytes: int, cut: bool) -> None:
        self._malformed_text(data.decode("utf-8", TEXT_ERRORS), nbytes, cut)

    def _malformed_text(self, text: str, nbytes: int, cut: bool) -> None:
        if "\r" in text:  # as the stderr reader would show these lines
            text = text.replace("\r\n", "\n").removesuffix("\r")
        comma = text.find(",", 0, 40)
        time_us = self._times.parse(text[:comma]) if comma > 0 else None
        self._out.append(malformed_entry(text, nbytes, cut, time_us).finish(self.full_text))
