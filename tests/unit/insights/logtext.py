"""Stored lines made the way the daemon makes them: PostgreSQL 15 log text through pglog, into a store."""

from __future__ import annotations

from forwarder.model import LogLine
from forwarder.pglog import make_reader, parse_stream

PREFIX = "%m [%p] %q%u@%d/%a "


def parse(text: str, *, full_text: bool = False) -> list[LogLine]:
    """The log lines of stderr-format log text written with PREFIX (UTC)."""
    reader = make_reader("stderr", line_prefix=PREFIX, timezone="UTC", full_text=full_text)
    return list(parse_stream(reader, [text.encode()]))


def stamp(time_s: float) -> str:
    """`%m` of a moment: PostgreSQL's millisecond time with the zone name."""
    from datetime import UTC, datetime

    dt = datetime.fromtimestamp(time_s, tz=UTC)
    return dt.strftime("%Y-%m-%d %H:%M:%S.") + f"{dt.microsecond // 1000:03d} UTC"
