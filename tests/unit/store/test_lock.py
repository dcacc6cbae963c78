"""One daemon per store: `Store(..., exclusive=True)` holds a lock beside the store while it is open.

A second daemon on the same store stored every line again under new ids and delivered it again,
and one that then failed on a busy port had already rewritten the declared destinations first.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from forwarder.clock import FakeClock
from forwarder.config import StoreConfig
from forwarder.store import Store, StoreLocked
from forwarder.store.store import lock_path

# A second process that opens the store as the daemon does, says so, and holds it until told.
HOLDER = """
import asyncio, sys
from forwarder.clock import FakeClock
from forwarder.config import StoreConfig
from forwarder.store import Store

async def main() -> None:
    store = Store(StoreConfig(path=sys.argv[1]), FakeClock(), exclusive=True)
    await store.start()
    print("open", flush=True)
    sys.stdin.readline()
    await store.aclose()

asyncio.run(main())
"""


def store_at(path: Path, *, exclusive: bool = True) -> Store:
    return Store(StoreConfig(path=path), FakeClock(), exclusive=exclusive)


async def test_a_second_exclusive_open_fails_until_the_first_is_closed(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    first = store_at(path)
    await first.start()
    try:
        second = store_at(path)  # its own descriptor: flock conflicts even within one process
        with pytest.raises(StoreLocked) as locked:
            await second.start()
        assert locked.value.path == path and locked.value.pid == os.getpid()
        assert str(path) in str(locked.value) and f"process {os.getpid()}" in str(locked.value)
        assert not second.is_open
        await second.aclose()  # closing a store that did not open is harmless and frees nothing

        brief = store_at(path, exclusive=False)  # the CLI's brief opens (keys) are not kept out
        await brief.start()
        await brief.aclose()
    finally:
        await first.aclose()

    again = store_at(path)  # closed: the lock is free
    await again.start()
    await again.aclose()


async def test_the_lock_is_taken_before_anything_is_written(tmp_path: Path) -> None:
    path = tmp_path / "new" / "s.db"
    path.parent.mkdir()
    fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a holder that has not written its pid yet
        with pytest.raises(StoreLocked, match="in use by another process") as locked:
            await store_at(path).start()
        assert locked.value.pid is None
        assert not path.exists()  # no store created, no migration run
    finally:
        os.close(fd)


async def test_a_store_held_by_another_process_is_refused_and_freed_when_it_is_killed(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:  # closes its pipes
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "open\n"
            with pytest.raises(StoreLocked) as locked:
                await store_at(path).start()
            assert locked.value.pid == holder.pid
            holder.kill()  # SIGKILL: no aclose, the kernel drops the lock with the process
            holder.wait()
            store = store_at(path)
            await store.start()
            await store.aclose()
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait()


async def test_a_store_file_that_is_not_a_database_is_named_in_the_error(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    path.write_bytes(b"not a database, " * 512)
    store = Store(StoreConfig(path=str(path)), FakeClock(), exclusive=True)
    with pytest.raises(sqlite3.DatabaseError, match=f"the store {path}: file is not a database"):
        await store.start()
    await store.aclose()
