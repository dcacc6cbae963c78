"""The store: what a user of the Logs API relies on (order, paging, filters, search, retention)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import threading
from pathlib import Path

import orjson
import pytest

from forwarder import metrics
from forwarder.clock import FakeClock
from forwarder.config import DatabaseConfig, LogSourceConfig, StoreConfig
from forwarder.model import KINDS, LogLine, group_key
from forwarder.store import DatabaseSettings, LineQuery, SourceFile, Store, open_sync, schema
from forwarder.store import destinations as D
from forwarder.store import lines as L
from forwarder.store import state as S
from forwarder.store import store as store_module

T0 = 1_800_000_000_000_000  # microseconds


def db_config(db_id: str = "main", name: str = "Main") -> DatabaseConfig:
    return DatabaseConfig(id=db_id, name=name, host="db1", log=LogSourceConfig(path="/nonexistent/*.log"))


def line(i: int, kind: str = "other", message: str | None = None, **kw: object) -> LogLine:
    return LogLine(
        time_us=T0 + i * 1_000_000,
        severity="ERROR" if kind == "error" else "LOG",
        kind=kind,  # type: ignore[arg-type]
        message=message if message is not None else f"message number {i}",
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
async def store(tmp_path: Path) -> Store:
    clock = FakeClock(start=T0 / 1_000_000 + 3600)
    s = Store(StoreConfig(path=tmp_path / "f.db", max_bytes=1 << 30), clock)
    await s.start()
    yield s  # type: ignore[misc]
    await s.aclose()


def ids(docs: list[bytes]) -> list[int]:
    return [int(orjson.loads(d)["id"]) for d in docs]


async def test_lines_come_back_newest_first_with_every_spec_field(store: Store) -> None:
    ident = await store.register_database(db_config())
    await store.append(ident, [line(i) for i in range(5)], [], 0)
    page = await store.list_lines(ident.code, LineQuery(limit=10))
    got = [orjson.loads(d) for d in page.docs]
    assert [int(g["id"]) for g in got] == sorted((int(g["id"]) for g in got), reverse=True)
    assert got[0]["message"] == "message number 4"
    assert list(got[0]) == [
        "id",
        "time",
        "host",
        "database_id",
        "database_name",
        "severity",
        "kind",
        "sqlstate",
        "message",
        "detail",
        "hint",
        "context",
        "statement",
        "user",
        "database",
        "application",
        "client",
        "pid",
        "duration_ms",
        "redacted",
    ]
    assert got[0]["host"] == "db1" and got[0]["database_id"] == "main" and got[0]["database_name"] == "Main"
    assert got[-1]["time"] == "2027-01-15T08:00:00.000Z"
    assert page.has_more is False


async def test_polling_with_after_never_misses_a_line(store: Store) -> None:
    ident = await store.register_database(db_config())
    await store.append(ident, [line(i) for i in range(3)], [], 0)
    first = await store.list_lines(ident.code, LineQuery(limit=500))
    seen = ids(first.docs)
    after = max(seen)
    # 1,234 lines arrive between two polls: more than one page.
    await store.append(ident, [line(i) for i in range(3, 1237)], [], 0)
    while True:
        page = await store.list_lines(ident.code, LineQuery(limit=100, after=after))
        got = ids(page.docs)
        assert got == sorted(got, reverse=True)  # each page newest first
        if not got:
            break
        seen.extend(got)
        after = max(got)
    assert sorted(seen) == list(range(1, 1238))


async def test_before_pages_back_through_everything_once(store: Store) -> None:
    ident = await store.register_database(db_config())
    await store.append(ident, [line(i) for i in range(250)], [], 0)
    seen: list[int] = []
    before = None
    while True:
        page = await store.list_lines(ident.code, LineQuery(limit=100, before=before))
        seen.extend(ids(page.docs))
        if not page.has_more:
            break
        before = min(ids(page.docs))
    assert seen == list(range(250, 0, -1))


async def test_lines_of_one_database_never_show_in_another(store: Store) -> None:
    a = await store.register_database(db_config("a", "A"))
    b = await store.register_database(db_config("b", "B"))
    await store.append(a, [line(1, message="from a")], [], 0)
    await store.append(b, [line(2, message="from b")], [], 0)
    page = await store.list_lines(b.code, LineQuery())
    assert [orjson.loads(d)["message"] for d in page.docs] == ["from b"]


async def test_kind_filter_and_aliases(store: Store) -> None:
    ident = await store.register_database(db_config())
    await store.append(ident, [line(i, kind=k) for i, k in enumerate(KINDS)], [], 0)

    async def kinds_of(names: frozenset[str]) -> set[str]:
        page = await store.list_lines(ident.code, LineQuery(kinds=names))  # type: ignore[arg-type]
        return {orjson.loads(d)["kind"] for d in page.docs}

    assert await kinds_of(frozenset({"deadlock"})) == {"deadlock"}
    from forwarder.model import expand_kinds

    assert await kinds_of(expand_kinds(["errors"])) == {"error", "deadlock", "auth_failure", "too_many_connections"}
    assert await kinds_of(expand_kinds(["locks"])) == {"lock_wait", "deadlock"}
    assert await kinds_of(expand_kinds(["maintenance"])) == {"checkpoint", "autovacuum", "temp_file"}


async def test_search_finds_the_same_lines_before_and_after_indexing(store: Store) -> None:
    ident = await store.register_database(db_config())
    await store.append(
        ident,
        [
            line(1, message='duplicate key value violates unique constraint "users_email_key"'),
            line(2, message='relation "orders" does not exist'),
            line(3, message="checkpoint starting: time", detail="Café résumé"),
            line(4, message="other", statement="SELECT * FROM orders WHERE id = $1"),
        ],
        [],
        0,
    )

    async def search(q: str) -> list[int]:
        return ids((await store.list_lines(ident.code, LineQuery(q=q))).docs)

    queries = ["duplicate key", "DUPLIC", "orders", "cafe", "users_email", "nothing-here", "= $", '"']
    before = {q: await search(q) for q in queries}
    assert await store.index_once() == 4
    after = {q: await search(q) for q in queries}
    assert before == after
    assert after["duplicate key"] == [1] and after["DUPLIC"] == [1]
    assert after["orders"] == [4, 2]
    assert after["cafe"] == [3]
    assert after["nothing-here"] == []
    assert after["= $"] == [4]  # punctuation only: a substring match
    assert after['"'] == [2, 1]


async def test_substring_searches_wait_for_each_other_not_the_other_reads(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A search with no word (`::`) reads every line's document: 18 s at 5 million lines. Three at
    # once held both reader threads, and a plain page waited 43 s behind them.
    ident = await store.register_database(db_config())
    await store.append(ident, [line(i, message=f"cast {i}::int") for i in range(1, 4)], [], 0)
    scanning = threading.Event()
    go_on = threading.Event()
    text_of = L.search_text

    def slow(fields: object) -> str:  # a scan of millions of lines, held until the test lets it go
        scanning.set()
        go_on.wait(10)
        return text_of(fields)  # type: ignore[arg-type]

    monkeypatch.setattr(L, "search_text", slow)
    scans = [asyncio.create_task(store.list_lines(ident.code, LineQuery(q="::"))) for _ in range(3)]
    try:
        await asyncio.to_thread(scanning.wait, 10)
        page = await asyncio.wait_for(store.list_lines(ident.code, LineQuery(limit=2)), 5)
        assert ids(page.docs) == [3, 2]
    finally:
        go_on.set()
    assert [ids(p.docs) for p in await asyncio.gather(*scans)] == [[3, 2, 1]] * 3


async def test_time_window_is_from_inclusive_to_exclusive(store: Store) -> None:
    ident = await store.register_database(db_config())
    await store.append(ident, [line(i) for i in range(10)], [], 0)
    page = await store.list_lines(ident.code, LineQuery(from_us=T0 + 3_000_000, to_us=T0 + 6_000_000))
    assert [orjson.loads(d)["message"] for d in page.docs] == [f"message number {i}" for i in (5, 4, 3)]


async def test_groups_count_repeats_with_first_last_and_newest_line(store: Store) -> None:
    ident = await store.register_database(db_config())
    lines = [line(i, kind="error", message="deadlock-ish thing") for i in range(3)]
    lines += [line(10, kind="other", message="once")]
    await store.append(ident, lines, [], 0)
    groups = await store.groups(ident.code, T0, 10)
    assert [(g.count, g.kind) for g in groups] == [(3, "error"), (1, "other")]
    g = groups[0]
    assert (g.first_us, g.last_us) == (T0, T0 + 2_000_000)
    assert g.key == group_key("error", "deadlock-ish thing")
    assert orjson.loads(g.newest_doc)["time"] == "2027-01-15T08:00:02.000Z"
    page = await store.list_lines(ident.code, LineQuery(group=g.key))
    assert len(page.docs) == 3


async def test_overview_numbers_count_by_kind_and_usage(store: Store) -> None:
    ident = await store.register_database(db_config())
    await store.append(ident, [line(1, kind="error"), line(2, kind="error"), line(3, kind="connection")], [], 1234)
    numbers = await store.overview_numbers(ident.code, T0, "2027-01-15")
    counts = numbers.counts
    assert counts["error"] == 2 and counts["connection"] == 1 and counts["deadlock"] == 0
    assert set(counts) == set(KINDS)
    assert (numbers.usage_lines, numbers.usage_bytes) == (3, 1234)


async def test_retention_deletes_lines_older_than_retention_days(tmp_path: Path) -> None:
    clock = FakeClock(start=T0 / 1_000_000)
    store = Store(StoreConfig(path=tmp_path / "r.db", retention_days=1), clock)
    await store.start()
    try:
        ident = await store.register_database(db_config())
        await store.append(ident, [line(0), line(3600)], [], 0)
        await store.index_once()
        clock.advance(86_400 + 1800)  # line 0 is 24.5 h old, line 3600 is 23.5 h old
        assert await store.retention_once() == 1
        page = await store.list_lines(ident.code, LineQuery(q="message"))
        assert [orjson.loads(d)["message"] for d in page.docs] == ["message number 3600"]
    finally:
        await store.aclose()


async def test_retention_counts_as_dropped_only_lines_a_destination_has_not_accounted_for(tmp_path: Path) -> None:
    clock = FakeClock(start=T0 / 1_000_000)
    store = Store(StoreConfig(path=tmp_path / "r.db", retention_days=1), clock)
    await store.start()
    try:
        ident = await store.register_database(db_config())
        dest = D.Destination("d", "fake", "fake", True, {}, D.LineFilter(), None, clock.now(), clock.now())
        await store.add_destination(dest, org="default", actor="test")  # its cursor: 0, before every line
        await store.append(ident, [line(i) for i in range(14)], [], 0)
        # A batch of lines 1-10 was sent; 9 were delivered and line 8 waits its retry (an Elasticsearch
        # item's 429, a failed request of several): the batch narrowed, the cursor stays before it.
        narrowed = D.DeliveryState(cursor=0, inflight_id="dlv_x", inflight_lines=(8,), inflight_upto=10, attempts=1)
        await store.save_delivery_state("d", narrowed, 9, 0)
        labels = {"destination_id": "d", "type": "fake", "reason": "retention"}
        before = metrics.REGISTRY.get_sample_value("forwarder_destination_lines_dropped_total", labels) or 0.0
        clock.advance(2 * 86_400)
        assert await store.retention_once() == 14
        found = await store.destination("d")
        assert found is not None
        # Lines 11-14 only: 1-10 are delivered, or in flight (counted by the loop when it finds them gone).
        assert (found[1].sent_lines, found[1].dropped_lines) == (9, 4)
        after = metrics.REGISTRY.get_sample_value("forwarder_destination_lines_dropped_total", labels) or 0.0
        assert after - before == 4
    finally:
        await store.aclose()


async def test_retention_keeps_the_store_under_max_bytes(tmp_path: Path) -> None:
    clock = FakeClock(start=T0 / 1_000_000)
    store = Store(StoreConfig(path=tmp_path / "s.db", max_bytes=2 << 20), clock)
    await store.start()
    try:
        ident = await store.register_database(db_config())
        # Messages that do not compress: each line keeps its ~400 bytes in the store.
        for batch in range(20):
            lines = [line(n, message=os.urandom(200).hex()) for n in range(batch * 500, batch * 500 + 500)]
            await store.append(ident, lines, [], 0)
        assert await store.retention_once() > 0
        numbers = await store.overview_numbers(ident.code, 0, "2027-01-15")
        assert numbers.used_bytes <= 2 << 20
        newest = await store.list_lines(ident.code, LineQuery(limit=1))
        assert ids(newest.docs) == [10_000]  # the newest line survives; the oldest went
        # The time spans of the ids gone went with them (lines.py, "time spans").
        oldest, first_span = await store._read(
            lambda c: c.execute("SELECT (SELECT min(id) FROM lines), (SELECT min(span) FROM line_spans)").fetchone()
        )
        assert oldest > 4096 and first_span == oldest >> L.SPAN_SHIFT
    finally:
        await store.aclose()


async def test_retention_deletes_a_chunk_only_while_the_checkpoints_are_at_most_a_chunk_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Deleting a day writes the WAL faster than checkpoints twice a second copy it; the COMMIT
    # that took it past WRITER_CHECKPOINT_PAGES then copied the rest itself, holding appends
    # 60-110 ms at 10 million lines. Before each chunk, retention waits until a checkpoint that
    # began after the chunk before the last one has ended.
    monkeypatch.setattr(store_module, "RETENTION_CHUNK", 10)
    clock = FakeClock(start=T0 / 1_000_000)
    store = Store(StoreConfig(path=tmp_path / "r.db", retention_days=1), clock)
    events: list[tuple[str, int]] = []  # (what, the number of deletes before it began)
    deletes = 0
    run_checkpoint, delete = store._run_checkpoint, store._delete

    def checkpoint(cut_wal: bool) -> bool:
        began = deletes
        done = run_checkpoint(cut_wal)
        events.append(("checkpoint", began))
        return done

    def deleting(conn: sqlite3.Connection, rows: list[tuple[int, int, int]], emptying: frozenset[int]) -> int:
        nonlocal deletes
        if rows:
            events.append(("delete", deletes))
            deletes += 1
        return delete(conn, rows, emptying)

    monkeypatch.setattr(store, "_run_checkpoint", checkpoint)
    monkeypatch.setattr(store, "_delete", deleting)
    await store.start()
    try:
        ident = await store.register_database(db_config())
        await store.append(ident, [line(i) for i in range(55)], [], 0)
        await store.index_once()
        clock.advance(2 * 86_400)
        assert await store.retention_once() == 55
        assert deletes == 6
        for k in range(2, deletes):
            # A checkpoint that began once delete k-2 was done ended before delete k began.
            before_k = events[: events.index(("delete", k))]
            assert any(what == "checkpoint" and began >= k - 1 for what, began in before_k), str(events)
    finally:
        await store.aclose()


async def test_offsets_are_committed_with_the_lines(store: Store) -> None:
    ident = await store.register_database(db_config())
    sf = SourceFile(dev=1, ino=2, head=b"2026-", path="/x/pg.log", offset=4096)
    await store.append(ident, [line(1)], [sf], 4096)
    assert await store.source_files("main") == [sf]
    await store.append(ident, [], [SourceFile(1, 2, b"2026-", "/x/pg.log", 8192)], 4096)
    assert [f.offset for f in await store.source_files("main")] == [8192]


async def test_a_failed_append_stores_neither_lines_nor_offsets(store: Store) -> None:
    ident = await store.register_database(db_config())
    bad = LogLine(time_us=T0, severity="LOG", kind="no-such-kind", message="x")  # type: ignore[arg-type]
    with pytest.raises(KeyError):
        await store.append(ident, [line(1), bad], [SourceFile(1, 2, b"", "/x", 99)], 99)
    assert await store.source_files("main") == []
    assert (await store.list_lines(ident.code, LineQuery())).docs == []


async def test_settings_are_seeded_once_then_kept_and_audited(store: Store) -> None:
    await store.register_database(db_config())
    assert await store.get_settings("main") == DatabaseSettings(enabled=True, full_text=False)
    await store.put_settings("main", DatabaseSettings(False, True), org="default", actor="key:abc")
    # A restart registers the database again: the stored settings win over the config's initial ones.
    await store.register_database(db_config())
    assert await store.get_settings("main") == DatabaseSettings(enabled=False, full_text=True)
    [record] = await store.audit_records()
    assert record["action"] == "logs.settings_changed" and record["actor"] == "key:abc"


def test_keys_are_stored_hashed_and_revocable(tmp_path: Path) -> None:
    conn = open_sync(tmp_path / "k.db")
    key, full = S.create_key(conn, "ci", "read-only", 1)
    assert S.verify_key(conn, full) == key
    assert S.verify_key(conn, full[:-1] + ("A" if full[-1] != "A" else "B")) is None
    assert S.verify_key(conn, "fwd_nope_x") is None and S.verify_key(conn, "garbage") is None
    stored = conn.execute("SELECT * FROM api_keys").fetchall()
    # The secret is what follows the prefix and the id; token_urlsafe may put "_" in it too.
    assert full.encode() not in repr(stored).encode() and full.split("_", 2)[2] not in repr(stored)
    assert S.revoke_key(conn, key.id, 2) is True
    assert S.verify_key(conn, full) is None


def test_migrations_run_once_and_refuse_a_newer_schema(tmp_path: Path) -> None:
    path = str(tmp_path / "m.db")
    conn = schema.connect(path)
    assert schema.migrate(conn) == schema.SCHEMA_VERSION
    assert schema.migrate(conn) == schema.SCHEMA_VERSION  # no error: nothing to apply
    conn.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
    with pytest.raises(schema.SchemaTooNew):
        schema.migrate(conn)
    conn.close()
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_numbers_do_not_split_a_group(store: Store) -> None:
    ident = await store.register_database(db_config())
    await store.append(
        ident,
        [
            line(1, kind="checkpoint", message="checkpoint complete: wrote 12 buffers (0.1%); write=0.5 s"),
            line(2, kind="checkpoint", message="checkpoint complete: wrote 907 buffers (5.5%); write=26.9 s"),
            line(3, kind="checkpoint", message="checkpoint starting: time"),
        ],
        [],
        0,
    )
    groups = await store.groups(ident.code, T0, 10)
    assert sorted(g.count for g in groups) == [1, 2]


async def test_store_files_are_private_whatever_the_umask(tmp_path: Path) -> None:
    """The store holds log text: the database file and SQLite's -wal and -shm files are 0600."""
    old_umask = os.umask(0o022)  # a login shell's usual umask, under which SQLite makes 0644 files
    store = Store(StoreConfig(path=tmp_path / "data" / "s.db"), FakeClock())
    try:
        await store.start()
        await store.register_database(DatabaseConfig(id="main", name="main", log=LogSourceConfig(path="/x/*.log")))
        conn = open_sync(tmp_path / "cli" / "s.db")  # the CLI's keys commands may create the store too
        # While they are open, as the daemon keeps them: a clean close removes -wal and -shm.
        made = [*(tmp_path / "data").iterdir(), *(tmp_path / "cli").iterdir()]
        assert sorted(p.name for p in made) == ["s.db", "s.db", "s.db-shm", "s.db-shm", "s.db-wal", "s.db-wal"]
        assert {str(p): oct(stat.S_IMODE(p.stat().st_mode)) for p in made} == {str(p): "0o600" for p in made}
        assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700
        conn.close()
    finally:
        os.umask(old_umask)
        await store.aclose()


async def test_an_older_world_readable_store_is_made_private(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    open_sync(path).close()
    path.chmod(0o644)
    store = Store(StoreConfig(path=path), FakeClock())
    await store.start()
    await store.aclose()
    # Others lose read access; the group keeps what the operator gave it (a service's group may read).
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


async def test_append_rate_counts_the_lines_of_the_last_two_seconds(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Event-loop time (a CPU-share signal, not time logic), driven here by a stand-in loop clock.
    loop = asyncio.get_running_loop()
    now = [loop.time()]
    monkeypatch.setattr(loop, "time", lambda: now[0])
    ident = await store.register_database(db_config())
    assert store.append_rate() == 0
    await store.append(ident, [line(i) for i in range(3000)], [], 0)
    now[0] += 1.0
    await store.append(ident, [line(i) for i in range(1000)], [], 0)
    assert store.append_rate() == 2000  # 4,000 lines over the 2 s window
    now[0] += 1.5
    assert store.append_rate() == 500  # the first append left the window
    now[0] += 1.0
    assert store.append_rate() == 0


async def test_the_database_file_holds_appended_lines_without_waiting_for_the_write_ahead_log_to_fill(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A checkpoint copies the write-ahead log into the database file; the writer's COMMIT ran it
    # once ~40 MiB had accumulated, holding appends meanwhile. The checkpoint thread runs it soon
    # after writes, beside them: the file alone (what a copy without its -wal has) has the lines.
    monkeypatch.setattr(store_module, "CHECKPOINT_SECONDS", 0.0)  # after every write
    ident = await store.register_database(db_config())
    await store.append(ident, [line(i) for i in range(3)], [], 0)
    await store.append(ident, [line(3)], [], 0)
    # A checkpoint that was running when a write ended may have begun before it: the write is
    # copied by the next one, which starts when that one ends (waiting for the checkpoint
    # thread's file I/O, not for clock logic).
    async with asyncio.timeout(10):
        while store._unchecked_writes or store._checkpoint is not None:
            await store.checkpoint_finished()
            await asyncio.sleep(0.01)
    copy = tmp_path / "copy.db"
    copy.write_bytes((tmp_path / "f.db").read_bytes())
    conn = sqlite3.connect(copy)
    try:
        assert conn.execute("SELECT count(*) FROM lines").fetchone()[0] == 4
    finally:
        conn.close()


class CheckpointTime:
    """Event-loop time, which schedules checkpoints and the WAL file's cut, as a stand-in; each
    checkpoint right after its write (CHECKPOINT_SECONDS 0), and any WAL file large enough to cut."""

    def __init__(self, store: Store, wal: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(store_module, "CHECKPOINT_SECONDS", 0.0)
        monkeypatch.setattr(store_module, "WAL_IDLE_BYTES", 0)
        loop = asyncio.get_running_loop()
        # Not the loop's own time as a start: under libfaketime (make test-week-ahead) the monotonic
        # clock reads ~1.8e9 s, where a float's step (2.4e-7) is wider than the loop's clock
        # resolution (1e-9), so a timer due "now" is never taken as due while this time stands still.
        self.now = 1000.0
        monkeypatch.setattr(loop, "time", lambda: self.now)
        self.store, self.wal = store, wal

    async def settled(self) -> None:
        """Run what is due now: the checkpoint thread's file I/O and what it schedules."""
        for _ in range(100):
            await asyncio.sleep(0)
            while self.store._checkpoint is not None or self.store._later is not None:
                await self.store.checkpoint_finished()
                await asyncio.sleep(0)

    async def advance(self, seconds: float) -> None:
        self.now += seconds
        await self.settled()


@pytest.fixture
async def checkpoint_time(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CheckpointTime:
    return CheckpointTime(store, tmp_path / "f.db-wal", monkeypatch)


async def test_the_last_writes_of_a_burst_are_checkpointed_and_a_large_write_ahead_log_is_cut_in_a_pause(
    store: Store, tmp_path: Path, checkpoint_time: CheckpointTime
) -> None:
    # Writes during a checkpoint, or too soon after one, are copied by one scheduled for them: the
    # end of a backlog does not wait for a next write. A WAL file past WAL_IDLE_BYTES (0 here, so
    # any) is cut once writes have paused for WAL_CUT_QUIET_SECONDS, never between two writes:
    # cutting holds the writer.
    t, quiet = checkpoint_time, store_module.WAL_CUT_QUIET_SECONDS
    ident = await store.register_database(db_config())
    for i in range(10):  # writes a second apart: the store never pauses for 2 s
        await store.append(ident, [line(j) for j in range(i * 50, i * 50 + 50)], [], 0)
        await t.settled()
        assert t.wal.stat().st_size > 0
        await t.advance(quiet / 2)
    await t.advance(quiet)
    assert t.wal.stat().st_size == 0
    conn = sqlite3.connect(tmp_path / "f.db")
    try:
        assert conn.execute("SELECT count(*) FROM lines").fetchone()[0] == 500
    finally:
        conn.close()


async def test_the_write_ahead_log_is_cut_in_the_pause_after_the_last_write_whenever_that_came(
    store: Store, checkpoint_time: CheckpointTime
) -> None:
    # The cut is scheduled WAL_CUT_QUIET_SECONDS after a checkpoint; a write before it is due puts
    # it off until that many seconds after the write, even when no checkpoint comes after.
    t, quiet = checkpoint_time, store_module.WAL_CUT_QUIET_SECONDS
    ident = await store.register_database(db_config())
    await store.append(ident, [line(j) for j in range(50)], [], 0)
    await t.settled()  # its checkpoint schedules the cut
    await t.advance(quiet * 3 / 4)
    await store.append(ident, [line(j) for j in range(50, 100)], [], 0)  # the last write
    await t.settled()
    await t.advance(quiet / 2)  # the cut is due, but writes paused only 1 s
    assert t.wal.stat().st_size > 0
    await t.advance(quiet / 2)  # 2 s since the last write
    assert t.wal.stat().st_size == 0


async def test_a_cut_of_the_write_ahead_log_that_a_reader_held_up_is_tried_again_at_the_next_pause(
    store: Store, tmp_path: Path, checkpoint_time: CheckpointTime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Cutting waits only WAL_TRUNCATE_WAIT_MS for readers still on the WAL (an API request, a
    # probe). Had it then given up for good, an idle store would keep its WAL file until the next
    # burst of writes; it tries again after the next WAL_CUT_QUIET_SECONDS without writes.
    t, quiet = checkpoint_time, store_module.WAL_CUT_QUIET_SECONDS
    ident = await store.register_database(db_config())
    await t.settled()
    # The lines' checkpoint waits a second, so the reader below begins on frames not copied yet: a
    # reader that begins once every frame is copied reads the database file alone, and a cut does
    # not wait for it (sqlite.org/wal.html, read mark 0).
    monkeypatch.setattr(store_module, "CHECKPOINT_SECONDS", 1.0)
    await store.append(ident, [line(j) for j in range(50)], [], 0)
    reader = sqlite3.connect(tmp_path / "f.db", isolation_level=None)
    try:
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM lines").fetchone()[0] == 50  # reading the WAL's frames
        await t.advance(1.0)  # the lines' checkpoint copies them; the reader stays on the WAL
        await t.advance(quiet)
        assert t.wal.stat().st_size > 0  # held up by the reader
        reader.execute("COMMIT")
        await t.advance(quiet)
        assert t.wal.stat().st_size == 0
    finally:
        reader.close()


async def test_a_store_closed_while_another_process_has_it_open_is_whole_without_its_write_ahead_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "CHECKPOINT_SECONDS", 3600.0)  # only after the first write
    clock = FakeClock(start=T0 / 1_000_000 + 3600)
    store = Store(StoreConfig(path=tmp_path / "f.db", max_bytes=1 << 30), clock)
    await store.start()
    other = sqlite3.connect(tmp_path / "f.db")  # a backup tool, the CLI: SQLite's copy at close is the last one's
    try:
        other.execute("SELECT count(*) FROM lines").fetchone()
        ident = await store.register_database(db_config())
        await store.checkpoint_finished()
        await store.append(ident, [line(i) for i in range(5)], [], 0)
        await store.aclose()
        copy = tmp_path / "copy.db"
        copy.write_bytes((tmp_path / "f.db").read_bytes())
        conn = sqlite3.connect(copy)
        try:
            assert conn.execute("SELECT count(*) FROM lines").fetchone()[0] == 5
        finally:
            conn.close()
    finally:
        other.close()


@pytest.mark.parametrize(
    ("fingerprint", "column"),
    [
        ("0123456789abcdef", bytes.fromhex("0123456789abcdef")),  # what pglog.normalize makes: 8 bytes
        ("ffffffffffffffff", b"\xff" * 8),
        (None, None),
        # anything else stays text, as every fingerprint of a store written before does
        ("0123456789ABCDEF", "0123456789ABCDEF"),
        ("0123456789abcde", "0123456789abcde"),
        ("not a fingerprint", "not a fingerprint"),
    ],
)
def test_a_fingerprint_is_kept_as_its_8_bytes_and_read_back_as_it_was(
    fingerprint: str | None, column: str | bytes | None
) -> None:
    assert L.fingerprint_column(fingerprint) == column
    assert L.column_fingerprint(column) == fingerprint
