"""The memory a store's connections may take for their page caches (part of the daemon's budget)."""

from __future__ import annotations

from pathlib import Path

from forwarder.store import schema


def cache_kib(size: int, page_size: int) -> int:
    """PRAGMA cache_size in KiB: negative values are KiB, positive ones pages."""
    return -size if size < 0 else size * page_size // 1024


def test_the_writers_page_cache_is_at_most_4_mib_and_a_readers_at_most_2_mib(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    writer = schema.connect(path)
    schema.migrate(writer)
    reader = schema.connect(path, readonly=True)
    try:
        page = writer.execute("PRAGMA page_size").fetchone()[0]
        assert cache_kib(writer.execute("PRAGMA cache_size").fetchone()[0], page) <= 4 * 1024
        assert cache_kib(reader.execute("PRAGMA cache_size").fetchone()[0], page) <= 2 * 1024
    finally:
        reader.close()
        writer.close()
