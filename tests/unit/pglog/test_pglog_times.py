"""Log times in any `log_timezone`: abbreviations the configured zone does not use are read with
PostgreSQL's default abbreviation set, and counted so that the overview can say so."""

from __future__ import annotations

from pathlib import Path

import pytest

from forwarder.model import format_time
from forwarder.pglog import tzabbrev
from forwarder.pglog.times import TimeCounts, TimeParser

INSTALLED_DEFAULT = Path("/usr/share/postgresql/15/timezonesets/Default")


# (log.timezone, time as the server wrote it, the true instant, counted as a mismatch)
CASES = [
    # the server's log_timezone is the configured one
    ("America/New_York", "2026-01-10 07:00:00.250 EST", "2026-01-10T12:00:00.250Z", False),
    ("America/New_York", "2026-07-10 08:00:00.000 EDT", "2026-07-10T12:00:00.000Z", False),
    ("America/Sao_Paulo", "2026-01-10 09:00:00.000 -03", "2026-01-10T12:00:00.000Z", False),
    ("Asia/Kolkata", "2026-01-10 17:30:00.000 IST", "2026-01-10T12:00:00.000Z", False),
    ("UTC", "2026-01-10 12:00:00.000 UTC", "2026-01-10T12:00:00.000Z", False),
    # it is not: the default abbreviations give the true instant all the same
    ("UTC", "2026-01-10 07:00:00.250 EST", "2026-01-10T12:00:00.250Z", True),
    ("UTC", "2026-07-10 08:00:00.000 EDT", "2026-07-10T12:00:00.000Z", True),
    ("America/New_York", "2026-01-10 13:00:00.000 CET", "2026-01-10T12:00:00.000Z", True),
    ("America/New_York", "2026-07-10 14:00:00.000 CEST", "2026-07-10T12:00:00.000Z", True),
    ("UTC", "2026-07-10 05:00:00.000 PDT", "2026-07-10T12:00:00.000Z", True),
    ("Europe/Berlin", "2026-01-10 21:00:00.000 JST", "2026-01-10T12:00:00.000Z", True),
    # numeric abbreviations are exact whatever the configured zone, but say it is not the server's
    ("UTC", "2026-01-10 09:00:00.000 -03", "2026-01-10T12:00:00.000Z", True),
    ("UTC", "2026-01-10 17:30:00.000 +0530", "2026-01-10T12:00:00.000Z", True),
    ("UTC", "2026-01-10 17:30:00.000 +05:30", "2026-01-10T12:00:00.000Z", True),
    ("America/New_York", "2026-01-10 12:00:00.000 UTC", "2026-01-10T12:00:00.000Z", True),
    # a dynamic abbreviation of the default set takes its zone's offset at that time
    ("UTC", "2026-01-10 09:00:00.000 ART", "2026-01-10T12:00:00.000Z", True),
]


@pytest.mark.parametrize(("timezone", "written", "utc", "mismatch"), CASES)
def test_times_resolve_to_the_true_instant(timezone: str, written: str, utc: str, mismatch: bool) -> None:
    parser = TimeParser(timezone)
    us = parser.parse(written)
    assert us is not None
    assert format_time(us) == utc
    assert parser.zone_mismatches == (1 if mismatch else 0)
    assert parser.foreign_zone == (written.rsplit(" ", 1)[1] if mismatch else None)


def test_every_line_of_a_foreign_zone_is_counted_not_only_each_second() -> None:
    parser = TimeParser("UTC")
    for ms in ("100", "200", "300"):
        assert parser.parse(f"2026-01-10 07:00:00.{ms} EST") is not None
    parser.parse("2026-01-10 12:00:01.000 UTC")
    assert parser.zone_mismatches == 3
    assert parser.foreign_zone == "EST"


def test_an_abbreviation_known_nowhere_is_read_in_the_configured_zone_and_counted() -> None:
    parser = TimeParser("Europe/Berlin")
    us = parser.parse("2026-01-10 13:00:00.000 XYZT")
    assert us is not None
    assert format_time(us) == "2026-01-10T12:00:00.000Z"  # CET, Berlin's reading of 13:00
    assert parser.zone_mismatches == 1
    assert (parser.foreign_zone, parser.foreign_zone_known) == ("XYZT", False)


def test_the_default_set_is_postgresqls_where_the_answers_differ_by_region() -> None:
    # The Default set reads IST as Israel's, CST as North American Central: as the server does.
    assert tzabbrev.FIXED["IST"] == (7200, False)
    assert tzabbrev.FIXED["CST"] == (-21600, False)
    assert tzabbrev.FIXED["EDT"] == (-14400, True)


@pytest.mark.skipif(not INSTALLED_DEFAULT.exists(), reason="PostgreSQL 15's timezonesets are not installed")
def test_the_table_is_postgresqls_default_file() -> None:
    fixed, dynamic = tzabbrev.parse_tznames(INSTALLED_DEFAULT.read_text())
    assert fixed == tzabbrev.FIXED
    assert dynamic == tzabbrev.DYNAMIC


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        (TimeCounts(), None),
        (
            TimeCounts(3, "EST", True, 0),
            "the log's times are in EST, but log.timezone is UTC: set log.timezone to the server's log_timezone"
            " (3 lines were read with PostgreSQL's default meaning of EST)",
        ),
        (
            TimeCounts(1, "-03", True, 0),
            "the log's times are in -03, but log.timezone is UTC: set log.timezone to the server's log_timezone"
            " (1 line was read with the offset they carry)",
        ),
        (
            TimeCounts(2, "XYZT", False, 0),
            "the log's times are in XYZT, which neither log.timezone (UTC) nor PostgreSQL's default abbreviations"
            " know: 2 lines were read as UTC; set log.timezone to the server's log_timezone",
        ),
        (TimeCounts(read_time=4), "4 entries had no readable time of their own and carry the time they were read"),
    ],
)
def test_the_note_says_what_the_counts_mean(counts: TimeCounts, expected: str | None) -> None:
    assert counts.note("UTC", setting="log.timezone") == expected
