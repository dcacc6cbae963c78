"""File change notification for the log directory: wake the follower as soon as PostgreSQL writes.

Linux's inotify(7), through `inotify_simple` (a thin ctypes wrapper), on the directory of the
database's glob: a write to any file in it, a file created, renamed or deleted there wakes the
follower at once instead of at its next poll. It only shortens the wait; the follower still polls
every `log.poll_interval_seconds`, which is what reads the files where inotify says nothing:

- inotify is missing (not Linux) or refused (`fs.inotify.max_user_instances` or `max_user_watches`
  reached): `DirectoryWatch.start` raises OSError and the follower polls only;
- a network filesystem (NFS, CIFS, FUSE) does not report writes made by another machine;
- the directory is not there yet, or is removed (the watch ends; it is set up again later);
- a glob whose directory part has wildcards (`/var/log/*/postgresql.log`): not watched.

Events are not read one by one: each readable moment drains the queue and calls `wake` once, and a
full queue (IN_Q_OVERFLOW) is just one more reason to wake.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
from collections.abc import Callable
from typing import Final

import inotify_simple

# A change of the data (MODIFY), a file appearing (CREATE, MOVED_TO: a new log file, a link
# swapped), leaving (MOVED_FROM, DELETE: rotation) or its metadata changing (ATTRIB: permissions).
_MASK: Final = (
    inotify_simple.flags.MODIFY
    | inotify_simple.flags.CREATE
    | inotify_simple.flags.MOVED_TO
    | inotify_simple.flags.MOVED_FROM
    | inotify_simple.flags.DELETE
    | inotify_simple.flags.ATTRIB
    | inotify_simple.flags.DELETE_SELF
    | inotify_simple.flags.MOVE_SELF
    | inotify_simple.flags.ONLYDIR
)
# The watch is gone: the directory was deleted, moved away or its filesystem unmounted.
_ENDED: Final = inotify_simple.flags.IGNORED | inotify_simple.flags.DELETE_SELF | inotify_simple.flags.MOVE_SELF


def watched_directory(pattern: str) -> str | None:
    """The directory whose entries `pattern` (a glob) matches, or None if its directory part has wildcards."""
    directory = os.path.dirname(pattern) or "."
    return None if glob.has_magic(directory) else directory


class DirectoryWatch:
    """Calls `wake()` on the event loop whenever an entry of `directory` for which `wanted(name)`
    holds changes, and when the watch ends; `close()` ends it.

    `wanted` keeps other files of the directory (the store itself may live there) from waking the
    reader at each of their writes.
    """

    def __init__(self, directory: str, wake: Callable[[], None], wanted: Callable[[str], bool]) -> None:
        self.directory = directory
        self._wake = wake
        self._wanted = wanted
        self._inotify: inotify_simple.INotify | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def active(self) -> bool:
        """Whether changes are still reported (False once the directory went away, or after `close`)."""
        return self._inotify is not None

    def start(self) -> None:
        """Begin watching from the running loop; raises OSError if inotify is unavailable or refused."""
        loop = asyncio.get_running_loop()
        inotify = inotify_simple.INotify(nonblocking=True)
        try:
            inotify.add_watch(self.directory, _MASK)
            loop.add_reader(inotify.fileno(), self._readable)
        except BaseException:
            inotify.close()
            raise
        self._inotify, self._loop = inotify, loop

    def _readable(self) -> None:
        inotify = self._inotify
        if inotify is None:
            return
        try:
            events = inotify.read(timeout=0)
        except OSError:
            self.close()
            self._wake()
            return
        ended = False
        wanted = False
        for e in events:
            ended = ended or bool(e.mask & _ENDED)
            wanted = wanted or bool(e.mask & inotify_simple.flags.Q_OVERFLOW) or (e.name and self._wanted(e.name))
        if ended:
            self.close()
        if ended or wanted:
            self._wake()

    def close(self) -> None:
        inotify, self._inotify = self._inotify, None
        if inotify is None:
            return
        if self._loop is not None:
            with contextlib.suppress(Exception):  # the loop may be closed already
                self._loop.remove_reader(inotify.fileno())
        inotify.close()
