"""Findings: observations counted per minute, rule evaluations, and the findings table.

A finding's id is derived from (database id, rule, subject): the same problem on the same table
keeps its id when it comes back, so links to it stay good. Its evidence is copied into the row
when the rule evaluates, so it keeps its numbers after retention deleted its lines; the API says
which of its line ids are still stored.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable
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
SAMPLES: Final = 5  # and its newest samples


def finding_id(database_id: str, rule: str, subject: str) -> str:
    """Stable id of the finding of `rule` about `subject` on a database: 16 hex digits."""
    return hashlib.blake2b(f"{database_id}\x00{rule}\x00{subject}".encode(), digest_size=8).hexdigest()


# --- folding a batch of observations ---------------------------------------------------------

SubjectKey = tuple[int, str, str]  # (database code, rule, subject)


@dataclass(slots=True)
class _SubjectSeen:
    ids: list[int] = field(default_factory=list)
    samples: list[dict[str, str | int | float]] = field(default_factory=list)
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
        seen.ids.append(obs.line_id)
        if obs.sample is not None:
            seen.samples.append(obs.sample)
        seen.last_us = max(seen.last_us, obs.time_us)


def apply(conn: sqlite3.Connection, fold: ObservationFold) -> None:
    """Add a batch's observations to the tables (inside the caller's transaction)."""
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
        ids, samples, last_us = ([], [], 0) if row is None else (orjson.loads(row[0]), orjson.loads(row[1]), row[2])
        ids = _keep_ids([*ids, *seen.ids])
        samples = [*samples, *seen.samples][-SAMPLES:]
        conn.execute(
            "INSERT OR REPLACE INTO insight_subjects (db, rule, subject, line_ids, samples, last_us)"
            " VALUES (?,?,?,?,?,?)",
            (db, rule, subject, orjson.dumps(ids), orjson.dumps(samples), max(last_us, seen.last_us)),
        )


def _keep_ids(ids: list[int]) -> list[int]:
    ordered = sorted(set(ids))
    if len(ordered) <= FIRST_IDS + NEWEST_IDS:
        return ordered
    return ordered[:FIRST_IDS] + ordered[-NEWEST_IDS:]


def history(
    conn: sqlite3.Connection, db: int, database_id: str, rule: str, subject: str, lookback_us: int, now_us: int
) -> SubjectHistory:
    """What `rule.evaluate` sees of a subject: its minutes in (now - lookback, now]."""
    buckets = tuple(
        Bucket(*row)
        for row in conn.execute(
            "SELECT start_us, count, total, max FROM insight_observations"
            " WHERE db = ? AND rule = ? AND subject = ? AND start_us > ? AND start_us <= ? ORDER BY start_us",
            (db, rule, subject, now_us - lookback_us - MINUTE_US, now_us),
        )
    )
    row = conn.execute(
        "SELECT line_ids, samples FROM insight_subjects WHERE db = ? AND rule = ? AND subject = ?", (db, rule, subject)
    ).fetchone()
    ids, samples = ((), ()) if row is None else (tuple(orjson.loads(row[0])), tuple(orjson.loads(row[1])))
    return SubjectHistory(database_id, rule, subject, buckets, ids, samples, now_us)


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
    if row is None:
        conn.execute(
            "INSERT INTO insight_findings (id, db, rule, subject, severity, title, summary, evidence, fixes,"
            " first_us, last_us, status) VALUES (?,?,?,?,?,?,?,?,?,?,?, 'open')",
            (fid, db, rule, subject, *values, ev.window_from_us, ev.window_to_us),
        )
        return "opened"
    conn.execute(
        "UPDATE insight_findings SET severity = ?, title = ?, summary = ?, evidence = ?, fixes = ?,"
        " first_us = min(first_us, ?), last_us = max(last_us, ?), status = 'open', resolved_us = NULL WHERE id = ?",
        (*values, ev.window_from_us, ev.window_to_us, fid),
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


def fix_from_json(raw: dict[str, Any]) -> Fix:
    return Fix(**{**raw, "statement": tuple(SqlPart(**p) for p in raw["statement"])})


def deleted_line_ids(conn: sqlite3.Connection, ids: Iterable[int]) -> set[int]:
    """Those of `ids` no longer stored (retention deleted them)."""
    wanted = sorted(set(ids))
    if not wanted:
        return set()
    marks = ",".join("?" * len(wanted))
    present = {r[0] for r in conn.execute(f"SELECT id FROM lines WHERE id IN ({marks})", wanted)}
    return set(wanted) - present
