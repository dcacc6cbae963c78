"""What the overview says about the log's times: a server whose log_timezone is not the configured
`timezone`, and entries stamped with the time they were read; through both kinds of reader."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from forwarder import metrics
from forwarder.clock import FakeClock
from forwarder.config import DatabaseConfig, LogSourceConfig
from forwarder.sources.parsing import ParseWorker
from forwarder.sources.tail import DatabaseFollower
from forwarder.store import LineQuery, Store

# Three entries a server with log_timezone = 'America/New_York' wrote in winter (EST = UTC-5).
NEW_YORK = (
    b"2026-01-10 07:00:00.250 EST [100] LOG:  checkpoint starting: time\n"
    b'2026-01-10 07:00:01.000 EST [101] ERROR:  relation "t" does not exist\n'
    b"2026-01-10 07:00:01.000 EST [101] STATEMENT:  SELECT * FROM t\n"
    b"2026-01-10 07:00:02.000 EST [100] LOG:  checkpoint complete\n"
)


async def read_once(
    store: Store, tmp_path: Path, data: bytes, *, timezone: str, prefix: str = "%m [%p] ", worker: bool = False
) -> DatabaseFollower:
    (tmp_path / "pg.log").write_bytes(data)
    log = LogSourceConfig(path=str(tmp_path / "*.log"), line_prefix=prefix, timezone=timezone)
    db = DatabaseConfig(id="tz", name="tz", host="h", log=log)
    pool = ParseWorker() if worker else None
    f = DatabaseFollower(db, await store.register_database(db), store, FakeClock(), pool)
    try:
        await f.poll()
        for file in f._files.values():
            await f._finish(file)
    finally:
        for file in f._files.values():
            file.close()
        if pool is not None:
            await pool.aclose()
    return f


async def stored(store: Store) -> list[tuple[str, str]]:
    page = await store.list_lines(1, LineQuery(limit=50))
    return [(doc["time"], doc["message"]) for doc in map(orjson.loads, reversed(page.docs))]


def fallbacks(reason: str) -> float:
    return (
        metrics.REGISTRY.get_sample_value(
            "forwarder_ingest_time_fallbacks_total", {"database_id": "tz", "reason": reason}
        )
        or 0.0
    )


@pytest.mark.parametrize("worker", [False, True], ids=["in-process", "parse-worker"])
async def test_a_log_in_another_zone_is_read_right_and_the_overview_says_so(
    store: Store, tmp_path: Path, worker: bool
) -> None:
    before = fallbacks("zone_mismatch")
    f = await read_once(store, tmp_path, NEW_YORK, timezone="UTC", worker=worker)
    assert [t for t, _ in await stored(store)] == [
        "2026-01-10T12:00:00.250Z",
        "2026-01-10T12:00:01.000Z",
        "2026-01-10T12:00:02.000Z",
    ]
    assert f.status.state == "reading"
    assert f.status.times.zone_mismatches == 3 and f.status.times.foreign_zone == "EST"
    assert f.status.time_note is not None
    assert f.status.time_note.startswith(
        "the log's times are in EST, but log.timezone is UTC: set log.timezone to the server's log_timezone"
    )
    assert fallbacks("zone_mismatch") - before == 3


async def test_the_right_zone_gives_no_note(store: Store, tmp_path: Path) -> None:
    f = await read_once(store, tmp_path, NEW_YORK, timezone="America/New_York")
    assert f.status.time_note is None and f.status.times.zone_mismatches == 0
    assert (await stored(store))[0][0] == "2026-01-10T12:00:00.250Z"


async def test_an_unknown_abbreviation_is_read_in_the_configured_zone_and_named(store: Store, tmp_path: Path) -> None:
    f = await read_once(store, tmp_path, b"2026-01-10 12:00:00.000 QQT [1] LOG:  x\n", timezone="UTC")
    assert (await stored(store))[0][0] == "2026-01-10T12:00:00.000Z"
    assert f.status.time_note is not None
    assert "QQT, which neither log.timezone (UTC) nor PostgreSQL's default abbreviations know" in f.status.time_note


async def test_entries_without_a_time_of_their_own_are_counted_and_explained(store: Store, tmp_path: Path) -> None:
    before = fallbacks("read_time")
    f = await read_once(store, tmp_path, b"[100] LOG:  a\n[101] LOG:  b\n", timezone="UTC", prefix="[%p] ")
    assert f.status.times.read_time == 2
    assert f.status.time_note == (
        "2 entries had no readable time of their own and carry the time they were read (the prefix has no %m, %t or %n)"
    )
    assert fallbacks("read_time") - before == 2
