"""Time filters (`from`, `to`) of the Logs listing through the time spans: the lines a scan of
every line gives, whatever order their times came in, and a window far back found without walking
the lines newer than it."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import orjson
import pytest

from forwarder.model import KINDS, LogLine
from forwarder.store import lines as L
from forwarder.store import open_sync
from tests.unit.store.steps import counting_steps, page_ids

T0 = 1_800_000_000_000_000
S = 1_000_000  # a second
MAIN, OTHER = L.Identity(1, "main", "main", "h"), L.Identity(2, "other", "other", "h")


@pytest.mark.parametrize(
    ("spans", "ranges"),
    [
        ([], []),
        ([(0, False), (1, False)], []),
        ([(0, True)], [(0, 4095)]),
        ([(0, True), (1, True), (2, True)], [(0, 3 * 4096 - 1)]),
        # a span without the database's lines is not listed: it does not split a range
        ([(0, True), (2, True)], [(0, 3 * 4096 - 1)]),
        # one whose lines are all outside the window does
        ([(0, True), (1, False), (2, True)], [(0, 4095), (2 * 4096, 3 * 4096 - 1)]),
        ([(3, False), (4, True), (5, True), (9, False)], [(4 * 4096, 6 * 4096 - 1)]),
    ],
)
def test_id_ranges_join_neighbouring_spans_of_the_window(
    spans: list[tuple[int, bool]], ranges: list[tuple[int, int]]
) -> None:
    assert L.id_ranges(spans) == ranges


def new_store(path: Path) -> sqlite3.Connection:
    conn = open_sync(path)
    L.register_functions(conn)
    for ident in (MAIN, OTHER):
        conn.execute(
            "INSERT INTO databases (code, id, enabled, full_text, updated_at) VALUES (?, ?, 1, 0, 0)",
            (ident.code, ident.database_id),
        )
    return conn


def expected(conn: sqlite3.Connection, q: L.LineQuery) -> tuple[list[int], bool]:
    """The page by brute force: every line of `main` decoded and checked."""
    terms = L.query_terms(q.q) if q.q and q.q.strip(">") else None
    kinds = {L.KIND_CODE[k] for k in q.kinds} if q.kinds else None
    found = [
        line_id
        for line_id, time_us, kind, doc in conn.execute(
            "SELECT id, time_us, kind, doc FROM lines WHERE db = 1 ORDER BY id"
        )
        if (kinds is None or kind in kinds)
        and (q.from_us is None or time_us >= q.from_us)
        and (q.to_us is None or time_us < q.to_us)
        and (q.before is None or line_id < q.before)
        and (q.after is None or line_id > q.after)
        and (q.q is None or (L.doc_matches(doc, terms) if terms else L.doc_contains(doc, q.q)))
    ]
    page = found[: q.limit + 1] if q.after is not None else found[::-1][: q.limit + 1]
    return sorted(page[: q.limit], reverse=True), len(page) > q.limit


def mixed_store(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[sqlite3.Connection, list[int | None]]:
    """A store whose times mostly rise with ids, and times of `main` to filter by (None: unbounded).

    Spans of 8 ids, so ~900 lines make a hundred of them. Times mostly rise with ids, as
    PostgreSQL writes them, but not always: jitter between databases, lines of an old log read
    late (a backlog), a server whose clock was ahead; and some lines are deleted afterwards."""
    monkeypatch.setattr(L, "SPAN_SHIFT", 3)
    rnd = random.Random(5)
    conn = new_store(path)
    clock = T0
    with conn:
        for _ in range(120):
            batch: list[LogLine] = []
            for _ in range(rnd.randint(1, 15)):
                clock += rnd.randint(0, 4) * S
                r = rnd.random()
                at = clock - rnd.randint(100, 400) * S if r < 0.05 else clock + 3600 * S if r < 0.07 else clock
                word = rnd.choice(("lock", "vacuum", "timeout"))
                batch.append(LogLine(at + rnd.randint(-2, 2) * S, "LOG", rnd.choice(KINDS[:3]), f"{word} > {r:.3f}"))
            L.append(conn, MAIN if rnd.random() < 0.7 else OTHER, batch)
        L.index_fts(conn, 600)  # the newest lines stay unindexed: scanned
        L.delete_lines(conn, L.oldest(conn, 40))
        L.delete_lines(conn, conn.execute("SELECT id, db, kind FROM lines WHERE id % 7 = 0").fetchall())
        L.forget_spans(conn)
    oldest = conn.execute("SELECT min(id) FROM lines").fetchone()[0]
    assert conn.execute("SELECT min(span) FROM line_spans").fetchone()[0] == oldest >> L.SPAN_SHIFT
    times = sorted(t for (t,) in conn.execute("SELECT time_us FROM lines WHERE db = 1"))
    return conn, [None, times[0], times[len(times) // 4], times[len(times) // 2] + 1, times[-1], times[-1] + 1]


def test_time_filters_give_the_lines_a_scan_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conn, edges = mixed_store(tmp_path / "t.db", monkeypatch)
    head = L.head_id(conn)
    queries = []
    for from_us in edges:
        for to_us in edges:
            if from_us is None and to_us is None:
                continue
            for q in (None, "lock", ">"):
                for kinds in (None, frozenset({KINDS[1]})):
                    for before, after in ((None, None), (head // 2, None), (None, head // 3), (head - 50, 100)):
                        for limit in (1, 7, 500):
                            query = L.LineQuery(limit, kinds, q, None, from_us, to_us, before, after)
                            queries.append(query)
    for query in queries:
        assert page_ids(conn, 1, query) == expected(conn, query), query


@pytest.mark.parametrize("max_ranges", [L.MAX_WINDOW_RANGES, 1])
def test_time_windows_count_the_lines_a_scan_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_ranges: int
) -> None:
    # Groups, counts by kind, hourly counts, alert windows, the oldest time and retention's lines
    # read a window through the spans' id ranges (or, past MAX_WINDOW_RANGES, the range around them).
    conn, edges = mixed_store(tmp_path / "t.db", monkeypatch)
    monkeypatch.setattr(L, "MAX_WINDOW_RANGES", max_ranges)
    lines = conn.execute("SELECT id, db, time_us, kind, group_key, doc FROM lines ORDER BY id").fetchall()
    main = [line for line in lines if line[1] == 1]
    assert L.oldest_time(conn, 1) == min(line[2] for line in main)
    assert L.oldest_time(conn, 3) is None
    starts = [t for t in edges if t is not None]
    for from_us in starts:
        window = [line for line in main if line[2] >= from_us]
        counts = dict.fromkeys(KINDS, 0)
        hourly: dict[tuple[int, str], int] = {}
        by_group: dict[int, list[tuple[int, int, int, int, int, bytes]]] = {}
        for line in window:
            counts[KINDS[line[3]]] += 1
            hour = line[2] // 3_600_000_000 * 3_600_000_000
            hourly[(hour, KINDS[line[3]])] = hourly.get((hour, KINDS[line[3]]), 0) + 1
            by_group.setdefault(line[4], []).append(line)
        assert L.counts_by_kind(conn, 1, from_us) == counts
        by_hour = L.hourly_counts_by_kind(conn, 1, from_us)  # oldest hour first, kinds in any order
        assert [h for h, _, _ in by_hour] == sorted(h for h, _, _ in by_hour)
        assert sorted(by_hour) == sorted((h, k, n) for (h, k), n in hourly.items())
        groups = L.groups(conn, 1, from_us, 1000)
        assert {g.key: (g.count, g.first_us, g.last_us) for g in groups} == {
            key: (len(ls), min(x[2] for x in ls), max(x[2] for x in ls)) for key, ls in by_group.items()
        }
        for upto_us in starts:
            for kinds in (None, frozenset({KINDS[1]}), frozenset(KINDS[:2])):
                codes = None if kinds is None else {L.KIND_CODE[k] for k in kinds}
                inside = [x for x in main if from_us < x[2] <= upto_us and (codes is None or x[3] in codes)]
                assert L.count_window(conn, 1, kinds, from_us, upto_us) == len(inside)
                assert L.count_window(conn, 1, kinds, from_us, upto_us, "lock") == sum(
                    "lock" in str(L.read_doc(x[2], x[5])["message"]) for x in inside
                )
        old = L.older_than(conn, from_us, 10_000)
        assert sorted(old) == [(x[0], x[1], x[3]) for x in lines if x[2] < from_us]
        assert len(L.older_than(conn, from_us, 5)) == min(5, len(old))


def test_a_window_far_back_is_found_without_walking_or_sorting_the_lines_around_it(tmp_path: Path) -> None:
    conn = new_store(tmp_path / "t.db")
    rows = L.encode_rows(MAIN, [LogLine(T0 + i * S, "LOG", "other", f"line {i}") for i in range(20_000)])
    with conn:
        for start in range(0, len(rows), 1000):
            L.append_rows(conn, rows[start : start + 1000])
    with counting_steps(conn) as steps:
        page = L.list_lines(conn, 1, L.LineQuery(limit=50, to_us=T0 + 10_000 * S))
    assert [orjson.loads(d)["message"] for d in page.docs] == [f"line {i}" for i in range(9999, 9949, -1)]
    # Sorting the 10,000 older lines by id (or walking the 10,000 newer ones) took ~1,300 of these
    # (100 instructions each); reading the two spans below `to`, ~120.
    assert steps.count < 400, steps.count
