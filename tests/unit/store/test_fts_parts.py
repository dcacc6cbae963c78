"""The full-text index in parts (lines.py): retention drops a part it empties whole, searches read
every part, and a part whose range gets lines again is made again."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import orjson
import pytest

from forwarder.clock import FakeClock
from forwarder.config import DatabaseConfig, LogSourceConfig, StoreConfig
from forwarder.model import LogLine
from forwarder.store import Store
from forwarder.store import lines as L
from forwarder.store.store import FTS_BATCH
from tests.unit.store.steps import index_all, new_store

T0 = 1_800_000_000_000_000
SHIFT = 6  # parts of 64 ids, time spans of 16
IDENT = L.Identity(1, "main", "Main", "h")


@pytest.fixture(autouse=True)
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(L, "FTS_PART_SHIFT", SHIFT)
    monkeypatch.setattr(L, "SPAN_SHIFT", 4)


def line(i: int, message: str) -> LogLine:
    return LogLine(time_us=T0 + i * 1_000_000, severity="LOG", kind="other", message=message)


@asynccontextmanager
async def day_store(tmp_path: Path) -> AsyncIterator[tuple[Store, FakeClock, L.Identity]]:
    """A store keeping lines a day, on a fake clock, with the database `main`."""
    clock = FakeClock(start=T0 / 1_000_000)
    store = Store(StoreConfig(path=tmp_path / "r.db", retention_days=1), clock)
    await store.start()
    try:
        ident = await store.register_database(
            DatabaseConfig(id="main", name="Main", host="h", log=LogSourceConfig(path="/nonexistent/*.log"))
        )
        yield store, clock, ident
    finally:
        await store.aclose()


def found(conn: sqlite3.Connection, q: str) -> list[str]:
    return [orjson.loads(d)["message"] for d in L.list_lines(conn, 1, L.LineQuery(q=q, limit=1000)).docs]


def tables(conn: sqlite3.Connection) -> set[str]:
    """The index's FTS5 tables in the schema (not their shadow tables)."""
    return {
        name
        for (name,) in conn.execute("SELECT name FROM sqlite_schema WHERE sql LIKE 'CREATE VIRTUAL TABLE%USING fts5%'")
    }


def entries(conn: sqlite3.Connection, part: int) -> set[int]:
    """The ids a part's index has entries for."""
    vocab = f"temp.entries_{part}"
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {vocab} USING fts5vocab(main, {L.fts_table(part)}, instance)")
    return {doc for (doc,) in conn.execute(f"SELECT DISTINCT doc FROM {vocab}")}


def test_lines_are_indexed_in_the_part_of_their_id_and_found_across_parts(tmp_path: Path) -> None:
    conn = new_store(tmp_path / "s.db")
    with conn:
        L.append(conn, IDENT, [line(i, f"word{i} common") for i in range(200)])  # ids 1-200
    index_all(conn)
    assert L.fts_parts(conn) == [0, 1, 2, 3]
    assert tables(conn) == {"lines_fts_0", "lines_fts_1", "lines_fts_2", "lines_fts_3"}
    assert entries(conn, 0) == set(range(1, 64)) and entries(conn, 3) == set(range(192, 201))
    assert found(conn, "common") == [f"word{i} common" for i in range(199, -1, -1)]
    assert found(conn, "word70") == ["word70 common"]
    page = L.list_lines(conn, 1, L.LineQuery(q="common", limit=5, before=66))  # a page across two parts
    assert [orjson.loads(d)["id"] for d in page.docs] == ["65", "64", "63", "62", "61"] and page.has_more


def test_deleting_every_line_of_a_part_drops_it_and_other_parts_lose_only_the_deleted_entries(
    tmp_path: Path,
) -> None:
    conn = new_store(tmp_path / "s.db")
    with conn:
        L.append(conn, IDENT, [line(i, f"word{i} common") for i in range(200)])
    index_all(conn)
    with conn:  # ids 1-70: all of part 0 and the start of part 1, entries deleted line by line
        L.delete_lines(conn, L.oldest(conn, 70))
    assert L.fts_parts(conn) == [1, 2, 3] and "lines_fts_0" not in tables(conn)
    assert entries(conn, 1) == set(range(71, 128))
    with conn:  # told that part 1 is emptied: its entries go with it, not one by one
        L.delete_lines(conn, L.oldest(conn, 57), emptying=frozenset({1}))
    assert L.fts_parts(conn) == [2, 3] and tables(conn) == {"lines_fts_2", "lines_fts_3"}
    assert found(conn, "common") == [f"word{i} common" for i in range(199, 126, -1)]


def test_a_part_said_to_be_emptied_that_keeps_a_line_keeps_dead_entries_that_match_nothing(tmp_path: Path) -> None:
    conn = new_store(tmp_path / "s.db")
    with conn:
        L.append(conn, IDENT, [line(i, f"word{i} common") for i in range(100)])
    index_all(conn)
    with conn:
        L.delete_lines(conn, [r for r in L.oldest(conn, 63) if r[0] != 40], emptying=frozenset({0}))
    assert L.fts_parts(conn) == [0, 1] and entries(conn, 0) == set(range(1, 64))
    assert found(conn, "word10") == [] and found(conn, "word39") == ["word39 common"]
    assert len(found(conn, "common")) == 100 - 62
    with conn:  # its last line goes: so does the part
        L.delete_lines(conn, [r for r in L.oldest(conn, 1)], emptying=frozenset())
    assert L.fts_parts(conn) == [1]


def test_a_part_emptied_while_lines_still_arrive_in_its_range_is_made_again(tmp_path: Path) -> None:
    conn = new_store(tmp_path / "s.db")
    with conn:
        L.append(conn, IDENT, [line(i, f"old{i}") for i in range(10)])
    index_all(conn)
    with conn:  # retention took every line, the newest included
        L.delete_lines(conn, L.oldest(conn, 10))
    assert L.fts_parts(conn) == [] and tables(conn) == set()
    with conn:
        L.append(conn, IDENT, [line(i, f"new{i} vacuum") for i in range(10, 15)])  # ids 11-15: part 0 again
    index_all(conn)
    assert L.fts_parts(conn) == [0] and entries(conn, 0) == set(range(11, 16))
    assert found(conn, "vacuum") == [f"new{i} vacuum" for i in range(14, 9, -1)]
    assert found(conn, "old3") == []


def test_the_parts_retention_empties_are_those_all_of_whose_lines_are_past_it(tmp_path: Path) -> None:
    conn = new_store(tmp_path / "s.db")
    times = list(range(200))
    times[100] = 10_000  # part 1 (ids 64-127) has one line written late
    with conn:
        L.append(conn, IDENT, [line(t, "x") for t in times])
    index_all(conn)
    cutoff = T0 + 1000 * 1_000_000
    assert L.parts_older_than(conn, cutoff) == {0, 2}  # not 1 (a newer line), nor 3 (ids still go there)
    with conn:
        L.append(conn, IDENT, [line(500, "y")] * 60)  # ids up to 260: part 3 is complete, 4 not
    assert L.parts_older_than(conn, cutoff) == {0, 2, 3}


async def test_retention_of_a_day_drops_the_parts_it_empties(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    texts_made: list[str] = []  # a deleted line's index entries are found from its text, made again
    search_text = L.search_text
    monkeypatch.setattr(L, "search_text", lambda doc: texts_made.append("") or search_text(doc))
    async with day_store(tmp_path) as (store, clock, ident):
        # 300 lines a minute apart (ids 1-300); a day after line 240, the lines before it go
        await store.append(ident, [line(i * 60, f"word{i} common") for i in range(300)], [], 0)
        while await store.index_once(FTS_BATCH):
            pass
        cutoff_line = 240
        clock.advance(86_400 + cutoff_line * 60)
        texts_made.clear()
        assert await store.retention_once() == cutoff_line
        # Only for the lines of the part it did not empty (ids 192-240): the rest went with theirs.
        assert len(texts_made) == cutoff_line - (cutoff_line >> SHIFT << SHIFT) + 1
        parts = await store.read(L.fts_parts)
        assert parts == [cutoff_line >> SHIFT, *range((cutoff_line >> SHIFT) + 1, (300 >> SHIFT) + 1)]
        assert await store.write(lambda c: entries(c, parts[0])) == set(range(cutoff_line + 1, (parts[0] + 1) << SHIFT))
        page = await store.list_lines(ident.code, L.LineQuery(q="common", limit=1000))
        assert [orjson.loads(d)["message"] for d in page.docs] == [
            f"word{i} common" for i in range(299, cutoff_line - 1, -1)
        ]


async def test_retention_merges_the_parts_it_deleted_from_before_they_pile_up_segments(tmp_path: Path) -> None:
    # A backlog indexed faster than merged leaves a part's levels full of segments; each chunk
    # retention deletes adds one more, and FTS5 merges a level that reaches 16 within the COMMIT
    # that made it (~540 ms at a million lines). Retention merges the parts it deleted from.
    async with day_store(tmp_path) as (store, clock, ident):
        await store.append(ident, [line(i * 60, f"word{i} common") for i in range(60)], [], 0)
        while await store.index_once(6):  # 10 segments in part 0 (ids 1-60), none merged
            pass
        clock.advance(86_400 + 10 * 60)
        assert await store.retention_once() == 10  # and a segment of their deletions
        assert not await store.write(lambda c: L.merge_fts(c, 100, {0}))  # nothing left to merge
        page = await store.list_lines(ident.code, L.LineQuery(q="common", limit=1000))
        assert len(page.docs) == 50
