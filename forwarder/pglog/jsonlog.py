"""The jsonlog format (PostgreSQL 15+): one JSON object per line, one line per log entry.

PostgreSQL (jsonlog.c write_jsonlog) writes these keys, leaving out those whose value is NULL:

    timestamp, user, dbname, pid, remote_host, remote_port, session_id, line_num, ps,
    session_start, vxid, txid, error_severity, state_code, message, detail, hint,
    internal_query, internal_position, context, statement, cursor_position, func_name,
    file_name, file_line_num, application_name, backend_type, leader_pid, query_id

Newlines inside values are escaped (`\\n`), so a record is exactly one physical line and is
emitted as soon as the line is complete.

- Mapping, the same as csvlog's: timestamp -> time (log.timezone resolves the abbreviation),
  error_severity -> severity, state_code -> sqlstate (`00000` -> None, in `classify`),
  internal_query -> `Entry.query`, statement -> statement, remote_host -> client (`[local]`
  stays; the port is a key of its own and is not used), pid -> pid. func_name/file_name/
  file_line_num (PostgreSQL's source location) are dropped, like stderr's LOCATION.
- The message gets ` at character N` (cursor_position, else internal_position) appended, as
  the stderr format writes it, so the formats agree (see csvlog.py).
- Missing keys are tolerated (their fields stay null; a missing timestamp gives the time of
  reading). Numbers may come as JSON numbers or strings; texts that come as numbers are
  turned into strings. `\\r\\n` inside a text becomes `\\n`, as the stderr reader sees it.
- A line that is not a JSON object, or an object with neither `message` nor `error_severity`
  (not a PostgreSQL record), or one whose timestamp does not parse, becomes kind `other` with the
  raw line as its message (values removed like any unknown message), never dropped.
- A line over the 1 MiB entry cap arrives cut: the object is closed where it was cut (the value
  in progress ends there) and the entry flagged `truncated`; when that fails too, the cut line is
  kept as an `other` entry.

orjson parses a line straight from bytes; invalid UTF-8 is retried once as text with
replacement characters.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from forwarder.pglog.csvlog import malformed_entry, wall_time_us
from forwarder.pglog.entry import Entry
from forwarder.pglog.reader import TEXT_ERRORS, LineReader
from forwarder.pglog.times import TimeParser

_TEXT_KEYS: Final = (
    ("state_code", "sqlstate"),
    ("detail", "detail"),
    ("hint", "hint"),
    ("internal_query", "query"),
    ("context", "context"),
    ("statement", "statement"),
    ("user", "user"),
    ("dbname", "database"),
    ("application_name", "application"),
    ("remote_host", "client"),
)
# Ways to close a line cut inside its object, tried in order after dropping 0-7 characters (a cut
# escape such as `\\u00e9` is up to 6 long): inside a string, after a value, after a key.
_CLOSERS: Final = ('"}', "}", "null}", '":null}')


def _text(value: object) -> str | None:
    """A text value: strings as they are (empty -> None), numbers and the like as their text."""
    if type(value) is str:
        return value or None
    if value is None:
        return None
    return str(value)


def _int(value: object) -> int | None:
    """A number given as a JSON number or a string of digits; None otherwise."""
    if type(value) is int:
        return value
    if type(value) is str and value.isdigit():
        return int(value)
    return None


def _loads(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    try:
        # orjson refuses invalid UTF-8 (and lone surrogates) outright: retry with replacements.
        return orjson.loads(raw.decode("utf-8", TEXT_ERRORS))
    except orjson.JSONDecodeError:
        return None


def _loads_cut(raw: bytes) -> Any:
    """The object of a line cut at the cap, closed where it was cut; None when that fails."""
    text = raw.decode("utf-8", TEXT_ERRORS).rstrip()
    for drop in range(8):
        head = text[: len(text) - drop] if drop else text
        if head.endswith(","):
            head = head[:-1]
        for closer in _CLOSERS:
            try:
                value = orjson.loads(head + closer)
            except orjson.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value
    return None


class JsonlogReader(LineReader):
    """`EntryReader` for the jsonlog format (PostgreSQL 15+)."""

    def __init__(self, *, timezone: str, full_text: bool) -> None:
        super().__init__(full_text=full_text)
        self._times = self.time_parser = TimeParser(timezone)

    def _line(self, raw: bytes, start: int, cut: bool) -> None:
        nbytes = len(raw) + 1
        if not raw.strip():
            return  # an empty line between records carries nothing
        obj = _loads_cut(raw) if cut else _loads(raw)
        if type(obj) is not dict or ("message" not in obj and "error_severity" not in obj):
            self._other(raw, nbytes, cut)
            return
        get = obj.get
        stamp = get("timestamp")
        if stamp is None:
            time_us = wall_time_us()
        else:
            parsed = self._times.parse(stamp) if type(stamp) is str else None
            if parsed is None:
                self._other(raw, nbytes, cut)
                return
            time_us = parsed
        self.lines_matched += 1
        message = _text(get("message")) or ""
        crlf = b"\\r\\n" in raw
        if crlf:
            message = message.replace("\r\n", "\n")
        pos = _int(get("cursor_position")) or _int(get("internal_position"))
        if pos:
            message = f"{message} at character {pos}"
        entry = Entry(time_us, _text(get("error_severity")) or "LOG", message, nbytes)
        for key, field in _TEXT_KEYS:
            value = get(key)
            if value is None or value == "":
                continue
            if type(value) is not str:
                value = str(value)
            elif crlf:
                value = value.replace("\r\n", "\n")
            setattr(entry, field, value)
        pid = get("pid")
        if pid is not None:
            entry.pid = _int(pid)
        if cut:
            entry.truncated = True
        self._out.append(entry.finish(self.full_text))

    def _other(self, raw: bytes, nbytes: int, cut: bool) -> None:
        entry = malformed_entry(raw.removesuffix(b"\r").decode("utf-8", TEXT_ERRORS), nbytes, cut)
        self._out.append(entry.finish(self.full_text))
