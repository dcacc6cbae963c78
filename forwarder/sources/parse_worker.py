"""The parse worker's side: what a worker process runs, and all that it imports.

A worker is a child process of the daemon (forwarder/sources/parsing.py starts it) that runs
`serve()`; it imports this module and what the calls it unpickles need, and nothing more: the
daemon's metrics (prometheus-client), asyncio, aiohttp, pydantic and multiprocessing stay out of
it, and so do OpenSSL's libcrypto (see forwarder.blake2) and SQLite. Keeping the worker small
matters because its memory counts in the daemon's footprint: this module and pglog cost ~18 MB of
resident memory (21.5 while hashlib and sqlite3 came along), the daemon-side `parsing` module
~30 MB (python -X importtime, ru_maxrss). tests/unit/test_import_rules.py checks what it loads.

The worker keeps the readers' state (pending entries) in `_READERS`, by handle.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
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
    unfinished: bool = False  # the reader holds data whose rest still comes (pglog.reader.LineReader.unfinished)


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
        reader.unfinished,
    )


# --- what runs in the worker process ----------------------------------------------------------

_READERS: dict[int, tuple[EntryReader, Identity]] = {}

FRAME_HEADER_BYTES: Final = 8  # a frame's length, little-endian


def serve() -> None:
    """The worker process's loop (started by `parsing.ParseWorker`): calls come in on standard
    input and their results go out on standard output, one frame each, in the order the calls
    came, until standard input ends.

    A frame is an 8-byte little-endian length and that many bytes of pickle: a call is
    `(function, args)`, its result `("ok", value)` or `("error", exception)`.

    The daemon decides when the worker stops: Ctrl-C in a terminal (SIGINT to the whole process
    group) or systemd's SIGTERM to every process of the unit must not kill it while the daemon
    still drains pending entries through it. Standard input ends when the daemon closes it, and
    also when the daemon is gone however it went (kill -9, the OOM killer): the kernel closes a
    dead process's descriptors, and the daemon's are never inherited (close-on-exec). So nothing
    outlives the daemon and no thread watches for it.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    calls = sys.stdin.buffer
    results = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print() goes to standard error, never into a frame
    while True:
        header = calls.read(FRAME_HEADER_BYTES)
        if len(header) < FRAME_HEADER_BYTES:
            return  # the daemon closed the pipe, or is gone
        # The daemon's pipe, nothing else's: the worker trusts it as its own code.
        fn, args = pickle.loads(calls.read(int.from_bytes(header, "little")))  # noqa: S301
        try:
            result: tuple[str, object] = ("ok", fn(*args))
        except Exception as exc:  # the daemon raises it at the caller, as a local call would
            result = ("error", exc)
        payload = _pickled(result)
        try:
            results.write(len(payload).to_bytes(FRAME_HEADER_BYTES, "little"))
            results.write(payload)
            results.flush()
        except BrokenPipeError:
            return  # the daemon is gone


def _pickled(result: tuple[str, object]) -> bytes:
    try:
        return pickle.dumps(result, pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # an exception that does not pickle: its text, at least
        return pickle.dumps(("error", RuntimeError(f"{result[1]!r} (not picklable: {exc})")), pickle.HIGHEST_PROTOCOL)


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
