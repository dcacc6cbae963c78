"""Formats that wrap PostgreSQL's stderr text in an envelope: syslog files, CRI container logs, the journal.

Such a reader unwraps each physical line of its file into the stderr text PostgreSQL wrote and
feeds that text, line by line, to a composed `StderrReader`: prefix matching, entry assembly,
classification and value removal are the stderr format's own. This module keeps the offsets of
the `EntryReader` contract in bytes of the *envelope* file: each line fed to an inner reader is
remembered with the byte where its envelope started, so the inner reader's `committed_offset`
(in bytes of the unwrapped text) maps back to a byte of the file.

An envelope may carry several streams whose lines interleave (a container's stdout and stderr):
each gets an inner reader of its own (a *lane*), so that a line of one never joins, nor ends, an
entry of the other. Entries of different lanes then complete out of file order (a stderr entry
waits for its DETAIL line while stdout lines after its first line are complete), and so does
envelope data the subclass holds (a CRI partial record waiting for the rest of its line). The
contract ("every byte before `committed_offset` belongs to an entry returned, no byte after it
does") admits one resume point only, so an entry is returned once every byte read before its last
line is in an entry returned too; until then it is held back (`_release`), its bytes after the
resume point. A restart re-reads the held-back entries with what held them: each comes out once.
(Returning them at once would need, besides the offset, a list of the records past it already
stored, kept in the store with the offset: more state, in every format, for what is a moment's
wait: the rest of a partial line, the next line of an entry, comes right after it.)
Held-back entries are bounded (HOLD_BACK_BYTES): past that, the oldest thing holding them is
taken as complete (`_give_up_oldest`).

The envelope often knows what the prefix may not: the time (syslog, CRI, the journal) and the pid
(syslog's `postgres[pid]`, the journal's `_PID`). When the server's `log_line_prefix` lacks
`%m`/`%t`/`%n` (or `%p`), the inner reader's prefix is the server's prefix preceded by `%n ` (or
`[%p] `), and each line that the server's prefix recognizes is fed with the envelope's values in
front. Lines the prefix does not recognize go in unchanged: they stay what they are
(continuations or unparsed lines).
"""

from __future__ import annotations

import calendar
from collections import deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Final

from forwarder.model import LogLine
from forwarder.pglog.prefix import compile_prefix
from forwarder.pglog.reader import MAX_ENTRY_BYTES, LineReader
from forwarder.pglog.stderr import StderrReader
from forwarder.pglog.times import TimeCounts

# Text of entries complete but held back (see the module docstring) beyond which the oldest data
# holding them is taken as complete: one entry's worth.
HOLD_BACK_BYTES: Final = MAX_ENTRY_BYTES


@dataclass(slots=True)
class _Lane:
    """One inner `StderrReader` (a stream of the envelope) and where the lines fed to it are in the file."""

    reader: StderrReader
    fed: int = 0  # bytes of text fed
    # Per line fed that is in no entry returned yet, in the order fed (file order): its offset in
    # the text fed, the start of its envelope in the file, and the start of the envelope's last
    # line (a CRI line of partial records, a syslog message of several lines, starts before it ends).
    lines: deque[tuple[int, int, int]] = field(default_factory=deque)

    def unreturned(self) -> int | None:
        """Start in the file of its first line in no entry returned yet, or None."""
        lines = self.lines
        if lines:
            done = self.reader.committed_offset
            while lines and lines[0][0] < done:  # in an entry returned, or dropped (an empty line)
                lines.popleft()
            if lines:
                return lines[0][1]
        return None


@dataclass(slots=True, eq=False)
class _Returned:
    """Entries an inner reader returned, held back until no byte before their last line is unreturned."""

    first: int  # start in the file of their first line
    last: int  # start in the file of their last line (-1: unknown, released at once)
    size: int  # bytes of text they took
    lines: list[LogLine]


class ComposedReader(LineReader):
    """A `LineReader` over envelope lines whose unwrapped text goes to inner `StderrReader`s.

    A subclass implements `_line` (from `LineReader`), calls `_feed_text` with each unwrapped line
    (naming its lane when the envelope has streams), and `_held_start` reports the start of
    envelope data it holds that is not fed yet.
    """

    def __init__(self, *, line_prefix: str, timezone: str, full_text: bool, envelope_pid: bool) -> None:
        super().__init__(full_text=full_text)
        plain = compile_prefix(line_prefix)
        self._plain_match = plain.regex.match
        self._plain_severity = plain.severity_group  # the severity's (or label's) group in a match
        self._add_time = plain.time_kind == ""
        self._add_pid = envelope_pid and plain.pid_group < 0
        extra = ("%n " if self._add_time else "") + ("[%p] " if self._add_pid else "")
        self._inner_prefix = extra + line_prefix
        self._timezone = timezone
        self._lanes: dict[Hashable, _Lane] = {}
        self._inner = self._lane(None).reader  # the default lane (the only one of syslog and the journal)
        self._returned: list[_Returned] = []  # held back, in the order returned
        self._returned_bytes = 0
        self._returned_low = -1  # the least `last` of those held back (none goes before a barrier passes it)
        self._releasing = False
        self._now = 0.0

    # -- EntryReader ------------------------------------------------------------------------------

    @property
    def committed_offset(self) -> int:
        """The first byte of the file in no entry returned yet; every entry returned ends before it."""
        low = self._unreturned_start()
        if low is None or low > self._consumed:
            low = self._consumed
        for r in self._returned:
            if r.first < low:
                low = r.first
        return low

    @property
    def unfinished(self) -> bool:
        """A partial line, envelope data held for the rest of its line or message, or a line an
        inner reader holds as a possible first piece (see `LineReader.unfinished`)."""
        return (
            self._partial_len > 0
            or self._held_start() is not None
            or any(lane.reader.unfinished for lane in self._lanes.values())
        )

    @property
    def time_counts(self) -> TimeCounts:
        """The inner readers': the times are read there (the envelope's time when the prefix has none)."""
        counts = [lane.reader.time_counts for lane in self._lanes.values()]
        if len(counts) == 1:
            return counts[0]
        foreign = next((c for c in counts if c.foreign_zone is not None), counts[0])
        return TimeCounts(
            sum(c.zone_mismatches for c in counts),
            foreign.foreign_zone,
            foreign.foreign_zone_known,
            sum(c.read_time for c in counts),
        )

    def feed(self, data: bytes, now: float) -> list[LogLine]:
        self._now = now
        self._sync_full_text()
        out = super().feed(data, now)
        self._out = out
        self._release()
        self._sync_matched()
        return out

    def flush_idle(self, now: float) -> list[LogLine]:
        out: list[LogLine] = []
        self._out = out
        self._sync_full_text()
        self._idle_held(now)
        for lane in list(self._lanes.values()):
            self._collect(lane, lane.reader.flush_idle(now))
        self._release()
        self._sync_matched()
        return out

    def flush_written(self) -> list[LogLine]:
        out: list[LogLine] = []
        if self._partial_len:
            return out  # an envelope line still comes, and it may continue an inner entry
        self._out = out
        self._sync_full_text()
        for key, lane in list(self._lanes.items()):
            if not self._lane_waits(key):
                self._collect(lane, lane.reader.flush_written())
        self._release()
        self._sync_matched()
        return out

    def flush(self) -> list[LogLine]:
        self._sync_full_text()
        out = super().flush()  # a last line without newline goes through `_line`
        self._out = out
        self._flush_held()
        for lane in list(self._lanes.values()):
            self._collect(lane, lane.reader.flush())
        self._release()  # nothing is unreturned any more: every entry held back goes
        self._sync_matched()
        return out

    # -- for subclasses ---------------------------------------------------------------------------

    def _held_start(self) -> int | None:
        """Start in the file of envelope data read but not fed to an inner reader yet, or None."""
        return None

    def _lane_waits(self, lane: Hashable) -> bool:
        """Whether envelope data held back may still continue the entry pending in `lane`."""
        return self._held_start() is not None

    def _flush_held(self) -> None:
        """End of the file: feed whatever is held (incomplete envelope data) as it is."""
        return

    def _idle_held(self, now: float) -> None:
        """`flush_idle`: feed held envelope data that is complete for having been quiet long enough."""
        return

    def _give_up_held(self) -> bool:
        """Feed the held envelope data that starts first as it is (HOLD_BACK_BYTES was passed);
        False if there is none or it cannot be given up."""
        return False

    def _feed_text(
        self,
        lines: Iterable[str],
        start: int,
        time_us: int | None,
        pid: int | None,
        *,
        last: int | None = None,
        lane: Hashable = None,
    ) -> None:
        """Feed unwrapped lines, all from the envelope that starts at byte `start` of the file.

        `time_us`/`pid` are the envelope's: put in front of each line the server's prefix
        recognizes when the prefix itself lacks them (see the module docstring). `last` is the
        start of the envelope's last line when it has several, `lane` the inner reader's name.
        """
        parts: list[bytes] = []
        add_time, add_pid = self._add_time, self._add_pid
        for text in lines:
            if (
                (add_time or add_pid)
                and not (add_time and time_us is None)
                and not (add_pid and pid is None)
                and text[:1] != "\t"
                and self._plain_match(text)
            ):
                front = ""
                if add_time and time_us is not None:
                    ms = time_us // 1000
                    front = f"{ms // 1000}.{ms % 1000:03d} "
                if add_pid:
                    front += f"[{pid}] "
                text = front + text
            parts.append(text.encode("utf-8", "surrogateescape"))
            parts.append(b"\n")
        data = b"".join(parts)
        if not data:
            return
        inner = self._lanes.get(lane) or self._lane(lane)
        inner.lines.append((inner.fed, start, start if last is None else last))
        inner.fed += len(data)
        got = inner.reader.feed(data, self._now)
        if got:
            self._collect(inner, got)

    def _end_entry(self, lane: Hashable = None) -> None:
        """The text fed so far to `lane` ends an entry (the envelope says so): emit it now."""
        inner = self._lanes.get(lane)
        if inner is not None:
            self._collect(inner, inner.reader.flush())

    def _sync_matched(self) -> None:
        """`lines_matched` from the inner readers' (done at the end of each step)."""
        lanes = self._lanes
        if len(lanes) == 1:
            self.lines_matched = self._inner.lines_matched
        else:
            self.lines_matched = sum(lane.reader.lines_matched for lane in lanes.values())

    # -- internals --------------------------------------------------------------------------------

    def _lane(self, key: Hashable) -> _Lane:
        lane = self._lanes.get(key)
        if lane is None:
            reader = StderrReader(line_prefix=self._inner_prefix, timezone=self._timezone, full_text=self.full_text)
            lane = self._lanes[key] = _Lane(reader)
        return lane

    def _sync_full_text(self) -> None:
        for lane in self._lanes.values():
            lane.reader.full_text = self.full_text

    def _unreturned_start(self) -> int | None:
        """Start in the file of the first data read that is neither in an entry returned by an inner
        reader nor left out of every entry (held envelope data, lines of entries still pending)."""
        low = self._held_start()
        for lane in self._lanes.values():
            at = lane.unreturned()
            if at is not None and (low is None or at < low):
                low = at
        return low

    def _collect(self, lane: _Lane, got: list[LogLine]) -> None:
        """Entries `lane`'s reader just returned: held back until `_release` lets them go."""
        if not got:
            return
        done = lane.reader.committed_offset
        lines = lane.lines
        first = last = -1
        text_from = done
        while lines and lines[0][0] < done:
            offset, start, end = lines.popleft()
            if first < 0:
                first, text_from = start, offset
            if end > last:
                last = end
        if not self._returned and not self._releasing:
            # Nothing held back yet (the usual case, and always so with one lane): these go out at
            # once unless something still unreturned starts before their last line.
            held = self._held_start()
            if (held is None or last < held) and (not lines or last < lines[0][1]):  # lines: unreturned now
                for other in self._lanes.values():
                    if other is not lane and (at := other.unreturned()) is not None and at <= last:
                        break
                else:
                    self._out.extend(got)
                    return
        if not self._returned or last < self._returned_low:
            self._returned_low = last
        self._returned.append(_Returned(first, last, done - text_from, got))
        self._returned_bytes += done - text_from
        self._release()

    def _release(self) -> None:
        """Return the held-back entries that no unreturned byte precedes the last line of.

        This keeps `committed_offset` a resume point of the `EntryReader` contract: it is the first
        unreturned byte (or held-back entry), and every entry returned ends before it. Entries
        held back together (a stderr entry around a stdout line) go out together, in file order.
        """
        if self._releasing or not self._returned:
            return
        self._releasing = True
        try:
            while True:
                self._release_now()
                if self._returned_bytes <= HOLD_BACK_BYTES or not self._give_up_oldest():
                    break
            self._release_now()
        finally:
            self._releasing = False

    def _release_now(self) -> None:
        held = self._returned
        if not held:
            return
        barrier = self._unreturned_start()
        if barrier is not None and barrier <= self._returned_low:
            return  # the usual case while something holds them back: a look at each is not needed
        go = held if barrier is None else [r for r in held if r.last < barrier]
        while go and len(go) < len(held):
            # An entry held back still (a later line of it is after the barrier) holds back every
            # other one whose last line comes after its first.
            going = {id(r) for r in go}
            bound = min(r.first for r in held if id(r) not in going)
            kept = [r for r in go if r.last < bound]
            if len(kept) == len(go):
                break
            go = kept
        if not go:
            return
        if len(go) > 1:
            go.sort(key=lambda r: r.first)
        for r in go:
            self._out.extend(r.lines)
            self._returned_bytes -= r.size
        if len(go) == len(held):
            held.clear()
        else:
            gone = {id(r) for r in go}
            held[:] = [r for r in held if id(r) not in gone]
            self._returned_low = min(r.last for r in held)

    def _give_up_oldest(self) -> bool:
        """Too much is held back: take what holds the first unreturned byte as complete, the
        envelope's held data (`_give_up_held`) or a lane's pending entry; False if nothing can be."""
        lanes = [(at, lane) for lane in self._lanes.values() if (at := lane.unreturned()) is not None]
        first = min(lanes, key=lambda item: item[0], default=None)
        held = self._held_start()
        if held is not None and (first is None or held < first[0]) and self._give_up_held():
            return True
        if first is None:
            return False
        lane = first[1]
        got = lane.reader.flush()
        if got:
            self._collect(lane, got)
        return True


def parse_rfc3339(text: str) -> int | None:
    """`2026-11-24T03:40:01.123456789Z` or `...+01:00` (any fraction) to epoch microseconds; None if malformed."""
    if len(text) < 20 or text[4] != "-" or text[10] not in "Tt" or text[13] != ":":
        return None
    try:
        year, month, day = int(text[0:4]), int(text[5:7]), int(text[8:10])
        hour, minute, second = int(text[11:13]), int(text[14:16]), int(text[17:19])
    except ValueError:
        return None
    rest = text[19:]
    us = 0
    if rest[:1] == ".":
        end = 1
        while end < len(rest) and rest[end].isdigit():
            end += 1
        us = int((rest[1:end] + "000000")[:6]) if end > 1 else 0
        rest = rest[end:]
    if rest in ("Z", "z"):
        offset = 0
    elif len(rest) == 6 and rest[0] in "+-" and rest[3] == ":" and rest[1:3].isdigit() and rest[4:].isdigit():
        offset = (int(rest[1:3]) * 3600 + int(rest[4:]) * 60) * (-1 if rest[0] == "-" else 1)
    else:
        return None
    try:
        seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    except (ValueError, OverflowError):
        return None
    return (seconds - offset) * 1_000_000 + us
