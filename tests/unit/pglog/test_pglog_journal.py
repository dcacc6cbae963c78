"""The journal format: `journalctl -o json` output of a PostgreSQL 15 that logged to journald.

pg15_journal.json and pg15_journal_short_prefix.json were recorded from a real PostgreSQL 15.18
started under `systemd-cat -t postgres` (its stderr a journal stream, as under a systemd unit,
logging_collector = off) with a private systemd-journald 252, then read back with
`journalctl -o json --output-fields=MESSAGE,_PID,SYSLOG_IDENTIFIER SYSLOG_IDENTIFIER=postgres`.
The first server's prefix was `%m [%p] %q%u@%d/%a `, the second's `%q%u@%d ` (no time, no pid).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from pglog_helpers import parse_text

from forwarder.model import LogLine
from forwarder.pglog import make_reader, parse_stream
from forwarder.pglog.journal import JournalReader
from tests.daemonproc import FORWARDER

HERE = Path(__file__).parent
RECORDED = (HERE / "pg15_journal.json").read_bytes()
SHORT = (HERE / "pg15_journal_short_prefix.json").read_bytes()
PREFIX = "%m [%p] %q%u@%d/%a "


def records(data: bytes) -> list[dict[str, object]]:
    return [json.loads(line) for line in data.splitlines()]


def journal(data: bytes, *, prefix: str = PREFIX, full_text: bool = False, chunk: int = 0) -> list[LogLine]:
    reader = make_reader("journal", line_prefix=prefix, timezone="UTC", full_text=full_text)
    chunks = [data[i : i + chunk] for i in range(0, len(data), chunk)] if chunk else [data]
    return list(parse_stream(reader, chunks))


def as_stderr(data: bytes) -> str:
    """The same server's log as a stderr file would hold it: the messages, one a line."""
    return "".join(f"{r['MESSAGE']}\n" for r in records(data))


def test_the_journal_of_a_real_server_reads_as_its_stderr_output_would() -> None:
    lines = journal(RECORDED)
    assert lines == parse_text(as_stderr(RECORDED), prefix=PREFIX)
    assert not any(line.unparsed for line in lines)
    by_message = {line.message: line for line in lines}
    dup = by_message['duplicate key value violates unique constraint "t_pkey"']
    assert dup.detail is not None and "already exists" in dup.detail and "(1)" not in dup.detail  # joined, value gone
    assert dup.statement == "INSERT INTO t VALUES ($1);"
    assert dup.user == "postgres" and dup.application == "psql"
    # A statement over three lines (TAB-led continuations, three records) is one entry.
    multi = [line for line in lines if line.statement and "12345" not in line.statement and "FROM t" in line.statement]
    assert len(multi) == 1 and "WHERE id = $1" in multi[0].statement
    assert not any("secret" in (line.statement or "") + line.message for line in lines)


def test_entries_do_not_depend_on_where_the_input_is_cut() -> None:
    whole = journal(RECORDED)
    for chunk in (1, 7, 100, 333):
        assert journal(RECORDED, chunk=chunk) == whole


def test_a_prefix_without_time_and_pid_takes_them_from_the_journal() -> None:
    lines = journal(SHORT, prefix="%q%u@%d ")
    recs = records(SHORT)
    assert len(lines) == len(journal(RECORDED))
    assert not any(line.unparsed for line in lines)
    first = recs[0]
    assert lines[0].message.startswith("starting PostgreSQL 15")
    realtime = int(str(first["__REALTIME_TIMESTAMP"]))
    assert lines[0].time_us == realtime // 1000 * 1000  # to the millisecond, like %m
    assert lines[0].pid == int(str(first["_PID"]))
    connected = next(line for line in lines if line.message.startswith("connection authorized"))
    assert connected.user == "postgres" and connected.database == "postgres"
    # The time of an entry is its first record's, not its continuations'.
    dup_at = next(i for i, r in enumerate(recs) if "duplicate key" in str(r["MESSAGE"]))
    dup = next(line for line in lines if line.message.startswith("duplicate key"))
    assert dup.time_us == int(str(recs[dup_at]["__REALTIME_TIMESTAMP"])) // 1000 * 1000
    assert dup.detail is not None and dup.statement == "INSERT INTO t VALUES ($1);"


def test_a_message_that_is_not_utf8_is_an_array_of_bytes_its_stray_bytes_read_as_latin1() -> None:
    rec = records(RECORDED)[6]  # ERROR:  division by zero
    raw = str(rec["MESSAGE"]).replace("division", "divi\udcffsion").encode("utf-8", "surrogateescape")
    rec["MESSAGE"] = list(raw)
    (line,) = journal(json.dumps(rec).encode() + b"\n", full_text=True)
    assert line.message == "divi\xffsion by zero" and line.severity == "ERROR" and not line.unparsed


def test_a_line_over_journalds_line_max_is_two_records_and_its_rest_an_entry_of_its_own() -> None:
    """journald (LineMax, 48 KiB by default) stores a longer line as records of that size: the rest
    has no prefix and reads as kind `other` (docs/parsing.md: raise LineMax to keep it whole)."""
    rec = records(RECORDED)[14]  # LOG:  duration: ... statement: SELECT * (and two TAB-led records)
    line = str(rec["MESSAGE"]).replace("SELECT *", "SELECT '" + "x" * 60_000 + "'")
    line_max = 48 * 1024
    first, rest = dict(rec), dict(rec)
    first["MESSAGE"], rest["MESSAGE"] = line[:line_max], line[line_max:]
    data = (json.dumps(first) + "\n" + json.dumps(rest) + "\n").encode()
    head, tail = journal(data, full_text=True)
    assert not head.unparsed and head.statement is not None and head.statement.endswith("x")
    assert tail.unparsed and tail.message == line[line_max:]


def test_records_of_other_identifiers_are_skipped_when_a_filter_is_given() -> None:
    other = json.dumps(
        {
            "MESSAGE": "Started PostgreSQL Cluster 15-main.",
            "SYSLOG_IDENTIFIER": "systemd",
            "_PID": "1",
            "__REALTIME_TIMESTAMP": "1795491112050741",
            "__CURSOR": "s=1;i=1",
        }
    )
    data = other.encode() + b"\n" + RECORDED + other.encode() + b"\n"
    reader = JournalReader(line_prefix=PREFIX, timezone="UTC", full_text=False, identifiers=["postgres"])
    assert list(parse_stream(reader, [data])) == journal(RECORDED)
    assert reader.committed_offset == len(data)
    unfiltered = journal(data)
    assert unfiltered[0].unparsed and unfiltered[0].kind == "other"  # without a filter: reported as unmatched


def test_a_line_that_is_not_json_is_kept_and_reported_as_unmatched() -> None:
    lines = journal(b"-- No entries --\n" + RECORDED)
    assert lines[0].unparsed and lines[0].kind == "other"
    assert lines[1:] == journal(RECORDED)


def test_the_committed_offset_stays_at_the_first_record_of_the_pending_entry() -> None:
    """A restart from `committed_offset` (or from the cursor of the record before it) loses nothing."""
    data = RECORDED
    ends = [i + 1 for i, b in enumerate(data) if b == ord("\n")]
    recs = records(data)
    reader = make_reader("journal", line_prefix=PREFIX, timezone="UTC", full_text=False)
    dup_at = next(i for i, r in enumerate(recs) if "duplicate key" in str(r["MESSAGE"]))
    # Up to and including the DETAIL line: the duplicate key entry is pending, what came before is out.
    out = reader.feed(data[: ends[dup_at + 1]], 0.0)
    assert reader.committed_offset == ends[dup_at - 1]
    assert out[-1].message.startswith("duration:")
    rest = journal(data[reader.committed_offset :])
    assert out + rest == journal(data)
    # Quiet for long enough: the pending entry is out, and the offset is past its records.
    idle = reader.flush_idle(10.0)
    assert [line.message for line in idle] == ['duplicate key value violates unique constraint "t_pkey"']
    assert reader.committed_offset == ends[dup_at + 1]


def test_forwarder_parse_reads_journal_output_and_reports_what_it_could_not_parse() -> None:
    out = subprocess.run(
        [*FORWARDER, "parse", "--format", "journal", "--prefix", PREFIX],
        input=b"not json\n" + RECORDED,
        capture_output=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    printed = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(printed) == len(journal(RECORDED)) + 1
    assert printed[7]["message"] == "division by zero"
    assert b"1 of" in out.stderr and b"did not match" in out.stderr
    other = b'{"MESSAGE":"Started PostgreSQL.","SYSLOG_IDENTIFIER":"systemd","_PID":"1","__CURSOR":"s=1"}\n'
    only = subprocess.run(
        [*FORWARDER, "parse", "--format", "journal", "--prefix", PREFIX, "--syslog-ident", "postgres"],
        input=other + RECORDED,
        capture_output=True,
        timeout=60,
    )
    assert only.returncode == 0
    assert only.stderr == b"forwarder parse: skipped 1 lines of other programs (not 'postgres')\n"
    assert len(only.stdout.splitlines()) == len(journal(RECORDED))
