"""Lines: append, list, search, groups and counts, as plain functions on a SQLite connection.

Ids are rowids: the API and destinations see them as decimal strings. A document is the orjson
of the SPEC 2.1 fields without `id`, stored compressed and without `time` (docs.py); `stored_doc`
decompresses it and puts the id and time in front when read, so a line is serialized once, when
it is appended (DESIGN section 6).
"""

from __future__ import annotations

import functools
import itertools
import re
import unicodedata
from collections.abc import MutableMapping, Sequence, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

import orjson

from forwarder.model import KINDS, Kind, LogLine, format_time, group_key, line_document
from forwarder.store.docs import is_plain, pack, unpack

if TYPE_CHECKING:
    import sqlite3  # the daemon's connections; a parse worker, which only encodes rows, never loads it

KIND_CODE: Final[dict[str, int]] = {kind: code for code, kind in enumerate(KINDS)}
TEXT_FIELDS: Final = ("message", "detail", "hint", "context", "statement")
WINDOW_TEXT_FIELDS: Final = ("message", "detail", "statement")  # what count_window's `text` looks in
FTS_WATERMARK_KEY: Final = "fts_indexed_upto"

# The combining marks FTS5's `unicode61 remove_diacritics 2` takes as part of a word and then
# drops (sqlite3Fts5UnicodeIsdiacritic in fts5_unicode2.c; checked against SQLite's tokenizer over
# U+0300-U+036F): "re\u0301sume\u0301", résumé with its accents as marks of their own (as macOS
# and some clients write them), is the one word "resume" to it. To `\w` a mark is a separator.
_DIACRITICS: Final = "\u0300-\u0304\u0306-\u030c\u030f\u0311\u031b\u0323-\u0328\u032d\u032e\u0330\u0331"
_WORD_RE = re.compile(rf"[\w{_DIACRITICS}]+", re.UNICODE)
# What FTS5's unicode61 tokenizer keeps as a token: letters and digits (\w less `_`), and those marks.
_FTS_TOKEN_RE = re.compile(rf"(?:[^\W_]|[{_DIACRITICS}])+", re.UNICODE)
# How many different words one `q` may hold (a 400 past it, never words silently left out).
MAX_QUERY_TERMS: Final = 16


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a line belongs to; copied into every stored document."""

    code: int  # the database's small integer in the store
    database_id: str
    database_name: str
    host: str


@dataclass(frozen=True, slots=True)
class LineQuery:
    """Filters of `GET /v1/databases/{ref}/logs` (all optional but `limit`)."""

    limit: int = 100
    kinds: frozenset[Kind] | None = None
    q: str | None = None
    group: int | None = None
    from_us: int | None = None  # inclusive
    to_us: int | None = None  # exclusive
    before: int | None = None  # ids lower than this
    after: int | None = None  # ids higher than this: the oldest `limit` of them (live tail)


@dataclass(frozen=True, slots=True)
class Page:
    """Documents (id spliced in) newest first, and whether the query had more beyond the limit.

    `next_after` (with `after` only) is the highest id the query examined: every line up to it
    that matches is in this page or an earlier one, so a live tail continues from it and never
    looks at the lines it skipped again.
    """

    docs: list[bytes]
    has_more: bool
    next_after: int | None = None


@dataclass(frozen=True, slots=True)
class Group:
    """A repeated message over a window (SPEC 2.3)."""

    key: int
    kind: str
    count: int
    first_us: int
    last_us: int
    newest_doc: bytes


def encode_doc(identity: Identity, line: LogLine) -> bytes:
    """The stored document: SPEC 2.1 fields in SPEC order, without `id`."""
    return orjson.dumps(line_document(line, identity.host, identity.database_id, identity.database_name))


def splice_id(line_id: int, doc: bytes) -> bytes:
    """`{"id":"<id>", ...doc}` of a JSON document, without decoding it."""
    return b'{"id":"%d",%s' % (line_id, doc[1:])


def stored_doc(line_id: int, time_us: int, stored: bytes) -> bytes:
    """The JSON document of a stored line, `id` and `time` spliced in, without decoding its JSON."""
    if is_plain(stored):
        return splice_id(line_id, stored)
    return b'{"id":"%d","time":"%s",%s' % (line_id, format_time(time_us).encode(), unpack(stored)[1:])


def read_doc(time_us: int, stored: bytes) -> dict[str, object]:
    """The fields of a stored line (no `id`)."""
    parsed: dict[str, object] = orjson.loads(stored_doc(0, time_us, stored))
    del parsed["id"]
    return parsed


def _text_fields(stored: bytes) -> dict[str, object]:
    """The fields of a stored document, `time` there or not: enough for the text fields."""
    parsed: dict[str, object] = orjson.loads(unpack(stored))
    return parsed


_FINGERPRINT_RE = re.compile(r"[0-9a-f]{16}")


def fingerprint_column(fingerprint: str | None) -> str | bytes | None:
    """How the lines table keeps a statement's fingerprint: its 16 hex digits as their 8 bytes,
    a BLOB (the column's TEXT affinity would turn an integer into text), 9 bytes on disk instead
    of 17. Anything else is kept as it is, as are the texts of stores written before."""
    if fingerprint is not None and _FINGERPRINT_RE.fullmatch(fingerprint):
        return bytes.fromhex(fingerprint)
    return fingerprint


def column_fingerprint(stored: str | bytes | None) -> str | None:
    """The fingerprint a `fingerprint_column` value stands for."""
    return stored.hex() if isinstance(stored, bytes) else stored


# A line ready to insert: (db code, time_us, kind code, group key, fingerprint, size, doc, text):
# `doc` in its stored (compressed) form; `size` is 0, which SQLite stores in no bytes (it was the
# document's length, which nothing needs before reading the document); `text` is what the
# full-text index will take (`search_text`), which is not a column: the store keeps it in memory
# until the line is indexed, so indexing need not unpack and decode the document it was made from.
Row = tuple[int, int, int, int, str | bytes | None, int, bytes, str]
ROW_DOC: Final = 6
ROW_TEXT: Final = 7


def encode_rows(identity: Identity, lines: Sequence[LogLine]) -> list[Row]:
    """Lines as rows of the lines table: each serialized once, here (a parse worker may do it)."""
    rows: list[Row] = []
    host, database_id, database_name = identity.host, identity.database_id, identity.database_name
    for line in lines:
        doc = orjson.dumps(line_document(line, host, database_id, database_name, time=False))
        rows.append(
            (
                identity.code,
                line.time_us,
                KIND_CODE[line.kind],
                group_key(line.kind, line.message, line.fingerprint),
                fingerprint_column(line.fingerprint),
                0,
                pack(doc),
                line_search_text(line),
            )
        )
    return rows


def append_rows(conn: sqlite3.Connection, rows: Sequence[Row]) -> tuple[int, int]:
    """Insert rows (inside the caller's transaction); returns (first id, last id), (0, 0) if none."""
    if not rows:
        return (0, 0)
    conn.executemany(
        "INSERT INTO lines (db, time_us, kind, group_key, fingerprint, size, doc) VALUES (?,?,?,?,?,?,?)",
        [row[:ROW_TEXT] for row in rows],
    )
    last: int = conn.execute("SELECT last_insert_rowid()").fetchone()[0]
    record_spans(conn, last - len(rows) + 1, rows)
    return (last - len(rows) + 1, last)


def append(conn: sqlite3.Connection, identity: Identity, lines: Sequence[LogLine]) -> tuple[int, int]:
    """Insert lines (inside the caller's transaction); returns (first id, last id), (0, 0) if none."""
    return append_rows(conn, encode_rows(identity, lines))


def head_id(conn: sqlite3.Connection) -> int:
    """Id of the newest line (0 when the store has none)."""
    row = conn.execute("SELECT max(id) FROM lines").fetchone()
    return int(row[0] or 0)


def assigned_id(conn: sqlite3.Connection) -> int:
    """The highest id ever given to a line (0 before the first), deleted lines included.

    Ids come from AUTOINCREMENT on the one writer, so they follow commit order: a reader's
    snapshot that sees this value sees every line with a smaller id that still exists.
    """
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'lines'").fetchone()
    return int(row[0]) if row else 0


# --- time spans -----------------------------------------------------------------------------
#
# Lines are listed in id order (arrival), but filtered by the time PostgreSQL wrote them. With
# `to` a week back, "newest first" walked every line newer than `to` before the first match
# (0.7-1.2 s at 10 million lines); with a day's window the time index found ~250,000 lines to sort
# by id (~230 ms). Times mostly rise with ids, so a small summary bounds the walk: for each
# database and span of 4,096 consecutive ids (SPAN_SHIFT), the earliest and latest time of its lines
# (a zone map, as PostgreSQL's BRIN indexes keep per block range). Appends widen a span in the
# transaction that stores the lines; deletes leave it as it was, so it only ever over-covers.
# A listing reads the spans that may hold a match, in order, until its page is full.

SPAN_SHIFT: Final = 12  # migration 10 builds the spans of stored lines with the same shift
_NO_TIME_BOUND: Final = (-(1 << 63), (1 << 63) - 1)


def record_spans(conn: sqlite3.Connection, first_id: int, rows: Sequence[Row]) -> None:
    """Widen the spans of rows just inserted with ids from `first_id` (the caller's transaction)."""
    spans: dict[tuple[int, int], list[int]] = {}
    for line_id, row in enumerate(rows, start=first_id):
        time_us = row[1]
        if (bounds := spans.get((row[0], line_id >> SPAN_SHIFT))) is None:
            spans[(row[0], line_id >> SPAN_SHIFT)] = [time_us, time_us]
        elif time_us < bounds[0]:
            bounds[0] = time_us
        elif time_us > bounds[1]:
            bounds[1] = time_us
    conn.executemany(
        "INSERT INTO line_spans (db, span, min_us, max_us) VALUES (?,?,?,?) ON CONFLICT (db, span)"
        " DO UPDATE SET min_us = min(min_us, excluded.min_us), max_us = max(max_us, excluded.max_us)",
        [(db, span, low, high) for (db, span), (low, high) in spans.items()],
    )


def id_ranges(spans: Sequence[tuple[int, bool]]) -> list[tuple[int, int]]:
    """Id ranges (first, last), ascending, that hold every line a time filter may match, from a
    database's spans in ascending order, each with whether its times overlap the filter's.

    Neighbouring overlapping spans make one range; a span with lines but none in the window ends
    it. Spans the database has no line in are not listed and do not end a range.
    """
    ranges: list[tuple[int, int]] = []
    first: int | None = None
    last = 0
    for span, overlaps in spans:
        if overlaps:
            first = span if first is None else first
            last = span
        elif first is not None:
            ranges.append((first << SPAN_SHIFT, ((last + 1) << SPAN_SHIFT) - 1))
            first = None
    if first is not None:
        ranges.append((first << SPAN_SHIFT, ((last + 1) << SPAN_SHIFT) - 1))
    return ranges


def time_ranges(
    conn: sqlite3.Connection, db_code: int, from_us: int | None, to_us: int | None
) -> list[tuple[int, int]]:
    """`id_ranges` of a database's lines with time in [from_us, to_us) (None: unbounded)."""
    low = _NO_TIME_BOUND[0] if from_us is None else from_us
    high = _NO_TIME_BOUND[1] if to_us is None else to_us
    spans = conn.execute(
        "SELECT span, max_us >= ? AND min_us < ? FROM line_spans WHERE db = ? ORDER BY span", (low, high, db_code)
    ).fetchall()
    return id_ranges(spans)


# Past this many ranges a window is read as one range from its first id to its last: a statement
# has at most 32,766 parameters, and the time test keeps the answer exact either way.
MAX_WINDOW_RANGES: Final = 500


@dataclass(frozen=True, slots=True)
class _Window:
    """A statement's `WITH` clause and its `FROM ... WHERE ...`, with their parameters, reading a
    database's lines with time in a window: `SELECT` goes between them, GROUP BY after them."""

    with_ranges: str
    from_where: str
    params: list[object]


def _window(
    conn: sqlite3.Connection, db_code: int, from_us: int, to_us: int | None, kinds: frozenset[Kind] | None = None
) -> _Window | None:
    """The lines of a database with time in [from_us, to_us) (None: no upper bound) and, unless
    `kinds` is None, one of `kinds`; None when no line can be. The time spans' id ranges that may
    hold them are joined to the lines, each read through the (db) index, or (db, kind) with kinds;
    the ranges over-cover, so each line's time is tested too.

    This is how a time window is read (groups, counts by kind, alert windows): it costs what the
    (db, time) index it replaced cost, without a B-tree more to write for every line."""
    ranges = time_ranges(conn, db_code, from_us, to_us)
    if not ranges:
        return None
    if len(ranges) > MAX_WINDOW_RANGES:
        ranges = [(ranges[0][0], ranges[-1][1])]
    params: list[object] = [bound for r in ranges for bound in r]
    where = "db = ? AND +time_us >= ?"
    params += [db_code, from_us]
    if to_us is not None:
        where += " AND +time_us < ?"
        params.append(to_us)
    if kinds is not None:
        codes = sorted(KIND_CODE[k] for k in kinds)
        where += f" AND kind IN ({','.join('?' * len(codes))})"
        params.extend(codes)
    return _Window(
        f"WITH ranges (lo, hi) AS (VALUES {','.join(['(?,?)'] * len(ranges))})",
        f"FROM ranges CROSS JOIN lines ON lines.id >= ranges.lo AND lines.id <= ranges.hi WHERE {where}",
        params,
    )


def forget_spans(conn: sqlite3.Connection) -> None:
    """Drop the spans below the oldest line left (the caller's transaction, after deleting; it
    reads every span, so once a retention pass, not once a chunk)."""
    conn.execute("DELETE FROM line_spans WHERE span < (SELECT min(id) FROM lines) >> ?", (SPAN_SHIFT,))


# --- full-text search -------------------------------------------------------------------------


def search_text(doc: dict[str, object]) -> str:
    """What `q` searches: the text fields of a line."""
    return "\n".join(str(doc[f]) for f in TEXT_FIELDS if doc.get(f))


def line_search_text(line: LogLine) -> str:
    """`search_text` of a line's document, from the line (its fields are the document's)."""
    return "\n".join(str(v) for f in TEXT_FIELDS if (v := getattr(line, f)))


def _fold(text: str) -> str:
    """The folding of FTS5's `unicode61 remove_diacritics 2` tokenizer, so that a word found in the
    index is found by the scan of the unindexed lines, and a term folded like its words: lower case
    (not Unicode case folding: ß stays ß), and the marks of Latin letters removed (é -> e), as
    the tokenizer's table does for the Latin letters only (ザ keeps its voicing mark). Checked
    against SQLite's own tokenizer over U+00A0-U+33FF: rare letters still differ (Cherokee,
    Cyrillic supplements, a few Latin letters with two marks); a word of them is found through
    the index, not in the few lines it has not taken yet."""
    if text.isascii():
        return text.lower()
    return "".join(_fold_char(ch) if ch >= "\x80" else ch for ch in text.lower())


# Folds of FTS5's own case table (fts5_unicode2.c) that str.lower() lacks: the long s, final
# sigma and the Greek symbol variants to their letters, the micro sign to mu, and the combining
# dot above that the capital I with dot lowers to.
_FTS5_FOLDS: Final = str.maketrans(
    "\u017f\u03c2\u03d0\u03d1\u03d5\u03d6\u03f0\u03f1\u03f5\u1e9b\u00b5",
    "s\u03c3\u03b2\u03b8\u03c6\u03c0\u03ba\u03c1\u03b5s\u03bc",
) | {ord(ch): None for ch in re.findall(f"[{_DIACRITICS}]", "".join(map(chr, range(0x0300, 0x0370))))}


@functools.lru_cache(maxsize=4096)
def _fold_char(ch: str) -> str:
    decomposed = unicodedata.normalize("NFD", ch)
    if len(decomposed) > 1 and decomposed[0] < "\x80" and all(unicodedata.combining(c) for c in decomposed[1:]):
        return decomposed[0]  # a Latin letter with marks (é, ñ, ǖ)
    return ch.translate(_FTS5_FOLDS)


def query_terms(q: str) -> list[str]:
    """The words `q` searches for: folded, each once, in order; [] when none holds a letter or a
    digit (`>`, `::`, `_`: a substring search then). ValueError past MAX_QUERY_TERMS different
    words (the API's 400)."""
    terms = list(dict.fromkeys(t for w in _WORD_RE.findall(q) if (t := _fold(w))))
    if len(terms) > MAX_QUERY_TERMS:
        raise ValueError(f"at most {MAX_QUERY_TERMS} different words")
    return terms if any(_FTS_TOKEN_RE.search(t) for t in terms) else []


def fts_match_expression(terms: list[str]) -> str:
    r"""Every term as a prefix, all required: `"dup"* AND "key"*`.

    The index keeps no word positions (no phrases), so a term FTS5 splits into several tokens
    (`sessions_pkey`: `_` is a separator to it, a word character to `\w`) becomes all of them,
    required anywhere: a superset of the lines `doc_matches` accepts (see `needs_recheck`).
    """
    tokens = dict.fromkeys(tok for t in terms for tok in _FTS_TOKEN_RE.findall(t))  # each once
    return " AND ".join('"' + t + '"*' for t in tokens)


def needs_recheck(terms: list[str]) -> bool:
    """Whether the index's matches for `terms` must be checked with `doc_matches`: some term is
    not a single FTS5 token, so the index matched its tokens anywhere, not as one word."""
    return any(_FTS_TOKEN_RE.fullmatch(t) is None for t in terms)


def doc_matches(stored: bytes, terms: list[str]) -> bool:
    """The unindexed-tail twin of the FTS query: every term is a prefix of some word."""
    raw = unpack(stored)
    # Most lines lack a term: in an ASCII document (nothing folds into ASCII there), a word term
    # not in the lowercased JSON (a word character is never escaped) is in none of its fields.
    # This skips decoding: ~3 µs a line instead of ~8.
    if raw.isascii():
        low = raw.lower()
        if not all(t.encode() in low for t in terms):
            return False
    text = _fold(search_text(orjson.loads(raw)))
    # A prefix of a word is a substring of the text: most lines fail this cheap test.
    if not all(t in text for t in terms):
        return False
    # A term that is one FTS5 token is a prefix of one of the text's tokens, as in the index; a
    # term FTS5 splits (`sessions_pk`) is a prefix of one word, `_` included.
    tokens, words = _FTS_TOKEN_RE.findall(text), _WORD_RE.findall(text)
    return all(any(w.startswith(t) for w in (tokens if _FTS_TOKEN_RE.fullmatch(t) else words)) for t in terms)


def doc_contains(stored: bytes, folded: str) -> bool:
    """Substring search over the text fields, folded like the word search."""
    return folded in _fold(search_text(_text_fields(stored)))


# --- the full-text index's parts -----------------------------------------------------------
#
# The index is cut by id into parts of 2**FTS_PART_SHIFT ids, each an FTS5 table of its own
# (`lines_fts_<part>`, listed in `fts_parts`). One index over every line made merging its segments
# cost more the more lines it held: a merge step rewrites a word's whole list of lines, and for a
# common word at 10 million lines one step held the writer 100-135 ms while retention deleted a
# day (README, "Retention"). A part's lists are at most a part long. And retention removes a part
# it emptied whole (DROP TABLE), where deleting its lines' entries one by one wrote a deletion
# entry per line for later merges to fold in. Lines up to the watermark are in the part of their
# id; a part exists only while it has lines, and is made again if later lines fall in its range.

FTS_PART_SHIFT: Final = 20  # ~1,000,000 ids a part: about a day of a busy server
FTS_COLUMNS: Final = "text, content = '', columnsize = 0, detail = none, tokenize = 'unicode61 remove_diacritics 2'"


def fts_table(part: int) -> str:
    """The FTS5 table of a part (a number the store made: never text from outside)."""
    return f"lines_fts_{int(part)}"


def fts_parts(conn: sqlite3.Connection) -> list[int]:
    """The index's parts, ascending."""
    return [int(part) for (part,) in conn.execute("SELECT part FROM fts_parts ORDER BY part")]


def part_ids(part: int) -> tuple[int, int]:
    """The first and last id of a part."""
    return part << FTS_PART_SHIFT, ((part + 1) << FTS_PART_SHIFT) - 1


def part_of(line_id: int) -> int:
    """The part a line's index entries are in."""
    return line_id >> FTS_PART_SHIFT


def parts_of(rows: Sequence[tuple[int, int, int]]) -> frozenset[int]:
    """The parts of these lines (id, db, kind)."""
    return frozenset(part_of(line_id) for line_id, _, _ in rows)


def _parts_between(conn: sqlite3.Connection, low: int, high: int) -> list[int]:
    """The parts, ascending, that hold ids in (low, high]."""
    return [part for part in fts_parts(conn) if part_ids(part)[1] > low and part_ids(part)[0] <= high]


def _add_part(conn: sqlite3.Connection, part: int) -> None:
    table = fts_table(part)
    conn.execute(f"CREATE VIRTUAL TABLE {table} USING fts5 ({FTS_COLUMNS})")
    # Segments are merged by the store's background work, a few pages per transaction (merge_fts),
    # not inside the transaction that wrote them (sqlite.org/fts5.html#the_automerge_configuration_option).
    conn.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('automerge', 0)")
    conn.execute("INSERT INTO fts_parts (part) VALUES (?)", (part,))


def index_fts(conn: sqlite3.Connection, batch: int = 2000, texts: MutableMapping[int, str] | None = None) -> int:
    """Index the next lines past the watermark (inside the caller's transaction); returns how many.

    `texts` maps ids of committed lines to their `Row` text; an id found there is popped and its
    text indexed without reading the document, any other line's text is made from its document.
    """
    upto = fts_watermark(conn)
    rows = conn.execute("SELECT id, doc FROM lines WHERE id > ? ORDER BY id LIMIT ?", (upto, batch)).fetchall()
    if not rows:
        return 0
    known = {} if texts is None else texts
    parts = set(fts_parts(conn))
    for part, of_part in itertools.groupby(rows, key=lambda r: part_of(int(r[0]))):
        if part not in parts:
            _add_part(conn, part)
        conn.executemany(
            f"INSERT INTO {fts_table(part)} (rowid, text) VALUES (?, ?)",
            [
                (line_id, text if (text := known.pop(line_id, None)) is not None else search_text(_text_fields(doc)))
                for line_id, doc in of_part
            ],
        )
    conn.execute(
        "INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (FTS_WATERMARK_KEY, rows[-1][0]),
    )
    return len(rows)


def merge_fts(conn: sqlite3.Connection, pages: int, parts: Set[int] | None = None) -> bool:
    """Merge about `pages` pages of one part's segments, the newest part with work to do of
    `parts` (None: of all), inside the caller's transaction; False when none had anything to merge."""
    for part in reversed(fts_parts(conn)):
        if parts is not None and part not in parts:
            continue
        table = fts_table(part)
        before = conn.total_changes
        conn.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('merge', ?)", (pages,))
        # sqlite.org/fts5.html#the_merge_command: fewer than 2 changes, no more work to do.
        if conn.total_changes - before >= 2:
            return True
    return False


def fts_watermark(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM kv WHERE key = ?", (FTS_WATERMARK_KEY,)).fetchone()
    return int(row[0]) if row else 0


def _fts_hits(conn: sqlite3.Connection, match: str, low: int, high: int, order: Order, limit: int) -> list[int]:
    """Ids of the first `limit` index entries in `order` with low < id <= high matching `match`,
    read part by part (a part is one id range, so their order is the parts' order)."""
    hits: list[int] = []
    parts = _parts_between(conn, low, high)
    for part in parts if order == "ASC" else reversed(parts):
        table = fts_table(part)
        hits += [
            hit
            for (hit,) in conn.execute(
                f"SELECT rowid FROM {table} WHERE {table} MATCH ? AND rowid > ? AND rowid <= ?"
                f" ORDER BY rowid {order} LIMIT ?",
                (match, low, high, limit - len(hits)),
            )
        ]
        if len(hits) >= limit:
            break
    return hits


def _fts_ids(conn: sqlite3.Connection, match: str, low: int, high: int) -> tuple[str, list[object]]:
    """A subquery of the ids whose index entries match `match` in the parts that hold ids in
    (low, high], and its parameters (an `IN` reads them once)."""
    parts = _parts_between(conn, low, high)
    if not parts:
        return "SELECT NULL WHERE 0", []
    selects = [f"SELECT rowid FROM {fts_table(p)} WHERE {fts_table(p)} MATCH ?" for p in parts]
    return " UNION ALL ".join(selects), [match] * len(parts)


# --- reading ----------------------------------------------------------------------------------


def scans_documents(query: LineQuery) -> bool:
    """Whether `query` reads the document of every line it may match: a `q` with no word for the
    index (`::`, `>`, `_`), found by a substring scan."""
    return query.q is not None and not query_terms(query.q)


def list_lines(conn: sqlite3.Connection, db_code: int, query: LineQuery) -> Page:
    """Lines of one database matching `query`, newest first.

    With `after`, the page is the `limit` lines right after it (then shown newest first), so a
    client that polls with the newest id it has seen never misses a line; `has_more` says more
    newer lines are waiting, and `next_after` how far the query looked (see `Page`). Otherwise the
    page is the newest `limit` matches and `has_more` says older ones exist (page on with `before`).
    """
    where = ["db = ?"]
    params: list[object] = [db_code]
    if query.kinds is not None:
        codes = sorted(KIND_CODE[k] for k in query.kinds)
        where.append(f"kind IN ({','.join('?' * len(codes))})")
        params.extend(codes)
    if query.group is not None:
        where.append("group_key = ?")
        params.append(query.group)
    timed = query.from_us is not None or query.to_us is not None
    ranges = time_ranges(conn, db_code, query.from_us, query.to_us) if timed else [(0, (1 << 63) - 1)]
    if not ranges:
        return _page(conn, query, [])
    # "+time_us": the spans bound the walk in id order; the time index would find every line of the
    # window to sort them by id.
    if query.from_us is not None:
        where.append("+time_us >= ?")
        params.append(query.from_us)
    if query.to_us is not None:
        where.append("+time_us < ?")
        params.append(query.to_us)
    filters, filter_params = " AND ".join(where), list(params)
    if query.before is not None:
        where.append("id < ?")
        params.append(query.before)
    if query.after is not None:
        where.append("id > ?")
        params.append(query.after)
    order: Order = "ASC" if query.after is not None else "DESC"
    if query.q is not None and query_terms(query.q):
        bounded = _Where(" AND ".join(where), params)
        envelope = (ranges[0][0], ranges[-1][1])
        return _page(conn, query, _word_search(conn, _Where(filters, filter_params), bounded, query, order, envelope))
    if query.q is not None:  # (scans_documents)
        # No letter or digit (`>`, `::`, `_`): nothing for the word index, so a substring scan
        # (of the text as given when folding leaves nothing: a lone mark, which the folded text lacks).
        where.append("fwd_doc_contains(doc, ?)")
        params.append(_fold(query.q) or query.q)
    if timed:
        where.append("id >= ? AND id <= ?")  # one of the ranges
    sql = f"SELECT id, time_us, doc FROM lines WHERE {' AND '.join(where)} ORDER BY id {order} LIMIT ?"
    want = query.limit + 1
    rows: list[tuple[int, int, bytes]] = []
    for first, last in ranges if order == "ASC" else reversed(ranges):
        if (query.before is not None and first >= query.before) or (query.after is not None and last <= query.after):
            continue
        rows += conn.execute(sql, [*params, *((first, last) if timed else ()), want - len(rows)]).fetchall()
        if len(rows) >= want:
            break
    return _page(conn, query, rows)


def _page(conn: sqlite3.Connection, query: LineQuery, rows: list[tuple[int, int, bytes]]) -> Page:
    """The page of `query` from the first `limit + 1` matches in the query's order."""
    has_more = len(rows) > query.limit
    rows = rows[: query.limit]
    next_after = None
    if query.after is not None:
        if has_more:
            # A full page: lines past its newest one were not all looked at.
            next_after = rows[-1][0]
        else:
            # Every line of the snapshot up to `before` was looked at.
            upto = assigned_id(conn) if query.before is None else min(assigned_id(conn), query.before - 1)
            next_after = max(query.after, upto)
        rows.reverse()
    return Page(docs=[stored_doc(i, t, d) for i, t, d in rows], has_more=has_more, next_after=next_after)


def line_by_id(conn: sqlite3.Connection, db_code: int, line_id: int) -> tuple[bytes, int] | None:
    """A line of one database (document with id spliced in, group key); None if it is not there."""
    row = conn.execute(
        "SELECT time_us, doc, group_key FROM lines WHERE id = ? AND db = ?", (line_id, db_code)
    ).fetchone()
    return (stored_doc(line_id, row[0], row[1]), int(row[2])) if row else None


Order = Literal["ASC", "DESC"]
# How many of the newest index matches a word search looks up before it walks the lines instead,
# and how many ids it looks up per statement.
SEARCH_CANDIDATES: Final = 2000
SEARCH_CHUNK: Final = 100


@dataclass(frozen=True, slots=True)
class _Where:
    sql: str
    params: list[object]


def _word_search(
    conn: sqlite3.Connection,
    filters: _Where,
    bounded: _Where,
    query: LineQuery,
    order: Order,
    envelope: tuple[int, int],
) -> list[tuple[int, int, bytes]]:
    """The first `limit + 1` lines in `order` that pass `bounded` (`filters` and the query's
    before/after) and contain the words of `query.q`; every such line has an id in `envelope`
    (first, last: the time filter's spans).

    Lines up to the full-text watermark are found through FTS5, the few newer ones by scanning
    them (DESIGN section 6). From the index's side first: its next matches in `order`, looked up by
    id until the page is full, which costs the same whether the words are in ten lines or in
    thousands. Only when many matches yield too few lines that pass the filters does it walk the
    filters' index instead, checking each line against the matches (quick then: the words are
    common). Walking the index alone took ~140 ms at a million lines for a rare or absent word.
    """
    terms = query_terms(query.q or "")
    match = fts_match_expression(terms)
    terms_arg = "\x00".join(terms)
    # Only a term the index cannot look up as one word costs reading its matches' documents.
    recheck = (" AND fwd_doc_matches(doc, ?)", [terms_arg]) if needs_recheck(terms) else ("", [])
    watermark = fts_watermark(conn)
    want = query.limit + 1
    low = max(query.after or 0, envelope[0] - 1)  # ids above this
    high = min((1 << 63) - 1 if query.before is None else query.before - 1, envelope[1])  # and up to this
    # Entries of lines retention deleted may linger in a part it is emptying (delete_lines): every
    # hit is looked up in `lines`, so they match nothing.
    hits = _fts_hits(conn, match, low, min(high, watermark), order, SEARCH_CANDIDATES)
    indexed: list[tuple[int, int, bytes]] = []
    for i in range(0, len(hits), SEARCH_CHUNK):
        chunk = hits[i : i + SEARCH_CHUNK]
        indexed += conn.execute(
            f"SELECT id, time_us, doc FROM lines WHERE {filters.sql}"
            f" AND id IN ({','.join('?' * len(chunk))}){recheck[0]}"
            f" ORDER BY id {order}",
            [*filters.params, *chunk, *recheck[1]],
        ).fetchall()
        if len(indexed) >= want:
            break
    if len(indexed) < want and len(hits) == SEARCH_CANDIDATES:
        # Common words, rare among the filtered lines: one walk of the filters' index, the tail included.
        ids, ids_params = _fts_ids(conn, match, low, min(high, watermark))
        return conn.execute(
            f"SELECT id, time_us, doc FROM lines WHERE {bounded.sql} AND id > ? AND id <= ? AND ((id <= ? AND id IN"
            f" ({ids}){recheck[0]})"
            " OR (id > ? AND fwd_doc_matches(doc, ?)))"
            f" ORDER BY id {order} LIMIT ?",
            [*bounded.params, low, high, watermark, *ids_params, *recheck[1], watermark, terms_arg, want],
        ).fetchall()
    # The tail by its id range alone (NOT INDEXED: the filters' indexes would walk every line).
    tail = conn.execute(
        f"SELECT id, time_us, doc FROM lines NOT INDEXED WHERE id > ? AND id <= ? AND {filters.sql}"
        f" AND fwd_doc_matches(doc, ?) ORDER BY id {order} LIMIT ?",
        [max(low, watermark), high, *filters.params, terms_arg, want],
    ).fetchall()
    # Every tail id is above every indexed one.
    return (tail + indexed[:want] if order == "DESC" else indexed[:want] + tail)[:want]


def register_functions(conn: sqlite3.Connection) -> None:
    """SQL functions the read queries use."""
    conn.create_function(
        "fwd_doc_matches", 2, lambda doc, terms: doc_matches(doc, terms.split("\x00")), deterministic=True
    )
    conn.create_function("fwd_doc_contains", 2, doc_contains, deterministic=True)


def groups(conn: sqlite3.Connection, db_code: int, from_us: int, limit: int) -> list[Group]:
    """Repeated messages written at or after `from_us` (no upper bound: a server whose clock runs
    ahead of ours still has its newest lines counted), most frequent first."""
    # `+group_key`: grouping through the (db, group_key) index read every line of the database
    # to test its time (~0.9 s at 2 million lines for the last day's 50,000); the window's id
    # ranges hold only its lines, grouped in a temporary b-tree.
    if (w := _window(conn, db_code, from_us, None)) is None:
        return []
    rows = conn.execute(
        f"""
        {w.with_ranges}
        SELECT group_key, kind, count(*), min(time_us), max(time_us), max(id) {w.from_where}
        GROUP BY +group_key ORDER BY count(*) DESC, max(id) DESC LIMIT ?
        """,
        [*w.params, limit],
    ).fetchall()
    out = []
    for key, kind, count, first_us, last_us, newest in rows:
        time_us, doc = conn.execute("SELECT time_us, doc FROM lines WHERE id = ?", (newest,)).fetchone()
        out.append(Group(key, KINDS[kind], count, first_us, last_us, stored_doc(newest, time_us, doc)))
    return out


def counts_by_kind(conn: sqlite3.Connection, db_code: int, from_us: int) -> dict[str, int]:
    """Lines per kind (every kind present, zeros included) with time >= from."""
    counts: dict[str, int] = dict.fromkeys(KINDS, 0)
    # `+kind`: grouping through the (db, kind) index walked every line of the database (and read
    # each one's time), ~700 ms at 800,000 lines for the last day's 114,000; the ranges hold the window.
    if (w := _window(conn, db_code, from_us, None)) is None:
        return counts
    for kind, count in conn.execute(f"{w.with_ranges} SELECT kind, count(*) {w.from_where} GROUP BY +kind", w.params):
        counts[KINDS[kind]] = count
    return counts


def hourly_counts_by_kind(conn: sqlite3.Connection, db_code: int, from_us: int) -> list[tuple[int, Kind, int]]:
    """(hour start in µs, kind, lines) for each hour and kind with lines, time >= from; oldest first."""
    if (w := _window(conn, db_code, from_us, None)) is None:
        return []
    rows = conn.execute(
        f"""
        {w.with_ranges}
        SELECT time_us / 3600000000 AS hour, kind, count(*) {w.from_where} GROUP BY hour, kind ORDER BY hour
        """,
        w.params,
    ).fetchall()
    return [(hour * 3_600_000_000, KINDS[kind], count) for hour, kind, count in rows]


def count_window(
    conn: sqlite3.Connection,
    db_code: int,
    kinds: frozenset[Kind] | None,
    after_us: int,
    upto_us: int,
    text: str | None = None,
) -> int:
    """Lines of a database with time in (after_us, upto_us], of `kinds` (None: any) and, with `text`,
    whose message, detail or statement contains it (case-insensitive, accents ignored). Only the
    rows the window and kinds select are decoded for the text."""
    # (after, upto] in whole microseconds is [after + 1, upto + 1).
    if (w := _window(conn, db_code, after_us + 1, upto_us + 1, kinds)) is None:
        return 0
    if text is None:
        return int(conn.execute(f"{w.with_ranges} SELECT count(*) {w.from_where}", w.params).fetchone()[0])
    folded = _fold(text)
    count = 0
    for (doc,) in conn.execute(f"{w.with_ranges} SELECT doc {w.from_where}", w.params):
        fields = _text_fields(doc)
        if any(folded in _fold(value) for f in WINDOW_TEXT_FIELDS if isinstance(value := fields.get(f), str)):
            count += 1
    return count


def oldest_time(conn: sqlite3.Connection, db_code: int) -> int | None:
    """The earliest time of a database's lines (None without lines)."""
    # The spans in order of their earliest time: a span's is never later than its lines' (deletes
    # leave it), so once it is no earlier than the oldest line found, no later span holds one older.
    oldest: int | None = None
    for span, min_us in conn.execute("SELECT span, min_us FROM line_spans WHERE db = ? ORDER BY min_us", (db_code,)):
        if oldest is not None and min_us >= oldest:
            break
        (found,) = conn.execute(
            "SELECT min(time_us) FROM lines WHERE db = ? AND id >= ? AND id < ?",
            (db_code, span << SPAN_SHIFT, (span + 1) << SPAN_SHIFT),
        ).fetchone()
        if found is not None and (oldest is None or found < oldest):
            oldest = found
    return oldest


# --- retention --------------------------------------------------------------------------------


def delete_lines(conn: sqlite3.Connection, rows: list[tuple[int, int, int]], emptying: Set[int] = frozenset()) -> int:
    """Delete these lines (id, db, kind) and their search entries (inside the caller's
    transaction), then the index's parts left without lines.

    `emptying` names parts that the caller is deleting every line of: their lines' entries stay
    until the part is dropped whole (they match no line meanwhile: searches look hits up in
    `lines`). A part named wrongly only keeps dead entries until its last line goes.
    """
    if not rows:
        return 0
    # The index keeps no copy of the text (contentless): FTS5 removes a row's entries given the
    # text it indexed, which search_text recomputes from the document. Lines past the watermark
    # were never indexed, and "deleting" them would corrupt the index.
    watermark = fts_watermark(conn)
    by_part: dict[int, list[int]] = {}
    for line_id, _, _ in rows:
        if line_id <= watermark and (part := part_of(line_id)) not in emptying:
            by_part.setdefault(part, []).append(line_id)
    for part, indexed in by_part.items():
        for start in range(0, len(indexed), 500):
            chunk = indexed[start : start + 500]
            conn.executemany(
                f"INSERT INTO {fts_table(part)} ({fts_table(part)}, rowid, text) VALUES ('delete', ?, ?)",
                [
                    (line_id, search_text(_text_fields(doc)))
                    for line_id, doc in conn.execute(
                        f"SELECT id, doc FROM lines WHERE id IN ({','.join('?' * len(chunk))})", chunk
                    )
                ],
            )
    conn.executemany("DELETE FROM lines WHERE id = ?", [(r[0],) for r in rows])
    for part in parts_of(rows):
        first, last = part_ids(part)
        if conn.execute("SELECT 1 FROM lines WHERE id >= ? AND id <= ?", (first, last)).fetchone() is None:
            _drop_part(conn, part)
    return len(rows)


def _drop_part(conn: sqlite3.Connection, part: int) -> None:
    if conn.execute("DELETE FROM fts_parts WHERE part = ?", (part,)).rowcount:
        conn.execute(f"DROP TABLE {fts_table(part)}")


def parts_older_than(conn: sqlite3.Connection, cutoff_us: int) -> set[int]:
    """Parts every line of which `older_than(cutoff_us)` lists (by their time spans, which only
    over-cover) and no later line can join (ids are handed out past them). One read of the spans."""
    complete = part_of(assigned_id(conn)) - 1  # the newest part ids are no longer given in
    past = conn.execute(
        "SELECT span >> ? AS part FROM line_spans GROUP BY part"
        " HAVING max(max_us) < ? AND min(db IN (SELECT code FROM databases))",
        (FTS_PART_SHIFT - SPAN_SHIFT, cutoff_us),
    ).fetchall()
    return {int(part) for (part,) in past if part <= complete} & set(fts_parts(conn))


def older_than(conn: sqlite3.Connection, cutoff_us: int, limit: int) -> list[tuple[int, int, int]]:
    """Up to `limit` lines (id, db, kind) written before the cutoff, any database."""
    # The spans with lines that early, then their lines by id (the (db) index).
    return conn.execute(
        """
        SELECT l.id, l.db, l.kind FROM line_spans s CROSS JOIN lines l
            ON l.db = s.db AND l.id >= s.span << ? AND l.id < (s.span + 1) << ?
        WHERE s.db IN (SELECT code FROM databases) AND s.min_us < ? AND +l.time_us < ? LIMIT ?
        """,
        (SPAN_SHIFT, SPAN_SHIFT, cutoff_us, cutoff_us, limit),
    ).fetchall()


def oldest(conn: sqlite3.Connection, limit: int) -> list[tuple[int, int, int]]:
    return conn.execute("SELECT id, db, kind FROM lines ORDER BY id LIMIT ?", (limit,)).fetchall()


def line_count(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM lines").fetchone()[0])


def used_bytes(conn: sqlite3.Connection) -> int:
    """Bytes of the store's pages that hold data (free pages are reused before the file grows)."""
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    return int((pages - free) * page_size)
