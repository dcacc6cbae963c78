"""SQLite schema and its versioned migrations.

`PRAGMA user_version` holds the number of migrations applied. A migration is appended, never
edited: the store of a user who upgrades runs the ones it has not seen, in order, in one
transaction each.

The hot table `lines` is narrow on purpose (DESIGN section 6): integer-coded database and kind,
integer time, a group key and the line's SPEC 2.1 document as one compressed orjson blob
(without `id`, which is the rowid and is spliced in when read). Full-text search lives in
`lines_fts_<part>` tables, one per 2**20 ids, filled in the background just behind the head, off
the append path (lines.py).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from pathlib import Path
from typing import Final

MIGRATIONS: Final[tuple[str, ...]] = (
    # 1: lines, full-text index, sources, settings, keys, audit
    """
    CREATE TABLE databases (
        code        INTEGER PRIMARY KEY,
        id          TEXT NOT NULL UNIQUE,
        enabled     INTEGER NOT NULL,
        full_text   INTEGER NOT NULL,
        updated_at  INTEGER NOT NULL
    );
    CREATE TABLE lines (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: later lines have larger ids
        db          INTEGER NOT NULL,
        time_us     INTEGER NOT NULL,
        kind        INTEGER NOT NULL,
        group_key   INTEGER NOT NULL,
        fingerprint TEXT,
        size        INTEGER NOT NULL,
        doc         BLOB NOT NULL
    );
    -- Every index carries the rowid, so (db) serves "newest first" and the others serve their
    -- filter in id order.
    CREATE INDEX lines_db ON lines (db);
    CREATE INDEX lines_db_kind ON lines (db, kind);
    CREATE INDEX lines_db_time ON lines (db, time_us);  -- dropped by 12
    CREATE INDEX lines_db_group ON lines (db, group_key, time_us);
    CREATE VIRTUAL TABLE lines_fts USING fts5 (text, tokenize = 'unicode61 remove_diacritics 2');
    CREATE TABLE kv (
        key   TEXT PRIMARY KEY,
        value
    );
    CREATE TABLE source_files (
        db_id       TEXT NOT NULL,
        dev         INTEGER NOT NULL,
        ino         INTEGER NOT NULL,
        head        BLOB NOT NULL,      -- first bytes of the file when first read: tells a reused inode
        path        TEXT NOT NULL,
        offset      INTEGER NOT NULL,   -- bytes fully turned into stored lines
        updated_at  INTEGER NOT NULL,
        PRIMARY KEY (db_id, dev, ino)
    );
    CREATE TABLE daily_usage (
        db     INTEGER NOT NULL,
        day    TEXT NOT NULL,           -- UTC date of ingestion
        lines  INTEGER NOT NULL,
        bytes  INTEGER NOT NULL,        -- bytes of server log read
        PRIMARY KEY (db, day)
    );
    CREATE TABLE api_keys (
        id           TEXT PRIMARY KEY,
        name         TEXT NOT NULL,
        role         TEXT NOT NULL,
        org          TEXT NOT NULL,
        hash         BLOB NOT NULL,
        created_at   INTEGER NOT NULL,
        last_used_at INTEGER,
        revoked_at   INTEGER
    );
    CREATE TABLE audit (
        id       INTEGER PRIMARY KEY,
        time_us  INTEGER NOT NULL,
        org      TEXT NOT NULL,
        actor    TEXT NOT NULL,
        action   TEXT NOT NULL,
        target   TEXT,
        details  TEXT
    );
    """,
    # 2: log destinations and their delivery state (DESIGN section 2: a consumer with a cursor)
    """
    CREATE TABLE destinations (
        id               TEXT PRIMARY KEY,
        type             TEXT NOT NULL,
        name             TEXT NOT NULL,
        enabled          INTEGER NOT NULL,
        config           TEXT NOT NULL,      -- JSON, never a secret
        filter           TEXT NOT NULL,      -- JSON {"kinds": [...], "database_ids": [...]}
        secret           BLOB,               -- AES-GCM sealed (secrets.py)
        created_at       REAL NOT NULL,
        updated_at       REAL NOT NULL,
        cursor           INTEGER NOT NULL,   -- last line id accounted for
        inflight_id      TEXT,               -- delivery_id of the batch being delivered
        inflight_lines   BLOB,               -- its line ids (JSON array)
        inflight_upto    INTEGER,            -- cursor once that batch is accounted for
        attempts         INTEGER NOT NULL DEFAULT 0,
        next_attempt_at  REAL,               -- unix seconds: backoff survives restarts
        last_error       TEXT,
        last_error_at    REAL,
        last_success_at  REAL,
        sent_lines       INTEGER NOT NULL DEFAULT 0,
        dropped_lines    INTEGER NOT NULL DEFAULT 0
    );
    """,
    # 3: destinations declared in the config file (`[[destinations]]`) are kept in step with it
    # on start and on SIGHUP; the API may test them but not change them.
    """
    ALTER TABLE destinations ADD COLUMN managed_by TEXT NOT NULL DEFAULT 'api';
    """,
    # 4: insights (forwarder/insights), written only by it: aggregates updated as lines are stored
    # (its cursor in kv `insights_cursor`), so nothing rescans lines on a timer, and numbers that
    # outlive the lines retention deletes.
    """
    CREATE TABLE insight_queries (
        db           INTEGER NOT NULL,
        fingerprint  TEXT NOT NULL,         -- 16 hex digits (pglog.normalize.fingerprint): the query id
        text         TEXT NOT NULL,         -- the normalized statement, as first seen
        first_us     INTEGER NOT NULL,
        last_us      INTEGER NOT NULL,
        example_id   INTEGER NOT NULL,      -- the newest line of it
        users        TEXT NOT NULL,         -- JSON array, sorted, at most 20
        applications TEXT NOT NULL,         -- likewise
        PRIMARY KEY (db, fingerprint)
    ) WITHOUT ROWID;
    CREATE TABLE insight_query_buckets (
        db           INTEGER NOT NULL,
        fingerprint  TEXT NOT NULL,
        start_us     INTEGER NOT NULL,      -- a 5-minute bucket
        calls        INTEGER NOT NULL,
        total_ms     REAL NOT NULL,
        min_ms       REAL,                  -- NULL without calls
        max_ms       REAL NOT NULL,
        errors       INTEGER NOT NULL,
        PRIMARY KEY (db, fingerprint, start_us)
    ) WITHOUT ROWID;
    CREATE TABLE insight_query_bins (       -- durations by log-scale bin (insights/histogram.py)
        db           INTEGER NOT NULL,
        fingerprint  TEXT NOT NULL,
        start_us     INTEGER NOT NULL,
        bin          INTEGER NOT NULL,
        count        INTEGER NOT NULL,
        PRIMARY KEY (db, fingerprint, start_us, bin)
    ) WITHOUT ROWID;
    CREATE TABLE insight_observations (
        db           INTEGER NOT NULL,
        rule         TEXT NOT NULL,
        subject      TEXT NOT NULL,
        start_us     INTEGER NOT NULL,      -- a minute
        count        INTEGER NOT NULL,
        total        REAL NOT NULL,
        max          REAL NOT NULL,
        PRIMARY KEY (db, rule, subject, start_us)
    );
    CREATE TABLE insight_subjects (
        db           INTEGER NOT NULL,
        rule         TEXT NOT NULL,
        subject      TEXT NOT NULL,
        line_ids     TEXT NOT NULL,         -- JSON array: the first lines and the newest ones
        samples      TEXT NOT NULL,         -- JSON array of the newest samples
        last_us      INTEGER NOT NULL,
        PRIMARY KEY (db, rule, subject)
    );
    CREATE TABLE insight_findings (
        id           TEXT PRIMARY KEY,      -- from (database, rule, subject): stable
        db           INTEGER NOT NULL,
        rule         TEXT NOT NULL,
        subject      TEXT NOT NULL,
        severity     TEXT NOT NULL,
        title        TEXT NOT NULL,
        summary      TEXT NOT NULL,
        evidence     TEXT NOT NULL,         -- JSON
        fixes        TEXT NOT NULL,         -- JSON
        first_us     INTEGER NOT NULL,
        last_us      INTEGER NOT NULL,
        status       TEXT NOT NULL,         -- open | resolved
        resolved_us  INTEGER
    );
    CREATE INDEX insight_findings_db ON insight_findings (db, status, last_us);
    CREATE TABLE alert_instances (
        id             TEXT PRIMARY KEY,    -- 16 hex digits, from (rule, database, started_us)
        rule           TEXT NOT NULL,       -- the [[alerts]] id
        database_id    TEXT NOT NULL,
        state          TEXT NOT NULL,       -- firing | resolved
        started_us     INTEGER NOT NULL,    -- the evaluation that first found the threshold reached
        resolved_us    INTEGER,
        value          INTEGER NOT NULL,    -- matching lines in the window at its latest evaluation
        threshold      INTEGER NOT NULL,    -- the rule's threshold, window and severity as then
        window_seconds INTEGER NOT NULL,
        severity       TEXT NOT NULL,
        updated_us     INTEGER NOT NULL
    );
    CREATE INDEX alert_instances_state ON alert_instances (state, started_us);
    -- One firing instance per rule and database.
    CREATE UNIQUE INDEX alert_instances_firing ON alert_instances (rule, database_id) WHERE state = 'firing';
    """,
    # 5: sessions of the web pages (forwarder/web): a signed-in browser holds a random token in a
    # cookie; only its hash is kept, with the key it stands for (a revoked key ends its sessions).
    """
    CREATE TABLE web_sessions (
        hash        BLOB PRIMARY KEY,
        key_id      TEXT NOT NULL,
        csrf        TEXT NOT NULL,      -- the token every form of this session carries
        created_at  INTEGER NOT NULL,
        expires_at  INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX web_sessions_key ON web_sessions (key_id);
    """,
    # 6: Ask (forwarder/ask), per organization: its settings and own key (sealed), the built-in
    # questions used per UTC month, and conversations with their messages.
    """
    CREATE TABLE ask_orgs (
        org          TEXT PRIMARY KEY,
        enabled      INTEGER NOT NULL DEFAULT 0,
        provider     TEXT,                -- openai, anthropic or openrouter; NULL: no own key
        sealed_key   BLOB,                -- secrets.SecretBox, owner "ask:<org>"
        fast_model   TEXT NOT NULL DEFAULT '',
        deep_model   TEXT NOT NULL DEFAULT '',
        key_invalid  INTEGER NOT NULL DEFAULT 0,  -- the provider refused the stored key
        updated_at   INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE ask_usage (
        org        TEXT NOT NULL,
        month      TEXT NOT NULL,         -- UTC, YYYY-MM
        questions  INTEGER NOT NULL,      -- built-in questions accepted
        PRIMARY KEY (org, month)
    ) WITHOUT ROWID;
    CREATE TABLE ask_conversations (
        id          TEXT PRIMARY KEY,
        org         TEXT NOT NULL,
        database    TEXT,                 -- the database id it is about, kept for its life
        title       TEXT NOT NULL,
        created_at  INTEGER NOT NULL,
        updated_at  INTEGER NOT NULL      -- its last message; retention counts from here
    );
    CREATE INDEX ask_conversations_org ON ask_conversations (org, updated_at);
    CREATE INDEX ask_conversations_updated ON ask_conversations (updated_at);
    CREATE TABLE ask_messages (
        seq              INTEGER PRIMARY KEY AUTOINCREMENT,
        id               TEXT NOT NULL UNIQUE,
        conversation_id  TEXT NOT NULL REFERENCES ask_conversations (id) ON DELETE CASCADE,
        role             TEXT NOT NULL,   -- user or assistant
        text             TEXT NOT NULL,
        status           TEXT NOT NULL,   -- complete, streaming, partial (client left), failed
        model            TEXT,
        error            TEXT,            -- JSON {code, message} of a failed answer
        about            TEXT,            -- JSON {kind, id, database} of a question
        deep             INTEGER NOT NULL DEFAULT 0,
        tools            TEXT NOT NULL DEFAULT '[]',    -- JSON [{id, name, label, status}]
        sources          TEXT NOT NULL DEFAULT '[]',    -- JSON [{label, href}]
        actions          TEXT NOT NULL DEFAULT '[]',    -- JSON [action]
        rating           TEXT NOT NULL DEFAULT '',      -- up, down or ''
        created_at       INTEGER NOT NULL
    );
    CREATE INDEX ask_messages_conversation ON ask_messages (conversation_id, seq);
    """,
    # 7: a smaller store (it was ~3x the raw log). The full-text index keeps no copy of the text
    # (content=''; deleting a line gives it the text again, recomputed from the document), no
    # per-row sizes (columnsize=0: nothing ranks by length) and no word positions (detail=none:
    # a search is words as prefixes, never a phrase). It is rebuilt from the lines in the
    # background: the watermark starts again at 0, and until it catches up the unindexed lines
    # are scanned. New documents are stored compressed (docs.py); older ones stay plain JSON.
    # The group index loses its time column (~9 bytes a line). `lines.size` is 0 from now on
    # (SQLite stores a 0 in no bytes): nothing needs a document's length before reading it.
    """
    DROP TABLE lines_fts;
    CREATE VIRTUAL TABLE lines_fts USING fts5 (
        text, content = '', columnsize = 0, detail = none, tokenize = 'unicode61 remove_diacritics 2'
    );
    DELETE FROM kv WHERE key = 'fts_indexed_upto';
    -- The listing by group reads it in id order; nothing ranges over a group's times.
    DROP INDEX lines_db_group;
    CREATE INDEX lines_db_group ON lines (db, group_key);
    """,
    # 8: the full-text index's segments are merged by the store's background work, a few pages
    # per transaction (Store.run), no longer inside the transaction that wrote them: FTS5's
    # automatic merging held the writer 100-300 ms at times while retention deleted a day
    # (sqlite.org/fts5.html#the_automerge_configuration_option). Merging when a level reaches
    # `crisismerge` segments stays as FTS5 does it, the bound if the background work falls behind.
    """
    INSERT INTO lines_fts (lines_fts, rank) VALUES ('automerge', 0);
    """,
    # 9: a database whose log is the systemd journal: the cursor of the last journal record whose
    # entry is stored, written in the same transaction as the lines (as source_files' offsets).
    """
    CREATE TABLE journal_cursors (
        db_id       TEXT PRIMARY KEY,
        cursor      TEXT NOT NULL,      -- journalctl's __CURSOR, given back as --cursor
        updated_at  INTEGER NOT NULL
    );
    """,
    # 10: the time each span of 4,096 line ids covers, per database (lines.py, "time spans"): a
    # `from`/`to` listing (newest first, in id order) read every line newer than `to`, 0.7-1.2 s
    # at 10 million lines. Built here from the lines stored (~6-10 s at 10 million, once).
    """
    CREATE TABLE line_spans (
        db      INTEGER NOT NULL,
        span    INTEGER NOT NULL,       -- id >> 12
        min_us  INTEGER NOT NULL,       -- the earliest and latest time_us of the database's lines
        max_us  INTEGER NOT NULL,       -- with ids in the span, ever (deleting lines keeps them)
        PRIMARY KEY (db, span)
    ) WITHOUT ROWID;
    INSERT INTO line_spans (db, span, min_us, max_us)
        SELECT db, id >> 12, min(time_us), max(time_us) FROM lines GROUP BY db, id >> 12;
    """,
    # 11: how often each query was seen (calls and errors), so that past `[insights] max_queries`
    # the least used are the ones forgotten (insights/queries.py, forget_least_used).
    """
    ALTER TABLE insight_queries ADD COLUMN uses INTEGER NOT NULL DEFAULT 0;
    UPDATE insight_queries SET uses = (
        SELECT coalesce(sum(b.calls + b.errors), 0) FROM insight_query_buckets b
        WHERE b.db = insight_queries.db AND b.fingerprint = insight_queries.fingerprint
    );
    """,
    # 12: the time spans (10) find a window's lines by id through the (db) index, as fast as the
    # (db, time) index did (groups, counts by kind, alert windows, retention: lines.py), so that
    # index goes: a B-tree fewer for every line stored and deleted, ~20 bytes a line.
    """
    DROP INDEX lines_db_time;
    """,
    # 13: the full-text index in parts of 2**20 ids, a table each (lines.py, "the full-text
    # index's parts"): one index over every line made each merge step cost more as the store grew
    # (100-135 ms at 10 million lines, appends waiting), and retention deleted a line's entries one
    # by one where it can now drop a part whole. The parts are built from the lines in the
    # background, as migration 7's index was: until the watermark catches up, the lines past it
    # are scanned.
    """
    DROP TABLE lines_fts;
    DELETE FROM kv WHERE key = 'fts_indexed_upto';
    CREATE TABLE fts_parts (
        part    INTEGER PRIMARY KEY     -- lines_fts_<part> indexes the lines with id >> 20 = part
    );
    """,
    # 14: the bytes of a log file right before its offset (sources/tail.py): a file truncated and
    # written again with the same first bytes (a prefix without a time starts each file with the
    # same lines) is told from the one that was read, after a restart too.
    """
    ALTER TABLE source_files ADD COLUMN tail BLOB NOT NULL DEFAULT x'';
    """,
)

SCHEMA_VERSION: Final = len(MIGRATIONS)


class SchemaTooNew(Exception):
    """The store was written by a newer forwarder; refusing to touch it."""


STORE_FILE_MODE = 0o600
_SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def create_private(path: Path) -> None:
    """Make sure the store file exists and only its owner may read it (it holds log text).

    SQLite would create it with 0644 minus the umask, and gives its -wal and -shm files the mode
    of the database file (os_unix.c, findCreateFileMode): creating the file 0600 first keeps all
    three private whatever the umask. Files of an older store that others may read lose those
    bits (the group's are the operator's choice: a service's group may be let in).
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, STORE_FILE_MODE))
    for file in (path, *(path.with_name(path.name + side) for side in _SQLITE_SIDE_FILES)):
        with contextlib.suppress(FileNotFoundError):
            mode = stat.S_IMODE(file.stat().st_mode)
            if mode & 0o007:
                file.chmod(mode & ~0o007)


WRITER_CACHE_KIB: Final = 4 * 1024  # the writer connection's SQLite page cache, KiB
WAL_LIMIT_BYTES: Final = 64 << 20  # journal_size_limit: the WAL file is cut back to this when it starts over


def connect(path: str, *, readonly: bool = False) -> sqlite3.Connection:
    """Open the store with the pragmas every connection needs."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.execute("PRAGMA journal_mode = WAL")
    # NORMAL in WAL mode is durable against a process crash (SIGKILL); only an OS crash or power
    # loss may lose the last transactions (sqlite.org/pragma.html#pragma_synchronous).
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA busy_timeout = 30000")
    if not readonly:
        # The writer's page cache is WRITER_CACHE_KIB: 8, 16 and 48 MiB appended 760,000 entries
        # (five times the 200k-line benchmark log, the store growing) in the same time and CPU
        # within the noise, and the 48 MiB cost ~32 MiB of resident memory more. 4 MiB against 16
        # (2026-11-24): the 1M-line backlog at the same rate (55,106 against 52,533-56,085 lines/s)
        # with a peak RSS 13 MB lower (134 against 147 MB), a 10-million-line store built in 338
        # against 331 s, retention's longest append gap 188-227 against 221-268 ms. 2 MiB saved
        # 1 MB more. Pages it misses are read from the OS's page cache. Readers keep SQLite's
        # default (2 MiB).
        conn.execute(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}")
        # The store checkpoints the WAL off the write path (Store.run; WRITER_CHECKPOINT_PAGES);
        # a connection of its own keeps SQLite's default. When a checkpoint has copied the whole
        # WAL and it starts over, its file is cut back to 64 MiB: a backlog's burst does not stay
        # on disk as hundreds of MiB of spent WAL (sqlite.org/pragma.html#pragma_journal_size_limit).
        conn.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")
        # A page freed by a delete is not overwritten with zeros (SQLite's own default; Debian's
        # build zeroes them: SQLITE_SECURE_DELETE): with zeroing, retention deleting a day and the
        # full-text merges after it wrote every freed page to the WAL again (a merge step ~3,500
        # pages, ~1,600 without), for the checkpoints to copy while appends wait. FAST still
        # clears deleted content within the pages a delete writes anyway
        # (sqlite.org/pragma.html#pragma_secure_delete); a freed page keeps its old bytes until
        # it is reused, which happens as new lines arrive. docs/operations.md says so.
        conn.execute("PRAGMA secure_delete = FAST")
    if readonly:
        conn.execute("PRAGMA query_only = ON")
    return conn


def migrate(conn: sqlite3.Connection) -> int:
    """Apply the migrations this store has not seen; returns the version afterwards."""
    version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(f"store schema version {version} is newer than this forwarder's {SCHEMA_VERSION}")
    for number in range(version, SCHEMA_VERSION):
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _split(MIGRATIONS[number]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return SCHEMA_VERSION


def _split(script: str) -> list[str]:
    """Statements of a migration script (executescript would commit the open transaction)."""
    out: list[str] = []
    current = ""
    for raw in script.splitlines():
        line = raw.split("--", 1)[0] if "--" in raw else raw
        current += line + "\n"
        if sqlite3.complete_statement(current):
            if current.strip():
                out.append(current.strip())
            current = ""
    if current.strip():
        out.append(current.strip())
    return out
