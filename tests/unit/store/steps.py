"""What the store's read tests share: how much work SQLite did, and a listing's page as ids."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import orjson

from forwarder.store import lines as L


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
