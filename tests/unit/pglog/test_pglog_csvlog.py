"""The csvlog format: columns, quoted newlines, PG13/PG14+ column counts, offsets, malformed records."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pg15_stderr import PG15_STDERR
from pglog_helpers import T0, T0_US, parse_text

from forwarder.model import LogLine
from forwarder.pglog import MAX_ENTRY_BYTES, make_reader, parse_stream
from forwarder.pglog.csvlog import client_of, split_record

# A stderr prefix that carries everything csvlog has (client and SQLSTATE included), for comparisons.
FULL_PREFIX = "%m [%p] %q%u@%d/%a %r %e "

# Real PostgreSQL 15.18 csvlog records (26 columns), copied from a test cluster's output.
PG15_RECORDS = b'''\
2026-11-22 02:54:21.558 UTC,,,22612,,6b02595d.5854,1,,2026-11-22 02:54:21 UTC,,0,LOG,00000,"starting PostgreSQL 15.18 (Debian 15.18-0+deb12u1) on x86_64-pc-linux-gnu, compiled by gcc (Debian 12.2.0-14+deb12u1) 12.2.0, 64-bit",,,,,,,,,"","postmaster",,0
2026-11-22 02:54:21.653 UTC,,,22621,"[local]",6b02595d.585d,1,"",2026-11-22 02:54:21 UTC,,0,LOG,00000,"connection received: host=[local]",,,,,,,,,"","not initialized",,0
2026-11-22 02:54:21.661 UTC,"postgres","postgres",22621,"[local]",6b02595d.585d,3,"INSERT",2026-11-22 02:54:21 UTC,3/4,726,ERROR,23505,"duplicate key value violates unique constraint ""u_pkey""","Key (id)=(1) already exists.",,,,,"INSERT INTO u VALUES (1, 'b@example.com');",,,"exp","client backend",,0
2026-11-22 02:54:21.662 UTC,"postgres","postgres",22621,"[local]",6b02595d.585d,4,"DO",2026-11-22 02:54:21 UTC,3/5,0,ERROR,P0001,"custom failure 42","the detail 99","try ""again""",,,"PL/pgSQL function inline_code_block line 1 at RAISE","DO $$ BEGIN RAISE EXCEPTION 'custom failure %', 42 USING DETAIL = 'the detail 99', HINT = 'try ""again""'; END $$;",,,"exp","client backend",,0
2026-11-22 02:54:21.663 UTC,"postgres","postgres",22621,"[local]",6b02595d.585d,5,"SELECT",2026-11-22 02:54:21 UTC,3/7,0,ERROR,42703,"column ""nope"" does not exist",,,"SELECT nope        FROM u WHERE id = x",8,"PL/pgSQL function f(integer) line 1 at SQL statement","SELECT f(7);",,,"exp","client backend",,0
2026-11-22 02:54:21.663 UTC,"postgres","postgres",22621,"[local]",6b02595d.585d,7,"SELECT",2026-11-22 02:54:21 UTC,3/0,0,LOG,00000,"duration: 0.035 ms  statement: SELECT 'multi',
  'line' AS ""quoted """"col"""""",
  2;",,,,,,,,,"exp","client backend",,0
2026-11-22 02:54:21.678 UTC,"alice","postgres",22623,"127.0.0.1:37688",6b02595d.585f,2,"authentication",2026-11-22 02:54:21 UTC,3/10,0,FATAL,28P01,"password authentication failed for user ""alice""","Role ""alice"" does not exist.
Connection matched pg_hba.conf line 5: ""host    all             all   127.0.0.1/32     scram-sha-256""",,,,,,,,"","client backend",,0
2026-11-22 02:54:22.689 UTC,,,22614,,6b02595d.5856,3,,2026-11-22 02:54:21 UTC,,0,LOG,00000,"checkpoint complete: wrote 46 buffers (2.2%); 0 WAL file(s) added, 0 removed, 0 recycled; write=0.001 s, sync=0.001 s, total=0.002 s; sync files=0, longest=0.000 s, average=0.000 s; distance=168 kB, estimate=168 kB",,,,,,,,,"","checkpointer",,0
'''  # noqa: E501 - real log lines, as PostgreSQL wrote them

# The same events in the stderr format with FULL_PREFIX, from the same cluster: pg15_stderr.PG15_STDERR.


def q(value: str | None) -> str:
    """A text column as PostgreSQL writes it: quoted with `"` doubled; NULL is nothing at all."""
    return "" if value is None else '"' + value.replace('"', '""') + '"'


def rec(
    message: str,
    *,
    columns: int = 26,
    time: str = T0,
    user: str | None = "alice",
    db: str | None = "shop",
    pid: str = "4242",
    client: str | None = "10.1.2.3:51000",
    severity: str = "LOG",
    sqlstate: str = "00000",
    detail: str | None = None,
    hint: str | None = None,
    internal_query: str | None = None,
    internal_pos: str = "",
    context: str | None = None,
    query: str | None = None,
    query_pos: str = "",
    app: str | None = "psql",
) -> bytes:
    """One csvlog record with its newline, built the way elog.c's write_csvlog does."""
    cols = [
        time,
        q(user),
        q(db),
        pid,
        q(client),
        "6b02595d.1092",
        "3",
        q("SELECT"),
        "2026-11-22 02:18:00 UTC",
        "3/7",
        "0",
        severity,
        sqlstate,
        q(message),
        q(detail),
        q(hint),
        q(internal_query),
        internal_pos,
        q(context),
        q(query),
        query_pos,
        q(None),  # location (log_error_verbosity = verbose only)
        q(app),
        q("client backend"),
        "",  # leader_pid
        "-1234567890",  # query_id
    ]
    return (",".join(cols[:columns]) + "\n").encode()


def parse_csv(data: bytes, *, full_text: bool = False, timezone: str = "UTC") -> list[LogLine]:
    reader = make_reader("csvlog", line_prefix="", timezone=timezone, full_text=full_text)
    return list(parse_stream(reader, [data]))


def one_csv(data: bytes, *, full_text: bool = False) -> LogLine:
    lines = parse_csv(data, full_text=full_text)
    assert len(lines) == 1, lines
    return lines[0]


def test_real_pg15_records_equal_the_stderr_entries_of_the_same_events() -> None:
    from_csv = parse_csv(PG15_RECORDS)
    from_stderr = parse_text(PG15_STDERR, prefix=FULL_PREFIX)
    assert len(from_csv) == 8
    assert from_csv == from_stderr
    # and with values kept
    assert parse_csv(PG15_RECORDS, full_text=True) == parse_text(PG15_STDERR, prefix=FULL_PREFIX, full_text=True)


def test_real_pg15_records_fields() -> None:
    # Values kept: what value removal leaves is redact.py's business (compared with stderr above).
    start, received, dup, raised, plpgsql, slow, auth, checkpoint = parse_csv(PG15_RECORDS, full_text=True)
    assert (start.kind, start.user, start.database, start.application, start.client) == (
        "server",
        None,
        None,
        None,
        None,
    )
    assert (received.kind, received.client, received.user, received.pid) == ("connection", "[local]", None, 22621)
    assert (dup.kind, dup.sqlstate, dup.detail, dup.statement) == (
        "error",
        "23505",
        "Key (id)=(1) already exists.",
        "INSERT INTO u VALUES (1, 'b@example.com');",
    )
    assert (dup.user, dup.database, dup.application, dup.time_us) == (
        "postgres",
        "postgres",
        "exp",
        1_795_316_061_661_000,
    )
    assert (raised.sqlstate, raised.hint, raised.context) == (
        "P0001",
        'try "again"',
        "PL/pgSQL function inline_code_block line 1 at RAISE",
    )
    assert plpgsql.message == 'column "nope" does not exist at character 8'
    assert plpgsql.context == (
        "internal query: SELECT nope        FROM u WHERE id = x\nPL/pgSQL function f(integer) line 1 at SQL statement"
    )
    assert (slow.kind, slow.duration_ms, slow.sqlstate) == ("slow_query", 0.035, None)
    assert slow.statement == 'SELECT \'multi\',\n  \'line\' AS "quoted ""col""",\n  2;'
    assert (auth.kind, auth.sqlstate, auth.client, auth.user) == ("auth_failure", "28P01", "127.0.0.1", "alice")
    assert auth.detail is not None and auth.detail.count("\n") == 1
    assert checkpoint.kind == "checkpoint"


@pytest.mark.parametrize("columns", [23, 24, 26], ids=["pg12 23 columns", "pg13 24 columns", "pg14+ 26 columns"])
def test_every_column_count_gives_the_same_entry(columns: int) -> None:
    data = rec(
        'duplicate key value violates unique constraint "users_email_key"',
        severity="ERROR",
        sqlstate="23505",
        detail="Key (email)=(bob@example.com) already exists.",
        query="INSERT INTO users (email) VALUES ('bob@example.com')",
        columns=columns,
    )
    stderr = (
        f"{T0} [4242] alice@shop/psql 10.1.2.3(51000) 23505 ERROR:  "
        'duplicate key value violates unique constraint "users_email_key"\n'
        f"{T0} [4242] alice@shop/psql 10.1.2.3(51000) 23505 DETAIL:  Key (email)=(bob@example.com) already exists.\n"
        f"{T0} [4242] alice@shop/psql 10.1.2.3(51000) 23505 STATEMENT:  "
        "INSERT INTO users (email) VALUES ('bob@example.com')\n"
    )
    for full_text in (False, True):
        assert parse_csv(data, full_text=full_text) == parse_text(stderr, prefix=FULL_PREFIX, full_text=full_text)
    entry = one_csv(data, full_text=True)
    assert (entry.time_us, entry.severity, entry.kind, entry.sqlstate) == (T0_US, "ERROR", "error", "23505")
    assert (entry.user, entry.database, entry.application, entry.client, entry.pid) == (
        "alice",
        "shop",
        "psql",
        "10.1.2.3",
        4242,
    )
    assert entry.detail == "Key (email)=(bob@example.com) already exists."
    assert entry.statement == "INSERT INTO users (email) VALUES ('bob@example.com')"


# (csv record, the stderr text of the same event with FULL_PREFIX)
SAME_AS_STDERR = [
    pytest.param(
        rec("checkpoint starting: time", user=None, db=None, client=None, app="", pid="77"),
        f"{T0} [77] LOG:  checkpoint starting: time\n",
        id="no session (%q)",
    ),
    pytest.param(
        rec("connection received: host=[local]", user=None, db=None, client="[local]", app=""),
        f"{T0} [4242] [unknown]@[unknown]/[unknown] [local] 00000 LOG:  connection received: host=[local]\n",
        id="[local] and [unknown]",
    ),
    pytest.param(
        rec("duration: 1.5 ms  statement: SELECT 'a',\n'b'", client="[::1]:5432"),
        f"{T0} [4242] alice@shop/psql [::1](5432) 00000 LOG:  duration: 1.5 ms  statement: SELECT 'a',\n\t'b'\n",
        id="multi-line slow statement",
    ),
    pytest.param(
        rec(
            'syntax error at or near "\'secret"',
            severity="ERROR",
            sqlstate="42601",
            query="SELECT 'a' 'secret",
            query_pos="12",
        ),
        f"{T0} [4242] alice@shop/psql 10.1.2.3(51000) 42601 ERROR:  "
        'syntax error at or near "\'secret" at character 12\n'
        f"{T0} [4242] alice@shop/psql 10.1.2.3(51000) 42601 STATEMENT:  SELECT 'a' 'secret\n",
        id="cursor position",
    ),
    pytest.param(
        rec(
            'relation "nope" does not exist',
            severity="ERROR",
            sqlstate="42P01",
            internal_query="SELECT * FROM nope WHERE x = 'v'",
            internal_pos="15",
            context="PL/pgSQL function g() line 2 at EXECUTE",
            query="SELECT g()",
        ),
        f'{T0} [4242] alice@shop/psql 10.1.2.3(51000) 42P01 ERROR:  relation "nope" does not exist at character 15\n'
        f"{T0} [4242] alice@shop/psql 10.1.2.3(51000) 42P01 QUERY:  SELECT * FROM nope WHERE x = 'v'\n"
        f"{T0} [4242] alice@shop/psql 10.1.2.3(51000) 42P01 CONTEXT:  PL/pgSQL function g() line 2 at EXECUTE\n"
        f"{T0} [4242] alice@shop/psql 10.1.2.3(51000) 42P01 STATEMENT:  SELECT g()\n",
        id="internal query and position",
    ),
    pytest.param(
        rec(
            "value too long",
            severity="WARNING",
            sqlstate="01000",
            detail="line one\nline two",
            hint='use "x"',
        ),
        f"{T0} [4242] alice@shop/psql 10.1.2.3(51000) 01000 WARNING:  value too long\n"
        f"{T0} [4242] alice@shop/psql 10.1.2.3(51000) 01000 DETAIL:  line one\n\tline two\n"
        f'{T0} [4242] alice@shop/psql 10.1.2.3(51000) 01000 HINT:  use "x"\n',
        id="multi-line detail and hint",
    ),
    pytest.param(
        rec("statement: SELECT 1", time="2026-11-22 03:18:58.123 CET"),
        "2026-11-22 03:18:58.123 CET [4242] alice@shop/psql 10.1.2.3(51000) 00000 LOG:  statement: SELECT 1\n",
        id="zone abbreviation",
    ),
]


@pytest.mark.parametrize(("record", "stderr"), SAME_AS_STDERR)
def test_records_equal_the_stderr_entry_of_the_same_event(record: bytes, stderr: str) -> None:
    for full_text in (False, True):
        reader = make_reader("csvlog", line_prefix="", timezone="Europe/Paris", full_text=full_text)
        from_csv = list(parse_stream(reader, [record]))
        assert from_csv == parse_text(stderr, prefix=FULL_PREFIX, timezone="Europe/Paris", full_text=full_text)
        assert reader.lines_matched == 1


@pytest.mark.parametrize(
    ("text", "columns"),
    [
        ("a,b,c", ["a", "b", "c"]),
        ('"a","b"', ["a", "b"]),
        (',,"",', ["", "", "", ""]),
        ('"say ""hi""",x', ['say "hi"', "x"]),
        ('"a,b\nc",d', ["a,b\nc", "d"]),
        ('"""",""""""', ['"', '""']),
        ('x,"cut inside', ["x", "cut inside"]),
        ('x,"cut after a doubled ""', ["x", 'cut after a doubled "']),
        ('"a"b,c', None),
        ("", [""]),
    ],
)
def test_split_record(text: str, columns: list[str] | None) -> None:
    assert split_record(text) == columns


@pytest.mark.parametrize(
    ("value", "client"),
    [
        ("127.0.0.1:5432", "127.0.0.1"),
        ("[local]", "[local]"),
        ("::1:5432", "::1"),
        ("fe80::1%eth0:40000", "fe80::1%eth0"),
        ("db.example.com:6000", "db.example.com"),
        ("db.example.com", "db.example.com"),  # no port: left as it is
        ("", None),
    ],
)
def test_client_is_the_host_part(value: str, client: str | None) -> None:
    assert client_of(value) == client


def test_quoted_newlines_and_doubled_quotes() -> None:
    data = rec('he said "a\nb"', detail='one\n"two"\n', query="SELECT 1;\n\n") + rec("next")
    first, second = parse_csv(data, full_text=True)
    assert first.message == 'he said "a\nb"'
    assert first.detail == 'one\n"two"\n'
    assert first.statement == "SELECT 1;\n\n"
    assert second.message == "next"


def test_each_record_comes_out_at_once_and_the_offset_stays_at_an_open_record() -> None:
    first = rec("statement: SELECT 1")
    multi = rec("statement: SELECT 'a\nb'")
    r = make_reader("csvlog", line_prefix="", timezone="UTC", full_text=False)
    assert [e.kind for e in r.feed(first, now=0.0)] == ["statement"]  # no waiting for the next record
    assert r.committed_offset == len(first)
    cut = multi.index(b"\n") + 1
    assert r.feed(multi[:cut], now=0.1) == []  # the quoted value is still open
    assert r.committed_offset == len(first)
    assert r.flush_idle(now=10.0) == []  # quiet does not close a record: PostgreSQL writes it whole
    assert r.committed_offset == len(first)
    (done,) = r.feed(multi[cut:], now=10.1)
    assert done.statement == "SELECT $1"
    assert r.committed_offset == len(first) + len(multi)
    assert r.flush() == []


SPLIT_RECORDS = [
    rec("statement: SELECT 'x'"),
    rec('a "quoted"\nmulti-line\r\nmessage ünïcödé', severity="ERROR", sqlstate="P0001", detail="d\n"),
    rec("checkpoint starting: time", user=None, db=None, client=None, columns=24),
]
SPLIT_DATA = b"".join(SPLIT_RECORDS)
RECORD_STARTS = {sum(len(r) for r in SPLIT_RECORDS[:i]) for i in range(len(SPLIT_RECORDS) + 1)}


def test_a_split_at_every_byte_gives_the_same_entries_and_offsets_at_record_starts() -> None:
    whole = parse_csv(SPLIT_DATA)
    assert len(whole) == 3
    for split in range(len(SPLIT_DATA) + 1):
        r = make_reader("csvlog", line_prefix="", timezone="UTC", full_text=False)
        got = r.feed(SPLIT_DATA[:split], now=0.0)
        first_offset = r.committed_offset
        assert first_offset in RECORD_STARTS
        assert first_offset <= split
        got += r.feed(SPLIT_DATA[split:], now=0.0)
        assert r.committed_offset == len(SPLIT_DATA)  # every record ends with its newline
        got += r.flush()
        assert got == whole, split


def test_byte_by_byte_feeding_never_moves_the_offset_back_or_into_a_record() -> None:
    r = make_reader("csvlog", line_prefix="", timezone="UTC", full_text=False)
    got: list[LogLine] = []
    last = 0
    for i in range(len(SPLIT_DATA)):
        got += r.feed(SPLIT_DATA[i : i + 1], now=float(i))
        assert r.committed_offset >= last
        assert r.committed_offset in RECORD_STARTS
        last = r.committed_offset
    got += r.flush()
    assert got == parse_csv(SPLIT_DATA)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(rec("x", columns=25), rec("x", columns=25).decode().rstrip("\n"), id="25 columns"),
        pytest.param(b"2026-11-22 02:18:58.123 UTC,a,b\n", "2026-11-22 02:18:58.123 UTC,a,b", id="3 columns"),
        pytest.param(rec("x", time="yesterday"), rec("x", time="yesterday").decode().rstrip("\n"), id="bad time"),
        pytest.param(rec("x", severity=""), rec("x", severity="").decode().rstrip("\n"), id="empty severity"),
        pytest.param(b'"a"b,c\n', '"a"b,c', id="not csv"),
        pytest.param(
            b'2026-11-22 02:18:58.123 UTC,ab"c,"d\n', '2026-11-22 02:18:58.123 UTC,ab"c,"d', id="quote left open"
        ),
        pytest.param(b'x\x01y,"a\x01b"\n', 'x\x01y,"a\x01b"', id="control bytes"),  # (a NUL is a line end)
        pytest.param(b"plain text from somewhere\n", "plain text from somewhere", id="not a record"),
    ],
)
def test_malformed_records_are_kept_as_other(data: bytes, message: str) -> None:
    reader = make_reader("csvlog", line_prefix="", timezone="UTC", full_text=True)
    (entry,) = parse_stream(reader, [data])
    assert (entry.kind, entry.severity, entry.message) == ("other", "LOG", message)
    assert reader.lines_matched == 0
    (redacted,) = parse_csv(data)  # values removed as from any unknown text
    assert redacted.kind == "other"


def test_long_records_read_the_same_through_the_hand_parser() -> None:
    message = "statement: SELECT '" + 'a "b" c,\n' * 20_000 + "'"  # 200 KB: past the csv module's field limit
    (entry,) = parse_csv(rec(message, detail='x "y"'), full_text=True)
    assert (entry.kind, entry.statement, entry.detail, entry.application) == (
        "statement",
        message[11:],
        'x "y"',
        "psql",
    )


def test_malformed_lines_read_crlf_as_lf() -> None:
    (entry,) = parse_csv(b"some text\r\n", full_text=True)
    assert entry.message == "some text"


def test_a_record_the_csv_module_refuses_does_not_upset_the_next_one() -> None:
    data = (
        b'2026-11-22 02:18:58.123 UTC,ab"c,"d\n' + rec("statement: SELECT 1") + b'"a"b\n' + rec("statement: SELECT 2")
    )
    assert [e.kind for e in parse_csv(data)] == ["other", "statement", "other", "statement"]


def test_malformed_record_keeps_its_own_time_when_it_has_one() -> None:
    (entry,) = parse_csv(rec("x", columns=25))
    assert entry.time_us == T0_US


def test_a_stray_quote_outside_a_record_does_not_swallow_what_follows() -> None:
    data = b'garbage with one " quote\n' + rec("statement: SELECT 1") + b"more garbage\n"
    garbage, good, more = parse_csv(data, full_text=True)
    assert (garbage.kind, garbage.message) == ("other", 'garbage with one " quote')
    assert (good.kind, good.statement) == ("statement", "SELECT 1")
    assert (more.kind, more.message) == ("other", "more garbage")


def test_quotes_still_open_at_end_of_file_come_out_as_other() -> None:
    data = rec("statement: SELECT 1") + b'2026-11-22 02:18:58.123 UTC,"alice","shop",1,"unterminated\nsecond line\n'
    r = make_reader("csvlog", line_prefix="", timezone="UTC", full_text=True)
    (good,) = r.feed(data, now=0.0)
    assert r.committed_offset == len(rec("statement: SELECT 1"))
    (bad,) = r.flush()
    assert good.kind == "statement"
    assert bad.kind == "other"
    assert bad.message == '2026-11-22 02:18:58.123 UTC,"alice","shop",1,"unterminated\nsecond line'
    assert r.committed_offset == len(data)
    assert r.lines_matched == 1


def test_empty_lines_between_records_are_skipped_and_crlf_is_read_as_lf() -> None:
    data = rec("statement: SELECT 'a\nb'") + b"\n\n" + rec("next")
    crlf = data.replace(b"\n", b"\r\n")
    assert parse_csv(crlf) == parse_csv(data)
    assert [e.message for e in parse_csv(crlf, full_text=True)] == ["statement", "next"]


def test_bytes_that_are_not_utf8_are_read_as_latin1_not_lost() -> None:
    data = rec("xx").replace(b'"xx"', b'"caf\xe9 \xff\xfe bytes"')
    (entry,) = parse_csv(data, full_text=True)
    assert entry.message == "caf\xe9 \xff\xfe bytes"


def test_a_huge_single_line_record_is_capped_and_the_next_one_is_read() -> None:
    big = rec("statement: SELECT '" + "s" * (2 * MAX_ENTRY_BYTES) + "'", detail="after the cap")
    data = big + rec("next")
    for chunks in ([data], [data[i : i + 65536] for i in range(0, len(data), 65536)]):
        r = make_reader("csvlog", line_prefix="", timezone="UTC", full_text=False)
        first, second = parse_stream(r, chunks)
        assert (first.kind, first.truncated, first.user) == ("statement", True, "alice")
        assert first.statement is not None and first.statement.startswith("SELECT ")
        assert "sss" not in first.statement and "\u00e9" not in first.statement  # the cut literal is never raw
        assert first.detail is None  # past the cap
        assert (second.kind, second.truncated, second.user) == ("other", False, "alice")
        assert r.committed_offset == len(data)
        assert r.lines_matched == 2


def test_quotes_past_the_cap_are_counted() -> None:
    # A multi-line value whose lines past the cap hold quotes: the record still ends where it ends.
    filler = ('x"' * 400 + "\n") * 3000  # 2.4 MB of lines with an even number of quotes each
    odd = 'one odd " here\n' + ('"y' * 100_000) + "\n"
    big = rec("statement: SELECT '" + filler + odd + "'")
    data = big + rec("next")
    for chunks in ([data], [data[i : i + 1000] for i in range(0, len(data), 1000)]):
        reader = make_reader("csvlog", line_prefix="", timezone="UTC", full_text=True)
        first, second = parse_stream(reader, chunks)
        assert (first.kind, first.truncated) == ("statement", True)
        assert len(first.statement or "") <= MAX_ENTRY_BYTES
        assert (second.kind, second.truncated, second.message) == ("other", False, "next")


def test_an_open_record_past_the_cap_resynchronizes_at_the_next_record() -> None:
    # A record cut by a crash (its quoted value never closes) followed by well-formed records.
    broken = b'2026-11-22 02:18:58.123 UTC,"alice","shop",1,"cut by a crash\n'
    lines = b"".join(rec(f"statement: SELECT {i}") for i in range(20_000))  # > 1 MiB
    data = broken + lines + rec("after")
    got = parse_csv(data, full_text=True)
    assert (got[0].kind, got[0].truncated) == ("other", True)
    assert got[0].message.startswith(broken.decode().rstrip("\n"))
    assert got[-1].message == "after"
    # the records swallowed are at most the cap's worth; the rest are read
    assert 1 < len(got) < 20_000
    assert got[1].statement == f"SELECT {20_002 - len(got)}"


def test_lines_matched_counts_well_formed_records() -> None:
    r = make_reader("csvlog", line_prefix="", timezone="UTC", full_text=False)
    list(parse_stream(r, [rec("a") + rec("b\nc") + b"junk\n" + rec("d", columns=24)]))
    assert r.lines_matched == 3


def test_a_stderr_log_read_as_csvlog_keeps_every_line() -> None:
    stderr = PG15_STDERR
    got = parse_csv(stderr, full_text=True)
    assert len(got) == stderr.count(b"\n")
    assert all(e.kind == "other" for e in got)


def test_full_text_is_settable_on_the_reader() -> None:
    r = make_reader("csvlog", line_prefix="", timezone="UTC", full_text=False)
    (hidden,) = r.feed(rec("statement: SELECT 'a'"), now=0.0)
    r.full_text = True
    (kept,) = r.feed(rec("statement: SELECT 'b'"), now=0.0)
    assert (hidden.statement, kept.statement) == ("SELECT $1", "SELECT 'b'")


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=60),
            st.sampled_from(
                [rec("x"), rec("a\nb", detail='"'), b'"', b'""', b"\n", b"\r\n", b",", b"\xff", rec("y")[:30]]
            ),
        ),
        max_size=20,
    )
)
def test_fuzz_never_crashes_and_never_loses_bytes(pieces: list[bytes]) -> None:
    data = b"".join(pieces)
    r = make_reader("csvlog", line_prefix="", timezone="UTC", full_text=False)
    got: list[LogLine] = []
    last = 0
    for piece in pieces:
        got += r.feed(piece, now=0.0)
        assert last <= r.committed_offset <= len(data)
        last = r.committed_offset
    got += r.flush()
    assert r.committed_offset == len(data)
    # any text ends up in some entry: none is dropped (a NUL is a line end: reader.py)
    assert (len(got) > 0) == any(chunk.removesuffix(b"\r") for chunk in data.replace(b"\x00", b"\n").split(b"\n"))
