"""PostgreSQL's log timestamps to UTC microseconds.

PostgreSQL writes `%t` as `2026-11-22 02:18:58 UTC` and `%m` (and csvlog/jsonlog times) as
`2026-11-22 02:18:58.123 UTC`: local time in `log_timezone` followed by the zone's abbreviation
(src/timezone/strftime.c `%Z`), or a numeric one such as `-03` or `+0530` for zones without letters
(America/Sao_Paulo). An abbreviation alone is ambiguous (CST is three different zones), so it is
resolved in this order:

1. the IANA zone the database is configured with (`log.timezone`), when that zone calls its time
   at that moment by this abbreviation: the abbreviation also picks the DST side (fold) of a
   repeated local hour;
2. `UTC`, `GMT`, `Z` and numeric abbreviations, read directly;
3. PostgreSQL's default abbreviation set (`timezone_abbreviations = 'Default'`, tzabbrev.py), the
   way the server itself reads `EST` or `CET` in a timestamp: a server whose `log_timezone` is
   not `log.timezone` still gets every line at its true instant;
4. an abbreviation known nowhere: the configured zone's reading of the local time.

Cases 2 to 4 where the configured zone does not have that offset (or name) at that moment are
counted (`zone_mismatches`, the last such abbreviation in `foreign_zone`): the overview says that
`log.timezone` does not match the server's `log_timezone`. `%n` is epoch seconds with
milliseconds (`1763777938.123`).

Lines of the same second share the conversion: the last (second, zone) result is cached, so the
per-line cost is two slices and two comparisons; the zone checks run only when the cache misses.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import datetime
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from forwarder.pglog import tzabbrev

_FIXED: Final[dict[str, int]] = {"UTC": 0, "GMT": 0, "Z": 0, "UCT": 0, "UT": 0}


@dataclass(frozen=True, slots=True)
class TimeCounts:
    """How well a reader could read the log's own times (the overview shows it).

    `zone_mismatches`: lines whose zone abbreviation `log.timezone` does not use at that moment
    (read with PostgreSQL's default abbreviations instead); `foreign_zone`: the last such
    abbreviation, `foreign_zone_known` False when no table knew it (read as `log.timezone`).
    `read_time`: entries whose own time could not be read, stamped with the time of reading.
    """

    zone_mismatches: int = 0
    foreign_zone: str | None = None
    foreign_zone_known: bool = True
    read_time: int = 0

    def note(self, timezone: str, *, setting: str, prefix_has_time: bool = True) -> str | None:
        """What these counts mean for the user, in words; None when every time was read as meant.

        `timezone` is the configured zone, `setting` where it is configured (`log.timezone`,
        `--timezone`), `prefix_has_time` False when the prefix has no %m, %t or %n (which is
        then why entries carry the time of reading).
        """
        notes = []
        zone = self.foreign_zone
        if self.zone_mismatches and zone is not None:
            if zone[:1] in ("+", "-") or zone in _FIXED:
                # A numeric zone (or UTC) says its own offset: the times are right, the setting is not.
                notes.append(
                    f"the log's times are in {zone}, but {setting} is {timezone}: set {setting} to the server's"
                    f" log_timezone ({_lines(self.zone_mismatches)} read with the offset they carry)"
                )
            elif self.foreign_zone_known:
                notes.append(
                    f"the log's times are in {zone}, but {setting} is {timezone}: set {setting} to the server's"
                    f" log_timezone ({_lines(self.zone_mismatches)} read with PostgreSQL's default meaning"
                    f" of {zone})"
                )
            else:
                notes.append(
                    f"the log's times are in {zone}, which neither {setting} ({timezone}) nor PostgreSQL's default"
                    f" abbreviations know: {_lines(self.zone_mismatches)} read as {timezone}; set {setting} to"
                    " the server's log_timezone"
                )
        if self.read_time:
            why = "" if prefix_has_time else " (the prefix has no %m, %t or %n)"
            notes.append(
                f"{self.read_time} entries had no readable time of their own and carry the time they were read{why}"
            )
        return "; ".join(notes) or None


def _lines(n: int) -> str:
    return "1 line was" if n == 1 else f"{n} lines were"


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


def _offsets(zone: ZoneInfo | None, local: datetime) -> list[tuple[int, str]]:
    """(seconds east of UTC, abbreviation) of `zone` at local time `local`, for each fold."""
    if zone is None:
        return [(0, "UTC")]
    out = []
    for fold in (0, 1):
        aware = local.replace(tzinfo=zone, fold=fold)
        off = aware.utcoffset()
        if off is not None:
            out.append((int(off.total_seconds()), aware.tzname() or ""))
    return out


def default_abbreviation_offset(abbrev: str, local: datetime) -> int | None:
    """Seconds east of UTC that PostgreSQL's default abbreviation set gives `abbrev` at local time
    `local` (a dynamic abbreviation takes its zone's offset then); None if the set lacks it."""
    key = abbrev.upper()
    fixed = tzabbrev.FIXED.get(key)
    if fixed is not None:
        return fixed[0]
    name = tzabbrev.DYNAMIC.get(key)
    if name is None:
        return None
    offsets = _offsets(ZoneInfo(name), local)
    return next((off for off, tzname in offsets if tzname == abbrev), offsets[0][0])


class TimeParser:
    """Converts PostgreSQL's text timestamps in one `log_timezone` to UTC microseconds."""

    __slots__ = (
        "_base",
        "_foreign",
        "_sec",
        "_zone",
        "_zone_text",
        "foreign_zone",
        "foreign_zone_known",
        "zone_mismatches",
    )

    def __init__(self, timezone: str) -> None:
        self._zone = load_zone(timezone)
        self._sec = ""
        self._zone_text = ""
        self._base = 0
        self._foreign = False  # the cached (second, zone) is one `log.timezone` does not use
        self.zone_mismatches = 0
        self.foreign_zone: str | None = None
        self.foreign_zone_known = True

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
        if self._foreign:
            self.zone_mismatches += 1
        return self._base * 1_000_000 + us

    def _seconds(self, sec: str, zone: str) -> int | None:
        """Seconds since the epoch of local time `sec` in `zone`; sets `_foreign` (see the module)."""
        try:
            local = datetime.strptime(sec, "%Y-%m-%d %H:%M:%S")
        except ValueError:
            return None
        naive = calendar.timegm(local.timetuple())
        configured = _offsets(self._zone, local)
        offset = _FIXED.get(zone)
        if offset is None:
            offset = _numeric_offset(zone)
        known = True
        if offset is not None:
            foreign = all(off != offset for off, _ in configured)
        else:
            named = next((off for off, tzname in configured if tzname == zone), None)
            foreign = named is None
            offset = named if named is not None else default_abbreviation_offset(zone, local)
            if offset is None:
                known = False
                offset = configured[0][0] if configured else 0
        self._foreign = foreign
        if foreign:
            self.foreign_zone, self.foreign_zone_known = zone, known
        return naive - offset


def parse_epoch(text: str) -> int | None:
    """`%n` (`1763777938.123`) to microseconds since the epoch; None if malformed."""
    sec, _, frac = text.partition(".")
    if not sec.isdigit() or (frac and not frac.isdigit()):
        return None
    return int(sec) * 1_000_000 + int((frac + "000000")[:6])
