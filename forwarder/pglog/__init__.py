"""PostgreSQL log knowledge: bytes of a server log file in, classified and redacted `LogLine`s out.

Imports nothing of the daemon but `forwarder.model`.

The seam (used by `sources/` and by `forwarder parse`):

    reader = make_reader(fmt, line_prefix=..., timezone=..., full_text=False)
    lines = reader.feed(chunk, now)       # chunk continues where the previous one ended
    lines += reader.flush_written()       # at the end of the data: the pending entry out if whole
    lines += reader.flush_idle(now)       # pending entry out after >= IDLE_FLUSH_SECONDS of quiet
    lines += reader.flush()               # end of this file for good: everything pending out
    reader.committed_offset               # bytes since the reader's start that are fully emitted

`committed_offset` is what a restart may resume from: every byte before it belongs to an entry
already returned, no byte after it does. It never goes backwards.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Literal, Protocol

from forwarder.model import LogLine
from forwarder.pglog.times import TimeCounts

IDLE_FLUSH_SECONDS = 1.0
MAX_ENTRY_BYTES = 1 << 20
# An entry shorter than this that ends at the end of the data is complete: PostgreSQL wrote it in
# one write (pglog/reader.py says why longer ones may come in several).
WHOLE_WRITE_BYTES = 4096

__all__ = [
    "IDLE_FLUSH_SECONDS",
    "MAX_ENTRY_BYTES",
    "WHOLE_WRITE_BYTES",
    "EntryReader",
    "Format",
    "TimeCounts",
    "entries_carry_time",
    "make_reader",
    "parse_stream",
    "uses_line_prefix",
]


class EntryReader(Protocol):
    """Turns the bytes of one log file, fed in order, into log lines."""

    full_text: bool  # settable at any time: False removes values (the default), True keeps them
    # Physical lines that were in the configured format (a prefixed line, a CSV record...): a file
    # whose lines never are is reported as a format mismatch in the overview.
    lines_matched: int
    # Physical lines of other programs in a file shared with them (a syslog file): skipped, they
    # are neither entries nor lines in a wrong format.
    lines_other: int

    @property
    def time_counts(self) -> TimeCounts:
        """How many times were read in a zone `timezone` does not use, or not read at all."""
        ...

    @property
    def committed_offset(self) -> int: ...

    @property
    def unfinished(self) -> bool:
        """Whether data fed is known to be only part of what is being written (a line without its
        newline, a CRI partial record, a syslog message whose pieces may still come): `flush()`
        would cut it in two, so a stop leaves it to the next run, from `committed_offset`."""
        ...

    def feed(self, data: bytes, now: float) -> list[LogLine]: ...

    def flush_written(self) -> list[LogLine]: ...

    def flush_idle(self, now: float) -> list[LogLine]: ...

    def flush(self) -> list[LogLine]: ...


Format = Literal["stderr", "csvlog", "jsonlog", "syslog", "cri", "journal"]


def uses_line_prefix(fmt: Format) -> bool:
    """Whether the format's lines carry `log_line_prefix` (csvlog and jsonlog have fields instead)."""
    return fmt not in ("csvlog", "jsonlog")


def entries_carry_time(fmt: Format, line_prefix: str) -> bool:
    """Whether entries of `fmt` have a time of their own: a csvlog/jsonlog field, the envelope's
    (syslog, cri, journal), or the prefix's; False only for stderr with no %m, %t or %n."""
    from forwarder.pglog.prefix import compile_prefix

    return fmt != "stderr" or compile_prefix(line_prefix).time_kind != ""


def make_reader(
    fmt: Format, *, line_prefix: str, timezone: str, full_text: bool, syslog_ident: str | None = None
) -> EntryReader:
    """A reader for one log file of format `fmt`.

    `line_prefix` is the server's `log_line_prefix` (all but csvlog and jsonlog), `timezone` its
    `log_timezone` (an IANA name; resolves the zone abbreviations in log times), `full_text` the initial setting
    (settable later on the reader). `syslog_ident` is the server's syslog_ident: for syslog, the
    tag of its lines among other programs' (default `postgres`); for journal, the only
    SYSLOG_IDENTIFIER whose records are read (default: every record given). Raises ValueError
    for an unknown format or time zone.
    """
    if fmt == "stderr":
        from forwarder.pglog.stderr import StderrReader

        return StderrReader(line_prefix=line_prefix, timezone=timezone, full_text=full_text)
    # csvlog and jsonlog differ from stderr only in how a record's fields are found: each is a
    # pglog.reader.LineReader that fills a pglog.entry.Entry per record (`line_prefix` is unused).
    if fmt == "csvlog":
        from forwarder.pglog.csvlog import CsvlogReader

        return CsvlogReader(timezone=timezone, full_text=full_text)
    if fmt == "jsonlog":
        from forwarder.pglog.jsonlog import JsonlogReader

        return JsonlogReader(timezone=timezone, full_text=full_text)
    # syslog, cri and journal wrap the stderr text in an envelope: pglog.composed unwraps it for a
    # StderrReader.
    if fmt == "syslog":
        from forwarder.pglog.syslog import SyslogReader

        return SyslogReader(
            line_prefix=line_prefix, timezone=timezone, full_text=full_text, ident=syslog_ident or "postgres"
        )
    if fmt == "cri":
        from forwarder.pglog.cri import CriReader

        return CriReader(line_prefix=line_prefix, timezone=timezone, full_text=full_text)
    if fmt == "journal":
        from forwarder.pglog.journal import JournalReader

        only = () if syslog_ident is None else (syslog_ident,)
        return JournalReader(line_prefix=line_prefix, timezone=timezone, full_text=full_text, identifiers=only)
    raise ValueError(f"unknown log format {fmt!r}")


def parse_stream(reader: EntryReader, chunks: Iterable[bytes]) -> Iterator[LogLine]:
    """Every entry of a whole log given as `chunks`: feeds them in order, then flushes.

    Idle flushing does not apply (the input is complete), so entries depend on the text only.
    """
    for chunk in chunks:
        yield from reader.feed(chunk, 0.0)
    yield from reader.flush()
