"""The query_regression rule: a query whose mean time doubled against its own history.

It reads the query buckets (insights/queries.py) rather than observations of its own: the
numbers are already there, per query and 5 minutes. Evaluated by the engine's sweep for the
queries seen since the last sweep, and for its open findings.

Recent = the hour up to the query's newest call; history = the 23 hours before it. It opens when
the recent mean is at least twice the history's, both have enough calls to mean something
(MIN_RECENT_CALLS, MIN_HISTORY_CALLS) and the difference is at least MIN_DELTA_MS (a query going
from 0.02 to 0.05 ms doubled, but nobody should look at it). It resolves when that no longer holds,
or once the query has not run for a day.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from forwarder.insights.model import Evidence, FindingDraft
from forwarder.insights.queries import BUCKET_US
from forwarder.model import format_time

HOUR_US: Final = 3600 * 1_000_000
RECENT_US: Final = HOUR_US
HISTORY_US: Final = 23 * HOUR_US
MIN_RECENT_CALLS: Final = 10
MIN_HISTORY_CALLS: Final = 30
MIN_RATIO: Final = 2.0
CRITICAL_RATIO: Final = 5.0
MIN_DELTA_MS: Final = 1.0
_SLACK_MS: Final = 1e-6  # a nanosecond: PostgreSQL logs durations to the microsecond
QUIET_US: Final = 24 * HOUR_US


class QueryRegression:
    """A query's mean time doubled against its own history."""

    name: Final = "query_regression"

    def evaluate(self, c: sqlite3.Connection, db: int, database_id: str, fp: str, now_us: int) -> FindingDraft | None:
        row = c.execute(
            "SELECT text, last_us, example_id FROM insight_queries WHERE db = ? AND fingerprint = ?", (db, fp)
        ).fetchone()
        if row is None:
            return None
        text, last_us, example_id = row
        if last_us < now_us - QUIET_US:
            return None
        # Whole buckets: the one holding the newest call and those of the hour before it.
        end = last_us - last_us % BUCKET_US + BUCKET_US
        split = end - RECENT_US
        recent_calls, recent_ms = self._sums(c, db, fp, split, end)
        history_calls, history_ms = self._sums(c, db, fp, split - HISTORY_US, split)
        if recent_calls < MIN_RECENT_CALLS or history_calls < MIN_HISTORY_CALLS:
            return None
        recent_mean, history_mean = recent_ms / recent_calls, history_ms / history_calls
        # Sums of durations are not exact in binary (30 calls of 1.1 ms sum to 33.000000000000004):
        # compared with a margin far below the log's microseconds, "at least twice" holds at twice.
        if recent_mean < MIN_RATIO * history_mean - _SLACK_MS or recent_mean - history_mean < MIN_DELTA_MS - _SLACK_MS:
            return None
        ratio = recent_mean / history_mean if history_mean > 0 else float("inf")
        short = text if len(text) <= 120 else text[:117] + "..."
        return FindingDraft(
            severity="critical" if ratio >= CRITICAL_RATIO else "warning",
            title=f"A query got {ratio:.1f}x slower",
            summary=(
                f"The mean time of `{_code(short)}` rose to **{recent_mean:.2f} ms** over {recent_calls} calls"
                f" in the hour up to {format_time(last_us)}, from **{history_mean:.2f} ms** over"
                f" {history_calls} calls in the 23 hours before ({ratio:.1f}x). Look for a changed plan"
                " (EXPLAIN), a table that grew, or lock waits and temporary files at the same time."
            ),
            evidence=Evidence(
                window_from_us=split - HISTORY_US,
                window_to_us=last_us,
                count=recent_calls,
                line_ids=(example_id,),
                query_ids=(fp,),
                facts={
                    "recent_mean_ms": round(recent_mean, 3),
                    "history_mean_ms": round(history_mean, 3),
                    "ratio": round(ratio, 2),
                    "recent_calls": recent_calls,
                    "history_calls": history_calls,
                },
            ),
        )

    @staticmethod
    def candidates(c: sqlite3.Connection, seen: set[tuple[int, str]] | None) -> set[tuple[int, str]]:
        """Those of the queries `seen` (None: of every query) with enough calls in all to ever
        open a finding."""
        rows = c.execute(
            "SELECT db, fingerprint FROM insight_query_buckets GROUP BY db, fingerprint HAVING sum(calls) >= ?",
            (MIN_RECENT_CALLS + MIN_HISTORY_CALLS,),
        )
        return {(db, fp) for db, fp in rows if seen is None or (db, fp) in seen}

    @staticmethod
    def _sums(c: sqlite3.Connection, db: int, fp: str, lo: int, hi: int) -> tuple[int, float]:
        calls, total = c.execute(
            "SELECT coalesce(sum(calls), 0), coalesce(sum(total_ms), 0) FROM insight_query_buckets"
            " WHERE db = ? AND fingerprint = ? AND start_us >= ? AND start_us < ?",
            (db, fp, lo, hi),
        ).fetchone()
        return int(calls), float(total)


def _code(text: str) -> str:
    # Inline code in Markdown: a backtick inside would end it early.
    return text.replace("`", "'")
