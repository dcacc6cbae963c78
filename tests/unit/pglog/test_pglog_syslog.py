"""The syslog format: PostgreSQL 15's `log_destination = 'syslog,csvlog'` as rsyslog wrote it.

The fixtures were recorded from a real PostgreSQL 15.18 (log_line_prefix '%m [%p] %q%u@%d ',
log_statement = 'all', log_min_duration_statement = 0) logging through a real rsyslogd 8 (imuxsock)
into two files, rsyslog's traditional format and RSYSLOG_FileFormat, plus the same cluster's csvlog:
a multi-line statement, statements over 900 bytes split at a space, cut in a word and cut between
two-byte characters, a DETAIL, a CONTEXT, a TAB inside a statement, and lines of another program.
tests/integration/test_syslog_source_pg.py records the same kind of output live.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from forwarder.model import LogLine, spec_fields
from forwarder.pglog import IDLE_FLUSH_SECONDS, make_reader, parse_stream
from forwarder.pglog.syslog import SyslogReader, unescape

FIXTURES = Path(__file__).parent / "fixtures"
PREFIX = "%m [%p] %q%u@%d "
SECRETS = ("Sup3rSecretPw", "Hunter2Secret", "Hunter3Secret")
# What a reader of the syslog file and of the csvlog both know about an entry.
FIELDS = ("time", "kind", "severity", "message", "detail", "hint", "context", "statement", "user", "database", "pid")
# A fixed "now" for the readers: 2026-12-01 00:00:00 UTC, a week after the recording.
NOW = 1_796_083_200.0


def fields(line: LogLine) -> dict[str, Any]:
    spec = spec_fields(line)
    return {k: spec.get(k) for k in FIELDS}


def read(fmt: str, data: bytes, *, full_text: bool = False, prefix: str = PREFIX, **kw: Any) -> list[LogLine]:
    if fmt == "syslog":
        reader: Any = SyslogReader(
            line_prefix=prefix, timezone="UTC", full_text=full_text, wall_clock=lambda: NOW, **kw
        )
    else:
        reader = make_reader("csvlog", line_prefix="", timezone="UTC", full_text=full_text)
    return list(parse_stream(reader, [data]))


def by_event(lines: list[LogLine]) -> list[dict[str, Any]]:
    return sorted((fields(x) for x in lines), key=lambda f: (f["time"], f["pid"], f["message"], str(f["statement"])))


@pytest.mark.parametrize("name", ["pg15_syslog_traditional.log", "pg15_syslog_fileformat.log"])
@pytest.mark.parametrize("full_text", [False, True])
def test_rsyslog_files_read_as_the_csvlog_of_the_same_events(name: str, full_text: bool) -> None:
    syslog = read("syslog", (FIXTURES / name).read_bytes(), full_text=full_text)
    csv = read("csvlog", (FIXTURES / "pg15_syslog_csvlog.csv").read_bytes(), full_text=full_text)
    # The postmaster writes its first message to stderr and syslog before the logging collector
    # (and so the csvlog) starts: the only entry the csvlog cannot have.
    first = syslog.pop(0)
    assert first.message == "redirecting log output to logging collector process"
    assert by_event(syslog) == by_event(csv)
    assert len(syslog) == 35 and not any(x.unparsed for x in syslog)
    statements = [x.statement or "" for x in syslog]
    assert any("\n\tname\n  FROM t\n WHERE name" in s for s in statements) or not full_text
    long = [s for s in statements if len(s.encode()) > 900]
    # Split at a space, cut inside a word, cut between two-byte characters.
    assert len(long) == (3 if full_text else 0)
    text = "\n".join(repr(spec_fields(x)) for x in syslog)
    assert SECRETS[0] not in text  # a password goes even with full text
    for value in SECRETS[1:]:
        assert (value in text) == full_text


def test_entries_come_in_file_order_and_other_programs_are_counted() -> None:
    reader = SyslogReader(line_prefix=PREFIX, timezone="UTC", full_text=False, wall_clock=lambda: NOW)
    lines = list(parse_stream(reader, [(FIXTURES / "pg15_syslog_traditional.log").read_bytes()]))
    assert reader.lines_other == 4  # runuser's pam lines
    assert reader.lines_matched >= 36
    messages = [x.message for x in lines]
    assert messages[:3] == [
        "redirecting log output to logging collector process",
        "ending log output to stderr",
        messages[2],
    ]
    assert messages[-1] == "database system is shut down"


def test_restart_at_the_committed_offset_loses_and_repeats_nothing() -> None:
    data = (FIXTURES / "pg15_syslog_fileformat.log").read_bytes()
    whole = [fields(x) for x in read("syslog", data)]
    for cut in range(0, len(data), 197):
        first = SyslogReader(line_prefix=PREFIX, timezone="UTC", full_text=False)
        got = [fields(x) for x in first.feed(data[:cut], 0.0)]
        offset = first.committed_offset
        assert offset <= cut
        rest = [fields(x) for x in read("syslog", data[offset:])]
        assert got + rest == whole, cut


def test_a_message_completes_when_its_process_is_quiet() -> None:
    reader = SyslogReader(line_prefix=PREFIX, timezone="UTC", full_text=True, wall_clock=lambda: NOW)
    text = (
        b"Nov 24 03:32:50 vm postgres[7]: [13-1] 2026-11-24 03:32:50.308 UTC [7] u@d ERROR:  boom\n"
        b"Nov 24 03:32:50 vm postgres[7]: [13-2] 2026-11-24 03:32:50.308 UTC [7] u@d STATEMENT:  SELECT 1\n"
    )
    assert reader.feed(text, 10.0) == []  # a DETAIL line could still come
    assert reader.flush_written() == []
    assert reader.committed_offset == 0
    assert reader.flush_idle(10.0 + IDLE_FLUSH_SECONDS / 2) == []
    (line,) = reader.flush_idle(10.0 + IDLE_FLUSH_SECONDS)
    assert (line.kind, line.message, line.statement) == ("error", "boom", "SELECT 1")
    assert reader.committed_offset == len(text)


def test_interleaved_processes_are_put_back_together() -> None:
    text = (
        b"Nov 24 03:32:50 vm postgres[7]: [13-1] 2026-11-24 03:32:50.308 UTC [7] u@d ERROR:  boom\n"
        b"Nov 24 03:32:50 vm postgres[8]: [4-1] 2026-11-24 03:32:50.309 UTC [8] v@d LOG:  duration: 1.000 ms\n"
        b"Nov 24 03:32:50 vm CRON[99]: (root) CMD (true)\n"
        b"Nov 24 03:32:50 vm postgres[7]: [13-2] 2026-11-24 03:32:50.308 UTC [7] u@d STATEMENT:  SELECT 1\n"
        b"Nov 24 03:32:51 vm postgres[7]: [14-1] 2026-11-24 03:32:51.000 UTC [7] u@d LOG:  duration: 2.000 ms\n"
    )
    lines = read("syslog", text, full_text=True)
    assert [(x.pid, x.message, x.statement) for x in lines] == [
        (7, "boom", "SELECT 1"),
        (8, "duration: 1.000 ms", None),
        (7, "duration: 2.000 ms", None),
    ]


def test_without_time_or_pid_in_the_prefix_the_syslog_header_gives_them() -> None:
    text = b"Nov 24 03:40:01 db1 postgres[1234]: [5-1] app@shop LOG:  duration: 3.000 ms\n"
    (line,) = read("syslog", text, prefix="%q%u@%d ", full_text=True)
    assert (line.pid, line.user, line.database, line.kind) == (1234, "app", "shop", "slow_query")
    assert spec_fields(line)["time"] == "2026-11-24T03:40:01.000Z"
    # Read in January, a December line is of the year before; its zone is the configured one.
    jan = 1_799_020_800.0  # 2027-01-04 00:00:00 UTC
    dec = b"Dec 31 23:59:59 db1 postgres[1]: [2-1] LOG:  checkpoint starting: time\n"
    reader = SyslogReader(line_prefix="", timezone="America/New_York", full_text=True, wall_clock=lambda: jan)
    (old,) = list(parse_stream(reader, [dec]))
    assert spec_fields(old)["time"] == "2027-01-01T04:59:59.000Z"
    iso = b"2026-11-24T03:40:01.123456-03:00 db1 postgres[1234]: [5-1] LOG:  checkpoint starting: time\n"
    (exact,) = read("syslog", iso, prefix="", full_text=True)
    assert spec_fields(exact)["time"] == "2026-11-24T06:40:01.123Z" and exact.pid == 1234


def test_without_sequence_numbers_and_without_splitting() -> None:
    # syslog_sequence_numbers = off: `[chunk]` tags, none on a message of one line.
    off = (
        b"Nov 24 03:40:01 h postgres[5]: 2026-11-24 03:40:01.000 UTC [5] LOG:  checkpoint starting: time\n"
        b"Nov 24 03:40:02 h postgres[5]: [1] 2026-11-24 03:40:02.000 UTC [5] ERROR:  boom\n"
        b"Nov 24 03:40:02 h postgres[5]: [2] 2026-11-24 03:40:02.000 UTC [5] STATEMENT:  SELECT\n"
        b"Nov 24 03:40:02 h postgres[5]: [3] #011 1\n"
    )
    first, second = read("syslog", off, prefix="%m [%p] ", full_text=True)
    assert first.kind == "checkpoint" and (second.message, second.statement) == ("boom", "SELECT\n 1")
    # A prefix that opens with `[%p] ` is not mistaken for a tag.
    bracket = b"Nov 24 03:40:01 h postgres[5]: [5] LOG:  checkpoint starting: time\n"
    (line,) = read("syslog", bracket, prefix="[%p] ")
    assert line.kind == "checkpoint" and line.pid == 5 and not line.unparsed
    # syslog_split_messages = off: one syslog message, its newlines escaped by rsyslog.
    whole = (
        b"Nov 24 03:40:02 h postgres[5]: [9] 2026-11-24 03:40:02.000 UTC [5] ERROR:  boom"
        b"#0122026-11-24 03:40:02.000 UTC [5] DETAIL:  Key (id)=(1) exists.#012\n"
    )
    (err,) = read("syslog", whole, prefix="%m [%p] ", full_text=True)
    assert (err.message, err.detail) == ("boom", "Key (id)=(1) exists.")


def test_pieces_split_before_a_tab_are_joined_and_tab_lines_are_new_lines() -> None:
    head = "2026-11-24 03:40:02.000 UTC [5] LOG:  statement: SELECT "
    word = "x" * (900 - len(head) - 10)  # the line's last whitespace within 900 bytes is the TAB after it
    rest = "\t" + "y" * 20  # PostgreSQL cuts at that TAB: the piece after it starts with it
    text = (
        f"Nov 24 03:40:02 h postgres[5]: [3-1] {head}{word}\n"
        f"Nov 24 03:40:02 h postgres[5]: [3-2] {rest.replace(chr(9), '#011')}\n"
        "Nov 24 03:40:02 h postgres[5]: [3-3] #011FROM t\n"
    ).encode()
    (line,) = read("syslog", text, prefix="%m [%p] ", full_text=True)
    assert line.statement == f"SELECT {word}\t{'y' * 20}\nFROM t"


def test_lines_that_are_not_syslog_lines_are_kept_unparsed() -> None:
    text = (
        b"garbage line\n"
        b"Nov 24 03:40:01 h postgres[5]: [1-1] 2026-11-24 03:40:01.000 UTC [5] LOG:  checkpoint starting: time\n"
    )
    bad, good = read("syslog", text, prefix="%m [%p] ")
    assert bad.unparsed and not good.unparsed and good.kind == "checkpoint"


def test_unescape_undoes_control_characters_only() -> None:
    assert unescape("a#011b#012c#035d#040e#1234") == "a\tb\nc\x1dd#040e#1234"


def test_forwarder_parse_reads_syslog_and_reports_other_programs() -> None:
    data = (FIXTURES / "pg15_syslog_traditional.log").read_bytes()
    out = subprocess.run(
        [sys.executable, "-m", "forwarder", "parse", "--format", "syslog", "--prefix", PREFIX],
        input=data,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 36
    assert b"skipped 4 lines of other programs" in out.stderr
    assert not any(s.encode() in out.stdout for s in SECRETS)
    wrong = subprocess.run(
        [sys.executable, "-m", "forwarder", "parse", "--format", "syslog", "--prefix", "%t %p "],
        input=data,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert wrong.returncode == 1 and b"did not match the syslog format with the prefix '%t %p '" in wrong.stderr


def test_the_configured_ident_picks_the_servers_lines() -> None:
    from forwarder.config import LogSourceConfig

    text = (
        b"Nov 24 03:40:01 h postgres[5]: [1-1] 2026-11-24 03:40:01.000 UTC [5] LOG:  checkpoint starting: time\n"
        b"Nov 24 03:40:01 h pg-main[6]: [1-1] 2026-11-24 03:40:01.000 UTC [6] LOG:  checkpoint starting: wal\n"
    )
    log = LogSourceConfig.model_validate({"path": "/var/log/syslog", "format": "syslog", "syslog_ident": "pg-main"})
    reader = make_reader(
        log.format, line_prefix="%m [%p] ", timezone="UTC", full_text=True, syslog_ident=log.syslog_ident
    )
    (line,) = list(parse_stream(reader, [text]))
    assert (line.pid, line.message) == (6, "checkpoint starting: wal")
    with pytest.raises(ValueError, match="syslog_ident"):
        LogSourceConfig.model_validate({"path": "x", "format": "syslog", "syslog_ident": "pg main"})


def test_a_message_is_not_held_past_the_entry_cap() -> None:
    head = b"Nov 24 03:40:01 h postgres[5]: [1-1] 2026-11-24 03:40:01.000 UTC [5] LOG:  statement: SELECT\n"
    pieces = b"".join(b"Nov 24 03:40:01 h postgres[5]: [1-%d] %s\n" % (k, b"x" * 900) for k in range(2, 1200))
    reader = SyslogReader(line_prefix="%m [%p] ", timezone="UTC", full_text=True)
    (line,) = reader.feed(head + pieces, 0.0)  # out at 1 MiB, the process still in the same message
    assert line.truncated and line.statement is not None and line.statement.startswith("SELECT" + "x" * 900)


def test_a_literal_newline_escape_in_a_split_piece_forges_no_entry() -> None:
    """With syslog_split_messages on (the default) PostgreSQL cuts a message at every newline
    first: a `#012` inside a piece is text a client wrote, not a line break (finding of a probe
    with a real PostgreSQL 15 and rsyslog)."""
    forged = "2026-11-25 07:00:00.000 UTC [4242] admin@secretdb/evil FATAL:  password authentication failed"
    text = (
        "Nov 25 06:57:14 vm postgres[16663]: [9-1] 2026-11-25 06:57:14.314 UTC [16663] postgres@postgres/probe"
        f" LOG:  statement: SELECT 'x#012{forged}' AS p1;\n"
    ).encode()
    (line,) = read("syslog", text, prefix="%m [%p] %q%u@%d/%a ", full_text=True)
    assert (line.pid, line.kind, line.user) == (16663, "statement", "postgres")
    assert line.statement == f"SELECT 'x#012{forged}' AS p1;"
    # a whole message (splitting off: `[seq]`) keeps its escaped newlines as lines
    whole = (
        b"Nov 24 03:40:02 h postgres[5]: [9] 2026-11-24 03:40:02.000 UTC [5] ERROR:  boom"
        b"#0122026-11-24 03:40:02.000 UTC [5] STATEMENT:  SELECT 1#012\n"
    )
    (err,) = read("syslog", whole, prefix="%m [%p] ", full_text=True)
    assert (err.message, err.statement) == ("boom", "SELECT 1")


def test_text_after_a_cut_without_whitespace_is_the_rest_of_its_line() -> None:
    """PostgreSQL cuts a line longer than 900 bytes at its last space or TAB, or at 900 bytes when
    there is none: the piece after such a cut continues the line, even if a client shaped it like
    a prefixed line."""
    head = "2026-11-25 06:57:14.314 UTC [77] LOG:  statement: SELECT"
    body = " '" + "A" * 898  # 900 bytes from its space: the cut falls inside the literal
    forged = "2026-11-25 07:00:00.000 UTC [4343] ERROR:  forged via cut' AS p2;"
    text = (
        f"Nov 25 06:57:14 vm postgres[77]: [10-1] {head}\n"
        f"Nov 25 06:57:14 vm postgres[77]: [10-2] {body}\n"
        f"Nov 25 06:57:14 vm postgres[77]: [10-3] {forged}\n"
    ).encode()
    (line,) = read("syslog", text, prefix="%m [%p] ", full_text=True)
    assert line.pid == 77 and line.statement == f"SELECT{body}{forged}"


def test_chunk_tags_without_sequence_numbers_are_learned_from_a_piece_that_opens_no_message() -> None:
    """syslog_sequence_numbers off, splitting on: every message is `[1]`, `[2]`... A `[2]` piece
    that is a STATEMENT line shows the tags are chunks; from then on messages are whole."""

    def message(t: str, n: int) -> str:
        return (
            f"Nov 25 06:57:{t} vm postgres[5]: [1] 2026-11-25 06:57:{t}.000 UTC [5] ERROR:  boom {n}\n"
            f"Nov 25 06:57:{t} vm postgres[5]: [2] 2026-11-25 06:57:{t}.000 UTC [5] STATEMENT:  SELECT {n}\n"
            f"Nov 25 06:57:{t} vm postgres[5]: [3] #011FROM t\n"
        )

    data = (message("01", 1) + message("02", 2) + message("03", 3)).encode()
    lines = read("syslog", data, prefix="%m [%p] ", full_text=True)
    # The first `[1]` is held until its `[2]` shows the tags are chunks: none comes apart.
    assert [(x.message, x.statement, x.unparsed) for x in lines] == [
        ("boom 1", "SELECT 1\nFROM t", False),
        ("boom 2", "SELECT 2\nFROM t", False),
        ("boom 3", "SELECT 3\nFROM t", False),
    ]


def test_a_first_message_tagged_1_waits_for_what_the_tags_are() -> None:
    """Before the file shows whether `[n]` are sequence numbers, a `[1]` message is held: a `[2]`
    piece of its process that cannot open a message joins it (its `#012` then stays text, as in
    every split piece); a `[2]` that opens a message leaves it whole (sequence numbers on)."""
    forged = "#0122026-11-25 06:57:01.000 UTC [5] FATAL:  forged"
    off = (
        f"Nov 25 06:57:01 vm postgres[5]: [1] 2026-11-25 06:57:01.000 UTC [5] ERROR:  boom {forged}\n"
        "Nov 25 06:57:01 vm postgres[9]: 2026-11-25 06:57:01.000 UTC [9] LOG:  other process\n"
        "Nov 25 06:57:01 vm postgres[5]: [2] 2026-11-25 06:57:01.000 UTC [5] STATEMENT:  SELECT 1\n"
    ).encode()
    boom, other = read("syslog", off, prefix="%m [%p] ", full_text=True)
    assert (boom.message, boom.statement, boom.pid) == (f"boom {forged}", "SELECT 1", 5)
    assert other.message == "other process"

    on = (
        b"Nov 25 06:57:01 vm postgres[5]: [1] 2026-11-25 06:57:01.000 UTC [5] LOG:  connection authorized: user=a\n"
        b"Nov 25 06:57:01 vm postgres[5]: [2] 2026-11-25 06:57:01.000 UTC [5] LOG:  statement: SELECT 1\n"
        b"Nov 25 06:57:01 vm postgres[6]: [1] 2026-11-25 06:57:01.000 UTC [6] LOG:  statement: SELECT 2\n"
    )
    lines = read("syslog", on, prefix="%m [%p] ", full_text=True)
    assert [(x.pid, x.kind, x.unparsed) for x in lines] == [
        (5, "connection", False),
        (5, "statement", False),
        (6, "statement", False),
    ]


def test_a_held_first_message_comes_out_when_its_process_is_quiet() -> None:
    reader = make_reader("syslog", line_prefix="%m [%p] ", timezone="UTC", full_text=True)
    line = b"Nov 25 06:57:01 vm postgres[5]: [1] 2026-11-25 06:57:01.000 UTC [5] LOG:  statement: SELECT 1\n"
    assert reader.feed(line, 0.0) == []
    (statement,) = reader.flush_idle(5.0)
    assert statement.statement == "SELECT 1"
