"""Container logs in the CRI format: what a Kubernetes node writes for a pod's stdout and stderr.

The kubelet's container runtime (containerd, CRI-O) writes each line a container prints as

    2026-11-24T03:40:01.123456789Z stderr F 2026-11-24 03:40:01.123 UTC [1] LOG:  ...

to `/var/log/pods/<namespace>_<pod>_<uid>/<container>/<n>.log` (linked from
`/var/log/containers/*.log`): an RFC 3339 time with nanoseconds, the stream, a tag and the line
(kubernetes/cri-api, "CRI logging format"; containerd pkg/cri/io/logger.go). A line longer than
the runtime's buffer (containerd's `max_container_log_line_size`, 16 KiB by default) is written as
records tagged `P` (partial) followed by one tagged `F` (full) that ends it; the pieces are joined
back without anything in between. stdout and stderr are written by separate goroutines, so their
records may interleave: pieces are joined per stream.

Each stream's lines are read as a log of their own (`composed`: one inner reader per stream), so a
line of stdout (an entrypoint script, an archive_command's output) that falls between the lines
of a stderr entry neither ends nor joins it. A stream's partial records are held until the record
that ends their line; meanwhile the entries of the other stream that follow them in the file are
held back (`composed._release`), as the file's offset cannot be both before the partial line and
after those entries. PostgreSQL ends every message with a newline, so the rest of a stderr line
comes right after its first piece; stdout may be another program's line left without its newline
(conmon writes each read as a record, containerd writes what is left as `P` when the stream ends):
stdout partial records quiet for IDLE_FLUSH_SECONDS are taken as a line.

The joined line is the server's stderr text (a PostgreSQL in a container logs to stderr, with its
`log_line_prefix`), fed to the stderr reader. When the prefix has no time, the record's time is
the entry's. Lines that are not CRI records are kept as entries that did not parse, each its own.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Final

from forwarder.pglog.composed import ComposedReader, parse_rfc3339
from forwarder.pglog.reader import IDLE_FLUSH_SECONDS, MAX_ENTRY_BYTES, TEXT_ERRORS

_RECORD: Final = re.compile(rb"(\S{20,40}) (stdout|stderr) ([A-Z](?::[A-Z])*) ?")
_STDERR: Final = b"stderr"


@dataclass(slots=True)
class _Partial:
    """A stream's partial records read so far: the first pieces of one line."""

    start: int  # where its first record starts in the file
    time_us: int | None  # its first record's time
    pieces: list[bytes]
    size: int  # bytes kept (up to one past MAX_ENTRY_BYTES: the stderr reader marks the line cut)
    last_at: float  # monotonic time its last piece was read


class CriReader(ComposedReader):
    """`EntryReader` for a CRI container log file (see the module docstring)."""

    def __init__(self, *, line_prefix: str, timezone: str, full_text: bool) -> None:
        super().__init__(line_prefix=line_prefix, timezone=timezone, full_text=full_text, envelope_pid=False)
        self._partial_lines: dict[bytes, _Partial] = {}  # per stream

    def _held_start(self) -> int | None:
        held = self._partial_lines
        if not held:
            return None
        return min(p.start for p in held.values())

    def _lane_waits(self, lane: Hashable) -> bool:
        return lane in self._partial_lines  # its next line is the one being pieced together

    def _flush_held(self) -> None:
        while self._give_up_held():
            pass

    def _idle_held(self, now: float) -> None:
        for stream, held in list(self._partial_lines.items()):
            if stream != _STDERR and now - held.last_at >= IDLE_FLUSH_SECONDS:
                del self._partial_lines[stream]
                self._feed_joined(stream, b"".join(held.pieces), held.start, held.start, held.time_us)

    def _give_up_held(self) -> bool:
        if not self._partial_lines:
            return False
        stream = min(self._partial_lines, key=lambda s: self._partial_lines[s].start)
        held = self._partial_lines.pop(stream)
        self._feed_joined(stream, b"".join(held.pieces), held.start, held.start, held.time_us)
        return True

    def _line(self, raw: bytes, start: int, cut: bool) -> None:
        m = _RECORD.match(raw)
        if m is None:
            if raw:  # not a CRI record: kept as a line that did not parse, never dropped
                self._feed_text([self._text(raw)], start, None, None)
                self._end_entry()  # an entry of its own: nothing of a stream continues it
            return
        stream, tags = m.group(2), m.group(3)
        content = raw[m.end() :]
        held = self._partial_lines.get(stream)
        if b"P" in tags.split(b":"):
            if held is None:
                held = self._partial_lines[stream] = _Partial(start, self._time(m), [], 0, self._now)
            room = MAX_ENTRY_BYTES + 1 - held.size  # one byte over the cap: the stderr reader marks the line cut
            if room > 0:
                held.pieces.append(content[:room])
                held.size += min(room, len(content))
            held.last_at = self._now
            return
        if held is None:
            self._feed_joined(stream, content, start, start, self._time(m))
        else:
            del self._partial_lines[stream]
            held.pieces.append(content)
            self._feed_joined(stream, b"".join(held.pieces), held.start, start, held.time_us)

    def _feed_joined(self, stream: bytes, data: bytes, start: int, last: int, time_us: int | None) -> None:
        self._feed_text([self._text(data)], start, time_us, None, last=last, lane=stream)

    def _time(self, record: re.Match[bytes]) -> int | None:
        """The record's time, read only when the prefix has none (it is the entry's then)."""
        return parse_rfc3339(record.group(1).decode("ascii", "replace")) if self._add_time else None

    @staticmethod
    def _text(data: bytes) -> str:
        text = data.decode("utf-8", TEXT_ERRORS)
        return text[:-1] if text[-1:] == "\r" else text
