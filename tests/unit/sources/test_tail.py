"""The file follower: what the overview says about reading, and exactly-once across restarts."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from forwarder.clock import FakeClock
from forwarder.config import DatabaseConfig, LogSourceConfig, StoreConfig
from forwarder.sources.tail import DatabaseFollower
from forwarder.store import LineQuery, Store

PREFIX = "%m [%p] "


def entry(i: int, extra: str = "") -> bytes:
    return (
        f'2026-11-22 10:00:{i % 60:02d}.000 UTC [{100 + i}] ERROR:  relation "t{i}" does not exist\n'
        f"2026-11-22 10:00:{i % 60:02d}.000 UTC [{100 + i}] STATEMENT:  SELECT * FROM t{i}{extra}\n"
    ).encode()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = Store(StoreConfig(path=tmp_path / "s.db"), FakeClock())
    await s.start()
    yield s
    await s.aclose()


_made: list[DatabaseFollower] = []  # by `follower`, in the running test


@pytest.fixture(autouse=True)
def close_followers() -> Iterator[None]:
    """Close the files every follower of the test still holds, as the end of its process would."""
    yield
    while _made:
        abandon(_made.pop())


def abandon(f: DatabaseFollower) -> None:
    """Drop a follower without storing anything more (its process died): only its files are closed."""
    for file in f._files.values():
        file.close()


async def follower(store: Store, glob: str, clock: FakeClock | None = None) -> DatabaseFollower:
    db = DatabaseConfig(id="main", name="main", host="h", log=LogSourceConfig(path=glob, line_prefix=PREFIX))
    f = DatabaseFollower(db, await store.register_database(db), store, clock or FakeClock())
    f._known = {(sf.dev, sf.ino): sf for sf in await store.source_files("main")}
    _made.append(f)
    return f


async def messages(store: Store) -> list[str]:
    page = await store.list_lines(1, LineQuery(limit=500))
    return [orjson.loads(d)["message"] for d in reversed(page.docs)]


async def test_no_file_is_reported_then_a_new_file_is_picked_up(store: Store, tmp_path: Path) -> None:
    f = await follower(store, str(tmp_path / "*.log"))
    await f.poll()
    assert f.status.state == "no_file" and "no file matches" in (f.status.reason or "")
    (tmp_path / "postgresql-1.log").write_bytes(entry(1) + entry(2))
    await f.poll()
    assert f.status.state == "reading" and f.status.file == str(tmp_path / "postgresql-1.log")
    assert await messages(store) == ['relation "t1" does not exist']  # t2 is pending until idle or the next entry


async def test_a_pending_entry_goes_out_after_a_second_of_quiet(store: Store, tmp_path: Path) -> None:
    clock = FakeClock()
    f = await follower(store, str(tmp_path / "*.log"), clock)
    (tmp_path / "pg.log").write_bytes(entry(1))
    await f.poll()
    assert await messages(store) == []
    clock.advance(1.0)
    await f.poll()
    assert await messages(store) == ['relation "t1" does not exist']


async def test_format_mismatch_is_reported(store: Store, tmp_path: Path) -> None:
    (tmp_path / "pg.log").write_bytes(b"".join(b"Nov 22 10:00:00 host postgres[1]: LOG:  x\n" for _ in range(30)))
    f = await follower(store, str(tmp_path / "*.log"))
    await f.poll()
    assert f.status.state == "format_mismatch" and "'%m [%p] '" in (f.status.reason or "")
    assert len(await messages(store)) == 30 - 1  # each kept as kind `other` (the last one still pending)


async def test_unreadable_file_is_reported_and_reading_goes_on(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.log").write_bytes(entry(1))
    f = await follower(store, str(tmp_path / "a.log"))
    real_open = os.open

    def deny(path: str, flags: int, *args: Any, **kw: Any) -> int:
        if str(path).endswith("a.log"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", deny)
    await f.poll()
    assert f.status.state == "permission_denied" and f.status.file == str(tmp_path / "a.log")
    monkeypatch.undo()
    await f.poll()
    assert f.status.state == "reading"


async def test_restart_resumes_at_the_committed_offset(store: Store, tmp_path: Path) -> None:
    log = tmp_path / "pg.log"
    log.write_bytes(entry(1) + entry(2) + entry(3))
    f = await follower(store, str(log))
    await f.poll()
    assert len(await messages(store)) == 2  # entry 3 pending: its bytes are not committed
    abandon(f)  # the daemon dies here (nothing drained); a new follower reads from the stored offset
    with log.open("ab") as fh:
        fh.write(entry(4))
    g = await follower(store, str(log))
    await g.poll()
    await g.drain()
    assert await messages(store) == [f'relation "t{i}" does not exist' for i in (1, 2, 3, 4)]


async def test_truncation_starts_the_file_over(store: Store, tmp_path: Path) -> None:
    log = tmp_path / "postgresql-Mon.log"
    log.write_bytes(entry(1) + entry(2))
    f = await follower(store, str(log))
    await f.poll()
    log.write_bytes(entry(7))  # log_truncate_on_rotation reuses the name a week later
    await f.poll()
    await f.drain()
    assert await messages(store) == [f'relation "t{i}" does not exist' for i in (1, 2, 7)]


async def test_disabled_reads_nothing_and_enabling_resumes(store: Store, tmp_path: Path) -> None:
    log = tmp_path / "pg.log"
    log.write_bytes(entry(1) + entry(2))
    f = await follower(store, str(log))
    f.apply_settings(enabled=False, full_text=False)
    assert f.enabled is False
    f.apply_settings(enabled=True, full_text=True)
    await f.poll()
    await f.drain()
    page = await store.list_lines(1, LineQuery())
    assert [orjson.loads(d)["statement"] for d in page.docs] == ["SELECT * FROM t2", "SELECT * FROM t1"]


async def all_messages(store: Store) -> list[str]:
    """Every stored message, oldest first."""
    out: list[str] = []
    before = None
    while True:
        page = await store.list_lines(1, LineQuery(limit=500, before=before))
        docs = [orjson.loads(d) for d in page.docs]
        out.extend(d["message"] for d in docs)
        if not page.has_more:
            return list(reversed(out))
        before = int(docs[-1]["id"])


async def test_a_stop_in_the_middle_of_a_backlog_stores_whole_entries_and_the_rest_follows(
    store: Store, tmp_path: Path
) -> None:
    log = tmp_path / "pg.log"
    n = 20_000  # several chunks and store batches: the stop lands between two
    log.write_bytes(b"".join(entry(i) for i in range(n)))
    f = await follower(store, str(log))
    run = asyncio.create_task(f.run())
    while store.head_id == 0:  # the first batch is stored
        await asyncio.sleep(0.001)
    f.stop()
    await asyncio.wait_for(run, 10)
    first = await all_messages(store)
    assert 0 < len(first) < n, "the stop did not land in the middle of the file"
    # Nothing cut: every stored entry is whole, in order, none twice.
    assert first == [f'relation "t{i}" does not exist' for i in range(len(first))]
    g = await follower(store, str(log))
    await g.poll()
    await g.drain()
    assert await all_messages(store) == [f'relation "t{i}" does not exist' for i in range(n)]
