"""What the store's tests share: a store with one database, indexing it all, how much work SQLite
did, and a listing's page as ids."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson

from forwarder.store import lines as L
from forwarder.store import open_sync


def new_store(path: Path) -> sqlite3.Connection:
    """A migrated store with the database `main` (code 1) and the read queries' functions."""
    conn = open_sync(path)
    L.register_functions(conn)
    conn.execute("INSERT INTO databases (code, id, enabled, full_text, updated_at) VALUES (1, 'main', 1, 0, 0)")
    return conn


def index_all(conn: sqlite3.Connection) -> None:
    """Index every stored line for full-text search."""
    with conn:
        while L.index_fts(conn):
            pass


class Steps:
    """SQLite virtual-machine steps of 100 instructions counted on a connection."""

    def __init__(self) -> None:
        self.count = 0

    def _tick(self) -> int:
        self.count += 1
        return 0  # go on


@contextmanager
def counting_steps(conn: sqlite3.Connection) -> Iterator[Steps]:
    """Count the steps of the statements run inside (a measure of rows read that does not
    depend on the machine's speed)."""
    steps = Steps()
    conn.set_progress_handler(steps._tick, 100)
    try:
        yield steps
    finally:
        conn.set_progress_handler(None, 0)


def page_ids(conn: sqlite3.Connection, db_code: int, query: L.LineQuery) -> tuple[list[int], bool]:
    """The ids of a listing's page, in one read transaction as the store runs it, and has_more."""
    conn.execute("BEGIN")
    try:
        page = L.list_lines(conn, db_code, query)
    finally:
        conn.execute("COMMIT")
    return [int(orjson.loads(d)["id"]) for d in page.docs], page.has_more
