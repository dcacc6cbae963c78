"""Helpers shared by the pglog unit tests: parse stderr text the way `forwarder parse` does.

(A plain module, imported by the tests of this folder, which pytest puts on sys.path.)"""

from __future__ import annotations

import random
from typing import Any

from forwarder.model import LogLine, spec_fields
from forwarder.pglog import EntryReader, make_reader, parse_stream

PREFIX = "%m [%p] %q%u@%d/%a "
T0 = "2026-11-22 02:18:58.123 UTC"  # PostgreSQL's %m
T0_US = 1_795_313_938_123_000  # T0 as microseconds since the epoch (checked in test_pglog_prefix)


def parse_text(
    text: str | bytes, *, prefix: str = PREFIX, timezone: str = "UTC", full_text: bool = False
) -> list[LogLine]:
    """Every entry of `text` (a whole stderr log), as `forwarder parse` prints them."""
    data = text.encode() if isinstance(text, str) else text
    reader = make_reader("stderr", line_prefix=prefix, timezone=timezone, full_text=full_text)
    return list(parse_stream(reader, [data]))


def one(text: str, *, prefix: str = PREFIX, timezone: str = "UTC", full_text: bool = False) -> LogLine:
    """The single entry of `text`; fails if there is not exactly one."""
    lines = parse_text(text, prefix=prefix, timezone=timezone, full_text=full_text)
    assert len(lines) == 1, lines
    return lines[0]


def same(lines: list[LogLine]) -> list[dict[str, Any]]:
    """The fields, but the time of reading that lines without a prefix get."""
    return [{k: v for k, v in spec_fields(x).items() if k != "time" or not x.unparsed} for x in lines]


def fed_in_pieces(reader: EntryReader, data: bytes, rng: random.Random, max_step: int) -> list[LogLine]:
    """Every entry of `data` fed to `reader` in random pieces of 1 to `max_step` bytes, then
    flushed; the committed offset never goes back, nor past what was fed."""
    got: list[LogLine] = []
    offset, at = 0, 0
    while at < len(data):
        step = rng.randint(1, max_step)
        got += reader.feed(data[at : at + step], 0.0)
        at += step
        assert offset <= reader.committed_offset <= min(at, len(data))
        offset = reader.committed_offset
    return got + reader.flush()
