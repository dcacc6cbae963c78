"""A full disk: closing the store still closes it, and its log says it once a minute at most.

On SIGTERM with the disk full, the checkpoint at close raised 'database or disk is full': the
writer was never closed, the pools never shut down, and the daemon exited 1 with a traceback.
A nearly full disk lets a write through now and then: each such flap logged a failure with its
traceback and a recovery, where operations.md promises one report, then at most one a minute.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from forwarder.clock import FakeClock
from forwarder.config import DatabaseConfig, LogSourceConfig, StoreConfig
from forwarder.model import LogLine
from forwarder.store import Store
from forwarder.store.lines import Identity
from tests.harness import limit_pages


class FailingUpkeep:
    """The writer's connection, on a disk with no room for the upkeep at close."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.closed = False

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql.startswith(("PRAGMA optimize", "PRAGMA wal_checkpoint")):
            raise sqlite3.OperationalError("database or disk is full")
        return self.conn.execute(sql, *args)

    def close(self) -> None:
        self.closed = True
        self.conn.close()


async def test_closing_on_a_full_disk_closes_everything_and_keeps_the_writes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "s.db"
    store = Store(StoreConfig(path=path), FakeClock(), exclusive=True)
    await store.start()
    _, key = await store.create_key("before-close", "read-only")
    await store.verify_key(key)  # a reader connection is open
    assert store._writer is not None
    real = store._writer
    store._writer = FailingUpkeep(real)  # type: ignore[assignment]

    await store.aclose()  # raised OperationalError, leaving the writer and the pools open

    assert not store.is_open
    with pytest.raises(sqlite3.ProgrammingError):  # closed
        real.execute("SELECT 1")
    assert store._readers == []
    for pool in (store._writer_pool, store._reader_pool, store._checkpoint_pool):
        with pytest.raises(RuntimeError):  # shut down
            pool.submit(print)
    warnings = [r for r in caplog.records if r.name == "forwarder.store.store" and r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING and warnings[0].exc_info is None
    assert "database or disk is full" in str(warnings[0].__dict__["errors"])

    reopened = Store(StoreConfig(path=path), FakeClock(), exclusive=True)  # the lock was given back
    await reopened.start()
    try:
        assert await reopened.verify_key(key) is not None  # the write is kept (read from the WAL)
    finally:
        await reopened.aclose()


async def test_a_flapping_full_disk_is_logged_once_a_minute_without_tracebacks(
    store: Store, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="forwarder.store.store")
    db = DatabaseConfig(id="main", name="main", host="h", log=LogSourceConfig(path="/nonexistent/*.log"))
    ident = await store.register_database(db)

    async def append(ident: Identity, room: bool) -> None:
        """An append of more than a page, on a disk with room or none."""
        await limit_pages(store, 1 << 30 if room else 1)
        lines = [LogLine(time_us=0, severity="LOG", kind="other", message=f"message {i} " * 8) for i in range(200)]
        if room:
            await store.append(ident, lines, [], 0)
        else:
            with pytest.raises(sqlite3.OperationalError):
                await store.append(ident, lines, [], 0)

    def logged() -> list[tuple[str, bool]]:
        return [(r.getMessage(), r.exc_info is not None) for r in caplog.records if r.name == "forwarder.store.store"]

    # Within a minute: fails, works, fails, works, fails.
    for room in (False, True, False, True, False):
        await append(ident, room)
        clock.advance(10)
    assert logged() == [("a store write failed", False), ("the store writes again", False)]
    assert store.write_problem is not None  # the state is exact even when the log is quiet

    clock.advance(20)  # a minute after the first report: one line counts what was not logged
    await append(ident, False)
    again = caplog.records[-1]
    assert again.getMessage() == "a store write failed" and again.__dict__["repeats"] == 3
    assert again.exc_info is None and again.__dict__["recoveries"] == 1
    assert "disk full" in str(again.__dict__["reason"])

    await append(ident, True)  # the failure just reported ends: said once
    assert logged()[-1] == ("the store writes again", False)
    assert len(logged()) == 4
