"""log_line_prefix compilation: every escape, padding, %q, [unknown], times and zones."""

from __future__ import annotations

from functools import partial

import pglog_helpers
import pytest
from pglog_helpers import T0, T0_US

from forwarder.model import format_time
from forwarder.pglog import make_reader
from forwarder.pglog.prefix import compile_prefix, unknown_escapes
from forwarder.pglog.times import TimeParser, parse_epoch

# These tests are about parsing and assembly, not value removal (test_pglog_redact.py): they read
# with values kept, so made-up messages such as "boom" come out as written.
one = partial(pglog_helpers.one, full_text=True)
parse_text = partial(pglog_helpers.parse_text, full_text=True)


def test_t0_constant_is_right() -> None:
    assert format_time(T0_US) == "2026-11-22T02:18:58.123Z"


# (prefix, line prefix text as PostgreSQL writes it, expected fields)
ESCAPE_CASES = [
    ("%m ", f"{T0} ", {"time_us": T0_US}),
    ("%t ", "2026-11-22 02:18:58 UTC ", {"time_us": T0_US - 123_000}),
    ("%n ", "1795313938.123 ", {"time_us": T0_US}),
    # %n is exact and wins over %m whichever comes first: %m's IST could be Israel's, and is India's here
    ("%m %n ", "2026-11-22 07:48:58.123 IST 1795313938.123 ", {"time_us": T0_US}),
    ("%n %m ", "1795313938.123 2026-11-22 07:48:58.123 IST ", {"time_us": T0_US}),
    ("[%p] ", "[4711] ", {"pid": 4711}),
    ("%u ", "alice ", {"user": "alice"}),
    ("%d ", "shop ", {"database": "shop"}),
    ("%a ", "my app ", {"application": "my app"}),
    ("%r ", "10.0.0.7(51234) ", {"client": "10.0.0.7"}),
    ("%r ", "[local] ", {"client": "[local]"}),
    ("%r ", "::1(40000) ", {"client": "::1"}),
    ("%h ", "db.example.com ", {"client": "db.example.com"}),
    ("%h ", "[local] ", {"client": "[local]"}),
    # a host, an address or host(port) has no space: an application name before it may have some
    ("%a %h ", "PostgreSQL JDBC Driver [local] ", {"application": "PostgreSQL JDBC Driver", "client": "[local]"}),
    ("%a %r ", "job ERROR:  x ::1(5432) ", {"application": "job ERROR:  x", "client": "::1"}),
    # a command tag is upper-case words, a session state lower-case ones
    ("%i %u@%d ", "CREATE TABLE bob@shop ", {"user": "bob", "database": "shop"}),
    ("%i %u@%d ", "idle in transaction (aborted) bob@shop ", {"user": "bob", "database": "shop"}),
    ("%e ", "42P01 ", {"sqlstate": "42P01"}),
    ("%e ", "00000 ", {"sqlstate": None}),
    ("%b ", "client backend ", {}),
    ("%P ", "4000 ", {}),
    ("%Q ", "-7368145238924181522 ", {}),
    ("%i ", "idle in transaction ", {}),
    ("%c ", "6760b9a0.1267 ", {}),
    ("%l ", "17 ", {}),
    ("%s ", "2026-11-22 01:00:00 UTC ", {}),
    ("%v ", "3/12 ", {}),
    ("%x ", "0 ", {}),
    ("%L ", "127.0.0.1 ", {}),
    ("100%% ", "100% ", {}),
    ("%Z|", "|", {}),  # unknown escapes print nothing (elog.c)
    (
        "%m [%p]: [%l-1] user=%u,db=%d,app=%a,client=%h ",
        f"{T0} [42]: [3-1] user=bob,db=shop,app=psql,client=10.1.1.1 ",
        {"time_us": T0_US, "pid": 42, "user": "bob", "database": "shop", "application": "psql", "client": "10.1.1.1"},
    ),
]


@pytest.mark.parametrize(("prefix", "written", "expected"), ESCAPE_CASES)
def test_each_escape_is_understood(prefix: str, written: str, expected: dict[str, object]) -> None:
    line = one(f"{written}ERROR:  boom\n", prefix=prefix)
    assert line.message == "boom"
    assert line.severity == "ERROR"
    for field, value in expected.items():
        assert getattr(line, field) == value, field


@pytest.mark.parametrize(
    ("prefix", "written", "expected"),
    [
        ("%-10u|", "bob       |", {"user": "bob"}),
        ("%10u|", "       bob|", {"user": "bob"}),
        ("%-5u|", "postgres_admin|", {"user": "postgres_admin"}),  # longer than the width
        ("%5p|", "   42|", {"pid": 42}),
        ("%-8p|", "42      |", {"pid": 42}),
        ("%-10a|", "          |", {"application": None}),  # empty value, padded
        ("%-20m|", f"{T0}|", {"time_us": T0_US}),
    ],
)
def test_padding(prefix: str, written: str, expected: dict[str, object]) -> None:
    line = one(f"{written}LOG:  hello\n", prefix=prefix)
    assert line.message == "hello"
    for field, value in expected.items():
        assert getattr(line, field) == value, field


def test_q_makes_the_rest_optional_for_background_processes() -> None:
    text = (
        f"{T0} [4007] app@shop/psql LOG:  connection authorized: user=app database=shop\n"
        f"{T0} [62] LOG:  checkpoint starting: time\n"
    )
    session, checkpointer = parse_text(text)
    assert (session.user, session.database, session.application, session.pid) == ("app", "shop", "psql", 4007)
    assert (checkpointer.user, checkpointer.database, checkpointer.application) == (None, None, None)
    assert checkpointer.pid == 62
    assert checkpointer.kind == "checkpoint"


def test_unknown_values_become_none() -> None:
    line = one(f"{T0} [9] [unknown]@[unknown]/[unknown] LOG:  connection received: host=10.0.0.1 port=5\n")
    assert (line.user, line.database, line.application) == (None, None, None)


def test_empty_prefix() -> None:
    line = one("ERROR:  division by zero\n", prefix="")
    assert (line.severity, line.message, line.kind) == ("ERROR", "division by zero", "error")


def test_verbose_sqlstate_follows_the_severity() -> None:
    text = (
        f'{T0} [1] a@b/c ERROR:  42P01: relation "nope" does not exist at character 15\n'
        f"{T0} [1] a@b/c LOCATION:  parserOpenTable, parse_relation.c:1392\n"
        f"{T0} [1] a@b/c STATEMENT:  SELECT * FROM nope\n"
    )
    line = one(text)
    assert line.sqlstate == "42P01"
    assert line.message == 'relation "nope" does not exist at character 15'
    assert line.statement == "SELECT * FROM nope"
    assert "parse_relation" not in str(line)  # LOCATION is dropped


@pytest.mark.parametrize(
    ("text", "sqlstate", "message"),
    [
        ("ERROR:  2200B: conflicting or redundant options", "2200B", "conflicting or redundant options"),
        ("WARNING:  01P01: deprecated", "01P01", "deprecated"),
        ("ERROR:  HV00B: invalid handle", "HV00B", "invalid handle"),
        # not verbose: a message that starts with five capitals and a colon is the message
        (
            "LOG:  AUDIT: SESSION,1,1,READ,SELECT,,,SELECT 1,<not logged>",
            None,
            "AUDIT: SESSION,1,1,READ,SELECT,,,<not logged>",  # the statement moves out (classify)
        ),
        ("NOTICE:  ERROR: the import failed", None, "ERROR: the import failed"),
        ("NOTICE:  00000: ALERT: verbose and a word", None, "ALERT: verbose and a word"),
    ],
)
def test_a_verbose_sqlstate_has_a_digit(text: str, sqlstate: str | None, message: str) -> None:
    line = one(f"{T0} [1] a@b/c {text}\n")
    assert (line.sqlstate, line.message) == (sqlstate, message)


def test_line_regex_compiles_once_per_reader() -> None:
    reader = make_reader("stderr", line_prefix="%m [%p] ", timezone="UTC", full_text=False)
    pattern = reader.pattern  # type: ignore[attr-defined]
    reader.feed(f"{T0} [1] LOG:  a\n{T0} [1] LOG:  b\n".encode(), 0.0)
    assert reader.pattern is pattern  # type: ignore[attr-defined]


def test_most_precise_time_escape_wins() -> None:
    p = compile_prefix("%t %m ")
    assert p.time_kind == "m"
    line = one(f"2026-11-22 02:18:58 UTC {T0} LOG:  x\n", prefix="%t %m ")
    assert line.time_us == T0_US


@pytest.mark.parametrize(
    ("timezone", "written", "utc"),
    [
        ("UTC", "2026-11-22 02:18:58.123 UTC", "2026-11-22T02:18:58.123Z"),
        ("Europe/Berlin", "2026-11-22 03:18:58.123 CET", "2026-11-22T02:18:58.123Z"),
        ("Europe/Berlin", "2026-07-01 14:00:00.000 CEST", "2026-07-01T12:00:00.000Z"),
        # the repeated hour at the end of DST: the abbreviation picks the side
        ("Europe/Berlin", "2026-10-25 02:30:00.000 CEST", "2026-10-25T00:30:00.000Z"),
        ("Europe/Berlin", "2026-10-25 02:30:00.000 CET", "2026-10-25T01:30:00.000Z"),
        ("America/Chicago", "2026-01-10 06:00:00.500 CST", "2026-01-10T12:00:00.500Z"),
        ("America/Sao_Paulo", "2026-01-10 09:00:00.000 -03", "2026-01-10T12:00:00.000Z"),
        ("Asia/Kolkata", "2026-01-10 17:30:00.000 IST", "2026-01-10T12:00:00.000Z"),
        ("Asia/Kolkata", "2026-01-10 17:30:00.000 +0530", "2026-01-10T12:00:00.000Z"),
        ("Europe/Berlin", "2026-01-10 12:00:00.000 GMT", "2026-01-10T12:00:00.000Z"),
    ],
)
def test_times_become_utc(timezone: str, written: str, utc: str) -> None:
    us = TimeParser(timezone).parse(written)
    assert us is not None
    assert format_time(us) == utc


def test_epoch_time() -> None:
    assert parse_epoch("1795313938.123") == T0_US


def test_unknown_timezone_is_refused() -> None:
    with pytest.raises(ValueError, match="time zone"):
        make_reader("stderr", line_prefix="%m ", timezone="Mars/Olympus", full_text=False)


def test_prefix_without_time_uses_the_time_of_reading() -> None:
    import time

    before = int(time.time() * 1_000_000)
    line = one("[5] LOG:  hello\n", prefix="[%p] ")
    after = int(time.time() * 1_000_000)
    assert before <= line.time_us <= after


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="format"):
        make_reader("eventlog", line_prefix="", timezone="UTC", full_text=False)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("prefix", "unknown"),
    [
        ("%a%u%d%r%h%L%b%p%P%t%m%n%Q%i%e%c%l%s%v%x%q%%", []),  # every escape PostgreSQL has
        ("%-10u %5p %% %", []),  # padding, a literal %, a lone % at the end
        ("%m [%p] %Z ", ["%Z"]),
        ("%%Z %y %-3k", ["%y", "%-3k"]),  # %%Z is a literal "%Z"
    ],
)
def test_escapes_postgresql_lacks_are_named(prefix: str, unknown: list[str]) -> None:
    assert unknown_escapes(prefix) == unknown


@pytest.mark.parametrize(
    ("prefix", "names", "expected"),
    [
        ("%m [%p] %q%u@%d/%a ", "alice@example.com@shop/psql", ("alice@example.com", "shop", "psql")),
        ("%m [%p] %q%u@%d/%a ", "alice@shop/my@app", ("alice", "shop", "my@app")),
        ("%m [%p] %q%u@%d/%a ", "alice@example.com@shop/my app/v2 @x", ("alice@example.com", "shop", "my app/v2 @x")),
        ("%m [%p] %q%u@%d ", "alice@example.com@shop", ("alice@example.com", "shop", None)),
        ("%m [%p] %q%a %u@%d ", "my@app alice@example.com@shop", ("alice@example.com", "shop", "my@app")),
        ("%m [%p] %q%u@%d ", "bob@db", ("bob", "db", None)),
    ],
)
def test_a_user_name_takes_the_last_split(prefix: str, names: str, expected: tuple[str, str, str | None]) -> None:
    line = one(f"{T0} [1] {names} LOG:  statement: SELECT 1\n", prefix=prefix)
    assert (line.user, line.database, line.application) == expected
