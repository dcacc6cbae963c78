"""Entry assembly: continuations, DETAIL/STATEMENT joining, flushing, offsets, limits, bad bytes."""

from __future__ import annotations

import tracemalloc
from functools import partial

import pglog_helpers
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pglog_helpers import PREFIX, T0

from forwarder.pglog import IDLE_FLUSH_SECONDS, MAX_ENTRY_BYTES, WHOLE_WRITE_BYTES, make_reader
from forwarder.pglog import reader as reader_module
from forwarder.pglog.normalize import scrub
from forwarder.pglog.redact import redact_text

# These tests are about parsing and assembly, not value removal (test_pglog_redact.py): they read
# with values kept, so made-up messages such as "boom" come out as written.
one = partial(pglog_helpers.one, full_text=True)
parse_text = partial(pglog_helpers.parse_text, full_text=True)


def new_reader(full_text: bool = True):  # type: ignore[no-untyped-def]
    return make_reader("stderr", line_prefix=PREFIX, timezone="UTC", full_text=full_text)


def line(pid: int, severity: str, text: str) -> bytes:
    return f"{T0} [{pid}] app@shop/psql {severity}:  {text}\n".encode()


def test_constants_agree_with_the_seam() -> None:
    assert reader_module.IDLE_FLUSH_SECONDS == IDLE_FLUSH_SECONDS
    assert reader_module.MAX_ENTRY_BYTES == MAX_ENTRY_BYTES
    assert reader_module.WHOLE_WRITE_BYTES == WHOLE_WRITE_BYTES


def test_secondary_lines_fill_their_fields() -> None:
    text = (
        line(7, "ERROR", 'duplicate key value violates unique constraint "users_pkey"')
        + line(7, "DETAIL", "Key (id)=(5) already exists.")
        + line(7, "HINT", "Use another id.")
        + line(7, "CONTEXT", 'SQL function "f" statement 1')
        + line(7, "STATEMENT", "INSERT INTO users VALUES (5)")
    )
    entry = one(text.decode(), full_text=False)
    assert entry.message == 'duplicate key value violates unique constraint "users_pkey"'
    assert entry.detail == "Key (id)=(...) already exists."
    assert entry.hint == "..."  # not a PostgreSQL hint: unknown text is removed whole (default deny)
    assert entry.context == 'SQL function "f" statement 1'
    assert entry.statement == "INSERT INTO users VALUES ($1)"


def test_tab_lines_continue_the_last_field_and_other_unprefixed_text_is_its_own_entry() -> None:
    """PostgreSQL writes a TAB after every newline of a message (elog.c append_with_tabs); text
    without the prefix and without the TAB is a child process's stderr (COPY ... PROGRAM,
    archive_command) or an assertion's TRAP line: kept as an entry, not glued to the one above."""
    text = (
        line(7, "LOG", "statement: SELECT a,")
        + b"\t       b\n"
        + b"\tFROM t\n"
        + line(7, "ERROR", "boom")
        + line(7, "DETAIL", "first")
        + b"\tsecond line of detail\n"
        + b"child-secret written by a program\n"
        + b"\tits TAB-led line\n"
        + line(7, "LOG", "statement: SELECT 2")
    )
    first, second, child, third = parse_text(text)
    assert first.kind == "statement"
    assert first.statement == "SELECT a,\n       b\nFROM t"
    assert second.detail == "first\nsecond line of detail"
    assert (child.kind, child.message, child.unparsed) == (
        "other",
        "child-secret written by a program\nits TAB-led line",
        True,
    )
    assert third.statement == "SELECT 2"


def test_query_goes_into_context_and_location_is_dropped() -> None:
    text = (
        line(7, "ERROR", 'column "nope" does not exist at character 8')
        + line(7, "QUERY", "SELECT nope FROM t WHERE x = 'secret'")
        + line(7, "CONTEXT", "PL/pgSQL function f() line 3 at PERFORM")
        + line(7, "LOCATION", "errorMissingColumn, parse_relation.c:3651")
        + line(7, "STATEMENT", "SELECT f()")
    )
    entry = one(text.decode(), full_text=False)
    # (the unknown column at the error's position may be a value without its quotes: it goes too)
    assert entry.context == "internal query: SELECT $1 FROM t WHERE x = $2\nPL/pgSQL function f() line 3 at PERFORM"
    assert "parse_relation" not in repr(entry)
    assert entry.statement == "SELECT f()"


def test_secondary_line_of_another_pid_does_not_join() -> None:
    text = line(7, "ERROR", "boom") + line(8, "DETAIL", "not mine")
    first, second = parse_text(text)
    assert first.detail is None
    assert (second.kind, second.severity, second.message, second.pid) == ("other", "LOG", "DETAIL:  not mine", 8)


def test_line_without_entry_becomes_other_never_dropped() -> None:
    text = b"some text from a library\n\tand its second line\n" + line(7, "LOG", "hello")
    orphan, hello = parse_text(text)
    assert (orphan.kind, orphan.severity) == ("other", "LOG")
    assert orphan.message == "some text from a library\nand its second line"
    assert orphan.pid is None
    assert hello.message == "hello"


def test_a_log_read_with_the_wrong_prefix_keeps_every_line() -> None:
    # A syslog-format file read as stderr: no line matches, and each one is kept as its own line.
    text = b"".join(b"Nov 22 10:00:%02d host postgres[1]: LOG:  line %d\n" % (i, i) for i in range(50))
    assert len(parse_text(text)) == 50
    lines = parse_text(text, full_text=True)
    assert [x.message for x in lines] == [f"Nov 22 10:00:{i:02d} host postgres[1]: LOG:  line {i}" for i in range(50)]
    assert {x.kind for x in lines} == {"other"} and not any(x.truncated for x in lines)


def test_offsets_and_flushing_step_by_step() -> None:
    r = new_reader()
    l1, l2, l3 = line(1, "ERROR", "boom"), line(1, "DETAIL", "more"), line(2, "LOG", "next")
    assert r.committed_offset == 0

    assert r.feed(l1[:10], now=0.0) == []  # partial line held
    assert r.committed_offset == 0
    assert r.feed(l1[10:], now=0.1) == []  # complete line, entry pending
    assert r.committed_offset == 0
    assert r.feed(l2, now=0.2) == []  # joins the pending entry
    assert r.committed_offset == 0

    out = r.feed(l3, now=0.3)  # the next primary line completes the first entry
    assert [(e.message, e.detail) for e in out] == [("boom", "more")]
    assert r.committed_offset == len(l1) + len(l2)

    assert r.flush_idle(now=0.3 + IDLE_FLUSH_SECONDS - 0.01) == []  # not idle long enough
    assert r.committed_offset == len(l1) + len(l2)
    out = r.flush_idle(now=0.3 + IDLE_FLUSH_SECONDS)
    assert [e.message for e in out] == ["next"]
    assert r.committed_offset == len(l1) + len(l2) + len(l3)
    assert r.flush_idle(now=100.0) == []
    assert r.flush() == []
    assert r.committed_offset == len(l1) + len(l2) + len(l3)


def test_an_entry_written_whole_comes_out_at_the_end_of_the_data_without_waiting() -> None:
    # PostgreSQL wrote the ERROR with its DETAIL, continuation and STATEMENT in one write: once the
    # data ends with a newline the entry is complete, with no next entry and no quiet second.
    r = new_reader()
    entry = line(7, "ERROR", "boom") + line(7, "DETAIL", "first") + b"\tsecond\n" + line(7, "STATEMENT", "SELECT 1")
    assert r.feed(entry, now=0.0) == []
    (out,) = r.flush_written()
    assert (out.message, out.detail, out.statement) == ("boom", "first\nsecond", "SELECT 1")
    assert r.committed_offset == len(entry)
    assert r.flush_written() == [] and r.flush() == []


def test_no_entry_comes_out_at_the_end_of_the_data_while_a_line_is_partial() -> None:
    r = new_reader()
    l1 = line(1, "LOG", "one")
    r.feed(l1[:-1], now=0.0)
    assert r.flush_written() == []
    assert r.committed_offset == 0
    r.feed(b"\n", now=0.1)
    assert [e.message for e in r.flush_written()] == ["one"]


def test_a_long_entry_ending_at_the_end_of_the_data_waits_for_its_last_lines() -> None:
    # The collector writes a message longer than its stdio buffer in several writes, the last ones
    # line by line: data ending with a newline may be the middle of it.
    r = new_reader()
    head = line(3, "LOG", "x" * WHOLE_WRITE_BYTES)
    assert r.feed(head + b"\tmore\n", now=0.0) == []
    assert r.flush_written() == []
    assert r.committed_offset == 0
    r.feed(line(3, "STATEMENT", "SELECT 2"), now=0.0)
    (out,) = r.flush()
    assert out.message == "x" * WHOLE_WRITE_BYTES + "\nmore" and out.statement == "SELECT 2"


def test_idle_flush_leaves_a_partial_line_alone() -> None:
    r = new_reader()
    l1, l2 = line(1, "LOG", "one"), line(1, "LOG", "two")
    r.feed(l1 + l2[:5], now=0.0)
    assert r.committed_offset == 0
    out = r.flush_idle(now=5.0)
    assert [e.message for e in out] == ["one"]
    assert r.committed_offset == len(l1)  # where the partial line starts
    assert r.feed(l2[5:], now=6.0) == []
    assert [e.message for e in r.flush()] == ["two"]
    assert r.committed_offset == len(l1) + len(l2)


def test_continuation_after_idle_flush_is_its_own_entry() -> None:
    r = new_reader()
    r.feed(line(1, "LOG", "statement: SELECT 1"), now=0.0)
    assert len(r.flush_idle(now=1.5)) == 1
    r.feed(b"\tFROM t\n", now=1.6)
    (late,) = r.flush()
    assert (late.kind, late.message) == ("other", "FROM t")


def test_partial_last_line_comes_out_on_flush() -> None:
    r = new_reader()
    data = line(1, "LOG", "one") + line(1, "LOG", "two").rstrip(b"\n")
    assert [e.message for e in r.feed(data, now=0.0)] == []
    assert [e.message for e in r.flush()] == ["one", "two"]
    assert r.committed_offset == len(data)


def test_byte_by_byte_feeding_gives_the_same_entries_and_offsets_never_go_back() -> None:
    text = (
        line(1, "ERROR", "boom")
        + line(1, "STATEMENT", "SELECT 'x'")
        + "\tcontinued ünïcödé\n".encode()
        + line(2, "LOG", "checkpoint starting: time")
    )
    whole = parse_text(text)
    r = new_reader()
    got = []
    last = 0
    for i in range(len(text)):
        got += r.feed(text[i : i + 1], now=float(i))
        assert r.committed_offset >= last
        last = r.committed_offset
    got += r.flush()
    assert got == [e for e in whole]  # time_us comes from the prefix, so entries are equal
    assert r.committed_offset == len(text)


def test_a_name_holding_newlines_keeps_its_lines_apart() -> None:
    """CREATE DATABASE "nl<newline>db": PostgreSQL writes the name raw, so the prefix of every line
    of that session is cut in two. The pieces are joined back, and the session's entries are
    neither merged into the one before nor lost (csvlog and jsonlog read the same)."""
    text = (
        line(1, "LOG", "before")
        + f"{T0} [2] app@nl\ndb/psql ERROR:  boom\n".encode()
        + f"{T0} [2] app@nl\ndb/psql STATEMENT:  SELECT 1\n".encode()
        + f"{T0} [3] a\nb@shop/x\ny\nz LOG:  three pieces\n".encode()
        + line(4, "LOG", "after")
    )
    got = parse_text(text)
    assert [(e.pid, e.user, e.database, e.application, e.message, e.statement) for e in got] == [
        (1, "app", "shop", "psql", "before", None),
        (2, "app", "nl\ndb", "psql", "boom", "SELECT 1"),
        (3, "a\nb", "shop", "x\ny\nz", "three pieces", None),
        (4, "app", "shop", "psql", "after", None),
    ]
    assert not any(e.unparsed for e in got)


def test_a_held_piece_keeps_the_committed_offset_and_goes_its_way_when_nothing_joins_it() -> None:
    r = new_reader()
    first = line(1, "ERROR", "boom")
    head = f"{T0} [9] app@nl\n".encode()
    assert r.feed(first + head, now=0.0) == []
    # the ERROR is complete, but the held piece may be the start of the next entry: not past it
    assert r.committed_offset == 0
    out = r.feed(b"db/psql LOG:  joined\n", now=0.1)
    assert [(e.message, e.database) for e in out] == [("boom", "shop")]
    assert r.committed_offset == len(first)
    assert [(e.message, e.database) for e in r.flush_written()] == [("joined", "nl\ndb")]
    # a piece that starts like a prefix but is another format's line: read as before, at the
    # end of the data (PostgreSQL writes a message whole), as an entry of its own
    r = new_reader()
    other = f"{T0} [9] not a prefixed line\n".encode()
    out = r.feed(first + other, now=0.0) + r.flush_written()
    assert [(e.message, e.pid, e.unparsed) for e in out] == [("boom", 1, False), (other.decode().rstrip(), None, True)]
    assert r.committed_offset == len(first + other)


def test_crlf_line_ends() -> None:
    text = line(1, "LOG", "hello").replace(b"\n", b"\r\n")
    (entry,) = parse_text(text)
    assert entry.message == "hello"


def test_bytes_that_are_not_utf8_are_read_as_latin1_not_lost() -> None:
    # a LATIN1 database's "café" (0xE9), stray bytes, a cut sequence: each byte kept as its Latin-1
    # character, valid UTF-8 around them read as UTF-8
    text = (
        line(1, "ERROR", "caf\xe9 bad \xff bytes")
        .replace("\xe9".encode(), b"\xe9")
        .replace("\xff".encode(), b"\xff\xfe")
    )
    text += b"\t\xc3 and \xc3\xa9\n"
    (entry,) = parse_text(text)
    assert entry.message == "caf\xe9 bad \xff\xfe bytes\n\xc3 and \xe9"


def test_entry_is_capped_at_one_mib() -> None:
    chunk = b"\t" + b"x" * 999 + b"\n"
    text = line(1, "LOG", "statement: SELECT 1") + chunk * 2000 + line(1, "LOG", "after")
    big, after = parse_text(text, full_text=True)
    assert big.truncated
    assert len(big.statement or "") <= MAX_ENTRY_BYTES
    assert len(big.statement or "") > MAX_ENTRY_BYTES - 2000
    assert not after.truncated
    assert after.message == "after"


def test_a_label_repeated_line_after_line_stops_growing_its_field_at_the_cap() -> None:
    # Each line of a file written without the collector (or a crafted one) may carry a DETAIL label
    # of its own: the field grows by lines, each on a line of its own, and stops at the cap.
    text = line(1, "ERROR", "boom") + line(1, "DETAIL", "again") * 200_000 + line(1, "LOG", "after")
    big, after = parse_text(text, full_text=True)
    assert big.truncated and big.detail is not None
    assert set(big.detail.split("\n")) == {"again"}
    assert len(big.detail) <= MAX_ENTRY_BYTES  # the cap counts the log text, prefixes too
    assert after.message == "after"


@pytest.mark.parametrize(
    "sql",
    ["SELECT '{x}", "SELECT '{x}' , 1", 'SELECT "{x}', "SELECT /* {x}", "SELECT E'{x}", "SELECT U&'{x}"],
    ids=["open-string", "string", "identifier", "comment", "e-string", "u-string"],
)
def test_a_token_as_long_as_an_entry_is_read_in_memory_of_its_size(sql: str) -> None:
    # re kept ~200 bytes of backtracking state per character of a quoted string, identifier or
    # comment: a parse worker of ~20 MB took 250 MB for one entry at the cap.
    text = sql.format(x="x" * MAX_ENTRY_BYTES)
    tracemalloc.start()
    try:
        scrub(text)
        redact_text(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MAX_ENTRY_BYTES, peak  # a copy or two of the text at most


def test_a_statement_that_normalization_makes_longer_is_cut_at_the_cap() -> None:
    # Each one-character literal becomes a placeholder of up to 7 (`$524288`): a 1 MiB statement of
    # them came out as a 4 MB line, more than receivers take (and than the documented cap).
    many = "+".join(["1"] * (MAX_ENTRY_BYTES // 2))
    text = line(1, "LOG", f"statement: SELECT {many}") + line(1, "LOG", "statement: SELECT 2")
    big, after = parse_text(text, full_text=False)
    assert big.truncated and big.statement is not None
    assert big.statement.startswith("SELECT $1+$2+$3+") and len(big.statement) == MAX_ENTRY_BYTES
    assert after.statement == "SELECT $1" and not after.truncated


def test_single_huge_line_is_capped_whether_fed_at_once_or_in_pieces() -> None:
    text = line(1, "LOG", "statement: SELECT '" + "s" * (3 * MAX_ENTRY_BYTES) + "'")
    (at_once,) = parse_text(text, full_text=False)
    assert at_once.truncated
    assert at_once.statement == "SELECT $1"  # the cut string never comes out raw

    r = new_reader(full_text=False)
    got = []
    for i in range(0, len(text), 65536):
        got += r.feed(text[i : i + 65536], now=0.0)
        assert r._partial_kept <= MAX_ENTRY_BYTES  # type: ignore[attr-defined]  # memory stays bounded
    got += r.flush()
    assert len(got) == 1
    assert got[0].truncated
    assert r.committed_offset == len(text)


def test_full_text_is_settable_on_the_reader() -> None:
    r = new_reader()
    r.feed(line(1, "LOG", "statement: SELECT 'a'") + line(1, "LOG", "x"), now=0.0)
    r.full_text = True
    (kept,) = r.feed(line(1, "LOG", "statement: SELECT 'b'"), now=0.0)
    assert kept.message == "x"
    (raw,) = r.flush()
    assert raw.statement == "SELECT 'b'"
    assert not raw.redacted


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=80),
            st.sampled_from(
                # (the prefix up to a name: a line a newline in a name cut, held by the reader)
                [
                    line(1, "ERROR", "x"),
                    line(1, "DETAIL", "y"),
                    f"{T0} [1] a@s".encode(),
                    b"\t",
                    b"\n",
                    b"\r\n",
                    b"\xff",
                ]
            ),
        ),
        max_size=20,
    )
)
def test_fuzz_never_crashes_and_never_loses_bytes(pieces: list[bytes]) -> None:
    data = b"".join(pieces)
    r = new_reader()
    got = []
    last = 0
    for piece in pieces:
        got += r.feed(piece, now=0.0)
        assert last <= r.committed_offset <= len(data)
        last = r.committed_offset
    got += r.flush()
    assert r.committed_offset == len(data)
    # a line with any text ends up in some entry: none is dropped (a NUL is a line end: reader.py)
    assert (len(got) > 0) == any(_text_of(chunk) for chunk in data.replace(b"\x00", b"\n").split(b"\n"))


def _text_of(raw: bytes) -> bytes:
    """What a physical line carries once its CR and continuation TAB are taken off."""
    return raw.removesuffix(b"\r").removeprefix(b"\t")


@pytest.mark.parametrize(
    ("fmt", "first", "second"),
    [
        ("stderr", line(1, "LOG", "statement: SELECT 1"), line(1, "LOG", "statement: SELECT 2")),
        (
            "csvlog",
            b'2026-11-22 02:18:58.123 UTC,"a","b",1,"[local]",6b0.1,1,"SELECT",2026-11-22 02:18:58 UTC,3/1,0,'
            b'LOG,00000,"statement: SELECT 1",,,,,,,,,"psql","client backend",,0\n',
            b'2026-11-22 02:18:59.123 UTC,"a","b",1,"[local]",6b0.1,2,"SELECT",2026-11-22 02:18:58 UTC,3/1,0,'
            b'LOG,00000,"statement: SELECT 2",,,,,,,,,"psql","client backend",,0\n',
        ),
        (
            "jsonlog",
            b'{"timestamp":"2026-11-22 02:18:58.123 UTC","pid":1,"error_severity":"LOG",'
            b'"message":"statement: SELECT 1"}\n',
            b'{"timestamp":"2026-11-22 02:18:59.123 UTC","pid":1,"error_severity":"LOG",'
            b'"message":"statement: SELECT 2"}\n',
        ),
    ],
)
def test_zeros_a_file_system_left_before_the_next_line_lose_no_entry(fmt: str, first: bytes, second: bytes) -> None:
    """After a power loss a log file can hold zeros where blocks were given and not written; the
    restarted server appends after them. (A line cut before them is an entry of its own in stderr
    and jsonlog; a csvlog record cut inside a quoted value stays open, docs/parsing.md.)"""
    reader = make_reader(fmt, line_prefix=PREFIX, timezone="UTC", full_text=True)
    cut = b"" if fmt == "csvlog" else first[:30]
    data = first + cut + b"\x00" * 5000 + second
    out = (
        reader.feed(data[:4000], 0.0) + reader.feed(data[4000:], 0.0) + reader.flush_written() + reader.flush_idle(9.0)
    )
    statements = [entry.statement for entry in out if entry.kind == "statement"]
    assert statements == ["SELECT 1", "SELECT 2"]
    assert reader.committed_offset == len(data)
