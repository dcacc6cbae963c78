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

The joined line is the server's stderr text (a PostgreSQL in a container logs to stderr, with its
`log_line_prefix`), fed to the stderr reader. When the prefix has no time, the record's time is
the entry's. Lines that are not CRI records are kept as entries that did not parse.
"""

from __future__ import annotations

import re
from typing import Final

from forwarder.pglog.composed import ComposedReader, parse_rfc3339
from forwarder.pglog.reader import MAX_ENTRY_BYTES, TEXT_ERRORS

_RECORD: Final = re.compile(rb"(\S{20,40}) (stdout|stderr) ([A-Z](?::[A-Z])*) ?")


class CriReader(ComposedReader):
    """`EntryReader` for a CRI container log file (see the module docstring)."""

    def __init__(self, *, line_prefix: str, timezone: str, full_text: bool) -> None:
        super().__init__(line_prefix=line_prefix, timezone=timezone, full_text=full_text, envelope_pid=False)
        # stream -> (start of its first partial record, its time, the pieces so far, their length)
        self._partial_lines: dict[bytes, tuple[int, int | None, list[bytes], int]] = {}

    def _held_start(self) -> int | None:
        return min((p[0] for p in self._partial_lines.values()), default=None)

    def _flush_held(self) -> None:
        for stream in list(self._partial_lines):
            start, time_us, pieces, _ = self._partial_lines.pop(stream)
            self._feed_joined(b"".join(pieces), start, time_us)
        self._sync_matched()

    def _line(self, raw: bytes, start: int, cut: bool) -> None:
        m = _RECORD.match(raw)
        if m is None:
            if raw:  # not a CRI record: kept as a line that did not parse, never dropped
                self._feed_joined(raw, start, None)
            return
        stream, tags = m.group(2), m.group(3)
        content = raw[m.end() :]
        held = self._partial_lines.pop(stream, None)
        if b"P" in tags.split(b":"):
            if held is None:
                held = (start, parse_rfc3339(m.group(1).decode("ascii", "replace")), [], 0)
            begin, time_us, pieces, size = held
            room = MAX_ENTRY_BYTES + 1 - size  # one byte over the cap: the stderr reader marks the line cut
            if room > 0:
                pieces.append(content[:room])
                size += min(room, len(content))
            self._partial_lines[stream] = (begin, time_us, pieces, size)
            return
        if held is None:
            self._feed_joined(content, start, parse_rfc3339(m.group(1).decode("ascii", "replace")))
        else:
            begin, time_us, pieces, _ = held
            pieces.append(content)
            self._feed_joined(b"".join(pieces), begin, time_us)
        self._sync_matched()

    def _feed_joined(self, data: bytes, start: int, time_us: int | None) -> None:
        text = data.decode("utf-8", TEXT_ERRORS)
        if text[-1:] == "\r":
            text = text[:-1]
        self._feed_text([text], start, time_us, None)
