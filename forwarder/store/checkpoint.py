"""WAL checkpoints off the writer thread.

SQLite's automatic checkpoint runs inside the COMMIT that crosses `wal_autocheckpoint`: that
commit copies every page of the WAL into the database file and syncs it, ~100 ms at a few
thousand lines a second, and ingest and delivery wait behind it on the single writer thread.
Here a thread with its own connection runs a PASSIVE checkpoint every `interval_seconds`; a
PASSIVE checkpoint never blocks the writer or the readers (sqlite.org/c3ref/wal_checkpoint_v2.html),
and once it has copied the whole WAL the writer starts the WAL over from its beginning, so the
file stays small. The writer keeps a large `wal_autocheckpoint` as a backstop, reached only if
this thread cannot keep up.

Durability is unchanged: a commit is in the WAL before COMMIT returns, checkpointed or not.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from typing import Final

log = logging.getLogger(__name__)

INTERVAL_SECONDS: Final = 1.0


class Checkpointer:
    """Checkpoints the store at `path` every `interval_seconds` until `stop()`."""

    def __init__(self, path: str, interval_seconds: float = INTERVAL_SECONDS) -> None:
        self._path = path
        self._interval = interval_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="store-checkpoint", daemon=True)
        self.checkpoints = 0  # completed calls, for tests

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False, timeout=30.0)
        try:
            # The checkpoint syncs as the writer would (the database file once it is written).
            conn.execute("PRAGMA synchronous = NORMAL")
            while not self._stop.wait(self._interval):
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    self.checkpoints += 1
                except sqlite3.Error as exc:  # a full disk, say: the writer reports the store's state
                    log.debug("WAL checkpoint failed", extra={"error": str(exc)})
        finally:
            conn.close()
