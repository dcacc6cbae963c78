"""Findings: observations counted per minute, rule evaluations, and the findings table.

A finding's id is derived from (database id, rule, subject): the same problem on the same table
keeps its id when it comes back, so links to it stay good. Its evidence is copied into the row
when the rule evaluates, so it keeps its numbers after retention deleted its lines; the API says
which of its line ids are still stored.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final

import orjson

from forwarder.insights.model import (
    Bucket,
    Evidence,
    Finding,
    FindingDraft,
    Fix,
    Observation,
    SqlPart,
    SubjectHistory,
)

MINUTE_US: Final = 60 * 1_000_000
FIRST_IDS: Final = 5  # a subject keeps the ids of its first lines...
NEWEST_IDS: Final = 15  # ...and of its newest ones
SAMPLES: Final = 5  # and its newest samples (of each `event`, see _keep_samples)


def finding_id(database_id: str, rule: str, subject: str) -> str:
    """Stable id of the finding of `rule` about `subject` on a database: 16 hex digits."""
    return hashlib.blake2b(f"{database_id}\x00{rule}\x00{subject}".encode(), digest_size=8).hexdigest()


# --- folding a batch of observations ---------------------------------------------------------

SubjectKey = tuple[int, str, str]  # (database code, rule, subject)
Sample = dict[str, str | int | float]
# What a subject keeps of its lines, each with the line's time: evidence is only ever taken from
# the lines inside the window being evaluated, and what retention deleted is forgotten (a value of
# an old episode, logged with full_text on, must never reappear in a new finding). Stored as JSON
# [[id, time_us], ...] and [[time_us, sample], ...]; rows written before times were kept hold bare
# ids and samples, read as of the subject's newest line.
TimedId = tuple[int, int]  # (line id, time_us)
TimedSample = tuple[int, Sample]  # (time_us, sample)


@dataclass(slots=True)
class _SubjectSeen:
    ids: list[TimedId] = field(default_factory=list)
    samples: list[TimedSample] = field(default_factory=list)
    last_us: int = 0


@dataclass(slots=True)
class ObservationFold:
    """One batch's observations: sums per subject and minute, ids and samples per subject."""

    minutes: dict[tuple[int, str, str, int], list[float]] = field(default_factory=dict)
    subjects: dict[SubjectKey, _SubjectSeen] = field(default_factory=dict)

    def add(self, db: int, obs: Observation) -> None:
        key = (db, obs.rule, obs.subject, obs.time_us - obs.time_us % MINUTE_US)
        sums = self.minutes.get(key)
        if sums is None:
            self.minutes[key] = [1, obs.value, obs.value]
        else:
            sums[0] += 1
            sums[1] += obs.value
            sums[2] = max(sums[2], obs.value)
        seen = self.subjects.get(skey := (db, obs.rule, obs.subject))
        if seen is None:
            seen = self.subjects[skey] = _SubjectSeen()
        seen.ids.append((obs.line_id, obs.time_us))
        if obs.sample is not None:
            seen.samples.append((obs.time_us, obs.sample))
        seen.last_us = max(seen.last_us, obs.time_us)


def apply(conn: sqlite3.Connection, fold: ObservationFold, keep_us: Mapping[str, int] | None = None) -> None:
    """Add a batch's observations to the tables (inside the caller's transaction).

    `keep_us` is, per rule, how far behind a subject's newest line its ids and samples are kept: a
    subject is evaluated at its newest line or later, so older ones can never be in its window
    again (without it, they are kept until the sweep forgets them past retention).
    """
    conn.executemany(
        "INSERT INTO insight_observations (db, rule, subject, start_us, count, total, max) VALUES (?,?,?,?,?,?,?)"
        " ON CONFLICT (db, rule, subject, start_us) DO UPDATE SET count = count + excluded.count,"
        " total = total + excluded.total, max = max(max, excluded.max)",
        [(*key, int(s[0]), s[1], s[2]) for key, s in fold.minutes.items()],
    )
    for (db, rule, subject), seen in fold.subjects.items():
        row = conn.execute(
            "SELECT line_ids, samples, last_us FROM insight_subjects WHERE db = ? AND rule = ? AND subject = ?",
            (db, rule, subject),
        ).fetchone()
        ids, samples, last_us = ([], [], 0) if row is None else _kept(row[0], row[1], row[2])
        last_us = max(last_us, seen.last_us)
        keep = None if keep_us is None else keep_us.get(rule)
        horizon = None if keep is None else last_us - keep
        _store_subject(
            conn,
            (db, rule, subject),
            _keep_ids([*ids, *seen.ids], horizon),
            _keep_samples([*samples, *seen.samples], horizon),
            last_us,
        )


def _store_subject(
    conn: sqlite3.Connection, key: SubjectKey, ids: list[TimedId], samples: list[TimedSample], last_us: int
) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO insight_subjects (db, rule, subject, line_ids, samples, last_us) VALUES (?,?,?,?,?,?)",
        (*key, orjson.dumps(ids), orjson.dumps(samples), last_us),
    )


def _kept(raw_ids: str | bytes, raw_samples: str | bytes, last_us: int) -> tuple[list[TimedId], list[TimedSample], int]:
    """A subject's stored ids and samples with their times (see TimedId)."""
    ids = [(int(i[0]), int(i[1])) if isinstance(i, list) else (int(i), last_us) for i in orjson.loads(raw_ids)]
    samples = [(int(s[0]), s[1]) if isinstance(s, list) else (last_us, s) for s in orjson.loads(raw_samples)]
    return ids, samples, int(last_us)


def _keep_ids(ids: list[TimedId], horizon: int | None) -> list[TimedId]:
    """The first and the newest lines (by time) at or after `horizon`, oldest first."""
    by_id = {i: t for i, t in ids if horizon is None or t >= horizon}
    ordered = sorted(by_id.items(), key=lambda it: (it[1], it[0]))
    if len(ordered) <= FIRST_IDS + NEWEST_IDS:
        return ordered
    return ordered[:FIRST_IDS] + ordered[-NEWEST_IDS:]


def _keep_samples(samples: list[TimedSample], horizon: int | None) -> list[TimedSample]:
    """The newest SAMPLES samples at or after `horizon` of each `event` (oldest first).

    A rule that tells kinds of lines apart by the sample's `event` (checkpoints: "complete" lines
    and "too frequently" warnings) keeps the newest of each: frequent lines of one kind must not
    push a rarer one out while it is still in the window. Events are the rules' own fixed words.
    """
    kept: list[TimedSample] = []
    counts: dict[object, int] = {}
    # Newest first; among samples of one time, the one added last is the newer.
    fresh = [(t, n, s) for n, (t, s) in enumerate(samples) if horizon is None or t >= horizon]
    for t, _, sample in sorted(fresh, key=lambda it: (it[0], it[1]), reverse=True):
        event = sample.get("event")
        if counts.get(event, 0) < SAMPLES:
            counts[event] = counts.get(event, 0) + 1
            kept.append((t, sample))
    kept.reverse()
    return kept


def forget_before(conn: sqlite3.Connection, cutoff_us: int, keep_us: int) -> None:
    """Forget what subjects kept of lines older than `cutoff_us` (retention deleted them).

    A subject whose newest line is older goes whole. Others keep ids and samples no older than
    `keep_us` behind their newest line (`apply`), so only those whose newest line is within `keep_us`
    of the cutoff can hold older ones: the stored lists are oldest first, SQLite reads the first time
    (the JSON is stored as bytes: cast to text, as every SQLite reads text JSON).
    """
    conn.execute("DELETE FROM insight_subjects WHERE last_us < ?", (cutoff_us,))
    rows = conn.execute(
        "SELECT db, rule, subject, line_ids, samples, last_us FROM insight_subjects"
        " WHERE last_us < ? AND (json_extract(CAST(line_ids AS TEXT), '$[0][1]') < ?"
        " OR json_extract(CAST(samples AS TEXT), '$[0][0]') < ?)",
        (cutoff_us + keep_us, cutoff_us, cutoff_us),
    ).fetchall()
    for db, rule, subject, raw_ids, raw_samples, last_us in rows:
        ids, samples, last_us = _kept(raw_ids, raw_samples, last_us)
        _store_subject(
            conn,
            (db, rule, subject),
            _keep_ids(ids, cutoff_us),
            _keep_samples(samples, cutoff_us),
            last_us,
        )


def history(
    conn: sqlite3.Connection,
    db: int,
    database_id: str,
    rule: str,
    subject: str,
    lookback_us: int,
    now_us: int,
    since_us: int | None = None,
) -> SubjectHistory:
    """What `rule.evaluate` sees of a subject: its minutes in (now - lookback, now], and the ids and
    samples of its lines in the same window (from the minute holding now - lookback, as
    rules.common.window counts), none older than `since_us` (the retention horizon)."""
    buckets = tuple(
        Bucket(*row)
        for row in conn.execute(
            "SELECT start_us, count, total, max FROM insight_observations"
            " WHERE db = ? AND rule = ? AND subject = ? AND start_us > ? AND start_us <= ? ORDER BY start_us",
            (db, rule, subject, now_us - lookback_us - MINUTE_US, now_us),
        )
    )
    row = conn.execute(
        "SELECT line_ids, samples, last_us FROM insight_subjects WHERE db = ? AND rule = ? AND subject = ?",
        (db, rule, subject),
    ).fetchone()
    ids: tuple[int, ...] = ()
    samples: tuple[Sample, ...] = ()
    if row is not None:
        start = now_us - lookback_us
        lo = start - start % MINUTE_US
        if since_us is not None:
            lo = max(lo, since_us)
        hi = now_us - now_us % MINUTE_US + MINUTE_US  # the minute holding now_us counts, as its bucket
        kept_ids, kept_samples, _ = _kept(row[0], row[1], row[2])
        ids = tuple(sorted(i for i, t in kept_ids if lo <= t < hi))
        samples = tuple(s for t, s in kept_samples if lo <= t < hi)
    return SubjectHistory(database_id, rule, subject, buckets, ids, samples, now_us)


def newest_us(conn: sqlite3.Connection, db: int, database_id: str, rule: str, subject: str) -> int | None:
    """The time of the newest line ever seen of a subject (its finding's last_seen once forgotten)."""
    row = conn.execute(
        "SELECT max(coalesce((SELECT last_us FROM insight_subjects WHERE db = ? AND rule = ? AND subject = ?), 0),"
        " coalesce((SELECT last_us FROM insight_findings WHERE id = ?), 0))",
        (db, rule, subject, finding_id(database_id, rule, subject)),
    ).fetchone()
    return int(row[0]) or None


def is_open(conn: sqlite3.Connection, database_id: str, rule: str, subject: str) -> bool:
    row = conn.execute(
        "SELECT status FROM insight_findings WHERE id = ?", (finding_id(database_id, rule, subject),)
    ).fetchone()
    return row is not None and row[0] == "open"


def last_seen(conn: sqlite3.Connection, db: int, rule: str, subject: str) -> int | None:
    row = conn.execute(
        "SELECT last_us FROM insight_subjects WHERE db = ? AND rule = ? AND subject = ?", (db, rule, subject)
    ).fetchone()
    return None if row is None else int(row[0])


# --- the findings table ----------------------------------------------------------------------


def save(
    conn: sqlite3.Connection,
    db: int,
    database_id: str,
    rule: str,
    subject: str,
    draft: FindingDraft | None,
    now_us: int,
) -> str | None:
    """Open or update the finding of (rule, subject) from `draft`, or resolve it when `draft` is None.

    Returns what happened ("opened", "updated", "reopened", "resolved") or None when nothing did.
    """
    fid = finding_id(database_id, rule, subject)
    row = conn.execute("SELECT status, first_us FROM insight_findings WHERE id = ?", (fid,)).fetchone()
    if draft is None:
        if row is None or row[0] != "open":
            return None
        conn.execute("UPDATE insight_findings SET status = 'resolved', resolved_us = ? WHERE id = ?", (now_us, fid))
        return "resolved"
    ev = draft.evidence
    values = (
        draft.severity,
        draft.title,
        draft.summary,
        orjson.dumps(evidence_json(ev)),
        orjson.dumps([fix_json(f) for f in draft.fixes]),
    )
    # Last seen: the subject's newest line, not the time it was evaluated at (a sweep's now),
    # which a finding with no new line would otherwise carry forward at every sweep. (A rule
    # without lines of its own, the query regressions, ends its evidence at its newest call.)
    newest = last_seen(conn, db, rule, subject)
    last_us = ev.window_to_us if newest is None else min(newest, ev.window_to_us)
    if row is None:
        conn.execute(
            "INSERT INTO insight_findings (id, db, rule, subject, severity, title, summary, evidence, fixes,"
            " first_us, last_us, status) VALUES (?,?,?,?,?,?,?,?,?,?,?, 'open')",
            (fid, db, rule, subject, *values, ev.window_from_us, last_us),
        )
        return "opened"
    conn.execute(
        "UPDATE insight_findings SET severity = ?, title = ?, summary = ?, evidence = ?, fixes = ?,"
        " first_us = min(first_us, ?), last_us = ?, status = 'open', resolved_us = NULL WHERE id = ?",
        (*values, ev.window_from_us, last_us, fid),
    )
    return "updated" if row[0] == "open" else "reopened"


_COLUMNS: Final = (
    "f.id, d.id, f.rule, f.subject, f.severity, f.title, f.summary, f.evidence, f.fixes,"
    " f.first_us, f.last_us, f.status, f.resolved_us"
)


def get(conn: sqlite3.Connection, db: int, fid: str) -> Finding | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM insight_findings f JOIN databases d ON d.code = f.db WHERE f.db = ? AND f.id = ?",
        (db, fid),
    ).fetchone()
    return None if row is None else _finding(row)


def listing(conn: sqlite3.Connection, db: int, status: str | None, from_us: int | None, limit: int) -> list[Finding]:
    """A database's findings seen at or after `from_us`, newest `last_seen` first."""
    sql = f"SELECT {_COLUMNS} FROM insight_findings f JOIN databases d ON d.code = f.db WHERE f.db = ?"
    args: list[Any] = [db]
    if status is not None:
        sql += " AND f.status = ?"
        args.append(status)
    if from_us is not None:
        sql += " AND f.last_us >= ?"
        args.append(from_us)
    sql += " ORDER BY f.last_us DESC, f.id LIMIT ?"
    args.append(limit)
    return [_finding(row) for row in conn.execute(sql, args)]


def open_subjects(conn: sqlite3.Connection) -> list[tuple[int, str, str]]:
    """(database code, rule, subject) of every open finding: what a sweep re-evaluates."""
    return [
        (r[0], r[1], r[2]) for r in conn.execute("SELECT db, rule, subject FROM insight_findings WHERE status = 'open'")
    ]


def open_counts(conn: sqlite3.Connection) -> dict[tuple[str, str], int]:
    """Open findings by (database id, severity)."""
    rows = conn.execute(
        "SELECT d.id, f.severity, count(*) FROM insight_findings f JOIN databases d ON d.code = f.db"
        " WHERE f.status = 'open' GROUP BY d.id, f.severity"
    )
    return {(database_id, severity): n for database_id, severity, n in rows}


def _finding(row: tuple[Any, ...]) -> Finding:
    fid, database_id, rule, subject, severity, title, summary, evidence, fixes, first_us, last_us, status, res = row
    return Finding(
        id=fid,
        database_id=database_id,
        rule=rule,
        subject=subject,
        severity=severity,
        title=title,
        summary=summary,
        evidence=evidence_from_json(orjson.loads(evidence)),
        fixes=tuple(fix_from_json(f) for f in orjson.loads(fixes)),
        first_seen_us=first_us,
        last_seen_us=last_us,
        status=status,
        resolved_us=res,
    )


def evidence_json(ev: Evidence) -> dict[str, Any]:
    return {
        "from_us": ev.window_from_us,
        "to_us": ev.window_to_us,
        "count": ev.count,
        "line_ids": list(ev.line_ids),
        "query_ids": list(ev.query_ids),
        "facts": ev.facts,
    }


def evidence_from_json(raw: dict[str, Any]) -> Evidence:
    return Evidence(
        window_from_us=raw["from_us"],
        window_to_us=raw["to_us"],
        count=raw["count"],
        line_ids=tuple(raw["line_ids"]),
        query_ids=tuple(raw["query_ids"]),
        facts=raw["facts"],
    )


def fix_json(fix: Fix) -> dict[str, Any]:
    out = asdict(fix)
    out["statement"] = [asdict(p) for p in fix.statement]
    return out


# Fixes stored before `database` existed: a table's fix that does not say its database would run in
# the one the daemon's connection names (and its table may have been read wrong from a name with a
# double quote): it is kept as a fix by hand.
_TABLE_FIXES: Final = frozenset({"table-autovacuum"})


def fix_from_json(raw: dict[str, Any]) -> Fix:
    if "database" not in raw and raw["fix_id"] in _TABLE_FIXES:
        return Fix(**{**raw, "statement": (), "manual": True})
    return Fix(**{**raw, "statement": tuple(SqlPart(**p) for p in raw["statement"])})


def deleted_line_ids(conn: sqlite3.Connection, ids: Iterable[int]) -> set[int]:
    """Those of `ids` no longer stored (retention deleted them)."""
    wanted = sorted(set(ids))
    if not wanted:
        return set()
    marks = ",".join("?" * len(wanted))
    present = {r[0] for r in conn.execute(f"SELECT id FROM lines WHERE id IN ({marks})", wanted)}
    return set(wanted) - present
