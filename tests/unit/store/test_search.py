"""Word search of the Logs listing: the same lines whichever way the store finds them, and a rare
word found without walking every line."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from forwarder.model import KINDS, LogLine
from forwarder.store import lines as L
from forwarder.store import open_sync
from tests.unit.store.steps import counting_steps, page_ids

T0 = 1_800_000_000_000_000
WORDS = ("lock", "locked", "timeout", "vacuum", "orders", "needle")


def fill(path: Path, n: int, rnd: random.Random, words: tuple[str, ...] = WORDS[:-1]) -> sqlite3.Connection:
    conn = open_sync(path)
    L.register_functions(conn)
    idents = []
    for code, db_id in enumerate(("main", "other"), start=1):
        conn.execute(
            "INSERT INTO databases (code, id, enabled, full_text, updated_at) VALUES (?, ?, 1, 0, 0)", (code, db_id)
        )
        idents.append(L.Identity(code, db_id, db_id, "h"))
    lines = [
        (
            idents[rnd.random() < 0.3],
            LogLine(
                time_us=T0 + i * 1_000_000,
                severity="LOG",
                kind=rnd.choice(KINDS[:4]),
                message=" ".join(rnd.sample(words, 2)) + f" line {i}",
            ),
        )
        for i in range(n)
    ]
    with conn:
        for ident, line in lines:
            L.append(conn, ident, [line])
    return conn


def expected(conn: sqlite3.Connection, q: L.LineQuery) -> tuple[list[int], bool]:
    """The page by brute force: every line decoded and checked."""
    terms = L.query_terms(q.q or "")
    kinds = {L.KIND_CODE[k] for k in q.kinds} if q.kinds else None
    found = [
        line_id
        for line_id, kind, doc in conn.execute("SELECT id, kind, doc FROM lines WHERE db = 1 ORDER BY id")
        if (kinds is None or kind in kinds)
        and (q.before is None or line_id < q.before)
        and (q.after is None or line_id > q.after)
        and L.doc_matches(doc, terms)
    ]
    page = found[: q.limit + 1] if q.after is not None else found[::-1][: q.limit + 1]
    return sorted(page[: q.limit], reverse=True), len(page) > q.limit


@pytest.mark.parametrize("part_shift", [L.FTS_PART_SHIFT, 6])
def test_every_way_of_searching_gives_the_lines_a_scan_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, part_shift: int
) -> None:
    # Few candidates and small chunks, so a few hundred lines take every path: matches found from
    # the index, the walk of the filters' index when they are too few, and the unindexed tail.
    # With parts of 64 ids, the index's matches come from several of its parts.
    monkeypatch.setattr(L, "SEARCH_CANDIDATES", 8)
    monkeypatch.setattr(L, "SEARCH_CHUNK", 3)
    monkeypatch.setattr(L, "FTS_PART_SHIFT", part_shift)
    rnd = random.Random(7)
    conn = fill(tmp_path / "s.db", 400, rnd)
    with conn:
        L.index_fts(conn, 300)  # the last 100 lines stay unindexed
    queries = []
    for q in ("lock", "locked", "timeout orders", "vacu", "needle", "line 399", "line 12"):
        for kinds in (None, frozenset({KINDS[0]}), frozenset(KINDS[1:3])):
            for before, after in ((None, None), (250, None), (320, None), (None, 40), (None, 290), (300, 120)):
                for limit in (1, 5, 50):
                    queries.append(L.LineQuery(limit=limit, q=q, kinds=kinds, before=before, after=after))
    for query in queries:
        assert page_ids(conn, 1, query) == expected(conn, query), query
    # Retention deletes some lines, leaving in place the entries of a part it says it empties
    # (but leaves a line of): those entries match nothing.
    gone = [(i, d, k) for i, d, k in conn.execute("SELECT id, db, kind FROM lines") if i % 3 == 0 or 64 <= i < 127]
    with conn:
        L.delete_lines(conn, gone, emptying=frozenset({64 >> part_shift}))
    for query in queries:
        assert page_ids(conn, 1, query) == expected(conn, query), query


def test_a_rare_word_is_found_without_walking_every_line(tmp_path: Path) -> None:
    conn = fill(tmp_path / "s.db", 20_000, random.Random(1))
    with conn:
        L.append(conn, L.Identity(1, "main", "main", "h"), [LogLine(T0, "LOG", "other", "a needle here")])
        L.append(conn, L.Identity(1, "main", "main", "h"), [LogLine(T0 + 1, "LOG", "other", "nothing")])
        while L.index_fts(conn, 5000):
            pass
    with counting_steps(conn) as steps:
        for q in ("needle", "absent"):
            page = L.list_lines(conn, 1, L.LineQuery(limit=50, q=q))
            assert len(page.docs) == (q == "needle")
    # Walking the ~14,000 lines of the database took ~3,600 of these (100 instructions each); now 4.
    assert steps.count < 200, steps.count


@pytest.mark.parametrize("indexed", [True, False])
@pytest.mark.parametrize(
    ("q", "found"),
    [
        ("straße", True),
        ("Straße", True),
        ("strasse", False),  # ß is a letter of its own to the index, not "ss"
        ("ecole", True),
        ("ÉCOLE", True),
        ("ユーザー", True),  # the voicing mark is part of the word (it is no Latin accent)
        ("ユーザ", True),
        ("_", True),  # no letter or digit: a substring
        ("__", False),
        # accents written as marks of their own (U+0301 after the letter), in the line or in q:
        # one word to the index, and to the scan of the lines it has not taken yet
        ("resume", True),
        ("r\u00e9sum\u00e9", True),
        ("re\u0301sume\u0301", True),
        ("sume", False),
        ("e\u0301cole", True),
        ("\u0301", False),  # a lone mark: a substring the folded text does not hold
    ],
)
def test_a_word_is_found_as_written_whether_indexed_or_not(tmp_path: Path, q: str, found: bool, indexed: bool) -> None:
    conn = fill(tmp_path / "s.db", 3, random.Random(3))
    with conn:
        L.append(
            conn,
            L.Identity(1, "main", "main", "h"),
            [LogLine(T0, "LOG", "other", 'Straße café ÉCOLE relation "ユーザー" under_score re\u0301sume\u0301')],
        )
        if indexed:
            while L.index_fts(conn, 5000):
                pass
    page = L.list_lines(conn, 1, L.LineQuery(limit=50, q=q))
    assert [b"under_score" in doc for doc in page.docs].count(True) == found, q
