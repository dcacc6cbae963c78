"""The file follower: what the overview says about reading, and exactly-once across restarts."""

from __future__ import annotations

import asyncio
import bz2
import gzip
import logging
import lzma
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import zstandard

from forwarder.clock import FakeClock
from forwarder.config import DatabaseConfig, LogSourceConfig
from forwarder.pglog import WHOLE_WRITE_BYTES
from forwarder.sources import tail
from forwarder.sources.tail import PAGE_BYTES, ROTATE_WAIT_SECONDS, DatabaseFollower
from forwarder.store import LineQuery, Store
from tests.harness import all_messages, statuses_at_each_write

PREFIX = "%m [%p] "


def entry(i: int, extra: str = "") -> bytes:
    return (
        f'2026-11-22 10:00:{i % 60:02d}.000 UTC [{100 + i}] ERROR:  relation "t{i}" does not exist\n'
        f"2026-11-22 10:00:{i % 60:02d}.000 UTC [{100 + i}] STATEMENT:  SELECT * FROM t{i}{extra}\n"
    ).encode()


def relations(msgs: list[str]) -> list[str]:
    return [m for m in msgs if m.startswith("relation")]


def rel(*ids: int) -> list[str]:
    return [f'relation "t{i}" does not exist' for i in ids]


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


async def follower(store: Store, glob: str, clock: FakeClock | None = None, *, fmt: str = "stderr") -> DatabaseFollower:
    log = LogSourceConfig(path=glob, line_prefix=PREFIX, format=fmt)  # type: ignore[arg-type]
    db = DatabaseConfig(id="main", name="main", host="h", log=log)
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
    assert await messages(store) == ['relation "t1" does not exist', 'relation "t2" does not exist']


async def test_an_entry_written_whole_is_stored_at_once_without_waiting_for_the_next(
    store: Store, tmp_path: Path
) -> None:
    clock = FakeClock()  # never advanced: no quiet second passes
    f = await follower(store, str(tmp_path / "*.log"), clock)
    log = tmp_path / "pg.log"
    log.write_bytes(entry(1))
    await f.poll()
    assert await messages(store) == ['relation "t1" does not exist']
    with log.open("ab") as fh:
        fh.write(entry(2))
    await f.poll()
    assert len(await messages(store)) == 2
    assert (await store.source_files("main"))[0].offset == len(entry(1) + entry(2))


async def test_a_long_entry_goes_out_after_a_second_of_quiet(store: Store, tmp_path: Path) -> None:
    # PostgreSQL writes an entry longer than its 4 KiB buffer in several writes: the end of the
    # data read may be the middle of it, so it waits for the next entry or for quiet.
    clock = FakeClock()
    f = await follower(store, str(tmp_path / "*.log"), clock)
    (tmp_path / "pg.log").write_bytes(entry(1, "x" * WHOLE_WRITE_BYTES))
    await f.poll()
    assert await messages(store) == []
    clock.advance(1.0)
    await f.poll()
    assert await messages(store) == ['relation "t1" does not exist']


async def test_data_ending_at_a_page_boundary_is_not_taken_as_a_whole_entry(store: Store, tmp_path: Path) -> None:
    # The kernel makes a long write visible page by page: a file read up to a page boundary may
    # hold the first part of an entry, even one ending with a newline there.
    clock = FakeClock()
    f = await follower(store, str(tmp_path / "*.log"), clock)
    log = tmp_path / "pg.log"
    first = entry(1)
    filler = PAGE_BYTES - len(first) - len(entry(2, ""))
    second = entry(2, "y" * filler)
    assert (len(first) + len(second)) % PAGE_BYTES == 0
    log.write_bytes(first + second)
    await f.poll()
    assert await messages(store) == ['relation "t1" does not exist']  # the second waits
    with log.open("ab") as fh:
        fh.write(b"\tz\n")  # the rest of the write: the same entry's last line
    await f.poll()
    await f.drain()
    assert [m.endswith("z") for m in await messages(store)] == [False, False]
    page = await store.list_lines(1, LineQuery(limit=5))
    assert orjson.loads(page.docs[0])["statement"].endswith("\nz")


async def test_format_mismatch_is_reported(store: Store, tmp_path: Path) -> None:
    (tmp_path / "pg.log").write_bytes(b"".join(b"Nov 22 10:00:00 host postgres[1]: LOG:  x\n" for _ in range(30)))
    f = await follower(store, str(tmp_path / "*.log"))
    await f.poll()
    assert f.status.state == "format_mismatch" and "'%m [%p] '" in (f.status.reason or "")
    assert len(await messages(store)) == 30  # each kept as kind `other`


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of 100 entries from feeds of 25 lines: a few hundred entries take several writes."""
    monkeypatch.setattr(tail, "APPEND_LINES", 100)
    monkeypatch.setattr(tail, "FEED_LINES", 25)


@pytest.mark.usefixtures("small_batches")
async def test_a_first_poll_through_a_backlog_says_reading_from_its_first_stored_batch(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A first start on a log of a few GB reads for minutes in one poll: the overview says which
    # file is being read as soon as lines of it are stored, not "starting" until the poll ends.
    log = tmp_path / "pg.log"
    log.write_bytes(b"".join(entry(i) for i in range(300)))
    f = await follower(store, str(tmp_path / "*.log"))
    statuses = statuses_at_each_write(f, store, monkeypatch)
    await f.poll()
    seen = [(s.state, s.file) for s in statuses]
    assert len(seen) >= 3
    assert seen[0] == ("starting", None)  # nothing stored yet
    assert seen[1:] == [("reading", str(log))] * (len(seen) - 1)
    assert f.status.state == "reading" and f.status.file == str(log)


async def test_a_first_poll_in_the_wrong_format_never_says_reading(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tail, "APPEND_LINES", 10)
    monkeypatch.setattr(tail, "FEED_LINES", 5)
    (tmp_path / "pg.log").write_bytes(b"".join(b"Nov 22 10:00:00 host postgres[1]: LOG:  x\n" for _ in range(60)))
    f = await follower(store, str(tmp_path / "*.log"))
    statuses = statuses_at_each_write(f, store, monkeypatch)
    await f.poll()
    assert len(statuses) >= 3 and {s.state for s in statuses} == {"starting"}
    assert f.status.state == "format_mismatch"


async def test_other_programs_in_a_syslog_file_are_no_format_mismatch(store: Store, tmp_path: Path) -> None:
    # A busy /var/log/syslog where PostgreSQL is quiet: 30 lines of cron, then one of PostgreSQL.
    cron = b"".join(b"Nov 22 10:00:%02d host CRON[7]: (root) CMD (run-parts)\n" % i for i in range(30))
    (tmp_path / "syslog").write_bytes(cron)
    db = DatabaseConfig(
        id="main", name="main", host="h", log=LogSourceConfig(path=str(tmp_path / "syslog"), format="syslog")
    )
    clock = FakeClock()
    f = DatabaseFollower(db, await store.register_database(db), store, clock)
    _made.append(f)
    await f.poll()
    assert f.status.state == "reading", f.status.reason
    assert await messages(store) == []  # other programs' lines are not PostgreSQL's entries
    with (tmp_path / "syslog").open("ab") as out:
        out.write(b"Nov 22 10:00:31 host postgres[9]: [1-1] 2026-11-22 10:00:31.000 UTC [9] LOG:  checkpoint starting:")
        out.write(b" time\n")
    await f.poll()
    clock.advance(2)  # no [1-2] line came: the message is whole
    await f.poll()
    await f.drain()
    assert f.status.state == "reading" and await messages(store) == ["checkpoint starting: time"]


async def test_unreadable_file_is_reported_and_reading_goes_on(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "a.log").write_bytes(entry(1))
    f = await follower(store, str(tmp_path / "a.log"))
    real_open = os.open

    def deny(path: str, flags: int, *args: Any, **kw: Any) -> int:
        if str(path).endswith("a.log"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", deny)
    caplog.set_level(logging.INFO, logger="forwarder.sources")
    for _ in range(3):
        await f.poll_or_start_over()
    assert f.status.state == "permission_denied" and f.status.file == str(tmp_path / "a.log")
    said = [r.getMessage() for r in caplog.records]
    assert said == ["the log cannot be read"]  # once, not at every poll (operations.md)
    monkeypatch.undo()
    await f.poll_or_start_over()
    assert f.status.state == "reading"
    assert [r.getMessage() for r in caplog.records][1:] == ["the log can be read again"]


async def test_a_log_directory_that_cannot_be_listed_is_permission_denied_not_no_file(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # chmod 000 on the log directory (as root, the test can only make listing it fail): the glob
    # matches nothing, and the overview said no_file, "no file matches", where the daemon's user
    # lacks the right to look.
    logs = tmp_path / "pglog"
    logs.mkdir()
    (logs / "a.log").write_bytes(entry(1))
    f = await follower(store, str(logs / "*.log"))
    real_scandir = os.scandir

    def deny(path: Any = ".") -> Any:
        if str(path) == str(logs):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", deny)
    await f.poll_or_start_over()
    assert (f.status.state, f.status.file, f.status.reason) == (
        "permission_denied",
        str(logs),
        f"permission denied: {logs}",
    )
    monkeypatch.undo()
    await f.poll_or_start_over()
    assert f.status.state == "reading"


async def test_restart_resumes_at_the_committed_offset(store: Store, tmp_path: Path) -> None:
    log = tmp_path / "pg.log"
    log.write_bytes(entry(1) + entry(2) + entry(3) + entry(4)[:10])
    f = await follower(store, str(log))
    await f.poll()
    assert len(await messages(store)) == 2  # entry 3 pending (a line is partial): its bytes are not committed
    abandon(f)  # the daemon dies here (nothing drained); a new follower reads from the stored offset
    with log.open("ab") as fh:
        fh.write(entry(4)[10:])
    g = await follower(store, str(log))
    await g.poll()
    await g.drain()
    assert await messages(store) == rel(1, 2, 3, 4)


async def test_truncation_starts_the_file_over(store: Store, tmp_path: Path) -> None:
    log = tmp_path / "postgresql-Mon.log"
    log.write_bytes(entry(1) + entry(2))
    f = await follower(store, str(log))
    await f.poll()
    log.write_bytes(entry(7))  # log_truncate_on_rotation reuses the name a week later
    await f.poll()
    await f.drain()
    assert await messages(store) == rel(1, 2, 7)


# The same first line in every file (with a prefix without a time, say '[%p] ', each file starts with
# the checkpointer's lines): a file's first 64 bytes do not tell it from the one before.
SAME_START = b"2026-11-22 10:00:00.000 UTC [50] LOG:  checkpoint starting: time\n"


def same_start(*ids: int) -> bytes:
    """A file that starts with SAME_START, then entries `ids`."""
    return SAME_START + b"".join(entry(i) for i in ids)


@pytest.mark.parametrize("restart", [False, True], ids=["running", "across-a-restart"])
async def test_a_file_rewritten_past_the_offset_with_the_same_start_is_read_from_its_start(
    store: Store, tmp_path: Path, restart: bool
) -> None:
    # copytruncate (or log_truncate_on_rotation reusing the name) and the server writes more than
    # was read before the next look: the head is the same, the size past the offset. Every entry of
    # the new text up to the old offset was skipped.
    log = tmp_path / "postgresql-Mon.log"
    log.write_bytes(same_start(*range(1, 4)))
    f = await follower(store, str(log))
    await f.poll()
    if restart:
        await f.drain()
    log.write_bytes(same_start(*range(10, 16)))  # truncated, written again
    if restart:
        f = await follower(store, str(log))
    await f.poll()
    await f.drain()
    assert relations(await messages(store)) == rel(1, 2, 3, *range(10, 16))


async def test_copytruncate_with_the_same_start_reads_the_copy_once_and_the_new_text_whole(
    store: Store, tmp_path: Path
) -> None:
    # The copy and the file written again after the truncation both start like the file that was
    # read: the copy holds what was read, the file does not.
    log = tmp_path / "pg.log"
    log.write_bytes(same_start(*range(1, 4)))
    f = await follower(store, str(tmp_path / "pg.log*"))
    await f.poll()
    copy = tmp_path / "pg.log.1"
    copy.write_bytes(log.read_bytes() + entry(4))  # entry 4 written before the copy, after our poll
    log.write_bytes(same_start(*range(10, 16)))
    os.utime(copy, ns=(1, 1))
    await f.poll()
    await f.drain()
    assert relations(await messages(store)) == rel(1, 2, 3, 4, *range(10, 16))


async def test_files_rewritten_with_the_same_start_while_stopped_are_each_read_from_their_start(
    store: Store, tmp_path: Path
) -> None:
    # log_truncate_on_rotation with postgresql-%a.log and a prefix without a time: Mon and Tue were
    # written again while the daemon was stopped. Mon, shorter than where Tue had been read to, was
    # taken for a copy of Tue and skipped whole.
    mon, tue = tmp_path / "postgresql-Mon.log", tmp_path / "postgresql-Tue.log"
    mon.write_bytes(same_start(*range(1, 4)))
    tue.write_bytes(same_start(*range(4, 10)))
    os.utime(mon, ns=(1, 1))
    f = await follower(store, str(tmp_path / "*.log"))
    await f.poll()
    await f.drain()
    mon.write_bytes(same_start(*range(20, 22)))
    tue.write_bytes(same_start(*range(30, 33)))
    os.utime(mon, ns=(2, 2))
    g = await follower(store, str(tmp_path / "*.log"))
    await g.poll()
    await g.drain()
    assert relations(await messages(store)) == rel(*range(1, 10), 20, 21, 30, 31, 32)


async def test_a_new_file_that_stays_empty_a_while_is_no_copy_of_the_file_renamed_away(
    store: Store, tmp_path: Path
) -> None:
    # logrotate `create` with a glob of the live file only, a quiet server: the new file stayed
    # empty past the renamed file's last 5 s, then started like it (a prefix without a time). It
    # was taken for a copy of the file renamed away and read from its end.
    log = tmp_path / "pg.log"
    log.write_bytes(same_start(*range(1, 7)))
    clock = FakeClock()
    f = await follower(store, str(log), clock)
    await f.poll()
    log.rename(tmp_path / "pg.log.0")
    log.write_bytes(b"")
    await f.poll()
    clock.advance(ROTATE_WAIT_SECONDS)
    await f.poll()  # pg.log.0 is done with
    log.write_bytes(same_start(*range(10, 13)))
    await f.poll()
    await f.drain()
    assert relations(await messages(store)) == rel(*range(1, 7), 10, 11, 12)


async def test_a_copy_continues_where_its_original_was_read_to_not_where_an_older_truncation_ended(
    store: Store, tmp_path: Path
) -> None:
    # Two copytruncate rotations with the same first bytes: the second copy, holding lines not read
    # yet, was read from where the first rotation's (longer) file had ended: past its own end.
    log = tmp_path / "pg.log"
    log.write_bytes(same_start(*range(1, 9)))
    f = await follower(store, str(tmp_path / "pg.log*"))
    await f.poll()
    (tmp_path / "pg.log.1").write_bytes(log.read_bytes())
    log.write_bytes(same_start(10))
    os.utime(tmp_path / "pg.log.1", ns=(1, 1))
    await f.poll()
    with log.open("ab") as out:
        out.write(entry(11) + entry(12))  # not read before the next rotation
    (tmp_path / "pg.log.2").write_bytes(log.read_bytes())
    log.write_bytes(same_start(20))
    os.utime(tmp_path / "pg.log.2", ns=(2, 2))
    await f.poll()
    await f.drain()
    assert relations(await messages(store)) == rel(*range(1, 9), 10, 11, 12, 20)


async def test_a_file_renamed_out_of_the_glob_is_read_while_the_server_still_writes_to_it(
    store: Store, tmp_path: Path
) -> None:
    # logrotate's `create`: the file is renamed, and the server writes to it until it reopens its
    # log. A poll can come between the rename and those writes (the directory watch wakes the
    # reader at the rename); the lines written after it were lost.
    clock = FakeClock()
    log = tmp_path / "postgresql.log"
    f = await follower(store, str(log), clock)
    with log.open("ab") as server:
        server.write(entry(1))
        server.flush()
        await f.poll()
        log.rename(tmp_path / "postgresql.log.1")
        await f.poll()  # gone from the glob, nothing new yet
        server.write(entry(2))  # the server's descriptor: the renamed file
        server.flush()
        await f.poll()
        assert await messages(store) == rel(1, 2)
        clock.advance(ROTATE_WAIT_SECONDS - 0.5)
        server.write(entry(3))  # growth restarts the wait
        server.flush()
        await f.poll()
        clock.advance(ROTATE_WAIT_SECONDS - 0.5)
        await f.poll()
        assert len(f._files) == 1  # still followed: it grew less than the wait ago
        clock.advance(0.5)
        await f.poll()
        assert f._files == {}  # quiet for the whole wait: complete, its descriptor given back
    assert await messages(store) == rel(1, 2, 3)


async def test_a_long_entry_of_a_renamed_file_goes_out_after_a_second_of_quiet(store: Store, tmp_path: Path) -> None:
    # As in the glob: an entry longer than PostgreSQL's buffer may be cut, so it waits for quiet,
    # not for the end of the file's rotate wait.
    clock = FakeClock()
    log = tmp_path / "postgresql.log"
    f = await follower(store, str(log), clock)
    log.write_bytes(entry(1))
    await f.poll()
    log.rename(tmp_path / "postgresql.log.1")
    with (tmp_path / "postgresql.log.1").open("ab") as server:
        server.write(entry(2, "x" * WHOLE_WRITE_BYTES))
    await f.poll()
    assert len(await messages(store)) == 1
    clock.advance(1.0)
    await f.poll()
    assert len(f._files) == 1 and len(await messages(store)) == 2


async def test_a_stop_while_a_renamed_file_is_followed_reads_it_to_its_end(store: Store, tmp_path: Path) -> None:
    # A restart would not find the file (it is out of the glob): what it holds is stored before.
    log = tmp_path / "postgresql.log"
    f = await follower(store, str(log))
    log.write_bytes(entry(1))
    await f.poll()
    log.rename(tmp_path / "postgresql.log.1")
    await f.poll()
    with (tmp_path / "postgresql.log.1").open("ab") as server:
        server.write(entry(2) + entry(3))
    await f.drain()
    assert await messages(store) == rel(1, 2, 3)


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


async def test_the_status_says_disabled_as_soon_as_reading_is_disabled(store: Store, tmp_path: Path) -> None:
    log = tmp_path / "pg.log"
    log.write_bytes(entry(1))
    f = await follower(store, str(log))
    await f.poll()
    assert f.status.state == "reading"
    f.apply_settings(enabled=False, full_text=False)
    assert f.status.state == "disabled"  # before the reader's loop comes round
    await f.poll()  # a poll under way when the setting changed ends as it began
    assert f.status.state == "disabled"
    f.apply_settings(enabled=True, full_text=False)
    assert f.status.state == "reading"


@pytest.mark.usefixtures("small_batches")
async def test_a_source_enabled_again_says_starting_then_reading_while_it_catches_up(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "pg.log"
    log.write_bytes(entry(0))
    f = await follower(store, str(log))
    f.apply_settings(enabled=False, full_text=False)
    run = asyncio.create_task(f.run())
    try:
        while f._status.state != "disabled":  # the reader's loop came round
            await asyncio.sleep(0.001)
        with log.open("ab") as out:  # written while reading was off
            out.write(b"".join(entry(i) for i in range(1, 300)))
        statuses = statuses_at_each_write(f, store, monkeypatch)
        f.apply_settings(enabled=True, full_text=False)
        assert f.status.state == "starting"
        while len(await messages(store)) < 300:
            await asyncio.sleep(0.001)
    finally:
        f.stop()
        await asyncio.wait_for(run, 10)
    seen = [(s.state, s.file) for s in statuses]
    assert len(seen) >= 3 and seen[0] == ("starting", None)
    assert set(seen[1:]) == {("reading", str(log))}  # not "disabled" until the catch-up ends


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


def swap_in_after_the_check(monkeypatch: pytest.MonkeyPatch, victim: Path, replacement: Path) -> threading.Event:
    """The race, made certain: `replacement` takes `victim`'s name just after the follower checked it."""
    swapped = threading.Event()

    def swap_after(real: Callable[..., os.stat_result]) -> Callable[..., os.stat_result]:
        def checked(path: Any, *args: Any, **kw: Any) -> os.stat_result:
            st = real(path, *args, **kw)
            if str(path) == str(victim) and not swapped.is_set():
                swapped.set()
                os.rename(replacement, victim)
            return st

        return checked

    monkeypatch.setattr(os, "stat", swap_after(os.stat))
    monkeypatch.setattr(os, "lstat", swap_after(os.lstat))
    return swapped


async def test_a_fifo_swapped_in_between_the_check_and_the_open_is_skipped_without_blocking(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.log").write_bytes(entry(1) + entry(2))
    victim = tmp_path / "b.log"
    victim.write_bytes(entry(3))
    fifo = tmp_path / "fifo.tmp"
    os.mkfifo(fifo)
    swapped = swap_in_after_the_check(monkeypatch, victim, fifo)
    done = threading.Event()
    hung: list[bool] = []

    def watchdog() -> None:
        """If the poll blocks in open(2) on the FIFO, open its writing end to release it, and say so."""
        if done.wait(5):
            return
        try:
            fd = os.open(victim, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO when no reader waits on it
        except OSError:
            return
        hung.append(True)
        os.close(fd)

    guard = threading.Thread(target=watchdog)
    guard.start()
    ticks = 0

    async def ticker() -> None:  # another task of the loop, such as the API answering /healthz
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    f = await follower(store, str(tmp_path / "*.log"))
    tick = asyncio.create_task(ticker())
    try:
        await f.poll()
    finally:
        done.set()
        guard.join()
        tick.cancel()
    monkeypatch.undo()
    assert swapped.is_set()
    assert not hung, "the poll blocked the event loop opening a FIFO"
    assert ticks > 1
    await f.poll()
    await f.drain()
    assert await messages(store) == ['relation "t1" does not exist', 'relation "t2" does not exist']
    assert f.status.state == "reading" and "not a regular file" in (f.status.reason or "")


async def test_a_symlink_loop_is_skipped_and_named_and_the_real_file_is_read(store: Store, tmp_path: Path) -> None:
    (tmp_path / "loop.log").symlink_to("loop.log")
    log = tmp_path / "postgresql.log"
    f = await follower(store, str(tmp_path / "*.log"))
    for i in range(100):
        with log.open("ab") as fh:
            fh.write(entry(i))
        await f.poll()
    await f.drain()
    assert await all_messages(store) == [f'relation "t{i}" does not exist' for i in range(100)]
    assert f.status.state == "reading" and f.status.file == str(log)
    assert f.status.reason == f"skipped {tmp_path / 'loop.log'} (a symbolic link loop)"


async def test_a_symlink_out_of_the_log_directory_is_never_read(store: Store, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    key = tmp_path / "secrets.key"
    key.write_bytes(entry(99) + entry(98))  # looks like a log, so a read would store it
    (logs / "z.log").symlink_to(key)
    (logs / "pg.log").write_bytes(entry(1) + entry(2))
    f = await follower(store, str(logs / "*.log"))
    await f.poll()
    await f.drain()
    assert await messages(store) == ['relation "t1" does not exist', 'relation "t2" does not exist']
    assert [(sf.path, sf.head[:10]) for sf in await store.source_files("main")] == [
        (str(logs / "pg.log"), entry(1)[:10])
    ]
    assert f.status.reason == f"skipped {logs / 'z.log'} (a symbolic link out of its directory)"


async def test_a_link_to_a_file_of_its_directory_is_followed_across_rotation(store: Store, tmp_path: Path) -> None:
    (tmp_path / "postgresql-1.log").write_bytes(entry(1) + entry(2))
    current = tmp_path / "postgresql.log"
    current.symlink_to("postgresql-1.log")
    f = await follower(store, str(current))
    await f.poll()
    assert f.status.state == "reading" and f.status.file == str(tmp_path / "postgresql-1.log")
    (tmp_path / "postgresql-2.log").write_bytes(entry(3) + entry(4))
    (tmp_path / "next").symlink_to("postgresql-2.log")
    os.rename(tmp_path / "next", current)  # the link moves to the new file, atomically
    await f.poll()
    await f.drain()
    assert await messages(store) == rel(1, 2, 3, 4)
    assert f.status.reason is None


async def test_the_daemons_own_files_are_never_read_even_when_the_glob_matches_them(
    store: Store, tmp_path: Path
) -> None:
    (tmp_path / "pg.log").write_bytes(entry(1) + entry(2))
    (tmp_path / "store.log").symlink_to("s.db")  # the store is in the log directory here
    f = await follower(store, str(tmp_path / "*"))
    await f.poll()
    assert [sf.path for sf in await store.source_files("main")] == [str(tmp_path / "pg.log")]
    assert f.status.skipped and {s.why for s in f.status.skipped} == {"a file of the forwarder itself"}


async def test_a_socket_swapped_in_between_the_check_and_the_open_is_skipped(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.log").write_bytes(entry(1) + entry(2))
    victim = tmp_path / "b.log"
    victim.write_bytes(entry(3))
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "sock.tmp"))  # open(2) on a socket fails with ENXIO
        swapped = swap_in_after_the_check(monkeypatch, victim, tmp_path / "sock.tmp")
        f = await follower(store, str(tmp_path / "*.log"))
        await f.poll()
        monkeypatch.undo()
        assert swapped.is_set()
        assert f.status.state == "reading"
        await f.poll()
        await f.drain()
    assert await messages(store) == ['relation "t1" does not exist', 'relation "t2" does not exist']
    assert f.status.reason == f"skipped {victim} (not a regular file)"


async def test_a_skipped_entry_is_logged_once_even_when_it_keeps_coming_back(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "pg.log").write_bytes(entry(1))
    loop = tmp_path / "loop.log"
    f = await follower(store, str(tmp_path / "*.log"))
    for _ in range(5):  # someone keeps putting the loop back
        loop.symlink_to("loop.log")
        await f.poll()
        await f.poll()
        loop.unlink()
        await f.poll()
    assert [
        (r.getMessage(), getattr(r, "path", None)) for r in caplog.records if r.name == "forwarder.sources.tail"
    ] == [("skipping an entry of the log directory", str(loop))]


async def test_a_stop_mid_backlog_reads_a_file_renamed_away_to_its_end(store: Store, tmp_path: Path) -> None:
    # logrotate renamed the file while its backlog was being read, and the daemon stops before a
    # poll sees it go: a restart would not find the renamed file, so the stop reads it all.
    log = tmp_path / "pg.log"
    log.write_bytes(b"".join(entry(i) for i in range(300)))
    f = await follower(store, str(log))
    f.stop()  # asked during the backlog: the poll opens the file and stops before its end
    await f.poll()
    assert len(await messages(store)) < 300
    log.rename(tmp_path / "pg.log.1")
    log.write_bytes(entry(300))
    await f.drain()
    g = await follower(store, str(log))
    await g.poll()
    await g.drain()
    assert await messages(store) == [f'relation "t{i}" does not exist' for i in range(301)]


async def test_a_stop_keeps_a_line_the_server_has_not_finished_for_the_next_run(store: Store, tmp_path: Path) -> None:
    log = tmp_path / "pg.log"
    whole, last = entry(1), entry(2)
    log.write_bytes(whole + last[:30])  # a write in progress: the line has no newline yet
    f = await follower(store, str(log))
    await f.poll()
    await f.drain()
    with log.open("ab") as out:
        out.write(last[30:])
    g = await follower(store, str(log))
    await g.poll()
    await g.drain()
    assert await messages(store) == ['relation "t1" does not exist', 'relation "t2" does not exist']


async def test_a_new_file_that_starts_like_another_is_read_from_its_start(store: Store, tmp_path: Path) -> None:
    # A day's file begins with the same lines as the day before (a prefix without a time does
    # that): the same first 64 bytes, then other lines. It is no copy, and none of it is skipped.
    (tmp_path / "postgresql-Mon.log").write_bytes(entry(1) + b"".join(entry(i) for i in range(2, 6)))
    f = await follower(store, str(tmp_path / "*.log"))
    await f.poll()
    (tmp_path / "postgresql-Tue.log").write_bytes(entry(1) + entry(10) + entry(11))
    await f.poll()
    await f.drain()
    got = await messages(store)
    assert sorted(got) == sorted(f'relation "t{i}" does not exist' for i in (1, 2, 3, 4, 5, 1, 10, 11)), got


# logrotate's copytruncate with a glob that matches the copies: the change of the directory wakes a
# poll as soon as the copy is created, before its first bytes (or its last) are written.
@pytest.mark.parametrize("seen", [0, 40, 600], ids=["empty", "shorter-than-a-head", "part-written"])
async def test_a_copy_seen_while_it_is_written_stores_nothing_twice(store: Store, tmp_path: Path, seen: int) -> None:
    log = tmp_path / "pg.log"
    content = b"".join(entry(i) for i in range(1, 8))
    log.write_bytes(content)
    f = await follower(store, str(tmp_path / "pg.log*"))
    await f.poll()
    copy = tmp_path / "pg.log.1"
    copy.write_bytes(content[:seen])
    await f.poll()  # the copy as logrotate has written it so far
    with copy.open("ab") as out:
        out.write(content[seen:])
    log.write_bytes(entry(20))  # truncated in place, and the server writes on
    await f.poll()
    await f.drain()
    assert await messages(store) == rel(1, 2, 3, 4, 5, 6, 7, 20)


async def test_a_copy_of_less_than_was_read_is_taken_as_it_is_once_it_stops_growing(
    store: Store, tmp_path: Path
) -> None:
    # The server wrote entry 8 between logrotate's copy and its truncation, and we read it: the copy
    # never reaches where the original was read to. Once it has not grown for a while, it is a copy.
    log = tmp_path / "pg.log"
    content = b"".join(entry(i) for i in range(1, 8))
    log.write_bytes(content + entry(8))
    clock = FakeClock()
    f = await follower(store, str(tmp_path / "pg.log*"), clock)
    await f.poll()
    (tmp_path / "pg.log.1").write_bytes(content)
    log.write_bytes(entry(20))
    await f.poll()
    clock.advance(tail.COPY_WAIT_SECONDS)
    await f.poll()
    await f.drain()
    assert await messages(store) == rel(1, 2, 3, 4, 5, 6, 7, 8, 20)


async def test_a_copy_whose_original_is_truncated_is_whole_and_a_restart_does_not_read_it_again(
    store: Store, tmp_path: Path
) -> None:
    # logrotate copied pg.log, the server wrote entry 8 during the copy's fsync and we read it: the
    # copy, shorter than where pg.log was read to, waits. Then pg.log is truncated, and the daemon is
    # killed within the second the copy would still have waited: the restart read it from its start.
    log = tmp_path / "pg.log"
    content = b"".join(entry(i) for i in range(1, 8))
    log.write_bytes(content)
    clock = FakeClock()  # never advanced: no quiet second passes
    f = await follower(store, str(tmp_path / "pg.log*"), clock)
    await f.poll()
    copy = tmp_path / "pg.log.1"
    copy.write_bytes(content)
    with log.open("ab") as out:
        out.write(entry(8))
    await f.poll()  # entry 8 read from pg.log; the copy waits
    log.write_bytes(entry(20))  # truncated, and written on
    os.utime(copy, ns=(1, 1))  # (older than pg.log's truncation, as it is)
    await f.poll()
    abandon(f)  # killed
    g = await follower(store, str(tmp_path / "pg.log*"), clock)
    await g.poll()
    await g.drain()
    assert await messages(store) == rel(1, 2, 3, 4, 5, 6, 7, 8, 20)


async def test_a_copy_holding_more_than_was_read_waits_for_its_originals_truncation(
    store: Store, tmp_path: Path
) -> None:
    # A restart with a backlog: logrotate copies pg.log while the reader is behind. Read from where
    # pg.log was read to while pg.log was read on, the copy's bytes past that point were stored
    # twice (72 entries in a randomized run).
    log = tmp_path / "pg.log"
    log.write_bytes(b"".join(entry(i) for i in range(1, 4)))
    f = await follower(store, str(tmp_path / "pg.log*"))
    await f.poll()
    abandon(f)  # killed; entries 4-9 come while it is down
    with log.open("ab") as out:
        out.write(b"".join(entry(i) for i in range(4, 10)))
    copy = tmp_path / "pg.log.1"
    copy.write_bytes(log.read_bytes())  # logrotate copies; pg.log is truncated later
    os.utime(copy, ns=(1, 1))
    g = await follower(store, str(tmp_path / "pg.log*"))
    await g.poll()  # reads pg.log on from the stored offset; the copy waits
    await g.poll()
    log.write_bytes(entry(20))  # the truncation, and the server writes on
    await g.poll()
    await g.drain()
    assert await messages(store) == rel(*range(1, 10), 20)


async def test_a_short_new_file_that_starts_like_another_is_read_once_it_stops_growing(
    store: Store, tmp_path: Path
) -> None:
    # Too short to tell a copy from a new file by its head (the first line of another file): it may
    # be a copy still being written. A new file that stays as it is a while is not one; it is read.
    first = b"2026-11-22 10:00:01.000 UTC [101] LOG:  a\n"
    assert len(first) < tail.HEAD_BYTES
    (tmp_path / "postgresql-Mon.log").write_bytes(first + entry(2))
    clock = FakeClock()
    f = await follower(store, str(tmp_path / "*.log"), clock)
    await f.poll()
    (tmp_path / "postgresql-Tue.log").write_bytes(first)
    await f.poll()
    assert len(await messages(store)) == 2
    clock.advance(tail.COPY_WAIT_SECONDS)
    await f.poll()
    await f.drain()
    got = await messages(store)
    assert len(got) == 3 and got[2] == got[0], got


def _lz4_frame(data: bytes) -> bytes:
    # (no lz4 package here) a frame as lz4 writes it: magic, descriptor, then data blocks
    return b"\x04\x22\x4d\x18\x64\x40\xa7" + len(data).to_bytes(4, "little") + data


@pytest.mark.parametrize(
    ("name", "compress"),
    [
        ("gzip", gzip.compress),
        ("bzip2", bz2.compress),
        ("xz", lzma.compress),
        ("zstd", lambda data: zstandard.ZstdCompressor().compress(data)),
        ("lz4", _lz4_frame),
    ],
)
async def test_a_rotated_file_compressed_in_place_is_skipped_and_named(
    store: Store, tmp_path: Path, name: str, compress: Callable[[bytes], bytes]
) -> None:
    # Debian's logrotate rule (compress, delaycompress) with the glob docs/operations.md recommends:
    # the .gz of a rotated file matched it, and its bytes were stored as `other` lines.
    log = tmp_path / "postgresql-15-main.log"
    log.write_bytes(entry(1))
    f = await follower(store, str(tmp_path / "postgresql-15-main.log*"))
    await f.poll()
    with log.open("ab") as out:
        out.write(entry(3))
    (tmp_path / "postgresql-15-main.log.2.gz").write_bytes(compress(entry(2) * 50))  # the newest file
    await f.poll()
    assert f.status.file == str(log)
    await f.poll()
    assert f.status.state == "reading"
    assert f"postgresql-15-main.log.2.gz ({name}-compressed, not log text)" in (f.status.reason or "")
    await f.drain()
    assert await messages(store) == ['relation "t1" does not exist', 'relation "t3" does not exist']


async def test_a_file_renamed_in_the_same_tick_as_the_new_one_appears_is_read_first(
    store: Store, tmp_path: Path
) -> None:
    # logrotate renames pg.log to pg.log.0 and the server opens a new pg.log within one tick of
    # the file system's clock: both have the same mtime, and "pg.log" sorts before "pg.log.0".
    log = tmp_path / "pg.log"
    log.write_bytes(entry(1))
    f = await follower(store, str(tmp_path / "pg.log*"))
    await f.poll()
    log.rename(tmp_path / "pg.log.0")
    with (tmp_path / "pg.log.0").open("ab") as old:
        old.write(entry(2))
    log.write_bytes(entry(3))
    tick = (tmp_path / "pg.log.0").stat().st_mtime_ns
    for path in (tmp_path / "pg.log.0", log):
        os.utime(path, ns=(tick, tick))
    await f.poll()
    await f.drain()
    assert await messages(store) == rel(1, 2, 3)


# A container's log: a stderr line in two records (the runtime's partial `P`, then `F`) with a
# stdout line between them; the F record is written after the others.
CRI_T = b"2026-11-22T10:00:00.5Z "
CRI_HEAD = (
    CRI_T
    + b"stderr F 2026-11-22 10:00:00.000 UTC [7] LOG:  first\n"
    + CRI_T
    + b"stderr P 2026-11-22 10:00:00.100 UTC [7] LOG:  statement: select 'aaa\n"
    + CRI_T
    + b"stdout F hello-from-stdout\n"
)
CRI_END = CRI_T + b"stderr F bbb'\n"


async def cri_finished_after_a_restart(store: Store, log: Path) -> None:
    """The F record written, then read by a new follower (the next run), which checks the store:
    the stderr line whole, the stdout line once, in the order they start."""
    with log.open("ab") as out:
        out.write(CRI_END)
    g = await follower(store, str(log), fmt="cri")
    g.apply_settings(True, True)
    await g.poll()
    await g.drain()
    assert await messages(store) == ["first", "statement", "hello-from-stdout"]
    assert [d["statement"] for d in await docs(store)] == [None, "select 'aaabbb'", None]


async def test_a_crash_while_a_container_line_is_in_pieces_stores_the_other_streams_line_once(
    store: Store, tmp_path: Path
) -> None:
    log = tmp_path / "0.log"
    log.write_bytes(CRI_HEAD)
    clock = FakeClock()
    f = await follower(store, str(log), clock, fmt="cri")
    f.apply_settings(True, True)  # full_text: the messages are the test's
    await f.poll()
    clock.advance(5)  # quiet: the stdout line is a whole entry, and still waits for the stderr line
    await f.poll()
    assert await messages(store) == ["first"]
    abandon(f)  # kill -9
    await cri_finished_after_a_restart(store, log)


async def test_a_stop_while_a_container_line_is_in_pieces_leaves_it_for_the_next_run_whole(
    store: Store, tmp_path: Path
) -> None:
    """The file ends with a newline, but the stderr line is not finished: a clean stop does not cut it."""
    log = tmp_path / "0.log"
    log.write_bytes(CRI_HEAD)
    f = await follower(store, str(log), fmt="cri")
    f.apply_settings(True, True)
    await f.poll()
    await f.drain()  # SIGTERM
    await cri_finished_after_a_restart(store, log)


async def test_a_line_in_pieces_across_the_runtimes_rotation_is_stored_once_the_old_file_is_left(
    store: Store, tmp_path: Path
) -> None:
    # containerd reopened 0.log (the kubelet renamed it within the glob) between the pieces of the
    # stderr line: the F record went to the new file. The old file's reader held the first piece,
    # and the stdout line behind it, until the old file left the glob at the next rotation.
    log = tmp_path / "0.log"
    log.write_bytes(CRI_HEAD)
    clock = FakeClock()
    f = await follower(store, str(tmp_path / "0.log*"), clock, fmt="cri")
    f.apply_settings(True, True)
    await f.poll()
    log.rename(tmp_path / "0.log.20261122-100001")
    log.write_bytes(CRI_END + CRI_T + b"stderr F 2026-11-22 10:00:01.000 UTC [7] LOG:  next\n")
    os.utime(tmp_path / "0.log.20261122-100001", ns=(1, 1))
    await f.poll()
    assert "hello-from-stdout" not in await messages(store)  # (the pieces may still come in the old file)
    clock.advance(ROTATE_WAIT_SECONDS)
    await f.poll()
    got = await messages(store)
    old = [m for m in got if m in ("first", "statement", "hello-from-stdout")]
    assert old == ["first", "statement", "hello-from-stdout"], got
    assert sorted(got) == sorted([*old, "bbb'", "next"]), got  # the line cut in two at the rotation


async def test_a_stop_while_a_syslog_message_may_still_have_lines_to_come_leaves_it_for_the_next_run(
    store: Store, tmp_path: Path
) -> None:
    """PostgreSQL sends a message's DETAIL as a syslog message of its own, which may come after the stop."""
    when = "2026-11-22T10:00:00.000000+00:00 db1 postgres[77]: "
    log = tmp_path / "syslog"
    error = 'ERROR:  duplicate key value violates unique constraint "t_pkey"'
    log.write_bytes(f"{when}[4-1] 2026-11-22 10:00:00.000 UTC [77] {error}\n".encode())
    f = await follower(store, str(log), fmt="syslog")
    f.apply_settings(True, True)
    await f.poll()
    await f.drain()
    with log.open("ab") as out:
        out.write(f"{when}[4-2] 2026-11-22 10:00:00.000 UTC [77] DETAIL:  Key (id)=(1) already exists.\n".encode())
    clock = FakeClock()
    g = await follower(store, str(log), clock, fmt="syslog")
    g.apply_settings(True, True)
    await g.poll()
    clock.advance(2)  # and no [4-3]: the message is whole
    await g.poll()
    await g.drain()
    [doc] = await docs(store)
    assert doc["message"] == 'duplicate key value violates unique constraint "t_pkey"'
    assert doc["detail"] == "Key (id)=(1) already exists."


async def docs(store: Store) -> list[dict[str, Any]]:
    page = await store.list_lines(1, LineQuery(limit=500))
    return [orjson.loads(d) for d in reversed(page.docs)]
