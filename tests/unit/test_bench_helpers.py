"""The pure parts of the benchmarks: which rows the performance table prints, and which words api.py searches."""

from __future__ import annotations

import importlib.util
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


deliver = _load("deliver")
api = _load("api")


def _result(peers: list[dict[str, Any]]) -> dict[str, Any]:
    steady = {"rate_lines_per_s": 4990, "seconds": 30.0, "received": 100, "entries": 100}
    steady |= {"p50_ms": 120.0, "p90_ms": 180.0, "p99_ms": 240.0, "max_ms": 900.0}
    backlog = {"insights": False, "wall_s": 20.0, "received": 762_932, "entries": 762_932}
    backlog |= {"lines_per_s": 50_000, "entries_per_s": 38_000, "cpu_s": 18.5, "cpu_s_settled": 21.0}
    backlog |= {"peak_rss_mb": 90.0, "store_bytes": 150 * 2**20, "store_wal_bytes": 4 * 2**20}
    backlog |= {"raw_bytes": 170 * 2**20, "store_ratio": 0.882, "store_main_ratio": 0.859}
    backlog |= {"store_settle_s": 3.5, "steady": steady}
    return {"backlog": backlog, "peers": peers}


def _rows(res: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {name: (value, target) for name, value, target in deliver.rows_of(res)}


def test_the_table_has_every_row_of_the_performance_targets_with_its_target() -> None:
    peers = [
        {"workers": 1, "ok": True, "lines_per_s": 40_000, "cpu_s": 7.5, "peak_rss_mb": 30.0},
        {"workers": 4, "ok": True, "lines_per_s": 200_000, "cpu_s": 8.0, "peak_rss_mb": 25.0},
    ]
    rows = _rows(_result(peers))

    assert rows["backlog lines/s ratio to syslog-ng, 1 worker(s)"] == ("1.25", ">= 1.0")
    assert rows["backlog lines/s ratio to syslog-ng, 4 worker(s)"] == ("0.25", "reported")
    assert rows["daemon CPU s for the backlog (to the last entry received)"] == (
        "18.5 (syslog-ng 1 worker: 7.5)",
        "<= 20",
    )
    value, target = rows["peak RSS MB, daemon + parse workers (sum of VmHWM), backlog"]
    assert (value, target) == ("90.0 (syslog-ng 1 worker(s): 30.0, 4 worker(s): 25.0)", "<= 96")
    assert rows["store size / raw log size: main file (main + -wal)"] == ("0.86 (0.88)", "<= 1.0")
    assert rows["steady write -> webhook latency p99 / max ms"] == ("240.0 / 900.0", "p99 <= 250")


def test_without_syslog_ng_the_table_says_why_and_prints_no_ratio() -> None:
    rows = _rows(_result([{"skipped": "cannot unpack syslog-ng"}]))

    assert rows["syslog-ng file -> http"] == ("skipped: cannot unpack syslog-ng", "")
    assert not any("ratio to syslog-ng" in name for name in rows)
    assert rows["daemon CPU s for the backlog (to the last entry received)"] == ("18.5", "<= 20")


def test_store_size_counts_the_main_file_and_its_wal_once_the_index_caught_up(tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    conn = sqlite3.connect(store)
    conn.execute("CREATE TABLE lines (id INTEGER PRIMARY KEY)")
    conn.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value)")
    conn.executemany("INSERT INTO lines (id) VALUES (?)", [(1,), (2,)])
    conn.execute("INSERT INTO kv VALUES (?, 2)", (deliver.FTS_WATERMARK_KEY,))
    conn.commit()
    conn.close()
    (tmp_path / "store.db-wal").write_bytes(b"w" * 1000)
    (tmp_path / "store.db-shm").write_bytes(b"s" * 5000)

    settled = deliver.store_settled(store, timeout=10, quiet=0.0)

    assert settled["store_bytes"] == store.stat().st_size + 1000
    assert settled["store_wal_bytes"] == 1000
    assert settled["store_settled"] is True


def _entry(message: str) -> SimpleNamespace:
    return SimpleNamespace(message=message, detail=None, hint=None, context=None, statement=None)


def test_the_rare_word_is_in_the_queried_database_and_starts_no_other_word() -> None:
    # Entries in transactions of api.BATCH go to the databases in turn: db1 gets the second batch.
    db0 = [_entry("checkpoint starting unique") for _ in range(api.BATCH)]
    db1 = [_entry("checkpoint starting") for _ in range(api.BATCH - 3)]
    db1 += [_entry("relation orders"), _entry("relation ordersarchive"), _entry("zebra123")]

    words = api.pick_words([*db0, *db1], databases=2)

    assert words["rare_word"] == "ordersarchive"  # "orders" starts another word; "zebra123" sorts later
    assert words["common_word"] == "relation"  # the nearest to 2% of db1's entries; "unique" is db0's
    assert words["absent_word"] == api.ABSENT_WORD


def test_every_benchmark_prints_its_help() -> None:
    """`--help` is how a user finds a benchmark's options; argparse fails on a help text with a bare `%`."""
    scripts = sorted(p for p in BENCH.glob("*.py") if "argparse" in p.read_text())
    assert scripts
    for script in scripts:
        done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{script.name}: {done.stderr[-300:]}"
        assert "usage:" in done.stdout
