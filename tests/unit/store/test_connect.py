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


def test_the_writer_does_not_zero_the_pages_a_delete_frees(tmp_path: Path) -> None:
    # Debian's SQLite zeroes freed pages (SQLITE_SECURE_DELETE), which wrote each page retention
    # and the full-text merges free to the WAL once more; FAST (2) clears deleted content only
    # within pages written anyway (sqlite.org/pragma.html#pragma_secure_delete).
    writer = schema.connect(str(tmp_path / "s.db"))
    try:
        assert writer.execute("PRAGMA secure_delete").fetchone()[0] == 2
    finally:
        writer.close()
