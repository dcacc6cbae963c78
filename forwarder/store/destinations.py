"""Destinations and their delivery state: each destination is a consumer of the lines with a cursor.

    lines:  ... 41 42 43 44 45 46 47 48 ...
                     ^cursor   ^inflight_upto
                        [44 46] inflight_lines (45, 47 filtered out), inflight_id dlv_...

`cursor` is the last line id accounted for (delivered, filtered out or dropped). A batch is
persisted as in flight *before* it is sent, so a retry, also after a restart, sends the same
lines under the same delivery id. When its outcome is known the cursor moves to
`inflight_upto` in the same transaction that clears the batch.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import orjson

from forwarder.model import KINDS, expand_kinds
from forwarder.store.lines import stored_doc

ManagedBy = Literal["api", "config"]


@dataclass(frozen=True, slots=True)
class LineFilter:
    """Which lines a destination receives; an empty list means everything."""

    kinds: tuple[str, ...] = ()
    database_ids: tuple[str, ...] = ()

    @classmethod
    def of(cls, kinds: Sequence[str], database_ids: Sequence[str]) -> LineFilter:
        """A filter from lists as given (API body, config file), repeats dropped, order kept."""
        return cls(tuple(dict.fromkeys(kinds)), tuple(dict.fromkeys(database_ids)))

    def to_json(self) -> dict[str, list[str]]:
        return {"kinds": list(self.kinds), "database_ids": list(self.database_ids)}

    def matcher(self, db_codes: dict[str, int]) -> Callable[[int, int], bool]:
        """A fast test on (db code, kind code) rows."""
        kind_codes = {KINDS.index(k) for k in expand_kinds(list(self.kinds))} if self.kinds else None
        dbs = {db_codes[d] for d in self.database_ids if d in db_codes} if self.database_ids else None
        if kind_codes is None and dbs is None:
            return lambda db, kind: True
        return lambda db, kind: (kind_codes is None or kind in kind_codes) and (dbs is None or db in dbs)


@dataclass(frozen=True, slots=True)
class Destination:
    """A destination's definition (what the API sets)."""

    id: str
    type: str
    name: str
    enabled: bool
    config: dict[str, Any]
    filter: LineFilter
    sealed_secret: bytes | None
    created_at: float
    updated_at: float
    managed_by: ManagedBy = "api"  # "config": declared in the config file, changed only there


@dataclass(frozen=True, slots=True)
class DeliveryState:
    """Where a destination's delivery stands (what the loop persists)."""

    cursor: int
    inflight_id: str | None = None
    inflight_lines: tuple[int, ...] | None = None
    inflight_upto: int | None = None
    attempts: int = 0
    next_attempt_at: float | None = None
    last_error: str | None = None
    last_error_at: float | None = None
    last_success_at: float | None = None
    sent_lines: int = 0
    dropped_lines: int = 0


@dataclass(frozen=True, slots=True)
class Batch:
    """Lines read after a cursor for one destination: `upto` is the last id scanned."""

    ids: list[int]
    docs: list[bytes] = field(default_factory=list)
    upto: int = 0


_COLUMNS = (
    "id, type, name, enabled, config, filter, secret, created_at, updated_at, cursor, inflight_id, inflight_lines,"
    " inflight_upto, attempts, next_attempt_at, last_error, last_error_at, last_success_at, sent_lines, dropped_lines,"
    " managed_by"
)


def _row(row: Sequence[Any]) -> tuple[Destination, DeliveryState]:
    f = orjson.loads(row[5])
    dest = Destination(
        id=row[0],
        type=row[1],
        name=row[2],
        enabled=bool(row[3]),
        config=orjson.loads(row[4]),
        filter=LineFilter(tuple(f.get("kinds", ())), tuple(f.get("database_ids", ()))),
        sealed_secret=row[6],
        created_at=row[7],
        updated_at=row[8],
        managed_by=row[20],
    )
    state = DeliveryState(
        cursor=row[9],
        inflight_id=row[10],
        inflight_lines=tuple(orjson.loads(row[11])) if row[11] is not None else None,
        inflight_upto=row[12],
        attempts=row[13],
        next_attempt_at=row[14],
        last_error=row[15],
        last_error_at=row[16],
        last_success_at=row[17],
        sent_lines=row[18],
        dropped_lines=row[19],
    )
    return dest, state


def get(conn: sqlite3.Connection, dest_id: str) -> tuple[Destination, DeliveryState] | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM destinations WHERE id = ?", (dest_id,)).fetchone()
    return _row(row) if row else None


def list_all(conn: sqlite3.Connection) -> list[tuple[Destination, DeliveryState]]:
    return [_row(r) for r in conn.execute(f"SELECT {_COLUMNS} FROM destinations ORDER BY created_at, id")]


def insert(conn: sqlite3.Connection, dest: Destination, cursor: int) -> None:
    conn.execute(
        "INSERT INTO destinations"
        " (id, type, name, enabled, config, filter, secret, created_at, updated_at, cursor, managed_by)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            dest.id,
            dest.type,
            dest.name,
            int(dest.enabled),
            orjson.dumps(dest.config),
            orjson.dumps(dest.filter.to_json()),
            dest.sealed_secret,
            dest.created_at,
            dest.updated_at,
            cursor,
            dest.managed_by,
        ),
    )


def update(conn: sqlite3.Connection, dest: Destination) -> None:
    """Replace the definition; the delivery state stays (a changed destination keeps its cursor)."""
    conn.execute(
        "UPDATE destinations SET name = ?, enabled = ?, config = ?, filter = ?, secret = ?, updated_at = ?"
        " WHERE id = ?",
        (
            dest.name,
            int(dest.enabled),
            orjson.dumps(dest.config),
            orjson.dumps(dest.filter.to_json()),
            dest.sealed_secret,
            dest.updated_at,
            dest.id,
        ),
    )


def delete(conn: sqlite3.Connection, dest_id: str) -> bool:
    return conn.execute("DELETE FROM destinations WHERE id = ?", (dest_id,)).rowcount == 1


# --- the delivery loop's reads and writes -----------------------------------------------------


def next_batch(
    conn: sqlite3.Connection,
    cursor: int,
    match: Callable[[int, int], bool],
    max_lines: int,
    max_bytes: int,
    max_scan_rows: int = 8000,
) -> Batch | None:
    """The next lines after `cursor` that pass the filter, within the limits; None when none are stored.

    `upto` is the last id looked at: lines up to it that are not in the batch were filtered out.
    A single line larger than `max_bytes` still forms a batch of its own (the sink truncates it).
    """
    ids: list[int] = []
    docs: list[bytes] = []
    size = 0
    upto = cursor
    # Read no more rows than the batch can hold; widen only while the filter drops most of them.
    scan_rows = max_lines
    while True:
        rows = conn.execute(
            "SELECT id, db, kind, time_us, doc FROM lines WHERE id > ? ORDER BY id LIMIT ?", (upto, scan_rows)
        ).fetchall()
        scan_rows = min(scan_rows * 2, max_scan_rows)
        if not rows:
            return Batch(ids, docs, upto) if upto > cursor else None
        for line_id, db, kind, time_us, doc in rows:
            if match(db, kind):
                full = stored_doc(line_id, time_us, doc)
                if ids and (len(ids) >= max_lines or size + len(full) > max_bytes):
                    return Batch(ids, docs, upto)
                ids.append(line_id)
                docs.append(full)
                size += len(full)
            upto = line_id
        if len(ids) >= max_lines:
            return Batch(ids, docs, upto)


def docs_by_ids(conn: sqlite3.Connection, ids: Sequence[int]) -> dict[int, bytes]:
    """Stored documents (id spliced in) of these lines; ids deleted by retention are absent."""
    out: dict[int, bytes] = {}
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        marks = ",".join("?" * len(chunk))
        for line_id, time_us, doc in conn.execute(f"SELECT id, time_us, doc FROM lines WHERE id IN ({marks})", chunk):
            out[line_id] = stored_doc(line_id, time_us, doc)
    return out


def lag(conn: sqlite3.Connection, cursor: int) -> tuple[int, int | None]:
    """Lines stored after the cursor (before the filter) and the write time of the oldest of them.

    Ids are consecutive and retention deletes only the oldest lines, so the count is the distance
    from the cursor (or the oldest line kept) to the newest: two rowid lookups, not a scan.
    """
    # Two subqueries: SQLite answers min() or max() from the rowid b-tree only when each stands alone.
    oldest_id, newest_id = conn.execute("SELECT (SELECT min(id) FROM lines), (SELECT max(id) FROM lines)").fetchone()
    if newest_id is None or newest_id <= cursor:
        return 0, None
    first = max(cursor + 1, oldest_id)
    row = conn.execute("SELECT time_us FROM lines WHERE id >= ? ORDER BY id LIMIT 1", (first,)).fetchone()
    return newest_id - first + 1, row[0] if row else None


def save_state(conn: sqlite3.Connection, dest_id: str, s: DeliveryState, sent: int, dropped: int) -> None:
    """Persist the loop's state; the counters move by increments (retention adds to them too)."""
    conn.execute(
        "UPDATE destinations SET cursor = ?, inflight_id = ?, inflight_lines = ?, inflight_upto = ?, attempts = ?,"
        " next_attempt_at = ?, last_error = ?, last_error_at = ?, last_success_at = ?,"
        " sent_lines = sent_lines + ?, dropped_lines = dropped_lines + ? WHERE id = ?",
        (
            s.cursor,
            s.inflight_id,
            orjson.dumps(list(s.inflight_lines)) if s.inflight_lines is not None else None,
            s.inflight_upto,
            s.attempts,
            s.next_attempt_at,
            s.last_error,
            s.last_error_at,
            s.last_success_at,
            sent,
            dropped,
            dest_id,
        ),
    )


def end_backoff(conn: sqlite3.Connection, dest_id: str) -> None:
    """Clear the backoff; the batch in flight (its delivery id, lines, upto) and the shown error stay."""
    conn.execute("UPDATE destinations SET attempts = 0, next_attempt_at = NULL WHERE id = ?", (dest_id,))


def start_batch(conn: sqlite3.Connection, dest_id: str, s: DeliveryState, sent: int, dropped: int) -> DeliveryState:
    """Persist `s` with the batch just read in flight, less its lines retention deleted since the read;
    returns the state as saved.

    Those lines were after the cursor and not in flight when retention deleted them, so it counted
    them as dropped (account_retention): sent from the copy read, they would count as sent too.
    """
    assert s.inflight_lines is not None
    kept = stored_ids(conn, s.inflight_lines)
    if len(kept) < len(s.inflight_lines):
        s = replace(s, inflight_lines=tuple(i for i in s.inflight_lines if i in kept))
    save_state(conn, dest_id, s, sent, dropped)
    return s


def stored_ids(conn: sqlite3.Connection, ids: Sequence[int]) -> set[int]:
    """Which of these lines are still stored (rowid lookups, no documents read)."""
    out: set[int] = set()
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        marks = ",".join("?" * len(chunk))
        out.update(line_id for (line_id,) in conn.execute(f"SELECT id FROM lines WHERE id IN ({marks})", chunk))
    return out


def account_retention(conn: sqlite3.Connection, rows: Sequence[tuple[int, int, int]]) -> dict[tuple[str, str], int]:
    """Before lines (id, db, kind) are deleted: count, per destination, those it had not yet accounted
    for and would have received, as dropped. Returns {(destination id, type): lines dropped}."""
    if not rows:
        return {}
    codes = {db_id: code for code, db_id in conn.execute("SELECT code, id FROM databases")}
    top = max(r[0] for r in rows)
    dropped: dict[tuple[str, str], int] = {}
    for dest, state in list_all(conn):
        # Up to the batch in flight's `inflight_upto`, every line is accounted for already: those
        # still in `inflight_lines` are counted when the loop finds them gone (it knows for sure),
        # the rest were delivered, filtered out or rejected (after a partial failure the batch is
        # narrowed to the lines to retry while the cursor stays put).
        seen = max(state.cursor, state.inflight_upto or 0)
        if seen >= top:
            continue
        match = dest.filter.matcher(codes)
        n = sum(1 for line_id, db, kind in rows if line_id > seen and match(db, kind))
        if n:
            dropped[(dest.id, dest.type)] = n
            conn.execute("UPDATE destinations SET dropped_lines = dropped_lines + ? WHERE id = ?", (n, dest.id))
    return dropped
