"""Counts per kind over a window: what the overview and the databases list show, at a cost that
follows the window, not the store."""

from __future__ import annotations

from pathlib import Path

import pytest

from forwarder.model import KINDS, LogLine
from forwarder.store import lines as L
from forwarder.store import open_sync
from tests.unit.store.steps import counting_steps

T0 = 1_800_000_000_000_000


@pytest.fixture(autouse=True)
def small_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    # A window is read by the time spans' id ranges (lines.py): spans of 64 ids instead of 4,096,
    # so that 20,000 lines are many spans and a window of 100 lines a few.
    monkeypatch.setattr(L, "SPAN_SHIFT", 6)


def test_counts_by_kind_read_the_window_only(tmp_path: Path) -> None:
    conn = open_sync(tmp_path / "s.db")
    conn.execute("INSERT INTO databases (code, id, enabled, full_text, updated_at) VALUES (1, 'main', 1, 0, 0)")
    ident = L.Identity(1, "main", "main", "h")
    with conn:
        L.append(conn, ident, [LogLine(T0 + i, "LOG", KINDS[i % 3], f"line {i}") for i in range(20_000)])
    conn.execute("ANALYZE")  # the daemon's PRAGMA optimize leaves statistics like these
    with counting_steps(conn) as steps:
        counts = L.counts_by_kind(conn, 1, T0 + 19_900)  # the newest 100 lines
    assert (counts[KINDS[0]], counts[KINDS[1]], counts[KINDS[2]], sum(counts.values())) == (33, 34, 33, 100)
    # Through the (db, kind) index it walked all 20,000 lines: ~1,000 of these (100 instructions each).
    assert steps.count < 100, steps.count


def test_groups_read_the_window_only(tmp_path: Path) -> None:
    conn = open_sync(tmp_path / "s.db")
    conn.execute("INSERT INTO databases (code, id, enabled, full_text, updated_at) VALUES (1, 'main', 1, 0, 0)")
    ident = L.Identity(1, "main", "main", "h")
    with conn:
        L.append(conn, ident, [LogLine(T0 + i, "LOG", "other", f"message {'abcdefg'[i % 7]}") for i in range(20_000)])
    conn.execute("ANALYZE")
    with counting_steps(conn) as steps:
        groups = L.groups(conn, 1, T0 + 19_930, 10)  # the newest 70 lines: 10 of each message
    assert sorted(g.count for g in groups) == [10] * 7
    assert max(g.last_us for g in groups) == T0 + 19_999 and min(g.first_us for g in groups) == T0 + 19_930
    # Through the (db, group_key) index it read all 20,000 lines to test their time.
    assert steps.count < 100, steps.count
