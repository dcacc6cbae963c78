"""PostgreSQL's `log_destination = 'syslog'` as written to a file by rsyslog or syslog-ng.

A line of such a file (rsyslog's default `RSYSLOG_TraditionalFileFormat`, syslog-ng's default, or
`RSYSLOG_FileFormat`):

    Nov 24 03:40:01 host postgres[1234]: [5-1] 2026-11-24 03:40:01.123 UTC [1234] LOG:  ...
    2026-11-24T03:40:01.123456+00:00 host postgres[1234]: [5-2] ... DETAIL:  ...

What PostgreSQL sends (elog.c write_syslog): the stderr text of one message (the primary line,
its DETAIL/HINT/CONTEXT/STATEMENT lines, each with `log_line_prefix`, and TAB-led continuation
lines), one syslog message per line. With `syslog_sequence_numbers` on (the default) each line is
tagged `[seq-chunk]`, `seq` counting the process's messages and `chunk` the pieces of this one;
a message that is one short line is tagged `[seq]`. With `syslog_split_messages` on (the default)
a line longer than PG_SYSLOG_LIMIT (900 bytes) is cut into pieces, at a space or TAB when there
is one (the whitespace then opens the next piece), each its own chunk: pieces of one line are
joined back without a newline. With sequence numbers off the tags are `[chunk]`, and a one-line
message has none. With splitting off, a message is one syslog message whose newlines rsyslog
shows as `#012`.

How pieces are put back together:
- Lines of one message share the process and `seq`; the message is complete when the process
  starts another message, or after IDLE_FLUSH_SECONDS without a piece of it (lines of other
  processes may come in between), or at the end of the file, or when more than HOLD_BACK_BYTES
  of messages that start after it wait for it (a process that never writes again, in a file read
  faster than its quiet second passes).
- Messages are fed to the stderr reader, one entry each, in the order they start. The file's
  offset (`committed_offset`) is the start of the first message not returned, so an entry is
  returned only once no message still held starts before its last line (`composed`'s hold-back,
  told that line with `last=`): a restart at the offset after a kill -9 reads every message not
  returned whole, and no line of one returned (its DETAIL after another process's line would
  come out again, as an entry of its own).
- A piece starts a new line of the message when it starts with a TAB (a continuation line) or
  with the server's prefix and a severity label (DETAIL, STATEMENT...); any other piece continues
  the line above. A TAB-led piece still continues the line above when PostgreSQL may have cut
  there: the piece above is 900 bytes long, or the TAB is the last whitespace within 900 bytes of
  the piece above's start (PostgreSQL cuts at the last whitespace). Any piece continues the line
  after a piece PostgreSQL cut at the limit for want of whitespace (900 bytes, less up to 3 for a
  character's start, no whitespace after its first byte), however it looks.
- Whether the file has sequence numbers is learned from it: a line of PostgreSQL's without a tag,
  one with `[seq-chunk]`, or a `[n]` piece that cannot open a message (`_opens_no_message`)
  settles it; until then tags are read as sequence numbers (the default), and a message tagged
  `[1]` is held as a message still coming, so that the `[2]` piece that settles it joins it.
- rsyslog writes control characters as `#` and three octal digits (`#011` is a TAB): undone for
  the control characters only (a literal `#011` in a message cannot be told apart), and in a split
  piece (a chunk number) not for `#012`/`#015`: PostgreSQL cut the message at each newline first,
  so those are a client's text (see `unescape`).

Lines of other programs (another syslog tag than `ident`, PostgreSQL's `syslog_ident`) are
skipped and counted in `lines_other`; lines that are not syslog lines at all are kept as entries
that did not parse (as stderr's unrecognized lines are).

Time: the prefix's time when it has one (`%m`, `%t`, `%n`), else the syslog time. An RFC 3339
time (`RSYSLOG_FileFormat`) is exact. A traditional `Nov 24 03:40:01` has neither year nor zone:
it is read in `timezone` (the syslog daemon writes its host's local time, normally the server's
`log_timezone`), in the year that puts it at most 31 days after the time of reading (a December
line read in January is of the previous year).
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Final

from forwarder.model import LogLine
from forwarder.pglog.composed import HOLD_BACK_BYTES, ComposedReader, parse_rfc3339
from forwarder.pglog.reader import IDLE_FLUSH_SECONDS, MAX_ENTRY_BYTES, TEXT_ERRORS
from forwarder.pglog.stderr import SECONDARY_WORDS
from forwarder.pglog.times import load_zone

PG_SYSLOG_LIMIT: Final = 900  # elog.c: the longest piece of a line PostgreSQL hands to syslog()
_MAX_CHAR_BYTES: Final = 3  # a cut at the limit falls on a character's start: up to 3 bytes short

_LINE: Final = re.compile(
    r"(?:(?P<bsd>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d)"
    r"|(?P<iso>\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:[Zz]|[-+]\d\d:\d\d)))"
    r" \S+ (?P<tag>[^\s\[:]{1,64})(?:\[(?P<pid>\d{1,10})\])?: ?"
)
_MARKER: Final = re.compile(r"\[(\d{1,20})(?:-(\d{1,10}))?\] ")
_OCTAL: Final = re.compile(r"#([0-3][0-7][0-7])")
_WHITESPACE: Final = re.compile(rb"[ \t\n\v\f\r]")
_MONTHS: Final = {
    m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)
}
_FUTURE_SLACK_US: Final = 31 * 86_400 * 1_000_000


def _control(m: re.Match[str]) -> str:
    code = int(m.group(1), 8)
    return chr(code) if code < 0o40 or code == 0o177 else m.group(0)


def _control_in_a_line(m: re.Match[str]) -> str:
    code = int(m.group(1), 8)
    return m.group(0) if code in (0o12, 0o15) else _control(m)


def unescape(text: str, *, newlines: bool = True) -> str:
    """Undo rsyslog's `#ooo` escaping of control characters (parser.escapeControlCharactersOnReceive).

    `newlines=False` for a piece PostgreSQL split off a line (syslog_split_messages): it cut the
    message at every newline first, so such a piece holds none, and a `#012` or `#015` in it is
    text a client wrote (`SELECT 'x#0122026-... FATAL:  ...'`), kept as it is: read as a newline
    it would start a line of its own, an entry any client could forge.
    """
    if "#" not in text:
        return text
    return _OCTAL.sub(_control if newlines else _control_in_a_line, text)


@dataclass(slots=True)
class _Message:
    """The lines of one PostgreSQL message read so far, for one process."""

    seq: int | None
    start: int  # where its first syslog line starts in the file
    time_us: int | None
    last_at: float  # monotonic time its last piece was read
    pid: int | None  # None: not a syslog line, fed as it is
    lines: list[list[str]] = field(default_factory=list)  # each line as its pieces
    last_piece: str = ""
    size: int = 0  # characters so far
    done: bool = False  # all its lines are in
    last: int = 0  # where its last syslog line starts, when it has several (0: it has one)
    # A first line tagged `[1]` read before the file showed whether tags are sequence numbers:
    # its text still escaped, to be read as a piece (`unescape(newlines=False)`) if a `[2]` piece
    # of the same process settles that they are chunks.
    undecided: str | None = None


class SyslogReader(ComposedReader):
    """`EntryReader` for a syslog file holding PostgreSQL's syslog output (see the module docstring)."""

    def __init__(
        self,
        *,
        line_prefix: str,
        timezone: str,
        full_text: bool,
        ident: str = "postgres",
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(line_prefix=line_prefix, timezone=timezone, full_text=full_text, envelope_pid=True)
        self.ident = ident
        self._zone: tzinfo = load_zone(timezone) or UTC
        self._wall_clock = wall_clock
        self._held: dict[int, _Message] = {}  # per process: its message whose lines still come
        self._queue: deque[_Message] = deque()  # every message not fed yet, in the order they start
        self._queued = 0  # characters of the messages in `_queue`
        self._draining = False  # `_drain` is feeding: no message may be fed meanwhile
        self._numbered = True  # syslog_sequence_numbers (see the module docstring)
        self._settled = False  # the file has shown whether its tags are sequence numbers

    # -- EntryReader ------------------------------------------------------------------------------

    def feed(self, data: bytes, now: float) -> list[LogLine]:
        out = super().feed(data, now)
        self._out = out
        self._complete_quiet(now)
        self._sync_matched()
        return out

    # -- ComposedReader ---------------------------------------------------------------------------

    def _held_start(self) -> int | None:
        return self._queue[0].start if self._queue else None

    def _flush_held(self) -> None:
        for message in self._queue:
            message.done = True
        self._held.clear()
        self._drain()

    def _idle_held(self, now: float) -> None:
        self._complete_quiet(now)

    def _give_up_held(self) -> bool:
        # Not while `_drain` feeds a message (it calls back here through `_release`): that message
        # may still be pending in the inner reader, and the next one fed would join it. `_drain`
        # releases (and so gives up) once its loop is done.
        if self._draining or not self._queue:
            return False
        self._complete(self._queue[0])
        self._drain()
        return True

    def _line(self, raw: bytes, start: int, cut: bool) -> None:
        text = raw.decode("utf-8", TEXT_ERRORS)
        if text[-1:] == "\r":
            text = text[:-1]
        if not text:
            return
        m = _LINE.match(text)
        if m is None:
            # Not a syslog line: kept as an entry that did not parse, never dropped.
            self._queue.append(
                _Message(None, start, None, self._now, None, [[unescape(text)]], size=len(text), done=True)
            )
            self._queued += len(text)
            self._drain()
            return
        if m.group("tag") != self.ident:
            self.lines_other += 1
            return
        pid_text = m.group("pid")
        pid = int(pid_text) if pid_text else 0
        time_us: int | None = None
        if self._add_time:  # the prefix has no time of its own: the syslog header's is the entry's
            iso = m.group("iso")
            time_us = parse_rfc3339(iso) if iso else self._bsd_time(m.group("bsd"))
        msg = text[m.end() :]  # still escaped: whether a #012 is a newline depends on the tag
        seq: int | None = None
        chunk: int | None = None
        mk = _MARKER.match(msg)
        if mk is not None:
            rest = msg[mk.end() :]
            if mk.group(2) is None and not self._plain_match(rest) and self._plain_match(msg):
                mk = None  # `[1234] LOG:  ...`: the prefix's own brackets (`[%p] `), no tag
            else:
                msg = rest
        undecided = False
        if mk is None:
            self._numbered, self._settled = False, True
        elif mk.group(2) is not None:
            self._numbered, self._settled = True, True
            seq, chunk = int(mk.group(1)), int(mk.group(2))
        elif self._numbered and not self._opens_no_message(msg):
            seq = int(mk.group(1))
            # `[1]` opens a process's first message with sequence numbers on, and every message
            # of more than one piece with them off: until the file settles which, it is held, so
            # that a `[2]` piece of the same process can still join it.
            undecided = seq == 1 and not self._settled
        else:
            # `[n]` on a piece that cannot open a message (a TAB, a DETAIL/STATEMENT line, text
            # cut off a line): PostgreSQL writes `[seq]` only on a whole message (splitting off),
            # so these are pieces, `[chunk]`: sequence numbers are off and splitting is on.
            self._numbered, self._settled = False, True
            chunk = int(mk.group(1))
        escaped = msg
        # Split pieces (a chunk number) hold no newline of PostgreSQL's (see `unescape`).
        msg = unescape(msg, newlines=chunk is None)
        held = self._held.get(pid)
        if held is not None and (chunk is None or chunk == 1 or held.seq != seq):
            del self._held[pid]
            held.done = True
            held = None
        if held is not None:  # a later piece of the message its process is sending
            held.last_at = self._now
            held.last = start
            if held.undecided is not None:  # its `[1]` was the first piece: read it as one
                held.lines[0][0] = held.last_piece = unescape(held.undecided, newlines=False)
                held.undecided = None
            if self._continues(held.last_piece, msg):
                held.lines[-1].append(msg)
            else:
                held.lines.append([msg])
            held.last_piece = msg
            held.size += len(msg)
            self._queued += len(msg)
            if held.size > MAX_ENTRY_BYTES:  # not PostgreSQL's (its entries are cut at 1 MiB anyway): let it go
                del self._held[pid]
                held.done = True
                self._drain()
            elif self._queued - self._queue[0].size > HOLD_BACK_BYTES:
                self._drain()  # too much waits behind the first message still held: see `_drain`
            return
        if undecided:
            message = _Message(None, start, time_us, self._now, pid, [[msg]], msg, len(msg), undecided=escaped)
            self._held[pid] = message
        elif chunk is None:  # a message of one line
            message = _Message(seq, start, time_us, self._now, pid, [[msg]], size=len(msg), done=True)
        else:
            self._held[pid] = message = _Message(seq, start, time_us, self._now, pid, [[msg]], msg, len(msg))
        self._queue.append(message)
        self._queued += len(msg)
        self._drain()

    # -- internals --------------------------------------------------------------------------------

    def _continues(self, above: str, piece: str) -> bool:
        """Whether `piece` continues the line of the piece `above` (see the module docstring)."""
        n_above = len(above.encode())
        if piece[:1] == "\t":
            if n_above >= PG_SYSLOG_LIMIT:
                return True
            data = piece.encode()
            room = PG_SYSLOG_LIMIT - n_above
            return len(data) > room and _WHITESPACE.search(data, 1, room) is None
        if n_above >= PG_SYSLOG_LIMIT - _MAX_CHAR_BYTES and _WHITESPACE.search(above.encode(), 1) is None:
            # PostgreSQL cuts a line at its last space or TAB within the limit, or, with none, at
            # the limit (pg_mbcliplen: on a character's start, up to 3 bytes short). `above` is such
            # a cut: whatever follows is the rest of its line, even text shaped like a prefix (a
            # client can aim a literal at that cut to forge an entry).
            return True
        return self._plain_match(piece) is None

    def _opens_no_message(self, piece: str) -> bool:
        """`piece` (escaped, after its tag) cannot be the first line of a message: it is TAB-led,
        does not start with the prefix, or starts with a secondary line's label."""
        if piece[:4] == "#011":
            return True
        m = self._plain_match(piece)
        return m is None or m.group(self._plain_severity + 1) in SECONDARY_WORDS

    def _complete(self, message: _Message) -> None:
        """Take `message` as complete: a later piece of its process starts a message of its own."""
        message.done = True
        pid = message.pid
        if pid is not None and self._held.get(pid) is message:
            del self._held[pid]

    def _drain(self) -> None:
        """Feed the complete messages at the head of the queue, each one entry.

        Messages are fed in the order they start in the file, so every byte before the first
        message still held is fed and none after it is. A message fed is one entry from its first
        to its last syslog line (`last=`): when another process's message still held starts
        between them, the composed reader holds the entry back until that one is fed, so that
        `committed_offset` (before that message) stays before the entry's first line too (see
        the module docstring). What waits behind a message still held is bounded: past
        HOLD_BACK_BYTES it is taken as it is.
        """
        if self._draining:
            return
        self._draining = True
        try:
            queue = self._queue
            while queue:
                message = queue[0]
                if not message.done:
                    if self._queued - message.size <= HOLD_BACK_BYTES:
                        break
                    self._complete(message)
                queue.popleft()
                self._queued -= message.size
                text = "\n".join("".join(pieces) for pieces in message.lines)  # #012 gives newlines too
                if text[-1:] == "\n":
                    text = text[:-1]  # PostgreSQL ends each message with a newline, kept when not split
                self._feed_text(
                    text.split("\n"), message.start, message.time_us, message.pid, last=message.last or message.start
                )
                self._end_entry()
        finally:
            self._draining = False
        if self._returned:
            self._release()  # what `_release` could not give up while feeding, or a message of no entry

    def _complete_quiet(self, now: float) -> None:
        for pid in [pid for pid, m in self._held.items() if now - m.last_at >= IDLE_FLUSH_SECONDS]:
            self._held.pop(pid).done = True
        self._drain()

    def _bsd_time(self, text: str) -> int | None:
        """`Nov 24 03:40:01` in `timezone`, in the year that puts it at most 31 days ahead of now."""
        month = _MONTHS.get(text[:3])
        if month is None:
            return None
        now_us = int(self._wall_clock() * 1_000_000)
        year = datetime.fromtimestamp(now_us / 1_000_000, self._zone).year
        day, hms = int(text[4:6]), text[7:]
        for y in (year + 1, year, year - 1):
            try:
                local = datetime(y, month, day, int(hms[0:2]), int(hms[3:5]), int(hms[6:8]), tzinfo=self._zone)
            except ValueError:  # Feb 29 of a year without one
                continue
            us = int(local.timestamp()) * 1_000_000
            if us <= now_us + _FUTURE_SLACK_US:
                return us
        return None
