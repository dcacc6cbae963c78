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
MAX_NAMES: Final = 20  # users and applications kept per query
_CALL: Final = re.compile(r"duration: [0-9.]+ ms +(?:statement|execute\b)")
ERROR_SEVERITIES: Final = frozenset({"ERROR", "FATAL", "PANIC"})


@dataclass(slots=True)
class BucketSums:
    """One query's numbers in one 5-minute bucket (of one batch, then of the table)."""

    calls: int = 0
    total_ms: float = 0.0
    min_ms: float | None = None
    max_ms: float = 0.0
    errors: int = 0
    bins: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True)
class Seen:
    """What a batch saw of one query beside its numbers."""

    text: str
    first_us: int
    last_us: int
    example_id: int
    users: set[str] = field(default_factory=set)
    applications: set[str] = field(default_factory=set)


QueryKey = tuple[int, str]  # (database code, fingerprint)


@dataclass(slots=True)
class QueryFold:
    """The sums of one batch of lines, by query and bucket."""

    buckets: dict[tuple[int, str, int], BucketSums] = field(default_factory=dict)
    seen: dict[QueryKey, Seen] = field(default_factory=dict)

    def add(self, db: int, line_id: int, time_us: int, fingerprint: str | None, doc: Mapping[str, Any]) -> None:
        """Count one stored line if it is a call or an error of a query."""
        statement = doc.get("statement")
        if not fingerprint or not statement:
            return
        duration = doc.get("duration_ms")
        is_call = doc.get("kind") == "slow_query" and duration is not None and _CALL.match(doc.get("message") or "")
        is_error = doc.get("severity") in ERROR_SEVERITIES
        if not is_call and not is_error:
            return
        sums = self.buckets.get(key := (db, fingerprint, time_us - time_us % BUCKET_US))
        if sums is None:
            sums = self.buckets[key] = BucketSums()
        if is_call:
            ms = float(duration)  # type: ignore[arg-type]  # is_call: not None
            sums.calls += 1
            sums.total_ms += ms
            sums.max_ms = max(sums.max_ms, ms)
            sums.min_ms = ms if sums.min_ms is None else min(sums.min_ms, ms)
            b = histogram.bin_of(ms)
            sums.bins[b] = sums.bins.get(b, 0) + 1
        else:
            sums.errors += 1
        seen = self.seen.get((db, fingerprint))
        if seen is None:
            seen = self.seen[(db, fingerprint)] = Seen(statement, time_us, time_us, line_id)
        seen.first_us = min(seen.first_us, time_us)
        if time_us >= seen.last_us:
            seen.last_us, seen.example_id = time_us, line_id
        if (user := doc.get("user")) and len(seen.users) < MAX_NAMES:
            seen.users.add(user)
        if (app := doc.get("application")) and len(seen.applications) < MAX_NAMES:
            seen.applications.add(app)


def apply(conn: sqlite3.Connection, fold: QueryFold) -> None:
    """Add a batch's sums to the tables (inside the caller's transaction)."""
    for (db, fp, start_us), s in fold.buckets.items():
        row = conn.execute(
            "SELECT calls, total_ms, min_ms, max_ms, errors, histogram FROM insight_query_buckets"
            " WHERE db = ? AND fingerprint = ? AND start_us = ?",
            (db, fp, start_us),
        ).fetchone()
        bins = dict(s.bins)
        if row is not None:
            calls, total_ms, min_ms, max_ms, errors, old_bins = row
            histogram.merge(bins, histogram.from_json(orjson.loads(old_bins)))
            lows = [m for m in (s.min_ms, min_ms) if m is not None]
            s = BucketSums(
                s.calls + calls,
                s.total_ms + total_ms,
                min(lows, default=None),
                max(s.max_ms, max_ms),
                s.errors + errors,
            )
        conn.execute(
            "INSERT OR REPLACE INTO insight_query_buckets"
            " (db, fingerprint, start_us, calls, total_ms, min_ms, max_ms, errors, histogram)"
            " VALUES (?,?,?,?,?,?,?,?,?)",
            (
                db,
                fp,
                start_us,
                s.calls,
                s.total_ms,
                s.min_ms,
                s.max_ms,
                s.errors,
                orjson.dumps(histogram.to_json(bins)),
            ),
        )
    for (db, fp), seen in fold.seen.items():
        row = conn.execute(
            "SELECT first_us, last_us, example_id, users, applications FROM insight_queries"
            " WHERE db = ? AND fingerprint = ?",
            (db, fp),
        ).fetchone()
        users, apps = sorted(seen.users), sorted(seen.applications)
        if row is None:
            conn.execute(
                "INSERT INTO insight_queries (db, fingerprint, text, first_us, last_us, example_id, users,"
                " applications) VALUES (?,?,?,?,?,?,?,?)",
                (db, fp, seen.text, seen.first_us, seen.last_us, seen.example_id, _names(users), _names(apps)),
            )
            continue
        first_us, last_us, example_id, old_users, old_apps = row
        if seen.last_us < last_us:
            seen.last_us, seen.example_id = last_us, example_id
        conn.execute(
            "UPDATE insight_queries SET first_us = ?, last_us = ?, example_id = ?, users = ?, applications = ?"
            " WHERE db = ? AND fingerprint = ?",
            (
                min(first_us, seen.first_us),
                seen.last_us,
                seen.example_id,
                _names([*orjson.loads(old_users), *users]),
                _names([*orjson.loads(old_apps), *apps]),
                db,
                fp,
            ),
        )


def _names(names: list[str]) -> bytes:
    return orjson.dumps(sorted(dict.fromkeys(names))[:MAX_NAMES])


# --- reading --------------------------------------------------------------------------------

Sort = str  # one of SORTS
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

    database_code: int
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


def top(
    conn: sqlite3.Connection, db: int, from_us: int | None, to_us: int | None, sort: str, limit: int
) -> list[QueryStats]:
    """The queries of a database with buckets in [from_us, to_us), ordered by `sort`, at most `limit`.

    A bucket belongs to the window when its start does: the window is in whole 5-minute buckets."""
    order = SORTS[sort]
    rows = conn.execute(
        f"""
        SELECT fingerprint, sum(calls) AS calls, sum(total_ms) AS total_ms, max(max_ms) AS max_ms,
               sum(errors) AS errors,
               CASE WHEN sum(calls) > 0 THEN sum(total_ms) / sum(calls) ELSE 0 END AS mean_ms
        FROM insight_query_buckets
        WHERE db = ? AND start_us >= ? AND start_us < ?
        GROUP BY fingerprint
        ORDER BY {order}, fingerprint
        LIMIT ?
        """,
        (db, _lo(from_us), _hi(to_us), limit),
    ).fetchall()
    return [_stats(conn, db, fp, from_us, to_us) for fp, *_ in rows]


def one(
    conn: sqlite3.Connection, db: int, fingerprint: str, from_us: int | None, to_us: int | None
) -> QueryStats | None:
    """One query over the window (None when the database never ran it)."""
    if conn.execute("SELECT 1 FROM insight_queries WHERE db = ? AND fingerprint = ?", (db, fingerprint)).fetchone():
        return _stats(conn, db, fingerprint, from_us, to_us)
    return None


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


def _stats(conn: sqlite3.Connection, db: int, fp: str, from_us: int | None, to_us: int | None) -> QueryStats:
    text, first_us, last_us, example_id, users, apps = conn.execute(
        "SELECT text, first_us, last_us, example_id, users, applications FROM insight_queries"
        " WHERE db = ? AND fingerprint = ?",
        (db, fp),
    ).fetchone()
    calls = errors = 0
    total_ms = max_ms = 0.0
    min_ms: float | None = None
    bins: dict[int, int] = {}
    for c, t, lo, m, e, h in conn.execute(
        "SELECT calls, total_ms, min_ms, max_ms, errors, histogram FROM insight_query_buckets"
        " WHERE db = ? AND fingerprint = ? AND start_us >= ? AND start_us < ?",
        (db, fp, _lo(from_us), _hi(to_us)),
    ):
        calls, total_ms, max_ms, errors = calls + c, total_ms + t, max(max_ms, m), errors + e
        if lo is not None:
            min_ms = lo if min_ms is None else min(min_ms, lo)
        histogram.merge(bins, histogram.from_json(orjson.loads(h)))
    return QueryStats(
        database_code=db,
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
    n = conn.execute(
        "DELETE FROM insight_query_buckets WHERE start_us < ?", (cutoff_us - cutoff_us % BUCKET_US,)
    ).rowcount
    conn.execute(
        "DELETE FROM insight_queries WHERE NOT EXISTS (SELECT 1 FROM insight_query_buckets b"
        " WHERE b.db = insight_queries.db AND b.fingerprint = insight_queries.fingerprint)"
    )
    return n
