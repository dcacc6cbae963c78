"""PostgreSQL's log timestamps to UTC microseconds.

PostgreSQL writes `%t` as `2026-11-22 02:18:58 UTC` and `%m` (and csvlog/jsonlog times) as
`2026-11-22 02:18:58.123 UTC`: local time in `log_timezone` followed by the zone's abbreviation
(src/timezone/strftime.c `%Z`). An abbreviation alone is ambiguous (CST is three different zones),
so it is resolved with the IANA zone the database is configured with (`log.timezone`): the
abbreviation picks the DST side (fold) of a repeated local hour. `UTC`, `GMT`, `Z` and numeric
abbreviations such as `+01` or `-0330` (zones without letters, e.g. America/Sao_Paulo) are read
directly. An abbreviation the zone does not know falls back to the zone's standard reading.
`%n` is epoch seconds with milliseconds (`1763777938.123`).

Lines of the same second share the conversion: the last second's result is cached, so the per-line
cost is two slices and a comparison.
"""

from __future__ import annotations

import calendar
from datetime import datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_FIXED: Final[dict[str, int]] = {"UTC": 0, "GMT": 0, "Z": 0, "UCT": 0, "UT": 0}


def _numeric_offset(abbrev: str) -> int | None:
    """Seconds east of UTC for `+01`, `-03`, `+0530`, `+05:30`; None if not numeric."""
    if len(abbrev) < 3 or abbrev[0] not in "+-":
        return None
    digits = abbrev[1:].replace(":", "")
    if not digits.isdigit() or len(digits) not in (2, 4):
        return None
    seconds = int(digits[:2]) * 3600 + (int(digits[2:]) * 60 if len(digits) == 4 else 0)
    return -seconds if abbrev[0] == "-" else seconds


def load_zone(name: str) -> ZoneInfo | None:
    """The IANA zone `name` (None for UTC or empty); raises ValueError for an unknown zone."""
    if name in ("", "UTC", "Etc/UTC", "GMT"):
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {name!r}") from exc


class TimeParser:
    """Converts PostgreSQL's text timestamps in one `log_timezone` to UTC microseconds."""

    __slots__ = ("_base", "_sec", "_zone", "_zone_text")

    def __init__(self, timezone: str) -> None:
        self._zone = load_zone(timezone)
        self._sec = ""
        self._zone_text = ""
        self._base = 0

    def parse(self, text: str) -> int | None:
        """`YYYY-MM-DD HH:MM:SS[.fff] ZONE` to microseconds since the epoch; None if malformed."""
        if len(text) > 20 and text[19] == ".":
            space = text.find(" ", 20)
            if space < 0:
                return None
            frac = text[20:space]
            zone = text[space + 1 :]
            if not frac.isdigit():
                return None
            us = int((frac + "000000")[:6])
        else:
            zone = text[20:]
            us = 0
        sec = text[:19]
        if sec != self._sec or zone != self._zone_text:
            base = self._seconds(sec, zone)
            if base is None:
                return None
            self._sec, self._zone_text, self._base = sec, zone, base
        return self._base * 1_000_000 + us

    def _seconds(self, sec: str, zone: str) -> int | None:
        try:
            local = datetime.strptime(sec, "%Y-%m-%d %H:%M:%S")
        except ValueError:
            return None
        naive = calendar.timegm(local.timetuple())
        offset = _FIXED.get(zone)
        if offset is None:
            offset = _numeric_offset(zone)
        if offset is None:
            offset = self._zone_offset(local, zone)
        return naive - offset

    def _zone_offset(self, local: datetime, abbrev: str) -> int:
        if self._zone is None:
            return 0
        first: timedelta | None = None
        for fold in (0, 1):
            aware = local.replace(tzinfo=self._zone, fold=fold)
            off = aware.utcoffset()
            if off is None:
                continue
            if first is None:
                first = off
            if aware.tzname() == abbrev:
                return int(off.total_seconds())
        return int(first.total_seconds()) if first is not None else 0


def parse_epoch(text: str) -> int | None:
    """`%n` (`1763777938.123`) to microseconds since the epoch; None if malformed."""
    sec, _, frac = text.partition(".")
    if not sec.isdigit() or (frac and not frac.isdigit()):
        return None
    return int(sec) * 1_000_000 + int((frac + "000000")[:6])
