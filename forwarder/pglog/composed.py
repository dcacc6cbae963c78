"""Formats that wrap PostgreSQL's stderr text in an envelope: syslog files, CRI container logs, the journal.

Such a reader unwraps each physical line of its file into the stderr text PostgreSQL wrote and
feeds that text, line by line, to a composed `StderrReader`: prefix matching, entry assembly,
classification and value removal are the stderr format's own. This module keeps the offsets of
the `EntryReader` contract in bytes of the *envelope* file: each line fed to the inner reader is
remembered with the byte where its envelope started, so the inner reader's `committed_offset`
(in bytes of the unwrapped text) maps back to a byte of the file.

The envelope often knows what the prefix may not: the time (syslog, CRI, the journal) and the pid
(syslog's `postgres[pid]`, the journal's `_PID`). When the server's `log_line_prefix` lacks
`%m`/`%t`/`%n` (or `%p`), the inner reader's prefix is the server's prefix preceded by `%n ` (or
`[%p] `), and each line that the server's prefix recognizes is fed with the envelope's values in
front. Lines the prefix does not recognize go in unchanged: they stay what they are
(continuations or unparsed lines).
"""

from __future__ import annotations

import calendar
from collections import deque
from collections.abc import Iterable

from forwarder.model import LogLine
from forwarder.pglog.prefix import compile_prefix
from forwarder.pglog.reader import LineReader
from forwarder.pglog.stderr import StderrReader
from forwarder.pglog.times import TimeCounts


class ComposedReader(LineReader):
    """A `LineReader` over envelope lines whose unwrapped text goes to an inner `StderrReader`.

    A subclass implements `_line` (from `LineReader`), calls `_feed_text` with each unwrapped line
    and `_held_start` reports the start of envelope data it holds that is not fed yet.
    """

    def __init__(self, *, line_prefix: str, timezone: str, full_text: bool, envelope_pid: bool) -> None:
        super().__init__(full_text=full_text)
        plain = compile_prefix(line_prefix)
        self._plain_match = plain.regex.match
        self._plain_severity = plain.severity_group  # the severity's (or label's) group in a match
        self._add_time = plain.time_kind == ""
        self._add_pid = envelope_pid and plain.pid_group < 0
        extra = ("%n " if self._add_time else "") + ("[%p] " if self._add_pid else "")
        self._inner = StderrReader(line_prefix=extra + line_prefix, timezone=timezone, full_text=full_text)
        self._fed = 0  # bytes fed to the inner reader
        self._starts: deque[tuple[int, int]] = deque()  # (offset in inner text, offset in the file) per line fed
        self._now = 0.0

    # -- EntryReader ------------------------------------------------------------------------------

    @property
    def committed_offset(self) -> int:
        """The first byte of the file that belongs to no entry returned yet."""
        inner = self._inner.committed_offset
        starts = self._starts
        while starts and starts[0][0] < inner:
            starts.popleft()
        # Lines of one inner entry may come from envelope lines that interleave with others
        # (two streams, two processes): the earliest of them is where a restart must begin.
        best = min((outer for _, outer in starts), default=self._consumed)
        held = self._held_start()
        return best if held is None else min(best, held)

    @property
    def time_counts(self) -> TimeCounts:
        """The inner reader's: the times are read there (the envelope's time when the prefix has none)."""
        return self._inner.time_counts

    def feed(self, data: bytes, now: float) -> list[LogLine]:
        self._now = now
        self._inner.full_text = self.full_text
        return super().feed(data, now)

    def flush_idle(self, now: float) -> list[LogLine]:
        self._inner.full_text = self.full_text
        return self._inner.flush_idle(now)

    def flush_written(self) -> list[LogLine]:
        if self._partial_len or self._held_start() is not None:
            return []  # an envelope line still comes, and it may continue the inner entry
        self._inner.full_text = self.full_text
        return self._inner.flush_written()

    def flush(self) -> list[LogLine]:
        self._inner.full_text = self.full_text
        out = super().flush()  # a last line without newline goes through `_line`
        self._out = out
        self._flush_held()
        out += self._inner.flush()
        return out

    # -- for subclasses ---------------------------------------------------------------------------

    def _held_start(self) -> int | None:
        """Start in the file of envelope data read but not fed to the inner reader yet, or None."""
        return None

    def _flush_held(self) -> None:
        """End of the file: feed whatever is held (incomplete envelope data) as it is."""
        return

    def _feed_text(self, lines: Iterable[str], start: int, time_us: int | None, pid: int | None) -> None:
        """Feed unwrapped lines, all from the envelope that starts at byte `start` of the file.

        `time_us`/`pid` are the envelope's: put in front of each line the server's prefix
        recognizes when the prefix itself lacks them (see the module docstring).
        """
        parts: list[bytes] = []
        add_time, add_pid = self._add_time, self._add_pid
        for text in lines:
            if (
                (add_time or add_pid)
                and not (add_time and time_us is None)
                and not (add_pid and pid is None)
                and text[:1] != "\t"
                and self._plain_match(text)
            ):
                front = ""
                if add_time and time_us is not None:
                    ms = time_us // 1000
                    front = f"{ms // 1000}.{ms % 1000:03d} "
                if add_pid:
                    front += f"[{pid}] "
                text = front + text
            parts.append(text.encode("utf-8", "surrogateescape"))
            parts.append(b"\n")
        data = b"".join(parts)
        if not data:
            return
        self._starts.append((self._fed, start))
        self._fed += len(data)
        self._out.extend(self._inner.feed(data, self._now))

    def _end_entry(self) -> None:
        """The text fed so far ends an entry (the envelope says so): emit it now."""
        self._out.extend(self._inner.flush())

    def _sync_matched(self) -> None:
        self.lines_matched = self._inner.lines_matched


def parse_rfc3339(text: str) -> int | None:
    """`2026-11-24T03:40:01.123456789Z` or `...+01:00` (any fraction) to epoch microseconds; None if malformed."""
    if len(text) < 20 or text[4] != "-" or text[10] not in "Tt" or text[13] != ":":
        return None
    try:
        year, month, day = int(text[0:4]), int(text[5:7]), int(text[8:10])
        hour, minute, second = int(text[11:13]), int(text[14:16]), int(text[17:19])
    except ValueError:
        return None
    rest = text[19:]
    us = 0
    if rest[:1] == ".":
        end = 1
        while end < len(rest) and rest[end].isdigit():
            end += 1
        us = int((rest[1:end] + "000000")[:6]) if end > 1 else 0
        rest = rest[end:]
    if rest in ("Z", "z"):
        offset = 0
    elif len(rest) == 6 and rest[0] in "+-" and rest[3] == ":" and rest[1:3].isdigit() and rest[4:].isdigit():
        offset = (int(rest[1:3]) * 3600 + int(rest[4:]) * 60) * (-1 if rest[0] == "-" else 1)
    else:
        return None
    try:
        seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    except (ValueError, OverflowError):
        return None
    return (seconds - offset) * 1_000_000 + us
