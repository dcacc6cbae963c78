"""What `forwarder check-config` can tell about a database's log files before the daemon runs.

A config can be valid and still read nothing: a glob that matches no file, a file the service's
user cannot read, a `line_prefix` that is not the server's. The daemon's overview says so once it
runs (`no_file`, `permission_denied`, `format_mismatch`); these notes say it at the check, where a
new setup is tried first. They are notes, not mistakes: a file may appear later (the daemon waits
for it), and `systemctl reload` runs the check as the service's user, which may read what the
operator's shell cannot.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable

from forwarder.config import DatabaseConfig
from forwarder.pglog import entries_carry_time, make_reader, uses_line_prefix
from forwarder.sources.tail import unlistable

# The newest file's last bytes are what the server writes now (its prefix may have changed since
# the file began); enough for hundreds of lines, read in a moment.
LOOK_BYTES = 64 * 1024


def log_notes(db: DatabaseConfig) -> list[str]:
    """Notes on `db`'s log files, each starting with the setting it is about (`log.path: ...`)."""
    log = db.log
    if log.format == "journal":
        return []  # journalctl decides what it can read; the daemon's overview says it
    directory = os.path.dirname(log.path) or "."
    if not glob.has_magic(directory) and not os.path.isdir(directory):  # (not a glob of them: pods)
        return [f"log.path: no directory {directory}"]
    if (denied := unlistable(log.path)) is not None:
        return [f"log.path: {denied} cannot be listed by this user (uid {os.getuid()})"]
    files = [p for p in glob.glob(log.path) if os.path.isfile(p)]
    if not files:
        return [f"log.path: no file matches {log.path} yet; the daemon waits for one (its overview says no_file)"]
    newest = max(files, key=_mtime)
    try:
        with open(newest, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - LOOK_BYTES))
            data = fh.read(LOOK_BYTES)
    except PermissionError:
        return [f"log.path: {newest} cannot be read by this user (uid {os.getuid()})"]
    except OSError as exc:
        return [f"log.path: {newest} cannot be read: {exc.strerror or exc}"]
    if size > LOOK_BYTES:
        data = data[data.find(b"\n") + 1 :]  # from the first whole line
    return [f"log: {note}" for note in _format_notes(db, newest, data)]


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def _format_notes(db: DatabaseConfig, path: str, data: bytes) -> Iterable[str]:
    """Whether the lines of `data` (the end of the file `path`) are in the configured format."""
    log = db.log
    reader = make_reader(
        log.format,
        line_prefix=log.line_prefix,
        timezone=log.timezone,
        full_text=db.full_text,
        syslog_ident=log.syslog_ident,
    )
    for _ in reader.feed(data, 0.0):
        pass
    for _ in reader.flush():
        pass
    lines = data.count(b"\n")
    if reader.lines_matched == 0 and lines > reader.lines_other:
        expected = f"the {log.format} format"
        if uses_line_prefix(log.format):
            expected += f" with line_prefix {log.line_prefix!r} (SHOW log_line_prefix; on the server)"
        yield f"none of the last {lines} lines of {path} is in {expected}; `forwarder parse` shows how each is read"
        return
    has_time = entries_carry_time(log.format, log.line_prefix)
    note = reader.time_counts.note(log.timezone, setting="log.timezone", prefix_has_time=has_time)
    if note is not None:
        yield f"{path}: {note}"
