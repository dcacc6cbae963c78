"""Unusual `log_line_prefix`es, as real PostgreSQL 15 servers wrote them (pg15_prefixes.py): `%p`
first, `key=%x,` pairs, `%n`, `%s` beside `%t`, padding, empty and `[unknown]` values of
session-less processes, application names holding brackets, commas and the prefix's delimiters."""

from __future__ import annotations

import pg15_prefixes as pg
import pytest

from forwarder.model import LogLine, format_time
from forwarder.pglog import make_reader, parse_stream

APP_X = "app=[x] y,z"  # application_name set with psql, holding the prefix's own delimiters
APP_COMMA = "[bracket] app, with comma"


def read(case: tuple[str, str, str], timezone: str | None = None) -> list[LogLine]:
    tz, prefix, text = case
    reader = make_reader("stderr", line_prefix=prefix, timezone=timezone or tz, full_text=True)
    lines = list(parse_stream(reader, [text.encode()]))
    assert reader.lines_matched == len(text.splitlines())
    assert not any(line.unparsed for line in lines)
    return lines


# (case, fields the prefix has, first entry's true UTC time or None when the prefix has no time)
CASES = [
    (pg.NEW_YORK, {"pid", "user", "database"}, "2026-11-24T03:34:25.079Z"),
    (pg.SAO_PAULO, {"pid", "user", "database", "application", "client"}, None),
    (pg.UTC_Q, {"pid", "user", "database"}, "2026-11-24T03:34:27.648Z"),
    (pg.KOLKATA_EPOCH, {"user"}, "2026-11-24T03:34:29.047Z"),
    (pg.BERLIN_EVERY_ESCAPE, {"pid", "application"}, "2026-11-24T03:34:30.000Z"),
]


def expected(fields: set[str]) -> list[dict[str, object]]:
    """The same events in every case: what each entry holds, given the fields the prefix has."""

    def entry(severity: str, message: str, **values: object) -> dict[str, object]:
        return {"severity": severity, "message": message} | {k: v for k, v in values.items() if k in fields}

    none = {"user": None, "database": None, "application": None}
    session = {"user": "postgres", "database": "postgres"}
    return [
        entry("LOG", "database system was shut down at", **none, client=None),  # the startup process
        entry("LOG", "connection received: host=[local]", **none, client="[local]"),  # [unknown] values
        entry("LOG", "connection authorized: user=postgres", **session, application=None),
        entry("ERROR", "division by zero", **session, application=APP_X, client="[local]"),
        entry("LOG", "connection authorized: user=postgres", **session, application=None),
        entry("ERROR", 'invalid input syntax for type integer: "x"', **session, application=APP_COMMA),
        entry("FATAL", 'role "nobody" does not exist', user="nobody", database="postgres", application=None),
        entry("LOG", "checkpoint starting: immediate force wait", **none, client=None),  # the checkpointer
    ]


@pytest.mark.parametrize(("case", "fields", "first_time"), CASES, ids=lambda c: c[1] if isinstance(c, tuple) else "")
def test_real_prefixes_give_every_field_and_a_clean_message(
    case: tuple[str, str, str], fields: set[str], first_time: str | None
) -> None:
    lines = read(case)[:8]
    for line, want in zip(lines, expected(fields), strict=True):
        assert line.message.startswith(want.pop("message")), line.message  # type: ignore[arg-type]
        assert not line.message.startswith(" ")
        assert {k: getattr(line, k) for k in want} == want
    assert lines[3].statement == "SELECT 1/0;"
    if first_time is not None:
        assert format_time(lines[0].time_us) == first_time


def test_times_of_a_new_york_log_are_right_with_either_setting() -> None:
    right = [line.time_us for line in read(pg.NEW_YORK)]
    assert [line.time_us for line in read(pg.NEW_YORK, timezone="UTC")] == right
    assert format_time(right[-1]) == "2026-11-24T03:34:25.201Z"


def test_session_start_is_not_taken_as_the_lines_time() -> None:
    tz, prefix, text = pg.BERLIN_EVERY_ESCAPE
    # `%s` before `%t`: a session that started the day before does not move its lines.
    text = text.replace("2026-11-24 04:34:30 CET 2026", "2026-11-23 01:00:00 CET 2026", 1)
    assert format_time(read((tz, prefix, text))[0].time_us) == "2026-11-24T03:34:30.000Z"
    session, line = "2026-11-23 01:00:00 UTC", "2026-11-24 03:34:30.500 UTC"
    for prefix, written in (("%s %m ", f"{session} {line}"), ("%m %s ", f"{line} {session}")):
        (entry,) = read(("UTC", prefix, f"{written} LOG:  x\n"))
        assert format_time(entry.time_us) == "2026-11-24T03:34:30.500Z", prefix


def test_debug_lines_are_read_with_their_severity() -> None:
    line = read(pg.BERLIN_EVERY_ESCAPE)[-1]
    assert (line.severity, line.message) == ("DEBUG", "performing replication slot checkpoint")


# Lines as other tools and providers pass them on: one space after the severity's colon (two is
# PostgreSQL's own), DEBUG1-DEBUG5 spelled out, `%q` with text after it.
@pytest.mark.parametrize(
    ("prefix", "text", "want"),
    [
        ("%m [%p] ", "2026-11-24 03:34:27.743 UTC [7] LOG: one space\n", {"message": "one space", "pid": 7}),
        ("%m [%p] ", "2026-11-24 03:34:27.743 UTC [7] LOG:  two spaces\n", {"message": "two spaces"}),
        (
            "%m [%p] ",
            "2026-11-24 03:34:27.743 UTC [7] ERROR: boom\n2026-11-24 03:34:27.743 UTC [7] DETAIL: why\n",
            {"message": "boom", "detail": "why"},
        ),
        (
            "%m [%p] %e ",
            '2026-11-24 03:34:27.743 UTC [7] 42P01 ERROR: 42P01: relation "t" does not exist\n',
            {"message": 'relation "t" does not exist', "sqlstate": "42P01"},
        ),
        ("%m [%p] ", "2026-11-24 03:34:27.743 UTC [7] DEBUG3:  deep\n", {"severity": "DEBUG3", "message": "deep"}),
        ("%m [%p] %qdb=%d,user=%u ", "2026-11-24 03:34:27.743 UTC [7] LOG:  bg\n", {"message": "bg", "user": None}),
        (
            "%m [%p] %qdb=%d,user=%u ",
            "2026-11-24 03:34:27.743 UTC [7] db=shop,user=al LOG:  fg\n",
            {"message": "fg", "user": "al", "database": "shop"},
        ),
        ("%p %t ", "7 2026-11-24 03:34:27 UTC LOG:  pid first\n", {"pid": 7, "time_us": 1795491267_000_000}),
        ("%c ", "6b0505c6.33db LOG:  session id first\n", {"message": "session id first"}),
        ("db=%d,user=%u ", "db=,user= LOG:  empty\n", {"message": "empty", "user": None, "database": None}),
        ("%l %e %x %v %i %b %Q %P ", "3 00000 0  idle client backend 0  LOG:  all\n", {"message": "all"}),
        ("%-10u|%10p|", "al        |         7|LOG:  padded\n", {"user": "al", "pid": 7}),
    ],
)
def test_severity_spacing_and_prefix_forms(prefix: str, text: str, want: dict[str, object]) -> None:
    (line,) = read(("UTC", prefix, text))
    assert {k: getattr(line, k) for k in want} == want
