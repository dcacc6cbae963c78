"""The jsonlog format: keys, missing keys, numbers as strings, malformed lines, cut lines."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pg15_stderr import PG15_STDERR
from pglog_helpers import T0, T0_US, parse_text

from forwarder.model import LogLine
from forwarder.pglog import MAX_ENTRY_BYTES, make_reader, parse_stream

FULL_PREFIX = "%m [%p] %q%u@%d/%a %r %e "

# Real PostgreSQL 15.18 jsonlog lines, copied from a test cluster's output.
PG15_JSON = rb"""{"timestamp":"2026-11-22 02:54:21.558 UTC","pid":22612,"session_id":"6b02595d.5854","line_num":1,"session_start":"2026-11-22 02:54:21 UTC","txid":0,"error_severity":"LOG","message":"starting PostgreSQL 15.18 (Debian 15.18-0+deb12u1) on x86_64-pc-linux-gnu, compiled by gcc (Debian 12.2.0-14+deb12u1) 12.2.0, 64-bit","backend_type":"postmaster","query_id":0}
{"timestamp":"2026-11-22 02:54:21.653 UTC","pid":22621,"remote_host":"[local]","session_id":"6b02595d.585d","line_num":1,"ps":"","session_start":"2026-11-22 02:54:21 UTC","txid":0,"error_severity":"LOG","message":"connection received: host=[local]","backend_type":"not initialized","query_id":0}
{"timestamp":"2026-11-22 02:54:21.661 UTC","user":"postgres","dbname":"postgres","pid":22621,"remote_host":"[local]","session_id":"6b02595d.585d","line_num":3,"ps":"INSERT","session_start":"2026-11-22 02:54:21 UTC","vxid":"3/4","txid":726,"error_severity":"ERROR","state_code":"23505","message":"duplicate key value violates unique constraint \"u_pkey\"","detail":"Key (id)=(1) already exists.","statement":"INSERT INTO u VALUES (1, 'b@example.com');","application_name":"exp","backend_type":"client backend","query_id":0}
{"timestamp":"2026-11-22 02:54:21.662 UTC","user":"postgres","dbname":"postgres","pid":22621,"remote_host":"[local]","session_id":"6b02595d.585d","line_num":4,"ps":"DO","session_start":"2026-11-22 02:54:21 UTC","vxid":"3/5","txid":0,"error_severity":"ERROR","state_code":"P0001","message":"custom failure 42","detail":"the detail 99","hint":"try \"again\"","context":"PL/pgSQL function inline_code_block line 1 at RAISE","statement":"DO $$ BEGIN RAISE EXCEPTION 'custom failure %', 42 USING DETAIL = 'the detail 99', HINT = 'try \"again\"'; END $$;","application_name":"exp","backend_type":"client backend","query_id":0}
{"timestamp":"2026-11-22 02:54:21.663 UTC","user":"postgres","dbname":"postgres","pid":22621,"remote_host":"[local]","session_id":"6b02595d.585d","line_num":5,"ps":"SELECT","session_start":"2026-11-22 02:54:21 UTC","vxid":"3/7","txid":0,"error_severity":"ERROR","state_code":"42703","message":"column \"nope\" does not exist","internal_query":"SELECT nope        FROM u WHERE id = x","internal_position":8,"context":"PL/pgSQL function f(integer) line 1 at SQL statement","statement":"SELECT f(7);","application_name":"exp","backend_type":"client backend","query_id":0}
{"timestamp":"2026-11-22 02:54:21.663 UTC","user":"postgres","dbname":"postgres","pid":22621,"remote_host":"[local]","session_id":"6b02595d.585d","line_num":7,"ps":"SELECT","session_start":"2026-11-22 02:54:21 UTC","vxid":"3/0","txid":0,"error_severity":"LOG","message":"duration: 0.035 ms  statement: SELECT 'multi',\n  'line' AS \"quoted \"\"col\"\"\",\n  2;","application_name":"exp","backend_type":"client backend","query_id":0}
{"timestamp":"2026-11-22 02:54:21.678 UTC","user":"alice","dbname":"postgres","pid":22623,"remote_host":"127.0.0.1","remote_port":37688,"session_id":"6b02595d.585f","line_num":2,"ps":"authentication","session_start":"2026-11-22 02:54:21 UTC","vxid":"3/10","txid":0,"error_severity":"FATAL","state_code":"28P01","message":"password authentication failed for user \"alice\"","detail":"Role \"alice\" does not exist.\nConnection matched pg_hba.conf line 5: \"host    all             all   127.0.0.1/32     scram-sha-256\"","backend_type":"client backend","query_id":0}
{"timestamp":"2026-11-22 02:54:22.689 UTC","pid":22614,"session_id":"6b02595d.5856","line_num":3,"session_start":"2026-11-22 02:54:21 UTC","txid":0,"error_severity":"LOG","message":"checkpoint complete: wrote 46 buffers (2.2%); 0 WAL file(s) added, 0 removed, 0 recycled; write=0.001 s, sync=0.001 s, total=0.002 s; sync files=0, longest=0.000 s, average=0.000 s; distance=168 kB, estimate=168 kB","backend_type":"checkpointer","query_id":0}
"""  # noqa: E501 - real log lines, as PostgreSQL wrote them

# The same events in the stderr format with FULL_PREFIX, from the same cluster: pg15_stderr.PG15_STDERR.


def obj(message: str, **fields: Any) -> dict[str, Any]:
    """A jsonlog object as PostgreSQL 15 writes it for a client backend; `fields` override or add keys."""
    base: dict[str, Any] = {
        "timestamp": T0,
        "user": "alice",
        "dbname": "shop",
        "pid": 4242,
        "remote_host": "10.1.2.3",
        "remote_port": 51000,
        "session_id": "6b02595d.1092",
        "line_num": 3,
        "ps": "SELECT",
        "session_start": "2026-11-22 02:18:00 UTC",
        "vxid": "3/7",
        "txid": 0,
        "error_severity": "LOG",
        "message": message,
        "application_name": "psql",
        "backend_type": "client backend",
        "query_id": 0,
    }
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}  # PostgreSQL leaves NULL keys out


def line(message: str, **fields: Any) -> bytes:
    return orjson.dumps(obj(message, **fields)) + b"\n"


def parse_json(data: bytes, *, full_text: bool = False, timezone: str = "UTC") -> list[LogLine]:
    reader = make_reader("jsonlog", line_prefix="", timezone=timezone, full_text=full_text)
    return list(parse_stream(reader, [data]))


def test_real_pg15_lines_equal_the_stderr_entries_of_the_same_events() -> None:
    for full_text in (False, True):
        from_json = parse_json(PG15_JSON, full_text=full_text)
        assert len(from_json) == 8
        assert from_json == parse_text(PG15_STDERR, prefix=FULL_PREFIX, full_text=full_text)


def test_real_pg15_lines_fields() -> None:
    # Values kept: what value removal leaves is redact.py's business (compared with stderr above).
    start, received, dup, _raised, plpgsql, slow, auth, _checkpoint = parse_json(PG15_JSON, full_text=True)
    assert (start.kind, start.user, start.client, start.pid, start.application) == ("server", None, None, 22612, None)
    assert (received.client, received.user) == ("[local]", None)
    assert (dup.sqlstate, dup.detail, dup.statement, dup.application) == (
        "23505",
        "Key (id)=(1) already exists.",
        "INSERT INTO u VALUES (1, 'b@example.com');",
        "exp",
    )
    assert plpgsql.message == 'column "nope" does not exist at character 8'
    assert (plpgsql.context or "").startswith("internal query: SELECT nope")
    assert (slow.kind, slow.duration_ms, slow.statement) == (
        "slow_query",
        0.035,
        'SELECT \'multi\',\n  \'line\' AS "quoted ""col""",\n  2;',
    )
    assert (auth.kind, auth.sqlstate, auth.client, auth.time_us) == (
        "auth_failure",
        "28P01",
        "127.0.0.1",
        1_795_316_061_678_000,
    )


# (jsonlog line, the stderr text of the same event with FULL_PREFIX)
SAME_AS_STDERR = [
    pytest.param(
        line(
            "checkpoint starting: time",
            user=None,
            dbname=None,
            remote_host=None,
            remote_port=None,
            ps=None,
            application_name=None,
            pid=77,
        ),
        f"{T0} [77] LOG:  checkpoint starting: time\n",
        id="no session",
    ),
    pytest.param(
        line("connection received: host=[local]", user=None, dbname=None, remote_host="[local]", remote_port=None),
        f"{T0} [4242] [unknown]@[unknown]/psql [local] 00000 LOG:  connection received: host=[local]\n",
        id="[local]",
    ),
    pytest.param(
        line("duration: 1.5 ms  statement: SELECT 'a',\n'b'"),
        f"{T0} [4242] alice@shop/psql 10.1.2.3(51000) 00000 LOG:  duration: 1.5 ms  statement: SELECT 'a',\n\t'b'\n",
        id="multi-line slow statement",
    ),
    pytest.param(
        line(
            'syntax error at or near "\'secret"',
            error_severity="ERROR",
            state_code="42601",
            statement="SELECT 'a' 'secret",
            cursor_position=12,
        ),
        f"{T0} [4242] alice@shop/psql 10.1.2.3(51000) 42601 ERROR:  "
        'syntax error at or near "\'secret" at character 12\n'
        f"{T0} [4242] alice@shop/psql 10.1.2.3(51000) 42601 STATEMENT:  SELECT 'a' 'secret\n",
        id="cursor position",
    ),
    pytest.param(
        line(
            "value too long",
            error_severity="WARNING",
            state_code="01000",
            detail="line one\r\nline two",
            hint='use "x"',
            func_name="f",
            file_name="x.c",
            file_line_num=3,
        ),
        f"{T0} [4242] alice@shop/psql 10.1.2.3(51000) 01000 WARNING:  value too long\n"
        f"{T0} [4242] alice@shop/psql 10.1.2.3(51000) 01000 DETAIL:  line one\r\n\tline two\n"
        f'{T0} [4242] alice@shop/psql 10.1.2.3(51000) 01000 HINT:  use "x"\n'
        f"{T0} [4242] alice@shop/psql 10.1.2.3(51000) 01000 LOCATION:  f, x.c:3\n",
        id="crlf, location dropped",
    ),
    pytest.param(
        line("statement: SELECT 1", timestamp="2026-11-22 03:18:58.123 CET"),
        "2026-11-22 03:18:58.123 CET [4242] alice@shop/psql 10.1.2.3(51000) 00000 LOG:  statement: SELECT 1\n",
        id="zone abbreviation",
    ),
]


@pytest.mark.parametrize(("record", "stderr"), SAME_AS_STDERR)
def test_lines_equal_the_stderr_entry_of_the_same_event(record: bytes, stderr: str) -> None:
    for full_text in (False, True):
        reader = make_reader("jsonlog", line_prefix="", timezone="Europe/Paris", full_text=full_text)
        from_json = list(parse_stream(reader, [record]))
        assert from_json == parse_text(stderr, prefix=FULL_PREFIX, timezone="Europe/Paris", full_text=full_text)
        assert reader.lines_matched == 1


def test_numbers_may_come_as_strings_and_texts_as_numbers() -> None:
    as_numbers = line("boom", error_severity="ERROR", pid=4242, cursor_position=3, statement="SELECT 1")
    as_strings = line("boom", error_severity="ERROR", pid="4242", cursor_position="3", statement="SELECT 1")
    assert parse_json(as_numbers) == parse_json(as_strings)
    (entry,) = parse_json(as_strings, full_text=True)
    assert (entry.pid, entry.message) == (4242, "boom at character 3")
    (odd,) = parse_json(line("x", user=12, dbname=3.5, pid="not a pid", state_code=23505), full_text=True)
    assert (odd.user, odd.database, odd.pid, odd.sqlstate) == ("12", "3.5", None, "23505")


def test_missing_keys_are_tolerated() -> None:
    (bare,) = parse_json(b'{"message": "statement: SELECT 1"}\n')
    assert (bare.kind, bare.severity, bare.statement, bare.user, bare.pid) == (
        "statement",
        "LOG",
        "SELECT $1",
        None,
        None,
    )
    assert bare.time_us > T0_US  # no timestamp: the time of reading
    (no_message,) = parse_json(b'{"timestamp": "' + T0.encode() + b'", "error_severity": "ERROR"}\n')
    assert (no_message.kind, no_message.severity, no_message.message, no_message.time_us) == (
        "error",
        "ERROR",
        "",
        T0_US,
    )


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"not json at all", id="text"),
        pytest.param(b"[1, 2, 3]", id="array"),
        pytest.param(b'"a string"', id="string"),
        pytest.param(b"42", id="number"),
        pytest.param(b'{"level": "info", "msg": "another program"}', id="object of another program"),
        pytest.param(b'{"timestamp": "yesterday", "message": "x"}', id="bad timestamp"),
        pytest.param(b'{"timestamp": 17, "message": "x"}', id="timestamp not a string"),
        pytest.param(b'{"message": "x", ', id="cut object"),
    ],
)
def test_lines_that_are_not_records_are_kept_as_other(raw: bytes) -> None:
    reader = make_reader("jsonlog", line_prefix="", timezone="UTC", full_text=True)
    (entry,) = parse_stream(reader, [raw + b"\n"])
    assert (entry.kind, entry.severity, entry.message) == ("other", "LOG", raw.decode())
    assert reader.lines_matched == 0


def test_empty_lines_are_skipped_and_crlf_line_ends_read() -> None:
    data = line("statement: SELECT 1") + b"\n  \n" + line("statement: SELECT 2")
    got = parse_json(data.replace(b"\n", b"\r\n"))
    assert [e.statement for e in got] == ["SELECT $1", "SELECT $1"]
    assert got == parse_json(data)


def test_bytes_that_are_not_utf8_are_read_as_latin1_not_lost() -> None:
    data = line("caf\u00e9 XX bytes").replace(b"\\u00e9", b"\xe9").replace(b"XX", b"\xff\xfe")
    (entry,) = parse_json(data, full_text=True)
    assert (entry.kind, entry.message, entry.user) == ("other", "caf\xe9 \xff\xfe bytes", "alice")


def test_each_line_comes_out_at_once_and_offsets_follow() -> None:
    a, b = line("statement: SELECT 1"), line("statement: SELECT 2")
    r = make_reader("jsonlog", line_prefix="", timezone="UTC", full_text=False)
    assert len(r.feed(a + b[:10], now=0.0)) == 1
    assert r.committed_offset == len(a)
    assert r.flush_idle(now=5.0) == []
    assert len(r.feed(b[10:], now=5.1)) == 1
    assert r.committed_offset == len(a) + len(b)


def test_a_split_at_every_byte_gives_the_same_entries() -> None:
    data = line("statement: SELECT 'ünï'") + line("x\ny", detail="d") + line("checkpoint starting: time")
    whole = parse_json(data)
    starts = {0, len(line("statement: SELECT 'ünï'")), len(data) - len(line("checkpoint starting: time")), len(data)}
    for split in range(len(data) + 1):
        r = make_reader("jsonlog", line_prefix="", timezone="UTC", full_text=False)
        got = r.feed(data[:split], now=0.0)
        assert r.committed_offset in starts
        assert r.committed_offset <= split
        got += r.feed(data[split:], now=0.0) + r.flush()
        assert got == whole
        assert r.committed_offset == len(data)


@pytest.mark.parametrize(
    ("message", "fields"),
    [
        pytest.param("statement: SELECT '" + "s" * (2 * MAX_ENTRY_BYTES) + "'", {}, id="in a string"),
        pytest.param("statement: SELECT '" + "\u00e9" * MAX_ENTRY_BYTES + "'", {}, id="in an escape"),
        pytest.param("statement: SELECT '" + '\\"' * MAX_ENTRY_BYTES + "'", {}, id="in escaped quotes"),
        pytest.param("boom", {"statement": "SELECT '" + "s" * MAX_ENTRY_BYTES + "'"}, id="in the statement"),
    ],
)
def test_a_line_over_the_cap_is_closed_where_it_was_cut(message: str, fields: dict[str, str]) -> None:
    big = orjson.dumps(obj(message, **fields), option=orjson.OPT_APPEND_NEWLINE)
    big = big.replace("\u00e9".encode(), b"\\u00e9")  # PostgreSQL escapes only control characters; test both
    data = big + line("statement: SELECT 2")
    for chunks in ([data], [data[i : i + 65536] for i in range(0, len(data), 65536)]):
        reader = make_reader("jsonlog", line_prefix="", timezone="UTC", full_text=False)
        first, second = parse_stream(reader, chunks)
        assert (first.truncated, first.user, first.pid) == (True, "alice", 4242)
        assert first.kind == ("statement" if message.startswith("statement") else "other")
        assert first.statement is not None and first.statement.startswith("SELECT ")
        assert "sss" not in first.statement and "\u00e9" not in first.statement  # the cut literal is never raw
        assert (second.statement, second.truncated) == ("SELECT $1", False)
        assert reader.committed_offset == len(data)


def test_a_cut_line_that_cannot_be_closed_is_kept_as_other() -> None:
    (entry,) = parse_json(b"[" * (MAX_ENTRY_BYTES + 10) + b"\n", full_text=True)
    assert (entry.kind, entry.truncated) == ("other", True)
    assert len(entry.message) == MAX_ENTRY_BYTES


def test_lines_matched_counts_records() -> None:
    r = make_reader("jsonlog", line_prefix="", timezone="UTC", full_text=False)
    list(parse_stream(r, [line("a") + b"junk\n" + line("b") + b"{}\n"]))
    assert r.lines_matched == 2


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=60),
            st.sampled_from([line("x"), line("a\nb"), b"{", b"}", b'"', b"\n", b"\r\n", b"\xff", b"null"]),
        ),
        max_size=20,
    )
)
def test_fuzz_never_crashes_and_never_loses_bytes(pieces: list[bytes]) -> None:
    data = b"".join(pieces)
    r = make_reader("jsonlog", line_prefix="", timezone="UTC", full_text=False)
    got: list[LogLine] = []
    last = 0
    for piece in pieces:
        got += r.feed(piece, now=0.0)
        assert last <= r.committed_offset <= len(data)
        last = r.committed_offset
    got += r.flush()
    assert r.committed_offset == len(data)
    lines = data.replace(b"\x00", b"\n").split(b"\n")  # a NUL is a line end (reader.py)
    assert len(got) == sum(1 for chunk in lines if chunk.strip())
