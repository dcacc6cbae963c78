"""WAL checkpoints run on their own thread, not inside the writer's commits."""

from __future__ import annotations

import time
from pathlib import Path

from forwarder.store import schema
from forwarder.store.checkpoint import Checkpointer


def test_the_writer_leaves_checkpoints_to_the_checkpoint_thread(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    writer = schema.connect(str(path))
    writer.execute("CREATE TABLE t (x BLOB)")
    assert writer.execute("PRAGMA wal_autocheckpoint").fetchone()[0] >= 50000  # only a backstop
    for _ in range(200):
        writer.execute("INSERT INTO t VALUES (zeroblob(4000))")  # ~1,000 pages: past the default 1,000
    # Nothing copied the WAL into the database file yet: the writer did not checkpoint.
    assert path.stat().st_size < 200 * 4000
    checkpointer = Checkpointer(str(path), interval_seconds=0.01)
    checkpointer.start()
    try:
        deadline = time.monotonic() + 5
        while path.stat().st_size < 200 * 4000 and time.monotonic() < deadline:
            time.sleep(0.01)  # a real thread on a real file: waiting for I/O, not for clock logic
    finally:
        checkpointer.stop()
    assert path.stat().st_size >= 200 * 4000 and checkpointer.checkpoints >= 1
    # The next write starts the WAL over: it no longer grows.
    before = path.with_name("store.db-wal").stat().st_size
    writer.execute("INSERT INTO t VALUES (zeroblob(4000))")
    assert path.with_name("store.db-wal").stat().st_size <= before
    writer.close()
