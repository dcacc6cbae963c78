"""Ask's durable records, per organization: settings and the sealed own key, built-in usage per
UTC month, conversations and their messages. Plain functions over one connection, run by the
store's threads (`Store.read` / `Store.write`); the key is kept only sealed (secrets.SecretBox).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any, Literal

import orjson

MessageRole = Literal["user", "assistant"]
MessageStatus = Literal["complete", "streaming", "partial", "failed"]
Rating = Literal["up", "down", ""]


@dataclass(frozen=True, slots=True)
class OrgAsk:
    """An organization's Ask settings. `sealed_key` never leaves the daemon."""

    org: str
    enabled: bool = False
    provider: str | None = None
    sealed_key: bytes | None = None
    fast_model: str = ""
    deep_model: str = ""
    key_invalid: bool = False

    def __repr__(self) -> str:  # the sealed key is not for logs either
        return f"OrgAsk(org={self.org!r}, enabled={self.enabled}, provider={self.provider!r})"


@dataclass(frozen=True, slots=True)
class Conversation:
    id: str
    org: str
    database: str | None
    title: str
    created_at: int
    updated_at: int
    messages: int = 0


@dataclass(frozen=True, slots=True)
class Message:
    id: str
    conversation_id: str
    role: MessageRole
    text: str
    status: MessageStatus
    created_at: int
    model: str | None = None
    error: dict[str, Any] | None = None
    about: dict[str, Any] | None = None
    deep: bool = False
    tools: tuple[dict[str, Any], ...] = ()
    sources: tuple[dict[str, Any], ...] = ()
    actions: tuple[dict[str, Any], ...] = ()
    rating: Rating = ""


def key_owner(org: str) -> str:
    """The associated data the own key is sealed with: a sealed key moved to another org does not open."""
    return f"ask:{org}"


# --- settings and key ---------------------------------------------------------------------------


def get_org(conn: sqlite3.Connection, org: str) -> OrgAsk:
    row = conn.execute(
        "SELECT enabled, provider, sealed_key, fast_model, deep_model, key_invalid FROM ask_orgs WHERE org = ?", (org,)
    ).fetchone()
    if row is None:
        return OrgAsk(org)
    return OrgAsk(org, bool(row[0]), row[1], row[2], row[3], row[4], bool(row[5]))


def _ensure(conn: sqlite3.Connection, org: str, now_us: int) -> None:
    conn.execute("INSERT OR IGNORE INTO ask_orgs (org, updated_at) VALUES (?, ?)", (org, now_us))


def set_enabled(conn: sqlite3.Connection, org: str, enabled: bool, now_us: int) -> bool:
    """Turn Ask on or off; returns whether that changed anything."""
    _ensure(conn, org, now_us)
    cur = conn.execute(
        "UPDATE ask_orgs SET enabled = ?, updated_at = ? WHERE org = ? AND enabled != ?",
        (int(enabled), now_us, org, int(enabled)),
    )
    return cur.rowcount == 1


def set_key(
    conn: sqlite3.Connection, org: str, provider: str, sealed: bytes, fast_model: str, deep_model: str, now_us: int
) -> None:
    _ensure(conn, org, now_us)
    conn.execute(
        "UPDATE ask_orgs SET provider = ?, sealed_key = ?, fast_model = ?, deep_model = ?, key_invalid = 0,"
        " updated_at = ? WHERE org = ?",
        (provider, sealed, fast_model, deep_model, now_us, org),
    )


def remove_key(conn: sqlite3.Connection, org: str, now_us: int) -> bool:
    """Forget the own key; returns whether there was one."""
    cur = conn.execute(
        "UPDATE ask_orgs SET provider = NULL, sealed_key = NULL, fast_model = '', deep_model = '', key_invalid = 0,"
        " updated_at = ? WHERE org = ? AND sealed_key IS NOT NULL",
        (now_us, org),
    )
    return cur.rowcount == 1


def mark_key_invalid(conn: sqlite3.Connection, org: str, sealed: bytes, now_us: int) -> None:
    """Mark the key `sealed` unusable, unless it has been replaced meanwhile (a new key is unjudged)."""
    conn.execute(
        "UPDATE ask_orgs SET key_invalid = 1, updated_at = ? WHERE org = ? AND sealed_key = ?", (now_us, org, sealed)
    )


# --- built-in questions per month ---------------------------------------------------------------


def used(conn: sqlite3.Connection, org: str, month: str) -> int:
    row = conn.execute("SELECT questions FROM ask_usage WHERE org = ? AND month = ?", (org, month)).fetchone()
    return int(row[0]) if row else 0


def reserve(conn: sqlite3.Connection, org: str, month: str, allowance: int) -> int | None:
    """Count one built-in question if the allowance has room: the new count, else None."""
    conn.execute("INSERT OR IGNORE INTO ask_usage (org, month, questions) VALUES (?, ?, 0)", (org, month))
    cur = conn.execute(
        "UPDATE ask_usage SET questions = questions + 1 WHERE org = ? AND month = ? AND questions < ?",
        (org, month, allowance),
    )
    return used(conn, org, month) if cur.rowcount == 1 else None


# --- conversations and messages -----------------------------------------------------------------


def create_conversation(
    conn: sqlite3.Connection, conv_id: str, org: str, database: str | None, title: str, now_us: int
) -> Conversation:
    conn.execute(
        "INSERT INTO ask_conversations (id, org, database, title, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
        (conv_id, org, database, title, now_us, now_us),
    )
    return Conversation(conv_id, org, database, title, now_us, now_us)


_CONV = (
    "SELECT c.id, c.org, c.database, c.title, c.created_at, c.updated_at,"
    " (SELECT count(*) FROM ask_messages m WHERE m.conversation_id = c.id) FROM ask_conversations c"
)


def conversation(conn: sqlite3.Connection, org: str, conv_id: str) -> Conversation | None:
    """The conversation `conv_id` of `org`; None also when it belongs to another organization."""
    row = conn.execute(_CONV + " WHERE c.id = ? AND c.org = ?", (conv_id, org)).fetchone()
    return Conversation(*row) if row else None


def conversations(conn: sqlite3.Connection, org: str, limit: int = 100) -> list[Conversation]:
    """Newest first (by last message)."""
    rows = conn.execute(_CONV + " WHERE c.org = ? ORDER BY c.updated_at DESC, c.rowid DESC LIMIT ?", (org, limit))
    return [Conversation(*r) for r in rows]


def _json(value: object) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def add_message(conn: sqlite3.Connection, m: Message) -> None:
    conn.execute(
        "INSERT INTO ask_messages (id, conversation_id, role, text, status, model, error, about, deep, tools,"
        " sources, actions, rating, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            m.id,
            m.conversation_id,
            m.role,
            m.text,
            m.status,
            m.model,
            _json(m.error),
            _json(m.about),
            int(m.deep),
            _json(list(m.tools)),
            _json(list(m.sources)),
            _json(list(m.actions)),
            m.rating,
            m.created_at,
        ),
    )
    conn.execute("UPDATE ask_conversations SET updated_at = ? WHERE id = ?", (m.created_at, m.conversation_id))


def update_answer(conn: sqlite3.Connection, m: Message, now_us: int) -> None:
    """Store the answer `m` as it stands (text, steps, sources, actions, status)."""
    conn.execute(
        "UPDATE ask_messages SET text = ?, status = ?, model = ?, error = ?, tools = ?, sources = ?, actions = ?"
        " WHERE id = ?",
        (
            m.text,
            m.status,
            m.model,
            _json(m.error),
            _json(list(m.tools)),
            _json(list(m.sources)),
            _json(list(m.actions)),
            m.id,
        ),
    )
    conn.execute("UPDATE ask_conversations SET updated_at = ? WHERE id = ?", (now_us, m.conversation_id))


def _loads(raw: str | None) -> Any:
    return None if raw is None else orjson.loads(raw)


def messages(conn: sqlite3.Connection, conv_id: str) -> list[Message]:
    rows = conn.execute(
        "SELECT id, conversation_id, role, text, status, created_at, model, error, about, deep, tools, sources,"
        " actions, rating FROM ask_messages WHERE conversation_id = ? ORDER BY seq",
        (conv_id,),
    )
    return [
        Message(
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            r[6],
            _loads(r[7]),
            _loads(r[8]),
            bool(r[9]),
            tuple(_loads(r[10])),
            tuple(_loads(r[11])),
            tuple(_loads(r[12])),
            r[13],
        )
        for r in rows
    ]


def delete_conversation(conn: sqlite3.Connection, org: str, conv_id: str) -> bool:
    return conn.execute("DELETE FROM ask_conversations WHERE id = ? AND org = ?", (conv_id, org)).rowcount == 1


def delete_conversations(conn: sqlite3.Connection, org: str) -> int:
    """Delete every conversation of `org`; returns how many there were."""
    return conn.execute("DELETE FROM ask_conversations WHERE org = ?", (org,)).rowcount


def expire_conversations(conn: sqlite3.Connection, before_us: int) -> int:
    """Delete conversations whose last message is older than `before_us` (every organization's)."""
    return conn.execute("DELETE FROM ask_conversations WHERE updated_at < ?", (before_us,)).rowcount


def set_rating(conn: sqlite3.Connection, org: str, message_id: str, rating: Rating) -> bool | None:
    """Store feedback on an answer of `org`: True; False when the message is a question; None
    when `org` has no such message."""
    row = conn.execute(
        "SELECT m.role FROM ask_messages m JOIN ask_conversations c ON c.id = m.conversation_id"
        " WHERE m.id = ? AND c.org = ?",
        (message_id, org),
    ).fetchone()
    if row is None:
        return None
    if row[0] != "assistant":
        return False
    conn.execute("UPDATE ask_messages SET rating = ? WHERE id = ?", (rating, message_id))
    return True
