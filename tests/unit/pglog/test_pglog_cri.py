"""The cri format: a PostgreSQL 15 stderr log as a Kubernetes node writes a container's output.

The stderr fixture was recorded from a real PostgreSQL 15.18 (log_line_prefix '%m [%p] %q%u@%d ',
log_statement = 'all', log_min_duration_statement = 0), with a 40 kB statement, a multi-line
statement and an error. `cri_of` (envelopes.py) writes it the way containerd does.
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from envelopes import CRI_MAX_LINE as MAX_LINE
from envelopes import cri_of
from pglog_helpers import fed_in_pieces, same

from forwarder.model import LogLine, spec_fields
from forwarder.pglog import make_reader, parse_stream
from forwarder.pglog.composed import HOLD_BACK_BYTES

FIXTURES = Path(__file__).parent / "fixtures"
PREFIX = "%m [%p] %q%u@%d "
STDERR = (FIXTURES / "pg15_stderr_for_cri.log").read_bytes()


def fields(lines: list[LogLine]) -> list[dict[str, Any]]:
    return [spec_fields(x) for x in lines]


def read(fmt: str, data: bytes, *, prefix: str = PREFIX, full_text: bool = False) -> list[LogLine]:
    reader = make_reader(fmt, line_prefix=prefix, timezone="UTC", full_text=full_text)  # type: ignore[arg-type]
    return list(parse_stream(reader, [data]))


def test_the_fixture_has_lines_containerd_splits() -> None:
    cri = cri_of(STDERR)
    assert b" stderr P " in cri and max(len(x) for x in STDERR.split(b"\n")) > 2 * MAX_LINE


def test_cri_file_reads_as_the_plain_stderr_log() -> None:
    for full_text in (False, True):
        assert fields(read("cri", cri_of(STDERR), full_text=full_text)) == fields(
            read("stderr", STDERR, full_text=full_text)
        )
    lines = read("cri", cri_of(STDERR))
    assert len(lines) == 19 and not any(x.unparsed for x in lines)
    assert "Hunter4Secret" not in repr(fields(lines)) and "Hunter5Secret" not in repr(fields(lines))
    full = read("cri", cri_of(STDERR), full_text=True)
    assert any(len(x.statement or "") > 40_000 for x in full)


def test_restart_at_the_committed_offset_loses_and_repeats_nothing() -> None:
    data = cri_of(STDERR)
    whole = fields(read("cri", data))
    for cut in [*range(0, len(data), 1499), len(data)]:
        first = make_reader("cri", line_prefix=PREFIX, timezone="UTC", full_text=False)
        got = first.feed(data[:cut], 0.0) + first.flush_written()
        offset = first.committed_offset
        assert offset <= cut
        rest = read("cri", data[offset:])
        assert fields(got) + fields(rest) == whole, cut


def test_partial_lines_are_joined_per_stream_and_bytes_of_a_character_across_records() -> None:
    line = "2026-11-24 03:38:07.970 UTC [7] u@d LOG:  statement: SELECT 'äöü'".encode()
    cut = line.index("ö".encode()) + 1  # inside the two bytes of ö
    data = (
        b"2026-11-24T03:38:07.97Z stderr P " + line[:cut] + b"\n"
        b"2026-11-24T03:38:07.971Z stdout F 2026-11-24 03:38:07.971 UTC [8] LOG:  checkpoint starting: time\n"
        b"2026-11-24T03:38:07.972Z stderr F " + line[cut:] + b"\n"
    )
    first, second = read("cri", data, full_text=True)  # in the order they start in the file
    assert (first.pid, first.statement) == (7, "SELECT 'äöü'")
    assert (second.pid, second.kind) == (8, "checkpoint")


def test_without_time_in_the_prefix_the_record_time_is_the_entry_time() -> None:
    data = b"2026-11-24T03:38:07.123456789Z stderr F [7] LOG:  checkpoint starting: time\n"
    (line,) = read("cri", data, prefix="[%p] ")
    assert spec_fields(line)["time"] == "2026-11-24T03:38:07.123Z" and line.kind == "checkpoint"


def test_lines_that_are_not_cri_records_are_kept_unparsed() -> None:
    data = b"not a record\n" + cri_of(STDERR.split(b"\n")[0] + b"\n")
    bad, good = read("cri", data)
    assert bad.unparsed and not good.unparsed and good.kind == "server"


def test_forwarder_parse_reads_cri() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "forwarder", "parse", "--format", "cri", "--prefix", PREFIX],
        input=cri_of(STDERR),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0 and out.stderr == b"", out.stderr
    assert len(out.stdout.splitlines()) == 19


# -- streams that interleave: each entry once across a restart at the committed offset ------------

T = b"2026-11-24T03:38:07.5Z "
WHEN = b"2026-11-24 03:38:07.500 UTC"


def rec(stream: str, tag: str, text: bytes) -> bytes:
    return T + stream.encode() + b" " + tag.encode() + b" " + text + b"\n"


# The tester's file: a stderr line in partial records with a stdout line between them.
SPLIT_AROUND_STDOUT = (
    rec("stderr", "F", WHEN + b" [7] LOG:  first")
    + rec("stderr", "P", WHEN + b" [7] LOG:  statement: select 'aaa")
    + rec("stdout", "F", b"hello-from-stdout")
    + rec("stderr", "F", b"bbb'")
)


def restart_everywhere(data: bytes, *, flushed: bool, cuts: Iterable[int] | None = None) -> None:
    """At every byte: read that much (with `flushed`, the flushes a follower makes at the end of the
    data and after a long quiet too: for data whose entries are one record each), then a new
    reader from the committed offset reads the rest: each entry once."""
    whole = same(read("cri", data, prefix="%m [%p] ", full_text=True))
    for cut in range(len(data) + 1) if cuts is None else cuts:
        first = make_reader("cri", line_prefix="%m [%p] ", timezone="UTC", full_text=True)
        got = first.feed(data[:cut], 0.0)
        if flushed:
            got += first.flush_written() + first.flush_idle(60.0)
        offset = first.committed_offset
        assert offset <= cut
        rest = read("cri", data[offset:], prefix="%m [%p] ", full_text=True)
        assert same(got) + same(rest) == whole, (cut, offset)


def test_an_entry_of_one_stream_returned_while_a_line_of_the_other_is_in_pieces_is_not_read_again() -> None:
    """The committed offset cannot be both before the held partial record and after the stdout
    entry that follows it: that entry is held back until the partial line is whole."""
    lines = read("cri", SPLIT_AROUND_STDOUT, prefix="%m [%p] ", full_text=True)
    assert [(x.message, x.statement) for x in lines] == [
        ("first", None),
        ("statement", "select 'aaabbb'"),
        ("hello-from-stdout", None),
    ]
    restart_everywhere(SPLIT_AROUND_STDOUT, flushed=False)
    restart_everywhere(SPLIT_AROUND_STDOUT, flushed=True)  # the stdout entry is complete then, and still held


def test_the_other_streams_entries_wait_for_the_partial_line_and_then_come_out() -> None:
    reader = make_reader("cri", line_prefix="%m [%p] ", timezone="UTC", full_text=True)
    head = SPLIT_AROUND_STDOUT.rsplit(T, 1)[0]  # all but the F record that ends the stderr line
    got = reader.feed(head, 0.0) + reader.flush_written() + reader.flush_idle(60.0)
    assert [x.message for x in got] == ["first"]
    assert reader.committed_offset == head.index(b"stderr P") - len(T)
    got = reader.feed(SPLIT_AROUND_STDOUT[len(head) :], 61.0) + reader.flush_written()
    assert [(x.message, x.statement) for x in got] == [("statement", "select 'aaabbb'"), ("hello-from-stdout", None)]
    assert reader.committed_offset == len(SPLIT_AROUND_STDOUT)


def test_a_stdout_line_between_the_lines_of_a_stderr_entry_neither_ends_nor_joins_it() -> None:
    stderr = [
        WHEN + b' [7] ERROR:  duplicate key value violates unique constraint "t_pkey"',
        WHEN + b" [7] DETAIL:  Key (id)=(1) already exists.",
        WHEN + b" [7] STATEMENT:  INSERT INTO t",
        b"\tVALUES (1);",
        WHEN + b" [7] LOG:  checkpoint starting: time",
    ]
    data = (
        rec("stderr", "F", stderr[0])
        + rec("stdout", "F", b"archive: pushed 000000010000000000000001")
        + rec("stderr", "F", stderr[1])
        + rec("stderr", "F", stderr[2])
        + rec("stdout", "F", b"\tan indented stdout line")
        + rec("stderr", "F", stderr[3])
        + rec("stderr", "F", stderr[4])
    )
    lines = read("cri", data, prefix="%m [%p] ", full_text=True)
    error = next(x for x in lines if x.pid == 7 and x.message.startswith("duplicate key"))
    assert error.detail == "Key (id)=(1) already exists." and error.statement == "INSERT INTO t\nVALUES (1);"
    alone = read("cri", b"".join(rec("stderr", "F", x) for x in stderr), prefix="%m [%p] ", full_text=True)
    assert fields([x for x in lines if x.pid == 7]) == fields(alone)  # as if stdout were not there
    # stdout's lines are a log of their own: its TAB-led line continues its line above
    assert [x.message for x in lines if x.unparsed] == [
        "archive: pushed 000000010000000000000001\nan indented stdout line"
    ]
    restart_everywhere(data, flushed=False)


def interleaved(rng: random.Random) -> tuple[bytes, list[bytes], list[bytes]]:
    """A CRI file of a stderr log (entries of several lines, lines cut into partial records) and
    stdout lines (some cut too) in a random interleaving; and the two streams' lines apart."""
    stderr: list[bytes] = []
    for i in range(rng.randint(2, 6)):
        stderr.append(WHEN + b' [%d] ERROR:  relation "t%d" does not exist' % (i, i) + b"x" * rng.randint(0, 60))
        if rng.random() < 0.5:
            stderr.append(WHEN + b" [%d] DETAIL:  some detail %d" % (i, i))
        if rng.random() < 0.7:
            stderr.append(WHEN + b" [%d] STATEMENT:  SELECT * FROM t%d" % (i, i))
            stderr += [b"\tWHERE id = %d" % i] * rng.randint(0, 2)
    stdout = [b"out %d " % i + b"y" * rng.randint(0, 50) for i in range(rng.randint(0, 6))]

    def records(stream: str, lines: list[bytes]) -> list[bytes]:
        out = []
        for line in lines:
            pieces = []
            while len(line) > 30 and rng.random() < 0.6:
                cut = rng.randint(1, len(line) - 1)
                pieces.append(line[:cut])
                line = line[cut:]
            out += [rec(stream, "P", p) for p in pieces] + [rec(stream, "F", line)]
        return out

    err, out = records("stderr", stderr), records("stdout", stdout)
    merged = []
    while err or out:
        merged.append((err if err and (not out or rng.random() < 0.6) else out).pop(0))
    return b"".join(merged), stderr, stdout


def test_interleaved_streams_read_as_each_alone_and_each_entry_once_across_restarts() -> None:
    rng = random.Random(20261124)
    for _ in range(40):
        data, stderr, stdout = interleaved(rng)
        lines = read("cri", data, prefix="%m [%p] ", full_text=True)
        alone = read("cri", b"".join(rec("stderr", "F", x) for x in stderr), prefix="%m [%p] ", full_text=True)
        assert fields([x for x in lines if not x.unparsed]) == fields(alone)
        assert [x.message for x in lines if x.unparsed] == [x.decode() for x in stdout]
        ends = [i + 1 for i, byte in enumerate(data) if byte == 0x0A]
        restart_everywhere(data, flushed=False, cuts=[0, *ends, *(end - 9 for end in ends)])
        # Fed in pieces: the same entries, and an offset that never goes back.
        reader = make_reader("cri", line_prefix="%m [%p] ", timezone="UTC", full_text=True)
        assert same(fed_in_pieces(reader, data, rng, 200)) == same(lines)


def test_a_stdout_line_left_without_its_end_holds_stderr_back_for_a_second_only() -> None:
    """Another program's line without a newline (conmon writes each read as a record; containerd
    the rest of a stream that ends) may never be finished: after a quiet second it is a line."""
    reader = make_reader("cri", line_prefix="%m [%p] ", timezone="UTC", full_text=True)
    data = rec("stdout", "P", b"Waiting for the primary...") + rec(
        "stderr", "F", WHEN + b" [7] LOG:  checkpoint starting: time"
    )
    assert reader.feed(data, 0.0) + reader.flush_written() + reader.flush_idle(0.5) == []
    assert reader.committed_offset == 0 and reader.unfinished
    got = reader.flush_idle(1.0)
    assert [(x.message, x.unparsed) for x in got] == [
        ("Waiting for the primary...", True),
        ("checkpoint starting: time", False),
    ]
    assert reader.committed_offset == len(data) and not reader.unfinished


def test_a_stderr_line_in_pieces_waits_for_its_end_however_long() -> None:
    """PostgreSQL ends each message with a newline: the rest of its line comes (split only by the
    runtime's buffer), so the pieces are never cut by time."""
    reader = make_reader("cri", line_prefix="%m [%p] ", timezone="UTC", full_text=True)
    head = rec("stderr", "P", WHEN + b" [7] LOG:  statement: select 'aaa")
    assert reader.feed(head, 0.0) + reader.flush_written() + reader.flush_idle(3600.0) == []
    assert reader.unfinished and reader.committed_offset == 0
    got = reader.feed(rec("stderr", "F", b"bbb'"), 3601.0) + reader.flush_written()
    assert [x.statement for x in got] == ["select 'aaabbb'"] and not reader.unfinished


def test_entries_held_back_are_bounded() -> None:
    """A line in pieces whose end never comes (a runtime killed mid-line) holds back the other
    stream's entries up to HOLD_BACK_BYTES; then it is taken as a line as it is."""
    reader = make_reader("cri", line_prefix="%m [%p] ", timezone="UTC", full_text=True)
    data = rec("stderr", "P", WHEN + b" [7] LOG:  statement: select 'aaa")
    line = b"x" * 1000
    data += b"".join(rec("stdout", "F", line) for _ in range(HOLD_BACK_BYTES // len(line) + 10))
    got = reader.feed(data, 0.0)
    assert got[0].statement == "select 'aaa" and len(got) > HOLD_BACK_BYTES // len(line)
    assert all(x.message == line.decode() for x in got[1:])
    assert not reader.unfinished and reader.committed_offset > len(data) - 20 * len(line)
