"""The parse worker's side: what a worker process runs, and all that it imports.

A worker (see forwarder/sources/parsing.py, which runs it) imports this module and what it
pickles, and nothing more: the daemon's metrics (prometheus-client), asyncio, aiohttp and
pydantic stay out of it. Keeping the worker small matters because its memory counts in the
daemon's footprint: this module and pglog cost ~20 MB of resident memory, the daemon-side
`parsing` module ~30 MB (python -X importtime, ru_maxrss).

The worker keeps the readers' state (pending entries) in `_READERS`, by handle.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Final

from forwarder.model import LogLine
from forwarder.pglog import EntryReader, Format, TimeCounts, make_reader
from forwarder.store.lines import Identity, Row, encode_rows


@dataclass(frozen=True, slots=True)
class ReaderSpec:
    """What a reader of one file needs to know."""

    fmt: Format
    line_prefix: str
    timezone: str
    identity: Identity
    syslog_ident: str | None = None  # see make_reader


@dataclass(frozen=True, slots=True)
class Parsed:
    """What one step of a reader gives: rows to store, and the reader's counts after the step."""

    rows: list[Row]
    committed_offset: int  # EntryReader.committed_offset
    lines_matched: int  # EntryReader.lines_matched
    lines_other: int  # EntryReader.lines_other
    unparsed: int  # of `rows`: entries not in the format
    truncated: int  # of `rows`: entries cut at the entry cap
    times: TimeCounts  # EntryReader.time_counts


NOTHING_PARSED: Final = Parsed([], 0, 0, 0, 0, 0, TimeCounts())


def parsed(reader: EntryReader, identity: Identity, lines: list[LogLine]) -> Parsed:
    """The rows of `lines` (just returned by `reader`) and the reader's counts."""
    unparsed = truncated = 0
    for line in lines:
        if line.unparsed:
            unparsed += 1
        if line.truncated:
            truncated += 1
    return Parsed(
        encode_rows(identity, lines),
        reader.committed_offset,
        reader.lines_matched,
        reader.lines_other,
        unparsed,
        truncated,
        reader.time_counts,
    )


# --- what runs in the worker process ----------------------------------------------------------

_READERS: dict[int, tuple[EntryReader, Identity]] = {}


PARENT_CHECK_SECONDS = 0.5
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def w_init(daemon_pid: int) -> None:
    """The daemon decides when the worker stops: Ctrl-C in a terminal (SIGINT to the whole process
    group) or systemd's SIGTERM to every process of the unit must not kill it while the daemon
    still drains pending entries through it. It exits when the daemon closes the pool, or dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _exit_with(daemon_pid)


def _exit_with(daemon_pid: int) -> None:
    """End this process as soon as the daemon is gone, however it went (kill -9, OOM killer).

    Nothing else would end it: it ignores SIGTERM, and it holds both ends of the pool's queue
    pipes, so it never sees EOF. While it lives, multiprocessing's resource tracker (which exits
    on EOF of a pipe the worker also holds) lives too. Two guards:
    - Linux's PR_SET_PDEATHSIG (prctl(2)) sends SIGKILL when the parent exits. It fires when the
      *thread* that forked us exits, which is the daemon's event loop thread here; and a parent
      that died before the call is not covered, hence the getppid() check right after it.
    - A thread that checks every PARENT_CHECK_SECONDS that we were not re-parented (to PID 1 or a
      subreaper), for other systems and for the cases prctl does not cover.
    """
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != daemon_pid:
        os._exit(0)
    threading.Thread(target=_watch_daemon, args=(daemon_pid,), name="watch-daemon", daemon=True).start()


def _watch_daemon(daemon_pid: int) -> None:
    event = threading.Event()
    while not event.wait(PARENT_CHECK_SECONDS):
        if os.getppid() != daemon_pid:
            os._exit(0)  # no cleanup to do: the readers' state is rebuilt from the store's offsets


def ready_lines(reader: EntryReader, now: float, at_end: bool) -> list[LogLine]:
    """Entries known to be complete: all of them when the data read ends with a whole entry at the
    end of the file (`at_end`; EntryReader.flush_written), and those quiet long enough."""
    lines = reader.flush_written() if at_end else []
    return lines + reader.flush_idle(now)


def w_open(handle: int, spec: ReaderSpec, full_text: bool) -> None:
    reader = make_reader(
        spec.fmt,
        line_prefix=spec.line_prefix,
        timezone=spec.timezone,
        full_text=full_text,
        syslog_ident=spec.syslog_ident,
    )
    _READERS[handle] = (reader, spec.identity)


def w_call(handle: int, op: str, full_text: bool, data: bytes, now: float) -> Parsed:
    reader, identity = _READERS[handle]
    reader.full_text = full_text
    if op == "feed":
        lines = reader.feed(data, now)
    elif op == "idle":
        lines = ready_lines(reader, now, False)
    elif op == "ready":
        lines = ready_lines(reader, now, True)
    else:
        lines = reader.flush()
    return parsed(reader, identity, lines)


def w_close(handle: int) -> None:
    _READERS.pop(handle, None)


def w_count() -> int:
    return len(_READERS)
