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
server's prefix: `pglog.composed`, shared with the syslog and CRI formats), so entries,
continuations and values are handled by one parser.

`MESSAGE` is a string, or an array of byte values when it is not valid UTF-8 (decoded as the
file readers decode, `reader.TEXT_ERRORS`: a byte outside a UTF-8 sequence is its Latin-1
character); a record without one (`null`: longer than journalctl's 4096-byte field limit without
`--all`) has no line to read and is skipped. A line of the input that is not a JSON object is
kept as an entry that did not match (kind `other`, values removed), as a line of a file in the
wrong format is. With `identifiers`, records whose `SYSLOG_IDENTIFIER` is not one of them are
skipped and counted in `lines_other`.

journald cuts a line longer than its LineMax (journald.conf, 48 KiB by default) into records of
that size: the pieces after the first have no prefix, so each is an entry of its own (kind
`other`); docs/parsing.md tells how to avoid it.

Offsets (`committed_offset`) count bytes of the JSON input: every record before it is part of an
entry already returned (or skipped), none after it is.
"""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from forwarder.pglog.composed import ComposedReader
from forwarder.pglog.reader import TEXT_ERRORS

__all__ = ["JournalReader", "journal_message"]


def journal_message(record: dict[str, object]) -> str | None:
    """The text of a record's MESSAGE (a string, or an array of byte values), None if it has none."""
    message = record.get("MESSAGE")
    if isinstance(message, str):
        return message
    if isinstance(message, list) and all(isinstance(b, int) and 0 <= b < 256 for b in message):
        return bytes(message).decode("utf-8", TEXT_ERRORS)
    return None


def _digits(value: object) -> int | None:
    """journalctl's JSON gives numbers as strings of digits."""
    return int(value) if isinstance(value, str) and value.isdigit() else None


class JournalReader(ComposedReader):
    """`EntryReader` for `journalctl -o json` output of a server that logs in the stderr format."""

    def __init__(self, *, line_prefix: str, timezone: str, full_text: bool, identifiers: Iterable[str] = ()) -> None:
        super().__init__(line_prefix=line_prefix, timezone=timezone, full_text=full_text, envelope_pid=True)
        self._identifiers = frozenset(identifiers)

    def _line(self, raw: bytes, start: int, cut: bool) -> None:
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            if raw.strip():  # not a record: kept as a line that did not match, never dropped
                self._feed_text([raw.decode("utf-8", TEXT_ERRORS)], start, None, None)
            return
        if self._identifiers and record.get("SYSLOG_IDENTIFIER") not in self._identifiers:
            self.lines_other += 1
            return
        message = journal_message(record)
        if message is None:
            return
        time_us = _digits(record.get("__REALTIME_TIMESTAMP"))
        self._feed_text([message.removesuffix("\n")], start, time_us, _digits(record.get("_PID")))
