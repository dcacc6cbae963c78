"""The journal format: the output of `journalctl -o json`, one JSON object per line.

A PostgreSQL started by systemd without the logging collector writes its stderr to journald,
which stores each line as one record: `MESSAGE` is one physical line of the stderr format
(`log_line_prefix` included, TAB-led for continuation lines), so the records' messages are read
by a `StderrReader` exactly as the lines of a file would be.

What the journal knows besides the message fills what the prefix lacks:

- `__REALTIME_TIMESTAMP` (microseconds since the epoch, when journald received the line) is the
  time of an entry whose prefix has no `%m`, `%n` or `%t`;
- `_PID` (the process that wrote to journald) is the pid when the prefix has no `%p`. For a
  service's stdout/stderr stream this is the process that opened the stream, the postmaster for
  every backend: the prefix's own `%p` is better.

Both are given to the stderr reader as a prefix of their own (`%n [%p] ` in front of the
server's prefix), so entries, continuations and values are handled by one parser.

`MESSAGE` is a string, or an array of byte values when it is not valid UTF-8 (decoded with
U+FFFD for the invalid bytes); a record without one (`null`: longer than journalctl's 4096-byte
field limit without `--all`) has no line to read and is skipped. A line of the input that is not
a JSON object is kept as an entry that did not match (kind `other`, values removed), as a line
of a file in the wrong format is. With `identifiers`, records whose `SYSLOG_IDENTIFIER` is not
one of them are skipped.

Offsets (`committed_offset`) count bytes of the JSON input: every record before it is part of an
entry already returned (or skipped), none after it is.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import orjson

from forwarder.model import LogLine
from forwarder.pglog.stderr import StderrReader, compile_prefix

__all__ = ["JournalReader", "journal_message"]


def journal_message(record: dict[str, object]) -> str | None:
    """The text of a record's MESSAGE (a string, or an array of byte values), None if it has none."""
    message = record.get("MESSAGE")
    if isinstance(message, str):
        return message
    if isinstance(message, list) and all(isinstance(b, int) and 0 <= b < 256 for b in message):
        return bytes(message).decode("utf-8", "replace")
    return None


class JournalReader:
    """`EntryReader` for `journalctl -o json` output of a server that logs in the stderr format."""

    def __init__(self, *, line_prefix: str, timezone: str, full_text: bool, identifiers: Iterable[str] = ()) -> None:
        pattern = compile_prefix(line_prefix)
        self._add_time = pattern.time_kind == ""
        self._add_pid = pattern.pid_group < 0
        own = ("%n " if self._add_time else "") + ("[%p] " if self._add_pid else "")
        self._inner = StderrReader(line_prefix=own + line_prefix, timezone=timezone, full_text=full_text)
        self._own_match = self._inner.pattern.regex.match
        self._identifiers = frozenset(identifiers)
        self._partial = b""  # the start of a JSON line not yet ended by a newline
        self._consumed = 0  # bytes of the input in whole lines so far
        self._fed = 0  # bytes given to the stderr reader so far
        # (stderr reader offset, input offset) at the end of each record not yet known to be emitted
        self._marks: deque[tuple[int, int]] = deque()
        self._committed = 0
        self.lines_matched = 0  # messages in the server's prefix (EntryReader)

    @property
    def full_text(self) -> bool:
        return self._inner.full_text

    @full_text.setter
    def full_text(self, value: bool) -> None:
        self._inner.full_text = value

    @property
    def committed_offset(self) -> int:
        return self._committed

    def _text_of(self, line: bytes) -> str | None:
        """What the stderr reader gets for one JSON line (without its newline); None: nothing."""
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            return line.decode("utf-8", "replace") if line.strip() else None
        if self._identifiers and record.get("SYSLOG_IDENTIFIER") not in self._identifiers:
            return None
        message = journal_message(record)
        if message is None:
            return None
        message = message.removesuffix("\n")
        if message.startswith("\t") or not (self._add_time or self._add_pid):
            return message  # a continuation line has no prefix
        own = ""
        if self._add_time:
            realtime = record.get("__REALTIME_TIMESTAMP")
            if not (isinstance(realtime, str) and realtime.isdigit()):
                return message
            us = int(realtime)
            own = f"{us // 1_000_000}.{us // 1000 % 1000:03d} "
        if self._add_pid:
            pid = record.get("_PID")
            if not (isinstance(pid, str) and pid.isdigit()):
                return message
            own += f"[{pid}] "
        # A line that is not in the server's prefix stays as it was written (kept whole, unmatched).
        return own + message if self._own_match(own + message) else message

    def feed(self, data: bytes, now: float) -> list[LogLine]:
        data = self._partial + data
        end = data.rfind(b"\n") + 1
        self._partial = data[end:]
        return self._take(data[:end].split(b"\n")[:-1], 1, now)

    def _take(self, lines: list[bytes], newline: int, now: float) -> list[LogLine]:
        """Give the records of `lines` (each followed by `newline` bytes in the input) to the stderr reader."""
        pieces: list[bytes] = []
        for line in lines:
            self._consumed += len(line) + newline
            text = self._text_of(line)
            if text is not None:
                piece = text.encode("utf-8", "replace") + b"\n"
                pieces.append(piece)
                self._fed += len(piece)
            self._marks.append((self._fed, self._consumed))
        return self._done(self._inner.feed(b"".join(pieces), now) if pieces else [])

    def _done(self, lines: list[LogLine]) -> list[LogLine]:
        self.lines_matched = self._inner.lines_matched
        emitted = self._inner.committed_offset
        while self._marks and self._marks[0][0] <= emitted:
            self._committed = self._marks.popleft()[1]
        return lines

    def flush_written(self) -> list[LogLine]:
        return self._done(self._inner.flush_written())

    def flush_idle(self, now: float) -> list[LogLine]:
        return self._done(self._inner.flush_idle(now))

    def flush(self) -> list[LogLine]:
        # A JSON line without its newline at the very end of the input is a line all the same.
        partial, self._partial = self._partial, b""
        lines = self._take([partial], 0, 0.0) if partial else []
        return lines + self._done(self._inner.flush())
