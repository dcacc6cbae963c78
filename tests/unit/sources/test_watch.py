"""Change notification: a write to the log is read at once, not at the next poll; polling stays the fallback."""

from __future__ import annotations

import asyncio
import errno
import logging
from pathlib import Path
from typing import Any

import pytest

from forwarder.clock import FakeClock
from forwarder.config import DatabaseConfig, LogSourceConfig
from forwarder.sources import watch
from forwarder.sources.parsing import ParseWorker
from forwarder.sources.tail import DatabaseFollower
from forwarder.sources.watch import DirectoryWatch, watched_directory
from forwarder.store import Store
from tests.harness import all_messages

PREFIX = "%m [%p] "


def entry(i: int) -> bytes:
    return f'2026-11-22 10:00:{i % 60:02d}.000 UTC [{100 + i}] ERROR:  relation "t{i}" does not exist\n'.encode()


async def running(
    store: Store,
    glob: str,
    poll_seconds: float,
    worker: ParseWorker | None = None,
    clock: FakeClock | None = None,
    window: float = 0.0,
) -> tuple[DatabaseFollower, asyncio.Task[None]]:
    log = LogSourceConfig(
        path=glob, line_prefix=PREFIX, poll_interval_seconds=poll_seconds, batch_window_seconds=window
    )
    db = DatabaseConfig(id="main", name="main", host="h", log=log)
    f = DatabaseFollower(db, await store.register_database(db), store, clock or FakeClock(), worker)
    return f, asyncio.create_task(f.run())


async def stop(f: DatabaseFollower, task: asyncio.Task[None]) -> None:
    f.stop()
    await asyncio.wait_for(task, 10)


@pytest.mark.parametrize("parse", ["in process", "in a worker"])
async def test_an_entry_written_to_the_log_is_stored_long_before_the_next_poll(
    store: Store, tmp_path: Path, parse: str
) -> None:
    log = tmp_path / "postgresql.log"
    log.write_bytes(entry(1))
    worker = ParseWorker() if parse == "in a worker" else None
    f, task = await running(store, str(tmp_path / "*.log"), poll_seconds=10.0, worker=worker)
    try:
        await asyncio.wait_for(store.stored_after(0), 5)  # the first poll, at start
        assert f.notified
        with log.open("ab") as fh:
            fh.write(entry(2))
        # Polls are 10 s apart: only the change notification can bring it within 5 s. And it is
        # stored whole at once, without waiting for a next entry or a quiet second.
        await asyncio.wait_for(store.stored_after(1), 5)
        assert await all_messages(store) == ['relation "t1" does not exist', 'relation "t2" does not exist']
    finally:
        await stop(f, task)
        if worker is not None:
            await worker.aclose()


async def test_writes_within_the_batch_window_share_one_store_transaction(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each write wakes the reader, but reads are spaced by the window: five writes 10 ms apart
    within a 1 s window are read together, not one by one."""
    appends: list[int] = []
    append_rows = store.append_rows

    async def counted(identity: Any, rows: Any, *args: Any, **kwargs: Any) -> Any:
        if rows:
            appends.append(len(rows))
        return await append_rows(identity, rows, *args, **kwargs)

    monkeypatch.setattr(store, "append_rows", counted)
    log = tmp_path / "postgresql.log"
    log.write_bytes(entry(1))
    f, task = await running(store, str(tmp_path / "*.log"), poll_seconds=10.0, window=1.0)
    try:
        await asyncio.wait_for(store.stored_after(0), 5)
        for i in range(2, 7):
            with log.open("ab") as fh:
                fh.write(entry(i))
            await asyncio.sleep(0.01)  # writes spread out as a server's are (not waiting for time logic)
        await asyncio.wait_for(store.stored_after(5), 5)
        # One read for the five (its entries stored by at most two appends: the last entry of a read
        # is let out once the read ends with it); without the window, one read per write.
        assert appends[0] == 1 and sum(appends) == 6 and len(appends) <= 3, appends
        assert await all_messages(store) == [f'relation "t{i}" does not exist' for i in range(1, 7)]
    finally:
        await stop(f, task)


async def test_a_new_file_in_the_directory_is_read_at_once(store: Store, tmp_path: Path) -> None:
    f, task = await running(store, str(tmp_path / "*.log"), poll_seconds=10.0)
    try:
        while not f.notified:  # the watch is set up before the first poll
            await asyncio.sleep(0)
        (tmp_path / "postgresql-2.log").write_bytes(entry(7))
        await asyncio.wait_for(store.stored_after(0), 5)
        assert await all_messages(store) == ['relation "t7" does not exist']
    finally:
        await stop(f, task)


async def test_without_change_notification_the_files_are_still_polled(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EMFILE, "Too many open files")  # fs.inotify.max_user_instances reached

    monkeypatch.setattr(watch.inotify_simple, "INotify", refused)
    caplog.set_level(logging.INFO)
    log = tmp_path / "postgresql.log"
    log.write_bytes(entry(1))
    f, task = await running(store, str(tmp_path / "*.log"), poll_seconds=0.05)
    try:
        await asyncio.wait_for(store.stored_after(0), 5)
        with log.open("ab") as fh:
            fh.write(entry(2))
        await asyncio.wait_for(store.stored_after(1), 5)
        assert not f.notified
    finally:
        await stop(f, task)
    said = [r for r in caplog.records if "no change notification" in r.getMessage()]
    assert len(said) == 1 and "Too many open files" in str(said[0].__dict__.get("reason"))


async def test_a_removed_directory_ends_the_watch_and_wakes_the_reader(tmp_path: Path) -> None:
    directory = tmp_path / "pg_log"
    directory.mkdir()
    woken = asyncio.Event()
    w = DirectoryWatch(str(directory), woken.set, lambda name: True)
    w.start()
    try:
        (directory / "a.log").write_bytes(b"x\n")
        await asyncio.wait_for(woken.wait(), 5)
        assert w.active
        (directory / "a.log").unlink()
        directory.rmdir()
        while w.active:  # each batch of events wakes the reader; the last one ends the watch
            woken.clear()
            await asyncio.wait_for(woken.wait(), 5)
    finally:
        w.close()


async def test_a_missing_directory_cannot_be_watched_yet(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        DirectoryWatch(str(tmp_path / "absent"), lambda: None, lambda name: True).start()


def test_only_a_directory_without_wildcards_is_watched() -> None:
    assert watched_directory("/var/lib/postgresql/15/main/log/postgresql-*.log") == "/var/lib/postgresql/15/main/log"
    assert watched_directory("/var/log/*/postgresql.log") is None
    assert watched_directory("postgresql.log") == "."


async def test_only_changes_of_the_log_files_wake_the_reader(store: Store, tmp_path: Path) -> None:
    # The store (or anything else) may live in the log directory: its writes are not news.
    target = tmp_path / "postgresql-2026-11-23.log"
    target.write_bytes(entry(1))
    (tmp_path / "postgresql.log").symlink_to(target.name)
    f, task = await running(store, str(tmp_path / "postgresql.log"), poll_seconds=10.0)
    try:
        await asyncio.wait_for(store.stored_after(0), 5)
        assert f._watched_name("postgresql.log")
        assert f._watched_name("postgresql-2026-11-23.log")  # the link's target, being read
        assert not f._watched_name("s.db-wal") and not f._watched_name("postgresql.log.1")
        with target.open("ab") as fh:  # PostgreSQL writes through the link's target
            fh.write(entry(2))
        await asyncio.wait_for(store.stored_after(1), 5)
    finally:
        await stop(f, task)
