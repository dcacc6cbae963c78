"""Queries: statements grouped by fingerprint, with calls, times, errors and a percentile.

Source lines (kinds `slow_query` and any line of severity ERROR, FATAL or PANIC that carries a
statement):

* `duration: N ms  statement: ...` (simple protocol) and `duration: N ms  execute <name>: ...`
  (extended protocol) are one call each, of N ms;
* `parse` and `bind` durations of the extended protocol are not calls: their time belongs to the
  same execution and pgBadger leaves them out of the top queries as well;
* `duration: N ms` without a statement (log_duration) names no query and is left out;
* an error's statement counts as an error of that query (it may have no call at all).

A query's id is the line's fingerprint (pglog.normalize.fingerprint: 16 hex digits of the
value-free statement, IN lists of any length alike), so the same statement has the same id on
every database and across restarts. `fold` is pure; `apply` writes one batch's sums.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from forwarder.insights import histogram

BUCKET_US: Final = 300 * 1_000_000  # the time series' step: 5 minutes
MAX_NAMES: Final = 20  # users and applications shown per query
# Past `[insights] max_queries` a database's least-used queries are forgotten, this share of the
# cap at a time, as pg_stat_statements does past pg_stat_statements.max (entry_dealloc, 5%).
FORGET_SHARE: Final = 0.05
DEFAULT_MAX_QUERIES: Final = 5000  # pg_stat_statements.max's default
_CALL: Final = re.compile(r"duration: [0-9.]+ ms +(?:statement|execute\b)")
ERROR_SEVERITIES: Final = frozenset({"ERROR", "FATAL", "PANIC"})


QueryKey = tuple[int, str]  # (database code, fingerprint)


@dataclass(slots=True)
class QueryFold:
    """The sums of one batch of lines, by query and bucket, ready for `apply`.

    Plain dicts and lists rather than an object per bucket: `add` runs for every call in the log.
    """

    # (db, fp, bucket start) -> [calls, total_ms, min_ms | None, max_ms, errors]
    buckets: dict[tuple[int, str, int], list[Any]] = field(default_factory=dict)
    bins: dict[tuple[int, str, int, int], int] = field(default_factory=dict)
    # (db, fp) -> [text, first_us, last_us, example line id, users, applications, uses]
    seen: dict[QueryKey, list[Any]] = field(default_factory=dict)

    def add(self, db: int, line_id: int, time_us: int, fingerprint: str | None, doc: Mapping[str, Any]) -> None:
        """Count one stored line if it is a call or an error of a query."""
        statement = doc.get("statement")
        if not fingerprint or not statement:
            return
        duration = doc.get("duration_ms")
        if duration is not None and doc.get("kind") == "slow_query" and _CALL.match(doc.get("message") or ""):
            is_call = True
        elif doc.get("severity") in ERROR_SEVERITIES:
            is_call = False
        else:
            return
        start = time_us - time_us % BUCKET_US
        sums = self.buckets.get(key := (db, fingerprint, start))
        if sums is None:
            sums = self.buckets[key] = [0, 0.0, None, 0.0, 0]
        if is_call:
            ms = float(duration)  # type: ignore[arg-type]  # not None: a call
            sums[0] += 1
            sums[1] += ms
            sums[2] = ms if sums[2] is None or ms < sums[2] else sums[2]
            sums[3] = ms if ms > sums[3] else sums[3]
            bkey = (db, fingerprint, start, histogram.bin_of(ms))
            self.bins[bkey] = self.bins.get(bkey, 0) + 1
        else:
            sums[4] += 1
        seen = self.seen.get(qkey := (db, fingerprint))
        if seen is None:
            seen = self.seen[qkey] = [statement, time_us, time_us, line_id, set(), set(), 0]
        else:
            if time_us < seen[1]:
                seen[1] = time_us
            if time_us >= seen[2]:
                seen[2], seen[3] = time_us, line_id
        seen[6] += 1
        if (user := doc.get("user")) and len(seen[4]) < MAX_NAMES:
            seen[4].add(user)
        if (app := doc.get("application")) and len(seen[5]) < MAX_NAMES:
            seen[5].add(app)


def apply(conn: sqlite3.Connection, fold: QueryFold) -> None:
    """Add a batch's sums to the tables (inside the caller's transaction): upserts, no reads."""
    conn.executemany(
        "INSERT INTO insight_query_buckets (db, fingerprint, start_us, calls, total_ms, min_ms, max_ms, errors)"
        " VALUES (?,?,?,?,?,?,?,?) ON CONFLICT (db, fingerprint, start_us) DO UPDATE SET"
        " calls = calls + excluded.calls, total_ms = total_ms + excluded.total_ms,"
        " min_ms = coalesce(min(min_ms, excluded.min_ms), min_ms, excluded.min_ms),"
        " max_ms = max(max_ms, excluded.max_ms), errors = errors + excluded.errors",
        [(*key, *sums) for key, sums in fold.buckets.items()],
    )
    conn.executemany(
        "INSERT INTO insight_query_bins (db, fingerprint, start_us, bin, count) VALUES (?,?,?,?,?)"
        " ON CONFLICT (db, fingerprint, start_us, bin) DO UPDATE SET count = count + excluded.count",
        [(*key, n) for key, n in fold.bins.items()],
    )
    # Names are merged by a function of this connection, called only for a query seen before.
    conn.create_function("insight_merge_names", 2, _merge_names, deterministic=True)
    conn.executemany(
        "INSERT INTO insight_queries"
        " (db, fingerprint, text, first_us, last_us, example_id, users, applications, uses)"
        " VALUES (?,?,?,?,?,?,?,?,?)"
        " ON CONFLICT (db, fingerprint) DO UPDATE SET first_us = min(first_us, excluded.first_us),"
        " uses = uses + excluded.uses,"
        " example_id = CASE WHEN excluded.last_us >= last_us THEN excluded.example_id ELSE example_id END,"
        " last_us = max(last_us, excluded.last_us),"
        " users = insight_merge_names(users, excluded.users),"
        " applications = insight_merge_names(applications, excluded.applications)",
        [
            (db, fp, text, first, last, example, _names(users), _names(apps), uses)
            for (db, fp), (text, first, last, example, users, apps, uses) in fold.seen.items()
        ],
    )


def forget_least_used(conn: sqlite3.Connection, db: int, max_queries: int) -> int:
    """With more than `max_queries` queries kept for a database, forget the least used (calls and
    errors; the longest unseen first among equals) and their time series, down to FORGET_SHARE
    below the cap (inside the caller's transaction). Returns how many were forgotten.

    A log of one-off statements (values the normalizer cannot remove, generated SQL) would
    otherwise grow these tables with every line, past the lines themselves."""
    (count,) = conn.execute("SELECT count(*) FROM insight_queries WHERE db = ?", (db,)).fetchone()
    if count <= max_queries:
        return 0
    keep = max_queries - int(max_queries * FORGET_SHARE)
    gone = conn.execute(
        "SELECT db, fingerprint FROM insight_queries WHERE db = ? ORDER BY uses, last_us LIMIT ?", (db, count - keep)
    ).fetchall()
    for table in ("insight_queries", "insight_query_buckets", "insight_query_bins"):
        conn.executemany(f"DELETE FROM {table} WHERE db = ? AND fingerprint = ?", gone)
    return len(gone)


def _names(names: set[str]) -> str:
    return orjson.dumps(sorted(names)).decode()


def _merge_names(old: str, new: str) -> str:
    if old == new or new == "[]":
        return old
    return orjson.dumps(sorted(set(orjson.loads(old)) | set(orjson.loads(new)))[:MAX_NAMES]).decode()


# --- reading --------------------------------------------------------------------------------

SORTS: Final = {
    "total": "total_ms DESC",
    "calls": "calls DESC",
    "mean": "mean_ms DESC",
    "max": "max_ms DESC",
    "errors": "errors DESC",
}


@dataclass(frozen=True, slots=True)
class QueryStats:
    """A query over a window."""

    fingerprint: str
    text: str
    calls: int
    total_ms: float
    max_ms: float
    p95_ms: float | None
    errors: int
    first_us: int
    last_us: int
    example_id: int
    users: tuple[str, ...]
    applications: tuple[str, ...]

    @property
    def mean_ms(self) -> float | None:
        return self.total_ms / self.calls if self.calls else None


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    """A query's numbers in one bucket."""

    start_us: int
    calls: int
    total_ms: float
    max_ms: float
    errors: int


# A query's sums over the buckets of a window: (fingerprint, calls, total, min, max, errors, mean).
_SUMS: Final = """
    SELECT fingerprint, sum(calls) AS calls, sum(total_ms) AS total_ms, min(min_ms) AS min_ms,
           max(max_ms) AS max_ms, sum(errors) AS errors,
           CASE WHEN sum(calls) > 0 THEN sum(total_ms) / sum(calls) ELSE 0 END AS mean_ms
    FROM insight_query_buckets
    WHERE db = ? AND start_us >= ? AND start_us < ? {and_fingerprint}
    GROUP BY fingerprint
"""


def top(
    conn: sqlite3.Connection, db: int, from_us: int | None, to_us: int | None, sort: str, limit: int
) -> list[QueryStats]:
    """The queries of a database with buckets in [from_us, to_us), ordered by `sort`, at most `limit`.

    A bucket belongs to the window when its start does: the window is in whole 5-minute buckets."""
    rows = conn.execute(
        _SUMS.format(and_fingerprint="") + f" ORDER BY {SORTS[sort]}, fingerprint LIMIT ?",
        (db, _lo(from_us), _hi(to_us), limit),
    ).fetchall()
    return [_stats(conn, db, row, from_us, to_us) for row in rows]


def one(
    conn: sqlite3.Connection, db: int, fingerprint: str, from_us: int | None, to_us: int | None
) -> QueryStats | None:
    """One query over the window (None when the database never ran it; zeros when not in the window)."""
    if not conn.execute("SELECT 1 FROM insight_queries WHERE db = ? AND fingerprint = ?", (db, fingerprint)).fetchone():
        return None
    row = conn.execute(
        _SUMS.format(and_fingerprint="AND fingerprint = ?"), (db, _lo(from_us), _hi(to_us), fingerprint)
    ).fetchone()
    return _stats(conn, db, row or (fingerprint, 0, 0.0, None, 0.0, 0, 0), from_us, to_us)


def series(
    conn: sqlite3.Connection, db: int, fingerprint: str, from_us: int | None, to_us: int | None
) -> list[SeriesPoint]:
    """The query's buckets in the window, oldest first."""
    return [
        SeriesPoint(*row)
        for row in conn.execute(
            "SELECT start_us, calls, total_ms, max_ms, errors FROM insight_query_buckets"
            " WHERE db = ? AND fingerprint = ? AND start_us >= ? AND start_us < ? ORDER BY start_us",
            (db, fingerprint, _lo(from_us), _hi(to_us)),
        )
    ]


def _lo(from_us: int | None) -> int:
    # The bucket holding `from` is in the window: a line at 10:03 is in the 10:00 bucket.
    return -(1 << 62) if from_us is None else from_us - from_us % BUCKET_US


def _hi(to_us: int | None) -> int:
    return 1 << 62 if to_us is None else to_us


def _stats(
    conn: sqlite3.Connection, db: int, sums: tuple[Any, ...], from_us: int | None, to_us: int | None
) -> QueryStats:
    """A query's stats from its window's sums (a row of _SUMS), its description and its histogram."""
    fp, calls, total_ms, min_ms, max_ms, errors, _ = sums
    text, first_us, last_us, example_id, users, apps = conn.execute(
        "SELECT text, first_us, last_us, example_id, users, applications FROM insight_queries"
        " WHERE db = ? AND fingerprint = ?",
        (db, fp),
    ).fetchone()
    window = (db, fp, _lo(from_us), _hi(to_us))
    bins = dict(
        conn.execute(
            "SELECT bin, sum(count) FROM insight_query_bins"
            " WHERE db = ? AND fingerprint = ? AND start_us >= ? AND start_us < ? GROUP BY bin",
            window,
        ).fetchall()
    )
    return QueryStats(
        fingerprint=fp,
        text=text,
        calls=calls,
        total_ms=total_ms,
        max_ms=max_ms,
        p95_ms=histogram.percentile(bins, 0.95, min_ms or 0.0, max_ms),
        errors=errors,
        first_us=first_us,
        last_us=last_us,
        example_id=example_id,
        users=tuple(orjson.loads(users)),
        applications=tuple(orjson.loads(apps)),
    )


def forget_before(conn: sqlite3.Connection, cutoff_us: int) -> int:
    """Delete buckets older than `cutoff_us` and queries left without any (retention)."""
    start = cutoff_us - cutoff_us % BUCKET_US
    n = conn.execute("DELETE FROM insight_query_buckets WHERE start_us < ?", (start,)).rowcount
    if n:
        conn.execute("DELETE FROM insight_query_bins WHERE start_us < ?", (start,))
        conn.execute(
            "DELETE FROM insight_queries WHERE NOT EXISTS (SELECT 1 FROM insight_query_buckets b"
            " WHERE b.db = insight_queries.db AND b.fingerprint = insight_queries.fingerprint)"
        )
    return n
