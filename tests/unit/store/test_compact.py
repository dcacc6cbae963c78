"""The store's compact layout: compressed documents, a full-text index without a copy of the text,
and stores written before it upgraded in place."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import zlib
from pathlib import Path

import orjson

from forwarder.model import LogLine, line_document
from forwarder.store import lines as L
from forwarder.store import open_sync, schema
from forwarder.store.docs import DICTIONARY_V1, DICTIONARY_V2, FORMAT_DEFLATE_V1, pack, unpack
from tests.unit.store.steps import index_all, new_store

T0 = 1_800_000_000_000_000
IDENT = L.Identity(1, "main", "Main", "db1.internal")


def line(i: int, message: str, **kw: object) -> LogLine:
    return LogLine(time_us=T0 + i * 1_000_000, severity="LOG", kind="other", message=message, **kw)  # type: ignore[arg-type]


def found(conn: sqlite3.Connection, q: str) -> list[str]:
    return [orjson.loads(d)["message"] for d in L.list_lines(conn, 1, L.LineQuery(q=q)).docs]


def indexed_words(conn: sqlite3.Connection) -> set[str]:
    """The words of every part of the index."""
    words: set[str] = set()
    for part in L.fts_parts(conn):
        vocab = f"temp.vocab_{part}"
        conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {vocab} USING fts5vocab(main, {L.fts_table(part)}, row)")
        words |= {w for (w,) in conn.execute(f"SELECT term FROM {vocab}")}
    return words


def test_the_dictionaries_of_stored_documents_never_change() -> None:
    # Documents stored with one are read with it forever: a better one is a new format.
    assert hashlib.sha256(DICTIONARY_V1).hexdigest()[:16] == "08d459240856fdab"
    assert hashlib.sha256(DICTIONARY_V2).hexdigest()[:16] == "c07ecbe50ac451cc"


def test_documents_of_every_earlier_format_are_read() -> None:
    doc = orjson.dumps({"host": "h", "message": 'relation "..." does not exist', "pid": 7})
    plain = orjson.dumps({"time": "2027-01-15T08:00:00.000000Z", "host": "h"})
    deflater = zlib.compressobj(6, zlib.DEFLATED, -14, 4, zlib.Z_DEFAULT_STRATEGY, DICTIONARY_V1)
    deflated = bytes((FORMAT_DEFLATE_V1,)) + deflater.compress(doc) + deflater.flush()
    assert unpack(deflated) == doc and unpack(plain) == plain
    assert pack(doc)[0] not in (FORMAT_DEFLATE_V1, plain[0])  # the current format is another


def test_documents_are_packed_and_read_on_many_threads_at_once() -> None:
    texts = [orjson.dumps({"message": f"line {i} " * (i % 50), "pid": i}) for i in range(400)]
    failures: list[int] = []

    def work(offset: int) -> None:
        for i in range(offset, offset + 2000):
            text = texts[i % len(texts)]
            if unpack(pack(text)) != text:
                failures.append(i)

    threads = [threading.Thread(target=work, args=(k * 7,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_a_typical_line_takes_a_fraction_of_its_json(tmp_path: Path) -> None:
    conn = new_store(tmp_path / "s.db")
    lines = [
        line(
            i,
            'duplicate key value violates unique constraint "orders_pkey"',
            sqlstate="23505",
            detail="Key (id)=(...) already exists.",
            statement="INSERT INTO orders (id, customer_id, total_cents) VALUES ($1, $2, $3)",
            user="web",
            database="shop",
            application="web-api",
            pid=4000 + i,
            redacted=True,
        )
        for i in range(1000)
    ]
    with conn:
        L.append(conn, IDENT, lines)
    docs = L.list_lines(conn, 1, L.LineQuery(limit=1000)).docs
    stored_bytes = conn.execute("SELECT sum(length(doc)) FROM lines").fetchone()[0]
    assert stored_bytes * 4 < sum(map(len, docs))
    assert docs[-1] == b'{"id":"1",' + orjson.dumps(line_document(lines[0], "db1.internal", "main", "Main"))[1:]


def test_documents_round_trip_whatever_their_text() -> None:
    for text in (b"{}", orjson.dumps({"message": "é" * 5000, "x": None}), orjson.dumps({"m": "\x00\n\t\"'"})):
        assert unpack(pack(text)) == text


def test_retention_leaves_no_search_entries_behind(tmp_path: Path) -> None:
    conn = new_store(tmp_path / "s.db")
    with conn:
        L.append(conn, IDENT, [line(i, f"alpha{i} common") for i in range(10)])
    index_all(conn)
    with conn:  # not indexed yet when retention deletes some of them
        L.append(conn, IDENT, [line(i, f"beta{i} common") for i in range(10, 20)])
    with conn:
        L.delete_lines(conn, L.oldest(conn, 15))
    index_all(conn)
    assert found(conn, "common") == [f"beta{i} common" for i in range(19, 14, -1)]
    assert found(conn, "alpha") == []
    assert indexed_words(conn) == {"common", *(f"beta{i}" for i in range(15, 20))}
    with conn:
        L.delete_lines(conn, L.oldest(conn, 100))
    assert indexed_words(conn) == set()


def test_a_word_with_an_underscore_is_found_as_one_word(tmp_path: Path) -> None:
    conn = new_store(tmp_path / "s.db")
    with conn:
        L.append(conn, IDENT, [line(0, 'violates "sessions_pkey"'), line(1, "sessions of pkey owners")])
    for indexed in (False, True):
        if indexed:
            index_all(conn)
        assert found(conn, "sessions_pk") == ['violates "sessions_pkey"']
        assert found(conn, "sessions pkey") == ["sessions of pkey owners", 'violates "sessions_pkey"']


def test_a_store_written_before_compression_upgrades_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = schema.connect(str(path))
    # The store as version 6 left it: plain JSON documents and an index holding a copy of the text.
    for number in range(6):
        for statement in schema._split(schema.MIGRATIONS[number]):
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 6")
    conn.execute("INSERT INTO databases (code, id, enabled, full_text, updated_at) VALUES (1, 'main', 1, 0, 0)")
    old = [line(i, f"old{i} vacuum") for i in range(3)]
    for n, item in enumerate(old, start=1):
        doc = L.encode_doc(IDENT, item)
        conn.execute(
            "INSERT INTO lines (db, time_us, kind, group_key, fingerprint, size, doc) VALUES (1, ?, 12, 0, NULL, ?, ?)",
            (item.time_us, len(doc), doc),
        )
        conn.execute("INSERT INTO lines_fts (rowid, text) VALUES (?, ?)", (n, item.message))
    conn.execute("INSERT INTO kv (key, value) VALUES ('fts_indexed_upto', 3)")
    conn.close()

    conn = open_sync(path)
    L.register_functions(conn)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
    with conn:
        L.append(conn, IDENT, [line(3, "new vacuum")])
    assert found(conn, "vacuum") == ["new vacuum", "old2 vacuum", "old1 vacuum", "old0 vacuum"]  # unindexed: scanned
    index_all(conn)
    assert found(conn, "vacuum") == ["new vacuum", "old2 vacuum", "old1 vacuum", "old0 vacuum"]
    assert L.list_lines(conn, 1, L.LineQuery(limit=1, before=2)).docs == [
        b'{"id":"1",' + L.encode_doc(IDENT, old[0])[1:]
    ]
    with conn:
        L.delete_lines(conn, L.oldest(conn, 2))
    assert found(conn, "vacuum") == ["new vacuum", "old2 vacuum"]
    assert indexed_words(conn) == {"vacuum", "new", "old2"}


def test_the_index_merges_its_segments_apart_from_the_transactions_that_write_them(tmp_path: Path) -> None:
    # FTS5 merged segments inside the transaction that wrote one (up to ~300 ms while retention
    # deleted a day, with appends waiting); the store's background work merges them a few pages
    # per transaction of its own.
    conn = new_store(tmp_path / "s.db")
    for batch in range(8):
        with conn:
            L.append(conn, IDENT, [line(batch * 10 + i, f"word{batch} common") for i in range(10)])
        with conn:
            L.index_fts(conn)  # a segment each, left unmerged (FTS5 merged them here)
    merged = []
    for _ in range(3):
        with conn:
            merged.append(L.merge_fts(conn, 100))
    assert merged == [True, False, False]  # merged, then nothing left to merge
    assert len(L.list_lines(conn, 1, L.LineQuery(q="common", limit=100)).docs) == 80
    assert [orjson.loads(d)["message"] for d in L.list_lines(conn, 1, L.LineQuery(q="word3")).docs] == [
        "word3 common"
    ] * 10


def test_a_store_of_version_7_upgrades_in_place_and_its_index_is_built_again_in_parts(tmp_path: Path) -> None:
    path = tmp_path / "v7.db"
    conn = schema.connect(str(path))
    for number in range(7):
        for statement in schema._split(schema.MIGRATIONS[number]):
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 7")
    conn.execute("INSERT INTO databases (code, id, enabled, full_text, updated_at) VALUES (1, 'main', 1, 0, 0)")
    with conn:  # the lines as version 7 stored them: no time spans yet (migration 10)
        conn.executemany(
            "INSERT INTO lines (db, time_us, kind, group_key, fingerprint, size, doc) VALUES (?,?,?,?,?,?,?)",
            [row[: L.ROW_TEXT] for row in L.encode_rows(IDENT, [line(i, f"vacuum{i}") for i in range(3)])],
        )
        # ...and indexed in the one table of version 7
        conn.executemany("INSERT INTO lines_fts (rowid, text) VALUES (?, ?)", [(i + 1, f"vacuum{i}") for i in range(3)])
        conn.execute("INSERT INTO kv (key, value) VALUES ('fts_indexed_upto', 3)")
    conn.close()

    conn = open_sync(path)
    L.register_functions(conn)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
    # The one index became parts (migration 13), built again from the lines: until then, scanned.
    assert (L.fts_watermark(conn), L.fts_parts(conn)) == (0, [])
    assert found(conn, "vacuum1") == ["vacuum1"]
    index_all(conn)
    assert conn.execute("SELECT v FROM lines_fts_0_config WHERE k = 'automerge'").fetchone() == (0,)
    assert indexed_words(conn) == {"vacuum0", "vacuum1", "vacuum2"}
    assert found(conn, "vacuum1") == ["vacuum1"]
    # The upgrade gave the lines their time spans: a time filter finds them.
    window = L.LineQuery(from_us=line(1, "").time_us, to_us=line(2, "").time_us)
    assert [orjson.loads(d)["message"] for d in L.list_lines(conn, 1, window).docs] == ["vacuum1"]
    with conn:
        L.delete_lines(conn, L.oldest(conn, 1))
    assert found(conn, "vacuum") == ["vacuum2", "vacuum1"]


def test_the_index_holds_the_same_words_whether_texts_come_from_memory_or_from_documents(tmp_path: Path) -> None:
    # A line's text is kept in memory from its append until it is indexed; after a restart (or past
    # the memory's bound) the index makes it from the stored document instead. Both must agree.
    lines = [
        line(0, 'duplicate key value violates unique constraint "orders_pkey"', detail="Key (id)=(...) exists."),
        line(1, "Ärger mit Umlauten", hint="naïve café", context="PL/pgSQL function f() line 3"),
        line(2, "statement", statement="SELECT * FROM t WHERE a = $1"),
        line(3, "", detail=None, statement=""),
        line(4, "x\ny", context="while locking tuple (0,1)"),
    ]
    by_doc, by_memory = new_store(tmp_path / "a.db"), new_store(tmp_path / "b.db")
    rows = L.encode_rows(IDENT, lines)
    with by_doc:
        L.append_rows(by_doc, rows)
        L.index_fts(by_doc)
    texts: dict[int, str] = {}
    with by_memory:
        first, last = L.append_rows(by_memory, rows)
        texts.update(zip(range(first, last + 1), (r[L.ROW_TEXT] for r in rows), strict=True))
        L.index_fts(by_memory, texts=texts)
    assert texts == {}  # each text taken once
    assert L.fts_parts(by_doc) == L.fts_parts(by_memory) == [0]
    by_row = "CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, lines_fts_0, instance)"
    by_doc.execute(by_row)
    by_memory.execute(by_row)
    words = "SELECT term, doc FROM temp.v ORDER BY term, doc"
    assert by_doc.execute(words).fetchall() == by_memory.execute(words).fetchall()
    assert "umlauten" in indexed_words(by_memory) and "naive" in indexed_words(by_memory)
