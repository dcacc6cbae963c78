"""Durable state beside the lines: database settings, file offsets, usage, API keys, audit."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import sqlite3
from dataclasses import dataclass
from typing import Any, Final, Literal

import orjson

Role = Literal["read-only", "read-write"]
ROLES: Final[tuple[Role, ...]] = ("read-only", "read-write")
KEY_PREFIX: Final = "fwd"
DEFAULT_ORG: Final = "default"


@dataclass(frozen=True, slots=True)
class DatabaseSettings:
    """Per-database log settings (SPEC 2.4)."""

    enabled: bool
    full_text: bool


@dataclass(frozen=True, slots=True)
class SourceFile:
    """How far one log file has been turned into stored lines."""

    dev: int
    ino: int
    head: bytes  # the file's first bytes when first seen (up to HEAD_BYTES)
    path: str
    offset: int
    tail: bytes = b""  # the file's bytes right before `offset` (up to TAIL_BYTES; none known: empty)


@dataclass(frozen=True, slots=True)
class ApiKey:
    """An API key's public record (its secret is never kept, only a hash)."""

    id: str
    name: str
    role: Role
    org: str
    created_at: int
    last_used_at: int | None
    revoked_at: int | None


# --- the store itself ---------------------------------------------------------------------------

STORE_ID_KEY: Final = "store_id"


def store_id(conn: sqlite3.Connection) -> str:
    """This store's random identity, made on first call and kept for its life.

    Receivers that deduplicate by document id (Elasticsearch `_id`) combine it with the line id,
    so two forwarders (or a store recreated from scratch) never collide on the same id.
    """
    row = conn.execute("SELECT value FROM kv WHERE key = ?", (STORE_ID_KEY,)).fetchone()
    if row is not None:
        return str(row[0])
    value = secrets.token_hex(8)
    conn.execute("INSERT INTO kv (key, value) VALUES (?, ?)", (STORE_ID_KEY, value))  # autocommit
    return value


# --- databases and settings -------------------------------------------------------------------


def ensure_database(conn: sqlite3.Connection, db_id: str, enabled: bool, full_text: bool, now_us: int) -> int:
    """The database's code, creating its row with the config's initial settings on first sight."""
    row = conn.execute("SELECT code FROM databases WHERE id = ?", (db_id,)).fetchone()
    if row:
        return int(row[0])
    cur = conn.execute(
        "INSERT INTO databases (id, enabled, full_text, updated_at) VALUES (?, ?, ?, ?)",
        (db_id, int(enabled), int(full_text), now_us),
    )
    return int(cur.lastrowid or 0)


def get_settings(conn: sqlite3.Connection, db_id: str) -> DatabaseSettings | None:
    row = conn.execute("SELECT enabled, full_text FROM databases WHERE id = ?", (db_id,)).fetchone()
    return DatabaseSettings(bool(row[0]), bool(row[1])) if row else None


def put_settings(conn: sqlite3.Connection, db_id: str, settings: DatabaseSettings, now_us: int) -> None:
    conn.execute(
        "UPDATE databases SET enabled = ?, full_text = ?, updated_at = ? WHERE id = ?",
        (int(settings.enabled), int(settings.full_text), now_us, db_id),
    )


# --- file offsets -----------------------------------------------------------------------------


def source_files(conn: sqlite3.Connection, db_id: str) -> list[SourceFile]:
    return [
        SourceFile(dev, ino, head, path, offset, tail)
        for dev, ino, head, path, offset, tail in conn.execute(
            "SELECT dev, ino, head, path, offset, tail FROM source_files WHERE db_id = ?", (db_id,)
        )
    ]


def put_source_file(conn: sqlite3.Connection, db_id: str, sf: SourceFile, now_us: int) -> None:
    conn.execute(
        """
        INSERT INTO source_files (db_id, dev, ino, head, path, offset, tail, updated_at) VALUES (?,?,?,?,?,?,?,?)
        ON CONFLICT (db_id, dev, ino) DO UPDATE SET
            head = excluded.head, path = excluded.path, offset = excluded.offset, tail = excluded.tail,
            updated_at = excluded.updated_at
        """,
        (db_id, sf.dev, sf.ino, sf.head, sf.path, sf.offset, sf.tail, now_us),
    )


def forget_source_files(conn: sqlite3.Connection, db_id: str, keep: list[tuple[int, int]]) -> None:
    """Drop offsets of files that are gone (all but `keep`, as (dev, ino) pairs)."""
    rows = conn.execute("SELECT dev, ino FROM source_files WHERE db_id = ?", (db_id,)).fetchall()
    gone = [(db_id, d, i) for d, i in rows if (d, i) not in set(keep)]
    conn.executemany("DELETE FROM source_files WHERE db_id = ? AND dev = ? AND ino = ?", gone)


def journal_cursor(conn: sqlite3.Connection, db_id: str) -> str | None:
    """The cursor of the last journal record whose entry is stored, None before the first."""
    row = conn.execute("SELECT cursor FROM journal_cursors WHERE db_id = ?", (db_id,)).fetchone()
    return str(row[0]) if row else None


def put_journal_cursor(conn: sqlite3.Connection, db_id: str, cursor: str, now_us: int) -> None:
    conn.execute(
        """
        INSERT INTO journal_cursors (db_id, cursor, updated_at) VALUES (?, ?, ?)
        ON CONFLICT (db_id) DO UPDATE SET cursor = excluded.cursor, updated_at = excluded.updated_at
        """,
        (db_id, cursor, now_us),
    )


# --- usage ------------------------------------------------------------------------------------


def add_usage(conn: sqlite3.Connection, db_code: int, day: str, lines: int, nbytes: int) -> None:
    conn.execute(
        """
        INSERT INTO daily_usage (db, day, lines, bytes) VALUES (?, ?, ?, ?)
        ON CONFLICT (db, day) DO UPDATE SET lines = lines + excluded.lines, bytes = bytes + excluded.bytes
        """,
        (db_code, day, lines, nbytes),
    )


def usage(conn: sqlite3.Connection, db_code: int, day: str) -> tuple[int, int]:
    row = conn.execute("SELECT lines, bytes FROM daily_usage WHERE db = ? AND day = ?", (db_code, day)).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


# --- API keys ---------------------------------------------------------------------------------


def _hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def create_key(
    conn: sqlite3.Connection, name: str, role: Role, now_us: int, org: str = DEFAULT_ORG
) -> tuple[ApiKey, str]:
    """A new key; returns its record and the full key text, which is never stored or shown again."""
    key_id = secrets.token_hex(6)
    full = f"{KEY_PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"
    conn.execute(
        "INSERT INTO api_keys (id, name, role, org, hash, created_at) VALUES (?, ?, ?, ?, ?, ?)",
        (key_id, name, role, org, _hash(full), now_us),
    )
    return ApiKey(key_id, name, role, org, now_us, None, None), full


def _row_to_key(row: tuple[Any, ...]) -> ApiKey:
    key_id, name, role, org, created, used, revoked = row
    return ApiKey(key_id, name, role, org, created, used, revoked)


def list_keys(conn: sqlite3.Connection) -> list[ApiKey]:
    return [
        _row_to_key(r)
        for r in conn.execute(
            "SELECT id, name, role, org, created_at, last_used_at, revoked_at FROM api_keys ORDER BY created_at"
        )
    ]


def revoke_key(conn: sqlite3.Connection, key_id: str, now_us: int) -> bool:
    cur = conn.execute("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (now_us, key_id))
    conn.execute("DELETE FROM web_sessions WHERE key_id = ?", (key_id,))  # its sessions end with it
    return cur.rowcount == 1


def verify_key(conn: sqlite3.Connection, presented: str) -> ApiKey | None:
    """The live key matching `presented`, or None. The hash comparison takes constant time."""
    parts = presented.split("_")
    if len(parts) < 3 or parts[0] != KEY_PREFIX:
        return None
    row = conn.execute(
        "SELECT id, name, role, org, created_at, last_used_at, revoked_at, hash FROM api_keys WHERE id = ?",
        (parts[1],),
    ).fetchone()
    if row is None or not hmac.compare_digest(row[7], _hash(presented)) or row[6] is not None:
        return None
    return _row_to_key(row[:7])


# --- web sessions -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WebSession:
    """A signed-in browser: the live key it stands for and the CSRF token of its forms."""

    key: ApiKey
    csrf: str
    expires_at: int


def create_session(conn: sqlite3.Connection, key_id: str, now_us: int, ttl_us: int) -> tuple[str, str]:
    """A new session for key `key_id`: (token for the cookie, CSRF token). Only the token's hash is kept."""
    token = secrets.token_urlsafe(32)
    csrf = secrets.token_urlsafe(24)
    conn.execute("DELETE FROM web_sessions WHERE expires_at <= ?", (now_us,))
    conn.execute(
        "INSERT INTO web_sessions (hash, key_id, csrf, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
        (_hash(token), key_id, csrf, now_us, now_us + ttl_us),
    )
    return token, csrf


def web_session(conn: sqlite3.Connection, token: str, now_us: int) -> WebSession | None:
    """The live session of `token`: unexpired, and its key not revoked; else None."""
    row = conn.execute(
        """
        SELECT k.id, k.name, k.role, k.org, k.created_at, k.last_used_at, k.revoked_at, s.csrf, s.expires_at
        FROM web_sessions s JOIN api_keys k ON k.id = s.key_id
        WHERE s.hash = ? AND s.expires_at > ? AND k.revoked_at IS NULL
        """,
        (_hash(token), now_us),
    ).fetchone()
    return None if row is None else WebSession(_row_to_key(row[:7]), row[7], row[8])


def end_session(conn: sqlite3.Connection, token: str) -> None:
    conn.execute("DELETE FROM web_sessions WHERE hash = ?", (_hash(token),))


# --- audit ------------------------------------------------------------------------------------


def audit(
    conn: sqlite3.Connection,
    now_us: int,
    *,
    org: str,
    actor: str,
    action: str,
    target: str | None = None,
    details: dict[str, object] | None = None,
) -> None:
    """Record an operation. `details` must never hold a secret."""
    conn.execute(
        "INSERT INTO audit (time_us, org, actor, action, target, details) VALUES (?, ?, ?, ?, ?, ?)",
        (now_us, org, actor, action, target, orjson.dumps(details).decode() if details else None),
    )


def audit_records(conn: sqlite3.Connection, limit: int = 100, org: str | None = None) -> list[dict[str, object]]:
    """The newest `limit` records, newest first; only organization `org`'s when it is given."""
    where, args = ("WHERE org = ?", (org,)) if org is not None else ("", ())
    rows = conn.execute(
        f"SELECT time_us, org, actor, action, target, details FROM audit {where} ORDER BY id DESC LIMIT ?",
        (*args, limit),
    ).fetchall()
    return [
        {
            "time_us": t,
            "org": o,
            "actor": a,
            "action": act,
            "target": tg,
            "details": orjson.loads(d) if d else None,
        }
        for t, o, a, act, tg, d in rows
    ]
