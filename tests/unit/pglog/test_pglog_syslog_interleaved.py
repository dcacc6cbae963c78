"""syslog messages of several processes interleaved: each entry once across a restart at the committed offset.

PostgreSQL sends each line of a message as a syslog message of its own (`[seq-chunk]`), so the
pieces of one process's message may have other processes' lines between them. A reader that
returns a message once its process starts the next one must still leave the file's offset before
that message while a message of another process that starts between its pieces is unreturned:
else a restart there (after a kill -9) reads the message's later pieces (its DETAIL) again, as
an entry of their own. These tests feed every prefix of such files, restart a fresh reader at
`committed_offset` on the rest, and check the entries against one uninterrupted read.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from envelopes import syslog_of
from pglog_helpers import fed_in_pieces, same

from forwarder.model import LogLine
from forwarder.pglog import make_reader, parse_stream
from forwarder.pglog.composed import HOLD_BACK_BYTES
from forwarder.pglog.syslog import SyslogReader

PREFIX = "%m [%p] "
WHEN = "2026-11-24 03:40:01.000 UTC"


def read(data: bytes, *, prefix: str = PREFIX) -> list[LogLine]:
    return list(parse_stream(make_reader("syslog", line_prefix=prefix, timezone="UTC", full_text=True), [data]))


def reader() -> SyslogReader:
    return SyslogReader(line_prefix=PREFIX, timezone="UTC", full_text=True)


def sys_line(pid: int, tag: str, text: str) -> bytes:
    return f"Nov 24 03:40:01 h postgres[{pid}]: [{tag}] {text}\n".encode()


def restart_everywhere(data: bytes, cuts: Iterable[int] | None = None) -> None:
    """At each cut: read that much (and the flushes a follower makes at the end of the data),
    then a new reader from the committed offset reads the rest: each entry once, none cut."""
    whole = same(read(data))
    for cut in range(len(data) + 1) if cuts is None else cuts:
        first = reader()
        got = first.feed(data[:cut], 0.0) + first.flush_written() + first.flush_idle(0.5)
        offset = first.committed_offset
        assert offset <= cut, (cut, offset)
        assert same(got) + same(read(data[offset:])) == whole, (cut, offset)


# The colleague's reproduction: pid 1's message 5 has a DETAIL piece after pid 2's message 3.
SCENARIO = (
    sys_line(1, "5-1", f"{WHEN} [1] ERROR:  boom")
    + sys_line(2, "3-1", f"{WHEN} [2] LOG:  checkpoint starting: time")
    + sys_line(1, "5-2", f"{WHEN} [1] DETAIL:  the detail")
    + sys_line(1, "6-1", f"{WHEN} [1] LOG:  statement: SELECT 1")
)


def test_a_detail_after_another_processs_line_is_not_stored_twice_after_a_kill() -> None:
    whole = read(SCENARIO)
    assert [(x.pid, x.message, x.detail, x.unparsed) for x in whole] == [
        (1, "boom", "the detail", False),
        (2, "checkpoint starting: time", None, False),
        (1, "statement", None, False),
    ]
    # The daemon stores what a read of the whole file returns, and is killed (-9) there.
    first = reader()
    stored = first.feed(SCENARIO, 0.0) + first.flush_written()
    offset = first.committed_offset
    rest = read(SCENARIO[offset:])
    assert not any("the detail" in x.message for x in rest), (offset, [x.message for x in rest])
    assert same(stored) + same(rest) == same(whole)
    # pid 1's message 5 waits for pid 2's message 3 (its process may still send lines of it),
    # which starts before its DETAIL; when pid 2 writes again both come out, in file order.
    assert stored == [] and offset == 0
    more = sys_line(2, "4-1", f"{WHEN} [2] LOG:  checkpoint complete")
    got = first.feed(more, 0.0) + first.flush_written()
    assert [(x.pid, x.message, x.detail) for x in got] == [
        (1, "boom", "the detail"),
        (2, "checkpoint starting: time", None),
    ]
    assert first.committed_offset == SCENARIO.rindex(b"Nov 24")  # pid 1's message 6 may still get lines
    restart_everywhere(SCENARIO)
    restart_everywhere(SCENARIO + more)


def three_processes() -> bytes:
    """Messages of three processes, interleaved line by line: multi-line messages (ERROR, DETAIL,
    HINT, STATEMENT), TAB-led continuation lines, a line cut into pieces at 900 bytes, another
    program's line and a line that is no syslog line."""
    texts = {
        11: (
            f'{WHEN} [11] ERROR:  duplicate key value violates unique constraint "t_pkey"\n'
            f"{WHEN} [11] DETAIL:  Key (id)=(1) already exists.\n"
            f"{WHEN} [11] STATEMENT:  INSERT INTO t\n"
            "\tVALUES (1);\n"
            f"{WHEN} [11] LOG:  duration: 1.000 ms\n"
        ),
        22: (
            f"{WHEN} [22] LOG:  statement: SELECT "
            + ", ".join(f"column_{i}" for i in range(90))
            + "\n\tFROM t\n\t WHERE x = 1\n"
            f"{WHEN} [22] LOG:  checkpoint starting: time\n"
        ),
        33: (
            f"{WHEN} [33] WARNING:  there is no transaction in progress\n"
            f"{WHEN} [33] HINT:  Start one first.\n"
            f'{WHEN} [33] ERROR:  syntax error at or near "SELEC"\n'
            f"{WHEN} [33] STATEMENT:  SELEC 1\n"
        ),
    }
    lines = {
        pid: syslog_of(text, pid=pid, when="Nov 24 03:40:01", host="h").splitlines(True) for pid, text in texts.items()
    }
    assert len(lines[22]) >= 5  # the long line comes in pieces
    out: list[bytes] = []
    while any(lines.values()):
        for pid in (11, 22, 33):
            if lines[pid]:
                out.append(lines[pid].pop(0))
        if len(out) == 6:
            out.append(b"Nov 24 03:40:01 h CRON[99]: (root) CMD (true)\n")
        if len(out) == 10:
            out.append(b"not a syslog line\n")
    return b"".join(out)


def test_three_processes_interleaved_restart_at_every_byte() -> None:
    data = three_processes()
    lines = read(data)
    assert [(x.pid, x.kind, x.unparsed) for x in lines] == [  # in the order the messages start
        (11, "error", False),
        (22, "statement", False),
        (33, "other", False),
        (33, "error", False),
        (None, "other", True),  # the line that is no syslog line
        (11, "slow_query", False),
        (22, "checkpoint", False),
    ]
    error = lines[0]
    assert error.detail == "Key (id)=(1) already exists." and error.statement == "INSERT INTO t\nVALUES (1);"
    assert (lines[2].message, lines[2].hint) == ("there is no transaction in progress", "Start one first.")
    assert lines[1].statement is not None and lines[1].statement.endswith("column_89\nFROM t\n WHERE x = 1")
    restart_everywhere(data)


def pid_log(rng: random.Random, pid: int) -> str:
    """A process's stderr log text: one-line messages, errors with their secondary lines,
    statements with TAB-led lines, long statements syslog cuts into pieces."""
    out: list[str] = []
    for i in range(rng.randint(1, 5)):
        head = f"{WHEN} [{pid}] "
        roll = rng.random()
        if roll < 0.3:
            out.append(head + f"LOG:  duration: {i}.000 ms")
        elif roll < 0.65:
            out.append(head + f'ERROR:  relation "t{pid}_{i}" does not exist')
            if rng.random() < 0.6:
                out.append(head + f"DETAIL:  some detail {i}")
            if rng.random() < 0.3:
                out.append(head + "HINT:  Create it first.")
            if rng.random() < 0.7:
                out.append(head + f"STATEMENT:  SELECT * FROM t{pid}_{i}")
                out += [f"\tWHERE id = {k}" for k in range(rng.randint(0, 2))]
        else:
            words = " ".join(f"c{pid}_{k}" for k in range(rng.randint(5, 400)))
            out.append(head + f"LOG:  statement: SELECT {words}")
            out += [f"\tFROM t{pid} x" for _ in range(rng.randint(0, 2))]
    return "\n".join(out) + "\n"


def interleaved(rng: random.Random) -> tuple[bytes, dict[int, str]]:
    """A syslog file of two or three processes' messages in a random interleaving of their
    syslog lines (another program's line now and then); and each process's log text."""
    texts = {pid: pid_log(rng, pid) for pid in rng.sample(range(100, 999), rng.randint(2, 3))}
    queues = {pid: syslog_of(t, pid=pid, when="Nov 24 03:40:01", host="h").splitlines(True) for pid, t in texts.items()}
    out: list[bytes] = []
    while any(queues.values()):
        pid = rng.choice([p for p, q in queues.items() if q])
        out.append(queues[pid].pop(0))
        if rng.random() < 0.05:
            out.append(b"Nov 24 03:40:01 h CRON[99]: (root) CMD (true)\n")
    return b"".join(out), texts


def test_random_interleavings_read_as_each_process_alone_and_each_entry_once_across_restarts() -> None:
    rng = random.Random(20261124)
    for _ in range(40):
        data, texts = interleaved(rng)
        lines = read(data)
        for pid, text in texts.items():
            alone = list(
                parse_stream(make_reader("stderr", line_prefix=PREFIX, timezone="UTC", full_text=True), [text.encode()])
            )
            assert same([x for x in lines if x.pid == pid]) == same(alone)
        assert not any(x.unparsed for x in lines)
        ends = [i + 1 for i, byte in enumerate(data) if byte == 0x0A]
        restart_everywhere(data, [0, *ends, *(end - 9 for end in ends)])
        # Fed in pieces: the same entries, and an offset that never goes back.
        assert same(fed_in_pieces(reader(), data, rng, 300)) == same(lines)


def test_a_message_whose_process_stays_quiet_holds_back_at_most_hold_back_bytes() -> None:
    """A message whose process never writes again (read faster than its quiet second passes)
    holds back the messages that start after it up to HOLD_BACK_BYTES; then it is taken as it is."""
    data = sys_line(1, "5-1", f"{WHEN} [1] ERROR:  boom")
    line = sys_line(2, "1", f"{WHEN} [2] LOG:  statement: SELECT '{'x' * 1000}'")
    count = HOLD_BACK_BYTES // len(line) + 100
    data += line * count
    r = reader()
    got = r.feed(data, 0.0)
    assert got[0].message == "boom" and all(x.pid == 2 for x in got[1:])
    assert len(got) == count + 1 and r.committed_offset == len(data) and not r.unfinished
    # Short of the bound, it waits.
    r = reader()
    assert r.feed(data[: len(data) - 200 * len(line)], 0.0) == [] and r.committed_offset == 0


def test_entries_held_back_behind_a_message_still_open_are_bounded() -> None:
    """Two long messages, each with a piece after another process's first line, are held back
    until that process's message is complete; past HOLD_BACK_BYTES of them, it is taken as it is."""
    piece = " " + "a" * 899
    count = HOLD_BACK_BYTES // 2 // len(piece) + 50
    data = (
        sys_line(1, "1-1", f"{WHEN} [1] LOG:  statement: SELECT 1")
        + sys_line(3, "1-1", f"{WHEN} [3] LOG:  statement: SELECT 3")
        + sys_line(2, "1-1", f"{WHEN} [2] LOG:  statement: SELECT 2")
        + b"".join(sys_line(1, f"1-{k}", piece) for k in range(2, count))
        + b"".join(sys_line(3, f"1-{k}", piece) for k in range(2, count))
        + sys_line(1, "2-1", f"{WHEN} [1] LOG:  checkpoint starting: time")
    )
    r = reader()
    assert r.feed(data, 0.0) == [] and r.committed_offset == 0  # pid 1's message waits for pid 2's
    last = sys_line(3, "2-1", f"{WHEN} [3] LOG:  checkpoint starting: time")
    got = r.feed(last, 0.0)
    assert [(x.pid, x.statement) for x in got] == [
        (1, "SELECT 1" + piece * (count - 2)),
        (3, "SELECT 3" + piece * (count - 2)),
        (2, "SELECT 2"),
    ]
    assert r.committed_offset == len(data) - len(sys_line(1, "2-1", f"{WHEN} [1] LOG:  checkpoint starting: time"))
    assert [x.pid for x in got + r.flush()] == [1, 3, 2, 1, 3]
